"""The Broker actor: registers in ZooKeeper, hosts its controller candidate, answers the
controller, serves produce and fetch, and replicates the partitions it follows.

A thin shell: epoch checks, role changes, produce and fetch are ReplicaManager's
(and its Partitions'), the cache is MetadataCache's, pulling from leaders is the
fetchers', ISR writes are IsrManager's. Requests run on Ray's thread pool: one lock
serialises controller requests; produce and fetch only take their partitions'
locks, since they may wait (acks=all, long-polling fetches).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter

import ray

from actors.broker.fetcher import ReplicaFetcherManager
from actors.broker.isr import IsrManager
from actors.broker.metadata_cache import MetadataCache
from actors.broker.replica_manager import ReplicaManager, role
from actors.config import ClusterConfig
from actors.controller.actor import ControllerActor
from actors.controller.channel import broker_actor_name, controller_actor_name
from actors.data_protocol import (
    FetchRequest,
    FetchResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
)
from actors.recording import RecordSink
from actors.runtime import (
    MANY_THREADS_ENV,
    beside_this_actor,
    configure_actor_process,
    poll,
    ray_says_this_actor_lives,
    rss_mb,
)
from actors.protocol import (
    ControllerRequestT,
    ControllerResponse,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from coordination import zkdata
from coordination.errors import Errors
from coordination.registration import BrokerRegistration
from coordination.zkdata import TopicPartition
from jobs import rundir

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("state.change.logger")


# Kafka's control plane (KIP-291) and its purgatories in Ray's terms: produce requests waiting for
# acks=all hold a thread each, so the controller's requests and the followers' fetches get threads
# of their own. Sharing one pool, 64 waiting produces starved both: no fetch advanced the high
# watermark and no LeaderAndIsr shrank the ISR until the produces timed out.
CONCURRENCY_GROUPS = {"control": 8, "replication": 16}


@ray.remote(num_cpus=0, max_concurrency=64, concurrency_groups=CONCURRENCY_GROUPS, runtime_env=MANY_THREADS_ENV)
class BrokerActor:
    def __init__(self, broker_id: int, config: ClusterConfig):
        configure_actor_process()
        self.broker_id = broker_id
        self.config = config
        self._lock = threading.Lock()
        self.sink = RecordSink(config.recorder, config.namespace)
        self._controllers_seen: set[tuple[int, int]] = set()  # (controller id, epoch) accepted, for the record
        self._requests: Counter[str] = Counter()  # per API, as Kafka's RequestsPerSec count (request=...)
        self._requests_lock = threading.Lock()
        log_dir = config.log_dir(broker_id)
        self.recovered = sum(d.is_dir() for d in log_dir.iterdir()) if log_dir.is_dir() else 0  # replicas on disk
        self.replica_manager = ReplicaManager(broker_id, log_dir, config.broker.log_segment_bytes,
                                              config.broker.replica_lag_time_max_ms // 10)
        self.metadata_cache = MetadataCache()
        self.zk = config.zk_client().start()
        self.zk.ensure_persistent_paths()
        self.registration = BrokerRegistration(
            self.zk, broker_id, lambda: zkdata.BrokerIdZNode.plaintext(config.host, config.base_port + broker_id),
            may_register_again=ray_says_this_actor_lives)
        self.registration.register()
        self.registration.keep_registered()
        self.fetchers = ReplicaFetcherManager(broker_id, lambda leader: ray.get_actor(
            broker_actor_name(leader), namespace=config.namespace), config.broker, lambda: self.broker_epoch)
        self.isr = IsrManager(broker_id, self.zk, self.replica_manager,
                              is_alive=lambda b: b in self.metadata_cache.alive_brokers)
        self._stopped = threading.Event()
        threading.Thread(target=self._scheduler, name=f"kafka-scheduler-{broker_id}", daemon=True).start()
        self.controller = poll(lambda: ControllerActor.options(  # beside its broker, as in Kafka
            name=controller_actor_name(broker_id), namespace=config.namespace, max_restarts=-1,
            scheduling_strategy=beside_this_actor(),
        ).remote(broker_id, config), timeout=60, what=f"{controller_actor_name(broker_id)}'s name to be free "
                                                     "(a killed incarnation's candidate is still being stopped)",
            tolerate=(ValueError,), interval=0.1)

    def _scheduler(self) -> None:
        """Kafka's periodic replica tasks: ISR shrink (every half replica.lag.time.max.ms), ISR change
        propagation, high-watermark checkpoints."""
        cfg = self.config.broker
        tasks = [(cfg.replica_lag_time_max_ms / 2, lambda: self.isr.shrink(now_ms(), cfg.replica_lag_time_max_ms)),
                 (cfg.isr_change_propagation_interval_ms, self.isr.propagate),
                 (cfg.replica_high_watermark_checkpoint_interval_ms, self.replica_manager.checkpoint_high_watermarks)]
        due = [time.monotonic() + interval / 1000 for interval, _ in tasks]
        while not self._stopped.wait(max(0.0, min(due) - time.monotonic())):
            for i, (interval, task) in enumerate(tasks):
                if time.monotonic() >= due[i]:
                    due[i] = time.monotonic() + interval / 1000
                    try:
                        task()
                    except Exception:  # a ZooKeeper hiccup must not end the scheduler
                        log.exception("Scheduled task failed")

    @property
    def broker_epoch(self) -> int:
        return self.registration.broker_epoch

    @ray.method(concurrency_group="control")
    def handle(self, requests: list[ControllerRequestT]) -> list[ControllerResponse]:
        """Controller requests delivered together by the RequestSender, applied in their order."""
        handlers = {"LeaderAndIsr": self.leader_and_isr, "UpdateMetadata": self.update_metadata,
                    "StopReplica": self.stop_replica}
        self._count(*(r.api for r in requests))
        responses = [handlers[r.api](r) for r in requests]
        for request, response in zip(requests, responses):
            controller = (request.controller_id, request.controller_epoch)
            if response.error_code == Errors.NONE and controller not in self._controllers_seen:
                self._controllers_seen.add(controller)
                self.sink.emit(rundir.CONTROLLER_REQUESTS, rundir.ControllerRequestRecord(
                    broker_id=self.broker_id, controller_id=request.controller_id,
                    controller_epoch=request.controller_epoch, api=request.api, ts_ms=now_ms()))
        return responses

    @ray.method(concurrency_group="control")
    def leader_and_isr(self, request: LeaderAndIsrRequest) -> ControllerResponse:
        """Apply the roles, then stop fetching for new leaders and (re)start it for new followers."""
        with self._lock:
            response = self.replica_manager.become_leader_or_follower(request, self.broker_epoch)
            for st, result in zip(request.partition_states, response.partition_errors):
                if result.error_code != Errors.NONE:
                    continue
                tp = TopicPartition(st.topic, st.partition)
                if st.leader == self.broker_id or st.leader < 0:
                    self.fetchers.unfollow(tp)
                else:
                    self.fetchers.follow(tp, self.replica_manager.partition(tp), st.leader)
            self.fetchers.nudge()
            return _answer(request, response)

    @ray.method(concurrency_group="control")
    def update_metadata(self, request: UpdateMetadataRequest) -> ControllerResponse:
        with self._lock:
            error = self.replica_manager.check_request(request, self.broker_epoch)
            if error == 0:
                self.metadata_cache.update(request)
                state_change_log.debug("[Broker id=%d] Cached %d partition states and live brokers %s from "
                                       "UpdateMetadata of controller %d epoch %d with correlation id %d",
                                       self.broker_id, len(request.partition_states),
                                       sorted(b.id for b in request.live_brokers), request.controller_id,
                                       request.controller_epoch, request.correlation_id)
            return _answer(request, ControllerResponse(api=request.api, broker_id=self.broker_id, error_code=error))

    @ray.method(concurrency_group="control")
    def stop_replica(self, request: StopReplicaRequest) -> ControllerResponse:
        with self._lock:
            response = self.replica_manager.stop_replicas(request, self.broker_epoch)
            for p, result in zip(request.partitions, response.partition_errors):
                if result.error_code == Errors.NONE:  # the partition is stopped: its fetcher ignores it already
                    self.fetchers.unfollow(TopicPartition(p.topic, p.partition))
            return _answer(request, response)

    # -- the data plane ------------------------------------------------------

    def produce(self, request: ProduceRequest) -> ProduceResponse:
        self._count("Produce")
        return self.replica_manager.append_records(request, self.config.broker.min_insync_replicas,
                                                   self.config.broker.message_max_bytes)

    @ray.method(concurrency_group="replication")
    def fetch(self, request: FetchRequest) -> FetchResponse:
        self._count("FetchFollower" if request.replica_id >= 0 else "FetchConsumer")
        response, expand = self.replica_manager.fetch(request, now_ms)
        if expand:
            self.isr.expand(expand, request.replica_id)
        return response

    @ray.method(concurrency_group="replication")
    def wake_fetches(self, replica_id: int, replica_epoch: int, partitions_version: int) -> None:
        """A follower got new partitions to fetch from here: end its long-polling fetch now."""
        self.replica_manager.wake_fetches(replica_id, replica_epoch, partitions_version)

    @ray.method(concurrency_group="replication")
    def offsets_for_leader_epoch(self, request: OffsetsForLeaderEpochRequest) -> OffsetsForLeaderEpochResponse:
        self._count("OffsetsForLeaderEpoch")
        return self.replica_manager.offsets_for_leader_epoch(request)

    @ray.method(concurrency_group="control")
    def metadata(self) -> dict:
        """The metadata cache as plain data: controller and its epoch, live brokers, (leader, epoch, isr) per partition."""
        cache = self.metadata_cache.snapshot  # consistent without the lock: updates swap whole snapshots
        return {"controller_id": cache.controller_id, "controller_epoch": cache.controller_epoch,
                "brokers": sorted(cache.alive_brokers),
                "partitions": self.metadata_cache.leader_and_isr(cache)}

    @ray.method(concurrency_group="control")
    def replicas(self) -> dict:
        with self._lock:
            return {tp: role(r, self.broker_id) for tp, r in self.replica_manager.replicas.items()}

    @ray.method(concurrency_group="control")
    def info(self) -> dict:
        return {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch, "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id(),
                "controller_epoch": self.replica_manager.controller_epoch, "session_id": self.zk.session_id,
                "log_dir": str(self.replica_manager.log_dir), "recovered_partitions": self.recovered,
                "rss_mb": rss_mb(), "requests": self._count()}

    def _count(self, *apis: str) -> dict[str, int]:
        """Count requests served, per API; the counts so far."""
        with self._requests_lock:
            self._requests.update(apis)
            return dict(self._requests)

    @ray.method(concurrency_group="control")
    def zk_session(self) -> tuple[int, bytes]:
        """(session id, password) of this broker's ZooKeeper session, for session-expiry chaos."""
        return self.zk.kazoo.client_id

    def controlled_shutdown(self) -> dict:
        """Kafka's controlled shutdown: ask the controller to move our leaderships away (retrying with
        backoff while some remain), then close our sessions and stop this actor for good."""
        cfg = self.config.controller
        remaining, attempts = None, 0
        for attempts in range(1, cfg.controlled_shutdown_max_retries + 2):
            try:
                controller_id = self.zk.get_controller_id()
                controller = ray.get_actor(controller_actor_name(controller_id), namespace=self.config.namespace)
                remaining = ray.get(controller.controlled_shutdown.remote(self.broker_id, self.broker_epoch))
            except Exception as e:  # no controller, or it moved: retry
                remaining = f"{type(e).__name__}: {e}"
            if remaining == []:
                break
            time.sleep(cfg.controlled_shutdown_retry_backoff_ms / 1000)
        self.shutdown()
        return {"broker_id": self.broker_id, "succeeded": remaining == [], "attempts": attempts,
                "remaining": remaining if isinstance(remaining, list) else str(remaining)}

    def shutdown(self) -> None:
        """Stop fetching, checkpoint the high watermarks, and close the controller's and our ZooKeeper
        sessions so ephemerals go at once."""
        self._stopped.set()
        self.fetchers.shutdown()
        self.replica_manager.checkpoint_high_watermarks()
        try:
            ray.get(self.controller.shutdown.remote(), timeout=10)
        except Exception:
            pass  # the candidate may be dead or restarting; its session then times out
        self.registration.stop()
        self.zk.close()
        self.sink.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def _answer(request, response: ControllerResponse) -> ControllerResponse:
    """The response carries the request's correlation id back, as Kafka's response header does."""
    return response.model_copy(update={"correlation_id": request.correlation_id})
