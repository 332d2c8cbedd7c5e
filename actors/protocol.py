"""Controller-to-broker requests and responses (LeaderAndIsr, UpdateMetadata, StopReplica).

Field names follow Kafka's request schemas (LeaderAndIsrRequest.json,
UpdateMetadataRequest.json, StopReplicaRequest.json) in snake case. Every
request carries controller_epoch (brokers reject stale ones) and the target's
broker_epoch (a restarted broker rejects requests meant for its predecessor).
"""
from __future__ import annotations

import pickle
from functools import cache, partial
from typing import ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict, TypeAdapter
from pydantic_core import core_schema

from coordination.errors import Errors


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PartitionState(NamedTuple):
    """One partition's leadership as the controller sees it (LeaderAndIsrPartitionState).

    A typed NamedTuple rather than a model: requests carry tens of thousands of
    them (in `PartitionStates`), and construction stays at tuple speed.
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


class Rows(tuple):
    """The per-partition rows of one request or response (NamedTuples of one kind), as a tuple
    that pickles as one blob of plain tuples, encoded once however many requests carry it.

    A 10,000-partition request is 10,000 small tuples; pickled as NamedTuples each costs a
    Python call on both sides (`__getnewargs__`, `__new__`), 10x the cost of plain tuples.
    Rows built by kray's own code from typed state are trusted; anything else goes through
    `validate`, which checks every field."""

    row: ClassVar[type]

    def __reduce__(self):
        blob = self.__dict__.get("blob")
        if blob is None:
            blob = self.__dict__["blob"] = pickle.dumps([tuple(r) for r in self], pickle.HIGHEST_PROTOCOL)
        return _unpack_rows, (type(self), blob)

    @classmethod
    def validate(cls, value):
        return value if isinstance(value, cls) else cls(_row_list_adapter(cls.row).validate_python(value))

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler) -> core_schema.CoreSchema:
        """As a model field (or inside another row): trusted as it is, or validated from a list."""
        return core_schema.no_info_plain_validator_function(cls.validate)


@cache
def _row_list_adapter(row: type) -> TypeAdapter:
    return TypeAdapter(list[row])


def _unpack_rows(cls: type[Rows], blob: bytes) -> Rows:
    """The rows, keeping their blob: passed on (a RequestSender forwards its requests to the broker),
    they are not encoded again (10,000 rows: a fifth of a sender's CPU in a controller failover)."""
    rows = cls(map(partial(tuple.__new__, cls.row), pickle.loads(blob)))
    rows.__dict__["blob"] = blob
    return rows


class PartitionStates(Rows):
    row = PartitionState


LEADER_DURING_DELETE = -2  # UpdateMetadata's leader for the partitions of a topic being deleted


CLIENT_LISTENER = "PLAINTEXT"  # every broker's listeners: clients' (through link `clients` with links on)
INTER_BROKER_LISTENER = "REPLICATION"  # and inter.broker.listener.name, what followers fetch from


class EndPoint(NamedTuple):
    """One advertised listener of a broker."""
    listener: str
    host: str
    port: int


class Node(Message):
    """A broker as reached on one listener (Kafka's Node): a LeaderAndIsr's live leaders, on the
    inter-broker listener."""
    id: int
    host: str
    port: int
    rack: str | None = None


class LiveBroker(Message):
    """A live broker as UpdateMetadata names it: every listener it advertises."""
    id: int
    endpoints: list[EndPoint]
    rack: str | None = None
    epoch: int = -1  # its registration's broker epoch (kray, as KRaft's metadata has it): which incarnation lives

    def node(self, listener: str) -> Node | None:
        """The broker on `listener` (Kafka's Broker.node); None when it has no such listener."""
        for e in self.endpoints:
            if e.listener == listener:
                return Node(id=self.id, host=e.host, port=e.port, rack=self.rack)
        return None


class ControllerRequest(Message):
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    correlation_id: int = -1


class LeaderAndIsrRequest(ControllerRequest):
    api: str = "LeaderAndIsr"
    partition_states: PartitionStates
    live_leaders: list[Node]


class UpdateMetadataRequest(ControllerRequest):
    api: str = "UpdateMetadata"
    partition_states: PartitionStates
    live_brokers: list[LiveBroker]


class StopReplicaPartition(NamedTuple):
    topic: str
    partition: int
    leader_epoch: int = -1
    delete_partition: bool = False


class StopReplicaPartitions(Rows):
    row = StopReplicaPartition


class StopReplicaRequest(ControllerRequest):
    api: str = "StopReplica"
    partitions: StopReplicaPartitions


class PartitionError(NamedTuple):
    topic: str
    partition: int
    error_code: int  # an Errors code, as a plain int so that a 10,000-row response pickles fast


class PartitionErrors(Rows):
    row = PartitionError


class ControllerResponse(Message):
    """The response to any controller request: a top-level error and per-partition errors."""

    api: str
    broker_id: int
    correlation_id: int = -1
    error_code: Errors = Errors.NONE
    partition_errors: PartitionErrors = PartitionErrors()


ControllerRequestT = LeaderAndIsrRequest | UpdateMetadataRequest | StopReplicaRequest
