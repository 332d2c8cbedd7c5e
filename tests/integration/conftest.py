"""Fixtures for tests that need their own cluster, and the leader-side ISR write the data plane will do."""
from __future__ import annotations

import asyncio
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest

from actors.broker.log.batches import build
from actors.broker.network.network import NetworkClient
from actors.clients.consumer import ConsumedRecord, Consumer
from actors.clients.producer import Producer
from actors.cluster import LocalCluster, poll as wait_until
from actors.config import BrokerConfig, ClusterConfig, ControllerConfig
from coordination import zkdata
from coordination.errors import KrayError
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition
from jobs.experiments.local import fresh_chroot

SESSION_TIMEOUT_MS = 3000
# what Kafka's own test harness gives its brokers (TestUtils.createBrokerConfig): a small __consumer_offsets,
# one replica each, no initial rebalance delay. Every librdkafka consumer with a group.id (the tests'
# read-backs too) finds its coordinator, and the first FindCoordinator creates the topic. A test's own
# BrokerConfig that sets these keeps its values (the consumer group tests use Kafka's replication).
TEST_GROUP_SETTINGS = {"offsets_topic_num_partitions": 5, "offsets_topic_replication_factor": 1,
                       "group_initial_rebalance_delay_ms": 0}
# a controlled shutdown's retry and a killed candidate's replacement sooner than by default: the default
# backoffs are for clusters of thousands of partitions under load, and each test that kills a controller
# waited out the 5 s before its cluster was put back
TEST_CONTROLLER_SETTINGS = {"controlled_shutdown_retry_backoff_ms": 200, "candidate_restart_backoff_ms": 1000}


def with_test_group_settings(broker: BrokerConfig | None) -> BrokerConfig:
    broker = broker or BrokerConfig()
    return broker.model_copy(update={k: v for k, v in TEST_GROUP_SETTINGS.items() if k not in broker.model_fields_set})


def start_cluster(zk_connect: str, broker_ids=(1, 2, 3), broker: BrokerConfig | None = None,
                  session_timeout_ms: int = SESSION_TIMEOUT_MS, link_faults: bool = False,
                  **controller) -> tuple[LocalCluster, KrayZkClient]:
    """Brokers in a fresh chroot and Ray namespace, up with a controller whose UpdateMetadata reached all."""
    config = ClusterConfig(zk_connect=fresh_chroot(zk_connect, "kray-test"), namespace=f"test-{uuid.uuid4().hex[:8]}",
                           zk_session_timeout_ms=session_timeout_ms, broker=with_test_group_settings(broker),
                           link_faults_enable=link_faults,
                           controller=ControllerConfig(**{**TEST_CONTROLLER_SETTINGS, **controller}))
    zk = KrayZkClient(config.zk_connect).start()
    cluster = LocalCluster(config, list(broker_ids)).start()
    cluster.wait_until_ready(zk)
    return cluster, zk


@pytest.fixture(scope="module")
def shared_clusters(zk_connect, ray_session):
    """The module's shared clusters, one per set of settings (`SharedClusters`)."""
    pool = SharedClusters(zk_connect)
    yield pool
    pool.close()


@pytest.fixture
def new_cluster(shared_clusters, zk_connect):
    """A cluster of brokers with settings of the test's choosing: the module's shared one for those
    settings (started once, put back as found after each test and checked, see `SharedClusters`), or with
    `own=True` one of the test's own (stopped afterwards), for a test whose assertions need a cluster with
    no history (first epochs, counters) or that leaves it in a state no test could undo."""
    started, shared = [], []

    def start(broker_ids=(1, 2, 3), broker: BrokerConfig | None = None, session_timeout_ms: int = SESSION_TIMEOUT_MS,
              link_faults: bool = False, own: bool = False, **controller) -> tuple[LocalCluster, KrayZkClient]:
        args = (tuple(broker_ids), broker, session_timeout_ms, link_faults)
        if own:
            started.append(start_cluster(zk_connect, *args, **controller))
            return started[-1]
        key, cluster, zk = shared_clusters.get(args, controller)
        shared.append(key)
        return cluster, zk

    yield start
    for cluster, zk in started:
        cluster.stop(delete_logs=True)
        zk.close()
    for key in dict.fromkeys(shared):
        shared_clusters.put_back(key)


