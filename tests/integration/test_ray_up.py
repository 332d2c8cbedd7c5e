"""`ray up` for real: cluster-local.yaml on three hosts of this machine (`kray hosts up 3`), its
setup and start commands (cluster.yaml's own, jobs/node.py) run by Ray's local node provider over
SSH; then `ray submit` of a short sweep (experiments/sweep-hosts.yaml) on the head, `ray rsync-down`
of its report and `ray down`, as a user does with their own machines. Run as root, as CI is."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import yaml

from jobs.hosts.layout import HostsLayout
from jobs.hosts.netns import Hosts
from jobs.measures import rundir
from jobs.reports.spark import QUICK_JVM

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")


def ray_cli(env: dict, *argv: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([RAY, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def autoscaler_log(hosts: Hosts) -> str:
    """The tail of the head's autoscaler logs, which say why a worker did not start."""
    logs = hosts.layout.tmp(hosts.layout.hosts[0]) / "ray" / "session_latest" / "logs"
    return "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-6000:]}" for p in sorted(logs.glob("monitor*")))


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
        assert submitted.returncode == 0, out[-3000:] + submitted.stderr[-3000:] + autoscaler_log(hosts)
        assert "3 nodes (10.79.0.11, 10.79.0.12, 10.79.0.13)" in out  # the job joined the cluster `ray up` made
        assert "every invariant holds" in out and "BROKEN" not in out
        down_dir = tmp_path / "runs"
        assert ray_cli(env, "rsync-down", str(cluster_yaml), "/root/runs/", str(down_dir), timeout=300).returncode == 0
        [sweep_dir] = [p for p in down_dir.iterdir() if p.is_dir()]
        assert (sweep_dir / "analysis" / "report.md").is_file()
        runs = [p for p in sweep_dir.iterdir() if p.is_dir() and p.name != "analysis"]
        assert len(runs) == 1
        summary = json.loads((runs[0] / rundir.SUMMARY).read_text())
        assert summary["failovers"] >= 2 and summary["check"]["counts"]["acked"] > 1000
        assert summary["check"]["counts"]["consumed_final"] >= summary["check"]["counts"]["acked"]
        invariants = summary["check"]["invariants"]
        assert "acked_unrecorded" in invariants and not any(invariants.values()), invariants
        assert ray_cli(env, "down", "-y", str(cluster_yaml), timeout=300).returncode == 0
    finally:
        hosts.down()
