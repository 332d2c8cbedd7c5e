"""The controller flows' pure decisions (decisions.py), case by case."""
from __future__ import annotations

import itertools

import pytest

from actors.controller.context import ControllerContext, LeaderAndIsr, LeaderIsrAndControllerEpoch, ReplicaAssignment
from actors.controller.decisions import (
    broker_changes,
    controlled_shutdown_plan,
    log_dir_event_brokers,
    partition_modification,
    partitions_still_led,
    reassignment_complete,
    reassignment_error,
    replicas_on_offline_dirs,
    topic_changes,
)
from coordination import zkdata
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from tests.live_brokers import live_broker

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def context(assignment: dict[TopicPartition, tuple[int, ...]], leaders: dict[TopicPartition, int] | None = None,
            brokers=(1, 2, 3)) -> ControllerContext:
    ctx = ControllerContext(epoch=1)
    ctx.add_live_brokers({b: (live_broker(b, "h", b), 10 + b) for b in brokers})
    for tp, replicas in assignment.items():
        ctx.all_topics.add(tp.topic)
        ctx.update_partition_replicas(tp, replicas)
        leader = (leaders or {}).get(tp, replicas[0])
        ctx.partition_leadership[tp] = LeaderIsrAndControllerEpoch(LeaderAndIsr(leader, 0, replicas, 0), 1)
    return ctx


@pytest.mark.parametrize("known, registered, new, dead, bounced", [
    ({}, {}, set(), set(), set()),
    ({1: 5}, {1: 5}, set(), set(), set()),
    ({1: 5}, {1: 5, 2: 9}, {2}, set(), set()),
    ({1: 5, 2: 9}, {1: 5}, set(), {2}, set()),
    ({1: 5}, {1: 8}, set(), set(), {1}),
    ({1: 8}, {1: 5}, set(), set(), set()),  # an older registration than known is no bounce
    ({1: 5, 2: 6, 3: 7}, {1: 9, 3: 7, 4: 1}, {4}, {2}, {1}),
])
def test_broker_changes_sort_registrations_into_new_dead_and_bounced(known, registered, new, dead, bounced):
    changes = broker_changes(known, registered)
    assert (changes.new, changes.dead, changes.bounced) == (new, dead, bounced)
    assert changes.failed == dead | bounced and changes.started == new | bounced
    assert bool(changes) == bool(new or dead or bounced)


def test_every_broker_is_in_at_most_one_set_and_the_live_set_after_is_the_registered_one():
    for known_ids, registered_ids in itertools.product(itertools.combinations(range(4), 2), repeat=2):
        known = {b: 10 for b in known_ids}
        registered = {b: 10 + (b % 2) for b in registered_ids}
        c = broker_changes(known, registered)
        assert not (c.new & c.dead or c.new & c.bounced or c.dead & c.bounced)
        assert (set(known) - c.failed) | c.started == set(registered)


def test_topic_changes_leave_topics_being_deleted_to_the_deletion():
    ctx = context({T0: (1,), TopicPartition("gone", 0): (1,), TopicPartition("deleting", 0): (1,)})
    ctx.topics_to_be_deleted.add("deleting")
    changes = topic_changes(ctx, {"t", "new"})
    assert (changes.new, changes.removed) == ({"new"}, {"gone"})


@pytest.mark.parametrize("in_zk, to_add, restore", [
    ({0: [1, 2]}, {}, False),
    ({0: [1, 2], 1: [2, 3]}, {T1: (2, 3)}, False),
    ({0: [2, 1]}, {}, True),  # an existing partition's replicas changed
    ({}, {}, True),  # a partition removed
    ({0: [3], 1: [1]}, {T1: (1,)}, True),
])
def test_partition_modification(in_zk, to_add, restore):
    change = partition_modification(context({T0: (1, 2)}), "t", in_zk)
    assert (change.to_add, change.restore, change.refused) == (to_add, restore, ())


def test_partitions_added_to_a_topic_being_deleted_are_refused_and_the_znode_restored():
    ctx = context({T0: (1, 2)})
    ctx.topics_to_be_deleted.add("t")
    change = partition_modification(ctx, "t", {0: [1, 2], 1: [2], 2: [3]})
    assert (change.to_add, change.restore, change.refused) == ({}, True, (1, 2))
    assert partition_modification(ctx, "t", {0: [1, 2]}).restore is False  # nothing added: ignored


