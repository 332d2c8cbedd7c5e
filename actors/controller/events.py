"""Controller events and the single-threaded inbox that processes them one at a time.

ZooKeeper watches, kazoo state changes, RequestSender responses and actor calls
only `put` events here; one thread takes them in FIFO order and is the only
code that touches ControllerContext (Kafka's ControllerEventManager).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

from actors.controller.changes import ElectionType
from actors.protocol import ControllerResponse
from coordination.errors import Errors

log = logging.getLogger(__name__)


def now_ms() -> float:
    return time.time() * 1000


@dataclass(frozen=True)
class ControllerEvent:
    enqueued_ms: float = field(default_factory=now_ms, compare=False)


@dataclass(frozen=True)
class Startup(ControllerEvent):
    pass


@dataclass(frozen=True)
class ControllerChange(ControllerEvent):
    """/controller was created, changed or deleted."""


@dataclass(frozen=True)
class Reelect(ControllerEvent):
    """A new session is connected after the old one expired."""


@dataclass(frozen=True)
class Expire(ControllerEvent):
    """Our ZooKeeper session expired: our /controller znode is gone."""


@dataclass(frozen=True)
class BrokerChange(ControllerEvent):
    pass


@dataclass(frozen=True)
class BrokerActorDied(ControllerEvent):
    """Ray reports that a broker's actor process died (RayFailureDetector), before ZooKeeper knows."""

    broker_id: int = -1
    state: str = ""


@dataclass(frozen=True)
class ControllerActorDied(ControllerEvent):
    """Ray reports that the active controller's actor process died (seen by a candidate)."""

    broker_id: int = -1
    state: str = ""


@dataclass(frozen=True)
class RequestSenderDied(ControllerEvent):
    """The RequestSender actor to a broker died (killed); its unanswered requests need a new one."""

    broker_id: int = -1
    sender: object = field(default=None, compare=False)  # which one (a newer one may have replaced it)


@dataclass(frozen=True)
class TopicChange(ControllerEvent):
    pass


@dataclass(frozen=True)
class PartitionModifications(ControllerEvent):
    """/brokers/topics/T changed: partitions may have been added."""

    topic: str = ""


@dataclass(frozen=True)
class TopicDeletion(ControllerEvent):
    """/admin/delete_topics changed."""


@dataclass(frozen=True)
class IsrChangeNotification(ControllerEvent):
    """A leader wrote /isr_change_notification/isr_change_N."""


@dataclass(frozen=True)
class LogDirEventNotification(ControllerEvent):
    """A broker wrote /log_dir_event_notification/log_dir_event_N: one of its log directories failed (KIP-112)."""


@dataclass(frozen=True)
class PreferredReplicaElection(ControllerEvent):
    """/admin/preferred_replica_election was created."""


@dataclass(frozen=True)
class PartitionReassignment(ControllerEvent):
    """/admin/reassign_partitions was created."""


@dataclass(frozen=True)
class PartitionReassignmentIsrChange(ControllerEvent):
    """The state znode of a partition being reassigned changed: its ISR may now hold the targets."""

    topic_partition: object = None


@dataclass(frozen=True)
class TopicUncleanLeaderElectionEnable(ControllerEvent):
    """A topic's unclean.leader.election.enable was turned on (kafka-configs --alter): its offline
    partitions may now be elected from outside the ISR."""

    topic: str = ""


@dataclass(frozen=True)
class AutoPreferredReplicaLeaderElection(ControllerEvent):
    """The auto leader rebalance task's periodic check, from the task of one controller term."""

    task: object = field(default=None, compare=False)


