"""The admin API through real admin clients, kafka-python's KafkaAdminClient and confluent-kafka's
AdminClient (librdkafka): topics created, grown, configured and deleted, partitions moved and leaders
elected, each flow through the controller as its ZooKeeper-triggered twin (real ZooKeeper, real Ray,
loopback TCP)."""
from __future__ import annotations

import os
import signal
import uuid

import pytest
import ray
from confluent_kafka import KafkaException, TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource as CConfigResource,
    ConfigSource,
    NewPartitions as CNewPartitions,
    NewTopic as CNewTopic,
)
from kafka import KafkaAdminClient, TopicPartition as KTopicPartition
from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicAlreadyExistsError,
)

from actors.broker.network.admin_apis import topic_uuid
from coordination import admin, zkdata
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from tests.integration.conftest import send_to, wait_until
from tests.integration.test_kafka_clients import FAST


@pytest.fixture
def cluster(new_cluster):
    return new_cluster(broker=FAST)


def assignment(zk, topic: str) -> dict[int, list[int]]:
    return zk.get_znode(zkdata.TopicZNode, zkdata.topic_path(topic)).assignment()


def leaders_in_controllers_cache(cluster, zk, topic: str, partitions: int) -> bool:
    """What the controller's broker answers CreateTopics after: its cache has every partition's leader."""
    cache = ray.get(cluster.broker_actor(zk.get_controller_id()).metadata.remote())
    return len([tp for tp, v in cache["partitions"].items() if tp.topic == topic and v[0] >= 0]) == partitions


def test_kafka_python_admin_creates_alters_moves_elects_and_deletes_through_the_controller(cluster):
    cluster, zk = cluster
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers(), request_timeout_ms=30_000)
    try:
        # CreateTopics: sizes or an explicit assignment, configs; answered once every cache has the leaders
        client.create_topics([NewTopic("sized", 3, 2, topic_configs={"retention.ms": "60000"}),
                              NewTopic("placed", replica_assignments={0: [2, 3], 1: [3, 1]})], timeout_ms=30_000)
        assert leaders_in_controllers_cache(cluster, zk, "sized", 3) and leaders_in_controllers_cache(cluster, zk, "placed", 2)
        assert assignment(zk, "placed") == {0: [2, 3], 1: [3, 1]}
        assert {len(r) for r in assignment(zk, "sized").values()} == {2}
        assert admin.topic_config(zk, "sized") == {"retention.ms": "60000"}
        # DescribeLogDirs: each broker's replicas, where the assignments put them. CreateTopics answers once
        # the answering broker's cache has the leaders (Kafka's DelayedCreatePartitions), not every broker's:
        # a follower may not host its replica yet, and the client asks another broker which partitions
        # there are (seen here: a run whose client learnt of neither topic, another missing one replica)
        expected = {(b, topic, p) for topic in ("sized", "placed")
                    for p, replicas in assignment(zk, topic).items() for b in replicas}

        def hosted() -> set:
            return {(b["broker"], t["name"], p["partition_index"]) for b in client.describe_log_dirs()
                    for d in b["log_dirs"] for t in d["topics"] for p in t["partitions"]}
        wait_until(lambda: hosted() == expected, timeout=30, what="every replica in its broker's log dirs")
        client.create_topics([NewTopic("checked", 1, 1)], validate_only=True)
        assert "checked" not in zk.get_all_topics()
        # refused as `kray topics` refuses, with Kafka's codes, and nothing written
        for bad, error in [(NewTopic("sized", 1, 1), TopicAlreadyExistsError),
                           (NewTopic("bad/name", 1, 1), InvalidTopicError),
                           (NewTopic("too-many", 1, 4), InvalidReplicationFactorError),
                           (NewTopic("bad-config", 1, 1, topic_configs={"retention.ms": "soon"}),
                            InvalidConfigurationError)]:
            with pytest.raises(error):
                client.create_topics([bad])
        assert zk.get_all_topics() == {"placed", "sized"}

        # CreatePartitions
        client.create_partitions({"sized": NewPartitions(5)}, timeout_ms=30_000)
        assert len(assignment(zk, "sized")) == 5 and leaders_in_controllers_cache(cluster, zk, "sized", 5)
        with pytest.raises(InvalidPartitionsError):
            client.create_partitions({"sized": NewPartitions(4)})

        # configs: described with their sources, altered incrementally, what ZooKeeper holds
        described = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "sized")],
                                            config_filter="all")["topic"]["sized"]
        assert (described["retention.ms"]["value"], described["retention.ms"]["config_source"]) == (
            "60000", "DYNAMIC_TOPIC_CONFIG")
        assert (described["min.insync.replicas"]["value"], described["min.insync.replicas"]["config_source"]) == (
            "1", "DEFAULT_CONFIG")
        client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "sized", configs={
            "min.insync.replicas": "2", "retention.ms": (AlterConfigOp.DELETE, None)})])
        assert admin.topic_config(zk, "sized") == {"min.insync.replicas": "2"}

        # a reassignment, listed while it runs, then a preferred election back to the new first replica
        client.alter_partition_reassignments({KTopicPartition("placed", 0): [1, 2]}, timeout_ms=30_000)
        wait_until(lambda: assignment(zk, "placed")[0] == [1, 2], timeout=30, what="the move to [1, 2] done")
        assert client.list_partition_reassignments() == {}
        assert cluster.metadata_of(TopicPartition("placed", 0))[0] == 2  # the leader it had stays
        elected = client.elect_leaders(0, {"placed": [0]}, timeout_ms=30_000)
        assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
                for r in elected.replica_election_results] == [("placed", [(0, 0)])]
        assert cluster.metadata_of(TopicPartition("placed", 0))[0] == 1  # answered once the cache shows it

        # DeleteTopics: answered once the controller's broker's cache has dropped them (Kafka's
        # DelayedDeleteTopics); the controller deletes the logs, then the znodes
        client.delete_topics(["sized", "placed"], timeout_ms=30_000)
        assert not leaders_in_controllers_cache(cluster, zk, "sized", 5)
        wait_until(lambda: not zk.get_all_topics(), timeout=30, what="the topics' znodes deleted")
    finally:
        client.close()


