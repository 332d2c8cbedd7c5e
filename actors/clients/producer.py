"""A producer (Kafka's KafkaProducer; idempotent with acks=all, as enable.idempotence requires).

`send` batches the records per partition, sends one ProduceRequest per leader broker
(in parallel), and retries what failed with a retriable error after refreshing the
metadata, until delivery.timeout.ms. Every record carries the producer id and a
per-partition sequence number, so a retry of a batch that the old leader had already
appended (and replicated) is recognised by the new leader and not written twice;
ordering per partition holds because a partition's records go in one batch per call.
"""
from __future__ import annotations

import itertools
import logging
import random
import time
import zlib
from typing import Callable, NamedTuple

import ray

from actors.broker.records import Record
from actors.clients.metadata import ClusterMetadata, Refresh
from actors.data_protocol import ProducePartition, ProducePartitions, ProduceRequest, Records
from coordination.errors import Errors, KrayError
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)

RETRIABLE = {Errors.NOT_LEADER_OR_FOLLOWER, Errors.LEADER_NOT_AVAILABLE, Errors.REQUEST_TIMED_OUT,
             Errors.NOT_ENOUGH_REPLICAS, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.UNKNOWN_TOPIC_OR_PARTITION,
             Errors.FENCED_LEADER_EPOCH, Errors.KAFKA_STORAGE_ERROR}


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int  # -1 with acks=0
    leader_epoch: int = -1  # of the leader that acknowledged it
    broker_id: int = -1  # that leader
    acked_ms: float = -1  # when its acknowledgement arrived (wall clock)
    leader_acked_ms: float = -1  # when the leader acknowledged it (the leader's wall clock)


class Delivered(NamedTuple):
    base_offset: int
    leader_epoch: int
    broker_id: int
    acked_ms: float
    leader_acked_ms: float


class ProducerError(KrayError):
    """A record could not be delivered: a non-retriable error, or delivery.timeout.ms ran out."""


