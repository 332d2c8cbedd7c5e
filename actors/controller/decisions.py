"""The controller flows' decisions, pure: what a ZooKeeper change means, given the context.

Each flow observes ZooKeeper, asks one of these what to do, and applies the answer (flow.py). Nothing
here reads ZooKeeper or changes the context; the state machines' own plans are in `changes.py`.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from actors.controller.context import ControllerContext, ReplicaAssignment
from coordination import zkdata
from coordination.errors import ApiError, Errors
from coordination.zkdata import TopicPartition


@dataclass(frozen=True)
class BrokerChanges:
    """Kafka's processBrokerChange sorting: brokers new to the controller, gone, and bounced (registered
    again with a newer broker epoch since the controller last looked: dead, then new)."""

    new: frozenset[int]
    dead: frozenset[int]
    bounced: frozenset[int]

    @property
    def failed(self) -> frozenset[int]:
        return self.dead | self.bounced

    @property
    def started(self) -> frozenset[int]:
        return self.new | self.bounced

    def __bool__(self) -> bool:
        return bool(self.new or self.dead or self.bounced)


def broker_changes(known_epochs: dict[int, int], registered_epochs: dict[int, int]) -> BrokerChanges:
    return BrokerChanges(
        new=frozenset(b for b in registered_epochs if b not in known_epochs),
        dead=frozenset(b for b in known_epochs if b not in registered_epochs),
        bounced=frozenset(b for b, e in registered_epochs.items() if b in known_epochs and e > known_epochs[b]))


@dataclass(frozen=True)
class TopicChanges:
    new: frozenset[str]
    removed: frozenset[str]  # gone from ZooKeeper behind the controller's back (not through deletion)


def topic_changes(ctx: ControllerContext, in_zookeeper: set[str]) -> TopicChanges:
    return TopicChanges(
        new=frozenset(in_zookeeper - ctx.all_topics),
        removed=frozenset(t for t in ctx.all_topics - in_zookeeper if not ctx.is_topic_queued_for_deletion(t)))


@dataclass(frozen=True)
class PartitionModification:
    """What a change of /brokers/topics/T means (Kafka's processPartitionModifications): partitions
    to add, and whether ZooKeeper must get the controller's assignment back (a partition changed or
    removed there, or partitions added to a topic being deleted, which are refused)."""

    to_add: dict[TopicPartition, tuple[int, ...]]
    restore: bool
    refused: tuple[int, ...] = ()  # partitions added to a topic being deleted


def partition_modification(ctx: ControllerContext, topic: str,
                           assignment: dict[int, list[int]]) -> PartitionModification:
    to_add = {TopicPartition(topic, p): tuple(r) for p, r in sorted(assignment.items())
              if not ctx.partition_replicas(TopicPartition(topic, p))}
    if ctx.is_topic_queued_for_deletion(topic) and to_add:
        return PartitionModification({}, restore=True, refused=tuple(tp.partition for tp in to_add))
    changed = any(tuple(r) != ctx.partition_replicas(TopicPartition(topic, p))
                  for p, r in assignment.items() if TopicPartition(topic, p) not in to_add)
    removed = any(tp.partition not in assignment for tp in ctx.partitions_for_topic(topic))
    return PartitionModification(to_add, restore=changed or removed)


def reassignment_complete(assignment: ReplicaAssignment, isr: tuple[int, ...] | None) -> bool:
    """Kafka's isReassignmentComplete: no move, or every target replica in the ISR (None: no state yet)."""
    if not assignment.is_being_reassigned:
        return True
    return isr is not None and set(assignment.target_replicas) <= set(isr)


def reassignment_error(ctx: ControllerContext, tp: TopicPartition, target: tuple[int, ...]) -> str | None:
    """Why a reassignment of tp to `target` cannot start, or None. An empty or duplicate target is
    refused here too (kray, not Kafka: Kafka validates replicas only on its admin API's path, and an
    empty target through ZooKeeper would leave the partition with no replica)."""
    if ctx.is_topic_queued_for_deletion(tp.topic):
        return "UNKNOWN_TOPIC_OR_PARTITION: the topic is being deleted"
    if not ctx.partition_replicas(tp):
        return "UNKNOWN_TOPIC_OR_PARTITION: the partition does not exist"
    if not target or len(set(target)) != len(target):
        return "INVALID_REPLICA_ASSIGNMENT: empty or duplicate replicas"
    return None


