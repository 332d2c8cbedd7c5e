"""The Broker actor: registers in ZooKeeper, hosts its controller candidate, answers the
controller over Ray, and serves the Kafka protocol on its listener for clients and followers.

Two planes, two transports. The controller's requests (LeaderAndIsr, UpdateMetadata, StopReplica)
arrive as Ray calls on the `control` threads. The data plane is one asyncio event loop on a thread
of its own ("kafka-network-thread"): the SocketServer, KafkaApis, the ReplicaManager with every
Partition and Log, and the replica fetchers all live on it and need no locks; other threads hand it
work (`_on_loop`) and wait for the answer. ISR writes to ZooKeeper go on the IsrManager's thread.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Callable, TypeVar

import ray
import uvloop
from pydantic import Field, TypeAdapter, ValidationError

from actors import records
from actors.broker.network.admin_apis import AdminApis
from actors.broker.events import BrokerEvents
from actors.broker.group.group_coordinator import GroupCoordinator
from actors.broker.group.group_records import GROUP_METADATA_TOPIC
from actors.broker.fetcher import ReplicaFetcherManager
from actors.broker.isr import IsrManager
from actors.broker.log.log_config import LogConfig
from actors.broker.log.log_dirs import replicas_in
from actors.broker.metadata_cache import MetadataCache
from actors.broker.metrics import BrokerMetrics
from actors.broker.network.group_apis import GroupApis
from actors.broker.network.kafka_apis import KafkaApis
from actors.broker.network.network import SocketServer
from actors.broker.replica_manager import ReplicaManager, role
from actors.broker.request_metrics import RequestMetrics, Snapshot
from actors.config import BrokerConfig, ClusterConfig
from actors.controller.actor import ControllerActor
from actors.controller.channel import start_request_sender
from actors.names import controller_actor_name, request_sender_name
from actors.links.faults import CLIENTS_LINK, Direction, LinkFault, broker_link, faultable
from actors.links.proxy import LinkTable
from actors.metrics import EXPORT_INTERVAL_S
from actors.recording import RecordSink
from actors.runtime import (
    beside_this_actor,
    configure_actor_process,
    poll,
    ray_says_this_actor_lives,
    rss_mb,
)
from actors.protocol import (
    CLIENT_LISTENER,
    INTER_BROKER_LISTENER,
    LEADER_DURING_DELETE,
    ControllerRequestT,
    ControllerResponse,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from coordination import zkdata
from coordination.config_changes import ConfigChangeListener
from coordination.errors import Errors
from coordination.producer_ids import ProducerIdManager
from coordination.registration import BrokerRegistration
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("state.change.logger")
T = TypeVar("T")
LISTENERS_FILE = "listeners.json"  # kray only: the ports this broker advertised, for its next incarnation


@ray.remote(num_cpus=0, max_concurrency=16, concurrency_groups={"control": 8})
class BrokerActor:
    def __init__(self, broker_id: int, config: ClusterConfig, links_at_start: dict[str, LinkFault] | None = None):
        """`links_at_start`: link faults (both directions) this incarnation starts with, before its first
        connection (chaos: a broker that returns into a network partition; Ray's restart of this actor
        starts with them again)."""
        configure_actor_process()
        self.broker_id = broker_id
        self.config = config
        self._lock = threading.Lock()  # controller requests, one at a time
        self.sink = RecordSink(config.recorder, config.namespace)
        self._controllers_seen: set[tuple[int, int]] = set()  # (controller id, epoch) accepted, for the record
        self.loop = uvloop.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name=f"kafka-network-thread-{broker_id}", daemon=True).start()
        log_dir = config.log_dir(broker_id)
        self.recovered = len(replicas_in(config.log_dirs_of(broker_id)))
        # on a loop of its own: the data plane's loop makes ZooKeeper calls that wait on this link
        self.links = LinkTable(name=f"broker-links-{broker_id}") if config.link_faults_enable else None
        for link, fault in (links_at_start or {}).items():
            for direction in Direction:
                faultable(self.links).set_fault(link, direction, fault)
        self.zk = config.zk_client(links=self.links).start()
        self.zk.ensure_persistent_paths()
        self.cluster_id = self.zk.get_or_create_cluster_id()
        self.topic_configs: dict[str, LogConfig] = {}
        self.controller = None  # the controller candidate beside this broker, started last
        self.metadata_cache = MetadataCache()
        self.replica_manager = ReplicaManager(broker_id, config.log_dirs_of(broker_id), self._log_config,
                                              in_metadata=lambda tp: tp in self.metadata_cache.partitions,
                                              expand_isr=lambda replica, tps: self.isr.expand(tps, replica),
                                              alive_broker_epoch=self.metadata_cache.alive_broker_epoch,
                                              events=BrokerEvents(broker_id, self.sink))
        # Kafka's LogDirFailureHandler: a failed directory is handled on the data plane's loop
        self.replica_manager.failure_channel.on_offline = \
            lambda d: self.loop.call_soon_threadsafe(self._handle_log_dir_failure, d)
        self.isr = IsrManager(broker_id, self.zk, self.replica_manager, self._on_loop)
        self.producer_ids = ProducerIdManager(self.zk, broker_id)
        self.admin = AdminApis(broker_id, self.zk, self.metadata_cache, config, lambda: self.cluster_id,
                               lambda: self.controller, self.replica_manager.describe_log_dirs)
        self.groups = GroupCoordinator(broker_id, config.broker,
                                       ReplicaGroupLog(self.replica_manager, self.metadata_cache, config.broker))
        self.apis = KafkaApis(broker_id, self.replica_manager, self.metadata_cache, lambda: self.cluster_id,
                              self.producer_ids.generate_producer_id, self.admin,
                              GroupApis(broker_id, self.zk, self.metadata_cache, config.broker, self.groups,
                                        self.replica_manager.events))
        self.requests: Counter[str] = Counter()  # served, per API: the listeners' and the controller's
        self.request_timers = RequestMetrics()  # the listeners' requests, timed
        self.metrics = BrokerMetrics(broker_id, config.namespace)
        self.servers = {name: SocketServer(self.apis.handle, config.bind_host, 0, listener=name, requests=self.requests,
                                           max_request_bytes=config.broker.socket_request_max_bytes,
                                           metrics=self.request_timers)
                        for name in (CLIENT_LISTENER, INTER_BROKER_LISTENER)}
        self.endpoints = self._listen(log_dir / LISTENERS_FILE)
        self.fetchers = ReplicaFetcherManager(
            broker_id, config.broker,
            route=None if self.links is None else lambda leader, address: self.links.route(broker_link(leader), address),
            on_storage_error=lambda tp, partition, e: self.replica_manager.io_failed(
                partition.log.dir.parent, f"processing fetched data for partition {tp}", e),
            broker_epoch=lambda: self.broker_epoch)
        self.config_changes = ConfigChangeListener(self.zk, self._topic_config_changed)
        self.request_sender = poll(lambda: start_request_sender(broker_id, config), timeout=60,
                                   what=f"{request_sender_name(broker_id)}'s name to be free (a killed "
                                        "incarnation's sender is still being stopped)", tolerate=(ValueError,),
                                   interval=0.1)  # started before the controller can hear of us
        # while the sender's process starts (seconds under load): the logs, as Kafka's LogManager before it
        # registers; then wait for the sender, so that the controller's first requests, sent the moment we
        # register, are not held up by it
        self._on_loop(self.replica_manager.load_logs)
        try:
            ray.get(self.request_sender.process.remote(), timeout=120)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError) as e:  # the controller replaces it
            log.warning("[KafkaServer id=%d] Registering without waiting for RequestSender: %s", broker_id, e)
        self.registration = BrokerRegistration(
            self.zk, broker_id, lambda: zkdata.BrokerIdZNode.of_listeners(self.endpoints),
            on_registered=self.replica_manager.events.registered, may_register_again=ray_says_this_actor_lives)
        self.registration.register()
        self.registration.keep_registered()
        self._stopped = threading.Event()
        self._candidate_lock = threading.Lock()
        threading.Thread(target=self._scheduler, name=f"kafka-scheduler-{broker_id}", daemon=True).start()
        self.controller = self._start_controller()
        threading.Thread(target=self._supervise_controller, name=f"controller-candidate-supervisor-{broker_id}",
                         daemon=True).start()

    def _start_controller(self):
        """The controller candidate, beside its broker as in Kafka."""
        name = controller_actor_name(self.broker_id)
        return poll(lambda: ControllerActor.options(
            name=name, namespace=self.config.namespace, max_restarts=0, scheduling_strategy=beside_this_actor(),
        ).remote(self.broker_id, self.config, os.getpid()), timeout=60, tolerate=(ValueError,), interval=0.1,
            what=f"{name}'s name to be free (a killed incarnation's candidate is still being stopped)")

    def _supervise_controller(self) -> None:
        """Start a new candidate in place of one that died, `candidate_restart_backoff_ms` later: Ray's
        restart would start the new process at once, on the cores the failover its death started needs.
        Under `_candidate_lock`, so that a broker shutting down never gets a candidate started after it."""
        backoff = self.config.controller.candidate_restart_backoff_ms / 1000
        while not self._stopped.is_set():
            try:
                ray.get(self.controller.wait_closed.remote())
                return  # shut down with its broker
            except ray.exceptions.ActorUnavailableError:  # unreachable for a moment, not dead: wait again
                if self._stopped.wait(0.5):
                    return
                continue
            except ray.exceptions.RayActorError:
                pass
            if self._stopped.wait(backoff):
                return
            with self._candidate_lock:
                if self._stopped.is_set():
                    return
                log.info("[Broker id=%d] Starting a controller candidate in place of the one that died",
                         self.broker_id)
                try:
                    self.controller = self._start_controller()
                except Exception:  # its name still taken after a minute, or Ray refused: try again later
                    log.exception("[Broker id=%d] Could not start a controller candidate", self.broker_id)

    # -- the event loop ------------------------------------------------------

    def _on_loop(self, fn: Callable[[], T]) -> T:
        """Run fn on the data plane's event loop and wait for its result (from any other thread)."""
        async def call():
            return fn()
        return asyncio.run_coroutine_threadsafe(call(), self.loop).result()

    def _on_loop_await(self, coroutine) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def _listen(self, remembered: Path) -> dict[str, tuple[str, int]]:
        """Listen on both listeners; the (host, port) each is advertised on. Clients' port is the
        configured one (base_port + N), or without one the port this broker's earlier incarnation
        advertised, kept in its log dir, as replication's is: a Kafka broker comes back where it was,
        and clients find it there (an idempotent librdkafka producer whose leader came back on a new
        port stalled until its records timed out); a free port the first time, or when the kept one is
        taken. With links on, clients reach their listener through link `clients`, which takes the
        advertised port; the listener itself then listens on a free port of loopback (or of `host`),
        so that no client gets around the link. Kept ports are bound first, before any free one."""
        kept = _kept_ports(remembered)
        configured = self.config.listener_port(self.broker_id)
        ports = {}
        for name in (INTER_BROKER_LISTENER, CLIENT_LISTENER):
            server = self.servers[name]
            fixed = configured if name == CLIENT_LISTENER else 0
            wanted = fixed or kept.get(name, 0)
            if name == CLIENT_LISTENER and self.links is not None:
                server.host = self.config.host or "127.0.0.1"
                target = (server.host, self._on_loop_await(server.start(serving=False)))
                ports[name] = _listen_on(lambda p: self.links.expose(CLIENTS_LINK, target, self.config.bind_host, p),
                                         wanted, fixed)
            else:
                ports[name] = _listen_on(lambda p: self._on_loop_await(server.start(serving=False, port=p)),
                                         wanted, fixed)
        remembered.parent.mkdir(parents=True, exist_ok=True)
        written = remembered.with_suffix(".tmp")
        written.write_text(json.dumps(ports))
        os.replace(written, remembered)
        return {name: (self.config.advertised_host(), ports[name]) for name in self.servers}

    def _start_serving(self) -> None:
        """Answer the listener's requests from the first UpdateMetadata on, as a KRaft broker starts
        request processing once it has caught up with the metadata: before it, Metadata would answer
        no brokers, and a librdkafka client given that drops every broker it knows and never
        reconnects (confluentinc/librdkafka#5301; an idempotent producer whose leader came back
        stalled until its records timed out). Clients' connections wait in the backlog meanwhile."""
        for server in self.servers.values():
            self._on_loop_await(server.start_serving())
        log.info("[KafkaServer id=%d] Serving requests on %s: metadata received from the controller",
                 self.broker_id, ", ".join(f"{name}://{h}:{p}" for name, (h, p) in self.endpoints.items()))

    def _log_config(self, topic: str) -> LogConfig:
        """The topic's LogConfig: as last announced, or read from /config/topics/T when its first replica
        is created here (as Kafka's LogManager does; a topic created after the broker started)."""
        config = self.topic_configs.get(topic)
        if config is None:
            znode = self.zk.get_znode(zkdata.TopicConfigZNode, zkdata.topic_config_path(topic))
            config = self.topic_configs[topic] = self._parse_config(znode.config if znode else {})
        return config

    def _parse_config(self, overrides: dict[str, str]) -> LogConfig:
        return LogConfig.from_overrides(self.config.broker, overrides,
                                        self.config.controller.unclean_leader_election_enable)

    def _topic_config_changed(self, topic: str, overrides: dict[str, str]) -> None:
        """A topic's configs in ZooKeeper (at start, or a kafka-configs --alter): applied from now on."""
        config = self.topic_configs[topic] = self._parse_config(overrides)
        self._on_loop(lambda: self.replica_manager.update_log_config(topic, config))
        log.info("[Broker id=%d] Topic %s configs: %s", self.broker_id, topic, overrides)
        if "unclean.leader.election.enable" in overrides and config.unclean_leader_election_enable \
                and self.controller is not None:
            self.controller.enable_topic_unclean_leader_election.remote(topic)  # Kafka's TopicConfigHandler

    def _scheduler(self) -> None:
        """Kafka's periodic replica tasks: ISR shrink (every half replica.lag.time.max.ms), ISR change
        propagation, high-watermark checkpoints, log retention; and the metrics' export."""
        cfg = self.config.broker
        rm = self.replica_manager
        tasks = [(cfg.replica_lag_time_max_ms / 2, lambda: self.isr.shrink(now_ms(), cfg.replica_lag_time_max_ms)),
                 (cfg.isr_change_propagation_interval_ms, self.isr.propagate),
                 (cfg.replica_high_watermark_checkpoint_interval_ms, self._checkpoint),
                 (cfg.log_retention_check_interval_ms, lambda: self._on_loop(rm.delete_old_segments)),
                 (1000 * EXPORT_INTERVAL_S, self._export_metrics)]
        due = [time.monotonic() + interval / 1000 for interval, _ in tasks]
        while not self._stopped.wait(max(0.0, min(due) - time.monotonic())):
            for i, (interval, task) in enumerate(tasks):
                if time.monotonic() >= due[i]:
                    due[i] = time.monotonic() + interval / 1000
                    try:
                        task()
                    except Exception:  # a ZooKeeper hiccup must not end the scheduler
                        log.exception("Scheduled task failed")

    def _export_metrics(self) -> None:
        """The aggregates read on the loop, in one consistent copy; the Ray calls made here, off it."""
        rm = self.replica_manager
        self.metrics.export(*self._on_loop(lambda: (self.request_timers.snapshot(), dict(self.requests),
                                                    rm.messages_in, rm.bytes_in, rm.under_replicated_partitions())))

    def _checkpoint(self) -> None:
        """Leader epochs written on the loop a few files at a time; the HW checkpoint fsync'ed here,
        off the loop."""
        rm = self.replica_manager
        by_dir = self._on_loop(lambda: rm.checkpoint_leader_epochs() or rm.high_watermarks_by_dir())
        rm.write_high_watermark_checkpoints(by_dir)

    def _handle_log_dir_failure(self, log_dir: Path) -> None:
        """On the loop (Kafka's LogDirFailureHandler): the directory's replicas stop being served and
        fetched; the controller hears of it through /log_dir_event_notification. With no directory left
        the broker halts, as Kafka's does (Exit.halt(1)): to Ray and ZooKeeper, a broker that died."""
        offline = self.replica_manager.handle_log_dir_failure(log_dir)
        for tp in offline:
            self.fetchers.unfollow(tp)
            if tp.topic == GROUP_METADATA_TOPIC:
                self.groups.on_resigned(tp.partition)
        if not self.replica_manager.log_dirs.live:
            log.critical("[Broker id=%d] Halting: all log dirs have failed", self.broker_id)
            logging.shutdown()
            os._exit(1)
        threading.Thread(target=self._propagate_log_dir_event, args=(log_dir,), daemon=True,
                         name=f"log-dir-failure-handler-{self.broker_id}").start()

    def _propagate_log_dir_event(self, log_dir: Path) -> None:
        try:
            path = self.zk.propagate_log_dir_event(self.broker_id)
            log.warning("[Broker id=%d] Stopped serving replicas in dir %s (told the controller: %s)",
                        self.broker_id, log_dir, path)
        except Exception:  # the controller learns it at the next LeaderAndIsr it sends us anyway
            log.exception("[Broker id=%d] Could not write the log dir event notification for %s", self.broker_id,
                          log_dir)

    @property
    def broker_epoch(self) -> int:
        return self.registration.broker_epoch

    @ray.method(concurrency_group="control")
    def handle(self, requests: list[ControllerRequestT]) -> list[ControllerResponse]:
        """Controller requests delivered together by the RequestSender, applied in their order."""
        handlers = {"LeaderAndIsr": self.leader_and_isr, "UpdateMetadata": self.update_metadata,
                    "StopReplica": self.stop_replica}
        responses = [handlers[r.api](r) for r in requests]
        for request, response in zip(requests, responses):
            controller = (request.controller_id, request.controller_epoch)
            if response.error_code == Errors.NONE and controller not in self._controllers_seen:
                self._controllers_seen.add(controller)
                self.sink.emit(records.CONTROLLER_REQUESTS, records.ControllerRequestRecord(
                    broker_id=self.broker_id, controller_id=request.controller_id,
                    controller_epoch=request.controller_epoch, api=request.api, ts_ms=now_ms()))
        return responses

    @ray.method(concurrency_group="control")
    def leader_and_isr(self, request: LeaderAndIsrRequest) -> ControllerResponse:
        """Apply the roles a step (LEADER_AND_ISR_STEP partitions, LEADER_AND_ISR_STEP_S) a loop turn, each then
        (re)starting or stopping fetching from the listeners the request names; fetches in flight cut at the end."""
        def step() -> ControllerResponse | None:
            try:
                states, results = next(steps)
            except StopIteration as done:
                self.fetchers.interrupt_for_added()
                return done.value
            self.fetchers.addresses.update({b.id: (b.host, b.port) for b in request.live_leaders})
            for st, result in zip(states, results):
                if result.error_code != Errors.NONE:
                    continue
                tp = TopicPartition(st.topic, st.partition)
                if st.leader == self.broker_id or st.leader < 0:
                    self.fetchers.unfollow(tp)
                else:
                    self.fetchers.follow(tp, self.replica_manager.partition(tp), st.leader, interrupt=False)
                if st.topic == GROUP_METADATA_TOPIC:  # Kafka's onLeadershipChange: the groups follow the leader
                    if st.leader == self.broker_id:
                        self.groups.on_elected(st.partition, st.leader_epoch)
                    else:
                        self.groups.on_resigned(st.partition, st.leader_epoch)
            return None
        self._count("LeaderAndIsr")
        with self._lock:
            steps = self.replica_manager.leader_and_isr_steps(request, self.broker_epoch)
            while (response := self._on_loop(step)) is None:
                pass
            return _answer(request, response)

    @ray.method(concurrency_group="control")
    def update_metadata(self, request: UpdateMetadataRequest) -> ControllerResponse:
        self._count("UpdateMetadata")
        with self._lock:
            error = self._on_loop(lambda: self.replica_manager.check_request(request, self.broker_epoch))
            if error == 0:
                before = self.metadata_cache.snapshot
                self.metadata_cache.update(request)
                for topic in {st.topic for st in request.partition_states if st.leader == LEADER_DURING_DELETE}:
                    self.topic_configs.pop(topic, None)  # a topic made again under its name reads its own configs
                if not self.servers[CLIENT_LISTENER].serving:
                    self._start_serving()
                self.replica_manager.events.update_metadata(request.controller_epoch, len(request.partition_states))
                changed = self.metadata_cache.incarnations_since(before)
                if changed:
                    self._on_loop(lambda: self.replica_manager.forget_followers(changed))
                self.loop.call_soon_threadsafe(self.admin.waits.changed)
                state_change_log.debug("[Broker id=%d] Cached %d partition states and live brokers %s from "
                                       "UpdateMetadata of controller %d epoch %d with correlation id %d",
                                       self.broker_id, len(request.partition_states),
                                       sorted(b.id for b in request.live_brokers), request.controller_id,
                                       request.controller_epoch, request.correlation_id)
            return _answer(request, ControllerResponse(api=request.api, broker_id=self.broker_id, error_code=error))

    @ray.method(concurrency_group="control")
    def stop_replica(self, request: StopReplicaRequest) -> ControllerResponse:
        def apply() -> ControllerResponse:
            response = self.replica_manager.stop_replicas(request, self.broker_epoch)
            for p, result in zip(request.partitions, response.partition_errors):
                if result.error_code == Errors.NONE:  # the partition is stopped: its fetcher ignores it already
                    self.fetchers.unfollow(TopicPartition(p.topic, p.partition))
                    if p.topic == GROUP_METADATA_TOPIC:
                        self.groups.on_resigned(p.partition)
            return response
        self._count("StopReplica")
        with self._lock:
            return _answer(request, self._on_loop(apply))

    # -- for tools and tests -------------------------------------------------

    @ray.method(concurrency_group="control")
    def metadata(self) -> dict:
        """The metadata cache as plain data: controller and its epoch, live brokers, (leader, epoch, isr) per partition."""
        cache = self.metadata_cache.snapshot  # consistent without the lock: updates swap whole snapshots
        return {"controller_id": cache.controller_id, "controller_epoch": cache.controller_epoch,
                "brokers": sorted(cache.alive_brokers),
                "partitions": self.metadata_cache.leader_and_isr(cache)}

    @ray.method(concurrency_group="control")
    def replicas(self) -> dict:
        return self._on_loop(lambda: {tp: role(r, self.broker_id) for tp, r in self.replica_manager.replicas.items()})

    @ray.method(concurrency_group="control")
    def partitions_on_disk(self) -> list[str]:
        """Every partition this broker has a log directory for, in its live log dirs ("topic-partition"):
        what a topic's deletion must leave none of."""
        return sorted({f"{tp.topic}-{tp.partition}" for tp in replicas_in(self.replica_manager.log_dirs.live)})

    @ray.method(concurrency_group="control")
    def stored_producers(self, tp: TopicPartition, offsets: list[int]) -> list[tuple[int, int, int] | None]:
        """(producer id, producer epoch, sequence) its log stored with the record at each offset (None: not
        in its log), for the checker to tell a record sent twice under two epochs from a broker's duplicate."""
        def stored() -> list[tuple[int, int, int] | None]:
            partition = self.replica_manager.partition(tp)
            headers = [(o, partition.log.batch_at(o) if partition is not None else None) for o in offsets]
            return [(h.producer_id, h.producer_epoch, h.sequence_at(o)) if h else None for o, h in headers]
        return self._on_loop(stored)

    @ray.method(concurrency_group="control")
    def listener(self) -> tuple[str, int]:
        """(host, port) this broker advertises to clients: what their bootstrap.servers name."""
        return self.endpoints[CLIENT_LISTENER]

    @ray.method(concurrency_group="control")
    def set_link_fault(self, link: str, direction: Direction, fault: LinkFault) -> dict:
        """Fault one direction of one of this broker's links (`zookeeper`; `broker-M`: its fetches from M;
        `clients`: its clients' connections, forward being their requests); every link's faults."""
        return faultable(self.links).set_fault(link, direction, fault)

    @ray.method(concurrency_group="control")
    def fail_log_dir(self, index: int, aside: str) -> None:
        """For chaos: log dir `index` fails under this running broker, as a disk does: it is renamed to
        `aside` and a file takes its place, so that the next I/O in it fails (open files keep working).
        The broker finds out by itself, at that I/O (a checkpoint within
        replica.high.watermark.checkpoint.interval.ms at the latest), which may halt it before this
        call is answered: the caller names `aside` so that it knows where the directory went."""
        log_dir = self.config.log_dirs_of(self.broker_id)[index]
        os.rename(log_dir, aside)
        log_dir.write_text("a failed log directory (kray chaos: fail-log-dir)\n")
        log.warning("[Broker id=%d] Log dir %s failed (chaos): its contents are in %s", self.broker_id, log_dir,
                    aside)

    @ray.method(concurrency_group="control")
    def info(self) -> dict:
        return {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch, "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id(), "listener": self.listener(),
                "controller_epoch": self.replica_manager.controller_epoch, "session_id": self.zk.session_id,
                "log_dir": str(self.replica_manager.log_dir), "recovered_partitions": self.recovered,
                "log_dirs": [str(d) for d in self.replica_manager.log_dirs.dirs],
                "offline_log_dirs": sorted(str(d) for d in self.replica_manager.log_dirs.offline),
                "rss_mb": rss_mb(), "requests": self._count(), "failed_isr_updates": self.isr.failed_isr_updates,
                "last_leader_and_isr": self.replica_manager.last_leader_and_isr}

    @ray.method(concurrency_group="control")
    def request_metrics(self) -> Snapshot:
        """The listeners' request timers so far, per request name (request_metrics.py's snapshot: to
        difference with a later one)."""
        return self._on_loop(self.request_timers.snapshot)

    def _count(self, *apis: str) -> dict[str, int]:
        """Count requests served, per API (the listeners' and the controller's); the counts so far."""
        self.requests.update(apis)
        return dict(self.requests)

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
        """Stop fetching, flush the logs and checkpoint the high watermarks, and close the controller's and
        our ZooKeeper sessions so ephemerals go at once."""
        self._stopped.set()
        self.config_changes.stop()
        self._on_loop_await(self.fetchers.shutdown())
        for server in self.servers.values():
            self._on_loop_await(server.stop())
        self._on_loop(self.replica_manager.checkpoint_high_watermarks)
        self.isr.close()
        with self._candidate_lock:  # no candidate is started after this
            candidate = self.controller
        try:
            ray.get(candidate.shutdown.remote(), timeout=10)
        except Exception:
            pass  # the candidate may be dead or restarting; its session then times out
        self.registration.stop()
        self.zk.close()
        if self.links is not None:  # the clients' link last listens on the advertised port
            self.links.close()
        self.sink.close()


