"""actors.broker.events through the ReplicaManager: what a broker records for the run directory (its
firsts per leader epoch or leadership state, its produce errors at most once a second), recorded into an
in-memory double of the RecordSink's narrow interface (enabled, emit)."""
from __future__ import annotations

import asyncio

import pytest

from actors.broker.events import BrokerEvents
from actors.broker.replica_manager import ReplicaManager
from actors.data_protocol import FetchPartition
from actors.records import BROKER_EVENTS, BrokerEvent
from coordination.errors import Errors
from tests.unit.replica_manager_helpers import (BROKER, BROKER_EPOCH, CONFIG_FOR, T0, T1, batch, fetch, follower_epoch,
                                             lai, ps)


class Sink:
    enabled = True

    def __init__(self):
        self.lines: list[BrokerEvent] = []

    def emit(self, name: str, record: BrokerEvent) -> None:
        assert name == BROKER_EVENTS
        self.lines.append(record)

    def kinds(self, kind: str) -> list[BrokerEvent]:
        return [e for e in self.lines if e.kind == kind]


@pytest.fixture
def sink():
    return Sink()


@pytest.fixture
def rm(tmp_path, sink):
    return ReplicaManager(BROKER, tmp_path, CONFIG_FOR, alive_broker_epoch=follower_epoch,
                          events=BrokerEvents(BROKER, sink))


def run(coroutine):
    return asyncio.run(coroutine)


def test_a_leader_and_isr_is_recorded_with_the_partitions_led_and_followed_and_their_epochs(rm, sink):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=3), ps(T1, leader=2, leader_epoch=5),
                                     controller_epoch=4), BROKER_EPOCH)
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=3), controller_epoch=4), BROKER_EPOCH)  # stale
    [event] = sink.kinds("leader_and_isr")
    assert (event.broker_id, event.controller_epoch, event.leaders, event.isrs, event.followers) == \
        (1, 4, {"t-0": 3}, {"t-0": [1, 2, 3]}, {"t-1": 5})


def test_the_first_client_append_and_the_first_follower_fetch_of_each_epoch(rm, sink):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=3, isr=(1, 2))), BROKER_EPOCH)
    for _ in range(3):
        run(rm.append_records(1, 1000, [(T0, batch(1))]))
        run(rm.fetch(fetch(replica_id=2, partitions=[FetchPartition("t", 0, 0, 3)])))
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=4, isr=(1, 2))), BROKER_EPOCH)
    run(rm.append_records(1, 1000, [(T0, batch(1))]))
    run(rm.fetch(fetch(replica_id=2, partitions=[FetchPartition("t", 0, 3, 4)])))
    run(rm.fetch(fetch(replica_id=-1, partitions=[FetchPartition("t", 0, 0, 4)])))  # a consumer: not a follower
    assert [(e.partition, e.leader_epoch) for e in sink.kinds("client_append")] == [("t-0", 3), ("t-0", 4)]
    assert [(e.partition, e.leader_epoch, e.replica) for e in sink.kinds("follower_fetch")] == \
        [("t-0", 3, 2), ("t-0", 4, 2)]


def test_the_first_high_watermark_move_after_each_leadership_or_isr_change_and_first_append(rm, sink):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=3, isr=(1, 2))), BROKER_EPOCH)
    run(rm.append_records(1, 1000, [(T0, batch(2))]))  # the epoch's first append
    assert sink.kinds("hw_moved") == []  # the follower has not fetched it
    run(rm.fetch(fetch(replica_id=2, partitions=[FetchPartition("t", 0, 2, 3)])))
    run(rm.append_records(1, 1000, [(T0, batch(1))]))
    run(rm.fetch(fetch(replica_id=2, partitions=[FetchPartition("t", 0, 3, 3)])))  # moves again: not recorded
    run(rm.append_records(1, 1000, [(T0, batch(1))]))  # LEO 4; the follower has not fetched it
    rm.partition(T0).update_isr((1,), 1, 3)  # the leader's shrink: a new state, and the HW moves with it
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=4, isr=(1,))), BROKER_EPOCH)
    run(rm.append_records(1, 1000, [(T0, batch(1))]))  # a new epoch: moves at once past its first append
    assert [(e.leader_epoch, e.detail) for e in sink.kinds("hw_moved")] == [(3, "2"), (3, "4"), (4, "5")]


def test_produce_errors_at_most_once_a_second_per_partition_and_error(rm, sink):
    rm.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=3)), BROKER_EPOCH)  # a follower here
    for _ in range(5):
        run(rm.append_records(-1, 1000, [(T0, batch(1)), (T1, batch(1))]))
    assert sorted((e.partition, e.detail) for e in sink.kinds("produce_error")) == [
        ("t-0", Errors.NOT_LEADER_OR_FOLLOWER.name), ("t-1", Errors.NOT_LEADER_OR_FOLLOWER.name)]


def test_a_followers_truncation_is_recorded_from_and_to(rm, sink):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=3)), BROKER_EPOCH)
    for _ in range(5):
        run(rm.append_records(0, 1000, [(T0, batch(1))]))
    rm.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=4)), BROKER_EPOCH)
    assert rm.partition(T0).truncate_to(2, 4) and rm.partition(T0).truncate_to(2, 4)  # the second cuts nothing
    [event] = sink.kinds("truncation")
    assert (event.partition, event.leader_epoch, event.detail) == ("t-0", 4, "from 5 to 2")


def test_nothing_is_recorded_without_a_recorder(tmp_path):
    class Off(Sink):
        enabled = False
    off = Off()
    rm = ReplicaManager(BROKER, tmp_path, CONFIG_FOR, events=BrokerEvents(BROKER, off))
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=3, isr=(1,))), BROKER_EPOCH)
    run(rm.append_records(1, 1000, [(T0, batch(1))]))
    assert off.lines == [] and not BrokerEvents(BROKER).enabled


def test_a_coordinator_named_is_recorded_once_per_leader_epoch_of_its_offsets_partition(sink):
    """A group's coordinator moves 3 -> 2 -> 3 -> 2: each move is recorded, though this broker named 2 before."""
    events = BrokerEvents(BROKER, sink)
    for coordinator, epoch in ((3, 0), (3, 0), (2, 1), (2, 1), (3, 2), (2, 3), (2, 3)):
        events.coordinator_found("g", coordinator, epoch)
    events.coordinator_found("other", 2, 3)
    assert [(e.group, e.replica, e.leader_epoch) for e in sink.kinds("coordinator_found")] == \
        [("g", 3, 0), ("g", 2, 1), ("g", 3, 2), ("g", 2, 3), ("other", 2, 3)]
