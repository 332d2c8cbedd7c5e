"""Actor names, as namers and finders both read them."""
from __future__ import annotations

import pytest

from actors.names import (broker_actor_name, broker_id_of, controller_actor_name, is_request_sender_to,
                          replacement_sender_name, request_sender_name)


@pytest.mark.parametrize("broker_id", [0, 1, 7, 1234])
def test_a_broker_actors_name_gives_its_id_back(broker_id):
    assert broker_id_of(broker_actor_name(broker_id)) == broker_id


@pytest.mark.parametrize("name", [controller_actor_name(1), request_sender_name(1), "broker-", "broker-x",
                                  "broker-1-2", "brokers-1", "recorder-broker-1", "broker--1"])
def test_other_names_are_not_brokers(name):
    assert broker_id_of(name) is None


def test_request_senders_to_a_broker_are_its_own_and_replacements():
    assert is_request_sender_to(request_sender_name(2), 2)
    assert is_request_sender_to(replacement_sender_name(2, 1), 2)
    assert not is_request_sender_to(request_sender_name(20), 2)
    assert not is_request_sender_to(replacement_sender_name(20, 1), 2)
