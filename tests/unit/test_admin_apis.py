"""The admin API's pure parts: DescribeConfigs' entries and sources, IncrementalAlterConfigs' operations,
a named replica assignment's checks, topic ids on the wire, and the wait for the metadata cache; and
what CreateTopics, DeleteTopics and CreatePartitions answer, against ZooKeeper in a dict."""
from __future__ import annotations

import asyncio
import base64
from types import SimpleNamespace

import pytest
from kazoo.exceptions import BadVersionError, NodeExistsError
from kafka.protocol.admin import CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest

from actors.broker.network.admin_apis import (
    APPEND,
    BROKER,
    DELETE,
    SET,
    SUBTRACT,
    ZERO_UUID,
    AdminApis,
    InvalidRequestException,
    MetadataWaits,
    incremental_change,
    topic_uuid,
)
from actors.broker.network.api_versions import API_VERSIONS
from actors.broker.configs import ConfigSource, ConfigType, describe_broker_config, describe_topic_config
from actors.broker.metadata_cache import MetadataCache, Snapshot
from actors.broker.network.network import RequestContext
from actors.config import BrokerConfig, ClusterConfig, ControllerConfig
from actors.protocol import PartitionState
from coordination import admin, zkdata
from coordination.admin import validate_replica_assignment
from coordination.errors import Errors, InvalidReplicaAssignmentException
from coordination.zkdata import TopicPartition, TopicZNode, new_topic_id


def test_kafka_28_version_ranges_of_the_admin_apis():
    assert {key: API_VERSIONS[key][1:] for key in (19, 20, 37, 32, 33, 44, 45, 46, 43, 35, 60)} == {
        19: (2, 7), 20: (1, 6), 37: (0, 3), 32: (1, 4), 33: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0),
        43: (0, 2), 35: (1, 2), 60: (0, 0)}


def test_a_topic_config_comes_from_its_override_then_the_brokers_setting_then_kafkas_default():
    entries = {e.name: e for e in describe_topic_config({"retention.ms": "5000"}, BrokerConfig(min_insync_replicas=2),
                                                        ControllerConfig())}
    assert len(entries) == 26 and not any(e.read_only for e in entries.values())
    retention = entries["retention.ms"]
    assert (retention.value, retention.source, retention.type) == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG,
                                                                   ConfigType.LONG)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "5000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG)]
    isr = entries["min.insync.replicas"]
    assert (isr.value, isr.source) == ("2", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.value, s.source) for s in isr.synonyms] == [("2", ConfigSource.STATIC_BROKER_CONFIG),
                                                           ("1", ConfigSource.DEFAULT_CONFIG)]
    assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == (
        str(BrokerConfig().log_segment_bytes), ConfigSource.DEFAULT_CONFIG)  # kray's default stands for Kafka's
    assert (entries["compression.type"].value, entries["cleanup.policy"].type) == ("producer", ConfigType.LIST)


def test_the_brokers_settings_are_read_only_under_their_kafka_names():
    entries = {e.name: e for e in describe_broker_config(BrokerConfig(log_retention_ms=1000),
                                                         ControllerConfig(delete_topic_enable=False))}
    assert all(e.read_only for e in entries.values())
    assert (entries["log.retention.ms"].value, entries["log.retention.ms"].source) == (
        "1000", ConfigSource.STATIC_BROKER_CONFIG)
    assert (entries["delete.topic.enable"].value, entries["delete.topic.enable"].type) == ("false", ConfigType.BOOLEAN)
    assert entries["num.partitions"].source == ConfigSource.DEFAULT_CONFIG
    assert not [name for name in entries if " " in name or "kray" in name]  # kray's own settings are left out


@pytest.mark.parametrize("current, ops, after", [
    ({"a": "1"}, [("b", SET, "2")], {"a": "1", "b": "2"}),
    ({"a": "1"}, [("a", DELETE, None), ("c", DELETE, None)], {}),  # deleting what is not set is no error
    ({}, [("cleanup.policy", APPEND, "delete")], {"cleanup.policy": "delete"}),
    ({"leader.replication.throttled.replicas": "0:1,1:2"},
     [("leader.replication.throttled.replicas", APPEND, "1:2,2:3")],
     {"leader.replication.throttled.replicas": "0:1,1:2,2:3"}),
    ({"follower.replication.throttled.replicas": "0:1,1:2"},
     [("follower.replication.throttled.replicas", SUBTRACT, "0:1")], {"follower.replication.throttled.replicas": "1:2"}),
])
def test_incremental_alter_configs_operations(current, ops, after):
    before = dict(current)
    assert incremental_change(current, ops) == after
    assert current == before  # the overrides read are not changed in place


