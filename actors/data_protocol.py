"""The data plane's requests and responses: Produce, Fetch, OffsetsForLeaderEpoch.

Field names follow Kafka's schemas (ProduceRequest.json, FetchRequest.json v12+ with its fetch session,
OffsetForLeaderEpochRequest.json) in snake case, flattened to one row per
partition. Records travel as `Record` rows (see `actors.protocol.Rows`).
"""
from __future__ import annotations

from typing import NamedTuple

from pydantic import Field

from actors.broker.records import Record
from actors.protocol import Message, Rows

CONSUMER_REPLICA_ID = -1  # a fetch from a client rather than a follower


class Records(Rows):
    row = Record


class ProducePartition(NamedTuple):
    topic: str
    partition: int
    records: Records


class ProducePartitions(Rows):
    row = ProducePartition


class ProduceRequest(Message):
    acks: int = Field(-1, ge=-1, le=1, description="0: no answer awaited, 1: the leader's log, -1: the whole ISR")
    timeout_ms: int = Field(30_000, ge=0)
    partitions: ProducePartitions


class ProduceResult(NamedTuple):
    topic: str
    partition: int
    error_code: int
    base_offset: int = -1
    last_offset: int = -1
    error_message: str = ""
    leader_epoch: int = -1  # the epoch the records were appended in (as KIP-951's current leader); -1 on error
    acked_ms: float = -1  # the leader's wall clock when it answered (after the ISR had the records, for acks=all)


class ProduceResults(Rows):
    row = ProduceResult


class ProduceResponse(Message):
    broker_id: int
    results: ProduceResults


class FetchPartition(NamedTuple):
    topic: str
    partition: int
    fetch_offset: int
    current_leader_epoch: int = -1
    partition_max_bytes: int = 1024 * 1024
    last_fetched_epoch: int = -1  # a follower's: the epoch of its last record (KIP-320), -1 to skip the check


class FetchPartitions(Rows):
    row = FetchPartition


class ForgottenPartition(NamedTuple):
    topic: str
    partition: int


class ForgottenPartitions(Rows):
    row = ForgottenPartition


class FetchRequest(Message):
    replica_id: int = CONSUMER_REPLICA_ID
    replica_epoch: int = -1  # the follower's broker epoch (Kafka's ReplicaState.ReplicaEpoch)
    # how many times the follower's fetcher had taken on partitions when it built this request: a
    # leader told of a newer count (wake_fetches) answers at once instead of long-polling without them
    partitions_version: int = 0
    max_wait_ms: int = Field(500, ge=0)
    min_bytes: int = Field(1, ge=0)
    partitions: FetchPartitions  # in an incremental fetch, only those that changed since the last one
    # KIP-227's fetch session: 0 with epoch 0 opens one, epoch -1 fetches without one (fetch_session.py)
    session_id: int = Field(0, ge=0)
    session_epoch: int = Field(-1, ge=-1)
    forgotten: ForgottenPartitions = ForgottenPartitions()  # partitions the session drops


class FetchedPartition(NamedTuple):
    topic: str
    partition: int
    error_code: int
    high_watermark: int = -1
    log_end_offset: int = -1
    records: Records = Records()
    diverging_epoch: tuple[int, int] | None = None  # KIP-320: (epoch, end offset) for the follower to truncate at


class FetchedPartitions(Rows):
    row = FetchedPartition


class FetchResponse(Message):
    broker_id: int
    partitions: FetchedPartitions
    error_code: int = 0  # a fetch session error (the partitions are then empty)
    session_id: int = 0


class EpochQuery(NamedTuple):
    topic: str
    partition: int
    leader_epoch: int


class EpochQueries(Rows):
    row = EpochQuery


class OffsetsForLeaderEpochRequest(Message):
    replica_id: int
    partitions: EpochQueries


class EpochEndOffset(NamedTuple):
    topic: str
    partition: int
    error_code: int
    leader_epoch: int = -1
    end_offset: int = -1


class EpochEndOffsets(Rows):
    row = EpochEndOffset


class OffsetsForLeaderEpochResponse(Message):
    broker_id: int
    partitions: EpochEndOffsets
