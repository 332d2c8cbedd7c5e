"""`ray up` for real: cluster-local.yaml on three hosts of this machine (`kray hosts up 3`), its
setup and start commands (cluster.yaml's own, jobs/node.py) run by Ray's local node provider over
SSH; then `ray submit` of the main job's sweep (experiments/sweep-hosts.yaml), `ray rsync-down` of its
report and `ray down`, as a user does with their own machines. Run as root, as CI is.

The sweep is the main job's path end to end, small: the cluster's knee at 18 partitions measured first,
then one experiment at half of it whose partitions grow between its two kills (a topic added under
load), with a consumer group; then the Spark analysis of its run directory, which reads the run's
produced/ Parquet for the load's latency before each fault. What came back is checked against what
the run recorded."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from jobs.hosts.layout import RAY_TOKEN, HostsLayout
from jobs.hosts.netns import Hosts
from jobs.measures import rundir
from jobs.measures.phases import CONTROLLER_PHASES
from jobs.reports.spark import QUICK_JVM
from jobs.sweep import CAPACITY, load_sweep

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")


def ray_cli(env: dict, *argv: str, timeout: float) -> subprocess.CompletedProcess:
    """The `ray` command; how long it took is printed (shown with a failure)."""
    began = time.monotonic()
    done = subprocess.run([RAY, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    print(f"ray {argv[0]}: exit {done.returncode} after {time.monotonic() - began:.1f} s")
    return done


def autoscaler_log(hosts: Hosts) -> str:
    """The tail of the head's autoscaler logs, which say why a worker did not start (found by their session's
    name: session_latest points into the head's own /tmp, a path this namespace does not have)."""
    sessions = sorted((hosts.layout.tmp(hosts.layout.hosts[0]) / "ray").glob("session_2*"))
    logs = sorted(sessions[-1].glob("logs/monitor*")) if sessions else []
    return "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-6000:]}" for p in logs) or \
        "\n(no autoscaler log found on the head)"


def test_ray_up_submit_rsync_down_and_down_on_hosts_of_this_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("KRAY_HOME", str(tmp_path / "kray"))
    # hosts of the test's own, so that a user's `kray hosts` on this machine is left alone: the file's
    # addresses moved to their subnet, its key and token the test's
    hosts = Hosts(HostsLayout(count=3, prefix="kru", subnet="10.79.0.0/24", directory=tmp_path / "kray" / "hosts"))
    try:
        hosts.up()
        token = tmp_path / "auth_token"  # the user's `ray get-auth-token --generate`, kept out of root's home
        token.write_text(secrets.token_hex(32))
        config = yaml.safe_load((REPO / "cluster-local.yaml").read_text().replace("10.77.0.", "10.79.0."))
        assert config["provider"]["head_ip"] == "10.79.0.11" and "10.79.0.13" in config["setup_commands"][-1]
        config["auth"]["ssh_private_key"] = str(hosts.layout.client_key)
        config["file_mounts"]["~/.ray/auth_token"] = str(token)
        cluster_yaml = tmp_path / "cluster-local.yaml"
        cluster_yaml.write_text(yaml.safe_dump(config))
        scratch = tmp_path / "launcher"  # ray up's own state and SSH control sockets
        scratch.mkdir()
        env = {**os.environ, "RAY_TMPDIR": str(scratch), "TMPDIR": str(scratch), "RAY_UP_enable_autoscaler_v2": "0"}
        up = ray_cli(env, "up", "-y", str(cluster_yaml), timeout=300)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        submitted = ray_cli(env, "submit", str(cluster_yaml), "jobs/sweep.py", "--",
                            "/root/kray/experiments/sweep-hosts.yaml", "--runs-dir", "/root/runs",
                            "--executor-memory", "500m", f"--java-options={QUICK_JVM}", timeout=900)
        out = submitted.stdout
        print(out)  # the job's steps with their times, shown with a failure
        assert submitted.returncode == 0, submitted.stderr[-3000:] + autoscaler_log(hosts)
        assert "3 nodes (10.79.0.11, 10.79.0.12, 10.79.0.13)" in out  # the job joined the cluster `ray up` made
        # the user's token reached every node as a file mount (over the hosts' own, which would serve as well)
        assert {(hosts.layout.home(h) / RAY_TOKEN).read_text() for h in hosts.layout.hosts} == {token.read_text()}
        down_dir = tmp_path / "runs"
        assert ray_cli(env, "rsync-down", str(cluster_yaml), "/root/runs/", str(down_dir), timeout=300).returncode == 0
        [sweep_dir] = [p for p in down_dir.iterdir() if p.is_dir()]
        the_sweep_came_back_whole(load_sweep(REPO / "experiments" / "sweep-hosts.yaml"), sweep_dir, out)
        assert ray_cli(env, "down", "-y", str(cluster_yaml), timeout=300).returncode == 0
    finally:
        hosts.down()


