"""Kafka's PartitionLeaderElectionAlgorithmsTest, case by case, plus the elections inside the planner."""
from __future__ import annotations

import pytest

from actors.controller.changes import (
    ControlledShutdownElection,
    ElectionType,
    OfflineElection,
    PreferredElection,
    ReassignElection,
    auto_rebalance_candidates,
    elect_leader,
    election_needed,
)
from actors.controller.context import ControllerContext, LeaderAndIsr, LeaderIsrAndControllerEpoch, ReplicaAssignment
from actors.controller.election import (
    controlled_shutdown_partition_leader_election,
    isr_after_controlled_shutdown,
    isr_after_replica_removed,
    offline_partition_leader_election,
    preferred_replica_partition_leader_election,
    reassign_partition_leader_election,
)
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from tests.live_brokers import live_broker


@pytest.mark.parametrize("assignment,isr,live,unclean,expected", [
    ([2, 4], [2, 4], [4], False, 4),  # testOfflinePartitionLeaderElection
    ([2, 4], [2], [4], False, None),  # ...LastIsrOfflineUncleanLeaderElectionDisabled
    ([2, 4], [2], [4], True, 4),  # ...LastIsrOfflineUncleanLeaderElectionEnabled
])
def test_offline(assignment, isr, live, unclean, expected):
    assert offline_partition_leader_election(assignment, isr, live, unclean) == expected


@pytest.mark.parametrize("reassignment,isr,live,expected", [
    ([2, 4], [2, 4], [2, 4], 2),  # testReassignPartitionLeaderElection
    ([2, 4], [], [2, 4], None),  # ...WithNoLiveIsr
    ([], [2, 4], [2, 4], None),  # ...WithEmptyReassignment
])
def test_reassign(reassignment, isr, live, expected):
    assert reassign_partition_leader_election(reassignment, isr, live) == expected


@pytest.mark.parametrize("assignment,isr,live,expected", [
    ([2, 4], [2, 4], [2, 4], 2),  # testPreferredReplicaPartitionLeaderElection
    ([2, 4], [2], [], None),  # ...PreferredReplicaInIsrNotLive
    ([2, 4], [4], [2, 4], None),  # ...PreferredReplicaNotInIsrLive
    ([2, 4], [], [], None),  # ...PreferredReplicaNotInIsrNotLive
])
def test_preferred(assignment, isr, live, expected):
    assert preferred_replica_partition_leader_election(assignment, isr, live) == expected


@pytest.mark.parametrize("assignment,isr,live,shutting_down,expected", [
    ([2, 4], [2, 4], [2, 4], set(), 2),  # testControlledShutdownPartitionLeaderElection
    ([2, 4], [2], [2, 4], {2}, None),  # ...LastIsrShuttingDown
    ([2, 4], [2, 4], [2, 4], {2, 4}, None),  # ...AllIsrSimultaneouslyShutdown
    ([2, 4], [2, 4], [2, 4], {2}, 4),
])
def test_controlled_shutdown(assignment, isr, live, shutting_down, expected):
    assert controlled_shutdown_partition_leader_election(assignment, isr, live, shutting_down) == expected


def test_isr_rules():
    assert isr_after_controlled_shutdown([1, 2, 3], {2}) == (1, 3)
    assert isr_after_replica_removed([1, 2, 3], 2) == (1, 3)
    assert isr_after_replica_removed([2], 2) == (2,)  # the last member stays


T = TopicPartition("t", 0)


def ctx_with(replicas, leader, isr, live, epoch=5, controller_epoch=3, shutting_down=()):
    ctx = ControllerContext(epoch=epoch)
    ctx.add_live_brokers({b: (live_broker(b, "h", b), 10 + b) for b in live})
    ctx.shutting_down_broker_ids |= set(shutting_down)
    ctx.update_partition_full_assignment(T, replicas if isinstance(replicas, ReplicaAssignment)
                                         else ReplicaAssignment(tuple(replicas)))
    ctx.partition_leadership[T] = LeaderIsrAndControllerEpoch(LeaderAndIsr(leader, 7, tuple(isr), 9), controller_epoch)
    return ctx


def test_reassign_election_elects_from_target_and_keeps_isr():
    ctx = ctx_with(ReplicaAssignment.for_reassignment((1, 2), (3, 4)), 1, (1, 2, 3, 4), (1, 2, 3, 4))
    e = elect_leader(ctx, T, ReassignElection())
    assert e.leader_and_isr == LeaderAndIsr(3, 8, (1, 2, 3, 4), 9) and e.recipients == (3, 4)


