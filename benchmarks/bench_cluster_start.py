"""How long a cluster takes to start, as the integration tests start one (issue 31: most of the suite's
time is clusters started again and again).

    .venv/bin/python -m benchmarks.bench_cluster_start [--brokers 3] [--starts 3]

Each start is a fresh chroot and Ray namespace on one ZooKeeper server and one local Ray (started here
unless KRAY_ZK_CONNECT and a Ray session are given), as tests/integration/conftest.py's start_cluster:
`LocalCluster.start()` (the brokers' actors, each starting its RequestSender and its controller
candidate) until `wait_until_ready` (a controller elected, its UpdateMetadata at every broker). Printed
per start: the wall time, the worker processes Ray started for it, and the stop that follows; then the
median. The floor beside it, same run: one empty actor started and answered (a Ray worker process and
its import of Ray), so that a start can be read as so many processes' worth.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time
import uuid

import psutil
import ray


def ray_workers() -> int:
    """Ray worker processes on this machine (their titles start with `ray::`)."""
    count = 0
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        count += bool(cmdline) and cmdline[0].startswith("ray::")
    return count


@ray.remote(num_cpus=0)
class Empty:
    def ping(self) -> int:
        return 1


def one_start(connect: str, brokers: int) -> tuple[float, float, int]:
    """(seconds to ready, seconds to stop, Ray workers it added)."""
    from actors.cluster import LocalCluster
    from actors.config import ClusterConfig, ControllerConfig
    from jobs.experiments.local import fresh_chroot

    config = ClusterConfig(zk_connect=fresh_chroot(connect, "bench-start"), namespace=f"bench-{uuid.uuid4().hex[:8]}",
                           zk_session_timeout_ms=3000, controller=ControllerConfig())
    zk = config.zk_client().start()
    workers_before = ray_workers()
    started = time.monotonic()
    cluster = LocalCluster(config, list(range(1, brokers + 1))).start()
    cluster.wait_until_ready(zk)
    ready = time.monotonic() - started
    workers = ray_workers() - workers_before
    started = time.monotonic()
    cluster.stop(delete_logs=True)
    stopped = time.monotonic() - started
    zk.close()
    return ready, stopped, workers


def main(argv: list[str] | None = None) -> None:
    from jobs.experiments.local import embedded_zookeeper_and_ray

    parser = argparse.ArgumentParser(prog="bench_cluster_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args(argv)
    with embedded_zookeeper_and_ray() as environment:
        connect = environment.connect
        started = time.monotonic()
        actor = Empty.remote()
        ray.get(actor.ping.remote())
        floor = time.monotonic() - started
        ray.kill(actor)
        rows = [one_start(connect, args.brokers) for _ in range(args.starts)]
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"ray {ray.__version__}")
    print(f"one empty actor started and answered: {floor:.2f} s")
    print("| start | brokers | ready s | Ray worker processes added | stop s |")
    print("|---|---|---|---|---|")
    for i, (ready, stopped, workers) in enumerate(rows, 1):
        print(f"| {i} | {args.brokers} | {ready:.1f} | {workers} | {stopped:.1f} |")
    print(f"median ready: {statistics.median(r for r, _, _ in rows):.1f} s")


if __name__ == "__main__":
    main()