def the_sweep_came_back_whole(sweep, sweep_dir: Path, out: str) -> None:
    """The knee, the run (every invariant, the kills' load, the grown topic, the group) and its analysis
    (the failovers, the partitions' waits, the coordinator's, the per-fault table against the offered
    load, the report), as `out` (the job's output) announced them."""
    offsets = sweep.broker["offsets_topic_num_partitions"]
    first, last = sweep.partitions
    runs = [p for p in sweep_dir.iterdir() if p.is_dir() and p.name != "analysis"]
    assert [r.name.rsplit("-", 1)[0].split("-", 2)[2] for r in runs] == [f"hosts-b3-p{first}.{last}-f50-ray"]
    [capacity] = json.loads((sweep_dir / CAPACITY).read_text())
    knee = capacity["knee_per_s"]
    assert capacity["partitions"] == last and knee in [r["rate"] for r in capacity["rows"]]
    assert f"Knee at {last} partitions: {knee:,.0f} records/s" in out
    assert out.count(f"{knee / 2:,.0f} records/s offered at the last count: 50% of the knee, below it") == 1
    [run] = runs
    load = json.loads((run / rundir.EXPERIMENT).read_text())["load"]
    assert (load["knee_per_s"], load["knee_fraction"], load["rate"]) == (knee, 0.5, pytest.approx(knee / 2 / 3))
    assert "every invariant holds" in out and "BROKEN" not in out
    summary = json.loads((run / rundir.SUMMARY).read_text())
    counts, invariants = summary["check"]["counts"], summary["check"]["invariants"]
    assert counts["acked"] > 1000 and counts["consumed_final"] >= counts["acked"]
    assert "acked_unrecorded" in invariants and not any(invariants.values()), invariants
    assert out.count(f"Topic load2 created after fault 1: {last - first} partitions more, {last} in all, "
                     f"{last} written") == 1
    assert out.count(f"members consuming {last} partitions") == 1  # the group took load2 before kill 2
    kills = [json.loads(line) for line in (run / rundir.FAILOVERS).read_text().splitlines()
             if json.loads(line)["fault_id"] is not None]  # the kills' load: the topics' and the offsets partitions
    assert [f["load"]["partitions_total"] for f in kills] == [first + offsets, last + offsets]
    assert kills[1]["load"]["partitions_affected"] > first
    assert len(json.loads((run / rundir.FINAL_STATE).read_text())["zookeeper"]) == last + offsets
    # the analysis: one failover per kill (the first election has no fault), with Ray's detection
    assert "Spark is up" in out and "Spark on Ray: yes" in out and "report.md" in out
    analysis = sweep_dir / "analysis"
    inputs = pq.read_table(analysis / "inputs.parquet").to_pylist()
    assert {i["run_id"]: i["unexplained"] for i in inputs} == {run.name: 1}
    table = pq.read_table(analysis / "failovers.parquet").to_pylist()
    assert [row["detector"] for row in table] == [1, 1]
    assert all(row["detection_ms"] < 1000 for row in table)  # Ray's report, not the session timeout
    waits = pq.read_table(analysis / "waits.parquet").to_pylist()
    killed = [w for w in waits if w["touched"] and w["source"] == "load"]
    assert {w["fault_id"] for w in killed} == {1, 2}
    assert all(w["recovery_ms"] > 0 and w["worst_wait_ms"] >= 0 for w in killed)
    # the new topic was under load before the second kill: its partitions' waits are measured too
    assert any(w["partition"].startswith("load2-") and w["fault_id"] == 2 for w in killed)
    assert {w["source"] for w in waits} == {"load", "probe", "group"}  # the probes and the group beside the load
    # the controller's phases against the partition count: a row per count, the chart, the table
    by_count = {(r["kind"], r["detector"], r["partitions_total"]): r
                for r in pq.read_table(analysis / "controller_by_count.parquet").to_pylist()}
    assert set(by_count) == {("broker_failure", True, n) for n in (first + offsets, last + offsets)}
    for (_, detector, n), r in by_count.items():
        assert r["n"] == 1 and r["total_ms_p50"] == pytest.approx(sum(r[f"{p}_p50"] for p in CONTROLLER_PHASES))
        [failover] = [row for row in table if row["partitions_total"] == n]
        assert r["propagation_ms_p50"] == pytest.approx(failover["propagation_ms"])
    assert (analysis / "controller_phases_vs_partitions.png").stat().st_size > 10_000
    report = (analysis / "report.md").read_text()
    assert "## The controller's phases against the partition count" in report
    assert f"| broker_failure | on | {last + offsets} | 1 |" in report
    # the second kill was of the group's coordinator (unless the controller's broker coordinated it, which the
    # fault's record says), the first perhaps too: each such failover beside the producers'
    faults = {f["fault_id"]: f for f in map(json.loads, (run / rundir.FAULTS).read_text().splitlines())}
    moved = {2} if "is the controller's" not in faults[2]["detail"] else set()
    coordinators = pq.read_table(analysis / "coordinators.parquet").to_pylist()
    assert moved <= {row["fault_id"] for row in coordinators}
    assert all(faults[row["fault_id"]]["target"] == row["coordinator"] for row in coordinators)
    assert all(row["elected_ms"] > 0 and row["consumed_all_ms"] is not None for row in coordinators)
    assert ("The consumer group's coordinator, ms after a fault on its broker" in out) == bool(coordinators)
    # per fault against the offered load: the knee, the fraction, the load's latency before it (from produced/)
    per_fault = [f for f in pq.read_table(analysis / "faults.parquet").to_pylist() if f["source"] == "load"]
    assert {f["fault_id"] for f in per_fault} == {1, 2}
    assert all(f["knee_per_s"] == knee and 0 < f["knee_fraction"] < 1 for f in per_fault)
    assert all(0 < f["baseline_latency_ms_p50"] <= f["baseline_latency_ms_p99"] for f in per_fault)
    assert "every fault below it" in out
    assert (analysis / "waits_vs_offered_load.png").stat().st_size > 10_000
    assert "## Against the offered load" in report
