"""Controller-to-broker channel: the per-event request batch and one RequestSender actor per broker.

`ControllerBrokerRequestBatch` is pure: during one event the controller adds
partitions per broker; `build` turns them into one LeaderAndIsr and one
UpdateMetadata request per broker. `RequestSender` is Kafka's RequestSendThread
as a Ray actor: a FIFO queue for one broker, one call in flight (carrying
every request queued so far, applied in order), retried with backoff until it
is answered, the responses handed back to the inbox of the controller it works
for; it outlives controller epochs (each broker starts its own). Ray does not
keep the order of calls to an actor with several threads, so each batch the
controller enqueues carries its number, and the sender queues it only after
the ones before it (`InOrder`).
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import threading
import time
from collections import defaultdict

import ray

from actors.config import ClusterConfig
from actors.names import broker_actor_name, replacement_sender_name, request_sender_name
from actors.runtime import beside_this_actor, configure_actor_process
from actors.controller.context import ControllerContext, LeaderIsrAndControllerEpoch
from actors.protocol import (
    LEADER_DURING_DELETE,
    ControllerRequestT,
    ControllerResponse,
    LeaderAndIsrRequest,
    PartitionState,
    PartitionStates,
    StopReplicaPartition,
    StopReplicaPartitions,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)

EPOCH_DURING_DELETE = -2  # StopReplica's leader epoch when the replica is deleted


def partition_state(ctx: ControllerContext, tp: TopicPartition, leadership: LeaderIsrAndControllerEpoch,
                    is_new: bool = False, being_deleted: bool = False) -> PartitionState:
    lai = leadership.leader_and_isr
    assignment = ctx.partition_full_assignment(tp)
    live = ctx.live_brokers
    return PartitionState(
        tp.topic, tp.partition, leadership.controller_epoch, LEADER_DURING_DELETE if being_deleted else lai.leader,
        lai.leader_epoch, lai.isr, lai.zk_version, assignment.replicas, assignment.adding, assignment.removing,
        tuple([r for r in assignment.replicas if r not in live]), is_new,
    )


class ControllerBrokerRequestBatch:
    """Requests collected during one event, sent once per broker at its end."""

    def __init__(self, controller_id: int):
        self.controller_id = controller_id
        self._leader_and_isr: dict[int, dict[TopicPartition, bool]] = defaultdict(dict)  # broker -> tp -> is_new
        self._update_metadata_brokers: set[int] = set()
        self._update_metadata_to_all = False  # every broker live when the batch is built
        self._update_metadata_partitions: set[TopicPartition] = set()
        self._stop_replica: dict[int, dict[TopicPartition, bool]] = defaultdict(dict)  # broker -> tp -> delete
        self._correlation_ids = itertools.count()

    def is_empty(self) -> bool:
        return not (self._leader_and_isr or self._update_metadata_brokers or self._update_metadata_to_all
                    or self._stop_replica)

    def add_leader_and_isr(self, broker_ids, tp: TopicPartition, is_new: bool = False) -> None:
        """LeaderAndIsr for tp to the given brokers, and UpdateMetadata for tp to every live or
        shutting-down broker (those of the moment the batch is built)."""
        requests = self._leader_and_isr
        for b in broker_ids:
            if b >= 0:
                requests[b][tp] = requests[b].get(tp, False) or is_new
        self._update_metadata_partitions.add(tp)
        self._update_metadata_to_all = True

    def add_stop_replica(self, broker_id: int, tp: TopicPartition, delete: bool) -> None:
        if broker_id >= 0:
            self._stop_replica[broker_id][tp] = self._stop_replica[broker_id].get(tp, False) or delete

    def add_update_metadata(self, broker_ids, partitions) -> None:
        self._update_metadata_brokers.update(broker_ids)
        self._update_metadata_partitions.update(partitions)

    def build(self, ctx: ControllerContext) -> dict[int, list[ControllerRequestT]]:
        """Per live broker: LeaderAndIsr, then UpdateMetadata, then StopReplica (Kafka's order). Clears the batch."""
        live_brokers = [ctx.live_brokers[b] for b in sorted(ctx.live_brokers)]
        out: dict[int, list[ControllerRequestT]] = defaultdict(list)
        cache: dict[tuple[TopicPartition, bool], PartitionState] = {}  # one state object serves every broker

        def state(tp: TopicPartition, is_new: bool) -> PartitionState:
            key = (tp, is_new)
            if key not in cache:
                cache[key] = partition_state(ctx, tp, ctx.partition_leadership[tp], is_new)
            return cache[key]

        for broker_id, partitions in sorted(self._leader_and_isr.items()):
            if broker_id not in ctx.live_brokers:
                continue
            states = PartitionStates(state(tp, is_new) for tp, is_new in partitions.items()
                                     if tp in ctx.partition_leadership)
            leaders = {s.leader for s in states}
            out[broker_id].append(LeaderAndIsrRequest(
                controller_id=self.controller_id, controller_epoch=ctx.epoch,
                correlation_id=next(self._correlation_ids),
                broker_epoch=ctx.live_broker_epochs[broker_id], partition_states=states,
                live_leaders=[b for b in live_brokers if b.id in leaders],
            ))
        if self._update_metadata_to_all:
            self._update_metadata_brokers |= ctx.live_or_shutting_down_broker_ids
        if self._update_metadata_brokers:
            states = PartitionStates(  # one object for every broker, encoded once
                partition_state(ctx, tp, ctx.partition_leadership[tp], being_deleted=True)
                if ctx.is_topic_queued_for_deletion(tp.topic) else state(tp, False)
                for tp in sorted(self._update_metadata_partitions) if tp in ctx.partition_leadership)
            for broker_id in sorted(self._update_metadata_brokers):
                if broker_id in ctx.live_brokers:
                    out[broker_id].append(UpdateMetadataRequest(
                        controller_id=self.controller_id, controller_epoch=ctx.epoch,
                        correlation_id=next(self._correlation_ids),
                        broker_epoch=ctx.live_broker_epochs[broker_id], partition_states=states,
                        live_brokers=live_brokers,
                    ))
        for broker_id, partitions in sorted(self._stop_replica.items()):
            if broker_id not in ctx.live_brokers:
                continue
            out[broker_id].append(StopReplicaRequest(
                controller_id=self.controller_id, controller_epoch=ctx.epoch,
                correlation_id=next(self._correlation_ids),
                broker_epoch=ctx.live_broker_epochs[broker_id],
                partitions=StopReplicaPartitions(StopReplicaPartition(
                    topic=tp.topic, partition=tp.partition, delete_partition=delete,
                    leader_epoch=EPOCH_DURING_DELETE if delete else (
                        ctx.partition_leadership[tp].leader_and_isr.leader_epoch
                        if tp in ctx.partition_leadership else -1))
                    for tp, delete in sorted(partitions.items())),
            ))
        self._stop_replica.clear()
        self._leader_and_isr.clear()
        self._update_metadata_brokers.clear()
        self._update_metadata_to_all = False
        self._update_metadata_partitions.clear()
        return dict(out)


class InOrder:
    """Releases numbered batches in number order, from 0, whatever order they arrive in."""

    def __init__(self):
        self.next = 0
        self.waiting: dict[int, list] = {}

    def add(self, number: int, items: list) -> list:
        """The items now in order (this batch's and any that waited for it), in order."""
        self.waiting[number] = items
        out = []
        while self.next in self.waiting:
            out += self.waiting.pop(self.next)
            self.next += 1
        return out


Owner = tuple[int, int]  # (controller epoch, the controller's attachment number): who a sender works for


def takeover(current: Owner, incoming: Owner) -> str:
    """What a RequestSender does with a batch from `incoming` while it works for `current`: "refuse" it
    (an older controller, or an attachment the same controller has since replaced), "accept" it, or
    "reset": work for `incoming` from now on, dropping what is queued (a new controller's channel
    starts empty, as Kafka's does)."""
    return "refuse" if incoming < current else "accept" if incoming == current else "reset"


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=8)
class RequestSender:
    """Kafka's RequestSendThread for one target broker, as an actor that outlives controller epochs.

    Broker N starts its own at startup (`start_request_sender`), off any failover's path; each new
    active controller takes it over by sending with a higher `Owner` (a new process per broker at every
    controller failover cost seconds under load). A controller creates one itself only when the
    broker's is gone (killed)."""

    def __init__(self, broker_id: int, config: ClusterConfig):
        configure_actor_process(config.controller.control_plane_niceness)
        self.broker_id = broker_id
        self.config = config
        self._queue: queue.Queue[tuple[Owner, ControllerRequestT]] = queue.Queue()
        self._lock = threading.Condition()
        self._owner: Owner = (-1, -1)
        self._controller_id, self._controller = -1, None
        self._in_order = InOrder()
        threading.Thread(target=self._run, name=request_sender_name(broker_id), daemon=True).start()

    def wait_stopped(self, owner: Owner) -> str:
        """Answered when a newer owner takes the sender over, never while `owner` has it: the
        controller waits on it to learn of the sender's death."""
        with self._lock:
            self._lock.wait_for(lambda: self._owner > tuple(owner))
        return "taken over"

    def enqueue(self, owner: Owner, controller_id: int, controller, number: int,
                requests: list[ControllerRequestT]) -> int:
        """Queue the controller's `number`th batch for the broker, once the ones before it are queued;
        the queue's length, or -1 when refused (a newer controller owns this sender)."""
        owner = tuple(owner)
        with self._lock:
            action = takeover(self._owner, owner)
            if action == "refuse":
                return -1
            if action == "reset":
                self._owner, self._controller_id, self._controller = owner, controller_id, controller
                self._in_order = InOrder()
                while not self._queue.empty():
                    self._queue.get_nowait()
                self._lock.notify_all()
            for request in self._in_order.add(number, requests):
                self._queue.put((owner, request))
            return self._queue.qsize()

    def _send(self, owner: Owner, requests: list[ControllerRequestT]) -> list[ControllerResponse] | None:
        """The broker's answers; None once another owner took over (its requests are no longer wanted)."""
        backoff = self.config.request_retry_backoff_ms / 1000
        while self._owner == owner:
            try:
                broker = ray.get_actor(broker_actor_name(self.broker_id), namespace=self.config.namespace)
                return ray.get(broker.handle.remote(requests), timeout=self.config.controller_socket_timeout_ms / 1000)
            except Exception as e:  # actor gone, restarting, or timed out: Kafka retries until removed
                log.warning("[Controller id=%d, targetBrokerId=%d] Controller's connection to broker was "
                            "unsuccessful (%s); retrying %s", self._controller_id, self.broker_id,
                            type(e).__name__, ", ".join(r.api for r in requests))
                time.sleep(backoff)
        return None

    def _run(self) -> None:
        """One call in flight: whatever is queued for the broker goes in it, in FIFO order, and the
        broker applies the requests in that order (one round trip instead of one per request)."""
        while True:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            with self._lock:
                owner, controller = self._owner, self._controller
            requests = [r for o, r in batch if o == owner]
            responses = self._send(owner, requests) if requests else None
            if responses is not None:
                controller.on_responses.remote(responses, [r.controller_epoch for r in requests])


