"""Partition and replica state machines: Kafka's valid-previous-state tables and the pure planners."""
from __future__ import annotations

import copy
import itertools

import pytest

from actors.controller.changes import OfflineElection, plan_partition_state_changes, plan_replica_state_changes
from actors.controller.context import ControllerContext, LeaderAndIsr, LeaderIsrAndControllerEpoch
from actors.controller.state_machines import (
    PARTITION_VALID_PREVIOUS,
    REPLICA_VALID_PREVIOUS,
    PartitionStateName as P,
    ReplicaStateName as R,
    is_valid_partition_transition,
    is_valid_replica_transition,
)
from coordination.zkdata import TopicPartition
from tests.live_brokers import live_broker

# -- Kafka's tables (PartitionStateMachine.scala / ReplicaStateMachine.scala) ----------------------

KAFKA_PARTITION_VALID_PREVIOUS = {
    P.NewPartition: {P.NonExistentPartition},
    P.OnlinePartition: {P.NewPartition, P.OnlinePartition, P.OfflinePartition},
    P.OfflinePartition: {P.NewPartition, P.OnlinePartition, P.OfflinePartition},
    P.NonExistentPartition: {P.OfflinePartition},
}

KAFKA_REPLICA_VALID_PREVIOUS = {
    R.NewReplica: {R.NonExistentReplica},
    R.OnlineReplica: {R.NewReplica, R.OnlineReplica, R.OfflineReplica, R.ReplicaDeletionIneligible},
    R.OfflineReplica: {R.NewReplica, R.OnlineReplica, R.OfflineReplica, R.ReplicaDeletionIneligible},
    R.ReplicaDeletionStarted: {R.OfflineReplica},
    R.ReplicaDeletionSuccessful: {R.ReplicaDeletionStarted},
    R.ReplicaDeletionIneligible: {R.OfflineReplica, R.ReplicaDeletionStarted},
    R.NonExistentReplica: {R.ReplicaDeletionSuccessful},
}



def elected(plan):
    """The LeaderAndIsr of each election in a plan."""
    return {tp: e.leader_and_isr for tp, e in plan.elected.items()}

def test_partition_table_matches_kafka():
    assert {k: set(v) for k, v in PARTITION_VALID_PREVIOUS.items()} == KAFKA_PARTITION_VALID_PREVIOUS


def test_replica_table_matches_kafka():
    assert {k: set(v) for k, v in REPLICA_VALID_PREVIOUS.items()} == KAFKA_REPLICA_VALID_PREVIOUS


def test_state_enums_and_kafka_state_bytes():
    assert {s.name: s.value for s in P} == {
        "NewPartition": 0, "OnlinePartition": 1, "OfflinePartition": 2, "NonExistentPartition": 3}
    assert {s.name: s.value for s in R} == {
        "NewReplica": 1, "OnlineReplica": 2, "OfflineReplica": 3, "ReplicaDeletionStarted": 4,
        "ReplicaDeletionSuccessful": 5, "ReplicaDeletionIneligible": 6, "NonExistentReplica": 7}


def test_is_valid_partition_transition_all_pairs():
    valid = 0
    for current, target in itertools.product(P, P):
        expected = current in KAFKA_PARTITION_VALID_PREVIOUS[target]
        assert is_valid_partition_transition(current, target) is expected, (current, target)
        valid += expected
    assert valid == 1 + 3 + 3 + 1


def test_is_valid_replica_transition_all_pairs():
    valid = 0
    for current, target in itertools.product(R, R):
        expected = current in KAFKA_REPLICA_VALID_PREVIOUS[target]
        assert is_valid_replica_transition(current, target) is expected, (current, target)
        valid += expected
    assert valid == 1 + 4 + 4 + 1 + 1 + 2 + 1


def test_some_transitions_by_name():
    assert not is_valid_partition_transition(P.NonExistentPartition, P.OnlinePartition)
    assert not is_valid_partition_transition(P.OnlinePartition, P.NonExistentPartition)
    assert not is_valid_partition_transition(P.NewPartition, P.NewPartition)
    assert is_valid_partition_transition(P.OfflinePartition, P.NonExistentPartition)
    assert not is_valid_replica_transition(R.OnlineReplica, R.ReplicaDeletionStarted)
    assert not is_valid_replica_transition(R.ReplicaDeletionSuccessful, R.OnlineReplica)
    assert is_valid_replica_transition(R.ReplicaDeletionIneligible, R.OnlineReplica)


