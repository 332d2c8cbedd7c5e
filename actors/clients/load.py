"""Load for experiments: producer and consumer actors on a real Kafka client (confluent-kafka, whose
wheel carries librdkafka) that record what they did.

A LoadGenerator produces to its partitions in turn, `records_per_partition` records to each in a
row, at a target rate or (rate 0) as fast as its window of unacknowledged records allows; librdkafka
batches, retries and keeps each partition's order, idempotent with acks=all as Kafka's default.
Retries back off from 20 ms up to 100 ms (retry.backoff.max.ms): librdkafka's default ceiling of a
second also paces its queries for a leader it has lost.
Every acknowledged record is recorded (produced/, Parquet) with when it was sent and acknowledged, every
record the client gave up on (produce_errors.jsonl), and librdkafka's statistics once a second
(client_stats.jsonl: per broker round trip, queue latency, requests waiting; per partition the
leader it knows and the records waiting). A Prober sends one record at a time to each of its
partitions beside the load, so that a partition's availability is measured apart from the load
client's queue (jobs/measures/waits.py). A ConsumerWorker follows the same partitions from offset 0
and records every record it reads (consumed/, Parquet). A GroupMember is one of a consumer group
subscribed to the load's topics: it records what it was given (consumed/, its group named) and
each commit the coordinator acknowledged (group_commits.jsonl). `read_back` reads partitions from the
start to their high watermark, for the final check; `read_commits` a group's commits as its
coordinator's log holds them.

Each record's id, "<producer>-<sequence>", is its key; its value starts with it, padded to the
record size.

A record costs the load's Python a produce call and a delivery callback that appends a tuple; the
rest is done in bulk every FLUSH_INTERVAL_S on the producing thread: the acknowledgements become an
Arrow batch of Acks (the send times looked up by sequence, the ids cast from the keys), shipped to the
run's recorder (actors/columns.py).
"""
from __future__ import annotations

import array
import collections
import heapq
import logging
import threading
import time

import confluent_kafka
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray

from actors import columns, records
from actors.broker.group import group_records
from actors.clients.consumer import Consumer, ConsumedRecord, consumer_config, records_of
from actors.clients.producer import client_stats, producer_config
from actors.config import ClusterConfig
from actors.recording import FLUSH_INTERVAL_S, RecordSink
from actors.runtime import configure_actor_process, rss_mb
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)

PAD = b" "
WINDOW_PER_PARTITION = 8  # unacknowledged records per partition a streaming generator allows
STATS_INTERVAL_MS = 1000  # librdkafka's statistics, into client_stats.jsonl


def record_id_of(key: bytes | None, value: bytes) -> str:
    """The record's id: its key, or (a record produced without one) the start of its value."""
    return (key if key is not None else value.rstrip(PAD)).decode(errors="replace")


def now_ms() -> float:
    return time.time() * 1000


def bootstrap_servers(config: ClusterConfig) -> str:
    with config.zk_client().start() as zk:
        return zk.bootstrap_servers()


