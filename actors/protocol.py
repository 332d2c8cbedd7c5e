"""Controller-to-broker requests and responses (LeaderAndIsr, UpdateMetadata, StopReplica).

Field names follow Kafka's request schemas (LeaderAndIsrRequest.json,
UpdateMetadataRequest.json, StopReplicaRequest.json) in snake case. Every
request carries controller_epoch (brokers reject stale ones) and the target's
broker_epoch (a restarted broker rejects requests meant for its predecessor).
"""
from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from coordination.errors import Errors


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PartitionState(NamedTuple):
    """One partition's leadership as the controller sees it (LeaderAndIsrPartitionState).

    A typed NamedTuple rather than a model: requests carry tens of thousands of
    them, and the request model still validates every field, while construction
    and pickling stay at tuple speed.
    """

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    is_new: bool = False


LEADER_DURING_DELETE = -2  # UpdateMetadata's leader for the partitions of a topic being deleted


class LiveBroker(Message):
    id: int
    host: str
    port: int
    rack: str | None = None


class ControllerRequest(Message):
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    correlation_id: int = -1


class LeaderAndIsrRequest(ControllerRequest):
    api: str = "LeaderAndIsr"
    partition_states: list[PartitionState]
    live_leaders: list[LiveBroker]


class UpdateMetadataRequest(ControllerRequest):
    api: str = "UpdateMetadata"
    partition_states: list[PartitionState]
    live_brokers: list[LiveBroker]


class StopReplicaPartition(NamedTuple):
    topic: str
    partition: int
    leader_epoch: int = -1
    delete_partition: bool = False


class StopReplicaRequest(ControllerRequest):
    api: str = "StopReplica"
    partitions: list[StopReplicaPartition]


class PartitionError(NamedTuple):
    topic: str
    partition: int
    error_code: Errors


class ControllerResponse(Message):
    """The response to any controller request: a top-level error and per-partition errors."""

    api: str
    broker_id: int
    correlation_id: int = -1
    error_code: Errors = Errors.NONE
    partition_errors: list[PartitionError] = Field(default_factory=list)


ControllerRequestT = LeaderAndIsrRequest | UpdateMetadataRequest | StopReplicaRequest
