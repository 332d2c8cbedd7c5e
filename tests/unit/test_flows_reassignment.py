"""The controller's reassignment flows (reassignment.py, KIP-455's phases): through ZooKeeper and
through the admin API (admin_requests.py), cancelled, invalid, racing a topic's deletion, and
completed by an ISR change notification (leadership.py)."""
from __future__ import annotations

from concurrent.futures import Future

from actors.controller.context import ReplicaAssignment
from actors.controller.events import (
    ApiPartitionReassignment,
    IsrChangeNotification,
    ListPartitionReassignments,
    PartitionReassignment,
    PartitionReassignmentIsrChange,
    TopicDeletion,
)
from actors.controller.state_machines import ReplicaStateName as R
from actors.protocol import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest
from coordination import zkdata
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from tests.unit.flow_helpers import T0, T1, Cluster, of, partitions, stop_replica_answers


# -- reassignment (KIP-455's phases) ------------------------------------------------------------------

def reassign(c: Cluster, tp: TopicPartition, replicas: list[int]) -> dict:
    c.zk.create(zkdata.REASSIGN_PARTITIONS, zkdata.ReassignPartitionsZNode(partitions=[
        zkdata.PartitionReplicas(topic=tp.topic, partition=tp.partition, replicas=replicas)]).encode())
    return c.run(PartitionReassignment())


def test_reassignment_phase_a_then_b_when_the_new_replica_joins_the_isr():
    c = Cluster([1, 2, 3, 4], {"t": {0: [1, 2, 3]}})
    sent = reassign(c, T0, [2, 3, 4])
    # phase A: RS = TRS + the rest of ORS, AR and RR persisted; leader epoch + 1 to all of them; AR New
    znode = c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t"))
    assert (znode.partitions["0"], znode.adding_replicas, znode.removing_replicas) == (
        [2, 3, 4, 1], {"0": [4]}, {"0": [1]})
    assert (c.state(T0).leader, c.state(T0).leader_epoch) == (1, 1)
    assert set(of(sent, LeaderAndIsrRequest)) == {1, 2, 3, 4}
    assert partitions(of(sent, LeaderAndIsrRequest)[4])[T0].adding_replicas == (4,)
    assert c.ctx.replica_states[(T0, 4)] is R.NewReplica
    assert zkdata.partition_state_path(T0) in c.watches.paths
    assert c.run(PartitionReassignmentIsrChange(topic_partition=T0)) == {}  # 4 not in the ISR yet: nothing
    # phase B: the leader took 4 into the ISR
    c.leader_changes_isr(T0, [1, 2, 3, 4])
    sent = c.run(PartitionReassignmentIsrChange(topic_partition=T0))
    znode = c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t"))
    assert (znode.partitions["0"], znode.adding_replicas, znode.removing_replicas) == ([2, 3, 4], {}, {})
    assert c.state(T0).leader == 2 and c.state(T0).isr == [2, 3, 4]  # the leader was a removed replica
    removed = partitions(of(sent, StopReplicaRequest)[1])[T0]
    # at the partition's epoch, newer than phase A's that broker 1 has, so its broker deletes it (not -2:
    # the topic is not being deleted)
    assert removed.delete_partition and removed.leader_epoch == c.state(T0).leader_epoch > 1
    assert (T0, 1) not in c.ctx.replica_states and c.ctx.replica_states[(T0, 4)] is R.OnlineReplica
    assert zkdata.REASSIGN_PARTITIONS not in c.zk.nodes
    assert zkdata.partition_state_path(T0) not in c.watches.paths


def test_a_reassignment_already_in_the_isr_completes_in_one_event_keeping_a_leader_in_the_target():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    sent = reassign(c, T0, [1, 2])
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).partitions["0"] == [1, 2]
    assert (c.state(T0).leader, c.state(T0).isr) == (1, [1, 2])
    assert c.state(T0).leader_epoch == 2  # phase A's bump (U3 takes 3 out of the ISR) then B3's
    assert set(of(sent, StopReplicaRequest)) == {3}
    assert zkdata.REASSIGN_PARTITIONS not in c.zk.nodes


