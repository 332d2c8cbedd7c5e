"""Topic administration through ZooKeeper, as Kafka's AdminZkClient and kafka-topics do it.

Admin only writes the topic's znodes; the controller's TopicChange watch does
the rest (leaders, ISRs, LeaderAndIsr). Every validation happens before the
first write, and the writes are one multi, so a bad request changes nothing.
"""
from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError
from pydantic import BaseModel, ConfigDict, ValidationError

from coordination import zkdata
from coordination.errors import (
    AdminCommandFailedException,
    ApiError,
    Errors,
    InvalidConfigurationException,
    InvalidPartitionsException,
    InvalidReplicaAssignmentException,
    InvalidReplicationFactorException,
    InvalidTopicException,
    KrayError,
    ReassignmentInProgressException,
    TopicExistsException,
    UnknownTopicOrPartitionException,
)
from coordination.topic_config import parse_topic_config
from coordination.zkclient import Attempts, KrayZkClient
from coordination.zkdata import PartitionReassignment, TopicPartition

M = TypeVar("M", bound=BaseModel)

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


def validate_replica_assignment(assignment: Mapping[int, Sequence[int]]) -> None:
    """Kafka's AdminZkClient.validateTopicCreate for an assignment the request names: no broker twice in
    a partition, one replication factor, partitions numbered 0..n-1."""
    if not assignment:
        raise InvalidReplicaAssignmentException("The replica assignment names no partitions")
    for replicas in assignment.values():
        if not replicas:
            raise InvalidReplicaAssignmentException("Empty replica list in the replica assignment")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentException(
                f"Duplicate replica assignment found: {_format_assignment(assignment)}")
    if len({len(r) for r in assignment.values()}) != 1:
        raise InvalidReplicaAssignmentException("All partitions should have the same number of replicas")
    if sorted(assignment) != list(range(len(assignment))):
        raise InvalidReplicaAssignmentException("Partitions should be a consecutive 0-based integer sequence")


def _format_assignment(assignment: Mapping[int, Sequence[int]]) -> str:
    return "Map(" + ", ".join(f"{p} -> List({', '.join(map(str, r))})" for p, r in sorted(assignment.items())) + ")"


def create_topic(zk: KrayZkClient, topic: str, partitions: int, replication_factor: int,
                 config: dict[str, str] | None = None, assignment: Mapping[int, Sequence[int]] | None = None,
                 validate_only: bool = False, topic_id: str | None = None) -> dict[int, list[int]]:
    """Validate, assign replicas over the live brokers (or take `assignment`, as CreateTopics may name
    one) and write the topic's znodes atomically, under `topic_id` (a new one by default); with
    `validate_only` (CreateTopics'), stop before the write. The assignment."""
    validate_topic_name(topic)
    existing = zk.get_all_topics()
    if topic in existing:
        raise TopicExistsException(f"Topic '{topic}' already exists.")
    colliding = [t for t in existing if _unify_collision_chars(t) == _unify_collision_chars(topic)]
    if colliding:
        raise InvalidTopicException(f"Topic '{topic}' collides with existing topics: {', '.join(sorted(colliding))}")
    if zk.get(zkdata.delete_topic_path(topic)) is not None:
        raise TopicExistsException(f"Topic '{topic}' is marked for deletion.")
    parse_topic_config(config or {})
    if assignment is None:
        assignment = assign_replicas_to_brokers(zk.get_all_broker_ids(), partitions, replication_factor)
    else:
        validate_replica_assignment(assignment)
        assignment = {p: list(r) for p, r in sorted(assignment.items())}
    if validate_only:
        return assignment
    znode = zkdata.TopicZNode.from_assignment(assignment, topic_id or zkdata.new_topic_id())
    config_path = zkdata.topic_config_path(topic)
    config_data = zkdata.TopicConfigZNode(config=config or {}).encode()

    def commit() -> list:
        txn = zk.kazoo.transaction()
        if zk.exists(config_path):
            txn.set_data(config_path, config_data)
        else:
            txn.create(config_path, config_data)
        txn.create(zkdata.topic_path(topic), znode.encode())
        return txn.commit()
    send = Attempts(commit)
    failure = next((r for r in zk.until_connected(send) if isinstance(r, Exception)), None)
    if failure is not None:  # lost a race with another creator, unless it was our first try, its answer lost
        got = zk.get(zkdata.topic_path(topic)) if send.again else None
        if got is None or got[0] != znode.encode():
            raise TopicExistsException(f"Topic '{topic}' already exists.")
    return assignment


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    adding: list[int] = field(default_factory=list)  # during a reassignment (the topic znode's)
    removing: list[int] = field(default_factory=list)

    @property
    def replication_factor(self) -> int:
        """Kafka's TopicCommand.getReplicationFactor: during a reassignment, the replicas being added
        do not count."""
        return len(self.replicas) - len(self.adding)