class SharedClusters:
    """One module's shared clusters, one per set of settings: started for the first test that asks for
    its settings, used by the following tests that ask for the same, ended with the module (the least
    recently used first, when more than `MAX_SHARED` would be up).

    After each test a cluster it used is put back as it was found: link faults healed, brokers that were
    killed or shut down started again, every registration and controller candidate back, the test's
    topics deleted (off every broker's disk too); then checked: the same brokers registered and in every
    cache, no topic, no pending admin request, the same znodes as when it started. A test that left it
    otherwise fails in its teardown, naming what was left, and the next test gets a new cluster."""

    MAX_SHARED = 4

    def __init__(self, zk_connect: str):
        self.zk_connect = zk_connect
        self.clusters: dict[tuple, tuple[LocalCluster, KrayZkClient, set[str]]] = {}

    def get(self, args: tuple, controller: dict) -> tuple[tuple, LocalCluster, KrayZkClient]:
        broker_ids, broker, *rest = args
        key = (broker_ids, broker and broker.model_dump_json(), *rest, tuple(sorted(controller.items())))
        if key not in self.clusters:
            while len(self.clusters) >= self.MAX_SHARED:
                self.close(next(iter(self.clusters)))
            cluster, zk = start_cluster(self.zk_connect, *args, **controller)
            self.clusters[key] = (cluster, zk, znode_tree(zk))
        self.clusters[key] = self.clusters.pop(key)  # the most recently used last
        return key, *self.clusters[key][:2]

    def put_back(self, key: tuple) -> None:
        cluster, zk, znodes = self.clusters[key]
        try:
            put_back(cluster, zk)
            assert_as_found(cluster, zk, znodes)
        except BaseException:
            self.close(key)  # the next test starts afresh
            raise

    def close(self, key: tuple | None = None) -> None:
        """Stop the cluster of `key`, or every one (at once: the module's last test waits for them all)."""
        ended = [self.clusters.pop(k) for k in ([key] if key is not None else list(self.clusters))]
        try:
            with ThreadPoolExecutor(max(1, len(ended)), thread_name_prefix="stop-cluster") as pool:
                list(pool.map(lambda c: c[0].stop(delete_logs=True), ended))
        finally:
            for _, zk, _ in ended:
                zk.close()


def put_back(cluster: LocalCluster, zk: KrayZkClient, timeout: float = 60.0) -> None:
    """Undo what a test did to a cluster: heal its links, bring back its brokers (with their candidates),
    delete its topics; return once the controller has finished (nothing on any broker's disk)."""
    import ray

    from coordination import admin
    from jobs.experiments.chaos import Chaos

    if cluster.config.link_faults_enable:
        Chaos(cluster, zk).heal_links()
    for b in cluster.broker_ids:
        if b not in cluster.brokers:  # killed for good or shut down
            cluster.start_broker(b, timeout=timeout)
    wait_until(lambda: zk.get_all_broker_ids() == sorted(cluster.broker_ids), timeout=timeout,
               what="every broker registered again")
    def candidates_answer() -> bool:  # one killed starts after a backoff: until then get_actor raises
        ray.get([cluster.controller_actor(b).status.remote() for b in cluster.brokers], timeout=5)
        return True
    wait_until(candidates_answer, timeout=timeout, what="every controller candidate answering")
    cluster.wait_for_controller(zk, timeout=timeout)

    def deleted() -> bool:
        """Every topic marked for deletion at each look, not once: a topic created after a first pass
        (`__consumer_offsets`, which a closed consumer's FindCoordinator may still be creating) would
        otherwise wait out the timeout (a CI run, slowed by other work on the machine, did)."""
        for topic in zk.get_all_topics() - set(zk.children(zkdata.DELETE_TOPICS)):
            try:
                admin.delete_topic(zk, topic)
            except KrayError:  # gone or marked since the listing: the next look sees it
                pass
        brokers = list(cluster.brokers.values())
        return (not zk.get_all_topics() and not zk.children(zkdata.DELETE_TOPICS)
                and not any(ray.get([h.partitions_on_disk.remote() for h in brokers], timeout=5))
                and not any(c["partitions"] for c in ray.get([h.metadata.remote() for h in brokers], timeout=5)))
    wait_until(deleted, timeout=timeout, what="the test's topics deleted, from every broker's disk and cache too")


