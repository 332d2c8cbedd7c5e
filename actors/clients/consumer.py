"""A consumer of assigned partitions for tests, tools and the final read-back: confluent-kafka
(librdkafka) with assign() and explicit offsets, no group (confluent-kafka insists on a group.id,
which is never joined or committed to). Group members of the load are in load.py."""
from __future__ import annotations

from typing import NamedTuple

import confluent_kafka
from confluent_kafka.admin import AdminClient, OffsetSpec

from coordination.errors import KrayError
from coordination.zkdata import TopicPartition

NO_GROUP = "kray-assign"  # confluent-kafka needs a group.id even for assign(); nothing joins it
# asked again: a leader that moved or died. _DESTROY_BROKER is librdkafka's answer to a request queued for a
# broker it decommissions when the broker leaves the cluster's metadata (a killed one, not back)
RETRIED = {confluent_kafka.KafkaError.NOT_LEADER_FOR_PARTITION, confluent_kafka.KafkaError.LEADER_NOT_AVAILABLE,
           confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART, confluent_kafka.KafkaError._TIMED_OUT,
           confluent_kafka.KafkaError._TRANSPORT, confluent_kafka.KafkaError.FENCED_LEADER_EPOCH,
           confluent_kafka.KafkaError._DESTROY_BROKER}


class ConsumedRecord(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes
    leader_epoch: int  # the epoch of the leader that appended it (the batch's partitionLeaderEpoch)
    timestamp_ms: int


def records_of(messages: list[confluent_kafka.Message]) -> list[tuple[TopicPartition, ConsumedRecord]]:
    """The records among librdkafka's messages; a fatal error raised, a transient one (a leader moved,
    which librdkafka retries) passed over."""
    out = []
    for msg in messages:
        if msg.error() is not None:
            if msg.error().fatal():
                raise KrayError(f"consumer: {msg.error().name()}: {msg.error().str()}")
            continue
        epoch = msg.leader_epoch()
        out.append((TopicPartition(msg.topic(), msg.partition()), ConsumedRecord(
            msg.offset(), msg.key(), msg.value(), -1 if epoch is None else epoch, msg.timestamp()[1])))
    return out


def consumer_config(bootstrap_servers: str, max_wait_ms: int = 500, **overrides) -> dict:
    return {"bootstrap.servers": bootstrap_servers, "group.id": NO_GROUP, "enable.auto.commit": False,
            "enable.auto.offset.store": False, "fetch.wait.max.ms": max_wait_ms, "auto.offset.reset": "earliest",
            "log_level": 3, **overrides}


class Consumer:
    def __init__(self, bootstrap_servers: str, max_wait_ms: int = 500, **overrides):
        self.bootstrap_servers = bootstrap_servers
        self._consumer = confluent_kafka.Consumer(consumer_config(bootstrap_servers, max_wait_ms, **overrides))
        self.partitions: list[TopicPartition] = []

    def assign(self, partitions: list[TopicPartition], offset: int = 0) -> None:
        self.partitions = list(partitions)
        self._consumer.assign([confluent_kafka.TopicPartition(tp.topic, tp.partition, offset) for tp in partitions])

    def poll(self, timeout_s: float = 0.5, max_records: int = 10_000) -> list[tuple[TopicPartition, ConsumedRecord]]:
        """The records that arrived, in offset order per partition."""
        return records_of(self._consumer.consume(max_records, timeout_s))

    def high_watermarks(self, timeout_s: float = 60) -> dict[TopicPartition, int]:
        """Each assigned partition's high watermark from its leader: ListOffsets latest, one request per
        leader for all its partitions (librdkafka's admin API; a request per partition took 40 s over
        1,000 partitions on a busy machine), asked again for the partitions answered with a retriable
        error (a leader that moved: the client refreshes its metadata)."""
        import time

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 3})
        out, todo, deadline = {}, list(self.partitions), time.monotonic() + timeout_s
        while todo:
            asked = {tp: confluent_kafka.TopicPartition(tp.topic, tp.partition) for tp in todo}
            futures = admin.list_offsets({c: OffsetSpec.latest() for c in asked.values()}, request_timeout=10)
            failed = []
            for tp, c in asked.items():
                try:
                    out[tp] = futures[c].result().offset
                except confluent_kafka.KafkaException as e:
                    if not e.args[0].retriable() and e.args[0].code() not in RETRIED or time.monotonic() > deadline:
                        raise
                    failed.append(tp)
            todo = failed
            if todo:
                time.sleep(0.1)
        return out

    def read_to_end(self, partitions: list[TopicPartition], timeout_s: float = 120
                    ) -> list[tuple[TopicPartition, ConsumedRecord]]:
        """Every record from offset 0 up to each partition's high watermark as it was when asked."""
        import time

        self.assign(partitions)
        ends = self.high_watermarks()
        positions = dict.fromkeys(partitions, 0)
        out, deadline = [], time.monotonic() + timeout_s
        while any(positions[tp] < ends[tp] for tp in partitions):
            if time.monotonic() > deadline:
                short = {str(tp): (positions[tp], ends[tp]) for tp in partitions if positions[tp] < ends[tp]}
                raise KrayError(f"read-back did not reach the high watermarks in {timeout_s:.0f} s: {short}")
            for tp, record in self.poll():
                if record.offset < ends[tp]:
                    out.append((tp, record))
                positions[tp] = max(positions[tp], record.offset + 1)
        return out

    def close(self) -> None:
        self._consumer.close()
