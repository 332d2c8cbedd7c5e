"""What the controller-failover benchmark's stream load costs the machine, in steady state.

    .venv/bin/python -m benchmarks.bench_load_cost [--partitions 1000 10000] [--rate 500] [--warm-s 25] [--seconds 10]

On a cluster of 3 brokers (RF 3) with N partitions, kray's load client (a confluent-kafka producer,
acks=all, round robin over every partition) streams at the rate; after `--warm-s` (every partition
written once at 500 records/s over 10,000 partitions takes 20 s) the CPU each kind of process uses
is counted over `--seconds`, and the load client's is split between librdkafka's threads and Python.
A failover under load gets what this leaves of the machine's cores: the figure that bounds how much
slower it can be than an idle one when the failover itself already uses most of them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

import ray

from actors.clients.load import LoadGenerator
from actors.runtime import poll
from benchmarks.bench_failover import cpu_seconds, cpu_used_since, new_cluster
from coordination import admin
from coordination.zkdata import TopicPartition
from jobs.experiments.local import embedded_zookeeper_and_ray


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of a process's threads: librdkafka's (named rdk:...) and the rest."""
    tick, out = os.sysconf("SC_CLK_TCK"), {"librdkafka": 0.0, "python": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            raw = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:  # the thread ended meanwhile
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        out["librdkafka" if name.startswith("rdk:") else "python"] += (int(fields[11]) + int(fields[12])) / tick
    return out


def load_cost(connect: str, n: int, rate: float, warm_s: float, seconds: float) -> dict:
    cluster, zk = new_cluster(connect)
    try:
        admin.create_topic(zk, "bench", n, 3)
        cluster.wait_for_metadata(lambda m: len(m["partitions"]) == n, timeout=600)
        load = LoadGenerator.remote(0, cluster.config, [TopicPartition("bench", i) for i in range(n)], rate, 100, -1)
        ray.get(load.start.remote())
        poll(lambda: ray.get(load.stats.remote())["acked"] >= rate * 3, 120, "the load to flow")
        time.sleep(warm_s)
        load_pid = next(p for p, (kind, _) in cpu_seconds().items() if kind == "LoadGenerator")
        before, threads_before, acked_before = cpu_seconds(), thread_cpu(load_pid), ray.get(load.stats.remote())["acked"]
        start = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - start
        used = cpu_used_since(before, wall)
        threads = {k: round((v - threads_before[k]) / wall, 3) for k, v in thread_cpu(load_pid).items()}
        acked = ray.get(load.stats.remote())["acked"] - acked_before
        ray.get(load.stop.remote())
        ray.kill(load)
        return {"partitions": n, "rate": rate, "acked_per_s": round(acked / wall),
                "cores_by_kind": {k: round(v / wall, 3) for k, v in used["window_cpu_by_kind_s"].items()},
                "cores_in_all": round(used["window_cpu_s"] / wall, 3), "load_client_cores": threads}
    finally:
        cluster.stop(delete_logs=True)
        zk.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--warm-s", type=float, default=25)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    with embedded_zookeeper_and_ray() as env:
        print(json.dumps({"machine": f"{platform.node()} {platform.machine()}",
                          "cpus": ray.cluster_resources().get("CPU")}))
        for n in args.partitions:
            print(json.dumps(load_cost(env.connect, n, args.rate, args.warm_s, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