@dataclass(frozen=True)
class TopicDescription:
    topic: str
    topic_id: str | None
    partitions: list[PartitionDescription]
    config: dict[str, str]

    @property
    def replication_factor(self) -> int:
        return self.partitions[0].replication_factor if self.partitions else 0


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
        znode, parts = znodes[topic], []
        for p, a in sorted(znode.full_assignment().items()):
            st = states.get(TopicPartition(topic, p))
            parts.append(PartitionDescription(p, st.state.leader if st else -1, a.replicas,
                                              st.state.isr if st else [], a.adding, a.removing))
        out.append(TopicDescription(topic, znode.topic_id, parts, config))
    return out


# kafka-topics --describe's partition reports: (partition, the topic's min.insync.replicas, live brokers) -> shown
DESCRIBE_REPORTS: dict[str, Callable[[PartitionDescription, int, Collection[int]], bool]] = {
    "under_replicated_partitions": lambda p, min_isr, live: p.replication_factor > len(p.isr),
    "unavailable_partitions": lambda p, min_isr, live: p.leader < 0 or p.leader not in live,
    "under_min_isr_partitions": lambda p, min_isr, live: p.leader < 0 or len(p.isr) < min_isr,
}


def _ids(brokers) -> str:
    return ",".join(map(str, brokers))


def format_describe(descriptions: list[TopicDescription], report: str | None = None,
                    live_brokers: Collection[int] = (), default_min_isr: int = 1) -> str:
    """kafka-topics.sh --describe output, as Kafka 2.8's TopicCommand prints it. With a report (one of
    DESCRIBE_REPORTS), only the partitions it selects and no topic lines; min.insync.replicas is the
    topic's, else `default_min_isr` (the brokers')."""
    lines = []
    for d in descriptions:
        if report is None:
            configs = ",".join(f"{k}={v}" for k, v in sorted(d.config.items()))
            lines.append(f"Topic: {d.topic}\tTopicId: {d.topic_id or ''}\tPartitionCount: {len(d.partitions)}\t"
                         f"ReplicationFactor: {d.replication_factor}\tConfigs: {configs}")
        min_isr = int(d.config.get("min.insync.replicas", default_min_isr))
        for p in d.partitions:
            if report is not None and not DESCRIBE_REPORTS[report](p, min_isr, live_brokers):
                continue
            leader = "none" if p.leader < 0 else str(p.leader)
            line = (f"\tTopic: {d.topic}\tPartition: {p.partition}\tLeader: {leader}\t"
                    f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}")
            if p.adding or p.removing:
                line += f"\tAdding Replicas: {_ids(p.adding)}\tRemoving Replicas: {_ids(p.removing)}"
            lines.append(line)
    return "\n".join(lines)


def topic_config(zk: KrayZkClient, topic: str) -> dict[str, str]:
    """The topic's overrides in /config/topics/T; UnknownTopicOrPartitionException for no such topic."""
    if topic not in zk.get_all_topics():
        raise UnknownTopicOrPartitionException(f"Topic '{topic}' does not exist.")
    path = zkdata.topic_config_path(topic)
    got = zk.get(path)
    return zkdata.decode(zkdata.TopicConfigZNode, path, got[0]).config if got and got[0] else {}


