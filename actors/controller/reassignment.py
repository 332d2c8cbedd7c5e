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
from typing import TYPE_CHECKING, Callable

from actors.controller.changes import ReassignElection
from actors.controller.context import LeaderIsrAndControllerEpoch, ReplicaAssignment
from actors.controller.events import PartitionReassignmentIsrChange
from actors.controller.state_machines import PartitionStateName as P, ReplicaStateName as R
from actors.controller.topics import write_topic_assignment
from actors.controller.zk_state_machines import leadership_from_record
from coordination import zkdata
from coordination.errors import MalformedZNodeError
from coordination.zkdata import TopicPartition

if TYPE_CHECKING:
    from actors.controller.controller import KafkaController

log = logging.getLogger(__name__)


def _read_reassignments(c: KafkaController) -> zkdata.ReassignPartitionsZNode | None:
    """/admin/reassign_partitions, or None; a malformed one is reported and removed so a new one can be sent."""
    try:
        return c.zk.get_znode(zkdata.ReassignPartitionsZNode, zkdata.REASSIGN_PARTITIONS)
    except MalformedZNodeError as e:
        log.error("%s Ignoring and removing a malformed reassignment: %s", c.prefix, e)
        c.zk.delete_partition_reassignment(c.ctx.epoch_zk_version)
        return None


def process_partition_reassignment_znode(c: KafkaController) -> set[TopicPartition]:
    """Read /admin/reassign_partitions and start every valid move in it; returns the partitions it named."""
    znode = _read_reassignments(c)
    if znode is None:
        return set()
    failed = []
    for entry in znode.partitions:
        tp = TopicPartition(entry.topic, entry.partition)
        error = _trigger(c, tp, tuple(entry.replicas))
        if error:
            log.warning("%s Failed reassignment of %s to %s through ZooKeeper: %s", c.prefix, tp, entry.replicas, error)
            failed.append(tp)
    if failed:
        remove_from_zk_reassignment(c, lambda tp, _replicas: tp in failed)
    return {TopicPartition(e.topic, e.partition) for e in znode.partitions}


def _trigger(c: KafkaController, tp: TopicPartition, target: tuple[int, ...]) -> str | None:
    ctx = c.ctx
    if ctx.is_topic_queued_for_deletion(tp.topic):
        return "UNKNOWN_TOPIC_OR_PARTITION: the topic is being deleted"
    if not ctx.partition_replicas(tp):
        return "UNKNOWN_TOPIC_OR_PARTITION: the partition does not exist"
    if not target or len(set(target)) != len(target):
        return "INVALID_REPLICA_ASSIGNMENT: empty or duplicate replicas"
    # a new target for a running move starts again from that move's original replicas
    on_partition_reassignment(c, tp, ReplicaAssignment.for_reassignment(
        ctx.partition_full_assignment(tp).original_replicas, target))
    return None


