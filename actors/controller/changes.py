"""Compute partition and replica state changes without applying them.

Planners read ControllerContext and return what should happen: state
transitions, LeaderAndIsr values to persist, which brokers must hear about
which partitions, and the transitions that are invalid or whose election
failed. The state machines apply a plan in one place (ZooKeeper first, then
the context, then the request batch), in the manner of KRaft's
PartitionChangeBuilder / ControllerResult. Nothing here mutates the context.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from actors.controller.context import ControllerContext, LeaderAndIsr
from actors.controller.election import (
    controlled_shutdown_partition_leader_election,
    initial_leader_and_isr,
    isr_after_controlled_shutdown,
    isr_after_election,
    isr_after_replica_removed,
    offline_partition_leader_election,
    preferred_replica_partition_leader_election,
    reassign_partition_leader_election,
)
from actors.controller.request_batch import stop_replica_epoch
from actors.controller.state_machines import (
    PartitionStateName as P,
    ReplicaStateName as R,
    is_valid_partition_transition,
    is_valid_replica_transition,
)
from coordination.errors import ApiError, Errors
from coordination.zkdata import TopicPartition


# -- election strategies (Kafka's PartitionLeaderElectionStrategy) ------------------------------

@dataclass(frozen=True)
class OfflineElection:
    """An offline partition's election: unclean when the broker allows it, or its topic's
    unclean.leader.election.enable says so (Kafka reads the topic's config when no ISR member lives)."""

    allow_unclean: bool = False
    topic_unclean: Mapping[str, bool] = field(default_factory=dict)

    def unclean(self, topic: str) -> bool:
        return self.topic_unclean.get(topic, self.allow_unclean)


@dataclass(frozen=True)
class ReassignElection:
    pass


@dataclass(frozen=True)
class PreferredElection:
    pass


@dataclass(frozen=True)
class ControlledShutdownElection:
    pass


ElectionStrategy = OfflineElection | ReassignElection | PreferredElection | ControlledShutdownElection


@dataclass(frozen=True)
class Election:
    """A successful election: the new LeaderAndIsr and who must be told."""

    leader_and_isr: LeaderAndIsr
    recipients: tuple[int, ...]
    unclean: bool = False


def elect_leader(ctx: ControllerContext, tp: TopicPartition, strategy: ElectionStrategy) -> Election | str:
    """Run one election over the context; an Election, or the reason it failed."""
    leadership = ctx.partition_leadership.get(tp)
    if leadership is None:
        return "no leadership information in ZooKeeper"
    if leadership.controller_epoch > ctx.epoch:
        return (f"aborted: the state was written by a newer controller (epoch {leadership.controller_epoch} > "
                f"{ctx.epoch}); this controller must have been deposed")
    lai = leadership.leader_and_isr
    assignment = ctx.partition_full_assignment(tp)
    replicas = assignment.replicas
    live = [r for r in replicas if ctx.is_replica_online(r, tp)]
    match strategy:
        case OfflineElection():
            leader = offline_partition_leader_election(replicas, lai.isr, live, strategy.unclean(tp.topic))
            if leader is None:
                return (f"NoReplicaOnlineException: No replica in ISR {list(lai.isr)} is alive; "
                        f"live replicas are {live}")
            return Election(lai.new_leader_and_isr(leader, isr_after_election(leader, lai.isr, live)),
                            tuple(live), unclean=leader not in lai.isr)
        case ReassignElection():
            target = assignment.target_replicas
            leader = reassign_partition_leader_election(target, lai.isr, live)
            if leader is None:
                return f"None of the reassigned replicas {list(target)} are in-sync replicas {list(lai.isr)} and alive"
            return Election(lai.new_leader_and_isr(leader, lai.isr), target)
        case PreferredElection():
            leader = preferred_replica_partition_leader_election(replicas, lai.isr, live)
            if leader is None:
                return (f"Preferred replica {replicas[0] if replicas else None} is either not alive or not in "
                        f"the isr {list(lai.isr)}")
            return Election(lai.new_leader_and_isr(leader, lai.isr), replicas)
        case ControlledShutdownElection():
            shutting_down = ctx.shutting_down_broker_ids
            live_or_shutting = [r for r in replicas if r in ctx.live_or_shutting_down_broker_ids]
            leader = controlled_shutdown_partition_leader_election(replicas, lai.isr, live_or_shutting, shutting_down)
            if leader is None:
                return f"No other replica in ISR {list(lai.isr)} is alive and not shutting down"
            return Election(lai.new_leader_and_isr(leader, isr_after_controlled_shutdown(lai.isr, shutting_down)),
                            tuple(live_or_shutting))
    raise TypeError(f"unknown election strategy {strategy!r}")


# -- partitions ----------------------------------------------------------------------------------

@dataclass
class PartitionChanges:
    target: P
    transitions: dict[TopicPartition, P] = field(default_factory=dict)  # tp -> previous state
    created: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)  # new state znodes
    elected: dict[TopicPartition, Election] = field(default_factory=dict)  # conditional updates
    invalid: dict[TopicPartition, P] = field(default_factory=dict)
    failed: dict[TopicPartition, str] = field(default_factory=dict)


