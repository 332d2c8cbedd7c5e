"""Consumer groups through real clients: kafka-python's KafkaConsumer and confluent-kafka's Consumer with
a group.id, and Debian's kcat -G; the coordinator on the leader of the group's __consumer_offsets
partition, groups and offsets kept there (real ZooKeeper, real Ray, loopback TCP)."""
from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer

from actors.broker.group_records import GROUP_METADATA_TOPIC
from actors.config import BrokerConfig
from coordination import admin
from tests.integration.conftest import wait_until
from tests.integration.test_kafka_clients import produce

GROUPS = BrokerConfig(replica_lag_time_max_ms=2000, replica_fetch_wait_max_ms=200,
                      isr_change_propagation_interval_ms=200, replica_fetch_backoff_ms=200,
                      group_initial_rebalance_delay_ms=300, offsets_topic_num_partitions=10)


@pytest.fixture
def cluster(new_cluster):
    cluster, zk = new_cluster(broker=GROUPS)
    admin.create_topic(zk, "orders", 3, 3)
    cluster.wait_for_metadata(lambda m: len([tp for tp in m["partitions"] if tp.topic == "orders"]) == 3)
    return cluster, zk


def test_a_kafka_python_group_consumer_reads_everything_and_commits(cluster):
    cluster, zk = cluster
    servers = cluster.bootstrap_servers()
    for p in range(3):
        produce(servers, "orders", [f"{p}-{i}".encode() for i in range(100)], partition=p)
    consumer = KafkaConsumer("orders", group_id="g1", bootstrap_servers=servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=20_000)
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 300 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000).values():
            got.extend(r.value for r in records)
    consumer.commit()
    consumer.close()
    assert sorted(got) == sorted(f"{p}-{i}".encode() for p in range(3) for i in range(100))
    assert GROUP_METADATA_TOPIC in zk.get_all_topics()
