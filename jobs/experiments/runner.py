"""Runs an Experiment: brings a cluster up, drives load through it, injects the scheduled faults,
records everything in a run directory (jobs/measures/rundir.py), reads every partition back, checks the
invariants (jobs/measures/check.py) and stops everything it started.

It runs on the Ray cluster it finds (this process's Ray session, else RAY_ADDRESS) and the
ZooKeeper KRAY_ZK_CONNECT names, else on an embedded local ZooKeeper and Ray. Progress is printed
every few seconds.
"""
from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import ray

from actors.broker.group.group_records import GROUP_METADATA_TOPIC, partition_for
from actors.clients.load import ConsumerWorker, GroupMember, LoadGenerator, Prober, read_back, read_commits
from actors.cluster import LocalCluster
from actors.config import ClusterConfig
from actors.controller.changes import imbalanced_leaderships
from actors.links.shapes import healed
from actors.names import recorder_name
from actors.recording import RunRecorder
from actors.records import (
    BROKER_EVENTS,
    CONSUMED,
    GROUP_COMMITS,
    PRODUCE_ERRORS,
    PRODUCED,
    TIMELINES,
    Ack,
    BrokerEvent,
    Consumed,
    GroupCommit,
    JsonlReader,
    JsonlWriter,
    ProduceError,
    TimelineRecord,
    tp_key,
)
from coordination import admin, zkdata
from coordination.zkdata import TopicPartition
from jobs.experiments import admin_actions
from jobs.measures import failovers, group_failovers, partition_phases, rejoin, rundir, waits
from jobs.experiments.chaos import BROKER_FAULTS, LINK_FAULTS, RETURNING_FAULTS, Chaos
from jobs.experiments.disk_faults import DISK_FAULTS, describe
from jobs.measures.check import check_replication, check_run
from jobs.experiments.experiment import Experiment, FaultSpec
from jobs.measures.waits import percentile
from jobs.experiments.local import embedded_zookeeper_and_ray, fresh_chroot
from jobs.measures.phases import COORDINATOR_STEPS, PHASE_LABELS
from jobs.measures.rundir import FaultKind, FaultRecord
from jobs.reports.timeline_page import write_timeline

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 5.0
READ_BACK_CHUNK = 5000


def now_ms() -> float:
    return time.time() * 1000


def recovered(assignment: dict[TopicPartition, list[int]], states: dict[str, rundir.PartitionLeadership],
              live: set[int], imbalance_percentage: int | None, awaited: dict[str, int]) -> bool:
    """Every replica's broker is up, every partition has all its replicas in its ISR, the controller
    has moved each `awaited` partition past the leader epoch given (it has handled the last kill:
    until then a killed broker may still look registered and in sync), and, unless
    `imbalance_percentage` is None (no auto leader rebalance), leadership is back as the rebalance
    leaves it (no broker over the imbalance ratio)."""
    leaders = {tp: s.leader for tp in assignment if (s := states.get(tp_key(tp.topic, tp.partition))) is not None}
    return len(leaders) == len(assignment) and all(
        set(replicas) <= live and set(states[tp_key(tp.topic, tp.partition)].isr) == set(replicas)
        for tp, replicas in assignment.items()) and all(
        key in states and states[key].leader_epoch > epoch for key, epoch in awaited.items()) and (
        imbalance_percentage is None or not imbalanced_leaderships(
            {tp: replicas[0] for tp, replicas in assignment.items()}, leaders, imbalance_percentage))


def run_experiment(experiment: Experiment, runs_dir: str | Path = "runs", progress: Callable[[str], None] = print,
                   load_stopped: Callable[[], None] | None = None) -> tuple[Path, rundir.Summary]:
    """Run it on the environment found (see the module docstring); (its run directory, its summary).
    `load_stopped` is called once the faults and the load are over, before the cluster is left to
    converge and is read back (a sweep starts Spark then)."""
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{experiment.name}-{uuid.uuid4().hex[:4]}"
    run_dir = Path(runs_dir) / run_id
    with embedded_zookeeper_and_ray(progress) as env:
        return run_dir, ExperimentRun(experiment, run_dir, env.connect, env.zk_server, progress, load_stopped).run()


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


