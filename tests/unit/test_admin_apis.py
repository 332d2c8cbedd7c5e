"""The admin API's pure parts: DescribeConfigs' entries and sources, IncrementalAlterConfigs' operations,
a named replica assignment's checks, topic ids on the wire, and the wait for the metadata cache."""
from __future__ import annotations

import asyncio
import base64

import pytest

from actors.broker.admin_apis import (
    APPEND,
    DELETE,
    SET,
    SUBTRACT,
    InvalidRequestException,
    MetadataWaits,
    incremental_change,
    topic_uuid,
)
from actors.broker.api_versions import API_VERSIONS
from actors.broker.configs import ConfigSource, ConfigType, describe_broker_config, describe_topic_config
from actors.config import BrokerConfig, ControllerConfig
from coordination.admin import validate_replica_assignment
from coordination.errors import InvalidReplicaAssignmentException
from coordination.zkdata import new_topic_id


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
    from actors.broker.admin_apis import BROKER, AdminApis
    from actors.broker.metadata_cache import MetadataCache
    from actors.config import ClusterConfig

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