# -- a hand-built context ---------------------------------------------------------------------------

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
U0 = TopicPartition("u", 0)


def make_ctx(live=(1, 2, 3)) -> ControllerContext:
    ctx = ControllerContext(epoch=5, epoch_zk_version=4)
    ctx.add_live_brokers({b: (live_broker(b, f"h{b}", 9090 + b), 100 + b) for b in live})
    ctx.all_topics = {"t", "u"}
    ctx.update_partition_replicas(T0, (1, 2, 3))
    ctx.update_partition_replicas(T1, (3, 1, 2))
    ctx.update_partition_replicas(U0, (4, 5))
    return ctx


def leadership(leader, epoch, isr, zk_version, controller_epoch=4):
    return LeaderIsrAndControllerEpoch(LeaderAndIsr(leader, epoch, tuple(isr), zk_version), controller_epoch)


# -- partition planner ------------------------------------------------------------------------------

def test_nonexistent_to_new():
    ctx = make_ctx()
    plan = plan_partition_state_changes(ctx, [T0, T1], P.NewPartition)
    assert plan.target is P.NewPartition
    assert plan.transitions == {T0: P.NonExistentPartition, T1: P.NonExistentPartition}
    assert plan.created == {} and plan.elected == {} and plan.invalid == {} and plan.failed == {}


def test_new_to_online_creates_initial_leader_and_isr():
    ctx = make_ctx(live=(2, 3))
    ctx.partition_states[T0] = P.NewPartition
    ctx.partition_states[T1] = P.NewPartition
    plan = plan_partition_state_changes(ctx, [T0, T1], P.OnlinePartition)
    assert plan.created == {
        T0: LeaderAndIsr(leader=2, leader_epoch=0, isr=(2, 3), zk_version=0),
        T1: LeaderAndIsr(leader=3, leader_epoch=0, isr=(3, 2), zk_version=0),
    }
    assert plan.transitions == {T0: P.NewPartition, T1: P.NewPartition}
    assert plan.elected == {} and plan.failed == {} and plan.invalid == {}


def test_new_to_online_all_replicas_live():
    ctx = make_ctx()
    ctx.partition_states[T1] = P.NewPartition
    plan = plan_partition_state_changes(ctx, [T1], P.OnlinePartition)
    assert plan.created[T1] == LeaderAndIsr(3, LeaderAndIsr.INITIAL_LEADER_EPOCH, (3, 1, 2),
                                            LeaderAndIsr.INITIAL_ZK_VERSION)
    assert (LeaderAndIsr.INITIAL_LEADER_EPOCH, LeaderAndIsr.INITIAL_ZK_VERSION) == (0, 0)


def test_new_to_online_without_live_replica_fails():
    ctx = make_ctx()  # brokers 4 and 5 (u-0's replicas) are dead
    ctx.partition_states[U0] = P.NewPartition
    ctx.partition_states[T0] = P.NewPartition
    plan = plan_partition_state_changes(ctx, [U0, T0], P.OnlinePartition)
    assert list(plan.failed) == [U0]
    assert "[4, 5]" in plan.failed[U0] and "[1, 2, 3]" in plan.failed[U0]
    assert U0 not in plan.transitions and U0 not in plan.created
    assert plan.transitions == {T0: P.NewPartition}
    assert plan.created[T0].leader == 1


def test_offline_to_online_elects_from_live_isr():
    ctx = make_ctx(live=(2, 3))
    ctx.partition_states[T0] = P.OfflinePartition
    ctx.partition_leadership[T0] = leadership(leader=1, epoch=7, isr=(1, 2, 3), zk_version=11)
    plan = plan_partition_state_changes(ctx, [T0], P.OnlinePartition)
    assert elected(plan) == {T0: LeaderAndIsr(leader=2, leader_epoch=8, isr=(2, 3), zk_version=11)}
    assert plan.transitions == {T0: P.OfflinePartition}
    assert plan.created == {} and plan.failed == {} and plan.invalid == {}


def test_offline_to_online_keeps_isr_order():
    ctx = make_ctx(live=(2, 3))
    ctx.partition_states[T0] = P.OfflinePartition
    ctx.partition_leadership[T0] = leadership(leader=1, epoch=0, isr=(3, 1, 2), zk_version=2)
    plan = plan_partition_state_changes(ctx, [T0], P.OnlinePartition)
    # AR (1,2,3) picks 2; the ISR keeps its own order
    assert elected(plan)[T0] == LeaderAndIsr(2, 1, (3, 2), 2)


