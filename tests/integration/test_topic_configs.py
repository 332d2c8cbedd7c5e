"""Topic configs in ZooKeeper, as Kafka keeps them (real ZooKeeper): validated at creation and at
`kafka-configs --alter`, announced under /config/changes, heard by brokers in order, and read by the
controller for unclean elections; producer id blocks claimed without overlap."""
from __future__ import annotations

import threading
import time

import pytest

from actors.broker.log.log_config import LogConfig
from actors.config import BrokerConfig
from actors.controller.zk_state_machines import topic_unclean_overrides
from coordination import admin, zkdata
from coordination.config_changes import ConfigChangeListener
from coordination.errors import InvalidConfigurationException, KrayError
from coordination.producer_ids import ProducerIdManager


@pytest.fixture
def topic(zk):
    for b in (1, 2, 3):
        zk.register_broker(b, zkdata.BrokerIdZNode.plaintext("127.0.0.1", 9092 + b))
    admin.create_topic(zk, "t", 2, 2, config={"retention.ms": "1000"})
    return "t"


@pytest.mark.parametrize("config, message", [
    ({"min.insync.replicas": "zero"}, "Invalid value zero for configuration min.insync.replicas"),
    ({"min.insync.replicas": "0"}, "Value must be at least 1"),
    ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
    ({"cleanup.policy": "compact"}, "compaction"),
    ({"unclean.leader.election.enable": "yes"}, "true or false"),
])
def test_bad_configs_are_refused_at_creation_and_change_nothing(zk, config, message):
    for b in (1, 2):
        zk.register_broker(b, zkdata.BrokerIdZNode.plaintext("127.0.0.1", 9092 + b))
    with pytest.raises(InvalidConfigurationException, match=message):
        admin.create_topic(zk, "bad", 1, 1, config=config)
    assert zk.get(zkdata.topic_path("bad")) is None and zk.get(zkdata.topic_config_path("bad")) is None


def test_alter_writes_the_config_then_a_change_notification_and_bad_input_changes_nothing(zk, topic):
    assert admin.alter_topic_config(zk, topic, {"min.insync.replicas": "2"}, ["retention.ms"]) == \
        {"min.insync.replicas": "2"}
    assert zk.get_znode(zkdata.TopicConfigZNode, zkdata.topic_config_path(topic)).config == {"min.insync.replicas": "2"}
    [change] = zk.children(zkdata.CONFIG_CHANGES)
    assert change.startswith("config_change_") and len(change) == len("config_change_") + 10
    notification = zk.get_znode(zkdata.ConfigChangeNotificationZNode, f"{zkdata.CONFIG_CHANGES}/{change}")
    assert (notification.version, notification.entity()) == (2, ("topics", "t"))
    for bad in ({"min.insync.replicas": "-3"}, {"segment.bytes": "1"}):
        with pytest.raises(InvalidConfigurationException):
            admin.alter_topic_config(zk, topic, bad)
    with pytest.raises(InvalidConfigurationException, match="not set"):
        admin.alter_topic_config(zk, topic, {}, ["retention.bytes"])
    with pytest.raises(KrayError, match="does not exist"):
        admin.alter_topic_config(zk, "nope", {"retention.ms": "5"})
    assert len(zk.children(zkdata.CONFIG_CHANGES)) == 1
    assert zk.get_znode(zkdata.TopicConfigZNode, zkdata.topic_config_path(topic)).config == {"min.insync.replicas": "2"}


def test_a_broker_hears_every_topics_config_at_start_then_each_change_once_in_order(zk, topic):
    heard, lock = [], threading.Lock()

    def on_config(t, overrides):
        with lock:
            heard.append((t, dict(overrides)))

    zk.kazoo.create(f"{zkdata.CONFIG_CHANGES}/{zkdata.CONFIG_CHANGE_PREFIX}", b"{not json", sequence=True)
    listener = ConfigChangeListener(zk, on_config)
    try:
        assert heard == [("t", {"retention.ms": "1000"})]  # at start, from /config/topics

        def heard_at_least(n: int) -> None:
            deadline = time.monotonic() + 10
            while len(heard) < n and time.monotonic() < deadline:
                time.sleep(0.05)
        admin.alter_topic_config(zk, topic, {"retention.ms": "2000"})
        heard_at_least(2)
        zk.kazoo.create(f"{zkdata.CONFIG_CHANGES}/{zkdata.CONFIG_CHANGE_PREFIX}", b"[]", sequence=True)  # malformed
        admin.alter_topic_config(zk, topic, {"retention.ms": "3000", "min.insync.replicas": "2"})
        heard_at_least(3)
        time.sleep(0.3)  # and nothing more comes
        assert [h[1].get("retention.ms") for h in heard] == ["1000", "2000", "3000"]
    finally:
        listener.stop()


def test_broker_log_configs_take_the_topics_overrides_over_the_defaults():
    defaults = BrokerConfig(min_insync_replicas=1, log_retention_ms=99, log_segment_bytes=4096)
    config = LogConfig.from_overrides(defaults, {"min.insync.replicas": "2", "compression.type": "lz4"})
    assert (config.min_insync_replicas, config.retention_ms, config.segment_bytes) == (2, 99, 4096)


def test_the_controller_reads_a_topics_unclean_election_setting(zk, topic):
    admin.alter_topic_config(zk, topic, {"unclean.leader.election.enable": "true"})
    zk.kazoo.create(zkdata.topic_config_path("broken"), b"{nope", makepath=True)
    assert topic_unclean_overrides(zk, ["t", "broken", "absent"]) == {"t": True}


def test_producer_id_blocks_never_overlap_across_brokers(zk):
    managers = [ProducerIdManager(zk, b, block_size=10) for b in (1, 2, 3)]
    ids: list[int] = []
    lock = threading.Lock()

    def take(m: ProducerIdManager) -> None:
        for _ in range(35):
            pid = m.generate_producer_id()
            with lock:
                ids.append(pid)

    threads = [threading.Thread(target=take, args=(m,)) for m in managers for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == len(set(ids)) == 210
    block = zk.get_znode(zkdata.ProducerIdBlockZNode, zkdata.LATEST_PRODUCER_ID_BLOCK)
    assert int(block.block_end) + 1 == int(block.block_start) + 10 and int(block.block_end) >= max(ids)


def test_a_malformed_producer_id_block_is_a_clear_error_and_writes_nothing(zk):
    zk.kazoo.set(zkdata.LATEST_PRODUCER_ID_BLOCK, b'{"version":1}')  # Kafka creates it empty at start-up
    with pytest.raises(KrayError, match="latest_producer_id_block"):
        ProducerIdManager(zk, 1).generate_producer_id()
    assert zk.get(zkdata.LATEST_PRODUCER_ID_BLOCK)[0] == b'{"version":1}'
