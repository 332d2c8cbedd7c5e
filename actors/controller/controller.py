"""KafkaController: the inbox's event handler. Election, failover, resignation, and dispatch.

Everything here runs on the inbox thread. The election events (events.ELECTION_EVENTS) are handled
here; every other event goes to the flow registered for its type (flow.py), with the term's
FlowScope: `brokers.py` (broker startup, failure, controlled shutdown), `topics.py` (creation,
expansion, deletion), `leadership.py` (preferred and auto rebalance elections, ISR change
notifications), `log_dirs.py` (KIP-112: failed log directories), `reassignment.py`,
`admin_requests.py`. Decisions are pure (`decisions.py`,
`changes.py`); the state machines (`zk_state_machines.py`) persist and apply them; the batch is sent
once per broker at the end of each event.
"""
from __future__ import annotations

import logging
from collections import deque
from typing import Callable

from kazoo.client import KazooState
from kazoo.exceptions import ConnectionClosedError, SessionExpiredError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from actors.config import ControllerConfig
from actors.controller import admin_requests, brokers, leadership, log_dirs, reassignment, topics
from actors.controller.context import ControllerContext
from actors.controller.controller_zk import FencedZkClient
from actors.controller.events import (
    ELECTION_EVENTS,
    AutoPreferredReplicaLeaderElection,
    BrokerActorDied,
    BrokerChange,
    ControllerActorDied,
    ControllerChange,
    ControllerEvent,
    ControllerEventManager,
    DescribeController,
    Expire,
    IsrChangeNotification,
    LogDirEventNotification,
    PartitionReassignment,
    PreferredReplicaElection,
    Reelect,
    ResponseReceived,
    ScheduledEvent,
    Startup,
    TopicChange,
    TopicDeletion,
    now_ms,
    preempt,
)
from actors.controller.failover import on_controller_failover
from actors.controller.flow import FLOWS, FlowScope
from actors.controller.standby import WarmStandby
from actors.controller.state_machines import PartitionStateName as P
from actors.controller.timeline import FailoverTimeline, Laps
from actors.records import tp_key
from coordination import zkdata
from coordination.election import ControllerElection
from coordination.errors import ControllerMovedException, Errors
from coordination.zkclient import KrayZkClient

log = logging.getLogger(__name__)

FLOW_MODULES = (admin_requests, brokers, leadership, log_dirs, reassignment, topics)  # importing them registers their flows
TIMELINES_KEPT = 1000
AUTO_REBALANCE_FIRST_DELAY_S = 5.0  # Kafka schedules the first check 5 s after failover (sooner if the interval is)