@pytest.mark.parametrize("unclean", [False, True])
def test_offline_to_online_prefers_isr_even_when_unclean_allowed(unclean):
    ctx = make_ctx(live=(2, 3))
    ctx.partition_states[T0] = P.OfflinePartition
    ctx.partition_leadership[T0] = leadership(leader=1, epoch=3, isr=(1, 3), zk_version=5)
    plan = plan_partition_state_changes(ctx, [T0], P.OnlinePartition, OfflineElection(unclean))
    assert elected(plan)[T0] == LeaderAndIsr(3, 4, (3,), 5)


def test_offline_no_live_isr_clean_fails():
    ctx = make_ctx(live=(2, 3))
    ctx.partition_states[T0] = P.OfflinePartition
    ctx.partition_leadership[T0] = leadership(leader=1, epoch=3, isr=(1,), zk_version=5)
    plan = plan_partition_state_changes(ctx, [T0], P.OnlinePartition, OfflineElection(False))
    assert list(plan.failed) == [T0]
    assert plan.failed[T0].startswith("NoReplicaOnlineException")
    assert plan.elected == {} and plan.transitions == {} and plan.invalid == {}


@pytest.mark.parametrize("broker_wide, topic_overrides, elects", [
    (False, {"t": True}, True), (True, {"t": False}, False), (False, {"u": True}, False), (True, {}, True)])
def test_a_topics_unclean_leader_election_enable_overrides_the_brokers(broker_wide, topic_overrides, elects):
    ctx = make_ctx(live=(2, 3))
    ctx.partition_states[T1] = P.OfflinePartition
    ctx.partition_leadership[T1] = leadership(leader=1, epoch=3, isr=(1,), zk_version=5)
    plan = plan_partition_state_changes(ctx, [T1], P.OnlinePartition, OfflineElection(broker_wide, topic_overrides))
    assert (T1 in plan.elected) == elects and (T1 in plan.failed) == (not elects)


def test_offline_no_live_isr_unclean_elects_from_live_assignment():
    ctx = make_ctx(live=(2, 3))
    ctx.partition_states[T1] = P.OfflinePartition  # AR (3, 1, 2)
    ctx.partition_leadership[T1] = leadership(leader=1, epoch=3, isr=(1,), zk_version=5)
    plan = plan_partition_state_changes(ctx, [T1], P.OnlinePartition, OfflineElection(True))
    assert elected(plan) == {T1: LeaderAndIsr(leader=3, leader_epoch=4, isr=(3,), zk_version=5)}
    assert plan.transitions == {T1: P.OfflinePartition}
    assert plan.failed == {}


def test_offline_no_live_replica_at_all_fails_even_unclean():
    ctx = make_ctx()
    ctx.partition_states[U0] = P.OfflinePartition
    ctx.partition_leadership[U0] = leadership(leader=4, epoch=1, isr=(4, 5), zk_version=1)
    plan = plan_partition_state_changes(ctx, [U0], P.OnlinePartition, OfflineElection(True))
    assert list(plan.failed) == [U0]
    assert plan.elected == {} and plan.transitions == {}


def test_offline_without_leadership_fails():
    ctx = make_ctx()
    ctx.partition_states[T0] = P.OfflinePartition
    plan = plan_partition_state_changes(ctx, [T0], P.OnlinePartition)
    assert list(plan.failed) == [T0]
    assert plan.transitions == {}


@pytest.mark.parametrize("current", [P.NewPartition, P.OnlinePartition, P.OfflinePartition])
def test_to_offline_is_a_plain_transition(current):
    ctx = make_ctx()
    ctx.partition_states[T0] = current
    ctx.partition_leadership[T0] = leadership(1, 2, (1, 2, 3), 3)
    plan = plan_partition_state_changes(ctx, [T0], P.OfflinePartition)
    assert plan.transitions == {T0: current}
    assert plan.created == {} and plan.elected == {} and plan.failed == {} and plan.invalid == {}