class ExperimentRun:
    def __init__(self, experiment: Experiment, run_dir: Path, connect: str, zk_server, progress,
                 load_stopped: Callable[[], None] | None = None):
        self.exp, self.run_dir, self.progress, self.load_stopped = experiment, run_dir, progress, load_stopped
        self.rng = random.Random(experiment.seed)
        namespace = f"run-{uuid.uuid4().hex[:8]}"
        self.config = ClusterConfig(
            zk_connect=fresh_chroot(connect, "kray-run"), namespace=namespace,
            zk_session_timeout_ms=experiment.session_timeout_ms, recorder=recorder_name(run_dir.name),
            link_faults_enable=experiment.link_faults,
            broker=experiment.broker.model_copy(update={"log_dirs": str(run_dir / "logs")}),
            controller=experiment.controller.model_copy(update={"ray_failure_detector_enable": experiment.detector}))
        self.zk_server = zk_server
        self.writer = JsonlWriter(run_dir)
        self._lock = threading.Lock()  # the cluster's broker handles change under fault threads
        self._recovery_turn = threading.Condition()  # faults that wait for recovery go one at a time, in order
        self._recovery_queue: list[int] = []  # their fault ids, in schedule order
        self._awaited: dict[str, int] = {}  # partitions the last such kill must move past these leader epochs
        self._last_injected = time.monotonic()
        self._down: set[int] = set()  # brokers a fault has taken down and will bring back
        self._taken_down: dict[int, tuple[int, int] | None] = {}  # fault id -> (its victim, the registration it
        # ended), None if it failed first
        self._taken_down_changed = threading.Condition()
        self._returns_of: dict[int, int | None] = {}  # fault at_return -> the fault whose victim it waits for
        self._stop_sampling = threading.Event()
        self.acked = self.consumed = 0
        self.rate = 0.0
        self.faults_done = 0

    # -- the run -------------------------------------------------------------

    def run(self) -> rundir.Summary:
        exp = self.exp
        started = now_ms()
        self.writer.document(rundir.EXPERIMENT, exp)
        self.recorder = RunRecorder.options(name=self.config.recorder, namespace=self.config.namespace).remote(
            str(self.run_dir))
        self.zk = self.config.zk_client().start()
        self.cluster = LocalCluster(self.config, exp.broker_ids)
        try:
            self._start()
            self._drive()
            self._finish()
        finally:
            self._stop_sampling.set()
            self.cluster.stop(delete_logs=True)
            self.zk.close()
            ray.kill(self.recorder)
        return self._summarise(started)

    def _start(self) -> None:
        exp = self.exp
        self.progress(f"Starting {exp.brokers} brokers (session timeout {exp.session_timeout_ms} ms, "
                      f"Ray failure detector {'on' if exp.detector else 'off'})")
        self.cluster.start()
        controller, epoch = self.cluster.wait_until_ready(self.zk)
        first = [t for t in exp.topics if not t.after_fault]  # the others are created during the run (_grow)
        for t in first:
            admin.create_topic(self.zk, t.name, t.partitions, t.replication_factor)
        self.partitions = [TopicPartition(t.name, p) for t in first for p in range(t.partitions)]
        self.cluster.wait_for_metadata(lambda m: len(m["partitions"]) >= len(self.partitions), timeout=120)
        self.progress(f"Controller is broker {controller} (epoch {epoch}); {len(self.partitions)} partitions online")
        load = exp.load
        n = load.producers
        streamed = self._streamed()
        self._first_partitions = len(streamed)  # the load's rate is for these
        self.generators = [LoadGenerator.remote(i, self.config, streamed[i::n], load.rate / n if n else 0,
                                                load.record_size, load.acks_code, load.records_per_partition)
                           for i in range(n)]
        idle = sorted(set(self.partitions) - set(streamed))
        if idle and n:  # idle partitions among busy ones: their records once, at the start
            self.generators.append(LoadGenerator.remote(n, self.config, idle, load.rate / n, load.record_size,
                                                        load.acks_code, load.records_per_partition, once=True))
        self.consumers = [ConsumerWorker.remote(self.config, self.partitions[i::load.consumers], i)
                          for i in range(load.consumers)]
        k = min(load.probe_partitions, len(streamed))
        self.probers = [Prober.remote(self.config, [streamed[i * len(streamed) // k] for i in range(k)],
                                      load.probe_interval_ms, load.record_size)] if k else []
        self.members = [GroupMember.remote(self.config, load.group, sorted({tp.topic for tp in streamed}), i,
                                           load.commit_interval_ms) for i in range(load.group_members)]
        self.consumers = self.consumers + self.members
        ray.get([a.start.remote() for a in self.generators + self.probers + self.consumers], timeout=60)
        if self.members and self.generators:
            self._await_group()
        self.chaos = Chaos(self.cluster, self.zk, self.zk_server)
        threading.Thread(target=self._sample_loop, name="sampler", daemon=True).start()

    def _await_group(self, timeout_s: float = 60) -> None:
        """Until every member of the group has been given records (its first rebalance waits for
        group.initial.rebalance.delay.ms), so that the schedule's first fault finds the group consuming."""
        began, deadline = time.monotonic(), time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(s["consumed"] for s in ray.get([m.stats.remote() for m in self.members], timeout=10)):
                self.progress(f"Group {self.exp.load.group}: {len(self.members)} members consuming after "
                              f"{time.monotonic() - began:.1f} s")
                return
            time.sleep(0.2)
        self.progress(f"Group {self.exp.load.group}: not every member consuming after {timeout_s:.0f} s; going on")

    def _grow(self, done: int, timeout_s: float) -> None:
        """Create the topics due once `done` faults are done (after_fault), as soon as every broker is
        registered again (their replicas go to all of them; the creation overlaps the last victim's
        catch-up, and the next fault still waits for the whole cluster to recover), and hand their
        partitions to the running producers (the same rate per partition) and to consumers of their
        own; return once every partition has an acknowledged record, so that the next fault's
        unavailability covers them all."""
        topics = [t for t in self.exp.topics if done and t.after_fault == done]
        if not topics:
            return
        names = ", ".join(t.name for t in topics)
        deadline = time.monotonic() + timeout_s
        while set(self.exp.broker_ids) - set(self.zk.get_all_broker_ids()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for t in topics:
            admin.create_topic(self.zk, t.name, t.partitions, t.replication_factor)
        new = [TopicPartition(t.name, p) for t in topics for p in range(t.partitions)]
        total = len(self.partitions) + len(new)
        self.cluster.wait_for_metadata(lambda m: len(m["partitions"]) >= total, timeout=120)
        self.partitions = self.partitions + new  # sampled, awaited and read back from now on
        load, n, c = self.exp.load, self.exp.load.producers, self.exp.load.consumers
        rate = load.rate * len(self._streamed()) / self._first_partitions / n if n else 0
        ray.get([g.add_partitions.remote(new[i::n], rate) for i, g in enumerate(self.generators[:n])], timeout=60)
        consumers = [ConsumerWorker.remote(self.config, new[i::c], len(self.consumers) + i) for i in range(c)]
        ray.get([w.start.remote() for w in consumers] +
                [m.subscribe.remote([t.name for t in topics if t.load == "stream"]) for m in self.members], timeout=60)
        self.consumers = self.consumers + consumers
        deadline = time.monotonic() + timeout_s
        while n and time.monotonic() < deadline and sum(
                s["partitions_acked"] for s in ray.get([g.stats.remote() for g in self.generators], timeout=10)) < total:
            time.sleep(0.2)
        self.progress(f"Topic {names} created after fault {done}: {len(new):,} partitions more, {total:,} under load")

    def _drive(self) -> None:
        """Load for duration_s, each fault in its own thread at its time; progress meanwhile."""
        exp = self.exp
        faults = schedule(exp, self.rng)
        self.progress(f"Load for {exp.duration_s:.0f} s with {len(faults)} faults")
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
        # a fault that waited for recovery keeps the load going as long after it as the schedule planned, and
        # at least the horizon, through which the client's waits are observed
        tail = max(exp.duration_s - faults[-1].at_s, exp.horizon_s) if faults else 0.0
        while (elapsed := time.monotonic() - begin) < exp.duration_s or pending or any(t.is_alive() for t in threads) \
                or time.monotonic() < self._last_injected + tail:
            while pending and pending[0][1].at_s <= elapsed:
                fault_id, spec = pending.pop(0)
                threads.append(threading.Thread(target=self._inject, args=(fault_id, spec), daemon=True))
                threads[-1].start()
            if elapsed >= next_progress:
                self.progress(self._progress_line(elapsed, len(faults)))
                next_progress += PROGRESS_EVERY_S
            time.sleep(0.05)

    def _act_admin(self, actions: list, begin: float) -> None:
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

    def _finish(self) -> None:
        exp = self.exp
        self.progress("Load stopped; waiting for the cluster to converge")
        self.load_ended_ms = now_ms()
        ray.get([g.stop.remote() for g in self.generators + self.probers], timeout=300)
        ray.get([c.stop.remote() for c in self.consumers], timeout=60)
        if self.load_stopped is not None:
            self.load_stopped()
        deadline, state, agreed = time.monotonic() + exp.settle_s, None, False
        while True:
            try:
                state, agreed = self._reading()
            except Exception as e:  # ZooKeeper or a broker busy for a moment: read again
                log.debug("Reading the final state: %s", e)
            if agreed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if not agreed:  # the checker reports what differs
            self.progress(f"Not converged after {exp.settle_s:.0f} s")
        self._stop_sampling.set()
        state = state or self._reading()[0]
        self.writer.document(rundir.FINAL_STATE, state.model_copy(update={"on_disk": self._on_disk()}))
        self.progress("Reading every partition back from offset 0")
        chunk: list[str] = []
        for record in read_back(self.config, self.partitions):
            chunk.append(record.model_dump_json())
            if len(chunk) >= READ_BACK_CHUNK:
                self.recorder.write.remote(CONSUMED, chunk)
                chunk = []
        ray.get(self.recorder.write.remote(CONSUMED, chunk))
        if self.members:
            self.progress(f"Reading group {exp.load.group}'s commits from {GROUP_METADATA_TOPIC}")
            self.offsets_partition = self._offsets_partition()
            commits = read_commits(self.config, exp.load.group, self.offsets_partition)
            ray.get(self.recorder.write.remote(GROUP_COMMITS, [c.model_dump_json() for c in commits]))
        time.sleep(1.0)  # the actors' record sinks flush every 0.2 s
        ray.get(self.recorder.close.remote())

    # -- faults --------------------------------------------------------------

    def _target(self, spec: FaultSpec) -> tuple[int | None, str]:
        """The fault's broker, and a note for its record when it is not the one asked for."""
        with self._lock:
            up = sorted(b for b in self.cluster.brokers if b not in self._down)
        if spec.target is None or isinstance(spec.target, int):
            return spec.target, ""
        if spec.target == "controller":
            return self.chaos.controller_id(), ""
        note = ""
        if spec.target in ("leader", "coordinator", "coordinator-unless-controller"):
            tp = TopicPartition(self.exp.topics[0].name, 0) if spec.target == "leader" else self._offsets_partition()
            state = self.zk.get_partition_states([tp]).get(tp)  # that one state, not every partition's
            if state is None or state.state.leader < 0:
                raise RuntimeError(f"{tp} has no leader to pick")
            if spec.target != "coordinator-unless-controller" or state.state.leader != self.zk.get_controller_id():
                return state.state.leader, ""
            note = f"the coordinator, broker {state.state.leader}, is the controller's: a non-controller instead; "
        candidates = up if spec.target == "random" else [b for b in up if b != self.zk.get_controller_id()]
        if not candidates:
            raise RuntimeError(f"no broker to pick as {spec.target}")
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
                self._grow(fault_id - 1, spec.recovery_timeout_s)
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
                states = self._wait_for_recovery(spec.recovery_timeout_s)
                if states is None:
                    self._awaited = {}
                    note = f"injected without the cluster recovered after {spec.recovery_timeout_s:g} s; "
                    self.progress(f"Fault {fault_id}: the cluster has not recovered; injecting anyway")
            target, picked = self._target(spec)
            record.target, note = target, note + picked
            if states is not None and spec.fault in (FaultKind.KILL_BROKER, FaultKind.RESTART_BROKER, *DISK_FAULTS):
                self._awaited = {key: s.leader_epoch for key, s in states.items() if target in s.isr}
            if spec.fault in RETURNING_FAULTS:  # what a fault timed at its victim's return waits for
                stat = self.zk.exists(zkdata.broker_path(target))
                with self._taken_down_changed:
                    self._taken_down[fault_id] = (target, stat.czxid if stat is not None else -1)
                    self._taken_down_changed.notify_all()
            self.progress(f"Fault {fault_id}: {spec.fault.value}" + (f" {target}" if target is not None else "")
                          + (f" for {spec.seconds:g} s" if spec.fault in _TIMED else ""))
            record.injected_ms = now_ms()
            self._last_injected = time.monotonic()
            self._act(spec, target, record)
            record.detail = note + record.detail
        except Exception as e:  # a fault that could not be injected is recorded as such; the run goes on
            record.detail = f"failed: {type(e).__name__}: {e}"[:500]
            self.progress(f"Fault {fault_id} ({spec.fault.value}) failed: {e}")
            with self._taken_down_changed:  # a fault timed at its victim's return waits no longer
                self._taken_down.setdefault(fault_id, None)
                self._taken_down_changed.notify_all()
        self.writer.write(rundir.FAULTS, [record])
        self.faults_done += 1

    def _wait_for_recovery(self, timeout_s: float) -> dict[str, rundir.PartitionLeadership] | None:
        """Until `recovered` holds (the partition states it read then), or None after timeout_s."""
        deadline = time.monotonic() + timeout_s
        controller = self.config.controller
        imbalance = controller.leader_imbalance_per_broker_percentage if controller.auto_leader_rebalance_enable \
            else None
        while True:
            try:
                assignment = self._assignments()
                states = self._zk_leaderships()
                if recovered(assignment, states, set(self.zk.get_all_broker_ids()), imbalance, self._awaited):
                    return states
            except Exception as e:  # ZooKeeper busy for a moment: look again
                log.debug("Reading the cluster's state: %s", e)
            if time.monotonic() > deadline:
                return None
            time.sleep(0.5)

    def _act(self, spec: FaultSpec, target: int | None, record: FaultRecord) -> None:
        chaos, kind = self.chaos, spec.fault
        if kind in (FaultKind.KILL_BROKER, FaultKind.CONTROLLED_SHUTDOWN, *DISK_FAULTS):
            with self._lock:
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
                with self._lock:
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
                with self._lock:
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
        elif kind in LINK_FAULTS:
            record.target, settings, record.injected_ms = chaos.link_fault(kind, target, spec.slow)
            record.detail = f"{len(settings)} links"
            try:
                time.sleep(spec.seconds)
            finally:  # whatever happened, the links heal
                chaos.apply_links(healed(settings))
            record.ended_ms = now_ms()

    # -- observation ---------------------------------------------------------

    def _resident_memory(self, load_stats: list[dict], controller_id: int | None, status: dict) -> dict[str, float]:
        """MB per actor: the brokers that answer at once, the active controller, the load actors."""
        refs = {h.info.remote(): f"broker-{b}" for b, h in list(self.cluster.brokers.items())}  # chaos changes it
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=2) if refs else ([], [])
        out = {}
        for ref in ready:
            try:
                out[refs[ref]] = ray.get(ref)["rss_mb"]
            except Exception:  # a broker that died meanwhile: no figure this time
                pass
        if "rss_mb" in status:
            out[f"controller-{controller_id}"] = status["rss_mb"]
        return out | {s["name"]: s["rss_mb"] for s in load_stats if "rss_mb" in s}

    def _sample_loop(self) -> None:
        last_acked, last_ts = 0, time.monotonic()
        while not self._stop_sampling.wait(self.exp.sample_interval_s):
            try:
                self._sample(last_acked, last_ts)
                last_acked, last_ts = self.acked, time.monotonic()
            except Exception as e:  # ZooKeeper or an actor unavailable for a moment: the next sample
                log.debug("Sample skipped: %s", e)

    def _sample(self, last_acked: int, last_ts: float) -> None:
        stats = ray.get([g.stats.remote() for g in self.generators + self.probers + self.consumers], timeout=5)
        self.acked = sum(s.get("acked", 0) for s in stats[:len(self.generators)])  # the load's, probes apart
        self.consumed = sum(s.get("consumed", 0) for s in stats)
        self.rate = (self.acked - last_acked) / max(1e-3, time.monotonic() - last_ts)
        controller_id = self.zk.get_controller_id()
        epoch = self.zk.get_controller_epoch()
        status = {}
        if controller_id is not None:
            try:
                status = ray.get(self.cluster.controller_actor(controller_id).status.remote(timeout=2), timeout=3)
            except Exception:  # the controller is moving: its queues are unknown for this sample
                status = {}
        live = self.zk.get_all_broker_ids()
        ts = now_ms()
        self.controller = (controller_id, epoch[0] if epoch else None)
        self.live = live
        self.writer.write(rundir.LOAD, [rundir.LoadSample(
            ts_ms=ts, acked_total=self.acked, produce_rate=self.rate, consumed_total=self.consumed,
            inbox_depth=status.get("inbox_depth", 0), sender_queue_depths=status.get("sender_queue_depths", {}),
            brokers_alive=len(live), controller_id=controller_id, controller_epoch=self.controller[1],
            rss_mb=self._resident_memory(stats, controller_id, status))])
        self.writer.write(rundir.PARTITION_STATES, [rundir.StateSample(
            ts_ms=ts, live_brokers=live, partitions=self._zk_leaderships())])

    def _offsets_partition(self) -> TopicPartition:
        """The load group's partition of __consumer_offsets (made by the members' first FindCoordinator)."""
        topic = self.zk.get_topic_znodes([GROUP_METADATA_TOPIC]).get(GROUP_METADATA_TOPIC)
        if topic is None:
            raise RuntimeError(f"no {GROUP_METADATA_TOPIC} yet: the group has no coordinator")
        return TopicPartition(GROUP_METADATA_TOPIC, partition_for(self.exp.load.group, len(topic.partitions)))

    def _streamed(self) -> list[TopicPartition]:
        """The partitions under the load (not those of topics loaded once)."""
        idle = {t.name for t in self.exp.topics if t.load == "once"}
        return [tp for tp in self.partitions if tp.topic not in idle]

    def _assignments(self) -> dict[TopicPartition, list[int]]:
        """Every topic's (the load's, those the admin actions made)."""
        return {TopicPartition(name, p): replicas for name, topic in
                self.zk.get_topic_znodes(self.zk.get_all_topics()).items()
                for p, replicas in topic.assignment().items()}

    def _zk_leaderships(self, assignments: dict[TopicPartition, list[int]] | None = None
                        ) -> dict[str, rundir.PartitionLeadership]:
        return {tp_key(tp.topic, tp.partition): rundir.PartitionLeadership(
                    leader=r.state.leader, leader_epoch=r.state.leader_epoch, isr=sorted(r.state.isr))
                for tp, r in self.zk.get_partition_states(assignments or self._assignments()).items()}

    def _admin_state(self) -> dict:
        """What the admin actions' check reads at the end: every topic ZooKeeper knows of (its znode, its
        config, its deletion request), the pending reassignment and election."""
        marked = set(self.zk.children(zkdata.DELETE_TOPICS))
        names = sorted(self.zk.get_all_topics() | marked | set(self.zk.children(zkdata.CONFIG_TOPICS)))
        znodes = self.zk.get_topic_znodes(names)
        configs = self.zk.get_many(zkdata.topic_config_path(name) for name in names)
        topics = {}
        for name in names:
            got = configs[zkdata.topic_config_path(name)]
            config = zkdata.decode(zkdata.TopicConfigZNode, zkdata.topic_config_path(name), got[0]).config \
                if got and got[0] else {}
            topics[name] = rundir.TopicFinal(partitions=len(znodes[name].partitions) if name in znodes else 0,
                                             config=config, marked_for_deletion=name in marked)
        reassigning = self.zk.get_znode(zkdata.ReassignPartitionsZNode, zkdata.REASSIGN_PARTITIONS)
        return dict(topics=topics,
                    reassigning=[tp_key(p.topic, p.partition) for p in reassigning.partitions] if reassigning else [],
                    preferred_election_pending=self.zk.get(zkdata.PREFERRED_REPLICA_ELECTION) is not None)

    def _on_disk(self) -> dict[int, list[str]]:
        """Each broker's partitions with a log on its disks, asked of all at once."""
        with self._lock:
            handles = dict(self.cluster.brokers)
        refs = {broker_id: handle.partitions_on_disk.remote() for broker_id, handle in handles.items()}
        on_disk = {}
        for broker_id, ref in refs.items():
            try:
                on_disk[broker_id] = ray.get(ref, timeout=10)
            except Exception:  # not answering: its logs are not known (the checker names the brokers it has)
                continue
        return on_disk

    def _caches(self) -> dict[int, rundir.BrokerCache]:
        out = {}
        with self._lock:
            handles = dict(self.cluster.brokers)
        for broker_id, handle in handles.items():
            try:
                m = ray.get(handle.metadata.remote(), timeout=10)
            except Exception:  # not answering: absent from the final state, which the checker reports
                continue
            out[broker_id] = rundir.BrokerCache(
                controller_epoch=m["controller_epoch"], brokers=m["brokers"],
                partitions={tp_key(tp.topic, tp.partition): rundir.PartitionLeadership(
                    leader=v[0], leader_epoch=v[1], isr=sorted(v[2])) for tp, v in m["partitions"].items()})
        return out

    def _reading(self) -> tuple[rundir.FinalState, bool]:
        """ZooKeeper and every broker's cache, and whether they agree at one moment with every broker
        back, every partition fully replicated and no admin work (reassignment, election, deletion)
        pending: ZooKeeper is read before and after the caches and
        must not have changed meanwhile (leaders may still be moving: the auto leader rebalance goes on)."""
        assignments = self._assignments()
        live, before = self.zk.get_all_broker_ids(), self._zk_leaderships(assignments)
        caches = self._caches()
        after = self._zk_leaderships(assignments)
        final = rundir.FinalState(ts_ms=now_ms(), live_brokers=live, zookeeper=after, caches=caches, assignments={
            tp_key(tp.topic, tp.partition): replicas for tp, replicas in assignments.items()},
            **self._admin_state())
        agreed = before == after and live == self.exp.broker_ids and len(caches) == len(live) \
            and all(c.partitions == after and c.brokers == live for c in caches.values()) \
            and check_replication(final).count == 0 and not final.reassigning \
            and not final.preferred_election_pending and not any(t.marked_for_deletion for t in final.topics.values())
        return final, agreed

    def _progress_line(self, elapsed: float, faults: int) -> str:
        controller = getattr(self, "controller", (None, None))
        return (f"[{elapsed:6.1f}s/{self.exp.duration_s:.0f}s] acked {self.acked:,} ({self.rate:,.0f}/s), consumed "
                f"{self.consumed:,} | faults {self.faults_done}/{faults} | controller {controller[0]} "
                f"(epoch {controller[1]}) | brokers {len(getattr(self, 'live', []))}/{self.exp.brokers}")

    # -- the end -------------------------------------------------------------

    def _summarise(self, started: float) -> rundir.Summary:
        reader = JsonlReader(self.run_dir)
        faults = list(reader.lines(rundir.FAULTS, FaultRecord))
        samples = []  # every acknowledged record's (source, sent, latency), from the same read that indexes them
        given = self._given(reader)

        def acks():
            for ack in reader.lines(PRODUCED, Ack):
                samples.append((waits.source_of(ack.record_id), ack.sent_ms, ack.acked_ms - ack.sent_ms))
                if ack.record_id in given:
                    samples.append((rundir.Source.GROUP, ack.sent_ms, given[ack.record_id][1] - ack.sent_ms))
                yield ack
        records = failovers.compose(list(reader.lines(TIMELINES, TimelineRecord)), faults,
                                    list(reader.lines(rundir.LOAD, rundir.LoadSample)), self.exp.session_timeout_ms,
                                    self.exp.detector)
        self.writer.write(rundir.FAILOVERS, records)
        load_ended = getattr(self, "load_ended_ms", now_ms())
        measured = waits.partition_waits(
            faults, waits.deliveries_of(acks(), reader.lines(PRODUCE_ERRORS, ProduceError), given),
            list(reader.lines(rundir.PARTITION_STATES, rundir.StateSample)), self.exp.horizon_s * 1000, load_ended,
            final.assignments if (final := reader.document(rundir.FINAL_STATE, rundir.FinalState)) else None)
        measured = partition_phases.explain(measured, faults, records, reader.lines(BROKER_EVENTS, BrokerEvent))
        self.writer.write(rundir.WAITS, measured)
        offsets = getattr(self, "offsets_partition", None)
        if offsets is not None:
            self.writer.write(rundir.GROUP_FAILOVERS, group_failovers.compose(
                faults, list(reader.lines(rundir.PARTITION_STATES, rundir.StateSample)),
                reader.lines(BROKER_EVENTS, BrokerEvent), reader.lines(GROUP_COMMITS, GroupCommit), measured,
                self.exp.load.group, tp_key(offsets.topic, offsets.partition), self.exp.horizon_s * 1000,
                self.exp.detector))
        check = check_run(self.run_dir)
        away = waits.latency_away(samples, faults)
        latency = sorted(latency for source, _, latency in samples if source is rundir.Source.LOAD)
        summary = rundir.Summary(
            run_id=self.run_dir.name, experiment=self.exp.name, started_ms=started, ended_ms=now_ms(),
            faults=len(faults), failovers=len(records), acked=check.counts.get("acked", 0),
            consumed=check.counts.get("consumed_live", 0), load_ended_ms=load_ended,
            waits={source: waits.stats((w for w in measured if w.source is source and waits.touched(w)), away[source])
                   for source in rundir.Source},
            produce_latency_ms_p50=percentile(latency, 50), produce_latency_ms_p99=percentile(latency, 99),
            malformed_lines={**reader.malformed, **check.malformed_lines}, check=check)
        self.writer.document(rundir.SUMMARY, summary)
        self.writer.close()
        write_timeline(self.run_dir)
        return summary


    def _given(self, reader: JsonlReader) -> dict[str, tuple[str, float]]:
        """Each record the load's group was given: its partition and when a member was first given it."""
        out: dict[str, tuple[str, float]] = {}
        if not self.exp.load.group_members:
            return out
        for c in reader.lines(CONSUMED, Consumed):
            if c.group == self.exp.load.group and not c.final:
                at = out.get(c.record_id)
                if at is None or c.ts_ms < at[1]:
                    out[c.record_id] = (tp_key(c.topic, c.partition), c.ts_ms)
        return out


_TIMED = {FaultKind.KILL_BROKER, FaultKind.CONTROLLED_SHUTDOWN, FaultKind.PAUSE_BROKER, FaultKind.PAUSE_CONTROLLER,
          FaultKind.ZK_RESTART, FaultKind.FAIL_LOG_DIR, FaultKind.FLAKY_ZOOKEEPER, *LINK_FAULTS, *DISK_FAULTS}


def report(run_dir: Path) -> str:
    """What a run did, for people: its failovers phase by phase (the controller's part), what the client
    waited through each fault (recovery and worst wait, the load's and the probes'), and its summary
    with the invariant checks made when it ended (not made again: they read every record)."""
    reader = JsonlReader(run_dir)
    summary = reader.document(rundir.SUMMARY, rundir.Summary)
    faults = {f.fault_id: f for f in reader.lines(rundir.FAULTS, FaultRecord)}
    lines = [f"{'failover':<24}{'fault':<28}{'detect':>8}{'queue':>7}{'zk':>7}{'acked':>8}{'partitions':>11}"]

    def ms(a: float | None, b: float | None) -> str:
        return f"{a - b:.0f}" if a is not None and b is not None else "-"
    for f in reader.lines(rundir.FAILOVERS, rundir.FailoverRecord):
        fault = faults.get(f.fault_id)
        lines.append(f"{f.kind + ' ' + ','.join(map(str, f.brokers)):<24}{fault.label if fault else '(none)':<28}"
                     f"{ms(f.detected_ms, f.fault_injected_ms):>8}{ms(f.processing_started_ms, f.detected_ms):>7}"
                     f"{ms(f.zk_written_ms, f.processing_started_ms):>7}{ms(f.requests_acked_ms, f.detected_ms):>8}"
                     f"{f.load.partitions_affected:>11}")
    lines += ["", "What the client waited, per fault: the partitions it touched (led or followed by its broker, or "
              "all for a fault with no broker), and its bystanders' worst wait",
              f"{'fault':<28}{'source':<7}{'touched':>8}{'censored':>9}{'recovery p50/p99/max ms':>26}"
              f"{'worst wait p50/p99/max ms':>28}{'others p99/max':>16}"]
    measured = list(reader.lines(rundir.WAITS, rundir.PartitionWait))
    latency_p99 = {source: st.latency_away_ms_p99 for source, st in summary.waits.items()} if summary else {}
    for (fault_id, source), group in waits.by_fault(measured).items():
        fault = faults.get(fault_id)
        mine = waits.stats(w for w in group if waits.touched(w))
        others = waits.stats(w for w in group if not waits.touched(w))
        lines.append(f"{fault.label if fault else fault_id:<28}{source.value:<7}{mine.partitions:>8}{mine.censored:>9}"
                     f"{_three(mine.recovery_ms_p50, mine.recovery_ms_p99, mine.recovery_ms_max):>26}"
                     f"{_three(mine.worst_wait_ms_p50, mine.worst_wait_ms_p99, mine.worst_wait_ms_max):>28}"
                     f"{_fmt(others.worst_wait_ms_p99) + ' / ' + _fmt(others.worst_wait_ms_max):>16}")
    lines += ["", "Where the recovery went, per fault: each phase's mean ms over the partitions it touched "
              "(jobs/measures/partition_phases.py), the unexplained rest and its share of the recovery of the partitions "
              "that were unavailable (recovered, slower than the source's p99 latency away from the faults)"]
    short = PHASE_LABELS
    lines.append(f"{'fault':<28}{'source':<7}{'recovery':>9}" + "".join(f"{n:>7}" for n in short.values())
                 + f"{'rest':>8}{'share':>7}")
    for (fault_id, source), group in waits.by_fault(measured).items():
        mine = [w for w in group if waits.touched(w)]
        if not mine:
            continue
        fault = faults.get(fault_id)
        share = waits.unexplained_share(mine, latency_p99)
        lines.append(f"{fault.label if fault else fault_id:<28}{source.value:<7}"
                     f"{sum(w.recovery_ms for w in mine) / len(mine):>9.0f}"
                     + "".join(f"{sum(w.phases.get(p, 0.0) for w in mine) / len(mine):>7.0f}" for p in short)
                     + f"{sum(w.unexplained_ms or 0.0 for w in mine) / len(mine):>8.0f}"
                     + (f"{share:>7.0%}" if share is not None else f"{'-':>7}"))
    coordinators = list(reader.lines(rundir.GROUP_FAILOVERS, rundir.GroupFailoverRecord))
    if coordinators:
        lines += ["", "The consumer group's coordinator through each fault on its broker, ms after the fault "
                  "(jobs/measures/group_failovers.py): its offsets partition led again, the group loaded, FindCoordinator "
                  "answered, the members rejoined ('-' too when no rebalance was needed), a commit stored, the "
                  "first record sent after the fault consumed, every partition's",
                  f"{'fault':<28}{'group':<14}{'coordinator':>12}" + "".join(f"{n:>11}" for n in COORDINATOR_STEPS.values())]
        for g in coordinators:
            fault = faults.get(g.fault_id)
            moved = f"{g.coordinator}->{g.new_coordinator if g.new_coordinator is not None else '?'}"
            lines.append(f"{fault.label if fault else g.fault_id:<28}{g.group[:13]:<14}{moved:>12}" + "".join(
                f"{_fmt(None if getattr(g, step) is None else getattr(g, step) - g.fault_injected_ms):>11}"
                for step in COORDINATOR_STEPS))
    back = rejoin.of_run(reader, list(faults.values()), summary.ended_ms if summary else float("inf"))
    if back:
        lines += ["", "Back in the ISRs it left, per fault: from the broker's registration to the last leader's "
                  "expansion taking it back (jobs/measures/rejoin.py)",
                  f"{'fault':<28}{'broker':>7}{'left':>7}{'rejoined':>9}{'p50 ms':>8}{'all back ms':>12}"]
        for r in back:
            label = faults[r.fault_id].label
            p50 = percentile(r.rejoined_ms, 50)
            lines.append(f"{label:<28}{r.broker_id:>7}{r.out_of_isr:>7}{len(r.rejoined_ms):>9}{_fmt(p50):>8}"
                         f"{_fmt(r.last_ms) if r.all_back else 'not all':>12}")
    if summary is not None:
        lines.append(f"\n{summary.faults} faults, {summary.failovers} failovers, {summary.acked:,} records "
                     f"acknowledged, {summary.consumed:,} consumed live; produce latency p50 "
                     f"{_fmt(summary.produce_latency_ms_p50)} ms, p99 {_fmt(summary.produce_latency_ms_p99)} ms")
        for source, st in summary.waits.items():
            lines.append(f"{source.value}: {st.partitions:,} partition-faults touched, {st.censored} censored; recovery "
                         f"p50/p99/max {_three(st.recovery_ms_p50, st.recovery_ms_p99, st.recovery_ms_max)} ms; "
                         f"worst wait p50/p99/max {_three(st.worst_wait_ms_p50, st.worst_wait_ms_p99, st.worst_wait_ms_max)} ms")
        lines.append(summary.check.render())
    else:
        lines.append(f"\nNo readable {rundir.SUMMARY}: `kray check {run_dir}` checks the invariants")
    lines.append(f"Run directory: {run_dir}")
    if (run_dir / rundir.TIMELINE).exists():
        lines.append(f"Timeline: {run_dir / rundir.TIMELINE} (open it in a browser)")
    return "\n".join(lines)


def _three(*values: float | None) -> str:
    return " / ".join(map(_fmt, values))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
