"""Jepsen's network faults as link settings: who can still reach whom under each shape."""
from __future__ import annotations

import itertools

import pytest

from actors.links.faults import HEALTHY, LinkFault
from actors.links.shapes import CUT, DROP, LinkSetting, Role, Shape, every_link, healed, plan

BROKERS = [1, 2, 3, 4, 5]


def cut_pairs(settings: list[LinkSetting]) -> set[tuple[int, int]]:
    """(a, b): broker a's link to broker b is cut."""
    return {(s.broker_id, int(s.link.split("-")[1])) for s in settings
            if s.role is Role.BROKER and s.link.startswith("broker-") and s.fault.cut}


def reaches(settings: list[LinkSetting], a: int, b: int) -> bool:
    pairs = cut_pairs(settings)
    return (a, b) not in pairs and (b, a) not in pairs


def controller_cut_from(settings: list[LinkSetting]) -> set[tuple[int, int]]:
    """(c, n): a controller on broker c no longer reaches broker n (n's RequestSender's link broker-c)."""
    return {(int(s.link.split("-")[1]), s.broker_id) for s in settings if s.role is Role.SENDER and s.fault.cut}


def zookeeper_cut(settings: list[LinkSetting]) -> set[tuple[Role, int]]:
    return {(s.role, s.broker_id) for s in settings if s.link == "zookeeper" and s.fault.cut}


def test_cut_replication_separates_the_target_from_every_other_broker_on_both_ends_and_keeps_zookeeper():
    settings = plan(Shape.CUT_REPLICATION, BROKERS, target=3)
    assert cut_pairs(settings) == {(3, b) for b in (1, 2, 4, 5)} | {(b, 3) for b in (1, 2, 4, 5)}
    assert all(reaches(settings, a, b) for a, b in itertools.combinations([1, 2, 4, 5], 2))
    assert zookeeper_cut(settings) == set()
    # a controller on the target reaches no other broker, and one elsewhere does not reach the target
    assert controller_cut_from(settings) == {(3, b) for b in (1, 2, 4, 5)} | {(b, 3) for b in (1, 2, 4, 5)}


def test_cut_zookeeper_cuts_one_session_only():
    assert plan(Shape.CUT_ZOOKEEPER, BROKERS, target=2) == [LinkSetting(Role.BROKER, 2, "zookeeper", CUT)]
    assert plan(Shape.CUT_ZOOKEEPER, BROKERS, target=2, candidate=True) == [
        LinkSetting(Role.CANDIDATE, 2, "zookeeper", CUT)]


def test_drop_zookeeper_drops_one_session_connection_only():
    assert plan(Shape.DROP_ZOOKEEPER, BROKERS, target=2) == [LinkSetting(Role.BROKER, 2, "zookeeper", DROP)]
    assert plan(Shape.DROP_ZOOKEEPER, BROKERS, target=2, candidate=True) == [
        LinkSetting(Role.CANDIDATE, 2, "zookeeper", DROP)]


def test_isolate_broker_cuts_it_from_brokers_and_from_zookeeper_with_its_candidate():
    settings = plan(Shape.ISOLATE_BROKER, BROKERS, target=4)
    assert all(not reaches(settings, 4, b) for b in (1, 2, 3, 5))
    assert zookeeper_cut(settings) == {(Role.BROKER, 4), (Role.CANDIDATE, 4)}


