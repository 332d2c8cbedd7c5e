"""Fixtures for tests that need their own cluster, and the leader-side ISR write the data plane will do."""
from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest

from actors.broker.batches import build
from actors.broker.network import NetworkClient
from actors.clients.consumer import ConsumedRecord, Consumer
from actors.clients.producer import Producer
from actors.cluster import LocalCluster, poll as wait_until
from actors.config import BrokerConfig, ClusterConfig, ControllerConfig
from coordination import zkdata
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition
from jobs.local import fresh_chroot

SESSION_TIMEOUT_MS = 3000


def start_cluster(zk_connect: str, broker_ids=(1, 2, 3), broker: BrokerConfig | None = None,
                  session_timeout_ms: int = SESSION_TIMEOUT_MS, link_faults: bool = False,
                  **controller) -> tuple[LocalCluster, KrayZkClient]:
    """Brokers in a fresh chroot and Ray namespace, up with a controller whose UpdateMetadata reached all."""
    config = ClusterConfig(zk_connect=fresh_chroot(zk_connect, "kray-test"), namespace=f"test-{uuid.uuid4().hex[:8]}",
                           zk_session_timeout_ms=session_timeout_ms, broker=broker or BrokerConfig(),
                           link_faults_enable=link_faults,
                           controller=ControllerConfig(controlled_shutdown_retry_backoff_ms=200, **controller))
    zk = KrayZkClient(config.zk_connect).start()
    cluster = LocalCluster(config, list(broker_ids)).start()
    cluster.wait_until_ready(zk)
    return cluster, zk


@pytest.fixture
def new_cluster(zk_connect, ray_session):
    """Start a cluster of brokers with a ControllerConfig of the test's choosing; stopped afterwards."""
    started = []

    def start(broker_ids=(1, 2, 3), broker: BrokerConfig | None = None, session_timeout_ms: int = SESSION_TIMEOUT_MS,
              link_faults: bool = False, **controller) -> tuple[LocalCluster, KrayZkClient]:
        started.append(start_cluster(zk_connect, broker_ids, broker, session_timeout_ms, link_faults, **controller))
        return started[-1]

    yield start
    for cluster, zk in started:
        cluster.stop(delete_logs=True)
        zk.close()


def zk_states(zk: KrayZkClient, topic: str) -> dict[TopicPartition, zkdata.PartitionStateZNode]:
    tps = [TopicPartition(topic, p) for p in zk.get_topic_znodes([topic])[topic].assignment()]
    return {tp: r.state for tp, r in zk.get_partition_states(tps).items()}


def caches_match_zookeeper(cluster: LocalCluster, zk: KrayZkClient, topic: str) -> bool:
    import ray

    expected = {tp: (s.leader, s.leader_epoch, s.isr) for tp, s in zk_states(zk, topic).items()}
    caches = ray.get([h.metadata.remote() for h in cluster.brokers.values()])
    return all({tp: v for tp, v in c["partitions"].items() if tp.topic == topic} == expected for c in caches)


def create_topic_and_wait(cluster: LocalCluster, zk: KrayZkClient, topic: str, partitions: int, rf: int) -> None:
    """Create a topic and wait until its states are in ZooKeeper and every broker's cache agrees."""
    from coordination import admin

    admin.create_topic(zk, topic, partitions, rf)
    wait_until(lambda: len(zk_states(zk, topic)) == partitions and caches_match_zookeeper(cluster, zk, topic),
               what=f"topic {topic} online everywhere")


def write_isr_as_leader(zk: KrayZkClient, tp: TopicPartition, isr: list[int]) -> None:
    """What a partition leader does when followers catch up: a zkVersion-conditional write of the
    new ISR (same leader epoch) and an /isr_change_notification znode for the controller."""
    data, stat = zk.get(zkdata.partition_state_path(tp))
    state = zkdata.decode(zkdata.PartitionStateZNode, "", data)
    zk.kazoo.set(zkdata.partition_state_path(tp), state.model_copy(update={"isr": isr}).encode(),
                 version=stat.version)
    zk.kazoo.create(f"{zkdata.ISR_CHANGE_NOTIFICATION}/{zkdata.ISR_CHANGE_PREFIX}",
                    zkdata.IsrChangeNotificationZNode(partitions=[
                        zkdata.PartitionRef(topic=tp.topic, partition=tp.partition)]).encode(), sequence=True)


def read_all(cluster, partitions: list[TopicPartition]) -> dict[TopicPartition, list[ConsumedRecord]]:
    """Every record below each partition's high watermark, from its current leader (a real client)."""
    consumer = Consumer(cluster.bootstrap_servers(), max_wait_ms=100)
    out: dict[TopicPartition, list[ConsumedRecord]] = {tp: [] for tp in partitions}
    try:
        for tp, r in consumer.read_to_end(partitions):
            out[tp].append(r)
    finally:
        consumer.close()
    return out


def send_to(cluster, broker_id: int, request, version: int):
    """One request over the Kafka protocol to one broker's listener, whoever leads: its response."""
    import ray

    host, port = ray.get(cluster.brokers[broker_id].listener.remote())

    async def exchange():
        client = NetworkClient()
        await client.connect(host, port, "kray-test")
        try:
            return await client.send(request, version)
        finally:
            client.close()
    return asyncio.run(exchange())


def produce_request(topic: str, partition: int, values: list[bytes], acks: int = 1, timeout_ms: int = 30_000):
    T = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=build(values))])])


def produced(response):
    """(error code, base offset) of a one-partition ProduceResponse."""
    p = response.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def fetch_request(topic: str, partition: int, offset: int, max_wait_ms: int = 0):
    """A consumer's sessionless fetch of one partition."""
    T = FetchRequest.FetchTopic
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[T(topic=topic, partitions=[T.FetchPartition(
                            partition=partition, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                            partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")


class AckedLoad:
    """acks=all records streamed to a topic from a thread of the test, every acknowledgement kept, so
    that a test can check at the end that none was lost."""

    def __init__(self, cluster: LocalCluster, topic: str, batch: int = 12):
        self.producer = Producer(cluster.bootstrap_servers(), acks=-1, delivery_timeout_ms=120_000)
        self.topic, self.batch = topic, batch
        self.acked: list[tuple[TopicPartition, int, bytes]] = []
        self.last_send: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="acked-load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            values = [f"r{n + i}".encode() for i in range(self.batch)]
            self.last_send = values
            for meta, value in zip(self.producer.send(self.topic, values), values):
                self.acked.append((TopicPartition(meta.topic, meta.partition), meta.offset, value))
            n += len(values)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), (
            f"the producer did not finish its last send of {len(self.last_send)} records in 120 s: "
            f"{self.producer.in_flight()} records still unacknowledged, {self.producer.stuck()}")

    def lost(self, cluster: LocalCluster, partitions: int) -> list[tuple[TopicPartition, int, bytes]]:
        """Acknowledged records that are not in the log where their acknowledgement said."""
        logs = read_all(cluster, [TopicPartition(self.topic, p) for p in range(partitions)])
        in_log = {(tp, r.offset): r.value for tp, records in logs.items() for r in records}
        return [(tp, o, v) for tp, o, v in self.acked if in_log.get((tp, o)) != v]
