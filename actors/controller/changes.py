"""Compute partition and replica state changes without applying them.

Planners read ControllerContext and return what should happen: state
transitions, LeaderAndIsr values to persist, which brokers must hear about
which partitions, and the transitions that are invalid or whose election
failed. The controller applies a plan in one place (ZooKeeper first, then the
context, then the request batch), in the manner of KRaft's
PartitionChangeBuilder / ControllerResult.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from actors.controller.context import ControllerContext, LeaderAndIsr
from actors.controller.election import (
    initial_leader_and_isr,
    isr_after_election,
    offline_partition_leader_election,
)
from actors.controller.state_machines import (
    PartitionStateName as P,
    ReplicaStateName as R,
    is_valid_partition_transition,
    is_valid_replica_transition,
)
from coordination.zkdata import TopicPartition


@dataclass
class PartitionChanges:
    target: P
    transitions: dict[TopicPartition, P] = field(default_factory=dict)  # tp -> previous state
    created: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)  # new state znodes
    elected: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)  # conditional updates
    invalid: dict[TopicPartition, P] = field(default_factory=dict)
    failed: dict[TopicPartition, str] = field(default_factory=dict)


@dataclass
class ReplicaChanges:
    target: R
    transitions: dict[tuple[TopicPartition, int], R] = field(default_factory=dict)
    leader_and_isr_to: list[tuple[int, TopicPartition]] = field(default_factory=list)
    invalid: dict[tuple[TopicPartition, int], R] = field(default_factory=dict)


def plan_partition_state_changes(ctx: ControllerContext, partitions: Iterable[TopicPartition], target: P,
                                 unclean_leader_election_enabled: bool = False) -> PartitionChanges:
    """Kafka's ZkPartitionStateMachine.doHandleStateChanges, as a pure plan."""
    plan = PartitionChanges(target)
    live = ctx.live_broker_ids
    for tp in partitions:
        current = ctx.partition_states.get(tp, P.NonExistentPartition)
        if not is_valid_partition_transition(current, target):
            plan.invalid[tp] = current
            continue
        assignment = ctx.partition_replicas(tp)
        if target is P.OnlinePartition and current is P.NewPartition:
            initial = initial_leader_and_isr(assignment, live)
            if initial is None:
                plan.failed[tp] = (f"No assigned replica of {list(assignment)} is alive; "
                                   f"live brokers are {sorted(live)}")
                continue
            leader, isr = initial
            plan.created[tp] = LeaderAndIsr(leader, LeaderAndIsr.INITIAL_LEADER_EPOCH, isr,
                                            LeaderAndIsr.INITIAL_ZK_VERSION)
        elif target is P.OnlinePartition and current is P.OfflinePartition:
            current_leadership = ctx.partition_leadership.get(tp)
            if current_leadership is None:
                plan.failed[tp] = "no leadership information in ZooKeeper"
                continue
            lai = current_leadership.leader_and_isr
            live_replicas = [r for r in assignment if r in live]
            leader = offline_partition_leader_election(assignment, lai.isr, live_replicas,
                                                       unclean_leader_election_enabled)
            if leader is None:
                plan.failed[tp] = (f"NoReplicaOnlineException: No replica in ISR {list(lai.isr)} is alive; "
                                   f"live replicas are {live_replicas}")
                continue
            plan.elected[tp] = lai.new_leader_and_isr(leader, isr_after_election(leader, lai.isr, live_replicas))
        plan.transitions[tp] = current
    return plan


def plan_replica_state_changes(ctx: ControllerContext, replicas: Iterable[tuple[TopicPartition, int]],
                               target: R) -> ReplicaChanges:
    """Kafka's ZkReplicaStateMachine.doHandleStateChanges for New and Online replicas, as a plan."""
    plan = ReplicaChanges(target)
    for tp, replica in replicas:
        current = ctx.replica_states.get((tp, replica), R.NonExistentReplica)
        if not is_valid_replica_transition(current, target):
            plan.invalid[(tp, replica)] = current
            continue
        if target is R.OnlineReplica and current is not R.NewReplica and tp in ctx.partition_leadership:
            plan.leader_and_isr_to.append((replica, tp))
        elif target is R.NewReplica and tp in ctx.partition_leadership:
            if ctx.partition_leadership[tp].leader_and_isr.leader == replica:
                plan.invalid[(tp, replica)] = current  # the leader cannot become a NewReplica
                continue
            plan.leader_and_isr_to.append((replica, tp))
        plan.transitions[(tp, replica)] = current
    return plan
