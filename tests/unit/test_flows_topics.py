"""The controller's topic flows (topics.py): new topics and partitions, and topic deletion with its
deletion manager (deletion.py) waiting for failed or dead replicas."""
from __future__ import annotations

from actors.controller.events import BrokerChange, PartitionModifications, TopicChange, TopicDeletion
from actors.controller.state_machines import ReplicaStateName as R
from actors.protocol import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest
from coordination import zkdata
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from tests.unit.flow_helpers import T0, T1, Cluster, of, partitions, stop_replica_answers


# -- topics -----------------------------------------------------------------------------------------

def test_a_new_topic_gets_state_znodes_and_its_replicas_are_told():
    c = Cluster([1, 2, 3], {})
    c.zk.create(zkdata.topic_path("n"), zkdata.TopicZNode.from_assignment({0: [3, 1], 1: [1, 2]}, None).encode())
    sent = c.run(TopicChange())
    assert (c.state(TopicPartition("n", 0)).leader, c.state(TopicPartition("n", 0)).isr) == (3, [3, 1])
    assert partitions(of(sent, LeaderAndIsrRequest)[3])[TopicPartition("n", 0)].is_new
    assert zkdata.topic_path("n") in c.watches.paths


def test_new_partitions_are_added_and_a_changed_assignment_is_put_back():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2]}})
    c.zk.set(zkdata.topic_path("t"), zkdata.TopicZNode.from_assignment({0: [3, 2], 1: [2, 3]}, None).encode())
    c.run(PartitionModifications(topic="t"))
    assert c.state(T1).leader == 2  # partition 1 created
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).assignment() == {0: [1, 2], 1: [2, 3]}


def test_partitions_added_to_a_topic_being_deleted_are_refused():
    c = Cluster([1, 2], {"t": {0: [1, 2]}})
    c.ctx.topics_to_be_deleted.add("t")
    c.zk.set(zkdata.topic_path("t"), zkdata.TopicZNode.from_assignment({0: [1, 2], 1: [2, 1]}, None).encode())
    c.run(PartitionModifications(topic="t"))
    assert T1 not in c.ctx.partition_leadership and zkdata.partition_state_path(T1) not in c.zk.nodes
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).assignment() == {0: [1, 2]}


# -- deletion ---------------------------------------------------------------------------------------

def test_a_failed_replica_deletion_halts_the_topic_until_that_broker_starts_again_then_it_is_retried():
    """Kafka's failReplicaDeletion: the replica goes Ineligible then back to Offline, the topic is
    ineligible, and no StopReplica deletes it until the deletion is resumed for it (its broker starts)."""
    c = Cluster([1, 2], {"t": {0: [1, 2]}, "kept": {0: [1, 2]}})
    c.zk.create(zkdata.delete_topic_path("t"))
    sent = c.run(TopicDeletion())
    assert all(partitions(r)[T0].delete_partition for r in of(sent, StopReplicaRequest).values())
    assert partitions(of(sent, UpdateMetadataRequest)[1])[T0].leader == -2  # brokers drop it from their caches
    stop_replica_answers(c, sent, errors={2: Errors.KAFKA_STORAGE_ERROR})
    assert c.ctx.replica_states[(T0, 1)] is R.ReplicaDeletionSuccessful
    assert c.ctx.replica_states[(T0, 2)] is R.OfflineReplica and "t" in c.ctx.topics_ineligible_for_deletion
    offline = of(c.scope.batch.build(c.ctx), StopReplicaRequest)  # OfflineReplica's StopReplica, no deletion
    assert [(p.delete_partition, p.leader_epoch) for p in partitions(offline[2]).values()] == [(False, -2)]
    c.zk.remove(zkdata.broker_path(2))
    c.register(2)  # broker 2 restarts
    again = c.run(BrokerChange())
    assert set(of(again, StopReplicaRequest)) == {2}
    stop_replica_answers(c, again)
    assert "t" not in c.ctx.all_topics and zkdata.topic_path("t") not in c.zk.nodes
    assert zkdata.delete_topic_path("t") not in c.zk.nodes
    assert zkdata.topic_path("kept") in c.zk.nodes and "kept" in c.ctx.all_topics


def test_deletion_waits_for_a_dead_broker_and_resumes_when_it_returns():
    c = Cluster([1, 2], {"t": {0: [1, 2]}})
    c.zk.remove(zkdata.broker_path(2))
    c.run(BrokerChange())
    c.zk.create(zkdata.delete_topic_path("t"))
    sent = c.run(TopicDeletion())
    assert "t" in c.ctx.topics_ineligible_for_deletion
    assert c.ctx.replica_states[(T0, 2)] is R.ReplicaDeletionIneligible
    stop_replica_answers(c, sent)
    assert "t" in c.ctx.all_topics  # broker 2's replica is not deleted yet
    c.register(2)
    sent = c.run(BrokerChange())
    assert set(of(sent, StopReplicaRequest)) == {2} and "t" not in c.ctx.topics_ineligible_for_deletion
    stop_replica_answers(c, sent)
    assert "t" not in c.ctx.all_topics and zkdata.topic_path("t") not in c.zk.nodes


def test_deleting_an_unknown_topic_or_with_deletion_disabled_removes_the_request_and_changes_nothing():
    c = Cluster([1, 2], {"t": {0: [1, 2]}}, delete_topic_enable=False)
    c.zk.create(zkdata.delete_topic_path("t"))
    c.zk.create(zkdata.delete_topic_path("nope"))
    c.run(TopicDeletion())
    assert c.zk.children(zkdata.DELETE_TOPICS) == [] and zkdata.topic_path("t") in c.zk.nodes
    assert not c.ctx.topics_to_be_deleted
