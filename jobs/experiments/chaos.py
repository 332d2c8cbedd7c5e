"""Faults, for experiment schedules and `kray chaos`: each acts on a running cluster, on this
machine or on a Ray cluster (signals are sent by a Ray task on the target's node).

| fault                      | what it does                                                           |
|----------------------------|------------------------------------------------------------------------|
| kill-broker N              | SIGKILL of broker N's actor, for good (its controller candidate too)   |
| restart-broker N           | SIGKILL of broker N's actor; Ray restarts it (a new incarnation)       |
| kill-controller            | SIGKILL of the active controller's actor; its broker starts another    |
| pause-broker N / -controller| SIGSTOP for S seconds, then SIGCONT: a GC-pause zombie                |
| expire-broker-session N    | ZooKeeper expires the broker's session (as a long network partition)   |
| expire-controller-session  | the same for the active controller                                     |
| kill-request-sender N      | SIGKILL of the RequestSender to broker N (the controller starts another)|
| zk-restart                 | SIGKILL of one ZooKeeper server (the leader of an ensemble), restarted |
|                            | after S seconds (needs the server handle: embedded runs, `kray zk`)    |
| controlled-shutdown N      | broker N moves its leaderships away and stops for good                 |
| corrupt-log-tail N, truncate-log-tail N, lose-unflushed-tail N: broker N killed for good, its logs |
| damaged once its process is gone (jobs/experiments/disk_faults.py); the caller starts it again after S seconds  |
| fail-log-dir N             | broker N's last log dir fails under it (KIP-112: a file in its place);  |
|                            | the caller repairs it after S seconds (repair_log_dir, then start it)  |
| cut-replication N, cut-broker-zookeeper N, cut-controller-zookeeper, isolate-broker N, split-brokers, |
| bridge-brokers, slow-replication N, cut-controller-broker N, cut-clients N, slow-clients N,         |
| drop-broker-zookeeper N, drop-controller-zookeeper: link faults for S seconds, then healed         |
| (actors/links/shapes.py)                                                                            |
| host-power-loss N          | broker N's host loses power: its link down, every process killed at    |
|                            | once (broker, candidate, raylet, ZooKeeper server); the caller brings   |
|                            | it back after S seconds (host_return: its logs kept, cut back to their  |
|                            | recovery points or lost, then its broker started again)                 |
| isolate-host N, isolate-host-one-way N, cut-hosts N (from the peer's host), partition-hosts-halves,    |
| partition-hosts-bridge, partition-hosts-majorities-ring: partitions between hosts (jobs/hosts/shapes.py), |
| for S seconds: isolate and cut among every host, the shapes among the brokers' hosts (a host without |
| a broker, the driver's, reaches every side)                                                          |
| flaky-zookeeper            | for S seconds, every ZooKeeper link at once or one of them (a broker's  |
|                            | or the active controller's) stalled for 0.1-0.5 s, then dropped for     |
|                            | 0.3-1.5 s (both within a quarter of the session timeout), 1.5-2.5 s     |
|                            | apart (a client reconnects in between):                                 |
|                            | a stalled ZooKeeper seen by clients whose sessions live on              |
"""
from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import signal
import time
from pathlib import Path

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.cluster import LocalCluster, send_signal
from actors.links.faults import ZOOKEEPER_LINK, Direction, LinkFault
from actors.links.shapes import CUT, DROP, SLOW, LinkSetting, Role, Shape, every_link, healed, plan
from actors.names import broker_actor_name, controller_actor_name, is_request_sender_to, request_sender_name
from coordination.errors import KrayError
from coordination.zkclient import KrayZkClient, expire_session
from jobs.experiments import disk_faults
from jobs.experiments.disk_faults import DISK_FAULTS, Damage
from jobs.experiments.expected_deaths import EXPECTED_DEATHS
from jobs.hosts.shapes import HostShape
from jobs.measures.rundir import FaultKind

log = logging.getLogger(__name__)

