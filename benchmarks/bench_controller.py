"""Control-plane benchmark: cluster start-up and 1,000-partition topic creation vs raw ZooKeeper writes.

    make bench        (or: .venv/bin/python -m benchmarks.bench_controller [--partitions N] [--repeats R])

All figures come from one run on one machine; the raw ZooKeeper write rate is
measured in the same run as the baseline, since the machine is shared and noisy.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import uuid


from actors.cluster import LocalCluster
from actors.config import ClusterConfig
from coordination import admin
from jobs.experiments.local import embedded_zookeeper_and_ray, fresh_chroot
from coordination.zkclient import CreateOp, KrayZkClient


def raw_zk_write_rate(zk: KrayZkClient, n: int = 3000) -> dict:
    """Baseline: znodes/s through fenced multis of 1,000 creates, and one synchronous write's latency."""
    base = f"/bench-{uuid.uuid4().hex[:8]}"
    zk.kazoo.ensure_path(base)
    _, epoch_version = zk.register_controller_and_increment_epoch(0)
    start = time.perf_counter()
    zk.fenced_multi([CreateOp(f"{base}/{i}", b'{"x":1}') for i in range(n)], epoch_version, pipelined=True)
    multi_rate = n / (time.perf_counter() - start)
    lat = []
    for i in range(200):
        t = time.perf_counter()
        zk.kazoo.set(f"{base}/{i}", b'{"x":2}')
        lat.append((time.perf_counter() - t) * 1000)
    zk.kazoo.delete("/controller")
    return {"multi_znodes_per_s": round(multi_rate), "sync_write_ms_p50": round(statistics.median(lat), 3)}


def run(partitions: int, repeats: int) -> dict:
    results: dict = {"machine": f"{platform.node()} {platform.machine()} {platform.processor() or ''}".strip(),
                     "partitions": partitions, "replication_factor": 3, "runs": []}
    with embedded_zookeeper_and_ray() as env:
        connect = env.connect
        for r in range(repeats):
            config = ClusterConfig(zk_connect=fresh_chroot(connect, "bench"),
                                   namespace=f"bench-{uuid.uuid4().hex[:6]}", zk_session_timeout_ms=6000)
            with config.zk_client().start() as zk:
                zk.ensure_persistent_paths()
                baseline = raw_zk_write_rate(zk)
                t0 = time.perf_counter()
                cluster = LocalCluster(config, [1, 2, 3]).start()
                registered = time.perf_counter() - t0
                _, epoch = cluster.wait_for_controller(zk)
                elected = time.perf_counter() - t0
                cluster.wait_for_metadata(lambda m: m["controller_epoch"] == epoch)
                ready = time.perf_counter() - t0
                t1 = time.perf_counter()
                admin.create_topic(zk, "bench", partitions, 3)
                cluster.wait_for_metadata(lambda m: sum(tp.topic == "bench" for tp in m["partitions"]) == partitions,
                                          timeout=300)
                created = time.perf_counter() - t1
                cluster.stop(delete_logs=True)
            # the controller writes 2 znodes per partition (partition + state) plus one per topic
            raw_equivalent = (2 * partitions + 1) / baseline["multi_znodes_per_s"]
            run_result = baseline | {
                "cluster_start_to_registered_s": round(registered, 3),
                "cluster_start_to_controller_s": round(elected, 3),
                "cluster_start_to_all_caches_s": round(ready, 3),
                "topic_create_to_all_caches_s": round(created, 3),
                "raw_zk_time_for_same_znodes_s": round(raw_equivalent, 3),
                "topic_create_vs_raw_zk_ratio": round(created / raw_equivalent, 1),
            }
            results["runs"].append(run_result)
            print(json.dumps(run_result), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = run(args.partitions, args.repeats)
    keys = [k for k in results["runs"][0]]
    print(json.dumps({"median": {k: statistics.median(r[k] for r in results["runs"]) for k in keys},
                      "machine": results["machine"]}))


if __name__ == "__main__":
    main()