@dataclass(frozen=True)
class ControlledShutdown(ControllerEvent):
    """A broker asks to shut down; `reply` gets the partitions it still leads, or an Errors code."""

    broker_id: int = -1
    broker_epoch: int = -1
    reply: Future | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ReplicaLeaderElection(ControllerEvent):
    """An API-triggered election (kray leader-election) of the partitions, or of all when None; `reply`
    gets per-partition errors."""

    partitions: tuple | None = None
    election_type: ElectionType = ElectionType.PREFERRED
    reply: Future | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ApiPartitionReassignment(ControllerEvent):
    """KIP-455's AlterPartitionReassignments: per partition ((topic, partition), target replicas), a
    target of None cancelling the partition's move (kray reassign --cancel); `reply` gets per-partition
    errors."""

    reassignments: tuple = ()
    reply: Future | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ListPartitionReassignments(ControllerEvent):
    """KIP-455's ListPartitionReassignments: the partitions named (all when None) that are being moved;
    `reply` gets their assignments."""

    partitions: tuple | None = None
    reply: Future | None = field(default=None, compare=False)


@dataclass(frozen=True)
class DescribeController(ControllerEvent):
    """A read of the controller's state, answered in order with the other events."""

    reply: Future | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ResponseReceived(ControllerEvent):
    response: ControllerResponse | None = None
    controller_epoch: int = -1


@dataclass(frozen=True)
class ShutdownEventThread(ControllerEvent):
    pass


CONTROLLER_STATES = {  # Kafka's ControllerState: the value its ControllerState gauge shows
    "Idle": 0, "ControllerChange": 1, "BrokerChange": 2, "TopicChange": 3, "TopicDeletion": 4,
    "AlterPartitionReassignment": 5, "AutoLeaderBalance": 6, "ManualLeaderBalance": 7, "ControlledShutdown": 8,
    "IsrChange": 9, "LeaderAndIsrResponseReceived": 10, "LogDirChange": 11, "ControllerShutdown": 12,
    "UncleanLeaderElectionEnable": 13, "TopicUncleanLeaderElectionEnable": 14, "ListPartitionReassignment": 15,
    "UpdateMetadataResponseReceived": 16, "UpdateFeatures": 17}

_STATE_OF = {  # each event's ControllerState, as Kafka's event of that kind declares it
    "Startup": "ControllerChange", "ControllerChange": "ControllerChange", "Reelect": "ControllerChange",
    "Expire": "ControllerChange", "ControllerActorDied": "ControllerChange",  # kray's: the Ray detector's
    "BrokerChange": "BrokerChange", "BrokerActorDied": "BrokerChange",
    "RequestSenderDied": "BrokerChange",  # kray's: a broker's channel is rebuilt
    "TopicChange": "TopicChange", "PartitionModifications": "TopicChange", "TopicDeletion": "TopicDeletion",
    "PartitionReassignment": "AlterPartitionReassignment",
    "PartitionReassignmentIsrChange": "AlterPartitionReassignment",
    "AutoPreferredReplicaLeaderElection": "AutoLeaderBalance", "PreferredReplicaElection": "ManualLeaderBalance",
    "ReplicaLeaderElection": "ManualLeaderBalance", "ControlledShutdown": "ControlledShutdown",
    "ApiPartitionReassignment": "AlterPartitionReassignment",
    "ListPartitionReassignments": "ListPartitionReassignment",
    "IsrChangeNotification": "IsrChange", "LogDirEventNotification": "LogDirChange",
    "TopicUncleanLeaderElectionEnable": "TopicUncleanLeaderElectionEnable",
    "ShutdownEventThread": "ControllerShutdown",
}
_RESPONSE_STATES = {"LeaderAndIsr": "LeaderAndIsrResponseReceived",
                    "UpdateMetadata": "UpdateMetadataResponseReceived",
                    "StopReplica": "TopicDeletion"}  # Kafka's TopicDeletionStopReplicaResponseReceived


def controller_state(event: ControllerEvent) -> str:
    """The ControllerState the controller is in while it processes `event` (Idle: a read of its state)."""
    if isinstance(event, ResponseReceived):
        return _RESPONSE_STATES.get(event.response.api, "Idle") if event.response is not None else "Idle"
    return _STATE_OF.get(type(event).__name__, "Idle")


