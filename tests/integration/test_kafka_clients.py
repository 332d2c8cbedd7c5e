"""Real Kafka clients against a kray cluster over the wire protocol: confluent-kafka (librdkafka),
kafka-python and Debian's kcat, each negotiating its versions with the brokers (real ZooKeeper,
real Ray, loopback TCP)."""
from __future__ import annotations

import subprocess
import time

import pytest
import ray
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition as CTopicPartition
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from actors.clients.load import read_back
from actors.config import BrokerConfig
from coordination import admin
from coordination.zkdata import TopicPartition
from jobs.experiments.settling import repeated_records, stored_copies
from tests.integration.conftest import wait_until

FAST = BrokerConfig(replica_lag_time_max_ms=2000, replica_fetch_wait_max_ms=200,
                    isr_change_propagation_interval_ms=200, replica_fetch_backoff_ms=200)


def bootstrap(cluster) -> str:
    return cluster.bootstrap_servers()


def produce(servers: str, topic: str, values: list[bytes], partition: int = 0, **config) -> list:
    """Deliver with confluent-kafka; the delivered messages (or raise on the first error)."""
    delivered, errors = [], []
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5, **config})
    for v in values:
        producer.produce(topic, v, partition=partition,
                         on_delivery=lambda err, msg: errors.append(err) if err else delivered.append(msg))
    assert producer.flush(30) == 0, "undelivered records"
    if errors:
        raise KafkaException(errors[0])
    return delivered


def consume(servers: str, topic: str, partition: int, count: int, offset: int = OFFSET_BEGINNING) -> list:
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([CTopicPartition(topic, partition, offset)])
    got, deadline = [], time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg)
    consumer.close()
    return got


@pytest.fixture
def cluster3(new_cluster):
    cluster, zk = new_cluster(broker=FAST)
    admin.create_topic(zk, "t", 3, 3, config={"min.insync.replicas": "2"})
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 3 and all(v[0] >= 0 for v in m["partitions"].values()))
    return cluster, zk


def test_confluent_kafka_lists_produces_with_every_acks_and_consumes(cluster3):
    cluster, _ = cluster3
    servers = bootstrap(cluster)
    metadata = AdminClient({"bootstrap.servers": servers}).list_topics(timeout=10)
    assert sorted(metadata.brokers) == [1, 2, 3] and sorted(metadata.topics["t"].partitions) == [0, 1, 2]
    assert all(len(p.isrs) == 3 for p in metadata.topics["t"].partitions.values())
    for acks, values in (("all", [b"a0", b"a1"]), ("1", [b"b0"]), ("0", [b"c0"])):
        delivered = produce(servers, "t", values, acks=acks)
        assert len(delivered) == len(values)
        if acks != "0":
            assert [m.offset() for m in delivered] == sorted(m.offset() for m in delivered)
    got = consume(servers, "t", 0, 4)
    assert [m.value() for m in got] == [b"a0", b"a1", b"b0", b"c0"] and [m.offset() for m in got] == [0, 1, 2, 3]


def test_idempotent_compressed_batches_are_served_as_sent(cluster3):
    cluster, zk = cluster3
    servers = bootstrap(cluster)
    for codec in ("gzip", "lz4", "snappy", "zstd"):
        produce(servers, "t", [f"{codec}-{i}".encode() * 20 for i in range(50)], partition=1,
                **{"compression.type": codec, "enable.idempotence": True, "acks": "all"})
    got = consume(servers, "t", 1, 200)
    assert [m.value() for m in got] == [f"{c}-{i}".encode() * 20 for c in ("gzip", "lz4", "snappy", "zstd")
                                        for i in range(50)]
    # a producer without idempotence sends one record twice (its key is the record's id): the read-back
    # finds both copies, and the leader says what it stored with each (no producer), as with the others
    producer = Producer({"bootstrap.servers": servers, "acks": "all"})
    for _ in range(2):
        producer.produce("t", b"plain", key=b"twice", partition=1)
    assert producer.flush(30) == 0
    tp = TopicPartition("t", 1)
    repeated = repeated_records(read_back(cluster.config, [tp]))
    assert repeated == {tp: [(200, "twice"), (201, "twice")]}
    copies = stored_copies(zk, cluster.brokers, repeated)
    assert [(c.offset, c.producer_id, c.producer_epoch, c.sequence) for c in copies] == [(200, -1, -1, -1),
                                                                                          (201, -1, -1, -1)]
    leader = cluster.metadata_of(tp)[0]
    stored = ray.get(cluster.brokers[leader].stored_producers.remote(tp, [0, 49, 50, 199, 202]))
    assert [s[1:] for s in stored[:4]] == [(0, 0), (0, 49), (0, 0), (0, 49)]  # each codec's own producer
    assert len({s[0] for s in stored[:4]}) == 3 and all(s[0] >= 0 for s in stored[:4])
    assert stored[4] is None  # past the log end