def api_reassignment_error(ctx: ControllerContext, tp: TopicPartition, target: tuple[int, ...]) -> ApiError | None:
    """Kafka's validateReplicas, on the admin API's path: a target that is empty, names a broker twice
    or a negative id, or adds a replica on a broker that is not alive, is refused."""
    if not target:
        return ApiError(Errors.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment.")
    if len(set(target)) != len(target):
        return ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                        f"Duplicate replica ids in partition reassignment replica list: {list(target)}")
    if any(r < 0 for r in target):
        return ApiError(Errors.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: {list(target)}")
    adding = ReplicaAssignment.for_reassignment(ctx.partition_full_assignment(tp).original_replicas, target).adding
    if not set(adding) <= ctx.live_broker_ids:
        return ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                        f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, live "
                        f"broker list: {sorted(ctx.live_broker_ids)}")
    return None


@dataclass(frozen=True)
class ControlledShutdownPlan:
    """Kafka's doControlledShutdown: of the replicated partitions on the broker (topics being deleted
    aside), those it leads get a controlled-shutdown election, those it follows a StopReplica and
    leave the ISR."""

    led: list[TopicPartition]
    followed: list[TopicPartition]


def controlled_shutdown_plan(ctx: ControllerContext, broker_id: int) -> ControlledShutdownPlan:
    to_act_on = [tp for tp in ctx.partitions_on_broker(broker_id) if _replicated_and_kept(ctx, tp)]
    led = [tp for tp in to_act_on if ctx.partition_leadership[tp].leader_and_isr.leader == broker_id]
    led_set = set(led)  # built once (built for each partition, 50,000 led of 100,000 took 2 minutes)
    return ControlledShutdownPlan(led, [tp for tp in to_act_on if tp not in led_set])


def partitions_still_led(ctx: ControllerContext, broker_id: int) -> list[TopicPartition]:
    """What a broker shutting down still leads: its answer, empty when it may stop."""
    return sorted(tp for tp, l in ctx.partition_leadership.items()
                  if l.leader_and_isr.leader == broker_id and _replicated_and_kept(ctx, tp))


def _replicated_and_kept(ctx: ControllerContext, tp: TopicPartition) -> bool:
    return (len(ctx.partition_replicas(tp)) > 1 and tp in ctx.partition_leadership
            and not ctx.is_topic_queued_for_deletion(tp.topic))


@dataclass(frozen=True)
class OfflineDirReplicas:
    """What a broker's LeaderAndIsr answer says of its log directories (Kafka's
    processLeaderAndIsrResponseReceived): its replicas on failed directories now, and those of them
    that were not offline before (they go OfflineReplica)."""

    current: frozenset[TopicPartition]
    newly_offline: frozenset[TopicPartition]


def replicas_on_offline_dirs(previous: set[TopicPartition] | frozenset[TopicPartition],
                             answers: Iterable[tuple[TopicPartition, Errors]]) -> OfflineDirReplicas:
    """A partition answered KAFKA_STORAGE_ERROR is on a failed directory; one answered NONE is not (a
    new incarnation's, or a log created again on a live directory); any other answer changes nothing."""
    offline = {tp for tp, error in answers if error == Errors.KAFKA_STORAGE_ERROR}
    online = {tp for tp, error in answers if error == Errors.NONE}
    current = frozenset((set(previous) - online) | offline)
    return OfflineDirReplicas(current, current - frozenset(previous))


def log_dir_event_brokers(notifications: Iterable[zkdata.LogDirEventNotificationZNode]) -> list[int]:
    """The brokers the log directory event notifications name, each once (Kafka's getBrokerIdsFromLogDirEvents,
    the failure event being the only one)."""
    return sorted({n.broker for n in notifications
                   if n.event == zkdata.LogDirEventNotificationZNode.LOG_DIR_FAILURE_EVENT})