def on_partition_reassignment(c: KafkaController, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
    c.deletion.mark_topic_ineligible_for_deletion({tp.topic}, "topic reassignment in progress")
    _update_current_reassignment(c, tp, reassignment)
    if not _is_complete(c, tp, reassignment):
        log.info("%s Reassignment of %s to %s: waiting for %s to join the ISR", c.prefix, tp,
                 list(reassignment.target_replicas), list(reassignment.adding))
        _bump_leader_epoch_and_send(c, tp, reassignment.replicas)  # A1
        for r in reassignment.adding:  # A2
            c.rsm.handle_state_changes([(tp, r)], R.NewReplica)
        return
    c.rsm.handle_state_changes([(tp, r) for r in reassignment.adding], R.OnlineReplica)  # B1
    completed = ReplicaAssignment(reassignment.target_replicas)
    c.ctx.update_partition_full_assignment(tp, completed)  # B2
    _move_leader_if_required(c, tp, completed)  # B3
    _stop_removed_replicas(c, tp, reassignment.removing)  # B4, B5
    write_topic_assignment(c, tp.topic)  # B6
    remove_from_zk_reassignment(c, lambda p, replicas: p == tp and tuple(replicas) == completed.replicas)  # B7
    c.unwatch(zkdata.partition_state_path(tp))
    c.batch.add_update_metadata(c.ctx.live_or_shutting_down_broker_ids, [tp])  # B8
    c.deletion.resume_deletion_for_topics({tp.topic})
    log.info("%s Reassignment of %s to %s completed", c.prefix, tp, list(completed.replicas))


def _update_current_reassignment(c: KafkaController, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
    current = c.ctx.partition_full_assignment(tp)
    if current != reassignment:
        c.ctx.update_partition_full_assignment(tp, reassignment)
        write_topic_assignment(c, tp.topic)
        unneeded = [r for r in current.replicas if r not in reassignment.replicas]
        if unneeded:
            _stop_removed_replicas(c, tp, tuple(unneeded))
    c.watch_data(zkdata.partition_state_path(tp), lambda: PartitionReassignmentIsrChange(topic_partition=tp))


def _is_complete(c: KafkaController, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
    """All target replicas in the ISR, as ZooKeeper says now (the leader changes the ISR there)."""
    if not assignment.is_being_reassigned:
        return True
    record = c.zk.get_partition_states([tp]).get(tp)
    if record is None:
        return False
    c.ctx.partition_leadership[tp] = leadership_from_record(record)
    return set(assignment.target_replicas) <= set(record.state.isr)


def _bump_leader_epoch_and_send(c: KafkaController, tp: TopicPartition, recipients) -> None:
    """Same leader and ISR with leader epoch + 1, so replicas see the new assignment (Kafka's updateLeaderEpoch)."""
    for _ in range(5):
        current = c.ctx.partition_leadership.get(tp)
        if current is None or current.controller_epoch > c.ctx.epoch:
            return
        lai = current.leader_and_isr
        written, moved = c.psm.write_leaderships({tp: lai.new_leader_and_isr(lai.leader, lai.isr)})
        if tp in written:
            c.ctx.partition_leadership[tp] = LeaderIsrAndControllerEpoch(written[tp], c.ctx.epoch)
            c.batch.add_leader_and_isr(recipients, tp)
            return
        if not moved:
            return


def _move_leader_if_required(c: KafkaController, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
    leader = c.ctx.partition_leadership[tp].leader_and_isr.leader
    if leader in assignment.replicas and c.ctx.is_replica_online(leader):
        _bump_leader_epoch_and_send(c, tp, assignment.replicas)
    else:
        c.psm.handle_state_changes([tp], P.OnlinePartition, ReassignElection())


def _stop_removed_replicas(c: KafkaController, tp: TopicPartition, removed: tuple[int, ...]) -> None:
    replicas = [(tp, r) for r in removed]
    for target in (R.OfflineReplica, R.ReplicaDeletionStarted, R.ReplicaDeletionSuccessful, R.NonExistentReplica):
        c.rsm.handle_state_changes(replicas, target)


def remove_from_zk_reassignment(c: KafkaController, should_remove: Callable[[TopicPartition, list[int]], bool]) -> None:
    znode = _read_reassignments(c)
    if znode is None:
        return
    keep = [e for e in znode.partitions if not should_remove(TopicPartition(e.topic, e.partition), e.replicas)]
    if not keep:
        c.zk.delete_partition_reassignment(c.ctx.epoch_zk_version)
    elif len(keep) != len(znode.partitions):
        c.zk.set_partition_reassignment(zkdata.ReassignPartitionsZNode(partitions=keep), c.ctx.epoch_zk_version)


def process_partition_reassignment_isr_change(c: KafkaController, tp: TopicPartition) -> None:
    assignment = c.ctx.partition_full_assignment(tp)
    if assignment.is_being_reassigned and _is_complete(c, tp, assignment):
        on_partition_reassignment(c, tp, assignment)


def initialize_partition_reassignments(c: KafkaController) -> None:
    """On failover: moves written while no controller was active start; persisted ones resume."""
    in_znode = process_partition_reassignment_znode(c)
    maybe_resume_reassignments(c, lambda a: True, exclude=in_znode)


def maybe_resume_reassignments(c: KafkaController, should_resume: Callable[[ReplicaAssignment], bool],
                               exclude: set[TopicPartition] = frozenset()) -> None:
    for tp in c.ctx.partitions_being_reassigned:
        assignment = c.ctx.partition_full_assignment(tp)
        if tp not in exclude and should_resume(assignment):
            on_partition_reassignment(c, tp, assignment)