@pytest.mark.parametrize("current,target", [
    (P.NonExistentPartition, P.OnlinePartition),
    (P.NonExistentPartition, P.OfflinePartition),
    (P.OnlinePartition, P.NewPartition),
    (P.NewPartition, P.NonExistentPartition),
    (P.OnlinePartition, P.NonExistentPartition),
])
def test_invalid_partition_transition(current, target):
    ctx = make_ctx()
    if current is not P.NonExistentPartition:
        ctx.partition_states[T0] = current
    plan = plan_partition_state_changes(ctx, [T0], target)
    assert plan.invalid == {T0: current}
    assert plan.transitions == {} and plan.created == {} and plan.elected == {} and plan.failed == {}


def test_mixed_batch_sorts_each_partition():
    ctx = make_ctx(live=(1, 2))
    ctx.partition_states[T0] = P.NewPartition
    ctx.partition_states[T1] = P.OfflinePartition
    ctx.partition_leadership[T1] = leadership(3, 9, (3, 2), 4)
    missing = TopicPartition("t", 99)  # NonExistent
    plan = plan_partition_state_changes(ctx, [T0, T1, missing, U0], P.OnlinePartition)
    assert plan.created == {T0: LeaderAndIsr(1, 0, (1, 2), 0)}
    assert elected(plan) == {T1: LeaderAndIsr(2, 10, (2,), 4)}
    assert plan.invalid == {missing: P.NonExistentPartition, U0: P.NonExistentPartition}
    assert plan.transitions == {T0: P.NewPartition, T1: P.OfflinePartition}


def test_partition_planner_does_not_mutate_context():
    ctx = make_ctx(live=(2, 3))
    ctx.partition_states.update({T0: P.NewPartition, T1: P.OfflinePartition, U0: P.NewPartition})
    ctx.partition_leadership[T1] = leadership(1, 3, (1, 3), 5)
    before = copy.deepcopy(ctx)
    for target in P:
        for unclean in (False, True):
            plan_partition_state_changes(ctx, [T0, T1, U0, TopicPartition("x", 0)], target, OfflineElection(unclean))
    assert ctx == before
    assert ctx.partition_states == {T0: P.NewPartition, T1: P.OfflinePartition, U0: P.NewPartition}


def test_invalid_transition_does_not_mutate_context():
    ctx = make_ctx()
    before = copy.deepcopy(ctx)
    plan = plan_partition_state_changes(ctx, [T0], P.OnlinePartition)
    assert plan.invalid == {T0: P.NonExistentPartition}
    assert ctx == before
    assert T0 not in ctx.partition_states and T0 not in ctx.partition_leadership


# -- replica planner --------------------------------------------------------------------------------

def test_replica_nonexistent_to_new():
    ctx = make_ctx()
    keys = [(T0, 1), (T0, 2), (T0, 3)]
    plan = plan_replica_state_changes(ctx, keys, R.NewReplica)
    assert plan.target is R.NewReplica
    assert plan.transitions == {k: R.NonExistentReplica for k in keys}
    assert plan.leader_and_isr_to == []  # no leadership yet: nothing to send
    assert plan.invalid == {}


def test_replica_new_with_leadership_sends_to_follower():
    ctx = make_ctx()
    ctx.partition_leadership[T0] = leadership(1, 0, (1, 2, 3), 0)
    plan = plan_replica_state_changes(ctx, [(T0, 2)], R.NewReplica)
    assert plan.leader_and_isr_to == [(2, T0, True)]
    assert plan.transitions == {(T0, 2): R.NonExistentReplica}


def test_replica_new_refused_for_current_leader():
    ctx = make_ctx()
    ctx.partition_leadership[T0] = leadership(1, 0, (1, 2, 3), 0)
    plan = plan_replica_state_changes(ctx, [(T0, 1)], R.NewReplica)
    assert (T0, 1) not in plan.transitions
    assert plan.leader_and_isr_to == []


def test_replica_new_to_online_sends_nothing():
    ctx = make_ctx()
    ctx.partition_leadership[T0] = leadership(1, 0, (1, 2, 3), 0)
    keys = [(T0, 1), (T0, 2), (T0, 3)]
    for k in keys:
        ctx.replica_states[k] = R.NewReplica
    plan = plan_replica_state_changes(ctx, keys, R.OnlineReplica)
    assert plan.leader_and_isr_to == []
    assert plan.transitions == {k: R.NewReplica for k in keys}
    assert plan.invalid == {}