class _Producing:
    """A named producer that records what its client saw: every acknowledgement (produced/), every
    record it gave up on (produce_errors.jsonl), and librdkafka's statistics once a second
    (client_stats.jsonl). Produces, delivery callbacks and the shipping of acknowledgements run on one
    thread, the subclass's `_loop`, until `stop` (then on its caller's)."""

    def __init__(self, name: str, config: ClusterConfig, acks: int, record_size: int, **overrides):
        configure_actor_process()
        self.name, self.record_size = name, record_size
        self.prefix = f"{name}-"  # of every record id
        self.sink = RecordSink(config.recorder, config.namespace)
        # librdkafka's statistics only where they are recorded: a second's JSON over 1,000 partitions costs
        # about 15 ms to parse, more than the records' own recording at a few thousand records/s
        stats = {"statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": self._on_stats} if self.sink.enabled else {}
        self.producer = confluent_kafka.Producer(producer_config(
            bootstrap_servers(config), acks, **{**stats, **overrides}, on_delivery=self._on_delivery))
        self.sequence = self.acked = self.failed = self.full = 0  # full: produces refused, librdkafka's queue full
        self.last_error: str | None = None
        self._sent = array.array("d")  # each record's send time (ms), by sequence: 8 bytes a record, no object
        self._latencies = array.array("d")  # each shipped acknowledgement's latency (ms), in shipping order
        self._shipped_at: collections.deque[tuple[float, int]] = collections.deque(maxlen=100)  # (when, latencies
        # shipped by then): the last 20 s
        self._acks: list[tuple] = []  # (topic, partition, offset, key, acked s) since the last shipping
        self._counting = threading.Lock()  # _acks handed over and counted in `acked` at once, for `mark`
        self._shipped = time.monotonic()
        self._acked_partitions: set[tuple[str, int]] = set()  # those with an acknowledged record
        self._stopped = threading.Event()
        self._stats_failed = False  # a statistics JSON did not read (logged once)
        self._thread = threading.Thread(target=self._loop, name=f"load-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        raise NotImplementedError

    def _produce(self, tp: TopicPartition, sent_ms: float, on_delivery=None) -> bool:
        """Send one record to `tp`; `on_delivery` in place of the producer's own callback (which it calls).
        False: librdkafka's queue is full (queue.buffering.max.messages), nothing sent."""
        key = f"{self.prefix}{self.sequence}".encode()
        try:
            if on_delivery is None:
                self.producer.produce(tp.topic, key.ljust(self.record_size, PAD), key, tp.partition)
            else:
                self.producer.produce(tp.topic, key.ljust(self.record_size, PAD), key, tp.partition,
                                      on_delivery=on_delivery)
        except BufferError:
            self.full += 1
            return False
        self.sequence += 1
        self._sent.append(sent_ms)
        return True

    def _on_delivery(self, err, msg) -> None:
        """librdkafka's report of one record, served by poll: kept as a tuple until the next shipping."""
        if err is None:
            self._acks.append((msg.topic(), msg.partition(), msg.offset(), msg.key(), time.time()))
            return
        # delivery.timeout.ms ran out, or a non-retriable error: the checker sees what is missing
        self.failed += 1
        self.last_error = f"{err.name()}: {err.str()}"[:300]
        if err.code() != confluent_kafka.KafkaError._PURGE_QUEUE:  # a drain's purge is asked for: not logged each
            log.warning("Producer %s: %s", self.name, self.last_error)
        record_id = msg.key().decode()
        self.sink.emit(records.PRODUCE_ERRORS, records.ProduceError(
            topic=msg.topic(), partition=msg.partition(), record_id=record_id,
            sent_ms=self._sent[int(record_id[len(self.prefix):])], failed_ms=now_ms(), error=self.last_error))

    def _poll(self, timeout_s: float) -> None:
        """Serve librdkafka's reports; ship the acknowledgements every FLUSH_INTERVAL_S."""
        self.producer.poll(timeout_s)
        if time.monotonic() - self._shipped >= FLUSH_INTERVAL_S:
            self._ship()

    def _ship(self) -> None:
        """The acknowledgements since the last shipping, as one batch of Acks to the recorder."""
        self._shipped = time.monotonic()
        with self._counting:
            acks, self._acks = self._acks, []
            self.acked += len(acks)
        if not acks:
            return
        topics, partitions, offsets, keys, acked_s = zip(*acks)
        self._acked_partitions.update(zip(topics, partitions))
        record_ids = pa.array(keys, pa.binary()).cast(pa.string())
        sequences = pc.cast(pc.utf8_slice_codeunits(record_ids, len(self.prefix)), pa.int64()).to_numpy()
        sent_ms, acked_ms = np.frombuffer(self._sent, dtype=np.float64)[sequences], np.array(acked_s) * 1000
        self._latencies.frombytes((acked_ms - sent_ms).tobytes())
        self._shipped_at.append((self._shipped, len(self._latencies)))
        if not self.sink.enabled:
            return
        unknown = np.full(len(acks), -1)  # the broker and leader epoch: Kafka's produce response does not say
        self.sink.emit_batch(records.PRODUCED, columns.batch(records.Ack, {
            "topic": topics, "partition": partitions, "offset": offsets, "record_id": record_ids,
            "broker_id": unknown, "leader_epoch": unknown, "sent_ms": sent_ms, "acked_ms": acked_ms}))

    def in_flight(self) -> int:
        """Records sent and neither acknowledged nor given up on."""
        with self._counting:
            return self.sequence - self.acked - len(self._acks) - self.failed

    def mark(self) -> dict:
        """The counters now, to measure a window between two marks: records sent, acknowledged, given up
        on and refused (librdkafka's queue full), records still in librdkafka, and `shipped`: how many
        latencies `latencies_ms` holds (they come every FLUSH_INTERVAL_S, the counts at once)."""
        with self._counting:
            acked = self.acked + len(self._acks)
        return {"t": time.monotonic(), "sent": self.sequence, "acked": acked, "errors": self.failed,
                "full": self.full, "queued": len(self.producer), "shipped": len(self._latencies)}

    def recent_latencies_ms(self, seconds: float) -> np.ndarray:
        """The latencies of the acknowledgements shipped in the last `seconds`."""
        since = time.monotonic() - seconds
        start = max((n for at, n in list(self._shipped_at) if at < since), default=0)  # shipped before the window
        return self.latencies_ms(start, len(self._latencies))

    def latencies_ms(self, start: int, end: int) -> np.ndarray:
        """Latencies (send to acknowledgement, ms) of the acknowledgements shipped between two marks (a
        copy: the loop thread appends to the array, which an exported buffer would forbid)."""
        return np.frombuffer(self._latencies[start:end], dtype=np.float64)

    def _on_stats(self, raw: str) -> None:
        """Called from poll: an error here would end the loop thread (confluent-kafka raises it from poll),
        so a statistics JSON that does not read is logged, once, and passed over."""
        try:
            stats = client_stats(self.name, raw, now_ms())
        except Exception as e:
            if not self._stats_failed:
                log.warning("Producer %s: librdkafka's statistics did not read (%s: %s); passed over", self.name,
                            type(e).__name__, e)
            self._stats_failed = True
            return
        self.sink.emit(records.CLIENT_STATS, stats)

    def stop(self) -> dict:
        self._stopped.set()
        self._thread.join(timeout=30)
        self.producer.flush(150)
        self._ship()
        self.sink.close()
        return self.stats()

    def stats(self) -> dict:
        return {"name": self.name, "acked": self.acked + len(self._acks), "sent": self.sequence,
                "errors": self.failed, "last_error": self.last_error,
                "partitions_acked": len(self._acked_partitions), "rss_mb": rss_mb()}


@ray.remote(num_cpus=0, max_concurrency=4)
class LoadGenerator(_Producing):
    def __init__(self, index: int, config: ClusterConfig, partitions: list[TopicPartition], rate: float,
                 record_size: int, acks: int, records_per_partition: int = 1, retry_backoff_ms: int = 20,
                 linger_ms: int = 1, once: bool = False):
        """`once`: each partition gets records_per_partition records, then none (idle partitions)."""
        super().__init__(f"p{index}", config, acks, record_size, **{
            "retry.backoff.ms": retry_backoff_ms, "retry.backoff.max.ms": 5 * retry_backoff_ms,
            "linger.ms": linger_ms, "queue.buffering.max.messages": 1_000_000})
        self.partitions = list(partitions)
        self.per_partition, self.once = records_per_partition, once
        self.window = max(1, len(partitions)) * WINDOW_PER_PARTITION * records_per_partition
        self.set_rate(rate)

    def start(self) -> None:
        self.set_rate(self.rate)
        super().start()

    def set_rate(self, rate: float | None) -> None:
        """Offer `rate` records/s from now on, open loop (0: streaming; None: nothing)."""
        self.rate, self._pace = rate, (rate, time.monotonic(), self.sequence)  # records/s, since when, sequence then

    def add_partitions(self, partitions: list[TopicPartition], rate: float) -> None:
        """Load these partitions too from now on (a topic created during a run), at `rate` records/s in
        all (0: streaming, the window grows with the partitions)."""
        self.window = max(1, len(self.partitions) + len(partitions)) * WINDOW_PER_PARTITION * self.per_partition
        self.partitions = self.partitions + list(partitions)
        self.set_rate(rate)

    def drain(self, timeout_s: float) -> dict:
        """Offer nothing more; wait until every record is acknowledged or given up on, else purge what
        librdkafka still queues (in flight: answered or timed out as usual)."""
        self.set_rate(None)
        start = time.monotonic()
        while self.in_flight() and time.monotonic() - start < timeout_s:
            time.sleep(0.01)  # the loop thread serves the acknowledgements
        left = self.in_flight()
        if left:
            self.producer.purge(in_queue=True, in_flight=False)
        return {"drain_s": round(time.monotonic() - start, 2), "unacknowledged": left}

    def _loop(self) -> None:
        turn = 0
        while not self._stopped.is_set():
            rate, since, base = self._pace
            partitions = self.partitions
            if rate is None:
                allowed = 0
            elif rate > 0:
                allowed = int(rate * (time.monotonic() - since)) - (self.sequence - base)
            else:
                allowed = self.window - self.in_flight()
            if self.once:
                allowed = min(allowed, len(partitions) * self.per_partition - self.sequence)
            sent = now_ms()
            for _ in range(max(0, allowed) // self.per_partition):
                tp = partitions[turn % len(partitions)]
                turn += 1
                if not all(self._produce(tp, sent) for _ in range(self.per_partition)):
                    break  # librdkafka's queue is full: offered again on the next turn, from the pace
            self._poll(0.001 if rate != 0 or allowed <= 0 else 0)


@ray.remote(num_cpus=0, max_concurrency=4)
class Prober(_Producing):
    """Probes beside the load: one record in flight per partition, the next sent `interval_ms` after the
    last was sent, or at its acknowledgement if that comes later. A probe's wait is its partition's,
    not the load client's queue (librdkafka's one partition per request and five in flight per
    connection, which the load's figures keep as a real client's). acks=all, idempotent, whatever the
    load's acks: a probe is acknowledged once its partition takes writes as Kafka's default client sees
    them. Record ids "probe-<sequence>"."""

    def __init__(self, config: ClusterConfig, partitions: list[TopicPartition], interval_ms: float,
                 record_size: int):
        super().__init__(records.PROBE_PRODUCER, config, -1, record_size, **{
            "retry.backoff.ms": 20, "retry.backoff.max.ms": 100, "linger.ms": 0})
        self.interval_s = interval_ms / 1000
        self._due = [(0.0, i) for i in range(len(partitions))]  # (when, partition index): a heap
        self.partitions = list(partitions)

    def _loop(self) -> None:
        while not self._stopped.is_set():
            now = time.monotonic()
            while self._due and self._due[0][0] <= now:
                _, i = heapq.heappop(self._due)
                if not self._produce(self.partitions[i], now_ms(), self._next(i, now)):  # librdkafka's queue full
                    heapq.heappush(self._due, (now + self.interval_s, i))
            self._poll(0.002)

    def _next(self, i: int, sent: float):
        """The probe's delivery callback: the producer's, then the partition's next probe scheduled."""
        def delivered(err, msg) -> None:
            self._on_delivery(err, msg)
            heapq.heappush(self._due, (max(sent + self.interval_s, time.monotonic()), i))
        return delivered


@ray.remote(num_cpus=0, max_concurrency=4)
class ConsumerWorker:
    def __init__(self, config: ClusterConfig, partitions: list[TopicPartition], index: int = 0):
        configure_actor_process()
        self.name = f"c{index}"
        self.consumer = Consumer(bootstrap_servers(config), max_wait_ms=200)
        self.partitions = list(partitions)
        self.sink = RecordSink(config.recorder, config.namespace)
        self.consumed = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="consumer", daemon=True)

    def start(self) -> None:
        self.consumer.assign(self.partitions)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                got = self.consumer.poll(timeout_s=0.2)
            except Exception as e:  # a fatal client error: log it and go on polling
                log.warning("Consumer: %s: %s", type(e).__name__, e)
                self._stopped.wait(0.2)
                continue
            if got:
                self.sink.emit_batch(records.CONSUMED, consumed_batch(got, now_ms(), final=False))
            self.consumed += len(got)

    def stop(self) -> int:
        self._stopped.set()
        self._thread.join(timeout=30)
        self.consumer.close()
        self.sink.close()
        return self.consumed

    def stats(self) -> dict:
        return {"name": self.name, "consumed": self.consumed, "rss_mb": rss_mb()}


@ray.remote(num_cpus=0, max_concurrency=4)
class GroupMember:
    """A member of consumer group `group` (librdkafka's subscribe, its default assignors, offsets reset to
    the earliest) that commits what it was given every `commit_interval_ms`, and as it stops. Its client
    id is its name, "g<index>".

    It keeps one commit in flight at most (asynchronous, the next once the last is answered), where
    librdkafka's auto-commit sends one per interval whatever became of the last: a commit held while
    the coordinator moves, or retried, may then go after a newer one, and a coordinator, Kafka's as
    kray's, stores what comes in order, so the group's log would go back through no doing of the
    coordinator's. A commit waiting for a new coordinator does not hold up the fetching."""

    def __init__(self, config: ClusterConfig, group: str, topics: list[str], index: int,
                 commit_interval_ms: int = 1000):
        configure_actor_process()
        self.name, self.group = f"g{index}", group
        self.consumer = confluent_kafka.Consumer(consumer_config(
            bootstrap_servers(config), 200, **{"group.id": group, "client.id": self.name,
                                               "enable.auto.offset.store": True, "on_commit": self._on_commit}))
        self.topics = list(topics)
        self.commit_interval_s = commit_interval_ms / 1000
        self.sink = RecordSink(config.recorder, config.namespace)
        self.consumed = self.commits = 0
        self._committing = False  # a commit sent, not yet answered (answers come on the consuming thread)
        self.assigned: frozenset[str] = frozenset()  # "topic-partition"s the group gave it, as on_assign said
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{self.name}", daemon=True)

    def start(self) -> None:
        self._subscribe()
        self._thread.start()

    def subscribe(self, topics: list[str]) -> None:
        """Follow these topics too (created during the run): the group rebalances."""
        self.topics = sorted(set(self.topics) | set(topics))
        self._subscribe()

    def _subscribe(self) -> None:
        """Subscribe, keeping what the group assigns (the callbacks run on the consuming thread, inside
        consume(): asking librdkafka for the assignment from another thread can wait on that thread)."""
        def assigned(consumer, partitions) -> None:
            self.assigned = frozenset(f"{tp.topic}-{tp.partition}" for tp in partitions)

        def revoked(consumer, partitions) -> None:
            self.assigned = frozenset()
        self.consumer.subscribe(self.topics, on_assign=assigned, on_revoke=revoked)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stopped.is_set():
            self._consume()
            if not self._committing and time.monotonic() - last >= self.commit_interval_s:
                last = time.monotonic()
                self._commit(asynchronous=True)
        deadline = time.monotonic() + 10
        while self._committing and time.monotonic() < deadline:  # the last answer, then the final commit
            self._consume()
        self._commit(asynchronous=False)

    def _consume(self) -> None:
        try:
            got = records_of(self.consumer.consume(10_000, 0.2))
        except Exception as e:  # a fatal client error: log it and go on polling
            log.warning("Group member %s: %s: %s", self.name, type(e).__name__, e)
            self._stopped.wait(0.2)
            return
        if got:
            self.sink.emit_batch(records.CONSUMED, consumed_batch(got, now_ms(), False, self.group, self.name))
        self.consumed += len(got)

    def _commit(self, asynchronous: bool) -> None:
        """Commit the offsets of what consume() returned."""
        self._committing = asynchronous
        try:
            stored = self.consumer.commit(asynchronous=asynchronous)
        except confluent_kafka.KafkaException as e:  # nothing new to commit, a rebalance, no coordinator yet
            self._committing = False
            if e.args[0].code() != confluent_kafka.KafkaError._NO_OFFSET:
                log.info("Group member %s: commit: %s", self.name, e.args[0].str())
            return
        if not asynchronous:
            self._stored(stored or [])

    def _on_commit(self, err, partitions) -> None:
        """librdkafka's answer to an asynchronous commit, served by consume()."""
        self._committing = False
        if err is None:
            self._stored(partitions)

    def _stored(self, partitions) -> None:
        """Each partition the coordinator stored, recorded."""
        ts = now_ms()
        for tp in partitions:
            if tp.error is None and tp.offset >= 0:
                self.commits += 1
                self.sink.emit(records.GROUP_COMMITS, records.GroupCommit(
                    group=self.group, topic=tp.topic, partition=tp.partition, offset=tp.offset, ts_ms=ts,
                    member=self.name))

    def stop(self) -> int:
        self._stopped.set()
        self._thread.join(timeout=30)
        self.consumer.close()  # leaves the group
        self.sink.close()
        return self.consumed

    def stats(self) -> dict:
        """What it consumed and committed, and the partitions the group assigned it now ("topic-partition")."""
        return {"name": self.name, "consumed": self.consumed, "commits": self.commits, "assigned": sorted(self.assigned),
                "rss_mb": rss_mb()}


def consumed_batch(got: list[tuple[TopicPartition, ConsumedRecord]], ts_ms: float, final: bool,
                   group: str | None = None, member: str | None = None) -> pa.RecordBatch:
    """Records read at `ts_ms`, as a batch of Consumed rows."""
    n = len(got)
    return columns.batch(records.Consumed, {
        "topic": [tp.topic for tp, _ in got], "partition": [tp.partition for tp, _ in got],
        "offset": [r.offset for _, r in got], "record_id": [record_id_of(r.key, r.value) for _, r in got],
        "leader_epoch": [r.leader_epoch for _, r in got], "ts_ms": [ts_ms] * n, "final": [final] * n,
        "group": [group] * n, "member": [member] * n})


def read_back(config: ClusterConfig, partitions: list[TopicPartition]) -> pa.RecordBatch:
    """Every record below each partition's high watermark, from offset 0, as a batch of final Consumed rows."""
    consumer = Consumer(bootstrap_servers(config), max_wait_ms=100)
    try:
        got = consumer.read_to_end(partitions)
    finally:
        consumer.close()
    return consumed_batch(got, now_ms(), final=True)


def read_commits(config: ClusterConfig, group: str, offsets: TopicPartition) -> list[records.GroupCommit]:
    """The commits of `group` in its partition of __consumer_offsets (`offsets`), in log order: every
    offset-commit record of the group, a tombstone (a deleted commit) left out."""
    consumer = Consumer(bootstrap_servers(config), max_wait_ms=100)
    try:
        got = consumer.read_to_end([offsets])
    finally:
        consumer.close()
    out = []
    for _, r in got:
        key = group_records.read_key(r.key)
        if isinstance(key, group_records.OffsetKey) and key.group == group and r.value is not None:
            value = group_records.read_offset_value(r.value)
            out.append(records.GroupCommit(group=group, topic=key.topic, partition=key.partition, offset=value.offset,
                                           ts_ms=value.commit_timestamp, stored_offset=r.offset))
    return out
