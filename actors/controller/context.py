"""ControllerContext: the active controller's in-memory view of the cluster. No I/O.

Only the event thread touches it, so it needs no locks (seed 003).
"""
from __future__ import annotations

from dataclasses import dataclass, field

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
        return LeaderAndIsr(leader, self.leader_epoch + 1, tuple(isr), self.zk_version)

    def __str__(self) -> str:
        return (f"(Leader:{self.leader},ISR:{','.join(map(str, self.isr))},"
                f"LeaderEpoch:{self.leader_epoch},ZkVersion:{self.zk_version})")


@dataclass(frozen=True)
class ReplicaAssignment:
    """Kafka's ReplicaAssignment: during a reassignment `replicas` is ORS + TRS, with the
    adding (TRS - ORS) and removing (ORS - TRS) replicas named."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @classmethod
    def for_reassignment(cls, original: tuple[int, ...], target: tuple[int, ...]) -> "ReplicaAssignment":
        """RS = TRS followed by the ORS members not in it (Kafka's order, preferred leader first)."""
        replicas = tuple(target) + tuple(r for r in original if r not in target)
        return cls(replicas, tuple(r for r in target if r not in original),
                   tuple(r for r in original if r not in target))


NO_ASSIGNMENT = ReplicaAssignment(())


@dataclass(frozen=True)
class LeaderIsrAndControllerEpoch:
    leader_and_isr: LeaderAndIsr
    controller_epoch: int


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = -1
    live_brokers: dict[int, LiveBroker] = field(default_factory=dict)  # each with its registration's epoch
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    all_topics: set[str] = field(default_factory=set)
    topic_ids: dict[str, str] = field(default_factory=dict)
    partition_assignments: dict[str, dict[int, ReplicaAssignment]] = field(default_factory=dict)
    partition_leadership: dict[TopicPartition, LeaderIsrAndControllerEpoch] = field(default_factory=dict)
    partition_states: dict[TopicPartition, PartitionStateName] = field(default_factory=dict)
    replica_states: dict[tuple[TopicPartition, int], ReplicaStateName] = field(default_factory=dict)
    topics_to_be_deleted: set[str] = field(default_factory=set)
    topics_with_deletion_started: set[str] = field(default_factory=set)
    topics_ineligible_for_deletion: set[str] = field(default_factory=set)
    # partitions whose leadership this controller wrote to or read from ZooKeeper during the current
    # event (cleared per event): for them the context's ISR is ZooKeeper's, leaders may have changed others
    leaderships_synced: set[TopicPartition] = field(default_factory=set)
    leaderships_written: set[TopicPartition] = field(default_factory=set)  # the same, written only
    # KIP-112: per live broker, its replicas on a failed log directory (its LeaderAndIsr answers said
    # KAFKA_STORAGE_ERROR); offline though the broker lives. Forgotten when the broker dies or starts again
    replicas_on_offline_dirs: dict[int, set[TopicPartition]] = field(default_factory=dict)

    # -- brokers -------------------------------------------------------------

    @property
    def live_broker_ids(self) -> set[int]:
        """Live and not shutting down: the brokers that may lead (Kafka's liveBrokerIds)."""
        return set(self.live_brokers) - self.shutting_down_broker_ids

    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        return set(self.live_brokers) | self.shutting_down_broker_ids

    def is_replica_online(self, broker_id: int, tp: TopicPartition | None = None) -> bool:
        """Kafka's isReplicaOnline: the broker is live and not shutting down, and (given a partition) its
        replica of it is not on a failed log directory."""
        return (broker_id in self.live_brokers and broker_id not in self.shutting_down_broker_ids
                and (tp is None or tp not in self.replicas_on_offline_dirs.get(broker_id, ())))

    @property
    def live_broker_epochs(self) -> dict[int, int]:
        """Kafka's liveBrokerEpochs: which registration of each live broker the controller knows."""
        return {b: broker.epoch for b, broker in self.live_brokers.items()}

    def add_live_brokers(self, brokers: dict[int, tuple[LiveBroker, int]]) -> None:
        """Registrations with their broker epochs, which UpdateMetadata then carries to every broker."""
        for broker_id, (broker, epoch) in brokers.items():
            self.live_brokers[broker_id] = broker.model_copy(update={"epoch": epoch})

    def remove_live_brokers(self, broker_ids: set[int]) -> None:
        for broker_id in broker_ids:
            self.live_brokers.pop(broker_id, None)

    # -- topics and partitions -----------------------------------------------

    def all_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, parts in self.partition_assignments.items() for p in parts]

    def partition_count(self) -> int:
        return sum(len(parts) for parts in self.partition_assignments.values())

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in self.partition_assignments.get(topic, {})]

    def partition_full_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        topic = self.partition_assignments.get(tp.topic)
        return topic.get(tp.partition, NO_ASSIGNMENT) if topic is not None else NO_ASSIGNMENT

    def partition_replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.partition_full_assignment(tp).replicas

    def update_partition_replicas(self, tp: TopicPartition, replicas: tuple[int, ...]) -> None:
        self.update_partition_full_assignment(tp, ReplicaAssignment(tuple(replicas)))

    def update_partition_full_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.partition_assignments.setdefault(tp.topic, {})[tp.partition] = assignment

    @property
    def partitions_being_reassigned(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, parts in self.partition_assignments.items()
                for p, a in parts.items() if a.is_being_reassigned]

    def replicas_on_brokers(self, broker_ids: set[int]) -> list[tuple[TopicPartition, int]]:
        return [(TopicPartition(t, p), r) for t, parts in self.partition_assignments.items()
                for p, assignment in parts.items() for r in assignment.replicas if r in broker_ids]

    def replicas_for_topic(self, topic: str) -> list[tuple[TopicPartition, int]]:
        return [(tp, r) for tp in self.partitions_for_topic(topic) for r in self.partition_replicas(tp)]

    def replicas_in_state(self, topic: str, state: ReplicaStateName) -> list[tuple[TopicPartition, int]]:
        return [k for k in self.replicas_for_topic(topic) if self.replica_states.get(k) is state]

    def is_any_replica_in_state(self, topic: str, state: ReplicaStateName) -> bool:
        return any(self.replica_states.get(k) is state for k in self.replicas_for_topic(topic))

    def are_all_replicas_in_state(self, topic: str, state: ReplicaStateName) -> bool:
        return all(self.replica_states.get(k) is state for k in self.replicas_for_topic(topic))

    def is_topic_queued_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted

    def replicas_to_delete_count(self) -> int:
        """Kafka's ReplicasToDeleteCount: replicas of topics queued for deletion not deleted yet."""
        return sum(self.replica_states.get(k) is not ReplicaStateName.ReplicaDeletionSuccessful
                   for t in self.topics_to_be_deleted for k in self.replicas_for_topic(t))

    def ineligible_replicas_to_delete_count(self) -> int:
        """Kafka's ReplicasIneligibleToDeleteCount: replicas of queued topics whose deletion cannot go on."""
        return sum(len(self.replicas_in_state(t, ReplicaStateName.ReplicaDeletionIneligible))
                   for t in self.topics_to_be_deleted)

    def partitions_with_leaders(self) -> list[TopicPartition]:
        """Partitions with a leadership, topics being deleted excluded (Kafka's partitionsWithLeaders)."""
        return [tp for tp in self.partition_leadership if not self.is_topic_queued_for_deletion(tp.topic)]

    def partitions_with_offline_leader(self) -> list[TopicPartition]:
        """Partitions whose leader is not a live broker (topics being deleted excluded)."""
        return [tp for tp, l in self.partition_leadership.items()
                if not self.is_replica_online(l.leader_and_isr.leader, tp)
                and not self.is_topic_queued_for_deletion(tp.topic)]

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_for_topic(topic):
            self.partition_leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
            for r in self.partition_replicas(tp):
                self.replica_states.pop((tp, r), None)
        self.partition_assignments.pop(topic, None)
        self.all_topics.discard(topic)
        self.topic_ids.pop(topic, None)
        self.topics_to_be_deleted.discard(topic)
        self.topics_with_deletion_started.discard(topic)
        self.topics_ineligible_for_deletion.discard(topic)

    def preferred_replica_imbalance_count(self) -> int:
        """Partitions whose leader is not their preferred (first) replica (topics being deleted excluded)."""
        return sum(1 for tp, l in self.partition_leadership.items()
                   if not self.is_topic_queued_for_deletion(tp.topic)
                   and self.partition_replicas(tp)[:1] != (l.leader_and_isr.leader,))

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_id in self.partition_replicas(tp)]

    def partitions_in_state(self, *states: PartitionStateName) -> list[TopicPartition]:
        return [tp for tp, s in self.partition_states.items() if s in states]
