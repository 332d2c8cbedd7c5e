"""Partition reassignment through /admin/reassign_partitions, with Kafka's whole protocol.

RS = replicas during the move (TRS followed by the rest of ORS), AR = adding
(TRS - ORS), RR = removing (ORS - TRS).
  Phase A (target replicas not all in the ISR yet): persist RS/AR/RR, bump the
  leader epoch and send LeaderAndIsr to ORS + TRS, start AR as NewReplica;
  then wait for the ISR to grow (ISR change of the partition's state znode).
  Phase B (TRS within the ISR): AR Online; RS = TRS; elect a leader from TRS if
  the current one is not in it (or is dead), else bump the epoch; RR Offline,
  then deleted with StopReplica; persist RS = TRS; remove the partition from
  /admin/reassign_partitions (the znode goes when empty); UpdateMetadata to all.
"""
from __future__ import annotations

import logging
from typing import Callable

from actors.controller.changes import ReassignElection
from actors.controller.context import ReplicaAssignment
from actors.controller.decisions import reassignment_complete, reassignment_error
from actors.controller.events import PartitionReassignment, PartitionReassignmentIsrChange
from actors.controller.flow import FlowScope, handles
from actors.controller.state_machines import PartitionStateName as P, ReplicaStateName as R
from coordination import zkdata
from coordination.errors import MalformedZNodeError
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)


def _read_reassignments(s: FlowScope) -> zkdata.ReassignPartitionsZNode | None:
    """/admin/reassign_partitions, or None; a malformed one is reported and removed so a new one can be sent."""
    try:
        return s.zk.get_znode(zkdata.ReassignPartitionsZNode, zkdata.REASSIGN_PARTITIONS)
    except MalformedZNodeError as e:
        log.error("%s Ignoring and removing a malformed reassignment: %s", s.prefix, e)
        s.zk.delete_paths([zkdata.REASSIGN_PARTITIONS])
        return None


@handles(PartitionReassignment)
def process_partition_reassignment_znode(s: FlowScope, _event: PartitionReassignment | None = None
                                         ) -> set[TopicPartition]:
    """Read /admin/reassign_partitions and start every valid move in it; returns the partitions it named."""
    znode = _read_reassignments(s)
    if znode is None:
        return set()
    failed = []
    for tp, entry in zip(znode.topic_partitions(), znode.partitions):
        target = tuple(entry.replicas)
        error = reassignment_error(s.ctx, tp, target)
        if error:
            log.warning("%s Failed reassignment of %s to %s through ZooKeeper: %s", s.prefix, tp, entry.replicas, error)
            failed.append(tp)
        else:  # a new target for a running move starts again from that move's original replicas
            on_partition_reassignment(s, tp, ReplicaAssignment.for_reassignment(
                s.ctx.partition_full_assignment(tp).original_replicas, target))
    if failed:
        remove_from_zk_reassignment(s, lambda tp, _replicas: tp in failed)
    return set(znode.topic_partitions())


