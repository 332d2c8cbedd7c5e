"""A sweep: a grid of chaos experiments varying the load, each with repeated broker kills, then the
Spark analysis over all of them.

    python -m jobs.sweep [SWEEP.yaml | --full] [--runs-dir DIR]

Without a file it runs the quick sweep (QUICK, what `make demo` runs, under 5 minutes on a 2-core
machine): one experiment per detector setting whose load grows from 60 to 300 to 1,000 partitions,
a broker kill at each, and a consumer group of three reading the load (the second kill is of its
coordinator's broker). `--full` runs the full grid (`Sweep()`: an experiment per partition count and
detector setting, six kills each; about 10 minutes there).

A sweep file is YAML; unknown fields and impossible values are errors that name the field:

    name: partitions-and-detector
    partitions: [100, 500, 2000]     # one topic, replication factor 3
    rates: [0]                       # records/s; 0 streams (every partition has a batch in flight)
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

Every experiment of the grid runs on one ZooKeeper and one Ray (the embedded local default, or the
cluster found: see jobs/experiments/runner.py), one after the other, into RUNS_DIR/<sweep run id>/; the
analysis then reads them all and writes RUNS_DIR/<sweep run id>/analysis/.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coordination.errors import KrayError
from jobs.experiments.experiment import Experiment, FaultSpec
from jobs.measures.rundir import FaultKind
from jobs.reports.spark import SparkSettings, add_spark_arguments, settings_from


class Sweep(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("sweep", pattern=r"^[A-Za-z0-9._-]{1,24}$")
    partitions: list[int] = Field([60, 300, 1000], min_length=1)
    rates: list[float] = Field([0], min_length=1)
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

    @model_validator(mode="after")
    def _possible(self) -> "Sweep":
        if any(p < 1 for p in self.partitions) or any(r < 0 for r in self.rates):
            raise ValueError("partitions must be >= 1 and rates >= 0")
        if min(self.brokers) < self.replication_factor:
            raise ValueError(f"replication factor {self.replication_factor} larger than {min(self.brokers)} brokers")
        if self.spacing_s <= self.down_s:
            raise ValueError(f"spacing_s ({self.spacing_s}) must be longer than down_s ({self.down_s})")
        try:
            self.experiments()  # every experiment of the grid must be possible too
        except ValidationError as e:
            first = e.errors()[0]
            raise ValueError(f"an experiment of this grid is impossible: {'.'.join(map(str, first['loc']))}: "
                             f"{first['msg']}") from None
        return self

    def experiments(self) -> list[Experiment]:
        """The grid, smallest load first."""
        counts = sorted(set(self.partitions))
        stages = [counts] if self.grow_partitions else [[p] for p in counts]
        out = []
        for brokers, stage, rate, detector in itertools.product(sorted(self.brokers), stages, sorted(self.rates),
                                                                self.detector):
            # without the detector a dead broker is found when its session expires: leave time for that
            spacing = self.spacing_s + (0 if detector else self.session_timeout_ms / 1000)
            kills = self.kills * len(stage)
            out.append(Experiment(
                name=f"{self.name}-b{brokers}-p{'.'.join(map(str, stage))}-r{round(rate)}-"
                     f"{'ray' if detector else 'zk'}",
                brokers=brokers, session_timeout_ms=self.session_timeout_ms, detector=detector,
                broker={"min_insync_replicas": min(2, self.replication_factor), **self.broker},
                controller={"leader_imbalance_check_interval_seconds": max(1, int(spacing / 2))},
                topics=self._topics(stage),
                load={"producers": 1, "rate": rate, "acks": "all", "consumers": 0, "group_members": self.group_members},
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
                 "replication_factor": self.replication_factor, "after_fault": i * self.kills}
                for i, count in enumerate(stage)]


# make demo's: the detector on and off, 60 to 1,000 partitions; each kill's waits observed 15 s (a kill waits
# for the cluster to recover from the one before, so only the last kill's adds to the run)
QUICK = Sweep(grow_partitions=True, kills=1, horizon_s=15)


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
              progress: Callable[[str], None] = flushed, session=None):
    """Run every experiment, then the analysis; (the sweep's directory, the Analysis). `session`: a
    SparkSession already up to analyse with (the tests share one per run) instead of starting one."""
    from jobs.analysis import analyse
    from jobs.experiments.local import embedded_zookeeper_and_ray
    from jobs.experiments.runner import run_experiment
    from jobs.experiments.schedule import load_length_s, schedule
    from jobs.reports.spark import spark_on_ray

    sweep_dir = Path(runs_dir) / f"{time.strftime('%Y%m%d-%H%M%S')}-{sweep.name}"
    experiments = sweep.experiments()
    started = time.monotonic()

    def step(line: str) -> None:
        progress(f"[{time.monotonic() - started:5.0f}s] {line}")

    # every experiment joins this ZooKeeper and this Ray; Spark starts once the last one's load has stopped
    with embedded_zookeeper_and_ray(step), contextlib.ExitStack() as stack:
        spark_session: Future = Future()
        starting: list[threading.Thread] = []
        if session is not None:
            spark_session.set_result(session)

        def start_spark() -> None:  # in the background: the last run converges, is read back and checked meanwhile
            if not starting and not spark_session.done():
                step("  Starting Spark on Ray (RayDP) in the background")
                starting.append(threading.Thread(target=_enter, args=(stack, spark_on_ray(spark), spark_session),
                                                 name="spark-start", daemon=True))
                starting[0].start()
        try:
            for i, experiment in enumerate(experiments, 1):
                counts = list(itertools.accumulate(t.partitions for t in experiment.topics))
                load_s = load_length_s(experiment, schedule(experiment, random.Random(experiment.seed)))  # the run's
                step(f"Experiment {i}/{len(experiments)}: {experiment.name} (at least {round(load_s, 1):g} s of load, "
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