def test_earliest_and_latest_offsets(cluster3):
    cluster, _ = cluster3
    servers = bootstrap(cluster)
    produce(servers, "t", [b"x"] * 7, partition=2, acks="all")
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "unused"})
    assert consumer.get_watermark_offsets(CTopicPartition("t", 2), timeout=10) == (0, 7)
    consumer.close()


def test_not_enough_replicas_with_min_insync_replicas_from_the_topic_config(cluster3):
    """min.insync.replicas=2 set on the topic: with two brokers gone, acks=all is refused
    (NOT_ENOUGH_REPLICAS) while acks=1 still goes through."""
    cluster, zk = cluster3
    servers = bootstrap(cluster)
    leader = cluster.metadata_of(TopicPartition("t", 0))[0]
    for b in [b for b in (1, 2, 3) if b != leader]:
        cluster.kill_broker(b)
    wait_until(lambda: len(cluster.metadata_of(TopicPartition("t", 0))[2]) == 1, timeout=60,
               what="the ISR shrunk to the leader")
    with pytest.raises(KafkaException) as refused:
        produce(servers, "t", [b"x"], acks="all", **{"message.timeout.ms": 3000, "retries": 0})
    assert refused.value.args[0].code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT)
    assert len(produce(servers, "t", [b"y"], acks="1")) == 1


def test_kafka_python_negotiates_and_round_trips(cluster3):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    cluster, _ = cluster3
    servers = bootstrap(cluster)
    producer = KafkaProducer(bootstrap_servers=servers, acks="all", enable_idempotence=True)
    futures = [producer.send("t", f"k{i}".encode(), partition=0) for i in range(10)]
    producer.flush(30)
    assert [f.get(10).offset for f in futures] == list(range(10))
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([KTopicPartition("t", 0)])
    consumer.seek_to_beginning()
    assert [m.value for m in consumer][:10] == [f"k{i}".encode() for i in range(10)]
    consumer.close()


def test_kcat_lists_produces_and_consumes(cluster3):
    cluster, _ = cluster3
    servers = bootstrap(cluster)
    listed = subprocess.run(["kcat", "-b", servers, "-L", "-m", "10"], capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0 and "3 brokers" in listed.stdout and 'topic "t" with 3 partitions' in listed.stdout
    subprocess.run(["kcat", "-b", servers, "-P", "-t", "t", "-p", "2", "-m", "10"], input="one\ntwo\nthree\n",
                   text=True, check=True, timeout=30)
    consumed = subprocess.run(["kcat", "-b", servers, "-C", "-t", "t", "-p", "2", "-o", "beginning", "-e",
                               "-m", "10"], capture_output=True, text=True, timeout=30)
    assert consumed.stdout.split() == ["one", "two", "three"]


def test_sigkill_of_a_leader_mid_stream_loses_and_duplicates_nothing(cluster3):
    """An idempotent confluent-kafka producer streams acks=all records into one partition while its
    leader is SIGKILLed: every acknowledged record is read back exactly once, in the order sent."""
    cluster, _ = cluster3
    servers = bootstrap(cluster)
    tp = TopicPartition("t", 0)
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "acks": "all", "linger.ms": 2,
                         "message.timeout.ms": 60_000})
    acked, errors = [], []
    on_delivery = lambda err, msg: errors.append(err) if err else acked.append(msg.value())  # noqa: E731
    sent = sent_at_kill = 0
    deadline = time.monotonic() + 60
    killed = False
    while time.monotonic() < deadline and (not killed or len(acked) < sent_at_kill + 300):
        producer.produce("t", f"r{sent}".encode(), partition=0, on_delivery=on_delivery)
        sent += 1
        producer.poll(0)
        if sent % 50 == 0:
            producer.flush(0.05)
        if not killed and len(acked) >= 300:
            sent_at_kill, killed = sent, True
            cluster.kill_broker(cluster.metadata_of(tp)[0])
    assert producer.flush(60) == 0 and killed and not errors
    got = consume(servers, "t", 0, len(acked))
    values = [m.value() for m in got]
    assert values == [f"r{i}".encode() for i in range(len(values))]  # in order, no gap, no duplicate
    assert set(acked) <= set(values) and len(values) >= len(acked)