# host faults that cut hosts apart, and their shapes
HOST_PARTITIONS = {FaultKind.ISOLATE_HOST: HostShape.ISOLATE, FaultKind.ISOLATE_HOST_ONE_WAY: HostShape.ISOLATE_ONE_WAY,
                   FaultKind.CUT_HOSTS: HostShape.CUT, FaultKind.PARTITION_HOSTS_HALVES: HostShape.HALVES,
                   FaultKind.PARTITION_HOSTS_BRIDGE: HostShape.BRIDGE,
                   FaultKind.PARTITION_HOSTS_RING: HostShape.MAJORITIES_RING}
HOST_FAULTS = {FaultKind.HOST_POWER_LOSS, *HOST_PARTITIONS}  # a cluster on `kray hosts` only
BROKER_FAULTS = {FaultKind.KILL_BROKER, FaultKind.RESTART_BROKER, FaultKind.PAUSE_BROKER,
                 FaultKind.EXPIRE_BROKER_SESSION, FaultKind.KILL_REQUEST_SENDER, FaultKind.CONTROLLED_SHUTDOWN,
                 FaultKind.CUT_REPLICATION, FaultKind.CUT_BROKER_ZOOKEEPER, FaultKind.ISOLATE_BROKER,
                 FaultKind.SLOW_REPLICATION, FaultKind.FAIL_LOG_DIR, FaultKind.CUT_CLIENTS,
                 FaultKind.CUT_CONTROLLER_BROKER, FaultKind.SLOW_CLIENTS, FaultKind.DROP_BROKER_ZOOKEEPER,
                 FaultKind.HOST_POWER_LOSS, FaultKind.ISOLATE_HOST, FaultKind.ISOLATE_HOST_ONE_WAY, FaultKind.CUT_HOSTS,
                 *DISK_FAULTS}
LINK_FAULTS = {FaultKind.CUT_REPLICATION: Shape.CUT_REPLICATION, FaultKind.CUT_BROKER_ZOOKEEPER: Shape.CUT_ZOOKEEPER,
               FaultKind.CUT_CONTROLLER_ZOOKEEPER: Shape.CUT_ZOOKEEPER, FaultKind.ISOLATE_BROKER: Shape.ISOLATE_BROKER,
               FaultKind.SPLIT_BROKERS: Shape.SPLIT_BROKERS, FaultKind.BRIDGE_BROKERS: Shape.BRIDGE_BROKERS,
               FaultKind.SLOW_REPLICATION: Shape.SLOW_REPLICATION,
               FaultKind.CUT_CONTROLLER_BROKER: Shape.CUT_CONTROLLER_BROKER, FaultKind.CUT_CLIENTS: Shape.CUT_CLIENTS,
               FaultKind.SLOW_CLIENTS: Shape.SLOW_CLIENTS, FaultKind.DROP_BROKER_ZOOKEEPER: Shape.DROP_ZOOKEEPER,
               FaultKind.DROP_CONTROLLER_ZOOKEEPER: Shape.DROP_ZOOKEEPER}
ON_THE_CONTROLLER = {FaultKind.CUT_CONTROLLER_ZOOKEEPER, FaultKind.DROP_CONTROLLER_ZOOKEEPER}  # its candidate's link
FLAKY_STALL_S = (0.1, 0.5)  # flaky-zookeeper: how long a link's bytes are held before it drops,
FLAKY_DROP_S = (0.3, 1.5)  # how long it is dropped (the two within a quarter of the session timeout),
FLAKY_GAP_S = (1.5, 2.5)  # and how long the links stay healthy between two rounds: longer than kazoo's longest
# reconnect delay (1 s +/- 40%, coordination/zkclient.py), so that every session is heard from again before its
# link can stall anew (back-to-back rounds on one link would add up to an expiry)
SLOW_LINKS = {kind for kind, shape in LINK_FAULTS.items() if shape in SLOW}  # link faults that take a LinkFault
# faults after which a new incarnation of their broker registers: what a fault `at_return` waits for
RETURNING_FAULTS = {FaultKind.KILL_BROKER, FaultKind.RESTART_BROKER, FaultKind.CONTROLLED_SHUTDOWN,
                    FaultKind.FAIL_LOG_DIR, FaultKind.EXPIRE_BROKER_SESSION, FaultKind.HOST_POWER_LOSS, *DISK_FAULTS}
