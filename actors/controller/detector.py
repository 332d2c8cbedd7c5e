"""RayFailureDetector: learns of broker deaths from Ray within milliseconds, instead of waiting
for the dead broker's ZooKeeper session to time out (zookeeper.session.timeout.ms).

When a worker process exits, its raylet tells Ray's GCS at once, and the GCS publishes the
actor's new state (RESTARTING, or DEAD) on its actor channel. The active controller
subscribes to that channel and puts a `BrokerActorDied` event in its inbox for each broker
actor it watches; the handler removes the dead incarnation's registration from
/brokers/ids, so ZooKeeper stays the source of truth and every reader agrees. The other
candidates watch the active controller's actor the same way (`ControllerActorDied`) and
remove its /controller znode, which starts the next election at once.

Failure cases:
- a paused process (SIGSTOP, a long GC) is alive to Ray: nothing is published, nothing is
  suspected; the broker's ZooKeeper session decides, as in Kafka.
- a live broker wrongly reported (Ray lost its node, the process lives on): its registration
  is removed, its leaderships move with newer leader epochs (its writes are fenced), and it
  registers again as soon as it sees its znode gone.
- the GCS subscription breaks: the detector resubscribes; meanwhile ZooKeeper's session
  timeout still finds every death, only later.
- the actor died before it was watched (the broker that hosted the previous controller dies
  with it, and the new controller starts watching afterwards): no state change will come. A new
  controller asks for the registered brokers' actors by name before it loads its context
  (`dead_now`), and removes the registrations of those Ray has no actor for, so that its failover
  handles them; a watched name that Ray cannot find is also looked up among the dead actors, and
  reported.

Uses Ray's GCS pub/sub client (`ray._private.gcs_pubsub`), which Ray's dashboard uses for
the same purpose; Ray has no public API for actor-state notifications.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Callable

import ray

log = logging.getLogger(__name__)

RESOLVE_RETRY_S = 0.2


class RayFailureDetector:
    """Calls `on_death(broker_id, state)` from its own thread when the process of a watched actor
    (`actor_name(broker_id)`: a broker, or a controller candidate) dies (state: "RESTARTING" or
    "DEAD"). `on_death` must only enqueue."""

    def __init__(self, namespace: str, actor_name: Callable[[int], str], on_death: Callable[[int, str], None]):
        self.namespace, self.actor_name, self.on_death = namespace, actor_name, on_death
        self._lock = threading.Lock()
        self._watched: set[int] = set()
        self._actors: dict[bytes, int] = {}  # actor id -> broker id
        self._found_dead: set[int] = set()  # reported from Ray's table of dead actors, until a new incarnation
        self._stopped = threading.Event()
        self._resolve = threading.Event()
        self._gcs_address = ray.get_runtime_context().gcs_address
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscriber = None
        self._threads = [threading.Thread(target=self._subscribe_loop, name="ray-failure-detector", daemon=True),
                         threading.Thread(target=self._resolve_loop, name="ray-failure-detector-names", daemon=True)]
        for t in self._threads:
            t.start()

    def watch(self, broker_ids: set[int], fresh: set[int] = frozenset()) -> None:
        """Watch exactly these brokers (the live ones); their actor ids are looked up off the inbox thread,
        again for those in `fresh` (a new incarnation may be a new actor)."""
        with self._lock:
            self._watched = set(broker_ids)
            self._actors = {a: b for a, b in self._actors.items() if b in self._watched and b not in fresh}
            self._found_dead &= self._watched - set(fresh)
        self._resolve.set()

    def dead_now(self, broker_ids: set[int]) -> set[int]:
        """Those of these brokers Ray has no live actor for, asked by name now rather than learnt from its
        notifications: what a new controller inherits (the broker that hosted the controller before it
        died with it, its registration still there until its session times out). A lookup that fails
        for another reason (the GCS busy) counts as alive: the watch finds it later."""
        dead = set()
        for broker_id in sorted(broker_ids):
            try:
                ray.get_actor(self.actor_name(broker_id), namespace=self.namespace)
            except ValueError:
                dead.add(broker_id)
            except Exception:
                pass
        return dead

    def stop(self) -> None:
        self._stopped.set()
        self._resolve.set()
        loop, subscriber = self._loop, self._subscriber
        if loop is not None and subscriber is not None:  # ends the subscriber's long poll
            asyncio.run_coroutine_threadsafe(subscriber.close(), loop)

    def _resolve_loop(self) -> None:
        """Look up the actor id of each watched broker (a broker started anew gets a new actor id;
        one restarted by Ray keeps it)."""
        while not self._stopped.is_set():
            self._resolve.wait()
            self._resolve.clear()
            with self._lock:
                missing = self._watched - set(self._actors.values()) - self._found_dead
            for broker_id in missing:
                try:
                    actor_id = ray.get_actor(self.actor_name(broker_id), namespace=self.namespace)._actor_id.binary()
                except Exception as e:  # dead before we watched, not (yet) created, or the GCS is busy
                    # only when no live actor has the name (ValueError): Ray's table of dead actors keeps
                    # every earlier incarnation under it, which a GCS hiccup must not bring up
                    if isinstance(e, ValueError) and self._died_unwatched(broker_id):
                        continue
                    self._stopped.wait(RESOLVE_RETRY_S)
                    self._resolve.set()
                    continue
                with self._lock:
                    if broker_id in self._watched:
                        self._actors = {a: b for a, b in self._actors.items() if b != broker_id}
                        self._actors[actor_id] = broker_id

    def _died_unwatched(self, broker_id: int) -> bool:
        """Report the watched actor if Ray's table has it dead under its name in our namespace (and
        none alive, since the name lookup failed); whether it did."""
        from ray._private import state
        from ray.core.generated import gcs_pb2

        name = self.actor_name(broker_id)
        try:
            dead = state.state._connect_and_get_accessor().get_actor_table(None, "DEAD")
        except Exception:  # the GCS is busy: looked up again on the next try
            return False
        for blob in dead:
            data = gcs_pb2.ActorTableData.FromString(blob)
            if data.name == name and data.ray_namespace == self.namespace:
                with self._lock:
                    if broker_id not in self._watched or broker_id in self._found_dead:
                        return True
                    self._found_dead.add(broker_id)
                log.info("Ray reports actor %s DEAD (pid %s), before it was watched", name, data.pid or "?")
                self.on_death(broker_id, "DEAD")
                return True
        return False

    def _subscribe_loop(self) -> None:
        asyncio.run(self._subscribe())

    async def _subscribe(self) -> None:
        from ray._private.gcs_pubsub import GcsAioActorSubscriber
        from ray.core.generated import gcs_pb2

        died = {gcs_pb2.ActorTableData.RESTARTING: "RESTARTING", gcs_pb2.ActorTableData.DEAD: "DEAD"}
        self._loop = asyncio.get_running_loop()
        while not self._stopped.is_set():
            subscriber = self._subscriber = GcsAioActorSubscriber(address=self._gcs_address)
            try:
                await subscriber.subscribe()
                while not self._stopped.is_set():  # a long poll: answered when actors change, or at stop()
                    batch = await subscriber.poll(batch_size=1000)
                    if not batch:  # the GCS is unavailable for a moment, or we are stopping
                        await asyncio.sleep(RESOLVE_RETRY_S)
                    for actor_id, data in batch:
                        with self._lock:
                            broker_id = self._actors.get(actor_id)
                        if broker_id is not None and data.state in died:
                            log.info("Ray reports actor %s %s (pid %s)", self.actor_name(broker_id),
                                     died[data.state], data.pid or "?")
                            self.on_death(broker_id, died[data.state])
            except Exception as e:  # GCS restarting or unreachable: subscribe again
                log.warning("Ray failure detector lost its GCS subscription (%s: %s); resubscribing",
                            type(e).__name__, e)
                await asyncio.sleep(RESOLVE_RETRY_S)
            finally:
                await subscriber.close()