def now_ms() -> int:
    return int(time.time() * 1000)


class ReplicaGroupLog:
    """The group coordinator's GroupLog: the replicas of __consumer_offsets on this broker, its partition
    count in the metadata cache, and the broker's events."""

    def __init__(self, replica_manager: ReplicaManager, metadata_cache: MetadataCache, config: BrokerConfig):
        self.replica_manager, self.metadata_cache, self.config = replica_manager, metadata_cache, config
        self.events = replica_manager.events

    def offsets_partitions(self) -> int:
        """How many partitions __consumer_offsets has (the configured count before it exists)."""
        return self.metadata_cache.partition_count(GROUP_METADATA_TOPIC) or self.config.offsets_topic_num_partitions

    async def append(self, tp: TopicPartition, batch: bytes, timeout_ms: int) -> Errors:
        """A batch of group records appended to its offsets partition with acks=all (Kafka's
        appendForGroup), whether it reached the ISR."""
        (result,) = await self.replica_manager.append_records(-1, timeout_ms, [(tp, batch)])
        return Errors(result.error_code)

    def read(self, tp: TopicPartition, offset: int) -> tuple[bytes, int]:
        """Whole batches of an offsets partition from `offset`, and its log end, for the coordinator's load."""
        partition = self.replica_manager.partition(tp)
        if partition is None:
            return b"", 0
        return partition.log.read(offset, 1 << 20), partition.log.log_end_offset


def _kept_ports(remembered: Path) -> dict[str, int]:
    """The ports an earlier incarnation advertised, by listener; none when it left none (or garbage)."""
    try:
        return TypeAdapter(dict[str, Annotated[int, Field(ge=1, le=65535)]]).validate_json(remembered.read_bytes())
    except (OSError, ValidationError):
        return {}


def _listen_on(start: Callable[[int], int], port: int, fixed: int) -> int:
    """`start(port)`, which returns the port bound; a kept port that is taken gives way to a free one,
    a configured (`fixed`) one does not, as a Kafka broker whose port is taken fails to start."""
    try:
        return start(port)
    except OSError:
        if fixed or not port:
            raise
        log.info("Port %d is taken: listening on a free one", port)
        return start(0)


def _answer(request, response: ControllerResponse) -> ControllerResponse:
    """The response carries the request's correlation id back, as Kafka's response header does."""
    return response.model_copy(update={"correlation_id": request.correlation_id})
