"""The main job's path end to end, small: a sweep of two experiments with broker kills (detector on
and off) on this test run's ZooKeeper and Ray, then the Spark analysis of their run directories."""
from __future__ import annotations

import pyarrow.parquet as pq

from jobs.report import summary_table
from jobs.sweep import Sweep, run_sweep


def test_a_sweep_runs_its_grid_then_analyses_every_failover(zk_connect, ray_session, monkeypatch, tmp_path):
    monkeypatch.setenv("KRAY_ZK_CONNECT", zk_connect)
    lines = []
    sweep = Sweep(name="tiny", partitions=[12], detector=[True, False], kills=2, spacing_s=5, down_s=2,
                  settle_s=20)
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
    assert all(row["unavailability_ms"] is not None for row in table), ([(r["detector"], r["partitions_affected"], r["unavailability_ms"]) for r in table], sweep_dir)
    assert "report.md" in summary_table(result) and (result.out / "report.md").exists()