def test_the_epoch_bump_of_a_reassignment_reads_again_a_state_a_leader_changed():
    c = Cluster([1, 2, 3, 4], {"t": {0: [1, 2, 3]}})
    c.leader_changes_isr(T0, [1, 2])  # the context still has [1, 2, 3] at zkVersion 0
    reassign(c, T0, [1, 2, 4])
    assert (c.state(T0).leader_epoch, c.state(T0).isr) == (1, [1, 2])


def test_a_cancelled_reassignment_goes_back_to_the_original_replicas_and_leaves_the_znode():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2]}})
    reassign(c, T0, [3, 2])
    phase_a_epoch = c.state(T0).leader_epoch
    reply = Future()
    sent = c.run(ApiPartitionReassignment(reassignments=((("t", 0), None),), reply=reply))
    assert reply.result() == {T0: None}
    # Kafka's originReplicas: RS without AR, in RS's order (TRS first), so the preferred replica may
    # change; the leader stays
    znode = c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t"))
    assert (znode.partitions["0"], znode.adding_replicas, znode.removing_replicas) == ([2, 1], {}, {})
    assert c.state(T0).leader == 1
    assert zkdata.REASSIGN_PARTITIONS not in c.zk.nodes and (T0, 3) not in c.ctx.replica_states
    # the adding replica's StopReplica carries the epoch it was given in phase A: Kafka 2.8's broker
    # ignores it (FENCED_LEADER_EPOCH) and keeps the replica, as kray's does (docs/KAFKA_DIFFERENCES.md, B2)
    stop = partitions(of(sent, StopReplicaRequest)[3])[T0]
    assert stop.delete_partition and stop.leader_epoch == phase_a_epoch
    again = Future()
    c.run(ApiPartitionReassignment(reassignments=((("t", 0), None), (("t", 7), None)), reply=again))
    assert {tp: e.error for tp, e in again.result().items()} == {
        T0: Errors.NO_REASSIGNMENT_IN_PROGRESS, TopicPartition("t", 7): Errors.UNKNOWN_TOPIC_OR_PARTITION}