@pytest.mark.parametrize("assignment, isr, complete", [
    (ReplicaAssignment((1, 2)), None, True),  # not being reassigned
    (ReplicaAssignment.for_reassignment((1, 2), (2, 3)), (1, 2), False),
    (ReplicaAssignment.for_reassignment((1, 2), (2, 3)), (1, 2, 3), True),
    (ReplicaAssignment.for_reassignment((1, 2), (2, 3)), (2, 3), True),
    (ReplicaAssignment.for_reassignment((1, 2), (2, 3)), None, False),  # no state znode
    (ReplicaAssignment.for_reassignment((1, 2, 3), (1, 2)), (1, 2), True),  # a shrink: done at once
])
def test_reassignment_is_complete_when_every_target_replica_is_in_the_isr(assignment, isr, complete):
    assert reassignment_complete(assignment, isr) is complete


def test_reassignment_errors():
    ctx = context({T0: (1, 2)})
    assert reassignment_error(ctx, T0, (2, 3)) is None
    assert reassignment_error(ctx, T1, (1,)).startswith("UNKNOWN_TOPIC_OR_PARTITION")
    assert reassignment_error(ctx, T0, ()).startswith("INVALID_REPLICA_ASSIGNMENT")
    assert reassignment_error(ctx, T0, (2, 2)).startswith("INVALID_REPLICA_ASSIGNMENT")
    ctx.topics_to_be_deleted.add("t")
    assert "being deleted" in reassignment_error(ctx, T0, (2, 3))


def test_controlled_shutdown_acts_on_replicated_partitions_of_topics_kept():
    single, deleting = TopicPartition("single", 0), TopicPartition("deleting", 0)
    ctx = context({T0: (1, 2), T1: (2, 1), T2: (2, 3), single: (1,), deleting: (1, 2)})
    ctx.topics_to_be_deleted.add("deleting")
    plan = controlled_shutdown_plan(ctx, 1)
    assert (plan.led, plan.followed) == ([T0], [T1])
    assert partitions_still_led(ctx, 1) == [T0]
    ctx.partition_leadership[T0] = LeaderIsrAndControllerEpoch(LeaderAndIsr(2, 1, (2,), 1), 1)
    assert partitions_still_led(ctx, 1) == []  # the single-replica partition it leads does not hold it


# -- KIP-112: failed log directories ---------------------------------------------------------------

@pytest.mark.parametrize("previous, answers, current, new", [
    (set(), [(T0, Errors.NONE), (T1, Errors.NONE)], set(), set()),
    (set(), [(T0, Errors.KAFKA_STORAGE_ERROR), (T1, Errors.NONE)], {T0}, {T0}),
    ({T0}, [(T0, Errors.KAFKA_STORAGE_ERROR), (T1, Errors.KAFKA_STORAGE_ERROR)], {T0, T1}, {T1}),
    ({T0}, [(T0, Errors.NONE)], set(), set()),  # answered again from a live directory
    ({T0}, [(T1, Errors.STALE_CONTROLLER_EPOCH)], {T0}, set()),  # other answers change nothing
    ({T0, T1}, [(T0, Errors.KAFKA_STORAGE_ERROR)], {T0, T1}, set()),
])
def test_replicas_on_offline_dirs_follow_the_storage_errors_a_broker_answers(previous, answers, current, new):
    found = replicas_on_offline_dirs(previous, answers)
    assert (found.current, found.newly_offline) == (current, new)


def test_log_dir_events_name_each_failed_broker_once():
    events = [zkdata.LogDirEventNotificationZNode(broker=b) for b in (3, 1, 3)]
    events.append(zkdata.LogDirEventNotificationZNode(broker=2, event=7))  # not a failure: no event of Kafka's
    assert log_dir_event_brokers(events) == [1, 3]


def test_a_replica_on_a_failed_dir_is_offline_and_its_leadership_is_offline_but_its_brokers_others_are_not():
    ctx = context({T0: (1, 2, 3), T1: (1, 2, 3)})
    ctx.replicas_on_offline_dirs[1] = {T0}
    assert not ctx.is_replica_online(1, T0) and ctx.is_replica_online(1, T1) and ctx.is_replica_online(1)
    assert ctx.partitions_with_offline_leader() == [T0]