def assert_as_found(cluster: LocalCluster, zk: KrayZkClient, znodes: set[str], timeout: float = 10.0) -> None:
    """The shared cluster is as the next test expects it (notifications the controller consumes may
    still be in flight: waited for); what `put_back` could not undo is named."""
    import ray

    def as_found() -> bool:
        caches = ray.get([h.metadata.remote() for h in cluster.brokers.values()], timeout=10)
        return all(c["brokers"] == sorted(cluster.broker_ids) for c in caches) and znode_tree(zk) == znodes
    try:
        wait_until(as_found, timeout=timeout, what="the shared cluster as the test found it")
    except KrayError:
        caches = ray.get([h.metadata.remote() for h in cluster.brokers.values()], timeout=10)
        now = znode_tree(zk)
        raise AssertionError(f"the test left the shared cluster changed: brokers in the caches "
                             f"{[c['brokers'] for c in caches]} (expected {sorted(cluster.broker_ids)}), znodes "
                             f"added {sorted(now - znodes)}, removed {sorted(znodes - now)}") from None


def znode_tree(zk: KrayZkClient) -> set[str]:
    """Every znode's path in the cluster's chroot, but what any use of a cluster leaves for good, as in
    Kafka: config change notifications (purged after 15 minutes) and the producer id block."""
    skip = {zkdata.CONFIG_CHANGES, zkdata.LATEST_PRODUCER_ID_BLOCK, "/zookeeper"}
    paths, stack = set(), ["/"]
    while stack:
        path = stack.pop()
        for child in zk.children(path):
            full = f"{path.rstrip('/')}/{child}"
            if full not in skip:
                paths.add(full)
                stack.append(full)
    return paths


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


def produce_request(topic: str, partition: int, values: list[bytes], acks: int = 1, timeout_ms: int = 30_000,
                    **batch):
    """A one-partition ProduceRequest of one batch of `values` (`batch`: `build`'s producer id, epoch and
    first sequence)."""
    T = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=build(values, **batch))])])


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
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="acked-load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            values = [f"r{n + i}".encode() for i in range(self.batch)]
            self.last_send = values
            try:
                sent = self.producer.send(self.topic, values)
            except Exception as e:  # kept for the test: a load that stopped says why
                self.error = e
                return
            for meta, value in zip(sent, values):
                self.acked.append((TopicPartition(meta.topic, meta.partition), meta.offset, value))
            n += len(values)

    def waiting(self) -> str:
        """Why the load may not be moving: its error, or where librdkafka holds its records."""
        return f"load error: {self.error!r}" if self.error else \
            f"{self.producer.in_flight()} records unacknowledged, {self.producer.stuck()}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), (
            f"the producer did not finish its last send of {len(self.last_send)} records in 120 s: {self.waiting()}")
        assert self.error is None, f"the load stopped on an error: {self.error!r}"

    def lost(self, cluster: LocalCluster, partitions: int) -> list[tuple[TopicPartition, int, bytes]]:
        """Acknowledged records that are not in the log where their acknowledgement said."""
        logs = read_all(cluster, [TopicPartition(self.topic, p) for p in range(partitions)])
        in_log = {(tp, r.offset): r.value for tp, records in logs.items() for r in records}
        return [(tp, o, v) for tp, o, v in self.acked if in_log.get((tp, o)) != v]