@pytest.mark.parametrize("current", [R.OnlineReplica, R.OfflineReplica, R.ReplicaDeletionIneligible])
def test_replica_to_online_with_leadership_sends_leader_and_isr(current):
    ctx = make_ctx()
    ctx.partition_leadership[T0] = leadership(1, 4, (1, 2, 3), 6)
    ctx.partition_leadership[T1] = leadership(3, 1, (3, 1), 1)
    ctx.replica_states[(T0, 2)] = current
    ctx.replica_states[(T1, 2)] = current
    plan = plan_replica_state_changes(ctx, [(T0, 2), (T1, 2)], R.OnlineReplica)
    assert plan.leader_and_isr_to == [(2, T0, False), (2, T1, False)]
    assert plan.transitions == {(T0, 2): current, (T1, 2): current}


def test_replica_online_to_online_without_leadership_sends_nothing():
    ctx = make_ctx()
    ctx.replica_states[(T0, 2)] = R.OnlineReplica
    plan = plan_replica_state_changes(ctx, [(T0, 2)], R.OnlineReplica)
    assert plan.leader_and_isr_to == []
    assert plan.transitions == {(T0, 2): R.OnlineReplica}


@pytest.mark.parametrize("current,target", [
    (R.NonExistentReplica, R.OnlineReplica),
    (R.NonExistentReplica, R.OfflineReplica),
    (R.OnlineReplica, R.NewReplica),
    (R.ReplicaDeletionSuccessful, R.OnlineReplica),
    (R.ReplicaDeletionStarted, R.OnlineReplica),
])
def test_invalid_replica_transition(current, target):
    ctx = make_ctx()
    ctx.partition_leadership[T0] = leadership(1, 0, (1, 2, 3), 0)
    if current is not R.NonExistentReplica:
        ctx.replica_states[(T0, 2)] = current
    plan = plan_replica_state_changes(ctx, [(T0, 2)], target)
    assert plan.invalid == {(T0, 2): current}
    assert plan.transitions == {}
    assert plan.leader_and_isr_to == []


def test_replica_planner_does_not_mutate_context():
    ctx = make_ctx()
    ctx.partition_leadership[T0] = leadership(1, 0, (1, 2, 3), 0)
    ctx.replica_states.update({(T0, 1): R.OnlineReplica, (T0, 2): R.NewReplica, (T0, 3): R.OfflineReplica})
    before = copy.deepcopy(ctx)
    for target in R:
        plan_replica_state_changes(ctx, [(T0, 1), (T0, 2), (T0, 3), (T1, 1)], target)
    assert ctx == before


# -- rounds of conditional writes -------------------------------------------------------------------

def test_retry_rounds_go_on_while_they_make_progress_and_stop_after_idle_ones():
    from actors.controller.zk_state_machines import MAX_ZK_RETRIES, RetryRounds

    rounds = RetryRounds()
    assert rounds.go_on(100) and not rounds.retrying  # the first round writes with a stale-version limit
    for left in (60, 30, 29, 5, 1):  # each round writes something: more than MAX_ZK_RETRIES rounds
        assert rounds.go_on(left) and rounds.retrying
    for _ in range(MAX_ZK_RETRIES - 1):
        assert rounds.go_on(1)  # nothing written, not yet given up
    assert not rounds.go_on(1)
    assert not RetryRounds().go_on(0)
    progress_resets = RetryRounds()
    for left in [10] * MAX_ZK_RETRIES + [9] + [9] * (MAX_ZK_RETRIES - 1):
        assert progress_resets.go_on(left)
    assert not progress_resets.go_on(9)


def test_deletion_counts_as_kafkas_controller_metrics_count_them():
    """ReplicasToDeleteCount: replicas of queued topics not deleted yet; ReplicasIneligibleToDeleteCount:
    those whose deletion cannot go on (a dead broker's)."""
    ctx = make_ctx()
    assert ctx.replicas_to_delete_count() == ctx.ineligible_replicas_to_delete_count() == 0
    ctx.topics_to_be_deleted = {"t"}
    for r in (1, 2):
        ctx.replica_states[(T0, r)] = R.ReplicaDeletionSuccessful
    ctx.replica_states[(T0, 3)] = R.ReplicaDeletionIneligible
    ctx.replica_states[(T1, 3)] = R.ReplicaDeletionStarted
    assert ctx.replicas_to_delete_count() == 4  # T0's replica 3 and T1's three
    assert ctx.ineligible_replicas_to_delete_count() == 1
    ctx.replica_states[(U0, 4)] = R.ReplicaDeletionIneligible  # u is not queued: not counted
    assert ctx.ineligible_replicas_to_delete_count() == 1
