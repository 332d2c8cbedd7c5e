"""When each fault and admin action fires, and what fires it. `schedule` lays the faults out from the
experiment (its random ones drawn with its seed); the Scheduler drives them through the load: each
fault in a thread of its own at its time, after those that wait for the cluster to recover one at a
time in order, or at the return of the broker an earlier fault took down; the admin actions one after
another in a thread of their own. Each fault and action is recorded as it ends (faults.jsonl,
actions.jsonl)."""
from __future__ import annotations

import logging
import random
import threading
import time
from typing import Callable

from actors.clients.load import now_ms
from actors.cluster import LocalCluster
from actors.links.shapes import healed
from actors.records import RunWriter
from coordination import zkdata
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition
from jobs.experiments import admin_actions
from jobs.experiments.chaos import (
    BROKER_FAULTS,
    HOST_FAULTS,
    HOST_PARTITIONS,
    KILLING_FAULTS,
    LINK_FAULTS,
    RETURNING_FAULTS,
    Chaos,
)
from jobs.experiments.disk_faults import DISK_FAULTS, describe
from jobs.experiments.expected_deaths import EXPECTED_DEATHS, RAY_REPORTS_FOLLOW
from jobs.experiments.experiment import ActionSpec, Experiment, FaultSpec
from jobs.experiments.sampling import Sampler
from jobs.experiments.settling import Settling
from jobs.measures import rundir
from jobs.measures.rundir import FaultKind, FaultRecord

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 5.0
PRE_FAULT_SAMPLE_S = 0.5  # how long a fault waits for ZooKeeper's states to be sampled before it
_TIMED = {FaultKind.KILL_BROKER, FaultKind.CONTROLLED_SHUTDOWN, FaultKind.PAUSE_BROKER, FaultKind.PAUSE_CONTROLLER,
          FaultKind.ZK_RESTART, FaultKind.FAIL_LOG_DIR, FaultKind.FLAKY_ZOOKEEPER, *LINK_FAULTS, *DISK_FAULTS,
          *HOST_FAULTS}


def schedule(experiment: Experiment, rng: random.Random) -> list[FaultSpec]:
    """The declared faults and the random ones (drawn with the experiment's seed), in time order (a
    fault at the same time as another stays after it). A disk fault drawn is followed, by chance
    (`kill_at_return`), by the leader's kill the moment its victim registers again."""
    faults = list(experiment.schedule)
    spec = experiment.random_faults
    if spec is not None:
        at = rng.uniform(*spec.every_s)
        while at < experiment.duration_s:
            kind = rng.choice(spec.kinds)
            target = None if kind not in BROKER_FAULTS else \
                "non-controller" if kind is FaultKind.CUT_CONTROLLER_BROKER else "random"  # its controller elsewhere
            faults.append(FaultSpec(at_s=at, fault=kind, target=target, seconds=spec.seconds))
            if kind in DISK_FAULTS and rng.random() < spec.kill_at_return:
                faults.append(FaultSpec(at_s=at, fault=FaultKind.KILL_BROKER, target="leader", seconds=spec.seconds,
                                        at_return=True))
            at += rng.uniform(*spec.every_s)
    return sorted(faults, key=lambda f: f.at_s)


def load_tail_s(experiment: Experiment, faults: list[FaultSpec]) -> float:
    """How long the load goes on after the last fault is injected: as long as the schedule planned, and
    at least the horizon, through which the client's waits are observed."""
    return max(experiment.duration_s - faults[-1].at_s, experiment.horizon_s) if faults else 0.0


def load_length_s(experiment: Experiment, faults: list[FaultSpec]) -> float:
    """How long the load lasts if every fault is injected at its time: duration_s, or longer when the
    last fault comes less than horizon_s before its end. A fault that waits (for the cluster to recover,
    for a victim's return) comes later and the load's end with it: this is the least it lasts."""
    return max(experiment.duration_s, faults[-1].at_s + load_tail_s(experiment, faults)) if faults \
        else experiment.duration_s


def awaited_after_kill(states: dict, victim: int, controller: int | None) -> dict[str, int]:
    """The partitions whose leader epoch the controller moves past once it has handled the death of
    `victim` (partition key -> the epoch now): the next fault waits for that. A broker's death takes it
    out of every ISR it is in, a new epoch each; the controller's own broker's, only out of those it led:
    the new controller elects leaders for them, and, as Kafka's, leaves the dead broker in the ISRs
    where it followed (no broker change reaches it for a broker gone before it watched), for their
    leaders to shrink without a new epoch."""
    return {key: s.leader_epoch for key, s in states.items()
            if victim in s.isr and (victim != controller or s.leader == victim)}