def test_preferred_election_keeps_isr_and_tells_all_replicas():
    ctx = ctx_with((2, 1, 3), 1, (1, 2, 3), (1, 2, 3))
    e = elect_leader(ctx, T, PreferredElection())
    assert e.leader_and_isr == LeaderAndIsr(2, 8, (1, 2, 3), 9) and e.recipients == (2, 1, 3)
    assert isinstance(elect_leader(ctx_with((2, 1, 3), 1, (1, 3), (1, 2, 3)), T, PreferredElection()), str)


def test_controlled_shutdown_election_drops_the_broker_from_the_isr():
    ctx = ctx_with((1, 2, 3), 1, (1, 2, 3), (1, 2, 3), shutting_down={1})
    e = elect_leader(ctx, T, ControlledShutdownElection())
    assert e.leader_and_isr == LeaderAndIsr(2, 8, (2, 3), 9)


def test_election_refused_when_a_newer_controller_wrote_the_state():
    ctx = ctx_with((1, 2, 3), 1, (1, 2, 3), (2, 3), epoch=5, controller_epoch=6)
    assert "newer controller" in elect_leader(ctx, T, PreferredElection())


def test_preferred_election_needed_and_auto_rebalance():
    ctx = ctx_with((2, 1, 3), 1, (1, 2, 3), (1, 2, 3))
    assert election_needed(ctx, [T], ElectionType.PREFERRED) == ([T], {})
    assert auto_rebalance_candidates(ctx, 10) == [T]  # broker 2 leads 0 of its 1 preferred partitions
    assert auto_rebalance_candidates(ctx, 100) == []  # imbalance ratio 1.0 is not above 100%
    led_by_preferred = ctx_with((1, 2, 3), 1, (1, 2, 3), (1, 2, 3))
    assert election_needed(led_by_preferred, [T], ElectionType.PREFERRED)[1][T].error == Errors.ELECTION_NOT_NEEDED
    assert auto_rebalance_candidates(ctx_with((2, 1, 3), 1, (1, 3), (1, 2, 3)), 10) == []  # 2 not in ISR


def test_unclean_election_is_needed_only_without_a_live_leader():
    """Kafka's processReplicaLeaderElection for ElectionType.UNCLEAN: a live leader, preferred or not,
    needs no election; a dead one (or none) does; unknown partitions and topics being deleted are answered."""
    assert election_needed(ctx_with((2, 1), 1, (1,), (1, 2)), [T], ElectionType.UNCLEAN)[1][T].error == \
        Errors.ELECTION_NOT_NEEDED
    for leader in (1, -1):
        assert election_needed(ctx_with((1, 2), leader, (1,), (2,)), [T], ElectionType.UNCLEAN) == ([T], {})
    assert election_needed(ctx_with((1, 2), 1, (1,), (2,), shutting_down={1}), [T], ElectionType.UNCLEAN)[0] == [T]
    unknown = TopicPartition("t", 9)
    assert election_needed(ctx_with((1, 2), 1, (1,), (2,)), [unknown], ElectionType.UNCLEAN)[1][unknown].error == \
        Errors.UNKNOWN_TOPIC_OR_PARTITION
    deleting = ctx_with((1, 2), -1, (1,), (2,))
    deleting.topics_to_be_deleted.add("t")
    assert election_needed(deleting, [T], ElectionType.UNCLEAN)[1][T].error == Errors.INVALID_TOPIC_EXCEPTION


def test_the_admin_unclean_election_elects_outside_the_isr():
    """What an UNCLEAN ElectLeaders asks of the partition state machine (Kafka's
    OfflinePartitionLeaderElectionStrategy(allowUnclean = true)): the last ISR member is dead, a live
    replica outside the ISR leads, alone in the ISR."""
    ctx = ctx_with((1, 2), -1, (1,), (2,))
    e = elect_leader(ctx, T, OfflineElection(allow_unclean=True))
    assert e.leader_and_isr == LeaderAndIsr(2, 8, (2,), 9) and e.unclean
    assert isinstance(elect_leader(ctx_with((1, 2), -1, (1,), ()), T, OfflineElection(allow_unclean=True)), str)


def test_a_broker_shutting_down_cannot_become_leader():
    from actors.controller.changes import plan_partition_state_changes
    from actors.controller.state_machines import PartitionStateName as P

    ctx = ctx_with((1, 2, 3), 9, (1, 2, 3), (1, 2, 3), shutting_down={1})
    ctx.partition_states[T] = P.OfflinePartition
    assert elect_leader(ctx, T, OfflineElection()).leader_and_isr.leader == 2
    new = TopicPartition("new", 0)
    ctx.update_partition_replicas(new, (1, 3))
    ctx.partition_states[new] = P.NewPartition
    plan = plan_partition_state_changes(ctx, [new], P.OnlinePartition)
    assert plan.created[new].leader == 3 and plan.created[new].isr == (3,)