class Producer:
    def __init__(self, namespace: str, bootstrap: list[int], acks: int = -1, request_timeout_ms: int = 30_000,
                 delivery_timeout_ms: int = 120_000, retry_backoff_ms: int = 100, leader_check_ms: int = 100):
        self.metadata = ClusterMetadata(namespace, bootstrap)
        self.acks, self.request_timeout_ms = acks, request_timeout_ms
        self.delivery_timeout_ms, self.retry_backoff_ms = delivery_timeout_ms, retry_backoff_ms
        self.leader_check_ms = leader_check_ms  # how long a call waits before the metadata is looked at again
        self.sequences: dict[TopicPartition, int] = {}
        self.new_identity()
        self._round_robin = itertools.count()
        self.retries = 0  # batches sent again, for load reports

    def partition_for(self, topic: str, key: bytes | None) -> int:
        """Keyed records always go to the same partition (CRC-32 of the key; Kafka uses murmur2), others in turn."""
        partitions = self.metadata.partitions_for(topic)
        if not partitions:
            self.metadata.refresh()
            partitions = self.metadata.partitions_for(topic)
            if not partitions:
                raise ProducerError(f"UnknownTopicOrPartitionException: topic {topic} has no partitions in metadata")
        index = zlib.crc32(key) if key is not None else next(self._round_robin)
        return partitions[index % len(partitions)]

    def send(self, topic: str, values: list[bytes], keys: list[bytes | None] | None = None,
             partition: int | None = None) -> list[RecordMetadata]:
        """Deliver the records to `partition`, or by key (in turn when keyless); their metadata in order."""
        keys = keys or [None] * len(values)
        return self.send_to([TopicPartition(topic, partition if partition is not None else self.partition_for(topic, k))
                             for k in keys], values, keys)

    def send_to(self, partitions: list[TopicPartition], values: list[bytes],
                keys: list[bytes | None] | None = None) -> list[RecordMetadata]:
        """Deliver each record to its partition; their (topic, partition, offset) in the order given."""
        keys = keys or [None] * len(values)
        grouped: dict[TopicPartition, list[tuple[bytes | None, bytes]]] = {}
        where: list[tuple[TopicPartition, int]] = []
        for tp, key, value in zip(partitions, keys, values):
            batch = grouped.setdefault(tp, [])
            where.append((tp, len(batch)))
            batch.append((key, value))
        done = self.deliver({tp: self.batch(tp, [v for _, v in kv], [k for k, _ in kv]) for tp, kv in grouped.items()})
        return [RecordMetadata(tp.topic, tp.partition, done[tp].base_offset + i if done[tp].base_offset >= 0 else -1,
                               done[tp].leader_epoch, done[tp].broker_id, done[tp].acked_ms,
                               done[tp].leader_acked_ms) for tp, i in where]

    def new_identity(self) -> None:
        """A new producer id with fresh sequence numbers (Kafka bumps the epoch, KIP-360): after a batch
        was given up, the next one would leave a gap in the sequence that leaders refuse. Idempotence
        needs acks=all, as in Kafka; other acks send no producer id."""
        self.producer_id = random.getrandbits(62) if self.acks == -1 else -1
        self.sequences = {}

    def batch(self, tp: TopicPartition, values: list[bytes], keys: list[bytes | None] | None = None) -> Records:
        """The next records of a partition, numbered with this producer's id and its sequence numbers."""
        first, now = self.sequences.get(tp, 0), int(time.time() * 1000)
        self.sequences[tp] = first + len(values)
        idempotent = self.producer_id >= 0
        return Records(Record(-1, -1, now, key, value, self.producer_id, first + i if idempotent else -1)
                       for i, (key, value) in enumerate(zip(keys or [None] * len(values), values)))

    def deliver(self, pending: dict[TopicPartition, Records],
                refill: Callable[[set[TopicPartition]], dict[TopicPartition, Records] | None] | None = None,
                on_delivered: Callable[[TopicPartition, Delivered], None] = lambda tp, d: None,
                ) -> dict[TopicPartition, Delivered]:
        """Send every partition's batch to its leader and collect the answers, each partition on its
        own: a partition whose leader is unknown or failed is sent again (after retry.backoff.ms and a
        metadata refresh) while the others' calls are still in flight. A call still waiting after
        leader_check_ms is given up once the metadata names another leader for one of its partitions
        (a dead broker's restartable actor leaves calls hanging where a Kafka client would see its
        connection close); the idempotent sequence numbers keep a batch that the old leader did
        append from being written twice.

        With `refill` it streams, as Kafka's sender thread does: each round `refill(partitions still
        pending)` gives the next batches of partitions that have none in flight (one batch per
        partition at a time keeps each partition's order), until it returns None; `on_delivered` is
        told of each delivery as it happens."""
        added = dict.fromkeys(pending, time.monotonic())
        delivered: dict[TopicPartition, Delivered] = {}
        last_error: dict[TopicPartition, str] = {}
        in_flight: dict = {}  # ref -> (leader, partitions, when sent)
        retry_at = 0.0  # when partitions not in flight may be sent again
        # when fresh metadata was asked for (after an error, or leaders unknown): sends wait for a refresh begun since
        wanted = time.monotonic() if any(self.metadata.leader(tp) < 0 for tp in pending) else None
        refreshing: Refresh | None = None  # answers keep being collected while it is in flight
        checked = time.monotonic()  # when calls were last looked at for a leader that moved
        while pending or refill is not None:
            now = time.monotonic()
            if refreshing is not None and refreshing.done:
                self.metadata.finish_refresh(refreshing)
                if wanted is not None and refreshing.started >= wanted:
                    wanted = None
                refreshing = None
                self._give_up_stale_calls(in_flight, last_error)
            if refill is not None:
                more = refill(set(pending))
                if more is None:
                    refill = None
                else:
                    pending.update(more)
                    added.update(dict.fromkeys(more, now))
            flying = {tp for _, tps, _ in in_flight.values() for tp in tps}
            unsent = {tp: r for tp, r in pending.items() if tp not in flying}
            if unsent and now >= retry_at:
                if wanted is None:  # partitions with no known leader wait for a refresh after retry.backoff.ms
                    calls = self._send(unsent, last_error, now)
                    in_flight.update(calls)
                    if self.acks == 0:  # nothing to wait for
                        for tp in [tp for _, tps, _ in calls.values() for tp in tps]:
                            pending.pop(tp)
                            delivered[tp] = Delivered(-1, -1, -1, -1, -1)
                            on_delivered(tp, delivered[tp])
                        in_flight.clear()
                    if len(unsent) > sum(len(tps) for _, tps, _ in calls.values()):  # some had no leader to go to
                        retry_at, wanted = now + self.retry_backoff_ms / 1000, now
                        self.retries += 1
                elif refreshing is None:
                    refreshing, checked = self.metadata.begin_refresh(), now
            if refreshing is None and now - checked >= self.leader_check_ms / 1000 and any(
                    now - sent >= self.leader_check_ms / 1000 for _, _, sent in in_flight.values()):
                refreshing, checked = self.metadata.begin_refresh(), now  # has a call's leader moved?
            expired = [tp for tp in pending if now - added[tp] > self.delivery_timeout_ms / 1000]
            if expired:
                self.new_identity()
                raise ProducerError(f"delivery.timeout.ms expired for {sorted(expired)}: "
                                    f"{ {str(tp): last_error.get(tp) for tp in expired} }")
            waits = list(in_flight) + (refreshing.pending if refreshing is not None else [])
            if not waits:
                if refreshing is None:
                    time.sleep(max(0.005, retry_at - time.monotonic()) if pending or refill else 0)
                continue
            timeout = self.leader_check_ms / 1000
            if refreshing is not None:
                timeout = min(timeout, refreshing.remaining_s())
            if unsent:  # partitions waiting for retry.backoff.ms go as soon as it is over
                timeout = min(timeout, max(0.0, retry_at - time.monotonic()))
            ready, _ = ray.wait(waits, num_returns=1, timeout=timeout)
            if ready:
                ready, _ = ray.wait(waits, num_returns=len(waits), timeout=0)
            if refreshing is not None:
                ready = refreshing.take(ready)
            for ref in ready:
                leader, tps, _ = in_flight.pop(ref)
                for tp, d in self._collect(ref, leader, tps, pending, last_error):
                    delivered[tp] = d
                    on_delivered(tp, d)
                if any(tp in pending for tp in tps):
                    retry_at, wanted = time.monotonic() + self.retry_backoff_ms / 1000, time.monotonic()
                    self.retries += 1
        return delivered

    def _send(self, pending: dict[TopicPartition, Records], last_error: dict, now: float) -> dict:
        """One ProduceRequest per leader: {ref: (leader, its partitions, now)}."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in pending:
            by_leader.setdefault(self.metadata.leader(tp), []).append(tp)
        calls = {}
        for leader, tps in by_leader.items():
            if leader < 0:
                for tp in tps:
                    last_error[tp] = "LEADER_NOT_AVAILABLE"
                continue
            request = ProduceRequest(acks=self.acks, timeout_ms=self.request_timeout_ms, partitions=ProducePartitions(
                ProducePartition(tp.topic, tp.partition, pending[tp]) for tp in tps))
            try:
                ref = self.metadata.broker(leader).produce.remote(request)
            except Exception as e:  # the leader's actor cannot be found: refresh and retry
                self.metadata.forget(leader)
                for tp in tps:
                    last_error[tp] = type(e).__name__
                continue
            calls[ref] = (leader, tps, now)
        return calls

    def _collect(self, ref, leader: int, tps: list[TopicPartition], pending: dict,
                 last_error: dict) -> list[tuple[TopicPartition, Delivered]]:
        """A completed call's deliveries (they leave `pending`); failed partitions stay."""
        try:
            response = ray.get(ref)
        except Exception as e:  # the leader died: retriable
            self.metadata.forget(leader)
            for tp in tps:
                last_error[tp] = type(e).__name__
            return []
        arrived, out = time.time() * 1000, []
        for result in response.results:
            tp = TopicPartition(result.topic, result.partition)
            if result.error_code == Errors.NONE:
                out.append((tp, Delivered(result.base_offset, result.leader_epoch, leader, arrived, result.acked_ms)))
                pending.pop(tp, None)
            elif Errors(result.error_code) in RETRIABLE:
                last_error[tp] = Errors(result.error_code).name
            else:
                self.new_identity()
                raise ProducerError(f"{tp}: {Errors(result.error_code).name}: {result.error_message}")
        return out

    def _give_up_stale_calls(self, in_flight: dict, last_error: dict) -> None:
        """After a refresh: drop calls older than leader_check_ms whose partitions the metadata now
        gives to another leader, or that outlived request.timeout.ms; their partitions are sent again."""
        now = time.monotonic()
        timeout = self.request_timeout_ms / 1000 + 10
        for ref, (leader, tps, sent) in list(in_flight.items()):
            if now - sent > timeout:
                reason = "REQUEST_TIMED_OUT"
            elif now - sent >= self.leader_check_ms / 1000 and any(self.metadata.leader(tp) != leader for tp in tps):
                reason = f"leader moved from broker {leader}"
            else:
                continue
            del in_flight[ref]
            self.metadata.forget(leader)
            for tp in tps:
                last_error[tp] = reason
