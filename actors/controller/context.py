"""ControllerContext: the active controller's in-memory view of the cluster. No I/O.

Only the event thread touches it, so it needs no locks (seed 003).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from actors.controller.state_machines import PartitionStateName, ReplicaStateName
from actors.protocol import LiveBroker
from coordination.zkdata import TopicPartition


@dataclass(frozen=True)
class LeaderAndIsr:
    """kafka.api.LeaderAndIsr: leader, its epoch, the ISR, and the state znode's zkVersion."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int

    NO_LEADER = -1
    INITIAL_LEADER_EPOCH = 0
    INITIAL_ZK_VERSION = 0

    def new_leader_and_isr(self, leader: int, isr: tuple[int, ...]) -> "LeaderAndIsr":
        """Every change of leader or ISR by the controller bumps the leader epoch."""
        return replace(self, leader=leader, isr=tuple(isr), leader_epoch=self.leader_epoch + 1)

    def __str__(self) -> str:
        return (f"(Leader:{self.leader},ISR:{','.join(map(str, self.isr))},"
                f"LeaderEpoch:{self.leader_epoch},ZkVersion:{self.zk_version})")


@dataclass(frozen=True)
class LeaderIsrAndControllerEpoch:
    leader_and_isr: LeaderAndIsr
    controller_epoch: int


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = -1
    live_brokers: dict[int, LiveBroker] = field(default_factory=dict)
    live_broker_epochs: dict[int, int] = field(default_factory=dict)
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    all_topics: set[str] = field(default_factory=set)
    topic_ids: dict[str, str] = field(default_factory=dict)
    partition_assignments: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    partition_leadership: dict[TopicPartition, LeaderIsrAndControllerEpoch] = field(default_factory=dict)
    partition_states: dict[TopicPartition, PartitionStateName] = field(default_factory=dict)
    replica_states: dict[tuple[TopicPartition, int], ReplicaStateName] = field(default_factory=dict)

    # -- brokers -------------------------------------------------------------

    @property
    def live_broker_ids(self) -> set[int]:
        return set(self.live_brokers)

    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        return set(self.live_brokers) | self.shutting_down_broker_ids

    def is_replica_online(self, broker_id: int) -> bool:
        return broker_id in self.live_brokers

    def add_live_brokers(self, brokers: dict[int, tuple[LiveBroker, int]]) -> None:
        for broker_id, (broker, epoch) in brokers.items():
            self.live_brokers[broker_id] = broker
            self.live_broker_epochs[broker_id] = epoch

    def remove_live_brokers(self, broker_ids: set[int]) -> None:
        for broker_id in broker_ids:
            self.live_brokers.pop(broker_id, None)
            self.live_broker_epochs.pop(broker_id, None)

    # -- topics and partitions -----------------------------------------------

    def all_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, parts in self.partition_assignments.items() for p in parts]

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in self.partition_assignments.get(topic, {})]

    def partition_replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.partition_assignments.get(tp.topic, {}).get(tp.partition, ())

    def update_partition_replicas(self, tp: TopicPartition, replicas: tuple[int, ...]) -> None:
        self.partition_assignments.setdefault(tp.topic, {})[tp.partition] = tuple(replicas)

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_id in self.partition_replicas(tp)]

    def partitions_in_state(self, *states: PartitionStateName) -> list[TopicPartition]:
        return [tp for tp, s in self.partition_states.items() if s in states]
