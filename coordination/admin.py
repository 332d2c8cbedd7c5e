"""Topic administration through ZooKeeper, as Kafka's AdminZkClient and kafka-topics do it.

Admin only writes the topic's znodes; the controller's TopicChange watch does
the rest (leaders, ISRs, LeaderAndIsr). Every validation happens before the
first write, and the writes are one multi, so a bad request changes nothing.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from coordination import zkdata
from coordination.errors import (
    InvalidPartitionsException,
    InvalidReplicationFactorException,
    InvalidTopicException,
    TopicExistsException,
    UnknownTopicOrPartitionException,
)
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(topic: str) -> None:
    """Kafka's org.apache.kafka.common.internals.Topic.validate, with its messages."""
    if not topic:
        raise InvalidTopicException("Topic name is illegal, it can't be empty")
    if topic in (".", ".."):
        raise InvalidTopicException('Topic name cannot be "." or ".."')
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicException(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {topic}"
        )
    if not _LEGAL.fullmatch(topic):
        raise InvalidTopicException(
            f'Topic name "{topic}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'"
        )


def _unify_collision_chars(topic: str) -> str:
    return topic.replace(".", "_")


def assign_replicas_to_brokers(broker_ids: list[int], n_partitions: int, replication_factor: int,
                               fixed_start_index: int = -1, start_partition_id: int = -1,
                               rng: random.Random | None = None) -> dict[int, list[int]]:
    """Kafka's rack-unaware AdminUtils.assignReplicasToBrokers.

    The first replica of partition i goes to broker (i + start) mod n; the others
    follow with a shift that grows every n partitions, so replicas of
    consecutive partitions do not pile onto the same followers.
    """
    if n_partitions <= 0:
        raise InvalidPartitionsException("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorException("Replication factor must be larger than 0.")
    if replication_factor > len(broker_ids):
        raise InvalidReplicationFactorException(
            f"Replication factor: {replication_factor} larger than available brokers: {len(broker_ids)}."
        )
    rng = rng or random.Random()
    n = len(broker_ids)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    next_replica_shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    partition_id = max(0, start_partition_id)
    assignment: dict[int, list[int]] = {}
    for _ in range(n_partitions):
        if partition_id > 0 and partition_id % n == 0:
            next_replica_shift += 1
        first = (partition_id + start_index) % n
        replicas = [broker_ids[first]]
        for j in range(replication_factor - 1):
            shift = 1 + (next_replica_shift + j) % (n - 1)
            replicas.append(broker_ids[(first + shift) % n])
        assignment[partition_id] = replicas
        partition_id += 1
    return assignment


def create_topic(zk: KrayZkClient, topic: str, partitions: int, replication_factor: int,
                 config: dict[str, str] | None = None) -> dict[int, list[int]]:
    """Validate, assign replicas over the live brokers and write the topic's znodes atomically."""
    validate_topic_name(topic)
    existing = zk.get_all_topics()
    if topic in existing:
        raise TopicExistsException(f"Topic '{topic}' already exists.")
    colliding = [t for t in existing if _unify_collision_chars(t) == _unify_collision_chars(topic)]
    if colliding:
        raise InvalidTopicException(f"Topic '{topic}' collides with existing topics: {', '.join(sorted(colliding))}")
    if zk.get(zkdata.delete_topic_path(topic)) is not None:
        raise TopicExistsException(f"Topic '{topic}' is marked for deletion.")
    assignment = assign_replicas_to_brokers(zk.get_all_broker_ids(), partitions, replication_factor)
    znode = zkdata.TopicZNode.from_assignment(assignment, zkdata.new_topic_id())
    txn = zk.kazoo.transaction()
    config_path = zkdata.topic_config_path(topic)
    if zk.kazoo.exists(config_path):
        txn.set_data(config_path, zkdata.TopicConfigZNode(config=config or {}).encode())
    else:
        txn.create(config_path, zkdata.TopicConfigZNode(config=config or {}).encode())
    txn.create(zkdata.topic_path(topic), znode.encode())
    results = txn.commit()
    failure = next((r for r in results if isinstance(r, Exception)), None)
    if failure is not None:  # lost a race with another creator
        raise TopicExistsException(f"Topic '{topic}' already exists.")
    return assignment


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]


@dataclass(frozen=True)
class TopicDescription:
    topic: str
    topic_id: str | None
    partitions: list[PartitionDescription]
    config: dict[str, str]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


def describe_topics(zk: KrayZkClient, topics: list[str] | None = None) -> list[TopicDescription]:
    """Assignments from the topic znodes, leaders and ISRs from the partition state znodes."""
    all_topics = zk.get_all_topics()
    wanted = sorted(all_topics if topics is None else topics)
    missing = [t for t in wanted if t not in all_topics]
    if missing:
        raise UnknownTopicOrPartitionException(f"Topic '{missing[0]}' does not exist as expected")
    znodes = zk.get_topic_znodes(wanted)
    tps = [TopicPartition(t, p) for t, z in znodes.items() for p in z.assignment()]
    states = zk.get_partition_states(tps)
    out = []
    for topic in wanted:
        if topic not in znodes:
            continue
        config_raw = zk.get(zkdata.topic_config_path(topic))
        config = zkdata.decode(zkdata.TopicConfigZNode, zkdata.topic_config_path(topic), config_raw[0]).config \
            if config_raw and config_raw[0] else {}
        parts = []
        for p, replicas in sorted(znodes[topic].assignment().items()):
            st = states.get(TopicPartition(topic, p))
            parts.append(PartitionDescription(p, st.state.leader if st else -1, replicas, st.state.isr if st else []))
        out.append(TopicDescription(topic, znodes[topic].topic_id, parts, config))
    return out


def format_describe(descriptions: list[TopicDescription]) -> str:
    """kafka-topics.sh --describe output."""
    lines = []
    for d in descriptions:
        configs = ",".join(f"{k}={v}" for k, v in sorted(d.config.items()))
        lines.append(f"Topic: {d.topic}\tTopicId: {d.topic_id or ''}\tPartitionCount: {len(d.partitions)}\t"
                     f"ReplicationFactor: {d.replication_factor}\tConfigs: {configs}")
        for p in d.partitions:
            leader = "none" if p.leader < 0 else str(p.leader)
            lines.append(f"\tTopic: {d.topic}\tPartition: {p.partition}\tLeader: {leader}\t"
                         f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
    return "\n".join(lines)
