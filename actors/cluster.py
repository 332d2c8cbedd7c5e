"""Bring a kray cluster's brokers up and down on the current Ray cluster, and observe it.

Used by the main job, the CLI, the tests and the benchmarks alike.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.broker.actor import BrokerActor
from actors.config import ClusterConfig
from actors.links.faults import LinkFault
from actors.names import broker_actor_name, broker_id_of, controller_actor_name
from actors.placement import NodeInfo, place_brokers
from actors.process_sockets import abort_tcp_sockets
from actors.runtime import poll
from coordination.errors import KrayError
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)


def alive_nodes() -> list[NodeInfo]:
    """The Ray cluster's live nodes that can run work (CPU), head marked."""
    return [NodeInfo(n["NodeID"], n["NodeManagerAddress"], "node:__internal_head__" in n["Resources"])
            for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0]


def listener_host() -> str | None:
    """The brokers' listener host for the Ray cluster this process is on: loopback when its nodes share
    one address (one machine), else None (every interface, each broker advertising its node's address)."""
    return "127.0.0.1" if len({n.address for n in alive_nodes()}) <= 1 else None


@ray.remote(num_cpus=0)
def _run_there(fn, *args):
    return fn(*args)


def on_node(node_id: str, fn, *args):
    """fn(*args) on a node of the Ray cluster: here when it is this one, else in a Ray task pinned there."""
    if node_id == ray.get_runtime_context().get_node_id():
        return fn(*args)
    return ray.get(_run_there.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
                   .remote(fn, *args), timeout=30)


def send_signal(pid: int, node_id: str, signum: int) -> float:
    """Signal a process on its own node; the wall-clock ms just before the signal went out there, by that
    node's clock (the task that sends it to another node may take seconds to start: a kill on a host of
    its own went out 6 s after the driver's clock said)."""
    return on_node(node_id, _signal, pid, signum)


def _signal(pid: int, signum: int) -> float:
    sent = time.time() * 1000
    os.kill(pid, signum)
    return sent


def abort_sockets(processes: list[dict]) -> None:
    """Close stopped processes' TCP sockets ({pid, node_id} each), as their death would
    (`actors.process_sockets`): one call a node."""
    by_node: dict[str, list[int]] = {}
    for p in processes:
        by_node.setdefault(p["node_id"], []).append(p["pid"])
    for node_id, pids in by_node.items():
        try:
            count, failed = on_node(node_id, abort_tcp_sockets, pids)
        except Exception as e:  # the node gone: its processes' peers learn of it as of a host's loss
            count, failed = 0, str(e)
        if failed:
            log.warning("The TCP sockets (%d) of processes %s stay open until they die: %s", count, pids, failed)


def sigkill_actor(handle, info_call, restart: bool, companions=()) -> float:
    """SIGKILL an actor's process; when. `info_call`: a pending call that answers its pid and node;
    `companions`: (handle, the same call) of the actors whose processes die with it (a broker's
    controller candidate, one process with its broker in Kafka). ray.kill alone asks Ray to end the
    process, which Ray reports dead at once while the process may run on for a second or more: a
    controller killed so could win the election its own death started, then die (a second election,
    seen as epoch 3 instead of 2), and so could the candidate of a broker killed so. Every process is
    stopped first (the fault takes effect then), its TCP sockets closed (as a death closes them, before
    anyone acts on it), Ray told not to restart the actor unless asked, then all are killed. Ray hears
    of every process the same way: told by ray.kill, or, for a kill it is to restart, from the
    process's exit (told of the broker but not of its candidate, a new controller learnt of a host's
    loss 25-30 ms after it learnt of a broker's). Without an answer to `info_call` (already paused or
    gone), ray.kill does it all."""
    try:
        info = ray.get(info_call, timeout=5)
    except Exception:
        ray.kill(handle, no_restart=not restart)
        return time.time() * 1000
    stopped = []
    for companion, call in companions:
        with contextlib.suppress(Exception):  # a companion gone (or still starting) has nothing to stop
            stopped.append((companion, ray.get(call, timeout=1)))

    def to_companions(signum: int) -> None:
        for _, p in stopped:
            with contextlib.suppress(Exception):  # ended meanwhile
                send_signal(p["pid"], p["node_id"], signum)

    effective = send_signal(info["pid"], info["node_id"], signal.SIGSTOP)
    to_companions(signal.SIGSTOP)
    try:
        abort_sockets([info] + [p for _, p in stopped])
        if not restart:
            ray.kill(handle, no_restart=True)
            for companion, _ in stopped:
                with contextlib.suppress(Exception):
                    ray.kill(companion, no_restart=True)
    finally:  # never left stopped
        try:
            send_signal(info["pid"], info["node_id"], signal.SIGKILL)
        finally:
            to_companions(signal.SIGKILL)
    return effective