@pytest.mark.parametrize("ops, message", [
    ([("a", SET, "1"), ("a", DELETE, None)], "duplicate config keys"),
    ([("retention.ms", APPEND, "5")], "append is not allowed"),
    ([("retention.ms", SET, None)], "Null value"),
    ([("retention.ms", 7, "5")], "Unknown config operation"),
])
def test_incremental_alter_configs_refusals(ops, message):
    with pytest.raises(InvalidRequestException, match=message):
        incremental_change({}, ops)


@pytest.mark.parametrize("assignment, message", [
    ({0: [1, 1]}, "Duplicate replica assignment"),
    ({0: [1, 2], 1: [1]}, "same number of replicas"),
    ({0: [1], 2: [2]}, "consecutive 0-based"),
    ({0: []}, "Empty replica list"),
    ({}, "no partitions"),
])
def test_a_named_replica_assignment_is_checked_as_kafkas_create_topic(assignment, message):
    with pytest.raises(InvalidReplicaAssignmentException, match=message):
        validate_replica_assignment(assignment)


def test_a_valid_named_assignment_passes():
    validate_replica_assignment({1: [3, 1], 0: [1, 2]})


def test_a_topic_id_from_zookeeper_is_the_same_uuid_on_the_wire():
    topic_id = new_topic_id()
    wire = topic_uuid(topic_id)
    assert base64.urlsafe_b64encode(wire.bytes).decode().rstrip("=") == topic_id
    assert topic_uuid(None).int == 0


def test_a_wait_ends_when_the_metadata_shows_it_or_at_its_timeout():
    async def run():
        waits, seen = MetadataWaits(), {"done": False}
        waiting = asyncio.ensure_future(waits.until(lambda: seen["done"], 5000))
        await asyncio.sleep(0.01)
        waits.changed()  # not yet
        assert not waiting.done()
        seen["done"] = True
        waits.changed()
        assert await waiting is True
        assert await waits.until(lambda: False, 20) is False
        assert await waits.until(lambda: False, 0) is False  # a timeout of 0 answers at once
    asyncio.run(run())


def test_broker_resources_name_this_broker_and_its_settings_cannot_be_altered():
    apis = AdminApis(1, None, MetadataCache(), ClusterConfig(zk_connect="127.0.0.1:2181"), lambda: "cluster",
                     lambda: None, lambda wanted: [])
    assert {e.name for e in apis._described(BROKER, "1")} >= {"min.insync.replicas", "num.partitions"}
    assert apis._described(BROKER, "") == []  # the cluster's dynamic defaults: kray has none
    for name, message in [("2", "Unexpected broker id, expected 1"), ("x", "must be an integer")]:
        with pytest.raises(InvalidRequestException, match=message):
            apis._described(BROKER, name)
    with pytest.raises(InvalidRequestException, match="Cannot update these configs dynamically"):
        apis._alter(BROKER, "1", lambda current: {"log.retention.ms": "5"}, False)
    apis._alter(BROKER, "1", lambda current: {}, False)  # nothing to change: nothing refused
    with pytest.raises(InvalidRequestException, match="Unsupported resource type"):
        apis._described(8, "1")