def start_request_sender(broker_id: int, config: ClusterConfig, controller_id: int | None = None):
    """A RequestSender to the broker beside the calling actor: the broker's own (ValueError: a killed
    incarnation's is not gone yet), or, given `controller_id`, one that controller starts in place of
    a killed one (`replacement_sender_name`)."""
    name = request_sender_name(broker_id) if controller_id is None else \
        replacement_sender_name(broker_id, controller_id)
    return RequestSender.options(name=name, namespace=config.namespace,
                                 scheduling_strategy=beside_this_actor()).remote(broker_id, config)


class ControllerChannelManager:
    """The active controller's RequestSenders, one per live broker (Kafka's ControllerChannelManager).

    Each broker's own sender is taken over (`Owner`: this controller's epoch and an attachment number,
    new each time a broker is added), so a failover starts no process. Requests are kept until
    answered. A RequestSender that dies (a killed actor) is reported through `on_sender_died` from a
    watcher thread (which only enqueues); the controller then calls `restart_sender`, which sends
    everything unanswered again, in order (brokers apply repeated requests idempotently: leader
    epochs and controller epochs decide).
    """

    def __init__(self, controller_id: int, epoch: int, config: ClusterConfig, controller_handle,
                 on_sender_died=lambda broker_id, sender: None):
        self.controller_id = controller_id
        self.epoch = epoch
        self.config = config
        self.controller_handle = controller_handle
        self.on_sender_died = on_sender_died
        self.senders: dict[int, ray.actor.ActorHandle] = {}
        self._owners: dict[int, Owner] = {}
        self._attachments = itertools.count()
        self._batch_numbers: dict[int, itertools.count] = {}  # per sender: the number of its next batch
        self.unanswered: dict[int, dict[int, ControllerRequestT]] = defaultdict(dict)  # broker -> id -> request
        self._liveness: dict[ray.ObjectRef, tuple[int, object]] = {}  # -> (broker, its sender)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._watch_senders, name=f"controller-{controller_id}-sender-watch",
                         daemon=True).start()

    def add_broker(self, broker_id: int) -> None:
        if broker_id not in self.senders:
            self._attach(broker_id, self._find_sender(broker_id))

    def _find_sender(self, broker_id: int):
        """The broker's RequestSender; one of our own when it has none (its was killed)."""
        with contextlib.suppress(ValueError):
            return ray.get_actor(request_sender_name(broker_id), namespace=self.config.namespace)
        return start_request_sender(broker_id, self.config, self.controller_id)

    def _attach(self, broker_id: int, sender) -> None:
        self.senders[broker_id] = sender
        self._owners[broker_id] = (self.epoch, next(self._attachments))
        self._batch_numbers[broker_id] = itertools.count()
        with self._lock:
            self._liveness[sender.wait_stopped.remote(self._owners[broker_id])] = (broker_id, sender)

    def _enqueue(self, broker_id: int, requests: list[ControllerRequestT]) -> None:
        self.senders[broker_id].enqueue.remote(self._owners[broker_id], self.controller_id, self.controller_handle,
                                               next(self._batch_numbers[broker_id]), requests)

    def remove_broker(self, broker_id: int) -> None:
        """Stop sending to the broker: its sender drops what it holds (a newer attachment of ours with
        nothing in it) and stays, for the broker's next incarnation or the next controller."""
        self.unanswered.pop(broker_id, None)
        if broker_id in self.senders:
            self._forget_liveness(broker_id)
            self._owners[broker_id] = (self.epoch, next(self._attachments))
            self._batch_numbers[broker_id] = itertools.count()
            self._enqueue(broker_id, [])
            del self.senders[broker_id]

    def restart_sender(self, broker_id: int, dead) -> int:
        """A new RequestSender for the broker in place of `dead`, given every request still unanswered;
        how many. Nothing when `dead` is no longer the broker's sender (it was replaced meanwhile)."""
        if self.senders.get(broker_id) is not dead:
            return 0
        self._forget_liveness(broker_id)
        ray.kill(dead)
        self._attach(broker_id, start_request_sender(broker_id, self.config, self.controller_id))
        pending = list(self.unanswered[broker_id].values())
        if pending:
            self._enqueue(broker_id, pending)
        return len(pending)

    def send(self, requests: dict[int, list[ControllerRequestT]]) -> None:
        for broker_id, reqs in requests.items():
            if broker_id in self.senders and reqs:
                self._enqueue(broker_id, reqs)
                self.unanswered[broker_id].update((r.correlation_id, r) for r in reqs)

    def answered(self, broker_id: int, correlation_id: int) -> ControllerRequestT | None:
        """The request this answers (None if already answered): Kafka's response callbacks see their request."""
        return self.unanswered.get(broker_id, {}).pop(correlation_id, None)

    def queue_depths(self) -> dict[int, int]:
        """Requests queued or in flight per target broker (the RequestSenders' queues)."""
        return {b: len(self.unanswered.get(b, ())) for b in sorted(self.senders)}

    def shutdown(self) -> None:
        self._closed.set()
        for broker_id in list(self.senders):
            self.remove_broker(broker_id)

    def _forget_liveness(self, broker_id: int) -> None:
        with self._lock:
            self._liveness = {ref: v for ref, v in self._liveness.items() if v[0] != broker_id}

    def _watch_senders(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                refs = dict(self._liveness)
            if not refs:
                self._closed.wait(0.2)
                continue
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.5)
            for ref in ready:
                with self._lock:
                    died = self._liveness.pop(ref, None)
                if died is None or self._closed.is_set():
                    continue
                try:
                    ray.get(ref)  # answered: another controller took the sender over; not a death
                except Exception:
                    log.warning("[Controller id=%d] The RequestSender to broker %d died", self.controller_id,
                                died[0])
                    self.on_sender_died(*died)
