"""The soak (marked slow: `pytest -m slow tests/chaos/test_soak.py`, about 35 minutes): 30 minutes
of acks=all load on a 3-server ZooKeeper ensemble with a fault every 10 to 30 seconds drawn from
every fault kind. Every invariant holds, every actor's resident memory stays flat, and the run
directory feeds the Spark analysis."""
from __future__ import annotations

import json
import os

import pytest

from actors.records import RunReader
from coordination.server import ZooKeeperEnsemble, ZooKeeperSettings
from jobs.measures import rundir
from jobs.measures.check import INVARIANTS
from jobs.experiments.experiment import Experiment, RandomFaults
from jobs.measures.rundir import FaultKind
from jobs.experiments.runner import ExperimentRun
from jobs.experiments.summary import report

SOAK_S = float(os.environ.get("KRAY_SOAK_SECONDS", 30 * 60))
GROWTH_LIMIT = 1.5  # an actor's resident memory at the end against its median over the first minutes


@pytest.mark.slow
def test_soak_with_every_fault_kind(ray_session, tmp_path):
    experiment = Experiment(
        name="soak", brokers=3, session_timeout_ms=4000,
        broker={"min_insync_replicas": 2, "replica_lag_time_max_ms": 4000, "replica_fetch_wait_max_ms": 300,
                "isr_change_propagation_interval_ms": 500, "replica_fetch_backoff_ms": 300},
        topics=[{"name": "orders", "partitions": 60, "replication_factor": 3}],
        load={"producers": 2, "rate": 1500, "acks": "all", "consumers": 1},
        random_faults=RandomFaults(every_s=(10, 30), kinds=list(FaultKind), seconds=3),
        duration_s=SOAK_S, settle_s=90, sample_interval_s=5, seed=23)
    with ZooKeeperEnsemble(3, ZooKeeperSettings(tick_time_ms=250, min_session_timeout_ms=1000)) as ensemble:
        run_dir = tmp_path / "soak"
        summary = ExperimentRun(experiment, run_dir, ensemble.connect_string, ensemble, print).run()
    print(report(run_dir))
    invariants = summary.check.invariants
    assert invariants == {name: 0 for name in invariants} and len(invariants) == len(INVARIANTS)
    faults = [json.loads(line) for line in (run_dir / rundir.FAULTS).read_text().splitlines()]
    assert {f["kind"] for f in faults} == {k.value for k in FaultKind}  # every kind drawn at least once
    assert len(faults) >= SOAK_S / 30

    samples = list(RunReader(run_dir).lines(rundir.LOAD, rundir.LoadSample))
    first = [s for s in samples if s.ts_ms - samples[0].ts_ms < 180_000]
    start = {a: sorted(s.rss_mb[a] for s in first if a in s.rss_mb) for a in samples[-1].rss_mb}
    growth = {a: samples[-1].rss_mb[a] / v[len(v) // 2] for a, v in start.items() if v}
    print("resident memory, MB (start median -> end):",
          {a: f"{v[len(v) // 2]:.0f} -> {samples[-1].rss_mb[a]:.0f}" for a, v in start.items() if v})

    from jobs.analysis import analyse
    from jobs.reports.spark import spark_on_ray

    with spark_on_ray() as spark:
        result = analyse(spark, [run_dir], tmp_path / "analysis")
    assert result.failovers >= 10 and (tmp_path / "analysis" / "report.md").exists()
    assert growth and max(growth.values()) < GROWTH_LIMIT, growth