def test_confluent_kafka_admin_creates_configures_elects_and_deletes(cluster):
    cluster, zk = cluster
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})

    def done(futures: dict) -> dict:
        return {k: f.result(timeout=60) for k, f in futures.items()}
    done(client.create_topics([CNewTopic("orders", 4, 3, config={"min.insync.replicas": "2"}),
                               CNewTopic("audit", 2, replica_assignment=[[3, 1], [1, 2]])], operation_timeout=30))
    assert leaders_in_controllers_cache(cluster, zk, "orders", 4)
    assert assignment(zk, "audit") == {0: [3, 1], 1: [1, 2]}
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        done(client.create_topics([CNewTopic("orders", 1, 1)]))
    with pytest.raises(KafkaException, match="INVALID_REPLICA_ASSIGNMENT"):  # broker 1 twice
        done(client.create_topics([CNewTopic("twice", 1, replica_assignment=[[1, 1]])]))
    done(client.create_partitions([CNewPartitions("audit", 3, replica_assignment=[[2, 3]])], operation_timeout=30))
    assert assignment(zk, "audit")[2] == [2, 3]

    # configs: incremental changes, then the legacy replace-all; the broker's own are read-only
    resource = CConfigResource("topic", "orders", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)])
    done(client.incremental_alter_configs([resource]))
    assert admin.topic_config(zk, "orders") == {"min.insync.replicas": "2", "retention.ms": "3600000",
                                                "cleanup.policy": "delete"}
    described = done(client.describe_configs([CConfigResource("topic", "orders")]))
    entries = next(iter(described.values()))
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == (
        "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert entries["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    done(client.alter_configs([CConfigResource("topic", "orders", set_config={"retention.ms": "7200000"})]))
    assert admin.topic_config(zk, "orders") == {"retention.ms": "7200000"}
    broker = next(iter(done(client.describe_configs([CConfigResource("broker", "1")])).values()))
    assert broker["min.insync.replicas"].is_read_only and broker["delete.topic.enable"].value == "true"
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        done(client.alter_configs([CConfigResource("topic", "orders", set_config={"segment.bytes": "-5"})]))
    assert admin.topic_config(zk, "orders") == {"retention.ms": "7200000"}

    # a preferred election of every partition: only the ones that needed one are answered
    admin.reassign_partitions(zk, admin.parse_reassignment(
        '{"version":1,"partitions":[{"topic":"audit","partition":1,"replicas":[2,1]}]}'))
    wait_until(lambda: assignment(zk, "audit")[1] == [2, 1], timeout=30, what="the move through ZooKeeper done")
    from confluent_kafka import ElectionType
    elected = client.elect_leaders(ElectionType.PREFERRED, None).result(timeout=60)
    assert elected == {CTopicPartition("audit", 1): None}
    assert cluster.metadata_of(TopicPartition("audit", 1))[0] == 2

    cluster_info = client.describe_cluster().result(timeout=60)
    assert (cluster_info.controller.id, sorted(n.id for n in cluster_info.nodes)) == (zk.get_controller_id(), [1, 2, 3])
    done(client.delete_topics(["orders", "audit"], operation_timeout=30))
    wait_until(lambda: not zk.get_all_topics(), timeout=30, what="the topics' znodes deleted")


def test_controller_requests_to_another_broker_are_refused_and_bad_ones_change_nothing(cluster):
    """The requests only the controller serves get NOT_CONTROLLER from the other brokers, as Kafka's (an
    AdminClient then asks the controller the metadata names); refusals leave ZooKeeper as it was."""
    cluster, zk = cluster
    controller = zk.get_controller_id()
    other = next(b for b in cluster.brokers if b != controller)
    C = CreateTopicsRequest.CreatableTopic
    create = CreateTopicsRequest(topics=[C(name="t", num_partitions=1, replication_factor=1, assignments=[],
                                           configs=[])], timeout_ms=5000, validate_only=False)
    assert [t.error_code for t in send_to(cluster, other, create, 7).topics] == [Errors.NOT_CONTROLLER]
    grow = CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
        name="t", count=2, assignments=None)], timeout_ms=5000, validate_only=False)
    assert [t.error_code for t in send_to(cluster, other, grow, 3).results] == [Errors.NOT_CONTROLLER]
    delete = DeleteTopicsRequest(topic_names=["t"], timeout_ms=5000)
    assert [t.error_code for t in send_to(cluster, other, delete, 5).responses] == [Errors.NOT_CONTROLLER]
    move = AlterPartitionReassignmentsRequest(timeout_ms=5000, topics=[
        AlterPartitionReassignmentsRequest.ReassignableTopic(name="t", partitions=[
            AlterPartitionReassignmentsRequest.ReassignableTopic.ReassignablePartition(partition_index=0,
                                                                                       replicas=[1])])])
    assert send_to(cluster, other, move, 0).error_code == Errors.NOT_CONTROLLER
    assert zk.get_all_topics() == set()

    # at the controller: twice the same topic, both sizes and an assignment, a null config; a timeout of 0
    # answers at once, REQUEST_TIMED_OUT for each topic acted on (ZkAdminManager), which is done all the same
    both = C(name="both", num_partitions=2, replication_factor=1, assignments=[
        C.CreatableReplicaAssignment(partition_index=0, broker_ids=[1])], configs=[])
    null = C(name="null", num_partitions=1, replication_factor=1, assignments=[],
             configs=[C.CreatableTopicConfig(name="retention.ms", value=None)])
    answer = send_to(cluster, controller, CreateTopicsRequest(topics=[create.topics[0], create.topics[0], both, null],
                                                              timeout_ms=5000, validate_only=False), 7)
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("t", Errors.INVALID_REQUEST), ("t", Errors.INVALID_REQUEST), ("both", Errors.INVALID_REQUEST),
        ("null", Errors.INVALID_REQUEST)]
    assert zk.get_all_topics() == set()
    u = C(name="u", num_partitions=1, replication_factor=1, assignments=[], configs=[])
    answer = send_to(cluster, controller, CreateTopicsRequest(topics=[create.topics[0], u, u], timeout_ms=0,
                                                              validate_only=False), 7)
    assert [(t.name, t.error_code, t.num_partitions) for t in answer.topics] == [
        ("t", Errors.REQUEST_TIMED_OUT, -1), ("u", Errors.INVALID_REQUEST, -1), ("u", Errors.INVALID_REQUEST, -1)]
    t_id = answer.topics[0].topic_id  # the topic's, timed out or not
    assert str(topic_uuid(zk.get_znode(zkdata.TopicZNode, zkdata.topic_path("t")).topic_id)) == str(t_id)
    wait_until(lambda: leaders_in_controllers_cache(cluster, zk, "t", 1), timeout=30, what="t's leader")
    grow = CreatePartitionsRequest(topics=grow.topics, timeout_ms=0, validate_only=False)
    assert [(t.name, t.error_code) for t in send_to(cluster, controller, grow, 3).results] == [
        ("t", Errors.REQUEST_TIMED_OUT)]
    wait_until(lambda: leaders_in_controllers_cache(cluster, zk, "t", 2), timeout=30, what="t-1's leader")
    answer = send_to(cluster, controller, CreateTopicsRequest(topics=[u], timeout_ms=30_000, validate_only=False), 7)
    assert [(t.name, t.error_code) for t in answer.topics] == [("u", 0)]
    answer = send_to(cluster, controller, DeleteTopicsRequest(topic_names=["u", "nope"], timeout_ms=0), 5)
    assert [(t.name, t.error_code) for t in answer.responses] == [
        ("u", Errors.REQUEST_TIMED_OUT), ("nope", Errors.UNKNOWN_TOPIC_OR_PARTITION)]
    wait_until(lambda: zk.get_all_topics() == {"t"}, timeout=30, what="u's znodes deleted")
    # v6 deletes by topic id; an unknown id is UNKNOWN_TOPIC_ID
    D = DeleteTopicsRequest.DeleteTopicState
    answer = send_to(cluster, controller, DeleteTopicsRequest(topics=[
        D(name=None, topic_id=t_id), D(name=None, topic_id=uuid.uuid4())], timeout_ms=30_000), 6)
    assert [(t.name, t.error_code) for t in answer.responses] == [("t", 0), (None, Errors.UNKNOWN_TOPIC_ID)]
    wait_until(lambda: not zk.get_all_topics(), timeout=30, what="t's znodes deleted")


