"""Broker placement over Ray nodes (pure)."""
from __future__ import annotations

import pytest

from actors.placement import NodeInfo, place_brokers
from coordination.errors import KrayError

HEAD = NodeInfo("h", "10.0.0.1", True)
WORKERS = [NodeInfo("w3", "10.0.0.13", False), NodeInfo("w1", "10.0.0.11", False), NodeInfo("w2", "10.0.0.12", False)]


def test_spread_puts_one_broker_on_each_worker_in_address_order():
    assert place_brokers([3, 1, 2], [HEAD, *WORKERS]) == {1: "w1", 2: "w2", 3: "w3"}


def test_spread_uses_the_head_when_the_workers_are_too_few():
    assert place_brokers([1, 2, 3], [HEAD, *WORKERS[1:]]) == {1: "w1", 2: "w2", 3: "h"}


@pytest.mark.parametrize("nodes", [[HEAD], [HEAD, WORKERS[0]]])
def test_spread_leaves_ray_to_choose_with_fewer_nodes_than_brokers(nodes):
    assert place_brokers([1, 2, 3], nodes) == {1: None, 2: None, 3: None}


def test_any_and_an_explicit_map():
    assert place_brokers([1, 2], [HEAD, *WORKERS], "any") == {1: None, 2: None}
    assert place_brokers([1, 2, 3], [HEAD, *WORKERS], {1: "10.0.0.13", 2: "h"}) == {1: "w3", 2: "h", 3: None}


def test_an_explicit_map_naming_a_dead_node_is_an_error():
    with pytest.raises(KrayError, match="not alive"):
        place_brokers([1], [HEAD], {1: "10.9.9.9"})
