"""Load for experiments: producer and consumer actors that record what they did.

A LoadGenerator streams through its idempotent Producer: each of its partitions has one batch
of `records_per_partition` records in flight, and gets the next as soon as that one is
acknowledged (or, with a target rate, once the rate allows). Partitions do not wait for each
other, so the first acknowledgement after a fault says when that partition became available
again (DESIGN.md's `first_produce_ok`). Every acknowledged record is recorded (produced.jsonl).

A ConsumerWorker follows the same partitions from offset 0 and records every record it
reads (consumed.jsonl). `read_back` reads partitions from the start to their high
watermark, for the final check.

Each record's value starts with its id, "<producer>-<sequence>", padded to the record size.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

import ray

from actors.clients.consumer import Consumer
from actors.clients.producer import Producer
from actors.config import ClusterConfig
from actors.recording import RecordSink
from actors.runtime import configure_actor_process, rss_mb
from coordination.zkdata import TopicPartition
from jobs import rundir

log = logging.getLogger(__name__)

PAD = b" "


def record_value(record_id: str, size: int) -> bytes:
    return record_id.encode().ljust(size, PAD)


def record_id_of(value: bytes) -> str:
    return value.rstrip(PAD).decode(errors="replace")


def now_ms() -> float:
    return time.time() * 1000


@ray.remote(num_cpus=0, max_concurrency=4)
class LoadGenerator:
    def __init__(self, index: int, config: ClusterConfig, partitions: list[TopicPartition], rate: float,
                 record_size: int, acks: int, records_per_partition: int = 1, retry_backoff_ms: int = 20,
                 leader_check_ms: int = 200):
        configure_actor_process()
        self.name = f"p{index}"
        self.partitions = OrderedDict.fromkeys(partitions)  # in the order they were last given a batch
        self.rate, self.record_size, self.per_partition = rate, record_size, records_per_partition
        self.producer = Producer(config.namespace, _broker_ids(config), acks=acks, delivery_timeout_ms=120_000,
                                 retry_backoff_ms=retry_backoff_ms, leader_check_ms=leader_check_ms)
        self.sink = RecordSink(config.recorder, config.namespace)
        self.sequence = 0
        self.acked = 0
        self.errors: list[str] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{self.name}", daemon=True)

    def start(self) -> None:
        self.producer.metadata.refresh()
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._batches: dict[TopicPartition, tuple[list[str], float]] = {}  # ids and send time, per partition
            self._started = time.monotonic()
            self._budget_base = self.sequence
            try:
                self.producer.deliver({}, refill=self._refill, on_delivered=self._delivered)
            except Exception as e:  # delivery timed out: counted; the run's checker sees what is missing
                self.producer.new_identity()
                self.errors.append(f"{type(e).__name__}: {e}"[:300])
                log.warning("Load generator %s: %s", self.name, self.errors[-1])

    def _refill(self, pending: set[TopicPartition]) -> dict | None:
        """The next batch of every partition with none in flight, within the target rate; None to stop."""
        if self._stopped.is_set():
            return None
        idle = [tp for tp in self.partitions if tp not in pending]  # longest unserved first
        if self.rate > 0:
            allowed = int(self.rate * (time.monotonic() - self._started)) - (self.sequence - self._budget_base)
            idle = idle[:max(0, allowed // self.per_partition)]
        out = {}
        for tp in idle:
            self.partitions.move_to_end(tp)
            ids = [f"{self.name}-{self.sequence + i}" for i in range(self.per_partition)]
            self.sequence += self.per_partition
            out[tp] = self.producer.batch(tp, [record_value(i, self.record_size) for i in ids])
            self._batches[tp] = (ids, now_ms())
        return out

    def _delivered(self, tp: TopicPartition, d) -> None:
        ids, sent = self._batches.pop(tp)
        for i, record_id in enumerate(ids):
            self.sink.emit(rundir.PRODUCED, rundir.Ack(
                topic=tp.topic, partition=tp.partition, offset=d.base_offset + i, record_id=record_id,
                broker_id=d.broker_id, leader_epoch=d.leader_epoch, sent_ms=sent, acked_ms=d.acked_ms,
                leader_acked_ms=d.leader_acked_ms))
        self.acked += len(ids)

    def stop(self) -> dict:
        self._stopped.set()
        self._thread.join(timeout=150)
        self.sink.close()
        return self.stats()

    def stats(self) -> dict:
        return {"name": self.name, "acked": self.acked, "sent": self.sequence, "retries": self.producer.retries,
                "errors": len(self.errors), "last_error": self.errors[-1] if self.errors else None,
                "rss_mb": rss_mb()}


@ray.remote(num_cpus=0, max_concurrency=4)
class ConsumerWorker:
    def __init__(self, config: ClusterConfig, partitions: list[TopicPartition], index: int = 0):
        configure_actor_process()
        self.name = f"c{index}"
        self.consumer = Consumer(config.namespace, _broker_ids(config), max_wait_ms=200)
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
                got = self.consumer.poll()
            except Exception as e:  # no broker answered the metadata request: try again
                log.warning("Consumer: %s: %s", type(e).__name__, e)
                self._stopped.wait(0.2)
                continue
            ts = now_ms()
            for tp, r in got:
                self.sink.emit(rundir.CONSUMED, consumed(tp, r, ts, final=False))
            self.consumed += len(got)

    def stop(self) -> int:
        self._stopped.set()
        self._thread.join(timeout=30)
        self.sink.close()
        return self.consumed

    def stats(self) -> dict:
        return {"name": self.name, "consumed": self.consumed, "rss_mb": rss_mb()}


def consumed(tp: TopicPartition, record, ts_ms: float, final: bool) -> rundir.Consumed:
    return rundir.Consumed(topic=tp.topic, partition=tp.partition, offset=record.offset,
                           record_id=record_id_of(record.value), leader_epoch=record.leader_epoch, ts_ms=ts_ms,
                           final=final)


def read_back(config: ClusterConfig, partitions: list[TopicPartition], idle_polls: int = 5):
    """Every record below each partition's high watermark, from offset 0, as final Consumed records."""
    consumer = Consumer(config.namespace, _broker_ids(config), max_wait_ms=100)
    consumer.assign(partitions)
    idle = 0
    while idle < idle_polls:
        got = consumer.poll()
        idle = 0 if got else idle + 1
        ts = now_ms()
        yield from (consumed(tp, r, ts, final=True) for tp, r in got)


def _broker_ids(config: ClusterConfig) -> list[int]:
    with config.zk_client().start() as zk:
        return zk.get_all_broker_ids()