class InMemoryZk:
    """The KrayZkClient calls the topic admin functions make, on a dict of znodes (path: data, version);
    a transaction is applied whole at its commit."""

    def __init__(self, brokers=(1, 2, 3)):
        self.nodes: dict[str, tuple[bytes, int]] = {zkdata.broker_path(b): (b"", 0) for b in brokers}
        self.kazoo = self

    def get(self, path: str):
        if path not in self.nodes:
            return None
        data, version = self.nodes[path]
        return data, SimpleNamespace(version=version)

    def exists(self, path: str):
        got = self.get(path)
        return got and got[1]

    def create(self, path: str, data: bytes = b"", makepath: bool = False) -> None:
        if path in self.nodes:
            raise NodeExistsError(path)
        self.nodes[path] = (data, 0)

    def set(self, path: str, data: bytes, version: int = -1) -> None:
        if version not in (-1, self.nodes[path][1]):
            raise BadVersionError(path)
        self.nodes[path] = (data, self.nodes[path][1] + 1)

    def children(self, path: str) -> list[str]:
        prefix = path + "/"
        return sorted({p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)})

    def get_all_topics(self) -> set[str]:
        return set(self.children(zkdata.TOPICS))

    def get_all_broker_ids(self) -> list[int]:
        return sorted(int(b) for b in self.children(zkdata.BROKER_IDS))

    def until_connected(self, request):
        return request()

    def transaction(self):
        ops = []
        return SimpleNamespace(create=lambda path, data: ops.append((self.create, path, data)),
                               set_data=lambda path, data: ops.append((self.set, path, data)),
                               commit=lambda: [write(path, data) for write, path, data in ops])

    def add_topic(self, topic: str, **znode) -> TopicZNode:
        made = TopicZNode(topic_id=new_topic_id(), **znode)
        self.create(zkdata.topic_path(topic), made.encode())
        return made

    def topic(self, topic: str) -> TopicZNode:
        return zkdata.decode(TopicZNode, zkdata.topic_path(topic), self.nodes[zkdata.topic_path(topic)][0])


def led(*partitions: tuple[str, int]) -> MetadataCache:
    """A metadata cache in which each partition has broker 1 as its leader."""
    cache = MetadataCache()
    cache.snapshot = Snapshot(partitions={TopicPartition(t, p): PartitionState(t, p, 1, 1, 0, (1,), 0, (1,))
                                          for t, p in partitions})
    return cache


def active_controllers_apis(zk: InMemoryZk, cache: MetadataCache | None = None) -> AdminApis:
    apis = AdminApis(1, zk, cache or MetadataCache(), ClusterConfig(zk_connect="127.0.0.1:2181"), lambda: "cluster",
                     lambda: None, lambda wanted: [])
    apis._is_controller = lambda: asyncio.sleep(0, True)
    return apis


def ask(handler, api_key: int, version: int, request):
    return asyncio.run(handler(RequestContext(api_key, version, 1, "test", "127.0.0.1:1"), request))


def created(name: str, partitions: int = 2) -> CreateTopicsRequest.CreatableTopic:
    return CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                                              assignments=[], configs=[])


@pytest.mark.parametrize("timeout_ms", [0, -1, 50])
def test_create_topics_answers_request_timed_out_for_each_topic_created_whose_leaders_it_did_not_see(timeout_ms):
    """ZkAdminManager.createTopics: a timeout <= 0 answers at once, REQUEST_TIMED_OUT for each topic
    created (one that failed keeps its error); KafkaApis then resets the sizes and configs, not the id."""
    zk = InMemoryZk()
    zk.add_topic("old", partitions={"0": [1]})
    answer = ask(active_controllers_apis(zk).create_topics, 19, 7, CreateTopicsRequest(
        topics=[created("new"), created("old")], timeout_ms=timeout_ms, validate_only=False))
    assert [(t.name, t.error_code, t.error_message, t.topic_id, t.num_partitions, t.replication_factor, t.configs)
            for t in answer.topics] == [
        ("new", Errors.REQUEST_TIMED_OUT, None, topic_uuid(zk.topic("new").topic_id), -1, -1, []),
        ("old", Errors.TOPIC_ALREADY_EXISTS, "Topic 'old' already exists.", ZERO_UUID, -1, -1, [])]
    assert len(zk.topic("new").partitions) == 2  # created all the same


def test_create_topics_validate_only_answers_none_and_no_topic_id_whatever_the_timeout():
    zk = InMemoryZk()
    answer = ask(active_controllers_apis(zk).create_topics, 19, 7, CreateTopicsRequest(
        topics=[created("checked")], timeout_ms=0, validate_only=True))
    [t] = answer.topics
    assert (t.error_code, t.topic_id, t.num_partitions, t.replication_factor) == (0, ZERO_UUID, 2, 1)
    assert len(t.configs) == 26 and zk.get_all_topics() == set()