def test_a_reassignment_through_the_api_is_validated_as_kafkas_then_moves_as_one_through_zookeeper():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2], 1: [2, 3]}})  # broker 4 is not alive
    reply = Future()
    c.run(ApiPartitionReassignment(reassignments=(
        (("t", 0), (3, 2)), (("t", 1), ()), (("t", 1), (3, 3)), (("t", 1), (-1, 2)), (("t", 1), (4, 2)),
        (("u", 0), (1, 2))), reply=reply))
    errors = {tp: e.error if e else None for tp, e in reply.result().items()}
    # one answer per partition: the last request for t-1 (a dead broker added) is the one answered
    assert errors == {T0: None, TopicPartition("t", 1): Errors.INVALID_REPLICA_ASSIGNMENT,
                      TopicPartition("u", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    znode = c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t"))
    assert (znode.partitions["0"], znode.adding_replicas, znode.removing_replicas) == ([3, 2, 1], {"0": [3]},
                                                                                       {"0": [1]})
    assert zkdata.REASSIGN_PARTITIONS not in c.zk.nodes  # nothing written there: the API's moves live in the context
    listed = Future()
    c.run(ListPartitionReassignments(reply=listed))
    assert {tp: (a.replicas, a.adding, a.removing) for tp, a in listed.result().items()} == {T0: ((3, 2, 1), (3,), (1,))}
    c.leader_changes_isr(T0, [1, 2, 3])
    c.run(PartitionReassignmentIsrChange(topic_partition=T0))
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).partitions["0"] == [3, 2]
    none = Future()
    c.run(ListPartitionReassignments(partitions=(("t", 0), ("t", 1)), reply=none))
    assert none.result() == {}


def test_an_api_reassignment_replaces_a_move_written_to_zookeeper_for_its_partition():
    c = Cluster([1, 2, 3, 4], {"t": {0: [1, 2], 1: [2, 3]}})
    c.zk.create(zkdata.REASSIGN_PARTITIONS, zkdata.ReassignPartitionsZNode(partitions=[
        zkdata.PartitionReplicas(topic="t", partition=0, replicas=[3, 4]),
        zkdata.PartitionReplicas(topic="t", partition=1, replicas=[1, 4])]).encode())
    c.run(PartitionReassignment())
    reply = Future()
    c.run(ApiPartitionReassignment(reassignments=((("t", 0), (4, 2)),), reply=reply))
    assert reply.result() == {T0: None}
    # the API's target starts from the original replicas; t-1's move through ZooKeeper goes on
    assert c.ctx.partition_full_assignment(T0) == ReplicaAssignment((4, 2, 1), (4,), (1,))
    remaining = c.zk.model(zkdata.ReassignPartitionsZNode, zkdata.REASSIGN_PARTITIONS)
    assert remaining.topic_partitions() == [TopicPartition("t", 1)]


def test_a_topic_deleted_during_its_reassignment_waits_for_the_reassignment_then_is_deleted():
    """kray, not Kafka (B3): Kafka 2.8 starts deleting at once."""
    c = Cluster([1, 2, 3], {"t": {0: [1, 2]}})
    reassign(c, T0, [1, 3])
    c.zk.create(zkdata.delete_topic_path("t"))
    sent = c.run(TopicDeletion())
    assert "t" in c.ctx.topics_ineligible_for_deletion
    assert not [p for r in of(sent, StopReplicaRequest).values() for p in r.partitions if p.delete_partition]
    c.leader_changes_isr(T0, [1, 2, 3])
    sent = c.run(PartitionReassignmentIsrChange(topic_partition=T0))
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).partitions["0"] == [1, 3]
    assert {b for b, r in of(sent, StopReplicaRequest).items() for p in r.partitions if p.delete_partition} == {1, 2, 3}
    stop_replica_answers(c, sent)
    assert zkdata.topic_path("t") not in c.zk.nodes


def test_an_invalid_reassignment_is_removed_from_the_znode_and_changes_nothing():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2]}})
    c.zk.create(zkdata.REASSIGN_PARTITIONS, zkdata.ReassignPartitionsZNode(partitions=[
        zkdata.PartitionReplicas(topic="t", partition=0, replicas=[2, 2]),
        zkdata.PartitionReplicas(topic="t", partition=5, replicas=[1])]).encode())
    assert c.run(PartitionReassignment()) == {}
    assert zkdata.REASSIGN_PARTITIONS not in c.zk.nodes
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).assignment() == {0: [1, 2]}


def test_an_isr_change_notification_refreshes_the_partitions_and_completes_a_waiting_reassignment():
    c = Cluster([1, 2, 3, 4], {"t": {0: [1, 2, 3], 1: [1, 2]}})
    reassign(c, T0, [2, 3, 4])
    c.leader_changes_isr(T0, [1, 2, 3, 4])
    c.leader_changes_isr(T1, [1])
    c.zk.create(f"{zkdata.ISR_CHANGE_NOTIFICATION}/{zkdata.ISR_CHANGE_PREFIX}0000000001",
                zkdata.IsrChangeNotificationZNode(partitions=[
                    zkdata.PartitionRef(topic="t", partition=0), zkdata.PartitionRef(topic="t", partition=1)]).encode())
    sent = c.run(IsrChangeNotification())
    assert c.ctx.partition_leadership[T1].leader_and_isr.isr == (1,)
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).partitions["0"] == [2, 3, 4]
    assert partitions(of(sent, UpdateMetadataRequest)[2])[T1].isr == (1,)
    assert c.zk.children(zkdata.ISR_CHANGE_NOTIFICATION) == []