def returns_awaited(faults: list[FaultSpec]) -> dict[int, int | None]:
    """For each fault `at_return` (by fault id, from 1), the id of the last fault before it that takes a
    broker down and brings it back, whose victim's return it waits for (None: there is none)."""
    out, last = {}, None
    for fault_id, spec in enumerate(faults, 1):
        if spec.at_return:
            out[fault_id] = last
        if spec.fault in RETURNING_FAULTS:
            last = fault_id
    return out


class Scheduler:
    """Drives one run's schedule. `lock` guards the cluster's broker handles, which the faults' threads
    change; `grow` creates the topics due after a fault (the runner's: their partitions join the load)
    before the next fault that waits for recovery."""

    def __init__(self, experiment: Experiment, zk: KrayZkClient, cluster: LocalCluster, chaos: Chaos,
                 lock: threading.Lock, writer: RunWriter, settling: Settling, sampler: Sampler,
                 grow: Callable[[int, float], None], progress: Callable[[str], None],
                 steady: Callable[[float], str] = lambda timeout_s: ""):
        """`steady(timeout_s)`: after the cluster has recovered, until the load is steady again (what it
        found, for the fault's record)."""
        self.exp, self.zk, self.cluster, self.chaos, self.lock = experiment, zk, cluster, chaos, lock
        self.writer, self.settling, self.sampler, self.grow, self.progress = writer, settling, sampler, grow, progress
        self.steady = steady
        self.rng = random.Random(experiment.seed)
        self._recovery_turn = threading.Condition()  # faults that wait for recovery go one at a time, in order
        self._recovery_queue: list[int] = []  # their fault ids, in schedule order
        self._awaited: dict[str, int] = {}  # partitions the last such kill must move past these leader epochs
        self._last_injected = time.monotonic()  # the run's start until a fault is injected
        self._down: set[int] = set()  # brokers a fault has taken down and will bring back
        self._taken_down: dict[int, tuple[int, int] | None] = {}  # fault id -> (its victim, the registration it
        # ended), None if it failed first
        self._taken_down_changed = threading.Condition()
        self._returns_of: dict[int, int | None] = {}  # fault at_return -> the fault whose victim it waits for
        self._injected: set[int] = set()  # fault ids injected, or failed to be: no later injection can end the load
        self._reports_quiet = False  # Ray's reports of the faults' kills left out (expected_deaths.py)
        self.faults_done = 0

    def drive(self) -> None:
        """Load for load_length_s, each fault in its own thread at its time; progress meanwhile."""
        exp = self.exp
        faults = schedule(exp, self.rng)
        self._reports_quiet = any(f.fault in KILLING_FAULTS for f in faults) and EXPECTED_DEATHS.install()
        waiting = sum(f.after_recovery or f.at_return for f in faults)
        self.progress(f"Load for at least {round(load_length_s(exp, faults), 1):g} s with {len(faults)} faults" + (
            f" ({waiting} of them waiting for the cluster to recover or a broker to return, which puts them and the "
            f"load's end later)" if waiting else ""))
        begin = time.monotonic()
        threads, next_progress = [], 0.0
        pending = list(enumerate(faults, 1))
        actions = list(enumerate(sorted(exp.actions, key=lambda a: a.at_s), 1))
        if actions:  # one after another at their times, each waiting for the one before
            threads.append(threading.Thread(target=self._act_admin, args=(actions, begin), name="admin-actions",
                                            daemon=True))
            threads[-1].start()
        self._recovery_queue = [i for i, spec in pending if spec.after_recovery]
        self._returns_of = returns_awaited(faults)
        tail = load_tail_s(exp, faults)  # a fault injected late keeps the load going this long after it too
        while (elapsed := time.monotonic() - begin) < exp.duration_s or pending or any(t.is_alive() for t in threads) \
                or time.monotonic() < self._last_injected + tail:
            while pending and pending[0][1].at_s <= elapsed:
                fault_id, spec = pending.pop(0)
                threads.append(threading.Thread(target=self._inject, args=(fault_id, spec), daemon=True))
                threads[-1].start()
            # the first line once the first sample is in (at the latest when the second is due)
            if elapsed >= next_progress and (self.sampler.sampled or elapsed >= PROGRESS_EVERY_S):
                self.progress(self.sampler.line(self.clock(elapsed, self._last_injected - begin, faults),
                                                self.faults_done, len(faults)))
                next_progress = (elapsed // PROGRESS_EVERY_S + 1) * PROGRESS_EVERY_S
            time.sleep(0.05)

    def clock(self, elapsed: float, last_injected: float, faults: list[FaultSpec]) -> str:
        """The progress line's clock: seconds under load, of how many. Once every fault is in, the load
        ends the tail after the last one (`last_injected`, from the load's start); before, or while a
        fault's thread ends past that, "at least" the least it can be: the last fault comes no earlier
        than now, nor than its time."""
        exp = self.exp
        tail = load_tail_s(exp, faults)
        if len(self._injected) == len(faults):
            end = max(exp.duration_s, last_injected + tail if faults else 0.0)
            if elapsed <= end:
                return f"[{elapsed:6.1f}s of {end:.1f}s]"
        else:
            end = max(exp.duration_s, max(elapsed, faults[-1].at_s) + tail)
        return f"[{elapsed:6.1f}s of at least {max(end, elapsed):.1f}s]"  # (or a fault's thread still ending)

    def _act_admin(self, actions: list[tuple[int, ActionSpec]], begin: float) -> None:
        """The admin actions in schedule order, each at its time or once the one before is done, with
        random draws of their own (the faults' threads draw from the run's), each recorded."""
        rng = random.Random(self.exp.seed + 1)
        for action_id, spec in actions:
            time.sleep(max(0.0, begin + spec.at_s - time.monotonic()))
            record = admin_actions.perform(self.zk, spec, action_id, self.exp.broker_ids, rng)
            self.writer.write(rundir.ACTIONS, [record])
            self.progress(f"Admin action {spec.action.value} {spec.topic}" +
                          (f" refused: {record.error}" if record.error else f" done in "
                           f"{record.done_ms - record.started_ms:.0f} ms"))

    def _target(self, target) -> tuple[int | None, str]:
        """The broker a fault's target (or peer) picks, and a note for its record when it is not the one asked
        for."""
        with self.lock:
            up = sorted(b for b in self.cluster.brokers if b not in self._down)
        if target is None or isinstance(target, int):
            return target, ""
        if target == "controller":
            return self.chaos.controller_id(), ""
        note = ""
        if target in ("leader", "coordinator", "coordinator-unless-controller"):
            tp = TopicPartition(self.exp.topics[0].name, 0) if target == "leader" \
                else self.settling.offsets_partition()
            state = self.zk.get_partition_states([tp]).get(tp)  # that one state, not every partition's
            if state is None or state.state.leader < 0:
                raise RuntimeError(f"{tp} has no leader to pick")
            if target != "coordinator-unless-controller" or state.state.leader != self.zk.get_controller_id():
                return state.state.leader, ""
            note = f"the coordinator, broker {state.state.leader}, is the controller's: a non-controller instead; "
        candidates = up if target == "random" else [b for b in up if b != self.zk.get_controller_id()]
        if not candidates:
            raise RuntimeError(f"no broker to pick as {target}")
        return self.rng.choice(candidates), note

    def _inject(self, fault_id: int, spec: FaultSpec) -> None:
        if spec.at_return:
            self._inject_now(fault_id, spec, self._wait_for_return(fault_id, spec.recovery_timeout_s))
            return
        if not spec.after_recovery:
            self._inject_now(fault_id, spec)
            return
        with self._recovery_turn:  # one at a time, in schedule order: each waits for the one before
            self._recovery_turn.wait_for(lambda: self._recovery_queue[0] == fault_id)
        try:
            try:
                self.grow(fault_id - 1, spec.recovery_timeout_s)
            except Exception as e:  # reported; the fault goes on
                self.progress(f"Creating the topics due after fault {fault_id - 1} failed: {type(e).__name__}: {e}")
            self._inject_now(fault_id, spec)
        finally:
            with self._recovery_turn:
                self._recovery_queue.pop(0)
                self._recovery_turn.notify_all()

    def _wait_for_return(self, fault_id: int, timeout_s: float) -> str:
        """Until the broker that the fault this one is timed after took down has registered again (polled
        every 10 ms); what happened, for the fault's record."""
        awaited = self._returns_of.get(fault_id)
        if awaited is None:
            return "no earlier fault took a broker down: injected at its time; "
        with self._taken_down_changed:  # that fault may itself wait for recovery first: no deadline here
            self._taken_down_changed.wait_for(lambda: awaited in self._taken_down)
        if self._taken_down[awaited] is None:
            return f"fault {awaited} failed before it took a broker down: injected at its time; "
        victim, ended = self._taken_down[awaited]
        deadline = time.monotonic() + timeout_s
        path = zkdata.broker_path(victim)
        while time.monotonic() < deadline:
            stat = self.zk.exists(path)
            if stat is not None and stat.czxid != ended:
                return f"at broker {victim}'s return (fault {awaited}), {now_ms() - stat.ctime:.0f} ms after it registered; "
            time.sleep(0.01)
        return f"broker {victim} (fault {awaited}) not back within {timeout_s:g} s: injected then; "

    def _inject_now(self, fault_id: int, spec: FaultSpec, note: str = "") -> None:
        record = FaultRecord(fault_id=fault_id, kind=spec.fault, injected_ms=now_ms())
        try:
            states = None
            if spec.after_recovery:
                states = self.settling.wait_for_recovery(spec.recovery_timeout_s, self._awaited)
                if states is None:
                    self._awaited = {}
                    note = f"injected without the cluster recovered after {spec.recovery_timeout_s:g} s; "
                    self.progress(f"Fault {fault_id}: the cluster has not recovered; injecting anyway")
                else:
                    note = self.steady(spec.recovery_timeout_s)
            target, picked = self._target(spec.target)
            record.target, note = target, note + picked
            # (not after a host's power loss: its fault ends only once its broker has registered again, which
            # it can only after the controller saw its old session end; and with a session timeout longer than
            # replica.lag.time.max.ms its leaders drop it from their ISRs first, at no new epoch)
            if states is not None and spec.fault in (FaultKind.KILL_BROKER, FaultKind.RESTART_BROKER, *DISK_FAULTS):
                self._awaited = awaited_after_kill(states, target, self.zk.get_controller_id())
            if spec.fault in RETURNING_FAULTS:  # what a fault timed at its victim's return waits for
                stat = self.zk.exists(zkdata.broker_path(target))
                with self._taken_down_changed:
                    self._taken_down[fault_id] = (target, stat.czxid if stat is not None else -1)
                    self._taken_down_changed.notify_all()
            self.progress(f"Fault {fault_id}: {spec.fault.value}" + (f" {target}" if target is not None else "")
                          + (f" for {spec.seconds:g} s" if spec.fault in _TIMED else "")
                          + (RAY_REPORTS_FOLLOW if spec.fault in KILLING_FAULTS and not self._reports_quiet else ""))
            if target is not None and not spec.at_return:  # (one at a return waits for nothing)
                self._sample_before(fault_id)
            record.injected_ms = now_ms()
            self._last_injected = time.monotonic()  # the run's start until a fault is injected
            self._injected.add(fault_id)
            self._act(spec, target, record)
            record.detail = note + record.detail
        except Exception as e:  # a fault that could not be injected is recorded as such; the run goes on
            record.detail = f"failed: {type(e).__name__}: {e}"[:500]
            self._injected.add(fault_id)
            self.progress(f"Fault {fault_id} ({spec.fault.value}) failed: {e}")
            with self._taken_down_changed:  # a fault timed at its victim's return waits no longer
                self._taken_down.setdefault(fault_id, None)
                self._taken_down_changed.notify_all()
        self.writer.write(rundir.FAULTS, [record])
        self.faults_done += 1

    def _sample_before(self, fault_id: int) -> None:
        """ZooKeeper's partition states just before a fault, waited for PRE_FAULT_SAMPLE_S at most: ZooKeeper
        out of reach (a zk-restart, a host cut from the ensemble) delays the sample, not the fault; a sample
        that ends after the fault is dated after it."""
        def sample() -> None:
            try:
                self.sampler.sample_states()
            except Exception as e:
                log.warning("No ZooKeeper sample before fault %d: %s", fault_id, e)
        thread = threading.Thread(target=sample, name=f"sample-before-{fault_id}", daemon=True)
        thread.start()
        thread.join(PRE_FAULT_SAMPLE_S)

    def _act(self, spec: FaultSpec, target: int | None, record: FaultRecord) -> None:
        chaos, kind = self.chaos, spec.fault
        if kind in (FaultKind.KILL_BROKER, FaultKind.CONTROLLED_SHUTDOWN, *DISK_FAULTS):
            with self.lock:
                self._down.add(target)
            try:
                if kind is FaultKind.KILL_BROKER:
                    record.injected_ms = chaos.kill_broker(target)
                elif kind in DISK_FAULTS:  # killed, its logs damaged with its process gone
                    record.injected_ms, damages = chaos.disk_fault(kind, target)
                    record.detail = describe(damages)
                else:
                    record.detail = str(chaos.controlled_shutdown(target))
                time.sleep(spec.seconds)
            finally:  # whatever happened, the broker comes back
                with self.lock:
                    self.cluster.start_broker(target)
                    self._down.discard(target)
            record.ended_ms = now_ms()
        elif kind is FaultKind.RESTART_BROKER:
            record.injected_ms = chaos.kill_broker(target, restart=True)
        elif kind is FaultKind.FAIL_LOG_DIR:  # KIP-112: the broker runs on without the dir, then gets it back
            record.injected_ms, failed = chaos.fail_log_dir(target)
            record.detail = f"log dir {failed['log_dir']}"
            try:
                time.sleep(spec.seconds)
            finally:  # whatever happened, the disk is replaced with its data and the broker restarted on it
                with self.lock:
                    self._down.add(target)
                    try:
                        chaos.repair_log_dir(target, failed)
                        self.cluster.start_broker(target)
                    finally:
                        self._down.discard(target)
            record.ended_ms = now_ms()
        elif kind is FaultKind.KILL_CONTROLLER:
            record.target, record.injected_ms = chaos.kill_controller()
        elif kind in (FaultKind.PAUSE_BROKER, FaultKind.PAUSE_CONTROLLER):
            record.target, record.injected_ms = chaos.pause(spec.seconds, target)
            record.ended_ms = now_ms()
        elif kind in (FaultKind.EXPIRE_BROKER_SESSION, FaultKind.EXPIRE_CONTROLLER_SESSION):
            record.target, record.injected_ms = chaos.expire_session(target)
        elif kind is FaultKind.KILL_REQUEST_SENDER:
            record.detail = f"controller {chaos.kill_request_sender(target)}"
        elif kind is FaultKind.ZK_RESTART:
            record.detail = f"server {chaos.zk_restart(spec.seconds)}"
            record.ended_ms = now_ms()
        elif kind is FaultKind.FLAKY_ZOOKEEPER:
            record.injected_ms, drops = chaos.flaky_zookeeper(spec.seconds, self.exp.session_timeout_ms, self.rng)
            record.detail = f"{drops} ZooKeeper links dropped"
            record.ended_ms = now_ms()
        elif kind is FaultKind.HOST_POWER_LOSS:
            self._host_power_loss(spec, target, record)
        elif kind in HOST_PARTITIONS:
            peer, picked = self._target(spec.peer_target)
            if peer is not None and peer == target:  # (leader: controller, the leader the controller's broker)
                with self.lock:
                    others = sorted(b for b in self.cluster.brokers if b not in self._down and b != target)
                if not others:
                    raise RuntimeError(f"cut-hosts needs another broker's host than broker {target}'s")
                peer, picked = self.rng.choice(others), f"the peer ({spec.peer_target}) is the target: another; "
            try:  # inside: a partition set on some hosts only, or an agent's late answer, is healed too
                record.injected_ms, detail = chaos.host_partition(kind, target, peer)
                record.detail = picked + (f"peer broker {peer}; " if peer is not None else "") + detail
                time.sleep(spec.seconds)
            finally:  # whatever happened, the hosts heal
                chaos.heal_hosts()
            record.ended_ms = now_ms()
        elif kind in LINK_FAULTS:
            record.target, settings, record.injected_ms = chaos.link_fault(kind, target, spec.slow)
            record.detail = f"{len(settings)} links"
            try:
                time.sleep(spec.seconds)
            finally:  # whatever happened, the links heal
                chaos.apply_links(healed(settings))
            record.ended_ms = now_ms()

    def _host_power_loss(self, spec: FaultSpec, target: int, record: FaultRecord) -> None:
        """The target's host loses power for the fault's seconds, then returns with its broker (whatever the
        wait saw: a failed return is the fault's record, and the run's end powers the host on)."""
        with self.lock:
            self._down.add(target)
        host = None
        try:
            record.injected_ms, host, log_dirs = self.chaos.host_power_loss(target)
            record.detail = f"host {host}"
            time.sleep(spec.seconds)
        finally:
            try:
                if host is not None:
                    with self.lock:
                        record.detail += "; " + self.chaos.host_return(target, host, log_dirs, spec.power_loss_logs,
                                                                       spec.recovery_timeout_s)
                        began = time.monotonic()
                        self.cluster.start_broker(target)
                        record.detail += f"; its broker started in {time.monotonic() - began:.1f} s"
            finally:
                with self.lock:
                    self._down.discard(target)
        record.ended_ms = now_ms()
