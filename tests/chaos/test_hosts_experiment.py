"""experiments/hosts.yaml on five hosts of their own (`kray hosts up 5 --cluster`), run on h1 as a user
runs it: every fault the kernel makes between hosts and each one's twin made in a process or by the
user-space links, under acks=all load, each fault once the cluster recovered from the last; every
invariant holds and nothing acknowledged is lost. Run as root, as CI is; marked slow (about 8 minutes:
tests/integration/test_host_faults.py and test_hosts_cluster.py cover the faults themselves by default)."""
from __future__ import annotations

import json

import pytest

from jobs.experiments.experiment import load_experiment
from jobs.hosts.netns import Hosts
from jobs.measures import rundir
from tests.integration.test_hosts import kray, kray_home  # noqa: F401 (a fixture)
from tests.integration.test_ray_up import REPO

PREFIX, SUBNET = "krs", "10.83.0.0/24"


@pytest.mark.slow
def test_the_hosts_experiment_loses_nothing_under_every_host_fault_and_its_twin(kray_home, capsys):  # noqa: F811
    code, _, err = kray(capsys, "hosts", "up", "5", "--prefix", PREFIX, "--subnet", SUBNET, "--cluster")
    assert code == 0, err
    hosts = Hosts.started()
    h1 = hosts.layout.hosts[0]
    done = hosts.run(h1, ["kray", "experiment", "run", str(REPO / "experiments" / "hosts.yaml"), "--runs-dir",
                          "/root/runs"], capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    [run_dir] = list((hosts.layout.home(h1) / "runs").iterdir())
    summary = json.loads((run_dir / rundir.SUMMARY).read_text())
    with capsys.disabled():  # the check, its counts and notes (a client's resent records among them)
        print(rundir.CheckReport.model_validate(summary["check"]).render())
    assert summary["check"]["invariants"] and not any(summary["check"]["invariants"].values())
    assert summary["check"]["counts"]["acked"] > 20_000
    faults = [json.loads(line) for line in (run_dir / rundir.FAULTS).read_text().splitlines()]
    assert [f["kind"] for f in faults] == [f.fault.value for f in load_experiment(REPO / "experiments" /
                                                                                  "hosts.yaml").schedule]
    assert not [f for f in faults if f["detail"].startswith("failed") or "without the cluster recovered" in
                f["detail"]]  # each struck, each once the cluster had recovered from the last
    power = [f for f in faults if f["kind"] == "host-power-loss"]
    assert all("its broker started in" in f["detail"] for f in power)  # each host back, with its broker
    assert "log dirs" in power[1]["detail"] and "lost" in power[1]["detail"]  # the controller's disk replaced
