"""Runs an Experiment: brings a cluster up, drives load through it, injects the scheduled faults,
records everything in a run directory (jobs/measures/rundir.py), reads every partition back, checks the
invariants (jobs/measures/check.py) and stops everything it started. Here the cluster and its load
come up and go down; the schedule (schedule.py), the samples (sampling.py), the waits for a settled
cluster with the read-back (settling.py) and the summary (summary.py) each have a module of their own.

It runs on the Ray cluster it finds (this process's Ray session, else RAY_ADDRESS) and the
ZooKeeper KRAY_ZK_CONNECT names, else on an embedded local ZooKeeper and Ray. Progress is printed
every few seconds.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np
import ray

from actors.clients.load import ConsumerWorker, GroupMember, LoadGenerator, Prober, now_ms
from actors.cluster import LocalCluster, listener_host
from actors.config import ClusterConfig
from actors.names import recorder_name
from actors.recording import RunRecorder
from actors.runtime import beside_this_actor
from actors.records import RunWriter
from coordination import admin
from coordination.zkdata import TopicPartition
from jobs.experiments.chaos import Chaos
from jobs.experiments.experiment import Experiment, LoadSpec, TopicSpec
from jobs.experiments.local import embedded_zookeeper_and_ray, fresh_chroot
from jobs.experiments.sampling import Sampler
from jobs.experiments.schedule import Scheduler
from jobs.experiments.settling import Settling
from jobs.experiments.summary import summarise
from jobs.measures import rundir
from jobs.measures.knee import KNEE_P99_MS, percentile

log = logging.getLogger(__name__)
STEADY_P99_MS = 2 * KNEE_P99_MS  # a fault waits for the load's p99 over the last second to be within this


def run_experiment(experiment: Experiment, runs_dir: str | Path = "runs", progress: Callable[[str], None] = print,
                   load_stopped: Callable[[], None] | None = None) -> tuple[Path, rundir.Summary]:
    """Run it on the environment found (see the module docstring); (its run directory, its summary).
    `load_stopped` is called once the faults and the load are over, before the cluster is left to
    converge and is read back (a sweep starts Spark then)."""
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{experiment.name}-{uuid.uuid4().hex[:4]}"
    run_dir = Path(runs_dir) / run_id
    with embedded_zookeeper_and_ray(progress) as env:
        return run_dir, ExperimentRun(experiment, run_dir, env.connect, env.zk_server, progress, load_stopped).run()


def client(actor_class):
    """A client actor's class, bound to the driver's node: outside every fault's reach (a host lost with
    a producer on it would take its acknowledgements along), as Jepsen's clients run on its control node."""
    return actor_class.options(scheduling_strategy=beside_this_actor())


