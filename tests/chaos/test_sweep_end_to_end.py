"""An experiment of the quick sweep's shape, whose partitions grow between kills. (The sweep end to end,
with its Spark analysis: tests/integration/test_analysis.py, which shares its Spark session.)"""
from __future__ import annotations

import json

from jobs import rundir
from jobs.runner import run_experiment
from jobs.sweep import Sweep


def test_a_growing_experiment_adds_a_topic_under_load_between_its_kills(zk_connect, ray_session, monkeypatch,
                                                                          tmp_path):
    monkeypatch.setenv("KRAY_ZK_CONNECT", zk_connect)
    [experiment] = Sweep(name="grow", partitions=[6, 18], detector=[True], kills=1, spacing_s=5, down_s=2,
                         settle_s=20, horizon_s=8, grow_partitions=True, group_members=0).experiments()
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