def test_partitions_cannot_be_added_to_a_topic_being_reassigned(cluster):
    """CreatePartitions while a move of the topic waits for its new replica (whose broker is stopped) is
    REASSIGNMENT_IN_PROGRESS, as ZkAdminManager answers, and changes nothing; once the move is done the
    topic grows. (Not cancelled: Kafka 2.8's cancellation leaves the adding replica's log behind,
    KAFKA-13972.)"""
    cluster, zk = cluster
    controller = zk.get_controller_id()
    stays, stopped = [b for b in cluster.brokers if b != controller][:2]
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers(), request_timeout_ms=30_000)
    try:
        client.create_topics([NewTopic("moving", replica_assignments={0: [stays]})], timeout_ms=30_000)
    finally:
        client.close()
    R = AlterPartitionReassignmentsRequest.ReassignableTopic
    move = AlterPartitionReassignmentsRequest(timeout_ms=30_000, topics=[R(name="moving", partitions=[
        R.ReassignablePartition(partition_index=0, replicas=[stopped])])])
    grow = CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
        name="moving", count=2, assignments=[CreatePartitionsRequest.CreatePartitionsTopic.CreatePartitionsAssignment(
            broker_ids=[stays])])], timeout_ms=30_000, validate_only=False)

    def moving() -> bool:
        return bool(admin.list_reassignments(zk.get_topic_znodes(["moving"])))
    pid = ray.get(cluster.broker_actor(stopped).info.remote())["pid"]
    os.kill(pid, signal.SIGSTOP)  # it cannot fetch: the move waits for it to join the ISR
    try:
        answer = send_to(cluster, controller, move, 0)
        assert (answer.error_code, [p.error_code for t in answer.responses for p in t.partitions]) == (0, [0])
        wait_until(moving, timeout=30, what="the move in the topic's znode")
        assert [(t.name, t.error_code, t.error_message) for t in send_to(cluster, controller, grow, 3).results] == [
            ("moving", Errors.REASSIGNMENT_IN_PROGRESS,
             "A partition reassignment is in progress for the topic 'moving'.")]
        assert list(assignment(zk, "moving")) == [0]
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(lambda: not moving(), timeout=60, what="the move done")
    assert [(t.name, t.error_code) for t in send_to(cluster, controller, grow, 3).results] == [("moving", 0)]
    assert assignment(zk, "moving") == {0: [stopped], 1: [stays]}