# faults that SIGKILL actors' processes, which Ray reports as worker deaths (expected_deaths.py); fail-log-dir's
# repair kills its broker too
KILLING_FAULTS = {FaultKind.KILL_BROKER, FaultKind.RESTART_BROKER, FaultKind.KILL_CONTROLLER, FaultKind.FAIL_LOG_DIR,
                  *DISK_FAULTS}


class Chaos:
    """Faults against one cluster. `zk_server` (a coordination.server launcher) enables zk-restart."""

    def __init__(self, cluster: LocalCluster, zk: KrayZkClient, zk_server=None):
        self.cluster, self.zk, self.zk_server = cluster, zk, zk_server
        self._hosts_control = None  # found at the first host fault
        self._broker_hosts: dict[int, str] = {}  # broker -> its host's address, as last registered
        self._lost: dict[int, tuple] = {}  # broker -> (the handle of its incarnation lost with its host, the host)

    @property
    def namespace(self) -> str:
        return self.cluster.config.namespace

    def controller_id(self) -> int:
        controller_id = self.zk.get_controller_id()
        if controller_id is None:
            raise KrayError("there is no active controller right now")
        return controller_id

    def _actor(self, broker_id: int | None):
        """Broker N's actor, or without N the active controller's: (its broker id, the handle, the method
        that says its pid and node: a controller's answers at once, not behind its events)."""
        if broker_id is None:
            broker_id = self.controller_id()
            handle = self.cluster.controller_actor(broker_id)
            return broker_id, handle, handle.process
        handle = self.cluster.broker_actor(broker_id)
        return broker_id, handle, handle.info

    def _expect_deaths(self, broker_id: int, broker: bool = True) -> None:
        """Name the processes about to be killed, broker N's (unless not `broker`) and its controller
        candidate's, so that Ray's reports of their deaths are left out (expected_deaths.py). One that
        does not answer within the kill's own wait for it is left to be reported."""
        calls = []
        with contextlib.suppress(ValueError):  # no candidate right now: killed earlier, not started again yet
            calls.append(self.cluster.controller_actor(broker_id).process.remote())
        if broker:
            calls.append(self.cluster.broker_actor(broker_id).info.remote())
        ready, _ = ray.wait(calls, num_returns=len(calls), timeout=5) if calls else ([], [])
        pids = []
        for ref in ready:
            with contextlib.suppress(Exception):  # died meanwhile: Ray's report of it is not this kill's
                pids.append(ray.get(ref)["pid"])
        EXPECTED_DEATHS.expect(pids)

    def kill_broker(self, broker_id: int, restart: bool = False) -> float:
        """SIGKILL broker N's actor and its controller candidate (Ray restarts it if asked); when the
        fault took effect."""
        self._expect_deaths(broker_id)
        return self.cluster.kill_broker(broker_id, restart)

    def disk_fault(self, kind: FaultKind, broker_id: int) -> tuple[float, list[Damage]]:
        """SIGKILL broker N for good (as kill-broker), then, once its process is gone, damage its logs as
        `kind` says, on its node; (when it was killed, what was damaged). Start it again with
        LocalCluster.start_broker: its next incarnation recovers the logs and fetches the rest."""
        info = ray.get(self.cluster.broker_actor(broker_id).info.remote(), timeout=30)
        log_dirs = info.get("log_dirs") or [info["log_dir"]]  # every one of its log.dirs (KIP-112)
        killed = self.kill_broker(broker_id)
        if info["node_id"] == ray.get_runtime_context().get_node_id():
            return killed, damage_logs(kind, info["pid"], log_dirs)
        task = _damage_logs.options(scheduling_strategy=NodeAffinitySchedulingStrategy(info["node_id"], soft=False))
        return killed, ray.get(task.remote(kind, info["pid"], log_dirs), timeout=60)

    def fail_log_dir(self, broker_id: int) -> tuple[float, dict]:
        """Broker N's last log dir fails under the running broker (KIP-112): put aside, a file in its place,
        so that the broker's next I/O there fails and it stops serving that dir's replicas (all of them,
        halting, when it has one dir); (when, what repair_log_dir needs)."""
        handle = self.cluster.broker_actor(broker_id)
        info = ray.get(handle.info.remote(), timeout=30)
        injected = time.time() * 1000
        log_dir = Path(info["log_dirs"][-1])
        aside = str(log_dir.with_name(f"{log_dir.name}.failed-{int(injected)}"))
        try:
            ray.get(handle.fail_log_dir.remote(len(info["log_dirs"]) - 1, aside), timeout=30)
        except RayActorError:  # halted by the failure before it answered: its only dir, as the fault meant
            log.info("Broker %d halted as its log dir %s failed", broker_id, log_dir)
        return injected, {"log_dir": str(log_dir), "aside": aside, "node_id": info["node_id"], "pid": info["pid"]}

    def repair_log_dir(self, broker_id: int, failed: dict) -> None:
        """The failed disk replaced with its data: broker N killed for good (it may have halted already),
        then the dir put back on its node. Start it again with LocalCluster.start_broker: its new
        incarnation serves the dir's replicas again, catching up from their leaders."""
        try:
            self.kill_broker(broker_id)
        except Exception:  # halted (its last dir), or Ray's restart of it failing on the failed dir
            with contextlib.suppress(Exception):
                ray.kill(self.cluster.broker_actor(broker_id), no_restart=True)
            self.cluster.brokers.pop(broker_id, None)
        args = (failed["pid"], failed["log_dir"], failed["aside"])
        if failed["node_id"] == ray.get_runtime_context().get_node_id():
            restore_log_dir(*args)
        else:
            task = _restore_log_dir.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(failed["node_id"], soft=False))
            ray.get(task.remote(*args), timeout=60)

    def kill_controller(self) -> tuple[int, float]:
        """SIGKILL the active controller's actor (its broker starts another); (its broker id, when)."""
        controller_id = self.controller_id()
        self._expect_deaths(controller_id, broker=False)
        return controller_id, self.cluster.kill_controller(controller_id)

    def pause(self, seconds: float, broker_id: int | None = None) -> tuple[int, float]:
        """SIGSTOP broker N's actor (or, without N, the active controller's) for `seconds`, then SIGCONT;
        blocks meanwhile. (The paused broker's or controller's id, when it stopped.)"""
        broker_id, _, info_method = self._actor(broker_id)
        info = ray.get(info_method.remote(), timeout=30)
        stopped = send_signal(info["pid"], info["node_id"], signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            send_signal(info["pid"], info["node_id"], signal.SIGCONT)
        return broker_id, stopped

    def expire_session(self, broker_id: int | None = None) -> tuple[int, float]:
        """Expire broker N's ZooKeeper session (or, without N, the active controller's); (its id, when)."""
        broker_id, actor, _ = self._actor(broker_id)
        client_id = ray.get(actor.zk_session.remote(), timeout=30)
        expired = time.time() * 1000
        expire_session(self.zk.connect, client_id)
        return broker_id, expired

    def apply_links(self, settings: list[LinkSetting]) -> float:
        """Set each link fault, both directions, on its broker, controller candidate or RequestSender;
        when they were all set. A process that is not running is passed over: it has no links now, and a new one
        starts with healthy links (so healing after a kill heals the others). Needs a cluster started
        with link_faults_enable."""
        calls = {}
        for setting in settings:
            try:
                actor = self._process(setting)
            except (KrayError, ValueError):
                log.info("No %s %d running: its links are left as they are", setting.role.value, setting.broker_id)
                continue
            for d in Direction:
                calls[actor.set_link_fault.remote(setting.link, d, setting.fault)] = setting
        for ref, setting in calls.items():
            try:
                ray.get(ref, timeout=30)
            except RayActorError:  # it died meanwhile
                log.info("%s %d died while its link %s was set", setting.role.value, setting.broker_id, setting.link)
        return time.time() * 1000

    def _process(self, setting: LinkSetting):
        if setting.role is Role.CANDIDATE:
            return self.cluster.controller_actor(setting.broker_id)
        if setting.role is Role.SENDER:
            return ray.get_actor(request_sender_name(setting.broker_id), namespace=self.namespace)
        return self.cluster.broker_actor(setting.broker_id)

    def link_fault(self, kind: FaultKind, target: int | None = None, slow: LinkFault | None = None
                   ) -> tuple[int | None, list[LinkSetting], float]:
        """Make the link fault `kind` (cut-controller-zookeeper: the active controller's; cut-controller-broker:
        the active controller's link to broker `target`); (its target, the settings that
        `apply_links(healed(settings))` undoes, when)."""
        controller = self.controller_id() if kind in ON_THE_CONTROLLER | {FaultKind.CUT_CONTROLLER_BROKER} else None
        if kind in ON_THE_CONTROLLER:
            target = controller
        try:
            settings = plan(LINK_FAULTS[kind], list(self.cluster.brokers), target,
                            candidate=kind in ON_THE_CONTROLLER, slow=slow, controller=controller)
        except ValueError as e:
            raise KrayError(str(e)) from None
        return target, settings, self.apply_links(settings)

    def flaky_zookeeper(self, seconds: float, session_timeout_ms: int, rng: random.Random) -> tuple[float, int]:
        """For `seconds`, round after round, every ZooKeeper link at once (the server stalls) or one
        of them (a broker's, or the active controller's) stalls for FLAKY_STALL_S (its bytes held: a
        server too busy to answer) and is then dropped for FLAKY_DROP_S (closed and refused: the client
        gave up on it), healed FLAKY_GAP_S before the next round. A request sent during the stall is in
        flight when the connection drops. The stall and the drop stay within a quarter of the session
        timeout and each client reconnects before the next round, so every session lives. (When it
        started, how many links dropped); each round is logged."""
        started, drops = time.time() * 1000, 0
        deadline = time.monotonic() + seconds
        longest = session_timeout_ms / 4000
        while time.monotonic() < deadline:
            controller = self.zk.get_controller_id()
            links = [LinkSetting(Role.BROKER, b, ZOOKEEPER_LINK, CUT) for b in sorted(self.cluster.brokers)] + \
                ([LinkSetting(Role.CANDIDATE, controller, ZOOKEEPER_LINK, CUT)] if controller is not None else [])
            stalled = links if rng.random() < 0.5 else [rng.choice(links)]  # the server, or one client's link
            stall_s = min(rng.uniform(*FLAKY_STALL_S), longest / 3)
            drop_s = min(rng.uniform(*FLAKY_DROP_S), longest - stall_s)
            log.info("flaky-zookeeper: the ZooKeeper links of %s stalled for %.2f s, then dropped for %.2f s",
                     ", ".join(f"{s.role.value} {s.broker_id}" for s in stalled), stall_s, drop_s)
            self.apply_links(stalled)
            drops += len(stalled)
            try:
                time.sleep(stall_s)
                self.apply_links([s._replace(fault=DROP) for s in stalled])
                time.sleep(drop_s)
            finally:
                self.apply_links(healed(stalled))
            time.sleep(min(rng.uniform(*FLAKY_GAP_S), max(0.0, deadline - time.monotonic())))
        return started, drops

    def heal_links(self) -> float:
        """Every link of every broker, candidate and RequestSender healthy again (`kray chaos heal`); when."""
        return self.apply_links(every_link(list(self.cluster.brokers)))

    def kill_request_sender(self, broker_id: int) -> int:
        """SIGKILL the RequestSenders to broker N (the broker's own, and any a controller started in place
        of a killed one); the active controller's id."""
        controller_id = self.controller_id()
        names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if a["namespace"] == self.namespace and is_request_sender_to(a["name"], broker_id)]
        if not names:
            raise KrayError(f"there is no RequestSender to broker {broker_id}")
        for name in names:
            with contextlib.suppress(ValueError):  # gone meanwhile
                ray.kill(ray.get_actor(name, namespace=self.namespace))
        return controller_id

    def zk_restart(self, seconds: float) -> int:
        """SIGKILL a ZooKeeper server (an ensemble's leader), start it again after `seconds`; its index."""
        if self.zk_server is None:
            raise KrayError("zk-restart needs a ZooKeeper server started by kray (embedded or `kray zk start`)")
        index = getattr(self.zk_server, "leader_index", lambda: 0)() or 0
        self.zk_server.kill_server(index)
        time.sleep(seconds)
        self.zk_server.restart_server(index)
        return index

    # host faults
    def hosts_control(self):
        """The hosts' control (jobs.hosts.control), or why there is none."""
        from jobs.hosts.control import HostsControl

        if self._hosts_control is None:
            self._hosts_control = HostsControl.find()
        if self._hosts_control is None:
            raise KrayError("host faults need a cluster across hosts (kray hosts up N --cluster), driven from a host "
                            "or from here as root")
        return self._hosts_control

    def broker_hosts(self) -> dict[int, str]:
        """Each broker's host address (as registered; a broker down keeps its last), one broker a host."""
        registered = self.zk.get_brokers(self.zk.get_all_broker_ids())
        self._broker_hosts.update({b: info.host for b, (info, _) in registered.items()})
        hosts = dict(sorted(self._broker_hosts.items()))
        if len(set(hosts.values())) != len(hosts):
            raise KrayError(f"host faults need one broker a host, not {hosts}")
        return hosts

    def host_of(self, broker_id: int) -> str:
        hosts = self.broker_hosts()
        if broker_id not in hosts:
            raise KrayError(f"no broker {broker_id} on a host: the brokers are {', '.join(map(str, hosts))}")
        return hosts[broker_id]

    def host_power_loss(self, broker_id: int) -> tuple[float, str, list[str]]:
        """Broker N's host loses power (every process at once, its link down); (when, the host, the broker's
        log dirs). Nobody tells Ray: it learns of the lost node by its own health checks, as the controller
        does by the broker's ZooKeeper session. Bring it back with host_return. Refused for the host this
        driver runs on, and Ray's head's: their loss would end the run (or the command) itself."""
        from actors.cluster import alive_nodes

        host = self.host_of(broker_id)
        here = ray.get_runtime_context().get_node_id()
        needed = {n.address for n in alive_nodes() if n.is_head or n.node_id == here}
        if host in needed:
            raise KrayError(f"broker {broker_id}'s host {host} runs this driver or Ray's head: its power loss would "
                            "end the run; pick a broker on another host")
        handle = self.cluster.broker_actor(broker_id)
        info = ray.get(handle.info.remote(), timeout=30)
        at = self.hosts_control().power_off(host)
        # kept, not dropped: an actor without references is destroyed by Ray at once, which its controller's
        # failure detector would hear of within milliseconds, as of no real host's loss
        self._lost[broker_id] = (self.cluster.brokers.pop(broker_id, handle), host)
        return at, host, info.get("log_dirs") or [info["log_dir"]]

    def host_return(self, broker_id: int, host: str, log_dirs: list[str], logs: str, timeout_s: float = 120) -> str:
        """The host powered on with its share of the cluster (ZooKeeper, Ray), broker N's logs as `logs`
        says (disk_faults.after_power_loss), its broker pinned to the host's new Ray node; what was
        done. Start the broker with LocalCluster.start_broker."""
        from actors.cluster import alive_nodes, on_node

        before = {n.node_id for n in alive_nodes() if n.address == host}  # the lost one, if Ray has not noticed
        began = time.monotonic()
        started = self.hosts_control().power_on(host)
        powered = time.monotonic()
        deadline = powered + timeout_s
        while not (new := [n.node_id for n in alive_nodes() if n.address == host and n.node_id not in before]):
            if time.monotonic() > deadline:
                raise KrayError(f"host {host} has no Ray node {timeout_s:g} s after it was powered on")
            time.sleep(0.2)
        for name in (broker_actor_name(broker_id), controller_actor_name(broker_id)):  # the lost ones' names freed
            with contextlib.suppress(ValueError):  # (Ray may not have noticed the lost node yet)
                ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)
        self._lost.pop(broker_id, None)
        self.cluster.nodes[broker_id] = new[0]
        joined = time.monotonic()
        logs_left = on_node(new[0], disk_faults.after_power_loss, logs, log_dirs)
        return f"{started} in {powered - began:.1f} s, its Ray node joined {joined - powered:.1f} s later; {logs_left}"

    def host_partition(self, kind: FaultKind, target: int | None = None, peer: int | None = None
                       ) -> tuple[float, str]:
        """Make the host partition `kind` (the shapes among the brokers' hosts, in broker order; isolate and cut
        among every host); (when, which host drops whose packets). heal_hosts heals it."""
        named = [self.host_of(b) for b in (target, peer) if b is not None]
        shape = HOST_PARTITIONS[kind]
        return self.hosts_control().partition(shape, named, [] if named else list(self.broker_hosts().values()))

    def heal_hosts(self) -> float:
        return self.hosts_control().heal()

    def restore_hosts(self) -> None:
        """At a run's end, whatever its faults' threads left: every partition healed, every host a power
        loss took down powered on (its broker stays down: the cluster is going)."""
        if self._hosts_control is None:
            return
        with contextlib.suppress(Exception):
            self.heal_hosts()
        for broker_id, (_, host) in list(self._lost.items()):
            try:
                self.hosts_control().power_on(host)
            except Exception as e:  # already on (its return got that far), or the agent gone
                log.info("Host %s of broker %d not powered on at the run's end: %s", host, broker_id, e)
            self._lost.pop(broker_id, None)

    def controlled_shutdown(self, broker_id: int) -> dict:
        self.cluster.broker_actor(broker_id)
        return self.cluster.controlled_shutdown(broker_id)