@pytest.mark.parametrize("timeout_ms", [0, -1])
def test_delete_topics_with_a_timeout_of_0_answers_request_timed_out_for_each_topic_marked(timeout_ms):
    zk = InMemoryZk()
    for topic in ("t", "marked"):
        zk.add_topic(topic, partitions={"0": [1]})
    zk.create(zkdata.delete_topic_path("marked"))
    apis = active_controllers_apis(zk, led(("t", 0), ("marked", 0)))
    answer = ask(apis.delete_topics, 20, 5, DeleteTopicsRequest(topic_names=["t", "marked", "gone"],
                                                                 timeout_ms=timeout_ms))
    assert [(t.name, t.error_code, t.error_message) for t in answer.responses] == [
        ("t", Errors.REQUEST_TIMED_OUT, None), ("marked", Errors.REQUEST_TIMED_OUT, None),
        ("gone", Errors.UNKNOWN_TOPIC_OR_PARTITION, None)]
    assert zk.get(zkdata.delete_topic_path("t")) is not None  # marked all the same


def grown(name: str, count: int) -> CreatePartitionsRequest.CreatePartitionsTopic:
    return CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=count, assignments=None)


@pytest.mark.parametrize("timeout_ms", [0, -1])
def test_create_partitions_with_a_timeout_of_0_answers_request_timed_out_for_each_topic_grown(timeout_ms):
    zk = InMemoryZk()
    for topic in ("t", "u"):
        zk.add_topic(topic, partitions={"0": [1]})
    apis = active_controllers_apis(zk, led(("t", 0), ("t", 1), ("u", 0)))  # even with every leader known
    to_9 = CreatePartitionsRequest.CreatePartitionsTopic(
        name="u", count=2, assignments=[CreatePartitionsRequest.CreatePartitionsTopic.CreatePartitionsAssignment(
            broker_ids=[9])])
    answer = ask(apis.create_partitions, 37, 3, CreatePartitionsRequest(
        topics=[grown("t", 2), to_9], timeout_ms=timeout_ms, validate_only=False))
    assert [(t.name, t.error_code, t.error_message) for t in answer.results] == [
        ("t", Errors.REQUEST_TIMED_OUT, None),
        ("u", Errors.INVALID_REPLICA_ASSIGNMENT, "Unknown broker(s) in replica assignment: 9.")]
    assert len(zk.topic("t").partitions) == 2  # grown all the same
    answer = ask(apis.create_partitions, 37, 3, CreatePartitionsRequest(
        topics=[grown("t", 3)], timeout_ms=timeout_ms, validate_only=True))
    assert [(t.name, t.error_code) for t in answer.results] == [("t", 0)]
    assert len(zk.topic("t").partitions) == 2


@pytest.mark.parametrize("adding, removing", [({"0": [2]}, {"0": [1]}), ({"1": [3]}, {}), ({}, {"0": [1]})])
@pytest.mark.parametrize("validate_only", [False, True])
def test_create_partitions_during_a_reassignment_of_the_topic_is_reassignment_in_progress(adding, removing,
                                                                                          validate_only):
    """ZkAdminManager.createPartitions refuses a topic whose znode names replicas being added or removed;
    kafka-topics --alter --partitions (AdminZkClient.addPartitions) does not."""
    zk = InMemoryZk()
    before = zk.add_topic("t", partitions={"0": [2, 1], "1": [1, 3]}, adding_replicas=adding,
                          removing_replicas=removing)
    answer = ask(active_controllers_apis(zk).create_partitions, 37, 3, CreatePartitionsRequest(
        topics=[grown("t", 3)], timeout_ms=0, validate_only=validate_only))
    assert [(t.name, t.error_code, t.error_message) for t in answer.results] == [
        ("t", Errors.REASSIGNMENT_IN_PROGRESS, "A partition reassignment is in progress for the topic 't'.")]
    assert zk.topic("t") == before
    assert list(admin.add_partitions(zk, "t", 3)) == [2] and zk.topic("t").adding_replicas == adding