@pytest.mark.parametrize("brokers", [[1, 2], [1, 2, 3], [1, 2, 3, 4], BROKERS, [3, 9, 7, 1, 5, 11]])
def test_split_brokers_makes_two_halves_that_reach_within_and_not_across(brokers):
    settings = plan(Shape.SPLIT_BROKERS, brokers)
    low, high = sorted(brokers)[:len(brokers) // 2], sorted(brokers)[len(brokers) // 2:]
    assert all(reaches(settings, a, b) for side in (low, high) for a, b in itertools.combinations(side, 2))
    assert all(not reaches(settings, a, b) for a in low for b in high)
    assert zookeeper_cut(settings) == set()
    assert controller_cut_from(settings) == {(a, b) for a in low for b in high} | {(b, a) for a in low for b in high}


@pytest.mark.parametrize("brokers", [[1, 2, 3], [1, 2, 3, 4], BROKERS])
def test_a_bridge_reaches_both_halves_that_do_not_reach_each_other(brokers):
    settings = plan(Shape.BRIDGE_BROKERS, brokers)
    middle = sorted(brokers)[len(brokers) // 2]
    low = [b for b in brokers if b < middle]
    high = [b for b in brokers if b > middle]
    assert low and high
    assert all(reaches(settings, middle, b) for b in brokers if b != middle)
    assert all(not reaches(settings, a, b) for a in low for b in high)


def test_slow_replication_slows_the_targets_links_without_cutting_them():
    slow = LinkFault(delay_ms=200, jitter_ms=50)
    settings = plan(Shape.SLOW_REPLICATION, [1, 2, 3], target=1, slow=slow)
    assert {(s.broker_id, s.link) for s in settings if s.role is Role.BROKER} == {
        (1, "broker-2"), (1, "broker-3"), (2, "broker-1"), (3, "broker-1")}
    assert {(s.broker_id, s.link) for s in settings if s.role is Role.SENDER} == {
        (2, "broker-1"), (3, "broker-1"), (1, "broker-2"), (1, "broker-3")}
    assert all(s.fault == slow for s in settings)


def test_cut_controller_broker_cuts_only_the_controllers_requests_to_the_target():
    settings = plan(Shape.CUT_CONTROLLER_BROKER, BROKERS, target=4, controller=2)
    assert settings == [LinkSetting(Role.SENDER, 4, "broker-2", CUT)]
    assert cut_pairs(settings) == set() and zookeeper_cut(settings) == set()


def test_cut_clients_cuts_only_the_targets_clients_link():
    settings = plan(Shape.CUT_CLIENTS, BROKERS, target=4)
    assert settings == [LinkSetting(Role.BROKER, 4, "clients", CUT)]
    assert cut_pairs(settings) == set() and zookeeper_cut(settings) == set()  # replication and sessions kept


def test_slow_clients_slows_only_the_targets_clients_link():
    slow = LinkFault(delay_ms=300, rate_bytes_per_s=10_000)
    assert plan(Shape.SLOW_CLIENTS, BROKERS, target=2, slow=slow) == [LinkSetting(Role.BROKER, 2, "clients", slow)]


@pytest.mark.parametrize("shape", list(Shape))
def test_every_link_of_every_shape_is_among_the_links_kray_chaos_heal_heals(shape):
    heal = {(s.role, s.broker_id, s.link) for s in every_link(BROKERS)}
    assert all(s.fault == HEALTHY for s in every_link(BROKERS))
    settings = plan(shape, BROKERS, target=3, slow=LinkFault(delay_ms=10), controller=1)
    assert {(s.role, s.broker_id, s.link) for s in settings} <= heal


def test_healing_undoes_every_setting_of_a_shape():
    settings = plan(Shape.ISOLATE_BROKER, BROKERS, target=1)
    undo = healed(settings)
    assert [(s.role, s.broker_id, s.link) for s in undo] == [(s.role, s.broker_id, s.link) for s in settings]
    assert all(s.fault == HEALTHY for s in undo)


@pytest.mark.parametrize("shape, brokers, kwargs, message", [
    (Shape.CUT_REPLICATION, BROKERS, {"target": 9}, "needs one of the brokers"),
    (Shape.CUT_ZOOKEEPER, BROKERS, {}, "needs one of the brokers"),
    (Shape.SPLIT_BROKERS, [1], {}, "at least 2"),
    (Shape.BRIDGE_BROKERS, [1, 2], {}, "at least 3"),
    (Shape.SLOW_REPLICATION, BROKERS, {"target": 1}, "slows the link"),
    (Shape.SLOW_REPLICATION, BROKERS, {"target": 1, "slow": CUT}, "slows the link"),
    (Shape.CUT_CONTROLLER_BROKER, BROKERS, {"target": 2, "controller": 2}, "controller on another broker"),
    (Shape.CUT_CONTROLLER_BROKER, BROKERS, {"target": 2}, "controller on another broker"),
    (Shape.CUT_CLIENTS, BROKERS, {}, "needs one of the brokers"),
    (Shape.SLOW_CLIENTS, BROKERS, {"target": 1}, "slows the link"),
    (Shape.SLOW_CLIENTS, BROKERS, {"target": 1, "slow": CUT}, "slows the link"),
])
def test_a_shape_that_cannot_be_made_is_refused(shape, brokers, kwargs, message):
    with pytest.raises(ValueError, match=message):
        plan(shape, brokers, **kwargs)