def plan_partition_state_changes(ctx: ControllerContext, partitions: Iterable[TopicPartition], target: P,
                                 strategy: ElectionStrategy = OfflineElection()) -> PartitionChanges:
    """Kafka's ZkPartitionStateMachine.doHandleStateChanges, as a pure plan.

    New partitions going Online get their initial leader and ISR; Offline and
    Online ones going Online are elected with `strategy`.
    """
    plan = PartitionChanges(target)
    live = ctx.live_broker_ids
    for tp in partitions:
        current = ctx.partition_states.get(tp, P.NonExistentPartition)
        if not is_valid_partition_transition(current, target):
            plan.invalid[tp] = current
            continue
        if target is P.OnlinePartition and current is P.NewPartition:
            assignment = ctx.partition_replicas(tp)
            initial = initial_leader_and_isr(assignment, live)
            if initial is None:
                plan.failed[tp] = (f"No assigned replica of {list(assignment)} is alive; "
                                   f"live brokers are {sorted(live)}")
                continue
            leader, isr = initial
            plan.created[tp] = LeaderAndIsr(leader, LeaderAndIsr.INITIAL_LEADER_EPOCH, isr,
                                            LeaderAndIsr.INITIAL_ZK_VERSION)
        elif target is P.OnlinePartition:
            election = elect_leader(ctx, tp, strategy)
            if isinstance(election, str):
                plan.failed[tp] = election
                continue
            plan.elected[tp] = election
        plan.transitions[tp] = current
    return plan


# -- replicas ------------------------------------------------------------------------------------

@dataclass
class ReplicaChanges:
    target: R
    transitions: dict[tuple[TopicPartition, int], R] = field(default_factory=dict)
    invalid: dict[tuple[TopicPartition, int], R] = field(default_factory=dict)
    leader_and_isr_to: list[tuple[int, TopicPartition, bool]] = field(default_factory=list)  # broker, tp, is_new
    # broker, tp, delete, leader epoch (fixed as planned: before this plan's ISR removals, as Kafka adds it)
    stop_replica_to: list[tuple[int, TopicPartition, bool, int]] = field(default_factory=list)
    isr_removals: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)  # conditional updates
    update_metadata_for: list[TopicPartition] = field(default_factory=list)
    assignment_removals: list[tuple[TopicPartition, int]] = field(default_factory=list)


