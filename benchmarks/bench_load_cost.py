"""What the experiments' load costs the machine, in steady state, recording included.

    .venv/bin/python -m benchmarks.bench_load_cost [--partitions 1000 10000] [--rates 500] [--warm-s 25] [--seconds 10]

On a cluster of 3 brokers (RF 3) with N partitions, kray's load client (a LoadGenerator: a
confluent-kafka producer, acks=all, round robin over every partition) streams at each rate and records
every acknowledgement to a RunRecorder, as in an experiment (the run directory is a temporary one);
after `--warm-s` (every partition written once at 500 records/s over 10,000 partitions takes 20 s) the
CPU each kind of process uses is counted over `--seconds`. The load client's is split between
librdkafka's threads and the rest (its Python: producing, the delivery reports, the recording; and the
Ray worker's own threads), and given per acknowledged record beside the recorder's, and the run
directory's size per record once the load has stopped.

Beside it, on the same cluster just before, the barest Python client of librdkafka at the same rate
and linger.ms (bench_capacity's OpenLoopProducer: a produce call and a delivery callback appending a
latency, no statistics, no key): what any Python load client pays for librdkafka's calls and
callbacks. The load client's own cost per record (`harness_python`) is its Python threads' CPU above
that baseline's.
A failover under load gets what this leaves of the machine's cores: the figure that bounds how much
slower it can be than an idle one when the failover itself already uses most of them.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

import ray

from actors.clients.load import LoadGenerator
from actors.recording import RunRecorder
from actors.runtime import poll
from benchmarks.bench_capacity import OpenLoopProducer
from benchmarks.bench_failover import cpu_seconds, cpu_used_since, new_cluster, thread_cpu
from coordination import admin
from coordination.zkdata import TopicPartition
from jobs.experiments.local import embedded_zookeeper_and_ray


def run_bytes(run_dir: Path) -> int:
    return sum(f.stat().st_size for f in run_dir.rglob("*") if f.is_file())


def bare_client_cost(servers: str, n: int, rate: float, warm_s: float, seconds: float) -> dict:
    """µs per acknowledged record of the barest Python client (OpenLoopProducer, linger.ms 1 as the
    LoadGenerator's) at `rate` over the topic's n partitions: its Python threads and librdkafka's."""
    bare = OpenLoopProducer.remote(servers, "bench", n, 1)
    try:
        pid = ray.get(bare.pid.remote())
        ray.get(bare.prime.remote(120))
        ray.get(bare.set_rate.remote(rate))
        time.sleep(warm_s)
        t0, m0 = thread_cpu(pid), ray.get(bare.mark.remote())
        time.sleep(seconds)
        t1, m1 = thread_cpu(pid), ray.get(bare.mark.remote())
        ray.get(bare.drain.remote(60))
    finally:
        ray.get(bare.stop.remote())
        ray.kill(bare)
    acked = max(1, m1["acked"] - m0["acked"])
    return {f"bare_{k}": round((t1[k] - t0[k]) / acked * 1e6, 1) for k in t1}


def load_cost(connect: str, n: int, rate: float, warm_s: float, seconds: float) -> dict:
    cluster, zk = new_cluster(connect)
    run_dir = Path(tempfile.mkdtemp(prefix="bench-load-cost-"))
    config = cluster.config.model_copy(update={"recorder": f"recorder-{run_dir.name}"})  # the load records, as in a run
    recorder = RunRecorder.options(name=config.recorder, namespace=config.namespace).remote(str(run_dir))
    try:
        admin.create_topic(zk, "bench", n, 3)
        cluster.wait_for_metadata(lambda m: len(m["partitions"]) == n, timeout=600)
        bare = bare_client_cost(cluster.bootstrap_servers(), n, rate, warm_s, seconds)
        load = LoadGenerator.remote(0, config, [TopicPartition("bench", i) for i in range(n)], rate, 100, -1)
        ray.get(load.start.remote())
        poll(lambda: ray.get(load.stats.remote())["acked"] >= rate * 3, 120, "the load to flow")
        time.sleep(warm_s)
        pids = {kind: p for p, (kind, _) in cpu_seconds().items() if kind in ("LoadGenerator", "RunRecorder")}
        before, threads_before = cpu_seconds(), thread_cpu(pids["LoadGenerator"])
        acked_before = ray.get(load.stats.remote())["acked"]
        start = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - start
        used = cpu_used_since(before, wall)
        threads = {k: (v - threads_before[k]) for k, v in thread_cpu(pids["LoadGenerator"]).items()}
        recorder_s = cpu_seconds()[pids["RunRecorder"]][1] - before[pids["RunRecorder"]][1]
        acked = ray.get(load.stats.remote())["acked"] - acked_before
        total = ray.get(load.stop.remote())["acked"]
        ray.kill(load)
        ray.get(recorder.close.remote())
        per_record = lambda cpu_s: round(cpu_s / max(1, acked) * 1e6, 1)
        return {"partitions": n, "rate": rate, "acked_per_s": round(acked / wall),
                "cores_by_kind": {k: round(v / wall, 3) for k, v in used["window_cpu_by_kind_s"].items()},
                "cores_in_all": round(used["window_cpu_s"] / wall, 3),
                "load_client_cores": {k: round(v / wall, 3) for k, v in threads.items()},
                "us_per_record": {"load_python": per_record(threads["python"]),
                                  "load_librdkafka": per_record(threads["librdkafka"]),
                                  "recorder": per_record(recorder_s), **bare,
                                  "harness_python": round(per_record(threads["python"]) - bare["bare_python"], 1)},
                "run_dir_bytes_per_record": round(run_bytes(run_dir) / max(1, total), 1)}
    finally:
        ray.kill(recorder)
        shutil.rmtree(run_dir, ignore_errors=True)
        cluster.stop(delete_logs=True)
        zk.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rates", type=float, nargs="+", default=[500])
    parser.add_argument("--warm-s", type=float, default=25)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    with embedded_zookeeper_and_ray() as env:
        print(json.dumps({"machine": f"{platform.node()} {platform.machine()}",
                          "cpus": ray.cluster_resources().get("CPU")}))
        for n in args.partitions:
            for rate in args.rates:
                print(json.dumps(load_cost(env.connect, n, rate, args.warm_s, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
