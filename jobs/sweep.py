"""A sweep: a grid of chaos experiments varying the load, each with repeated broker kills, then the
Spark analysis over all of them.

    python -m jobs.sweep [SWEEP.yaml | --full] [--runs-dir DIR]

Without a file it runs the quick sweep (QUICK, what `make demo` runs, under 5 minutes on a 2-core
machine): the cluster's capacity at 1,000 partitions measured first, then one experiment per detector
setting whose load grows from 60 to 300 to 1,000 partitions at half that capacity, a broker kill at
each count, and a consumer group of three reading the load (the second kill is of its coordinator's
broker). `--full` runs the full grid (`Sweep()`: an experiment per partition count and
detector setting, six kills each; about 10 minutes there).

A sweep file is YAML; unknown fields and impossible values are errors that name the field:

    name: partitions-and-detector
    partitions: [100, 500, 2000]     # one topic, replication factor 3
    rates: [0]                       # records/s; 0 streams (every partition has a batch in flight)
    load_fractions: [0.25, 0.5]      # and open-loop loads at these fractions of the knee: the highest rate
                                     # the cluster serves with p99 <= 50 ms, measured at the sweep's start
                                     # for each partition count (the largest, with grow_partitions)
    capacity: {start_rate: 500, max_rate: 1024000, warm_s: 2, window_s: 4, bisect: 1}   # how it is measured
    brokers: [3]
    detector: [true, false]
    session_timeout_ms: 2000
    kills: 6                         # broker kills per experiment, back after down_s: a non-controller,
                                     # every second one the consumer group's coordinator
                                     # (unless it is the controller's broker)
    group_members: 3                 # a consumer group beside the load (0: none)
    broker: {}                       # broker settings for every experiment (BrokerConfig's names), over
                                     # min_insync_replicas 2
    down_s: 2
    spacing_s: 6                     # seconds between kills (more is added with the detector off);
                                     # a kill also waits until the cluster has recovered from the last
    horizon_s: 30                    # how long after each kill the client's waits are observed
    grow_partitions: false           # true: one experiment per (brokers, rate, detector) whose load
                                     # grows through the partition counts (a topic added for each next
                                     # count, once every broker is back), `kills` at each count
    grown_load: stream               # with grow_partitions, the added topics' load: stream (the first
                                     # count's rate per partition) or idle (never written: the cluster
                                     # grows while the load stays on the first count's partitions)

Every experiment of the grid runs on one ZooKeeper and one Ray (the embedded local default, or the
cluster found: see jobs/experiments/runner.py), one after the other, into RUNS_DIR/<sweep run id>/; the
analysis then reads them all and writes RUNS_DIR/<sweep run id>/analysis/. The capacities measured
are in RUNS_DIR/<sweep run id>/capacity.json, and each experiment's knee and fraction in its
experiment.json (load.knee_per_s, load.knee_fraction).
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coordination.errors import KrayError
from jobs.measures.knee import KNEE_P99_MS, STOP_P99_MS, Capacity
from jobs.experiments.experiment import Experiment, FaultSpec, Spec
from jobs.measures.rundir import FaultKind
from jobs.reports.spark import SparkSettings, add_spark_arguments, settings_from


class CapacitySettings(Spec):
    """How a sweep measures the knee (jobs/experiments/capacity.py): rates doubling from `start_rate` up to
    `max_rate` (the knee is then at least that), each offered `warm_s` then measured over `window_s`, then
    `bisect` bisections."""

    start_rate: float = Field(500, gt=0)
    max_rate: float = Field(1_024_000, gt=0)
    warm_s: float = Field(2, ge=0)
    window_s: float = Field(4, gt=0)
    bisect: int = Field(1, ge=0)

    @model_validator(mode="after")
    def _a_rate_to_try(self) -> "CapacitySettings":
        if self.max_rate < self.start_rate:
            raise ValueError(f"max_rate ({self.max_rate:g}) is below start_rate ({self.start_rate:g})")
        return self


class Sweep(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("sweep", pattern=r"^[A-Za-z0-9._-]{1,24}$")
    partitions: list[int] = Field([60, 300, 1000], min_length=1)
    rates: list[float] = Field([0], description="records/s, open loop; 0 streams (closed loop)")
    load_fractions: list[float] = Field(default_factory=list, description="open-loop loads as fractions of the "
                                        "knee measured at the sweep's start (at each partition count, or the largest "
                                        "with grow_partitions), beside `rates`")
    capacity: CapacitySettings = Field(default_factory=CapacitySettings)
    brokers: list[int] = Field([3], min_length=1)
    detector: list[bool] = Field([True, False], min_length=1)
    session_timeout_ms: int = Field(2000, ge=1000)
    replication_factor: int = Field(3, ge=1)
    kills: int = Field(6, ge=1)
    broker: dict[str, Any] = Field(default_factory=dict, description="broker settings of every experiment "
                                   "(BrokerConfig's fields), over min_insync_replicas 2 (or the replication factor)")
    group_members: int = Field(3, ge=0, description="members of a consumer group beside the load: the group is "
                               "measured as a source of its own and every second kill is of its coordinator's "
                               "broker (0: no group, every kill a non-controller)")
    down_s: float = Field(2.0, gt=0)
    spacing_s: float = Field(6.0, gt=0)
    settle_s: float = Field(30.0, ge=0)
    horizon_s: float = Field(30.0, gt=0, description="how long after each kill the client's waits are observed "
                             "(the load runs at least this long after the last kill)")
    seed: int = 1
    grow_partitions: bool = Field(False, description="one experiment per (brokers, rate, detector) instead of one "
                                  "per partition count: it starts with the smallest count's topic and adds a topic "
                                  "before each next count's kills, so that the partitions under load (and those a "
                                  "kill affects) reach it; `kills` at each count. One cluster start and one "
                                  "read-back for all the counts")
    grown_load: Literal["stream", "idle"] = Field(
        "stream", description="with grow_partitions, the load of each next count's topic: stream (the first "
        "count's rate per partition, so the load grows with the count) or idle (created and never written: the "
        "cluster's partitions grow, to 100,000 on one host, while the load and its probes stay on the first "
        "count's; a kill still takes the leader of a third of them all and a follower of the rest)")

    @model_validator(mode="after")
    def _possible(self) -> "Sweep":
        if any(p < 1 for p in self.partitions) or any(r < 0 for r in self.rates):
            raise ValueError("partitions must be >= 1 and rates >= 0")
        if not self.rates and not self.load_fractions:
            raise ValueError("no load: give rates, load_fractions or both")
        if any(not 0 < f <= 2 for f in self.load_fractions):
            raise ValueError("load_fractions must be above 0 and at most 2 (twice the knee)")
        if min(self.brokers) < self.replication_factor:
            raise ValueError(f"replication factor {self.replication_factor} larger than {min(self.brokers)} brokers")
        if self.grown_load == "idle" and not self.grow_partitions:
            raise ValueError("grown_load: idle is the load of the topics a growing sweep adds (grow_partitions: true)")
        if self.spacing_s <= self.down_s:
            raise ValueError(f"spacing_s ({self.spacing_s}) must be longer than down_s ({self.down_s})")
        try:
            self.experiments()  # every experiment of the grid must be possible too
        except ValidationError as e:
            first = e.errors()[0]
            raise ValueError(f"an experiment of this grid is impossible: {'.'.join(map(str, first['loc']))}: "
                             f"{first['msg']}") from None
        return self

    def knee_counts(self) -> list[int]:
        """The partition counts whose knee the load fractions need: each, or the largest when growing."""
        if not self.load_fractions:
            return []
        counts = sorted(set(self.partitions))
        if not self.grow_partitions:
            return counts
        return counts[:1] if self.grown_load == "idle" else counts[-1:]  # where the whole load is

    def experiments(self, knees: dict[int, float] | None = None) -> list[Experiment]:
        """The grid, smallest load first. `knees`: records/s per partition count (knee_counts), for the load
        fractions; without them (a grid checked before its capacity is measured) a knee of 1,000/s."""
        counts = sorted(set(self.partitions))
        stages = [counts] if self.grow_partitions else [[p] for p in counts]
        loads = [(rate, None) for rate in sorted(self.rates)] + [(None, f) for f in sorted(self.load_fractions)]
        out = []
        for brokers, stage, (rate, fraction), detector in itertools.product(sorted(self.brokers), stages, loads,
                                                                            self.detector):
            load = {"rate": rate}
            if fraction is not None:  # the knee is the whole load's (at the last count, unless the growth is idle);
                # the rate is the first topic's
                whole = stage[0] if self.grown_load == "idle" else stage[-1]
                knee = (knees or {}).get(whole, 1000.0)
                load = {"rate": fraction * knee * stage[0] / whole, "knee_per_s": knee, "knee_fraction": fraction}
            # without the detector a dead broker is found when its session expires: leave time for that
            spacing = self.spacing_s + (0 if detector else self.session_timeout_ms / 1000)
            kills = self.kills * len(stage)
            out.append(Experiment(
                name=f"{self.name}-b{brokers}-p{'.'.join(map(str, stage))}-"
                     f"{f'r{round(rate)}' if fraction is None else f'f{round(fraction * 100)}'}-"
                     f"{'ray' if detector else 'zk'}",
                brokers=brokers, session_timeout_ms=self.session_timeout_ms, detector=detector,
                broker={"min_insync_replicas": min(2, self.replication_factor), **self.broker},
                controller={"leader_imbalance_check_interval_seconds": max(1, int(spacing / 2))},
                topics=self._topics(stage),
                load={"producers": 1, **load, "acks": "all", "consumers": 0, "group_members": self.group_members},
                schedule=[FaultSpec(at_s=3 + i * spacing, fault=FaultKind.KILL_BROKER, target=self._target(i),
                                    seconds=self.down_s, after_recovery=True) for i in range(kills)],
                duration_s=3 + kills * spacing, settle_s=self.settle_s, horizon_s=self.horizon_s, seed=self.seed))
        return out

    def _target(self, kill: int) -> str:
        """A non-controller broker; with a group, every second kill its coordinator's broker, unless the
        controller is there too (the sweep's kills leave the controller where it is: then a non-controller)."""
        return "coordinator-unless-controller" if self.group_members and kill % 2 else "non-controller"

    def _topics(self, stage: list[int]) -> list[dict]:
        """Topic `load` of the first count's partitions; with more counts (grow_partitions), a topic
        `load<i>` per next count, created after the kills of the counts before, making up the difference."""
        return [{"name": "load" if i == 0 else f"load{i + 1}", "partitions": count - (stage[i - 1] if i else 0),
                 "replication_factor": self.replication_factor, "after_fault": i * self.kills,
                 "load": self.grown_load if i else "stream"}
                for i, count in enumerate(stage)]


# make demo's: the detector on and off, 60 to 1,000 partitions at half the knee measured at 1,000; each kill's
# waits observed 15 s (a kill waits for the cluster to recover from the one before, so only the last kill's adds
# to the run)
QUICK = Sweep(grow_partitions=True, kills=1, horizon_s=15, rates=[], load_fractions=[0.5],
              capacity={"start_rate": 1000, "warm_s": 1, "window_s": 3, "bisect": 2})


CAPACITY = "capacity.json"  # in the sweep's directory: the capacities measured (Capacity, one per count)


def load_sweep(path: str | Path) -> Sweep:
    path = Path(path)
    try:
        return Sweep.model_validate(yaml.safe_load(path.read_text()) or {})
    except OSError as e:
        raise KrayError(f"cannot read sweep file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise KrayError(f"{path} is not valid YAML: {e}") from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the file"
        raise KrayError(f"{path}: {where}: {first['msg']}") from None


def flushed(line: str) -> None:
    print(line, flush=True)


def run_sweep(sweep: Sweep, runs_dir: str | Path, spark: SparkSettings | None = None,
              progress: Callable[[str], None] = flushed):
    """Run every experiment, then the analysis; (the sweep's directory, the Analysis)."""
    from jobs.analysis import analyse
    from jobs.experiments.local import embedded_zookeeper_and_ray
    from jobs.experiments.runner import run_experiment
    from jobs.experiments.schedule import load_length_s, schedule
    from jobs.reports.spark import spark_on_ray

    sweep_dir = Path(runs_dir) / f"{time.strftime('%Y%m%d-%H%M%S')}-{sweep.name}"
    started = time.monotonic()

    def step(line: str) -> None:
        progress(f"[{time.monotonic() - started:5.0f}s] {line}")

    # every experiment joins this ZooKeeper and this Ray; Spark starts once the last one's load has stopped
    with embedded_zookeeper_and_ray(step) as env, contextlib.ExitStack() as stack:
        spark_session: Future = Future()
        starting: list[threading.Thread] = []

        def start_spark() -> None:  # in the background: the last run converges, is read back and checked meanwhile
            if not starting and not spark_session.done():
                step("  Starting Spark on Ray (RayDP) in the background")
                starting.append(threading.Thread(target=_enter, args=(stack, spark_on_ray(spark), spark_session),
                                                 name="spark-start", daemon=True))
                starting[0].start()
        try:
            capacities = [measure(sweep, count, env.connect, step) for count in sweep.knee_counts()]
            if capacities:
                sweep_dir.mkdir(parents=True, exist_ok=True)
                (sweep_dir / CAPACITY).write_text(json.dumps([c.model_dump() for c in capacities], indent=1))
            experiments = sweep.experiments({c.partitions: c.knee_per_s for c in capacities})
            for i, experiment in enumerate(experiments, 1):
                counts = list(itertools.accumulate(t.partitions for t in experiment.topics))
                load_s = load_length_s(experiment, schedule(experiment, random.Random(experiment.seed)))  # the run's
                step(f"Experiment {i}/{len(experiments)}: {experiment.name} ({offered(experiment)}, "
                     f"at least {round(load_s, 1):g} s of load, "
                     f"{len(experiment.schedule)} broker kills" +
                     (f", a group of {experiment.load.group_members}" if experiment.load.group_members else "") +
                     (f"; partitions {' -> '.join(f'{c:,}' for c in counts)})" if len(counts) > 1 else ")"))
                run_dir, summary = run_experiment(experiment, sweep_dir, progress=lambda line: step("  " + line),
                                                  load_stopped=start_spark if i == len(experiments) else None)
                broken = {k: v for k, v in summary.check.invariants.items() if v}
                step(f"  {run_dir.name}: {summary.failovers} failovers" +
                     (f"; INVARIANTS BROKEN: {broken}" if broken else "; every invariant holds"))
            start_spark()  # unless the last run did
            session = spark_session.result()
        finally:
            for thread in starting:  # Spark is stopped (the stack closes) only once its start has ended
                thread.join()
        step("Spark is up; analysing")
        result = analyse(session, [sweep_dir], sweep_dir / "analysis", progress=step)
    return sweep_dir, result


def measure(sweep: Sweep, partitions: int, connect: str, step: Callable[[str], None]) -> Capacity:
    """The knee at `partitions` on a cluster of the first experiment's shape (the fewest brokers), said as it
    is measured; a knee not found is an error (the sweep cannot place its loads)."""
    from jobs.experiments.capacity import measure_capacity

    step(f"Measuring the cluster's capacity at {partitions:,} partitions: open-loop rates doubling from "
         f"{sweep.capacity.start_rate:,.0f}/s until one is not served or its p99 passes {STOP_P99_MS:g} ms, then "
         f"bisected; the knee is the highest served with p99 <= {KNEE_P99_MS:g} ms")
    capacity = measure_capacity(connect, sweep.experiments()[0], partitions, **sweep.capacity.model_dump(),
                                progress=lambda line: step("  " + line))
    if capacity.knee_per_s is None:
        raise KrayError(f"no knee at {partitions:,} partitions: not even {min(r['rate'] for r in capacity.rows):,.0f} "
                        f"records/s was served with p99 <= {KNEE_P99_MS:g} ms")
    step(f"  Knee at {partitions:,} partitions: {capacity.knee_per_s:,.0f} records/s"
         + (f" (at least: the {capacity.limited_by} was the limit)" if capacity.limited_by != "cluster" else "")
         + f", measured in {capacity.seconds:.0f} s; the loads: "
         + ", ".join(f"{f:.0%} = {f * capacity.knee_per_s:,.0f}/s" for f in sorted(sweep.load_fractions)))
    return capacity


def offered(experiment: Experiment) -> str:
    """The experiment's load in words: its rate, and where it stands against the knee."""
    load = experiment.load
    if load.knee_fraction is None:
        return "streaming, closed loop" if load.rate == 0 else f"{load.rate:,.0f} records/s offered"
    total = load.knee_fraction * load.knee_per_s
    below = "below" if load.knee_fraction < 1 else "at or above"
    return f"{total:,.0f} records/s offered at the last count: {load.knee_fraction:.0%} of the knee, {below} it"


def _enter(stack: contextlib.ExitStack, context, future: Future) -> None:
    """Enter `context` on `stack` (left when the stack closes), its value or its error into `future`."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(stack.enter_context(context))
    except BaseException as e:
        future.set_exception(e)


def sweep_of(file: str | None, full: bool) -> Sweep:
    """The sweep a command line asks for: its file's, the full grid, else the quick one."""
    return load_sweep(file) if file else Sweep() if full else QUICK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kray sweep", description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("file", nargs="?", help="a sweep YAML file (default: the quick sweep)")
    which.add_argument("--full", action="store_true", help="the full grid: a cluster per partition count and "
                       "detector setting, 6 kills each (about 10 minutes on 2 cores)")
    parser.add_argument("--runs-dir", default="runs")
    add_spark_arguments(parser)
    args = parser.parse_args(argv)
    from jobs.reports.report import summary_table

    try:
        sweep = sweep_of(args.file, args.full)
        sweep_dir, result = run_sweep(sweep, args.runs_dir, settings_from(args))
    except KrayError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    print()
    print(summary_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