class LocalCluster:
    """N broker actors (each with its controller candidate) named broker-N in config.namespace."""

    def __init__(self, config: ClusterConfig, broker_ids: list[int], detached: bool = False):
        self.config = config
        self.broker_ids = list(broker_ids)
        self.detached = detached
        self.brokers: dict[int, ray.actor.ActorHandle] = {}
        self.nodes: dict[int, str | None] = {}  # broker -> the node it is pinned to, decided once

    def start(self, timeout: float = 120.0) -> "LocalCluster":
        self.nodes = place_brokers(self.broker_ids, alive_nodes(), self.config.placement)
        for b in self.broker_ids:
            self._spawn(b)
        ray.get([h.info.remote() for h in self.brokers.values()], timeout=timeout)
        return self

    def _spawn(self, broker_id: int, links_at_start: dict[str, LinkFault] | None = None) -> None:
        """Start broker N's actor, pinned to its node when the placement names one: Ray then restarts
        it there, where its log directory is."""
        opts = {"namespace": self.config.namespace, "max_restarts": self.config.broker_max_restarts}
        node = self.nodes.get(broker_id)  # a new incarnation goes where its logs are
        if node is not None:
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        if self.detached:
            opts["lifetime"] = "detached"
        self.brokers[broker_id] = BrokerActor.options(name=broker_actor_name(broker_id), **opts).remote(
            broker_id, self.config, links_at_start)

    def start_broker(self, broker_id: int, timeout: float = 60.0,
                     links_at_start: dict[str, LinkFault] | None = None) -> None:
        """Bring a broker that was killed for good back as a new actor (a new incarnation); with
        `links_at_start`, its links so faulted from its first connection on (a cluster with links)."""
        poll(lambda: self._spawn(broker_id, links_at_start) or True, timeout, f"broker-{broker_id}'s name to be free",
             tolerate=(ValueError,))
        ray.get(self.brokers[broker_id].info.remote(), timeout=timeout)

    @classmethod
    def attach(cls, config: ClusterConfig) -> "LocalCluster":
        """The brokers of a running cluster, found by their actor names: registered or not (a broker
        cut off from ZooKeeper lives on without its registration)."""
        ids = sorted(b for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["namespace"] == config.namespace and (b := broker_id_of(a["name"])) is not None)
        cluster = cls(config, ids)
        for b in ids:
            with contextlib.suppress(ValueError):  # gone since it was listed
                cluster.brokers[b] = ray.get_actor(broker_actor_name(b), namespace=config.namespace)
        return cluster

    def broker_actor(self, broker_id: int):
        """Broker N's actor, found by name (so also in a cluster this process attached to)."""
        try:
            return ray.get_actor(broker_actor_name(broker_id), namespace=self.config.namespace)
        except ValueError:
            raise KrayError(f"broker {broker_id} is not running") from None

    def controller_actor(self, broker_id: int):
        return ray.get_actor(controller_actor_name(broker_id), namespace=self.config.namespace)

    def wait_for_controller(self, zk: KrayZkClient, min_epoch: int = 1, timeout: float = 60.0) -> tuple[int, int]:
        """Block until a controller with epoch >= min_epoch has finished failover; (broker id, epoch)."""
        def elected() -> tuple[int, int] | None:
            controller_id = zk.get_controller_id()
            epoch = zk.get_controller_epoch()
            if controller_id is None or not epoch or epoch[0] < min_epoch:
                return None
            status = ray.get(self.controller_actor(controller_id).status.remote(), timeout=5)
            return (controller_id, epoch[0]) if status["active"] and status["epoch"] == epoch[0] else None
        return poll(elected, timeout, f"a controller with epoch >= {min_epoch}")

    def wait_until_ready(self, zk: KrayZkClient, timeout: float = 60.0) -> tuple[int, int]:
        """A controller elected and its UpdateMetadata in every broker's cache; (controller id, epoch)."""
        controller_id, epoch = self.wait_for_controller(zk, timeout=timeout)
        self.wait_for_metadata(lambda m: m["controller_epoch"] >= epoch, timeout=timeout)
        return controller_id, epoch

    def wait_for_metadata(self, predicate, timeout: float = 60.0, interval: float = 0.05) -> dict[int, dict]:
        """Poll every broker's metadata cache until predicate(cache) holds for all of them (each look
        ships every partition's state from every broker: at 100,000 partitions, look every few seconds)."""
        def converged() -> dict[int, dict] | None:
            caches = dict(zip(self.brokers, ray.get([h.metadata.remote() for h in self.brokers.values()])))
            return caches if all(predicate(c) for c in caches.values()) else None
        return poll(converged, timeout, "broker metadata caches to converge", tolerate=(), interval=interval)

    def bootstrap_servers(self) -> str:
        """The brokers' PLAINTEXT (clients') listeners as a Kafka client's bootstrap.servers."""
        return ",".join(f"{host}:{port}" for host, port in ray.get([h.listener.remote() for h in self.brokers.values()]))

    def metadata_of(self, tp: TopicPartition) -> tuple[int, int, list[int]]:
        """(leader, leader epoch, ISR) of a partition with the newest leader epoch any live broker's cache has."""
        caches = ray.get([h.metadata.remote() for h in self.brokers.values()])
        return max((c["partitions"][tp] for c in caches if tp in c["partitions"]), key=lambda v: v[1],
                   default=(-1, -1, []))

    def kill_controller(self, broker_id: int) -> float:
        """SIGKILL the candidate's process (when); its broker starts a new one after
        candidate_restart_backoff_ms (the killed one's ZooKeeper session lingers until timeout)."""
        handle = self.controller_actor(broker_id)
        return sigkill_actor(handle, handle.process.remote(), restart=False)

    def controlled_shutdown(self, broker_id: int) -> dict:
        """Shut a broker down the controlled way, then end its actor for good."""
        handle = self.brokers.pop(broker_id)
        result = ray.get(handle.controlled_shutdown.remote())
        ray.kill(handle, no_restart=True)
        return result

    def kill_broker(self, broker_id: int, restart: bool = False) -> float:
        """SIGKILL a broker's process and its controller candidate's, together as Kafka's one process;
        when. Ray restarts the broker if asked (which starts a new candidate)."""
        handle = self.broker_actor(broker_id)
        try:
            controller = self.controller_actor(broker_id)
            candidate = [(controller, controller.process.remote())]
        except ValueError:  # none right now: killed earlier, its broker waiting out the restart backoff
            candidate = []
        killed = sigkill_actor(handle, handle.info.remote(), restart, candidate)
        if not restart:
            self.brokers.pop(broker_id, None)
        return killed

    def stop(self, delete_logs: bool = False) -> None:
        """Close every ZooKeeper session cleanly, then end the actors; with delete_logs, remove the
        brokers' log directories too (a throwaway cluster: tests, benchmarks, the demo)."""
        refs = [h.shutdown.remote() for h in self.brokers.values()]
        try:
            ray.get(refs, timeout=20)
        except Exception:
            pass  # a broker that is already gone has nothing to close
        for h in self.brokers.values():
            ray.kill(h, no_restart=True)
        if delete_logs:  # one thread a broker: 100,000 replica directories took 11 s each, 33 s one after another
            dirs = [self.config.log_dir(b) for b in sorted(set(self.broker_ids) | set(self.brokers))]
            with ThreadPoolExecutor(max(1, len(dirs)), thread_name_prefix="delete-logs") as pool:
                list(pool.map(lambda d: shutil.rmtree(d, ignore_errors=True), dirs))
            with contextlib.suppress(OSError):  # the cluster's own directory, when nothing else is in it
                self.config.log_dir(self.broker_ids[0]).parent.rmdir()
        self.brokers.clear()
