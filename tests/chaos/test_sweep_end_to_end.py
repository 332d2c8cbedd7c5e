"""The main job's path end to end, small: a sweep of two experiments with broker kills (detector on
and off) on this test run's ZooKeeper and Ray, then the Spark analysis of their run directories; and
an experiment of the quick sweep's shape, whose partitions grow between kills."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from jobs import rundir
from jobs.report import summary_table
from jobs.runner import run_experiment
from jobs.sweep import Sweep, run_sweep


def test_a_sweep_runs_its_grid_then_analyses_every_failover(zk_connect, ray_session, monkeypatch, tmp_path):
    monkeypatch.setenv("KRAY_ZK_CONNECT", zk_connect)
    lines = []
    sweep = Sweep(name="tiny", partitions=[12], detector=[True, False], kills=2, spacing_s=5, down_s=2,
                  settle_s=20, horizon_s=8)
    sweep_dir, result = run_sweep(sweep, tmp_path, progress=lines.append)
    runs = sorted(p for p in sweep_dir.iterdir() if p.name != "analysis")
    assert [r.name.rsplit("-", 1)[0].split("-", 2)[2] for r in runs] == ["tiny-b3-p12-r0-ray", "tiny-b3-p12-r0-zk"]
    assert any("every invariant holds" in line for line in lines) and not any("BROKEN" in line for line in lines)
    assert any("Spark is up" in line for line in lines)
    assert result.on_ray and result.failovers == 4  # one per kill; the first elections have no fault
    assert {i["run_id"]: i["unexplained"] for i in result.inputs} == {r.name: 1 for r in runs}
    table = pq.read_table(result.out / "failovers.parquet").to_pylist()
    assert sorted(row["detector"] for row in table) == [0, 0, 1, 1]
    off = [row["detection_ms"] for row in table if not row["detector"]]
    on = [row["detection_ms"] for row in table if row["detector"]]
    assert min(off) > max(on)  # ZooKeeper's session timeout against Ray's report
    waits = pq.read_table(result.out / "waits.parquet").to_pylist()
    killed = [w for w in waits if w["touched"] and w["source"] == "load"]
    assert {(w["run_id"], w["fault_id"]) for w in killed} == {(r.name, i) for r in runs for i in (1, 2)}
    assert all(w["recovery_ms"] > 0 and w["worst_wait_ms"] >= 0 for w in killed)
    assert {w["source"] for w in waits} == {"load", "probe"}  # the probes measured beside the load
    assert "report.md" in summary_table(result) and (result.out / "report.md").exists()


def test_a_growing_experiment_adds_a_topic_under_load_between_its_kills(zk_connect, ray_session, monkeypatch,
                                                                          tmp_path):
    monkeypatch.setenv("KRAY_ZK_CONNECT", zk_connect)
    [experiment] = Sweep(name="grow", partitions=[6, 18], detector=[True], kills=1, spacing_s=5, down_s=2,
                         settle_s=20, horizon_s=8, grow_partitions=True).experiments()
    lines = []
    run_dir, summary = run_experiment(experiment, tmp_path, progress=lines.append)
    assert not {k: v for k, v in summary.check.invariants.items() if v}, summary.check.render()
    assert any("Topic load2 created after fault 1: 12 partitions more, 18 under load" in line for line in lines), lines
    failovers = [json.loads(line) for line in (run_dir / "failovers.jsonl").read_text().splitlines()]
    kills = [f for f in failovers if f["fault_id"] is not None]
    assert [f["load"]["partitions_total"] for f in kills] == [6, 18]
    assert kills[1]["load"]["partitions_affected"] > 6
    # the new topic was under load before the second kill: its partitions' waits are measured too
    waits = [rundir.PartitionWait.model_validate_json(line) for line in (run_dir / rundir.WAITS).read_text().splitlines()]
    assert any(w.partition.startswith("load2-") and w.fault_id == 2 and w.source is rundir.Source.LOAD for w in waits)
    final = json.loads((run_dir / "final_state.json").read_text())
    assert len(final["zookeeper"]) == 18
