"""An admin request that no znode can make, only the controller's API: cancelling partition
reassignments (KIP-455's AlterPartitionReassignments with no target replicas, as Kafka's
onApiPartitionReassignment handles it). It drives reassignment.py through that module's own entry points."""
from __future__ import annotations

from actors.controller import reassignment
from actors.controller.context import ReplicaAssignment
from actors.controller.events import CancelPartitionReassignments
from actors.controller.flow import FlowScope, handles
from coordination.errors import ApiError, Errors
from coordination.zkdata import TopicPartition


@handles(CancelPartitionReassignments)
def process_cancel_partition_reassignments(s: FlowScope, event: CancelPartitionReassignments) -> None:
    """Each partition being moved goes back to its original replicas (the adding ones are stopped and
    deleted, the leader moved back if it was one of them) and leaves /admin/reassign_partitions, so that a
    failover does not start the move again; per partition None, or why not."""
    try:
        results, originals = {}, {}
        for tp in (TopicPartition(*p) for p in event.partitions):
            assignment = s.ctx.partition_full_assignment(tp)
            if not assignment.replicas or s.ctx.is_topic_queued_for_deletion(tp.topic):
                results[tp] = ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            elif not assignment.is_being_reassigned:
                results[tp] = ApiError(Errors.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")
            else:
                originals[tp] = ReplicaAssignment(assignment.original_replicas)
        reassignment.remove_from_zk_reassignment(s, lambda tp, _replicas: tp in originals)
        for tp, original in originals.items():
            reassignment.on_partition_reassignment(s, tp, original)
            results[tp] = None
        event.reply.set_result(results)
    except Exception as e:
        event.reply.set_exception(e)
        raise