def test_topic_configs_changed_at_run_time_apply_retention_and_min_insync_replicas(new_cluster):
    """kafka-configs --alter at run time: retention.bytes deletes whole old segments (the earliest offset
    moves, a fetch below it is out of range) and min.insync.replicas=3 refuses acks=all with a follower
    gone from the ISR."""
    cluster, zk = new_cluster(broker=FAST.model_copy(update={"log_retention_check_interval_ms": 200}))
    admin.create_topic(zk, "r", 1, 3, config={"segment.bytes": "2000"})
    cluster.wait_for_metadata(lambda m: m["partitions"].get(TopicPartition("r", 0), (-1,))[0] >= 0)
    servers = bootstrap(cluster)
    for _ in range(10):
        produce(servers, "r", [b"x" * 200] * 5, acks="all")
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "unused"})
    assert consumer.get_watermark_offsets(CTopicPartition("r", 0), timeout=10) == (0, 50)
    admin.alter_topic_config(zk, "r", {"retention.bytes": "1", "segment.bytes": "2000"})
    wait_until(lambda: consumer.get_watermark_offsets(CTopicPartition("r", 0), timeout=10)[0] > 0, timeout=30,
               what="retention to delete old segments")
    earliest, latest = consumer.get_watermark_offsets(CTopicPartition("r", 0), timeout=10)
    assert 0 < earliest < latest == 50
    consumer.close()
    leader = cluster.metadata_of(TopicPartition("r", 0))[0]
    from tests.integration.conftest import fetch_request, send_to

    below = send_to(cluster, leader, fetch_request("r", 0, 0), 12).responses[0].partitions[0]
    assert below.error_code == KafkaError.OFFSET_OUT_OF_RANGE
    assert [m.value() for m in consume(servers, "r", 0, 50 - earliest)] == [b"x" * 200] * (50 - earliest)
    admin.alter_topic_config(zk, "r", {"min.insync.replicas": "3"})
    cluster.kill_broker(next(b for b in (1, 2, 3) if b != leader))
    # in the leader's own cache: it applies a LeaderAndIsr before the UpdateMetadata sent with it, so its
    # partition has the ISR of 2 by then (another broker's cache may have it first: an append in between
    # meets the old ISR and is refused after it, NOT_ENOUGH_REPLICAS_AFTER_APPEND, as in Kafka)
    wait_until(lambda: len(ray.get(cluster.brokers[leader].metadata.remote())["partitions"][TopicPartition("r", 0)][2])
               == 2, timeout=60, what="the ISR to shrink on the leader")
    with pytest.raises(KafkaException) as refused:
        produce(servers, "r", [b"y"], acks="all", **{"message.timeout.ms": 3000, "retries": 0})
    assert refused.value.args[0].code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT)


def test_yelps_kafka_check_reads_kray_over_metadata_requests(cluster3, tmp_path):
    """kafka-utils' kafka-check (its own venv: it pins kafka-python < 1.5) asks the brokers for
    Metadata and reads ZooKeeper as Kafka's: no offline partition, no unavailable replica."""
    from pathlib import Path

    cluster, zk = cluster3
    tool = Path(__file__).resolve().parents[2] / ".venv-tools" / "bin" / "kafka-check"
    brokers = "".join(f'\n      - "{s}"' for s in bootstrap(cluster).split(","))
    (tmp_path / "kray.yaml").write_text(f'clusters:\n  c:\n    broker_list:{brokers}\n'
                                        f'    zookeeper: "{cluster.config.zk_connect}"\nlocal_config:\n  cluster: c\n')
    for check in ("offline", "replica_unavailability"):
        done = subprocess.run([str(tool), "--cluster-type", "kray", "--discovery-base-path", str(tmp_path),
                               "--broker-id", "1", "-j", check], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and '"status": "OK"' in done.stdout, (check, done.stdout, done.stderr)