def on_partition_reassignment(s: FlowScope, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
    s.deletion.mark_topic_ineligible_for_deletion({tp.topic}, "topic reassignment in progress")
    _update_current_reassignment(s, tp, reassignment)
    if not _is_complete(s, tp, reassignment):
        log.info("%s Reassignment of %s to %s: waiting for %s to join the ISR", s.prefix, tp,
                 list(reassignment.target_replicas), list(reassignment.adding))
        _bump_leader_epoch_and_send(s, tp, reassignment.replicas)  # A1
        for r in reassignment.adding:  # A2
            s.rsm.handle_state_changes([(tp, r)], R.NewReplica)
        return
    s.rsm.handle_state_changes([(tp, r) for r in reassignment.adding], R.OnlineReplica)  # B1
    completed = ReplicaAssignment(reassignment.target_replicas)
    s.ctx.update_partition_full_assignment(tp, completed)  # B2
    _move_leader_if_required(s, tp, completed)  # B3
    _stop_removed_replicas(s, tp, reassignment.removing)  # B4, B5
    s.write_topic_assignment(tp.topic)  # B6
    remove_from_zk_reassignment(s, lambda p, replicas: p == tp and tuple(replicas) == completed.replicas)  # B7
    s.watches.unwatch(zkdata.partition_state_path(tp))
    s.batch.add_update_metadata(s.ctx.live_or_shutting_down_broker_ids, [tp])  # B8
    s.deletion.resume_deletion_for_topics({tp.topic})
    log.info("%s Reassignment of %s to %s completed", s.prefix, tp, list(completed.replicas))


def _update_current_reassignment(s: FlowScope, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
    current = s.ctx.partition_full_assignment(tp)
    if current != reassignment:
        s.ctx.update_partition_full_assignment(tp, reassignment)
        s.write_topic_assignment(tp.topic)
        unneeded = [r for r in current.replicas if r not in reassignment.replicas]
        if unneeded:
            _stop_removed_replicas(s, tp, tuple(unneeded))
    s.watches.watch_data(zkdata.partition_state_path(tp), lambda: PartitionReassignmentIsrChange(topic_partition=tp))


def _is_complete(s: FlowScope, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
    """All target replicas in the ISR, as ZooKeeper says now (the leader changes the ISR there)."""
    in_zookeeper = s.sync_leaderships([tp]) if assignment.is_being_reassigned else {tp}
    leadership = s.ctx.partition_leadership.get(tp) if tp in in_zookeeper else None
    return reassignment_complete(assignment, leadership.leader_and_isr.isr if leadership else None)


def _bump_leader_epoch_and_send(s: FlowScope, tp: TopicPartition, recipients) -> None:
    """Same leader and ISR with leader epoch + 1, so replicas see the new assignment (Kafka's updateLeaderEpoch)."""
    if s.psm.bump_leader_epochs([tp]):
        s.batch.add_leader_and_isr(recipients, tp)


def _move_leader_if_required(s: FlowScope, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
    leader = s.ctx.partition_leadership[tp].leader_and_isr.leader
    if leader in assignment.replicas and s.ctx.is_replica_online(leader, tp):
        _bump_leader_epoch_and_send(s, tp, assignment.replicas)
    else:
        s.psm.handle_state_changes([tp], P.OnlinePartition, ReassignElection())


def _stop_removed_replicas(s: FlowScope, tp: TopicPartition, removed: tuple[int, ...]) -> None:
    replicas = [(tp, r) for r in removed]
    for target in (R.OfflineReplica, R.ReplicaDeletionStarted, R.ReplicaDeletionSuccessful, R.NonExistentReplica):
        s.rsm.handle_state_changes(replicas, target)


def remove_from_zk_reassignment(s: FlowScope, should_remove: Callable[[TopicPartition, list[int]], bool]) -> None:
    znode = _read_reassignments(s)
    if znode is None:
        return
    keep = [e for tp, e in zip(znode.topic_partitions(), znode.partitions) if not should_remove(tp, e.replicas)]
    if not keep:
        s.zk.delete_paths([zkdata.REASSIGN_PARTITIONS])
    elif len(keep) != len(znode.partitions):
        s.zk.set_partition_reassignment(zkdata.ReassignPartitionsZNode(partitions=keep))


@handles(PartitionReassignmentIsrChange)
def process_partition_reassignment_isr_change(s: FlowScope, event: PartitionReassignmentIsrChange) -> None:
    complete_reassignment_if_ready(s, event.topic_partition)


def complete_reassignment_if_ready(s: FlowScope, tp: TopicPartition) -> None:
    assignment = s.ctx.partition_full_assignment(tp)
    if assignment.is_being_reassigned and _is_complete(s, tp, assignment):
        on_partition_reassignment(s, tp, assignment)


def initialize_partition_reassignments(s: FlowScope) -> None:
    """On failover: moves written while no controller was active start; persisted ones resume."""
    in_znode = process_partition_reassignment_znode(s)
    maybe_resume_reassignments(s, lambda a: True, exclude=in_znode)


def maybe_resume_reassignments(s: FlowScope, should_resume: Callable[[ReplicaAssignment], bool],
                               exclude: set[TopicPartition] = frozenset()) -> None:
    for tp in s.ctx.partitions_being_reassigned:
        assignment = s.ctx.partition_full_assignment(tp)
        if tp not in exclude and should_resume(assignment):
            on_partition_reassignment(s, tp, assignment)