def plan_replica_state_changes(ctx: ControllerContext, replicas: Iterable[tuple[TopicPartition, int]],
                               target: R) -> ReplicaChanges:
    """Kafka's ZkReplicaStateMachine.doHandleStateChanges, as a pure plan.

    Call it with the replicas of one broker at a time when going Offline: each
    ISR removal is computed from the context as it is when planned.
    """
    plan = ReplicaChanges(target)
    for tp, replica in replicas:
        key = (tp, replica)
        current = ctx.replica_states.get(key, R.NonExistentReplica)
        if not is_valid_replica_transition(current, target):
            plan.invalid[key] = current
            continue
        leadership = ctx.partition_leadership.get(tp)
        if target is R.NewReplica:
            if leadership is not None:
                if leadership.leader_and_isr.leader == replica:
                    plan.invalid[key] = current  # the leader cannot become a NewReplica
                    continue
                plan.leader_and_isr_to.append((replica, tp, True))
        elif target is R.OnlineReplica:
            if current is not R.NewReplica and leadership is not None:
                plan.leader_and_isr_to.append((replica, tp, False))
        elif target is R.OfflineReplica:
            plan.stop_replica_to.append((replica, tp, False, stop_replica_epoch(ctx, tp)))
            if leadership is None:
                plan.update_metadata_for.append(tp)
            else:
                lai = leadership.leader_and_isr
                if replica in lai.isr:
                    new_leader = LeaderAndIsr.NO_LEADER if lai.leader == replica else lai.leader
                    plan.isr_removals[tp] = lai.new_leader_and_isr(new_leader, isr_after_replica_removed(lai.isr, replica))
                if not ctx.is_topic_queued_for_deletion(tp.topic):
                    for r in ctx.partition_replicas(tp):
                        if r != replica:
                            plan.leader_and_isr_to.append((r, tp, False))
        elif target is R.ReplicaDeletionStarted:
            plan.stop_replica_to.append((replica, tp, True, stop_replica_epoch(ctx, tp)))
        elif target is R.NonExistentReplica:
            plan.assignment_removals.append(key)
        plan.transitions[key] = current
    return plan


# -- API-triggered elections ---------------------------------------------------------------------

class ElectionType(Enum):
    """Kafka's ElectionType: what an ElectLeaders request asks for."""

    PREFERRED = 0
    UNCLEAN = 1


def election_needed(ctx: ControllerContext, partitions: Iterable[TopicPartition],
                    election_type: ElectionType) -> tuple[list[TopicPartition], dict[TopicPartition, ApiError]]:
    """Kafka's processReplicaLeaderElection before it elects: the partitions to elect, and the answers of
    those that cannot or need not be (a preferred one led by its preferred replica; for an unclean
    election, one whose leader is live)."""
    valid, errors = [], {}
    for tp in partitions:
        leadership = ctx.partition_leadership.get(tp)
        replicas = ctx.partition_replicas(tp)
        if not replicas or leadership is None:
            errors[tp] = ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
        elif ctx.is_topic_queued_for_deletion(tp.topic):
            errors[tp] = ApiError(Errors.INVALID_TOPIC_EXCEPTION, "The topic is being deleted")
        elif (leadership.leader_and_isr.leader == replicas[0] if election_type is ElectionType.PREFERRED
              else leadership.leader_and_isr.leader in ctx.live_broker_ids):
            errors[tp] = ApiError(Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
        else:
            valid.append(tp)
    return valid, errors


# -- preferred leaders ---------------------------------------------------------------------------

def imbalanced_leaderships(preferred: dict[TopicPartition, int], leaders: dict[TopicPartition, int],
                           imbalance_percentage: int) -> dict[int, list[TopicPartition]]:
    """Kafka's leader imbalance: per preferred broker (the first assigned replica) whose share of
    partitions led by someone else exceeds leader.imbalance.per.broker.percentage, those partitions."""
    by_preferred: dict[int, list[TopicPartition]] = {}
    for tp, broker in preferred.items():
        by_preferred.setdefault(broker, []).append(tp)
    out = {}
    for broker, tps in sorted(by_preferred.items()):
        not_preferred = [tp for tp in tps if tp in leaders and leaders[tp] != broker]
        if len(not_preferred) / len(tps) > imbalance_percentage / 100:
            out[broker] = not_preferred
    return out


def auto_rebalance_candidates(ctx: ControllerContext, imbalance_percentage: int) -> list[TopicPartition]:
    """Kafka's checkAndTriggerAutoLeaderRebalance: for each preferred broker whose share of partitions
    led by someone else exceeds the ratio, the partitions it could lead again (live, in the ISR)."""
    if ctx.partitions_being_reassigned:
        return []
    preferred = {tp: replicas[0] for tp in ctx.all_partitions()
                 if (replicas := ctx.partition_replicas(tp)) and not ctx.is_topic_queued_for_deletion(tp.topic)}
    leaders = {tp: ctx.partition_leadership[tp].leader_and_isr.leader for tp in preferred
               if tp in ctx.partition_leadership}
    return [tp for broker, tps in imbalanced_leaderships(preferred, leaders, imbalance_percentage).items()
            for tp in tps if ctx.is_replica_online(broker, tp) and broker in ctx.partition_leadership[tp].leader_and_isr.isr]