def rate_and_time_metric(state: str) -> str | None:
    """The name of Kafka's per-state timer (ControllerStats): BrokerChange keeps its older name,
    LeaderElectionRateAndTimeMs; Idle has none."""
    return {"Idle": None, "BrokerChange": "LeaderElectionRateAndTimeMs",
            "AlterPartitionReassignment": "PartitionReassignmentRateAndTimeMs"}.get(state, f"{state}RateAndTimeMs")


ELECTION_EVENTS = (Startup, ControllerChange, Reelect, Expire, ControllerActorDied, DescribeController,
                   ShutdownEventThread)  # what a candidate processes too; every other event needs an active controller


def preempt(event: ControllerEvent) -> None:
    """Kafka's ControllerEvent.preempt: the caller of an event a resigned controller will not process,
    if one waits, is answered NOT_CONTROLLER now (it asks the next controller) rather than when the
    inbox reaches the event or its own timeout passes."""
    reply = getattr(event, "reply", None)
    if reply is not None and not reply.done():
        reply.set_result(Errors.NOT_CONTROLLER)


class ScheduledEvent:
    """Kafka's scheduleAutoLeaderRebalanceTask: an event put once after a delay, and the next scheduled
    only after the controller processed it (`processed`), so that a slow inbox never holds two. One per
    controller term: `cancel` ends it, and an event of an older task schedules nothing."""

    def __init__(self, put: Callable[[ControllerEvent], None], make_event: Callable[["ScheduledEvent"], ControllerEvent],
                 interval_s: float):
        self._put, self._make_event, self.interval_s = put, make_event, interval_s
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._cancelled = False

    def schedule(self, delay_s: float) -> None:
        with self._lock:
            if not self._cancelled:
                self._timer = threading.Timer(delay_s, lambda: self._put(self._make_event(self)))
                self._timer.daemon = True
                self._timer.start()

    def processed(self, event: ControllerEvent) -> None:
        """The controller processed `event`: the next one after the interval, if it is this task's."""
        if getattr(event, "task", None) is self:
            self.schedule(self.interval_s)

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._timer is not None:
                self._timer.cancel()


class ControllerEventManager:
    """One queue, one thread. `process` is called with each event in arrival order."""

    def __init__(self, name: str, process: Callable[[ControllerEvent], None]):
        self._queue: queue.Queue[ControllerEvent] = queue.Queue()
        self._process = process
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.last_queue_time_ms = 0.0
        self.processed = 0

    def start(self) -> None:
        self._thread.start()

    def put(self, event: ControllerEvent) -> None:
        self._queue.put(event)

    def preempt_queued(self) -> int:
        """Take out every queued event only an active controller processes, answering its caller
        (`preempt`), as a controller resigns; how many. The election events stay, in their order."""
        with self._queue.mutex:
            queued = list(self._queue.queue)
            self._queue.queue.clear()
            self._queue.queue.extend(e for e in queued if isinstance(e, ELECTION_EVENTS))
        dropped = [e for e in queued if not isinstance(e, ELECTION_EVENTS)]
        for event in dropped:
            preempt(event)
        return len(dropped)

    def clear_and_put(self, event: ControllerEvent) -> int:
        """Kafka's clearAndPut, for an expired session: what an active controller would process is
        preempted and `event` goes first, ahead of the election events; how many were preempted."""
        preempted = self.preempt_queued()
        with self._queue.mutex:
            self._queue.queue.appendleft(event)
            self._queue.unfinished_tasks += 1
            self._queue.not_empty.notify()
        return preempted

    def depth(self) -> int:
        return self._queue.qsize()

    def close(self) -> None:
        self._queue.put(ShutdownEventThread())
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if isinstance(event, ShutdownEventThread):
                return
            self.last_queue_time_ms = now_ms() - event.enqueued_ms
            try:
                self._process(event)
            except Exception:
                log.exception("Uncaught error processing controller event %s", type(event).__name__)
            self.processed += 1
