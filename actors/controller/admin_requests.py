"""The admin requests that only the controller's API makes, no znode (KIP-455): moving partitions to
new replicas or cancelling their moves (AlterPartitionReassignments, Kafka's onApiPartitionReassignment),
and listing the moves under way. Moves go through reassignment.py's own entry points, as a move written
to /admin/reassign_partitions does."""
from __future__ import annotations

from actors.controller import reassignment
from actors.controller.context import ReplicaAssignment
from actors.controller.decisions import api_reassignment_error
from actors.controller.events import ApiPartitionReassignment, ListPartitionReassignments
from actors.controller.flow import FlowScope, handles
from coordination.errors import ApiError, Errors
from coordination.zkdata import TopicPartition

NO_PARTITION = ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")


@handles(ApiPartitionReassignment)
def process_api_partition_reassignment(s: FlowScope, event: ApiPartitionReassignment) -> None:
    """Each partition with a valid target starts moving to it (a partition being moved starts again from
    its original replicas); each without one goes back to its original replicas (the adding ones are
    stopped and deleted, the leader moved back if it was one of them). Either way it leaves
    /admin/reassign_partitions, since the latest request wins and a failover must not start an older
    move again. Per partition None, or why not."""
    try:
        results: dict[TopicPartition, ApiError | None] = {}
        moves: dict[TopicPartition, ReplicaAssignment] = {}
        for (topic, partition), target in event.reassignments:
            tp = TopicPartition(topic, partition)
            current = s.ctx.partition_full_assignment(tp)
            if target is not None and (error := api_reassignment_error(s.ctx, tp, tuple(target))):
                results[tp] = error
            elif not current.replicas or s.ctx.is_topic_queued_for_deletion(tp.topic):
                results[tp] = NO_PARTITION
            elif target is not None:
                moves[tp] = ReplicaAssignment.for_reassignment(current.original_replicas, tuple(target))
            elif not current.is_being_reassigned:
                results[tp] = ApiError(Errors.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")
            else:
                moves[tp] = ReplicaAssignment(current.original_replicas)
        reassignment.remove_from_zk_reassignment(s, lambda tp, _replicas: tp in moves)
        for tp, move in moves.items():
            reassignment.on_partition_reassignment(s, tp, move)
            results[tp] = None
        event.reply.set_result(results)
    except Exception as e:
        event.reply.set_exception(e)
        raise


@handles(ListPartitionReassignments)
def process_list_partition_reassignments(s: FlowScope, event: ListPartitionReassignments) -> None:
    """The named partitions (every one being moved when None) that are being moved, with their
    assignments (replicas, adding, removing)."""
    chosen = s.ctx.partitions_being_reassigned if event.partitions is None else \
        [TopicPartition(*p) for p in event.partitions]
    event.reply.set_result({tp: a for tp in chosen if (a := s.ctx.partition_full_assignment(tp)).is_being_reassigned})
