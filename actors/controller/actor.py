"""The controller candidate: a thin Ray shell around KafkaController and its inbox.

Created by its broker, beside it, and ends the moment its broker's process does (`die_with`). A
killed candidate is not restarted by Ray: its broker starts a new one after
`candidate_restart_backoff_ms`, which opens a new ZooKeeper session and competes again once the old
session's /controller is gone.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future

import ray

from actors import records
from actors.config import ClusterConfig
from actors.controller.changes import ElectionType
from actors.controller.channel import ControllerChannelManager
from actors.controller.detector import RayFailureDetector
from actors.controller.controller import KafkaController
from actors.controller.metrics import ControllerMetrics
from actors.metrics import EXPORT_INTERVAL_S
from actors.controller.events import (
    ApiPartitionReassignment,
    ControlledShutdown,
    ControllerEventManager,
    DescribeController,
    ListPartitionReassignments,
    ReplicaLeaderElection,
    RequestSenderDied,
    ResponseReceived,
    Startup,
    TopicUncleanLeaderElectionEnable,
    controller_state,
)
from actors.links.faults import Direction, LinkFault, faultable
from actors.links.proxy import LinkTable
from actors.names import broker_actor_name, controller_actor_name
from actors.recording import RecordSink
from actors.runtime import BROKER_ACTOR_MODULE, configure_actor_process, die_with, gc_paused, preload, rss_mb
from actors.protocol import ControllerResponse


@ray.remote(num_cpus=0, max_concurrency=4, concurrency_groups={"supervision": 1, "process": 1})
class ControllerActor:
    def __init__(self, broker_id: int, config: ClusterConfig, broker_pid: int):
        configure_actor_process(config.controller.control_plane_niceness)
        die_with(broker_pid, broker_actor_name(broker_id))
        self.broker_id = broker_id
        self.links = LinkTable(name=f"controller-links-{broker_id}") if config.link_faults_enable else None
        self.zk = config.zk_client(links=self.links).start()
        me = ray.get_runtime_context().current_actor
        self.inbox = ControllerEventManager(f"controller-event-thread-{broker_id}", self._process)
        self.metrics = ControllerMetrics(broker_id, config.namespace)
        self.controller = KafkaController(
            broker_id, self.zk, self.inbox,
            channel_factory=lambda epoch: ControllerChannelManager(
                broker_id, epoch, config, me,
                on_sender_died=lambda b, sender: self.inbox.put(RequestSenderDied(broker_id=b, sender=sender))),
            config=config.controller,
            detector_factory=(lambda role, on_death: RayFailureDetector(
                config.namespace, broker_actor_name if role == "broker" else controller_actor_name, on_death))
            if config.controller.ray_failure_detector_enable else None,
            standby_session=lambda: config.zk_client(links=self.links).start(),
        )
        self.controller.inbox_depth = self.inbox.depth
        self.sink = RecordSink(config.recorder, config.namespace)
        self.controller.on_timeline = lambda t: self.sink.emit(records.TIMELINES, t)
        self.failed_events = 0  # events that raised (the controller moved after each)
        self._processed = threading.Event()  # events processed since the gauges were last refreshed
        self._stopped = threading.Event()
        preload(BROKER_ACTOR_MODULE)  # for the failure detector's lookups
        self.inbox.start()
        self.inbox.put(Startup())
        threading.Thread(target=self._refresh_gauges, name=f"controller-metrics-{broker_id}", daemon=True).start()

    def _process(self, event) -> None:
        state = controller_state(event)
        self.metrics.event_started(state)
        started = time.time() * 1000
        epoch, was_active = self.controller.ctx.epoch, self.controller.active  # a failed event resigns
        with gc_paused():
            error = self.controller.process(event)
        c = self.controller
        if error is not None and self._stopped.is_set():
            error = None  # its ZooKeeper client closed under it as the candidate shut down: no failure
        if error is not None:
            self.failed_events += 1
            self.metrics.event_failed()
        if self.sink.enabled:
            self.sink.emit(records.CONTROLLER_EVENTS, records.ControllerEventRecord(
                controller_id=self.broker_id, controller_epoch=c.ctx.epoch if error is None else epoch,
                active=c.active or (error is not None and was_active), event=type(event).__name__,
                enqueued_ms=event.enqueued_ms,
                started_ms=started, finished_ms=time.time() * 1000, error=error))
        self.metrics.event_processed(state, self.inbox.last_queue_time_ms, time.time() * 1000 - started,
                                     self.inbox.depth(), c.scope.psm.unclean_elections)
        if not isinstance(event, DescribeController):
            self._processed.set()

    def _refresh_gauges(self) -> None:
        """Kafka refreshes its controller gauges after every event; here they cost O(partitions), so they
        are refreshed at most once a second, from a status read in order with the events, and once more
        after the last event of a burst (an idle cluster shows its final state, not the one before it)."""
        while not self._stopped.wait(EXPORT_INTERVAL_S):
            if not self._processed.is_set():
                continue
            self._processed.clear()
            try:
                self.metrics.record_status(self._ask(DescribeController(reply=Future()), timeout=30))
            except Exception:  # the inbox is closing, or busy for 30 s: the next round tries again
                self._processed.set()

    def on_responses(self, responses: list[ControllerResponse], controller_epochs: list[int]) -> None:
        for response, epoch in zip(responses, controller_epochs):
            self.inbox.put(ResponseReceived(response=response, controller_epoch=epoch))

    def _ask(self, event, timeout: float):
        self.inbox.put(event)
        return event.reply.result(timeout=timeout)

    def status(self, timeout: float = 30.0) -> dict:
        """The controller's state, read in order with its events."""
        status = self._ask(DescribeController(reply=Future()), timeout)
        return status | {"inbox_depth": self.inbox.depth(), "last_queue_time_ms": self.inbox.last_queue_time_ms,
                         "failed_events": self.failed_events, "zk_requests_sent_again": self.zk.lost_answers,
                         "pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                         "session_id": self.zk.session_id, "rss_mb": rss_mb()}

    def timelines(self) -> list[dict]:
        """The failovers this candidate handled while active (most recent last)."""
        return [t.record() for t in list(self.controller.timelines)]

    def controlled_shutdown(self, broker_id: int, broker_epoch: int, timeout: float = 60.0):
        """Kafka's ControlledShutdownRequest: the partitions the broker still leads, or an Errors code."""
        return self._ask(ControlledShutdown(broker_id=broker_id, broker_epoch=broker_epoch, reply=Future()), timeout)

    def elect_leaders(self, partitions: list[tuple[str, int]] | None = None,
                      election_type: ElectionType = ElectionType.PREFERRED, timeout: float = 60.0):
        """Kafka's ElectLeaders (all partitions when None): per partition its new leader or its ApiError."""
        return self._ask(ReplicaLeaderElection(partitions=None if partitions is None else tuple(partitions),
                                               election_type=election_type, reply=Future()), timeout)

    def alter_partition_reassignments(self, reassignments: list[tuple[tuple[str, int], list[int] | None]],
                                      timeout: float = 60.0):
        """KIP-455's AlterPartitionReassignments: per partition its target replicas, or None to cancel its
        move; per partition None or its ApiError (or NOT_CONTROLLER)."""
        return self._ask(ApiPartitionReassignment(reassignments=tuple((tuple(tp), None if t is None else tuple(t))
                                                                      for tp, t in reassignments), reply=Future()),
                         timeout)

    def list_partition_reassignments(self, partitions: list[tuple[str, int]] | None = None, timeout: float = 60.0):
        """KIP-455's ListPartitionReassignments: the ReplicaAssignment of each partition named (all when
        None) that is being moved (or NOT_CONTROLLER)."""
        return self._ask(ListPartitionReassignments(partitions=None if partitions is None else tuple(partitions),
                                                    reply=Future()), timeout)

    def is_active(self) -> bool:
        """Whether this candidate is the active controller now (Kafka's KafkaController.isActive), read
        outside the inbox: its broker asks before it serves a request only the controller may."""
        return self.controller.active

    def enable_topic_unclean_leader_election(self, topic: str) -> None:
        """Kafka's enableTopicUncleanLeaderElection: the topic's offline partitions are elected again,
        now allowed outside the ISR (only by the active controller; a candidate's inbox drops it)."""
        self.inbox.put(TopicUncleanLeaderElectionEnable(topic=topic))

    def zk_session(self) -> tuple[int, bytes]:
        """(session id, password) of this candidate's ZooKeeper session, for session-expiry chaos."""
        return self.zk.kazoo.client_id

    @ray.method(concurrency_group="process")
    def set_link_fault(self, link: str, direction: Direction, fault: LinkFault) -> dict:
        """Fault one direction of this candidate's link (`zookeeper`), at once; every link's faults."""
        return faultable(self.links).set_fault(link, direction, fault)

    @ray.method(concurrency_group="process")
    def process(self) -> dict:
        """This candidate's process (pid, node), answered at once: not in order with its events, so that
        a busy controller can be stopped before it is killed (`actors.cluster.sigkill_actor`)."""
        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}

    @ray.method(concurrency_group="supervision")
    def wait_closed(self) -> str:
        """Answered once the candidate is shut down, never while it runs: its broker waits on it to
        learn of its death (an error)."""
        self._stopped.wait()
        return "closed"

    def shutdown(self) -> None:
        """Close the ZooKeeper session so /controller goes at once (a clean broker shutdown)."""
        self._stopped.set()
        self.inbox.close()
        self.sink.close()
        self.controller.close()
        self.zk.close()
