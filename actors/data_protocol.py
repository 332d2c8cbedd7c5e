"""The data plane's requests as the replica manager takes them: one row per partition, records as the
v2 batch bytes they travel in. KafkaApis turns wire messages (kafka-python's classes, generated from
Kafka's JSON definitions) into these and back; the fetchers build wire messages from them.

Field names follow Kafka's schemas (FetchRequest.json v12 with its session, ProduceRequest.json,
OffsetForLeaderEpochRequest.json) in snake case.
"""
from __future__ import annotations

from typing import NamedTuple

from coordination.zkdata import TopicPartition


class FetchPartition(NamedTuple):
    topic: str
    partition: int
    fetch_offset: int
    current_leader_epoch: int = -1
    partition_max_bytes: int = 1024 * 1024
    last_fetched_epoch: int = -1  # a follower's: the epoch of its last batch (KIP-320), -1 to skip the check
    log_start_offset: int = -1  # a follower's


class FetchParams(NamedTuple):
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partitions: list[FetchPartition]  # in an incremental fetch, only those that changed since the last one
    # KIP-227's fetch session: 0 with epoch 0 opens one, epoch -1 fetches without one (fetch_session.py)
    session_id: int = 0
    session_epoch: int = -1
    forgotten: list[tuple[str, int]] = []  # partitions the session drops
    replica_epoch: int = -1  # KIP-903: the follower's broker epoch, which incarnation of it fetches


class ProduceParams(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    entries: list[tuple[TopicPartition, bytes]]  # records as the v2 batches they came in, b"" for null


class FetchedPartition(NamedTuple):
    topic: str
    partition: int
    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    diverging_epoch: tuple[int, int] | None = None  # KIP-320: (epoch, end offset) for the follower to truncate at
    log_end_offset: int = -1


class FetchResult(NamedTuple):
    error_code: int  # a fetch session error (the partitions are then empty)
    session_id: int
    partitions: list[FetchedPartition]


class FetchResponseData(NamedTuple):
    """A FetchResponse as the follower reads it (wire.read_fetch_response)."""
    correlation_id: int
    error_code: int
    session_id: int
    partitions: list[FetchedPartition]


class ProduceResult(NamedTuple):
    topic: str
    partition: int
    error_code: int
    base_offset: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


class EpochEndOffset(NamedTuple):
    topic: str
    partition: int
    error_code: int
    leader_epoch: int = -1
    end_offset: int = -1