def alter_topic_config(zk: KrayZkClient, topic: str, set_configs: dict[str, str],
                       delete_configs: list[str] = ()) -> dict[str, str]:
    """`kafka-configs --alter --entity-type topics` in ZooKeeper mode: the configs set and deleted
    (deleting one that is not set is refused, as the tool does). The configs now in force."""
    current = topic_config(zk, topic)
    missing = [name for name in delete_configs if name not in current]
    if missing:
        raise InvalidConfigurationException(f"Invalid config(s): {','.join(missing)} (not set on topic {topic})")
    configs = {k: v for k, v in {**current, **set_configs}.items() if k not in delete_configs}
    change_topic_config(zk, topic, configs)
    return configs


def change_topic_config(zk: KrayZkClient, topic: str, configs: dict[str, str], validate_only: bool = False) -> None:
    """Kafka's AdminZkClient.changeTopicConfig: validate the topic's whole new set of overrides, write
    /config/topics/T, then announce it with a sequential /config/changes/config_change_N
    ({"version":2,"entity_path":"topics/T"}) that every broker watches. Bad input changes nothing;
    `validate_only` (the admin API's) stops before the write."""
    if topic not in zk.get_all_topics():
        raise UnknownTopicOrPartitionException(f"Topic '{topic}' does not exist.")
    parse_topic_config(configs)
    if validate_only:
        return
    path = zkdata.topic_config_path(topic)
    got = zk.get(path)
    data = zkdata.TopicConfigZNode(config=configs).encode()
    if got is None:
        zk.create(path, data, makepath=True)
    else:
        zk.set(path, data, version=got[1].version)
    zk.create(f"{zkdata.CONFIG_CHANGES}/{zkdata.CONFIG_CHANGE_PREFIX}",
              zkdata.ConfigChangeNotificationZNode(entity_path=f"topics/{topic}").encode(), sequence=True)


def delete_topic(zk: KrayZkClient, topic: str) -> None:
    """Mark a topic for deletion (/admin/delete_topics/T); the controller does the rest."""
    if topic not in zk.get_all_topics():
        raise UnknownTopicOrPartitionException(f"Topic '{topic}' does not exist as expected")
    try:
        zk.create(zkdata.delete_topic_path(topic), b"", makepath=True)
    except NodeExistsError:
        raise TopicExistsException(f"Topic {topic} is already marked for deletion.") from None