def beside_the_load(config: ClusterConfig, load: LoadSpec, streamed: list[TopicPartition],
                    partitions: list[TopicPartition]) -> tuple[list, list, list]:
    """The actors an experiment's load has beside its producers, not started: consumers of every
    partition, a prober of `probe_partitions` spread evenly over the streamed ones, and the consumer
    group's members subscribed to the streamed topics."""
    consumers = [client(ConsumerWorker).remote(config, partitions[i::load.consumers], i) for i in range(load.consumers)]
    k = min(load.probe_partitions, len(streamed))
    probers = [client(Prober).remote(config, [streamed[i * len(streamed) // k] for i in range(k)],
                                     load.probe_interval_ms, load.record_size)] if k else []
    members = [client(GroupMember).remote(config, load.group, sorted({tp.topic for tp in streamed}), i,
                                          load.commit_interval_ms) for i in range(load.group_members)]
    return consumers, probers, members


def group_settled(assigned: list[list[str]], partitions: list[TopicPartition]) -> bool:
    """Whether the members' assignments ("topic-partition"s, one list per member) cover `partitions` as
    the group's assignor (librdkafka's default, range: each topic's partitions split among the members
    subscribed to it) gives them once every member is subscribed to every topic: each member holds a
    partition of each topic that has at least as many partitions as there are members. A member still
    on an older subscription holds none of the newer topics."""
    held = [{key.rsplit("-", 1)[0] for key in member} for member in assigned]
    counts = Counter(tp.topic for tp in partitions)
    return {f"{tp.topic}-{tp.partition}" for tp in partitions} <= {key for member in assigned for key in member} \
        and all(topic in topics for topics in held for topic, n in counts.items() if n >= len(assigned))


def await_group(members: list, partitions: list[TopicPartition], timeout_s: float) -> float | None:
    """Until every member has been given records and the assignment is the one every member's
    subscription gives (`group_settled`): the seconds it took, None after timeout_s."""
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        stats = ray.get([m.stats.remote() for m in members], timeout=10)
        if all(s["consumed"] for s in stats) and group_settled([s["assigned"] for s in stats], partitions):
            return time.monotonic() - began
        time.sleep(0.2)
    return None


class ExperimentRun:
    def __init__(self, experiment: Experiment, run_dir: Path, connect: str, zk_server, progress,
                 load_stopped: Callable[[], None] | None = None):
        self.exp, self.run_dir, self.progress, self.load_stopped = experiment, run_dir, progress, load_stopped
        namespace = f"run-{uuid.uuid4().hex[:8]}"
        self.config = ClusterConfig(
            zk_connect=fresh_chroot(connect, "kray-run"), namespace=namespace,
            zk_session_timeout_ms=experiment.session_timeout_ms, recorder=recorder_name(run_dir.name),
            host=listener_host(), link_faults_enable=experiment.link_faults,
            broker=experiment.broker.model_copy(update={"log_dirs": str(run_dir / "logs")}),
            controller=experiment.controller.model_copy(update={"ray_failure_detector_enable": experiment.detector}))
        self.zk_server = zk_server
        self.writer = RunWriter(run_dir)
        self._lock = threading.Lock()  # the cluster's broker handles change under fault threads

    def run(self) -> rundir.Summary:
        exp = self.exp
        started = now_ms()
        self.writer.document(rundir.EXPERIMENT, exp)
        # on this node: it writes the run directory, which the driver reads (a recorder on another node of
        # a cluster wrote its records to that node's disk, and the run's check found nothing to check)
        self.recorder = RunRecorder.options(name=self.config.recorder, namespace=self.config.namespace,
                                            scheduling_strategy=beside_this_actor()).remote(str(self.run_dir))
        self.zk = self.config.zk_client().start()
        self.cluster = LocalCluster(self.config, exp.broker_ids)
        self.settling = Settling(exp, self.config, self.zk, self.cluster, self._lock, self.writer, self.recorder,
                                 self.progress)
        self.sampler = Sampler(exp, self.zk, self.cluster, self.writer,
                               lambda: (self.generators, self.probers + self.consumers))
        chaos = Chaos(self.cluster, self.zk, self.zk_server)
        scheduler = Scheduler(exp, self.zk, self.cluster, chaos, self._lock,
                              self.writer, self.settling, self.sampler, self._grow, self.progress, self._steady_load)
        try:
            self._start()
            scheduler.drive()
            self._finish()
        finally:
            self.sampler.stop()
            chaos.restore_hosts()  # a run cut short leaves no host partitioned or off
            self.cluster.stop(delete_logs=True)
            self.zk.close()
            try:  # a run cut short keeps the records its recorder holds (closing twice is harmless)
                ray.get(self.recorder.close.remote(), timeout=30)
            except ray.exceptions.RayError as e:
                log.warning("The run's recorder did not close: %s", e)
            ray.kill(self.recorder)
        self.writer.close()
        return summarise(self.run_dir, exp, started, self.load_ended_ms, self.offsets_partition)

    def _start(self) -> None:
        exp = self.exp
        self.progress(f"Starting {exp.brokers} brokers (session timeout {exp.session_timeout_ms} ms, "
                      f"Ray failure detector {'on' if exp.detector else 'off'})")
        self.cluster.start()
        controller, epoch = self.cluster.wait_until_ready(self.zk)
        first = [t for t in exp.topics if not t.after_fault]  # the others are created during the run (_grow)
        for t in first:
            admin.create_topic(self.zk, t.name, t.partitions, t.replication_factor)
        self.created = sum(t.partitions for t in first)
        self.partitions = written(first)
        self.cluster.wait_for_metadata(lambda m: len(m["partitions"]) >= self.created,
                                       timeout=creation_timeout_s(self.created))
        self.progress(f"Controller is broker {controller} (epoch {epoch}); {self.created:,} partitions online")
        load = exp.load
        n = load.producers
        streamed = self._streamed()
        self._first_partitions = len(streamed)  # the load's rate is for these
        self.generators = [client(LoadGenerator).remote(i, self.config, streamed[i::n], load.rate / n if n else 0,
                                                        load.record_size, load.acks_code, load.records_per_partition)
                           for i in range(n)]
        once = sorted(set(self.partitions) - set(streamed))
        if once and n:  # idle partitions among busy ones: their records once, at the start
            self.generators.append(client(LoadGenerator).remote(n, self.config, once, load.rate / n,
                                                                load.record_size, load.acks_code,
                                                                load.records_per_partition, once=True))
        self.consumers, self.probers, self.members = beside_the_load(self.config, load, streamed, self.partitions)
        self.consumers = self.consumers + self.members
        ray.get([a.start.remote() for a in self.generators + self.probers + self.consumers], timeout=60)
        if self.members and self.generators:
            self._await_group()
        self.sampler.start()

    def _await_group(self, timeout_s: float = 60) -> None:
        """Until every member of the group has been given records (its first rebalance waits for
        group.initial.rebalance.delay.ms) and the members' assignments cover every streamed partition, so
        that the schedule's next fault finds the group consuming all of them. After a topic is added the
        members rejoin one by one, each as its own metadata shows the topic (eager: a member stops
        fetching until its rejoin completes); a kill of the coordinator amid those rejoins left a member
        with nothing to fetch until the group settled on a third coordinator, past the horizon. So the
        assignment must be the one every member's new subscription gives (`group_settled`): the others'
        rejoins can complete a generation that covers every partition while one member, not yet
        subscribed to the new topic, holds only old ones and rejoins once more later."""
        streamed = self._streamed()
        took = await_group(self.members, streamed, timeout_s)
        if took is not None:
            self.progress(f"Group {self.exp.load.group}: {len(self.members)} members consuming "
                          f"{len(streamed):,} partitions after {took:.1f} s")
            return
        self.progress(f"Group {self.exp.load.group}: not every member consuming, or not every partition assigned "
                      f"as every member's subscription gives, after {timeout_s:.0f} s; going on")

    def _steady_load(self, timeout_s: float) -> str:
        """Until the open-loop load's p99 latency over the last second is within STEADY_P99_MS, so that a
        fault meets the load at its offered rate rather than a queue (a topic just added, with its first
        writes, or the last fault's backlog still draining): what it found, for the fault's record. A
        streaming (closed-loop) load has no rate to settle at: nothing to wait for."""
        generators = self.generators[:self.exp.load.producers]  # not the one writing idle partitions once
        if self.exp.load.rate <= 0 or not generators:
            return ""
        began = time.monotonic()
        while True:
            recent = ray.get([g.recent_latencies_ms.remote(1.0) for g in generators], timeout=10)
            # a generator acknowledged nothing in the second: not steady
            p99 = None if any(len(r) == 0 for r in recent) else max(percentile(np.sort(r), 0.99) for r in recent)
            waited = time.monotonic() - began
            if p99 is not None and p99 <= STEADY_P99_MS:
                if waited >= 1:
                    self.progress(f"The load is steady again after {waited:.1f} s (p99 {p99:.0f} ms over the last second)")
                return f"the load steady (p99 {p99:.0f} ms over the last second) after {waited:.1f} s; "
            if waited > timeout_s:
                self.progress(f"The load is not steady after {timeout_s:g} s (p99 {p99} ms over the last second); "
                              f"injecting anyway")
                return f"injected with the load not steady after {timeout_s:g} s (p99 {p99} ms); "
            time.sleep(0.25)

    def _grow(self, done: int, timeout_s: float) -> None:
        """Create the topics due once `done` faults are done (after_fault), as soon as every broker is
        registered again (their replicas go to all of them; the creation overlaps the last victim's
        catch-up, and the next fault still waits for the whole cluster to recover), and hand their
        partitions to the running producers (the same rate per partition) and to consumers of their
        own; return once every partition has an acknowledged record and the consumer group is assigned
        them too, so that the next fault's unavailability covers them all."""
        topics = [t for t in self.exp.topics if done and t.after_fault == done]
        if not topics:
            return
        names = ", ".join(t.name for t in topics)
        deadline = time.monotonic() + timeout_s
        while set(self.exp.broker_ids) - set(self.zk.get_all_broker_ids()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for t in topics:
            admin.create_topic(self.zk, t.name, t.partitions, t.replication_factor)
        count = sum(t.partitions for t in topics)
        self.created += count
        self.cluster.wait_for_metadata(lambda m: len(m["partitions"]) >= self.created,
                                       timeout=creation_timeout_s(count))
        new = written(topics)
        total = len(self.partitions) + len(new)
        self.partitions = self.partitions + new  # sampled, awaited and read back from now on
        if new:
            self._load_new(topics, new, total, time.monotonic() + timeout_s)
        self.progress(f"Topic {names} created after fault {done}: {count:,} partitions more, {self.created:,} in "
                      f"all, {total:,} written")

    def _load_new(self, topics: list[TopicSpec], new: list[TopicPartition], total: int, deadline: float) -> None:
        """Hand `new` to the producers and to consumers of their own, and the streamed topics to the group;
        until every one of the `total` written partitions has an acknowledged record and the group is
        assigned them too (deadline: time.monotonic()'s)."""
        load, n, c = self.exp.load, self.exp.load.producers, self.exp.load.consumers
        rate = load.rate * len(self._streamed()) / self._first_partitions / n if n else 0
        ray.get([g.add_partitions.remote(new[i::n], rate) for i, g in enumerate(self.generators[:n])], timeout=60)
        consumers = [client(ConsumerWorker).remote(self.config, new[i::c], len(self.consumers) + i) for i in range(c)]
        ray.get([w.start.remote() for w in consumers] +
                [m.subscribe.remote([t.name for t in topics if t.load == "stream"]) for m in self.members], timeout=60)
        self.consumers = self.consumers + consumers
        while n and time.monotonic() < deadline and sum(
                s["partitions_acked"] for s in ray.get([g.stats.remote() for g in self.generators], timeout=10)) < total:
            time.sleep(0.2)
        if self.members and n:
            self._await_group(max(1.0, deadline - time.monotonic()))

    def _finish(self) -> None:
        self.progress("Load stopped; waiting for the cluster to converge")
        self.load_ended_ms = now_ms()
        ray.get([g.stop.remote() for g in self.generators + self.probers], timeout=300)
        ray.get([c.stop.remote() for c in self.consumers], timeout=60)
        if self.load_stopped is not None:
            self.load_stopped()
        state = self.settling.converge()
        self.sampler.stop()
        self.settling.record_final_state(state)
        self.offsets_partition = self.settling.read_back_all(self.partitions, bool(self.members))
        time.sleep(1.0)  # the actors' record sinks flush every 0.2 s
        ray.get(self.recorder.close.remote())

    def _streamed(self) -> list[TopicPartition]:
        """The partitions under the load (not those of topics loaded once)."""
        once = {t.name for t in self.exp.topics if t.load == "once"}
        return [tp for tp in self.partitions if tp.topic not in once]


def written(topics: list[TopicSpec]) -> list[TopicPartition]:
    """The partitions of `topics` the run writes (sampled, awaited and read back): not an idle topic's."""
    return [TopicPartition(t.name, p) for t in topics if t.load != "idle" for p in range(t.partitions)]


def creation_timeout_s(partitions: int) -> float:
    """How long new partitions may take to be online: 2 minutes, and a second per 500 partitions more
    (100,000 took 48-238 s on a 2-core host, BENCHMARKS.md)."""
    return max(120.0, partitions / 500)
