"""The part of ZooKeeper an active controller's flows and state machines use, fenced on its epoch.

`ControllerZk` is that narrow interface; `FencedZkClient` serves it from a real session, passing the
controller epoch's zkVersion to every write, so that a deposed controller's writes fail whole (Kafka's
ControllerMovedException) without each caller carrying the version. Unit tests serve it from an
in-memory double.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Callable, Protocol, TypeVar

from kazoo.protocol.states import ZnodeStat

from coordination import zkdata
from coordination.zkclient import KrayZkClient, PartitionStateRecord
from coordination.zkdata import TopicPartition

M = TypeVar("M", bound=zkdata.ZNodeModel)
StateUpdates = dict[TopicPartition, tuple[zkdata.PartitionStateZNode | bytes, int]]


class ControllerZk(Protocol):
    # reads
    def get_many(self, paths: Iterable[str]) -> dict[str, tuple[bytes, ZnodeStat] | None]: ...
    def get_znode(self, model: type[M], path: str) -> M | None: ...
    def children(self, path: str) -> list[str]: ...
    def get_all_broker_ids(self) -> list[int]: ...
    def get_brokers(self, broker_ids: Iterable[int]) -> dict[int, tuple[zkdata.BrokerIdZNode, int]]: ...
    def get_all_topics(self) -> set[str]: ...
    def get_topic_znodes(self, topics: Iterable[str]) -> dict[str, zkdata.TopicZNode]: ...
    def get_partition_states(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionStateRecord]: ...

    # fenced writes
    def create_partition_states(self, states: dict[TopicPartition, zkdata.PartitionStateZNode | bytes]
                                ) -> dict[TopicPartition, Exception | None]: ...
    def begin_update_partition_states(self, updates: StateUpdates, one_per_multi: bool = False
                                      ) -> Callable[[], dict[TopicPartition, int | Exception]]: ...
    def delete_paths(self, paths: list[str]) -> None: ...
    def delete_broker_registration(self, broker_id: int, broker_epoch: int) -> bool: ...
    def set_topic_znode(self, topic: str, znode: zkdata.TopicZNode) -> None: ...
    def set_partition_reassignment(self, znode: zkdata.ReassignPartitionsZNode) -> None: ...
    def delete_topic(self, topic: str) -> None: ...


class FencedZkClient:
    """ControllerZk over a KrayZkClient; `fence` gives the controller epoch's zkVersion of the moment."""

    def __init__(self, zk: KrayZkClient, fence: Callable[[], int]):
        self._zk = zk
        self._fence = fence
        for name in ("get_many", "get_znode", "children", "get_all_broker_ids", "get_brokers", "get_all_topics",
                     "get_topic_znodes", "get_partition_states"):
            setattr(self, name, getattr(zk, name))

    def create_partition_states(self, states):
        return self._zk.create_partition_states(states, self._fence())

    def begin_update_partition_states(self, updates, one_per_multi=False):
        return self._zk.begin_update_partition_states(updates, self._fence(), one_per_multi=one_per_multi)

    def delete_paths(self, paths):
        self._zk.delete_paths_fenced(paths, self._fence())

    def delete_broker_registration(self, broker_id, broker_epoch):
        return self._zk.delete_broker_registration(broker_id, broker_epoch, self._fence())

    def set_topic_znode(self, topic, znode):
        self._zk.set_topic_znode(topic, znode, self._fence())

    def set_partition_reassignment(self, znode):
        self._zk.set_partition_reassignment(znode, self._fence())

    def delete_topic(self, topic):
        self._zk.delete_topic(topic, self._fence())