def add_partitions(zk: KrayZkClient, topic: str, total_partitions: int,
                   assignment: Sequence[Sequence[int]] | None = None,
                   validate_only: bool = False, refuse_reassigning: bool = False) -> dict[int, list[int]]:
    """Grow a topic to `total_partitions` (Kafka's AdminZkClient.createPartitions), its new partitions
    assigned as the topic's first one was, or as `assignment` (CreatePartitions', one replica list per
    new partition) says; `validate_only` stops before the write. With `refuse_reassigning`
    (CreatePartitions', as ZkAdminManager: kafka-topics does not check), a topic with a partition
    being reassigned is refused. The new partitions."""
    validate_topic_name(topic)
    got = zk.get(zkdata.topic_path(topic))
    if got is None:
        raise UnknownTopicOrPartitionException(f"Topic '{topic}' does not exist as expected")
    if zk.get(zkdata.delete_topic_path(topic)) is not None:
        raise InvalidTopicException(f"The topic {topic} is queued for deletion.")
    znode = zkdata.decode(zkdata.TopicZNode, zkdata.topic_path(topic), got[0])
    if refuse_reassigning and any(a.adding or a.removing for a in znode.full_assignment().values()):
        raise ReassignmentInProgressException(f"A partition reassignment is in progress for the topic '{topic}'.")
    existing = znode.assignment()
    if total_partitions <= len(existing):
        raise InvalidPartitionsException(
            f"Topic currently has {len(existing)} partitions, {total_partitions} would not be an increase.")
    brokers = zk.get_all_broker_ids()
    increase = total_partitions - len(existing)
    if assignment is None:
        first = existing[0][0]
        start_index = next((i for i, b in enumerate(brokers) if b >= first), 0)
        new = assign_replicas_to_brokers(brokers, increase, len(existing[0]), start_index, len(existing))
    else:
        unknown = sorted({b for r in assignment for b in r} - set(brokers))
        if unknown:
            raise InvalidReplicaAssignmentException(
                f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
        if len(assignment) != increase:
            raise InvalidReplicaAssignmentException(
                f"Increasing the number of partitions by {increase} but {len(assignment)} assignments provided.")
        new = {len(existing) + i: list(r) for i, r in enumerate(assignment)}
        validate_replica_assignment({p - len(existing): r for p, r in new.items()})
        if len(new[len(existing)]) != len(existing[0]):
            raise InvalidReplicaAssignmentException(
                f"Inconsistent replication factor between partitions, partition 0 has {len(existing[0])} "
                f"while partitions [{', '.join(map(str, new))}] have replication factors "
                f"[{', '.join(str(len(r)) for r in new.values())}], respectively.")
    if validate_only:
        return new
    updated = zkdata.TopicZNode(partitions={**znode.partitions, **{str(p): r for p, r in new.items()}},
                                adding_replicas=znode.adding_replicas, removing_replicas=znode.removing_replicas,
                                topic_id=znode.topic_id)
    try:
        zk.set(zkdata.topic_path(topic), updated.encode(), version=got[1].version)
    except BadVersionError:
        raise InvalidPartitionsException(f"Topic {topic} was modified concurrently; try again") from None
    return new


def _parse(model: type[M], text: str, what: str, error: type[KrayError] = AdminCommandFailedException) -> M:
    """A JSON file one of Kafka's tools reads, checked for shape."""
    try:
        return model.model_validate_json(text)
    except ValidationError as e:
        raise error(f"Malformed {what} JSON at {zkdata.first_error(e)}") from None


def _duplicates(items) -> list:
    """Kafka's CoreUtils.duplicates: the items that appear more than once, in order."""
    counts = Counter(items)
    return [item for item in counts if counts[item] > 1]


def parse_reassignment(text: str) -> zkdata.ReassignPartitionsZNode:
    """kafka-reassign-partitions --reassignment-json-file."""
    return _parse(zkdata.ReassignPartitionsZNode, text, "reassignment", InvalidReplicaAssignmentException)


class _TopicRef(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    topic: str


class TopicsToMove(BaseModel):
    """kafka-reassign-partitions --topics-to-move-json-file: {"topics":[{"topic":"foo"}],"version":1}."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    version: Literal[1] = 1
    topics: list[_TopicRef]


def parse_topics_to_move(text: str) -> list[str]:
    topics = [t.topic for t in _parse(TopicsToMove, text, "topics-to-move").topics]
    if duplicates := _duplicates(topics):
        raise AdminCommandFailedException(
            f"List of topics to reassign contains duplicate entries: {','.join(duplicates)}")
    return topics


def parse_broker_list(text: str) -> list[int]:
    """--broker-list "1,2,3"."""
    try:
        brokers = [int(b) for b in text.split(",")]
    except ValueError:
        raise AdminCommandFailedException(f"--broker-list takes broker ids separated by commas, not {text!r}") from None
    if duplicates := _duplicates(brokers):
        raise AdminCommandFailedException(f"Broker list contains duplicate entries: {_ids(duplicates)}")
    return brokers


def parse_election_partitions(text: str) -> list[TopicPartition]:
    """kafka-leader-election --path-to-json-file: {"partitions":[{"topic":"t","partition":0}]}, the shape
    of the preferred replica election znode."""
    znode = _parse(zkdata.PreferredReplicaElectionZNode, text, "replica election")
    partitions = znode.topic_partitions()
    if not partitions:
        raise AdminCommandFailedException("Replica election data names no partitions")
    if duplicates := _duplicates(partitions):
        raise AdminCommandFailedException(
            f"Replica election data contains duplicate partitions: {','.join(map(str, duplicates))}")
    return partitions


def topic_znodes_of(zk: KrayZkClient, partitions: Iterable[TopicPartition]) -> dict[str, zkdata.TopicZNode]:
    """The topic znodes of the partitions a file names; UnknownTopicOrPartitionException for the first
    partition that does not exist."""
    partitions = list(partitions)
    topics = zk.get_topic_znodes({tp.topic for tp in partitions})
    for tp in partitions:
        if tp.topic not in topics or tp.partition not in topics[tp.topic].assignment():
            raise UnknownTopicOrPartitionException(f"Partition {tp} does not exist")
    return topics


def reassign_partitions(zk: KrayZkClient, plan: zkdata.ReassignPartitionsZNode) -> dict[TopicPartition, list[int]]:
    """Validate a reassignment against the cluster and write /admin/reassign_partitions; the partitions'
    replicas before it (what --execute prints for a rollback)."""
    if zk.get(zkdata.REASSIGN_PARTITIONS) is not None:
        raise ReassignmentInProgressException("There is an existing assignment running.")
    if not plan.partitions:
        raise InvalidReplicaAssignmentException("Partition reassignment list cannot be empty")
    brokers = set(zk.get_all_broker_ids())
    tps = plan.topic_partitions()
    if duplicates := _duplicates(tps):
        raise InvalidReplicaAssignmentException(f"Partition {duplicates[0]} appears more than once in the reassignment")
    topics = topic_znodes_of(zk, tps)
    for tp, p in zip(tps, plan.partitions):
        if zk.get(zkdata.delete_topic_path(p.topic)) is not None:
            raise InvalidTopicException(f"Topic {p.topic} is queued for deletion; it cannot be reassigned")
        if not p.replicas:
            raise InvalidReplicaAssignmentException(f"Partition {tp} has an empty replica list")
        if len(set(p.replicas)) != len(p.replicas):
            raise InvalidReplicaAssignmentException(f"Partition replica lists may not contain duplicate entries: {tp}")
        unknown = sorted(set(p.replicas) - brokers)
        if unknown:
            raise InvalidReplicaAssignmentException(f"Unknown broker ids {unknown} in the replicas of {tp}")
    try:
        zk.create(zkdata.REASSIGN_PARTITIONS, plan.encode(), makepath=True)
    except NodeExistsError:
        raise ReassignmentInProgressException("There is an existing assignment running.") from None
    return {tp: topics[tp.topic].assignment()[tp.partition] for tp in tps}


def generate_assignment(zk: KrayZkClient, topics: list[str], broker_ids: list[int],
                        rng: random.Random | None = None) -> tuple[dict[TopicPartition, list[int]],
                                                                   dict[TopicPartition, list[int]]]:
    """kafka-reassign-partitions --generate (Kafka's calculateAssignment): every partition of the topics
    assigned afresh over the brokers with the rack-unaware assignment, each topic keeping its replication
    factor. (current, proposed); writes nothing."""
    znodes = zk.get_topic_znodes(topics)
    missing = [t for t in topics if t not in znodes]
    if missing:
        raise UnknownTopicOrPartitionException(f"Topic '{missing[0]}' does not exist as expected")
    unknown = sorted(set(broker_ids) - set(zk.get_all_broker_ids()))
    if unknown:
        raise InvalidReplicaAssignmentException(f"Unknown broker ids {unknown} in --broker-list")
    current, proposed = {}, {}
    for topic, znode in znodes.items():
        assignment = znode.assignment()
        current |= {TopicPartition(topic, p): r for p, r in assignment.items()}
        new = assign_replicas_to_brokers(sorted(broker_ids), len(assignment), len(assignment[min(assignment)]),
                                         rng=rng)
        proposed |= {TopicPartition(topic, p): r for p, r in new.items()}
    return current, proposed


def format_reassignment_json(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's formatAsReassignmentJson: partitions in order, each replica in any log directory."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for tp, r in sorted(assignment.items())]}, separators=(",", ":"))


def list_reassignments(topics: Mapping[str, zkdata.TopicZNode]) -> dict[TopicPartition, PartitionReassignment]:
    """Kafka's listPartitionReassignments, from the topic znodes: the partitions they name replicas being
    added to or removed from (the controller persists them for the whole move)."""
    return {TopicPartition(t, p): a for t, z in topics.items() for p, a in z.full_assignment().items()
            if a.adding or a.removing}


def format_reassignments(reassignments: Mapping[TopicPartition, PartitionReassignment]) -> str:
    """kafka-reassign-partitions --list (Kafka's curReassignmentsToString)."""
    if not reassignments:
        return "No partition reassignments found."
    return "Current partition reassignments:\n" + "\n".join(
        f"{tp}: replicas: {_ids(r.replicas)}.{f' adding: {_ids(r.adding)}.' if r.adding else ''}"
        f"{f' removing: {_ids(r.removing)}.' if r.removing else ''}" for tp, r in sorted(reassignments.items()))


class ReassignmentState(NamedTuple):
    """Kafka's PartitionReassignmentState: done when /admin/reassign_partitions no longer names it."""

    current: list[int]
    target: list[int]
    done: bool


def verify_reassignment(zk: KrayZkClient,
                        plan: zkdata.ReassignPartitionsZNode) -> dict[TopicPartition, ReassignmentState]:
    """kafka-reassign-partitions --verify in ZooKeeper mode (Kafka's findPartitionReassignmentStates)."""
    in_progress = zk.get_znode(zkdata.ReassignPartitionsZNode, zkdata.REASSIGN_PARTITIONS)
    running = set(in_progress.topic_partitions()) if in_progress else set()
    tps = plan.topic_partitions()
    topics = topic_znodes_of(zk, tps)
    return {tp: ReassignmentState(topics[tp.topic].assignment()[tp.partition], list(p.replicas), tp not in running)
            for tp, p in zip(tps, plan.partitions)}


def format_reassignment_states(states: Mapping[TopicPartition, ReassignmentState]) -> str:
    """Kafka's partitionReassignmentStatesToString."""
    lines = ["Status of partition reassignment:"]
    for tp, s in sorted(states.items()):
        if not s.done:
            lines.append(f"Reassignment of partition {tp} is still in progress.")
        elif s.current == s.target:
            lines.append(f"Reassignment of partition {tp} is complete.")
        else:
            lines.append(f"There is no active reassignment of partition {tp}, but replica set is "
                         f"{_ids(s.current)} rather than {_ids(s.target)}.")
    return "\n".join(lines)


def format_election_results(election_type: str,
                            results: Mapping[TopicPartition, ApiError | int | None]) -> tuple[str, int]:
    """kafka-leader-election's report (Kafka 2.8's LeaderElectionCommand) and how many partitions failed.
    Kafka 2.8 names the elected partitions again on its "Valid replica already elected" line (KAFKA-12684,
    fixed in 3.0); this names those that needed no election."""
    outcomes = sorted(results.items())
    errors = [(tp, e) for tp, e in outcomes if isinstance(e, ApiError)]  # else elected: its new leader
    elected = [tp for tp, e in outcomes if not isinstance(e, ApiError)]
    not_needed = [tp for tp, e in errors if e.error == Errors.ELECTION_NOT_NEEDED]
    failed = [(tp, e) for tp, e in errors if e.error != Errors.ELECTION_NOT_NEEDED]
    lines = []
    if elected:
        lines.append(f"Successfully completed leader election ({election_type}) for partitions "
                     f"{', '.join(map(str, elected))}")
    if not_needed:
        lines.append(f"Valid replica already elected for partitions {', '.join(map(str, not_needed))}")
    lines += [f"Error completing leader election ({election_type}) for partition: {tp}: {e.exception()}"
              for tp, e in failed]
    return "\n".join(lines), len(failed)


def preferred_replica_election(zk: KrayZkClient, partitions: list[TopicPartition] | None = None) -> list[TopicPartition]:
    """Write /admin/preferred_replica_election (all partitions when None), as the old Kafka tool does."""
    if zk.get(zkdata.PREFERRED_REPLICA_ELECTION) is not None:
        raise ReassignmentInProgressException("Preferred replica leader election currently in progress")
    if partitions is None:
        znodes = zk.get_topic_znodes(zk.get_all_topics())
        partitions = [TopicPartition(t, p) for t, z in sorted(znodes.items()) for p in sorted(z.assignment())]
    znode = zkdata.PreferredReplicaElectionZNode(
        partitions=[zkdata.PartitionRef(topic=tp.topic, partition=tp.partition) for tp in partitions])
    zk.create(zkdata.PREFERRED_REPLICA_ELECTION, znode.encode(), makepath=True)
    return partitions