def process_gone(pid: int) -> bool:
    """No process `pid` runs here any more (gone, or a zombie not yet reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def damage_logs(kind: FaultKind, pid: int, log_dirs: list[str], timeout_s: float = 30.0) -> list[Damage]:
    """Once the process `pid` is gone (it held the logs), damage the logs in `log_dirs` as `kind` says."""
    deadline = time.monotonic() + timeout_s
    while not process_gone(pid):
        if time.monotonic() > deadline:
            raise KrayError(f"process {pid} still runs {timeout_s:g} s after its SIGKILL: its logs are left alone")
        time.sleep(0.02)
    damages = [d for log_dir in log_dirs for d in disk_faults.plan(kind, Path(log_dir))]
    disk_faults.apply(damages)
    return damages


@ray.remote(num_cpus=0)
def _damage_logs(kind: FaultKind, pid: int, log_dirs: list[str]) -> list[Damage]:
    return damage_logs(kind, pid, log_dirs)


def restore_log_dir(pid: int, log_dir: str, aside: str, timeout_s: float = 30.0) -> None:
    """Once the broker process `pid` is gone, the failed log dir's stand-in goes and its contents come back."""
    deadline = time.monotonic() + timeout_s
    while not process_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    failed = Path(log_dir)
    if failed.is_dir():
        shutil.rmtree(failed)
    else:
        failed.unlink(missing_ok=True)
    os.rename(aside, failed)


@ray.remote(num_cpus=0)
def _restore_log_dir(pid: int, log_dir: str, aside: str) -> None:
    restore_log_dir(pid, log_dir, aside)
