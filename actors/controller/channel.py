"""Controller-to-broker channel: one RequestSender actor per broker, and the active controller's
ControllerChannelManager over them.

`RequestSender` is Kafka's RequestSendThread as a Ray actor: a FIFO queue for one broker, one call in
flight (carrying every request queued so far, applied in order), retried with backoff until it is
answered, the responses handed back to the inbox of the controller it works for; it outlives
controller epochs (each broker starts its own). With link faults on, its calls cross the link
between the controller's broker and the target (`actors/links/calls.py`). What it sends is built by the pure request batch
(actors/controller/request_batch.py), which also has the rules it takes batches in by (`InOrder`,
`takeover`).
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import threading
import time
from collections import defaultdict

import ray
from ray.exceptions import GetTimeoutError

from actors.config import ClusterConfig
from actors.controller.request_batch import InOrder, Owner, takeover
from actors.links.calls import CallLinks
from actors.links.faults import Direction, LinkFault, broker_link, faultable
from actors.names import broker_actor_name, replacement_sender_name, request_sender_name
from actors.protocol import ControllerRequestT, ControllerResponse
from actors.runtime import BROKER_ACTOR_MODULE, beside_this_actor, configure_actor_process, preload

log = logging.getLogger(__name__)


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=8)
class RequestSender:
    """Kafka's RequestSendThread for one target broker, as an actor that outlives controller epochs.

    Broker N starts its own at startup (`start_request_sender`), off any failover's path; each new
    active controller takes it over by sending with a higher `Owner` (a new process per broker at every
    controller failover cost seconds under load). A controller creates one itself only when the
    broker's is gone (killed)."""

    def __init__(self, broker_id: int, config: ClusterConfig):
        configure_actor_process(config.controller.control_plane_niceness)
        preload(BROKER_ACTOR_MODULE)  # for the lookup of the broker it sends to
        self.broker_id = broker_id
        self.config = config
        self._queue: queue.Queue[tuple[Owner, ControllerRequestT]] = queue.Queue()
        self._lock = threading.Condition()
        self._owner: Owner = (-1, -1)
        self._controller_id, self._controller = -1, None
        self._in_order = InOrder()
        self.links = CallLinks() if config.link_faults_enable else None
        threading.Thread(target=self._run, name=request_sender_name(broker_id), daemon=True).start()

    def process(self) -> dict:
        """This sender's process (pid, node), as a candidate's `process`."""
        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}

    def set_link_fault(self, link: str, direction: Direction, fault: LinkFault) -> dict:
        """Fault one direction of the link `broker-C` between a controller on broker C and this sender's
        broker (forward: the requests, backward: the answers); every link's faults."""
        return faultable(self.links).set_fault(link, direction, fault)

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
        link, wanted = broker_link(self._controller_id), lambda: self._owner == owner
        call = None  # the call in flight, when one is
        while wanted():
            try:
                if call is None:
                    if not self._cross(link, Direction.FORWARD, requests, wanted):
                        return None
                    broker = ray.get_actor(broker_actor_name(self.broker_id), namespace=self.config.namespace)
                    call = broker.handle.remote(requests)
                responses = ray.get(call, timeout=self.config.controller_socket_timeout_ms / 1000)
                return responses if self._cross(link, Direction.BACKWARD, responses, wanted) else None
            except GetTimeoutError:  # the broker has the requests and is still at them (Ray loses no call to
                # a live actor): one sent again would wait behind them and be applied twice (a broker
                # making 75,000 new partitions was sent its LeaderAndIsr four times)
                log.warning("[Controller id=%d, targetBrokerId=%d] No answer to %s within controller.socket."
                            "timeout.ms; waiting on", self._controller_id, self.broker_id,
                            ", ".join(r.api for r in requests))
            except Exception as e:  # actor gone or restarting: Kafka retries until removed
                call = None
                log.warning("[Controller id=%d, targetBrokerId=%d] Controller's connection to broker was "
                            "unsuccessful (%s); retrying %s", self._controller_id, self.broker_id,
                            type(e).__name__, ", ".join(r.api for r in requests))
                time.sleep(backoff)
        return None

    def _cross(self, link: str, direction: Direction, messages: list, wanted) -> bool:
        """Whether `messages` crossed the link (at once when link faults are off), or stopped being wanted."""
        return self.links is None or self.links.pass_call(
            link, direction, lambda: sum(len(m.model_dump_json()) for m in messages), wanted)

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

    def restart_sender(self, broker_id: int, dead) -> int | None:
        """A new RequestSender for the broker in place of `dead`, given every request still unanswered;
        how many. None when `dead` is no longer the broker's sender (replaced meanwhile, or the broker
        is gone: its own sender dies with it)."""
        if self.senders.get(broker_id) is not dead:
            return None
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
