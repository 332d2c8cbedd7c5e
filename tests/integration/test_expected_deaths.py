"""Ray's "A worker died or was killed" reports: a fault's SIGKILL of a broker (its controller candidate
with it) hands none to Ray's printing, another actor's process killed behind kray's back still does."""
from __future__ import annotations

import os
import signal

import ray

from actors.cluster import poll
from jobs.experiments.chaos import Chaos
from jobs.experiments.expected_deaths import EXPECTED_DEATHS


@ray.remote(num_cpus=0)
class Bystander:
    def pid(self) -> int:
        return os.getpid()


def test_a_faults_kill_prints_no_worker_death_and_an_unexpected_one_still_does(new_cluster, monkeypatch):
    cluster, zk = new_cluster()
    assert EXPECTED_DEATHS.install()
    printed: list[str] = []  # what reaches Ray's printing (which folds repeats and may hold a line back a while)
    monkeypatch.setattr(EXPECTED_DEATHS, "_print", lambda data, ignore_prefix: printed.extend(data["lines"]))
    killed = [ray.get(cluster.broker_actor(2).info.remote())["pid"],
              ray.get(cluster.controller_actor(2).process.remote())["pid"]]
    Chaos(cluster, zk).kill_broker(2)
    bystander = Bystander.remote()
    unexpected = ray.get(bystander.pid.remote())
    poll(lambda: all(ray.get(b.info.remote()) for b in cluster.brokers.values()), what="the others answering")
    os.kill(unexpected, signal.SIGKILL)
    poll(lambda: any(f"Worker PID: {unexpected} " in line for line in printed), timeout=30,
         what="Ray's report of the unexpected death")
    assert not [line for line in printed if any(f"Worker PID: {pid} " in line for pid in killed)], printed
    cluster.start_broker(2)