class KafkaController:
    def __init__(self, broker_id: int, zk: KrayZkClient, inbox: ControllerEventManager,
                 channel_factory: Callable[[int], object], config: ControllerConfig | None = None,
                 detector_factory: Callable[[str, Callable[[int, str], None]], object] | None = None,
                 standby_session: Callable[[], KrayZkClient] | None = None):
        """`standby_session()`: a new ZooKeeper client for a round of the warm standby (None: no standby)."""
        self.broker_id = broker_id
        self.zk = zk
        self.inbox = inbox
        self.put = inbox.put
        self.config = config or ControllerConfig()
        self._channel_factory = channel_factory
        # (role, on_death) -> a RayFailureDetector for "broker" or "controller" actors; None: deaths are learnt
        # from ZooKeeper sessions only, as in Kafka
        self._detector_factory = detector_factory
        self._controller_watch = None  # a candidate's, on the active controller: (detector, ActiveController)
        self.standby = (WarmStandby(standby_session, zk, broker_id, self.config.warm_standby_refresh_ms)
                        if self.config.warm_standby_enable and standby_session is not None else None)
        self.election = ControllerElection(zk, broker_id, notify=lambda: self.put(ControllerChange()))
        self.watch_generation = 0
        self._session_lost = False
        self._watches: dict[str, object] = {}
        self._auto_rebalance: ScheduledEvent | None = None
        self.active = False
        self.timelines: deque[FailoverTimeline] = deque(maxlen=TIMELINES_KEPT)
        self.timeline: FailoverTimeline | None = None
        self.inbox_depth: Callable[[], int] = lambda: 0
        self.on_timeline: Callable[[FailoverTimeline], None] = lambda timeline: None  # once it is complete
        self._reset()

    def _reset(self) -> None:
        """A fresh scope (context, machines, batch): nothing survives a resignation."""
        ctx = ControllerContext()
        self.scope = FlowScope(self.broker_id, ctx, FencedZkClient(self.zk, lambda: ctx.epoch_zk_version),
                               self.config, watches=self, begin_timeline=self.begin_timeline,
                               on_sent=lambda requests: self._track_sent(requests, final=False))
        self._awaiting_ack: dict[int, FailoverTimeline] = {}

    @property
    def ctx(self) -> ControllerContext:
        return self.scope.ctx

    @property
    def channel(self):
        return self.scope.links

    @property
    def prefix(self) -> str:
        return self.scope.prefix

    # -- dispatch ------------------------------------------------------------

    def begin_timeline(self, kind: str, broker_ids: list[int]) -> None:
        """Start recording a failover for the event being processed."""
        self.timeline = FailoverTimeline(
            kind=kind, controller_id=self.broker_id, epoch=self.ctx.epoch, brokers=sorted(broker_ids),
            detected_ms=self._event.enqueued_ms, processing_started_ms=self._event_started_ms,
            inbox_depth=self.inbox_depth())

    def _finish_timeline_writes(self) -> None:
        t = self.timeline
        t.zk_written_ms = now_ms()
        t.epoch = self.ctx.epoch
        t.partitions_total = self.ctx.partition_count()
        t.live_brokers = len(self.ctx.live_brokers)
        t.partitions = sorted(tp_key(tp.topic, tp.partition) for tp in self.ctx.leaderships_written)
        t.partitions_affected = len(t.partitions)
        self.timelines.append(t)

    def process(self, event: ControllerEvent) -> str | None:
        """Election events here; any other event goes to its flow once this controller is active (its
        caller, if one waits, is answered NOT_CONTROLLER before). The error of an event that failed,
        else None: an active controller that fails an event moves (KRaft's renounce on an unexpected
        error, where Kafka's ZooKeeper-mode controller only logs it and goes on with a context the event
        may have left half-changed): it resigns and gives /controller up, and the next controller
        (perhaps this one again) starts from what ZooKeeper holds. A write that found its session
        expired is not a failure but the session's end: the controller resigns, as the Expire event
        queued behind it would have it do."""
        self._event, self._event_started_ms, self.timeline = event, now_ms(), None
        self.ctx.leaderships_synced.clear()
        self.ctx.leaderships_written.clear()
        try:
            if isinstance(event, ELECTION_EVENTS):
                self._process_election_event(event)
            elif not self.active:
                preempt(event)
                return
            elif isinstance(event, ResponseReceived):
                if event.response is not None:
                    self._process_response(event.response, event.controller_epoch)
            else:
                try:
                    FLOWS[type(event)](self.scope, event)
                finally:
                    if self._auto_rebalance is not None:
                        self._auto_rebalance.processed(event)
            self.send_batch()
        except ControllerMovedException as e:
            log.warning("%s Controller moved to another broker: %s", self.prefix, e)
            self.resign("controller moved")
            preempt(event)
        except SessionExpiredError as e:
            if isinstance(e, ConnectionClosedError):  # not an expiry: the client was closed under the event
                return self._failed(event, e)
            log.warning("%s ZooKeeper session expired during event %s: %s", self.prefix, type(event).__name__, e)
            if self.active:
                self.resign("session expired")  # as the Expire event queued behind it would
            preempt(event)
        except Exception as e:
            return self._failed(event, e)
        return None

    def _failed(self, event: ControllerEvent, e: Exception) -> str:
        """An event that raised: logged, the controller moved (see `process`); its error."""
        log.error("%s Error processing event %s; moving the controller", self.prefix, type(event).__name__,
                  exc_info=e)
        if self.active:
            self._trigger_controller_move(f"event {type(event).__name__} failed")
        preempt(event)
        return f"{type(e).__name__}: {e}"

    def _process_election_event(self, event: ControllerEvent) -> None:
        match event:
            case DescribeController(reply=reply):
                reply.set_result(self.status())
            case Startup():
                self.zk.add_state_listener(self._on_session_state)
                self.election.watch()
                # the top-level paths once, as Kafka's startup does, off every failover's path (the broker
                # beside this candidate made them already; this is for a candidate on its own)
                self.zk.ensure_persistent_paths()
                if self.standby is not None:
                    self.standby.start()
            case ControllerChange() | Reelect():
                self._maybe_resign_then_elect()
                self._watch_active_controller()
            case ControllerActorDied(broker_id=b):
                self._remove_dead_controller(b)
            case Expire():
                if self.active:
                    self.resign("session expired")
            case _:
                raise TypeError(f"{type(event).__name__} is an election event with no case here")

    def _on_session_state(self, state: KazooState) -> None:
        """kazoo's state listener: only enqueue (never block or call ZooKeeper here)."""
        if state == KazooState.LOST:
            self._session_lost = True
            self.inbox.clear_and_put(Expire())
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self.put(Reelect())

    def send_batch(self) -> None:
        if self.timeline is not None:
            self._finish_timeline_writes()
        batch = self.scope.batch
        requests = batch.build(self.ctx) if self.active and not batch.is_empty() else {}
        if requests:
            self.channel.send(requests)
        self._track_sent(requests, final=True)
        if self.timeline is not None and self.timeline.requests_acked_ms is not None:  # nothing to wait for
            self.on_timeline(self.timeline)

    def _track_sent(self, requests: dict, final: bool) -> None:
        """The event's timeline waits for the answers to these requests too (those a flow sent ahead
        of the rest, `FlowScope.send_now`, and the last ones)."""
        if self.timeline is not None:
            ids = [r.correlation_id for rs in requests.values() for r in rs]
            self.timeline.sent(ids, now_ms(), final)
            for i in ids:
                self._awaiting_ack[i] = self.timeline

    # -- election, failover, resignation -------------------------------------

    def _maybe_resign_then_elect(self) -> None:
        if self.active and not self.election.still_controller():
            self.resign("/controller changed")
        if not self.active:
            laps = Laps()
            won = self.election.elect()
            if won is not None:
                laps.lap("election")
                self.ctx.epoch, self.ctx.epoch_zk_version = won
                self.begin_timeline("controller_failover", [self.broker_id])
                log.info("%s %d successfully elected as the controller. Epoch incremented to %d and epoch "
                         "zk version is now %d", self.prefix, self.broker_id, won.epoch, won.zk_version)
                try:
                    self._on_controller_failover(laps)
                except ControllerMovedException:
                    raise
                except Exception:
                    log.exception("%s Error while electing or becoming controller; triggering a controller move",
                                  self.prefix)
                    self._trigger_controller_move("failover failed")

    def _watch_active_controller(self) -> None:
        """A candidate watches the active controller's actor through Ray, to start the next election as
        soon as it dies rather than when its ZooKeeper session times out."""
        if self._detector_factory is None:
            return
        current = None if self.active else self.election.current()
        if current is not None and current.broker_id == self.broker_id:
            current = None
        if current is None:
            self.stop_controller_watch()
            return
        detector = self._controller_watch[0] if self._controller_watch else self._detector_factory(
            "controller", lambda b, state: self.put(ControllerActorDied(broker_id=b, state=state)))
        changed = self._controller_watch is None or self._controller_watch[1] != current
        detector.watch({current.broker_id}, fresh={current.broker_id} if changed else set())
        self._controller_watch = (detector, current)

    def _remove_dead_controller(self, broker_id: int) -> None:
        if self._controller_watch is not None and self._controller_watch[1].broker_id == broker_id:
            self.election.remove_dead_controller(self._controller_watch[1])

    def stop_controller_watch(self) -> None:
        if self._controller_watch is not None:
            self._controller_watch[0].stop()
            self._controller_watch = None

    def _trigger_controller_move(self, reason: str) -> None:
        """Kafka's triggerControllerMove: resign, and give /controller up so another broker can try."""
        epoch_zk_version = self.ctx.epoch_zk_version
        self.resign(reason)
        try:
            if self.election.still_controller():
                self.zk.delete_path_fenced(zkdata.CONTROLLER, epoch_zk_version)
        except Exception:
            log.exception("%s Could not delete /controller; it goes when the session expires", self.prefix)

    def resign(self, reason: str) -> None:
        """Kafka's onControllerResignation: stop watches, scheduler and senders; forget the context."""
        log.info("%s Resigning as controller: %s", self.prefix, reason)
        preempted = self.inbox.preempt_queued()
        if preempted:
            log.info("%s Dropped %d queued events only an active controller processes; their callers were "
                     "answered NOT_CONTROLLER", self.prefix, preempted)
        self.watch_generation += 1
        self._stop_watches()
        if self._auto_rebalance is not None:
            self._auto_rebalance.cancel()
            self._auto_rebalance = None
        self.active = False
        self._stop_links()
        self._reset()
        if self.standby is not None:
            self.standby.resume()

    def close(self) -> None:
        """Stop what runs beside the inbox (a broker shutting down): watches on the active controller,
        the failure detector, the senders, the warm standby."""
        self.stop_controller_watch()
        if self.standby is not None:
            self.standby.stop()
        self._stop_links()

    def _stop_links(self) -> None:
        if self.scope.detector is not None:
            self.scope.detector.stop()
        if self.scope.links is not None:
            self.scope.links.shutdown()

    def watch_children(self, path: str, event: Callable[[], ControllerEvent]) -> None:
        """Enqueue `event` whenever path's children change (and once now), for this term."""
        if path in self._watches:
            return
        generation = self.watch_generation

        def fired(_children) -> bool | None:
            if generation != self.watch_generation:
                return False  # resigned: drop this watch
            self.put(event())
            return None
        self._watches[path] = ChildrenWatch(self.zk.kazoo, path, fired, send_event=False)

    def watch_data(self, path: str, event: Callable[[], ControllerEvent], creation_only: bool = False) -> None:
        """Enqueue `event` when path is created (creation_only) or created or changed, for this term.

        The state at registration is not an event: failover reads it explicitly. The callback runs
        on kazoo's thread and only enqueues.
        """
        if path in self._watches:
            return
        generation = self.watch_generation
        existed: list[bool | None] = [None]

        def fired(data, stat, _event=None) -> bool | None:
            if generation != self.watch_generation:
                return False
            exists, before = stat is not None, existed[0]
            existed[0] = exists
            if before is not None and exists and not (creation_only and before):
                self.put(event())
            return None
        self._watches[path] = DataWatch(self.zk.kazoo, path, fired)

    def unwatch(self, path: str) -> None:
        watch = self._watches.pop(path, None)
        if watch is not None:
            watch._stopped = True  # kazoo's own flag: the watch re-arms no more

    def _stop_watches(self) -> None:
        for path in list(self._watches):
            self.unwatch(path)

    def _on_controller_failover(self, laps: Laps) -> None:
        """Links to the brokers, then the failover's flow (failover.py), which sets the watches once the
        live brokers are told."""
        scope = self.scope
        self.active = True
        scope.links = self._channel_factory(self.ctx.epoch)
        if self._detector_factory is not None:
            scope.detector = self._detector_factory(
                "broker", lambda b, state: self.put(BrokerActorDied(broker_id=b, state=state)))
        laps.lap("channel")
        if self.standby is not None:
            scope.warm = self.standby.caught_up
        on_controller_failover(scope, laps, self._register_watches)
        self.timeline.steps_ms = {step: round(ms, 1) for step, ms in laps.laps}
        if self.config.auto_leader_rebalance_enable:
            self._start_auto_rebalance_task()

    def _register_watches(self) -> None:
        self.watch_children(zkdata.BROKER_IDS, BrokerChange)
        self.watch_children(zkdata.TOPICS, TopicChange)
        self.watch_children(zkdata.DELETE_TOPICS, TopicDeletion)
        self.watch_children(zkdata.ISR_CHANGE_NOTIFICATION, IsrChangeNotification)
        self.watch_children(zkdata.LOG_DIR_EVENT_NOTIFICATION, LogDirEventNotification)
        self.watch_data(zkdata.PREFERRED_REPLICA_ELECTION, PreferredReplicaElection, creation_only=True)
        self.watch_data(zkdata.REASSIGN_PARTITIONS, PartitionReassignment, creation_only=True)

    def _start_auto_rebalance_task(self) -> None:
        self._auto_rebalance = ScheduledEvent(
            self.put, lambda task: AutoPreferredReplicaLeaderElection(task=task),
            self.config.leader_imbalance_check_interval_seconds)
        self._auto_rebalance.schedule(min(AUTO_REBALANCE_FIRST_DELAY_S, self._auto_rebalance.interval_s))

    def _process_response(self, response, epoch: int) -> None:
        if epoch != self.ctx.epoch:
            return
        request = self.channel.answered(response.broker_id, response.correlation_id)
        timeline = self._awaiting_ack.pop(response.correlation_id, None)
        if timeline is not None and timeline.acked(response.correlation_id, now_ms()):
            log.info("%s %s handled in %.0f ms from detection to the last broker acknowledgement", self.prefix,
                     timeline.kind, timeline.requests_acked_ms - timeline.detected_ms)
            self.on_timeline(timeline)
        if response.api == "StopReplica" and request is not None:
            self.scope.deletion.on_stop_replica_response(response, request)
        elif response.api == "LeaderAndIsr":
            log_dirs.on_leader_and_isr_response(self.scope, response)
        # expected per partition: STALE_CONTROLLER_EPOCH for a re-sent LeaderAndIsr whose leader epoch the
        # broker already has (Kafka's convention, after a failover); FENCED_LEADER_EPOCH for a StopReplica
        # at the epoch the replica already has (a shutting-down broker's followers, a cancelled adding
        # replica: Kafka's broker keeps them too)
        errors = [e for e in response.partition_errors
                  if e.error_code not in (Errors.NONE, Errors.STALE_CONTROLLER_EPOCH, Errors.FENCED_LEADER_EPOCH)]
        if response.error_code != Errors.NONE or errors:
            log.warning("%s %s response from broker %d: error %s, %d partition errors (first: %s)",
                        self.prefix, response.api, response.broker_id, response.error_code.name,
                        len(errors), errors[0] if errors else None)

    # -- read-only view for the actor ------------------------------------------

    def status(self) -> dict:
        ctx = self.ctx
        return {
            "broker_id": self.broker_id,
            "active": self.active,
            "epoch": ctx.epoch,
            "epoch_zk_version": ctx.epoch_zk_version,
            "live_brokers": sorted(ctx.live_brokers),
            "shutting_down_brokers": sorted(ctx.shutting_down_broker_ids),
            "topics": len(ctx.all_topics),
            "partitions": len(ctx.partition_states),
            "offline_partitions": len(ctx.partitions_in_state(P.OfflinePartition, P.NewPartition)) if self.active else 0,
            "preferred_replica_imbalance": ctx.preferred_replica_imbalance_count() if self.active else 0,
            "topics_to_be_deleted": sorted(ctx.topics_to_be_deleted),
            "topics_to_delete_count": len(ctx.topics_to_be_deleted),
            "replicas_to_delete_count": ctx.replicas_to_delete_count(),
            "topics_ineligible_to_delete_count": len(ctx.topics_ineligible_for_deletion),
            "replicas_ineligible_to_delete_count": ctx.ineligible_replicas_to_delete_count(),
            "partitions_being_reassigned": len(ctx.partitions_being_reassigned),
            "leader_elections": self.scope.psm.elections,
            "unclean_leader_elections": self.scope.psm.unclean_elections,
            "sender_queue_depths": self.channel.queue_depths() if self.channel is not None else {},
            "warm_standby": self.standby.describe() if self.standby is not None else None,
        }
