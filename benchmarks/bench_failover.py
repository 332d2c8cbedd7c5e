"""Failover benchmark: broker failure and controller failover at scale, beside floors from the same run.

    .venv/bin/python -m benchmarks.bench_failover [--broker-failure 1000 10000] [--controller-failover 10000 50000]
        [--load-rates 0 500 0 500] [--partitions-per-topic 25000] [--session-timeout-ms 2000]
        [--socket-timeout-ms 30000] [--zk-heap-mb 1024]

Broker failure: a broker leading P partitions (RF 3) is SIGKILLed; the figure is the
controller's timeline from `detected` (BrokerChange in the inbox) to `requests_acked`
(the last broker acknowledged the LeaderAndIsr/UpdateMetadata of that event). Floor: a raw
fenced ZooKeeper multi write of P partition states, plus one actor call per surviving
broker carrying P partition states, both measured in the same run (the multi through kray's
own one-pass multi serializer, about twice kazoo's Transaction rate, so the floor is the
faster of the two).

Controller failover: the active controller's actor is SIGKILLed with N partitions in the
cluster (RF 3 on 3 brokers, as topics of at most 25,000 partitions); the figure is the new controller's timeline from `processing_started` (the
event in which it wins the election) to `requests_acked`. Floor: a pipelined read of all N
partition states from ZooKeeper (kazoo's async get, as Kafka's controller reads them);
also shown, the same read through kray's MultiRead batches, which the controller uses.
With `--load-rates`, the same cluster's controller is killed once per rate, a confluent-kafka
producer streaming acks=all records over every partition at that rate (0: idle), so that the
loaded failovers compare with an idle one of the same run. Each row also gives the ZooKeeper
server's memory at that size (the JVM's resident set, and the data size `mntr` reports), and
where the machine's CPU went from the kill to the last acknowledgement: `window_cpu_s` in all
(2 cores can give twice the window's wall time), by kind of process, and in processes started
meanwhile (`window_cpu_new_processes_s`: a new candidate's worker process, when its broker starts one
within the window; before candidate_restart_backoff_ms, Ray restarted the killed one at once).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import uuid

import ray

from actors.clients.load import LoadGenerator
from actors.cluster import LocalCluster, poll
from actors.config import ClusterConfig, ControllerConfig
from actors.protocol import LeaderAndIsrRequest, PartitionState
from coordination import admin, zkdata
from coordination.server import first_server, four_letter_word
from coordination.zkclient import CreateOp, DeleteOp, KrayZkClient, SetDataOp
from coordination.zkdata import TopicPartition
from jobs.experiments.local import embedded_zookeeper_and_ray, fresh_chroot

SESSION_TIMEOUT_MS = 2000


@ray.remote(num_cpus=0)
class Echo:
    """Receives a request the size of a LeaderAndIsr and answers: the transport floor."""

    def take(self, request) -> int:
        return len(request.partition_states)


def new_cluster(connect: str, brokers=(1, 2, 3), niceness: int = 0, session_timeout_ms: int = SESSION_TIMEOUT_MS,
                socket_timeout_ms: int = 30_000, warm_standby: bool = False) -> tuple[LocalCluster, KrayZkClient]:
    config = ClusterConfig(zk_connect=fresh_chroot(connect, "bench"), namespace=f"bench-{uuid.uuid4().hex[:6]}",
                           zk_session_timeout_ms=session_timeout_ms, controller_socket_timeout_ms=socket_timeout_ms,
                           controller=ControllerConfig(control_plane_niceness=niceness,
                                                       warm_standby_enable=warm_standby))
    zk = config.zk_client(session_timeout_ms=30_000).start()
    cluster = LocalCluster(config, list(brokers)).start()
    cluster.wait_until_ready(zk)
    return cluster, zk


def write_floor(zk: KrayZkClient, n: int) -> float:
    """Seconds for a fenced multi write of n partition states (on znodes of its own, made before and
    deleted after)."""
    base = f"/floor-{uuid.uuid4().hex[:6]}"
    zk.kazoo.ensure_path(base)
    state = zkdata.PartitionStateZNode(leader=2, leader_epoch=1, controller_epoch=1, isr=[2, 3]).encode()
    _, version = zk.get_controller_epoch()
    zk.fenced_multi([CreateOp(f"{base}/{i}", state) for i in range(n)], version, pipelined=True)
    start = time.perf_counter()
    zk.fenced_multi([SetDataOp(f"{base}/{i}", state) for i in range(n)], version, pipelined=True)
    elapsed = time.perf_counter() - start
    zk.fenced_multi([DeleteOp(f"{base}/{i}") for i in range(n)] + [DeleteOp(base)], version, pipelined=True)
    return elapsed


def call_floor(n: int, brokers: int) -> float:
    """Seconds for one call per broker, in parallel, each carrying n partition states."""
    echoes = [Echo.remote() for _ in range(brokers)]
    ray.get([e.take.remote(LeaderAndIsrRequest(controller_id=1, controller_epoch=1, broker_epoch=1,
                                               partition_states=[], live_leaders=[])) for e in echoes])
    states = [PartitionState(topic="bench", partition=i, controller_epoch=1, leader=2, leader_epoch=1, isr=[2, 3],
                             zk_version=1, replicas=[1, 2, 3], offline_replicas=[1]) for i in range(n)]
    start = time.perf_counter()
    request = LeaderAndIsrRequest(controller_id=1, controller_epoch=1, broker_epoch=1, partition_states=states,
                                  live_leaders=[])
    ray.get([e.take.remote(request) for e in echoes])
    elapsed = time.perf_counter() - start
    for e in echoes:
        ray.kill(e)
    return elapsed


def broker_failure(connect: str, p: int) -> dict:
    cluster, zk = new_cluster(connect)
    try:
        controller_id, _ = cluster.wait_for_controller(zk)
        victim = next(b for b in (1, 2, 3) if b != controller_id)
        a, b = [x for x in (1, 2, 3) if x != victim]
        assignment = {i: [victim, a, b] if i % 2 else [victim, b, a] for i in range(p)}
        zk.kazoo.create(zkdata.topic_path("bench"), zkdata.TopicZNode.from_assignment(assignment, None).encode())
        cluster.wait_for_metadata(lambda m: len(m["partitions"]) == p, timeout=600)
        floor_zk = write_floor(zk, p)
        floor_call = call_floor(p, 2)
        controller = cluster.controller_actor(controller_id)
        cluster.kill_broker(victim)
        t = poll(lambda: next((t for t in ray.get(controller.timelines.remote())
                               if t["kind"] == "broker_failure" and t["requests_acked_ms"]), None), 120, "timeline")
        leaders = {s.state.leader for s in zk.get_partition_states(
            [TopicPartition("bench", i) for i in range(p)]).values()}
        assert victim not in leaders, "a partition is still led by the dead broker"
        return timeline_phases(t, "detected_ms") | {
            "scenario": "broker_failure", "partitions_led_by_dead_broker": p,
            "floor_zk_multi_s": round(floor_zk, 3), "floor_actor_calls_s": round(floor_call, 3),
            "floor_s": round(floor_zk + floor_call, 3)}
    finally:
        cluster.stop(delete_logs=True)
        zk.close()


def zookeeper_mntr(connect: str) -> dict[str, str]:
    """The first server's `mntr` answer, by key."""
    return dict(line.split("\t", 1) for line in four_letter_word(*first_server(connect), "mntr").splitlines()
                if "\t" in line)


def zookeeper_memory(connect: str, server) -> dict:
    """The ZooKeeper server's resident memory (MB, when this process started it) and `mntr`'s data size."""
    mntr = zookeeper_mntr(connect)
    out = {"zk_znodes": int(mntr.get("zk_znode_count", -1)),
           "zk_data_mb": round(int(mntr.get("zk_approximate_data_size", 0)) / 2**20, 1)}
    if server is not None:
        status = open(f"/proc/{server.servers[0].process.pid}/status").read()
        out["zk_rss_mb"] = round(int(next(l.split()[1] for l in status.splitlines() if l.startswith("VmRSS"))) / 1024)
        out["zk_heap_max_mb"] = server.settings.heap_mb
    return out


def bench_topics(n: int, per_topic: int) -> dict[str, int]:
    """n partitions as topics of at most per_topic each: a topic znode holds its whole assignment, and
    ZooKeeper refuses a znode above jute.maxbuffer (1 MB, about 60,000 partitions at RF 3)."""
    sizes = [min(per_topic, n - i) for i in range(0, n, per_topic)]
    return {"bench" if len(sizes) == 1 else f"bench-{i}": size for i, size in enumerate(sizes)}


def controller_failover(connect: str, n: int, load_rates: list[float], server=None, niceness: int = 0,
                        per_topic: int = 25_000, **cluster_settings) -> list[dict]:
    """The active controller killed once per load rate, on one cluster of n partitions: a row each."""
    cluster, zk = new_cluster(connect, niceness=niceness, **cluster_settings)
    try:
        t0 = time.perf_counter()
        topics = bench_topics(n, per_topic)
        for topic, size in topics.items():
            admin.create_topic(zk, topic, size, 3)
        cluster.wait_for_metadata(lambda m: len(m["partitions"]) == n, timeout=3600)
        created = time.perf_counter() - t0
        partitions = [TopicPartition(t, i) for t, size in topics.items() for i in range(size)]
        paths = [zkdata.partition_state_path(tp) for tp in partitions]
        with KrayZkClient(zk.connect).start() as reader:
            start = time.perf_counter()
            pending = [reader.kazoo.get_async(p) for p in paths]
            assert all(r.get() for r in pending)
            floor = time.perf_counter() - start
            start = time.perf_counter()
            assert all(reader.get_many(paths).values())
            multi_read = time.perf_counter() - start
        memory = zookeeper_memory(connect, server)
        rows = []
        for rate in load_rates:
            # every candidate back (the one killed last is started again candidate_restart_backoff_ms
            # later), so that a failover starts from a whole cluster, not during the last one's recovery
            poll(lambda: ray.get([cluster.controller_actor(b).status.remote() for b in cluster.brokers], timeout=10),
                 120, "every controller candidate to answer")
            load = None
            if rate > 0:
                load = LoadGenerator.remote(0, cluster.config, partitions, rate, 100, -1)
                ray.get(load.start.remote())
                poll(lambda: ray.get(load.stats.remote())["acked"] >= rate * 3, 120, "the load to flow")
            old_id, old_epoch = cluster.wait_for_controller(zk)
            cpu_before, wall_before = cpu_seconds(), time.monotonic()
            cluster.kill_controller(old_id)
            new_id, _ = cluster.wait_for_controller(zk, min_epoch=old_epoch + 1, timeout=600)
            controller = cluster.controller_actor(new_id)
            t = poll(lambda: next((t for t in ray.get(controller.timelines.remote())
                                   if t["kind"] == "controller_failover" and t["epoch"] == old_epoch + 1
                                   and t["requests_acked_ms"]), None), 600, "timeline")
            cpu = cpu_used_since(cpu_before, time.monotonic() - wall_before)
            stats = ray.get(load.stop.remote()) if load is not None else {}
            rows.append(timeline_phases(t, "processing_started_ms") | memory | cpu | {
                "scenario": "controller_failover", "partitions": n, "topics": len(topics), "load_rate": rate,
                "control_niceness": niceness,
                "load_acked": stats.get("acked", 0), "load_errors": stats.get("errors", 0),
                "topic_creation_to_all_caches_s": round(created, 2),
                "floor_pipelined_read_s": round(floor, 3), "floor_s": round(floor, 3),
                "multi_read_s": round(multi_read, 3)})
            if load is not None:
                ray.kill(load)
        return rows
    finally:
        cluster.stop(delete_logs=True)
        zk.close()


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """Per process on this machine: its kind (a Ray actor's class, else its program) and the CPU seconds
    (user + system) it has used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if argv.startswith("ray::"):
            kind = argv.split("::", 1)[1].split(".")[0]
        else:
            kind = os.path.basename(argv.split()[0]) if argv.strip() else "?"
        out[int(pid)] = (kind, (int(fields[11]) + int(fields[12])) / tick)
    return out


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


def cpu_used_since(before: dict[int, tuple[str, float]], wall_s: float) -> dict:
    """Where the machine's CPU went from the kill to the last acknowledgement: in all, by kind of
    process, and in the processes started meanwhile (a new worker process: a candidate started again)."""
    now = cpu_seconds()
    used = {pid: cpu - before.get(pid, ("", 0.0))[1] for pid, (_, cpu) in now.items()}
    by_kind: dict[str, float] = {}
    for pid, cpu in used.items():
        by_kind[now[pid][0]] = by_kind.get(now[pid][0], 0.0) + cpu
    return {"window_wall_s": round(wall_s, 2), "window_cpu_s": round(sum(used.values()), 2),
            "window_cpu_new_processes_s": round(sum(c for p, c in used.items() if p not in before), 2),
            "window_cpu_by_kind_s": {k: round(c, 2) for k, c in sorted(by_kind.items(), key=lambda kv: -kv[1])
                                     if c >= 0.05}}


def timeline_phases(t: dict, start_key: str) -> dict:
    """A failover timeline's phases (ms) and its total (s) from `start_key` to the last acknowledgement."""
    ms = lambda a, b: round(t[b] - t[a], 1)  # noqa: E731
    return {"inbox_wait_ms": ms("detected_ms", "processing_started_ms"),
            "zk_written_ms": ms("processing_started_ms", "zk_written_ms"),
            "requests_sent_ms": ms("zk_written_ms", "requests_sent_ms"),
            "requests_acked_ms": ms("requests_sent_ms", "requests_acked_ms"),
            "total_s": round((t["requests_acked_ms"] - t[start_key]) / 1000, 3),
            "partitions_affected": t["partitions_affected"], "requests": t["requests"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker-failure", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--controller-failover", type=int, nargs="*", default=[10000, 50000])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--load-rates", type=float, nargs="+", default=[0],
                        help="records/s streamed while the controller is killed, one kill each in this order (0: idle); "
                             "medians per rate, and their ratio to the idle one")
    parser.add_argument("--partitions-per-topic", type=int, default=25_000,
                        help="the controller-failover clusters' partitions, as topics of at most this many")
    parser.add_argument("--session-timeout-ms", type=int, default=SESSION_TIMEOUT_MS,
                        help="the controller-failover clusters' ZooKeeper sessions (the figure starts once the new "
                             "controller won, so it does not include detection)")
    parser.add_argument("--socket-timeout-ms", type=int, default=30_000,
                        help="controller.socket.timeout.ms of the controller-failover clusters: how long a "
                             "controller waits on a broker's answer before it logs that it waits on")
    parser.add_argument("--zk-heap-mb", type=int, default=None, help="the embedded ZooKeeper server's heap")
    parser.add_argument("--control-niceness", type=int, default=0,
                        help="control_plane_niceness of the clusters (below 0 needs root or CAP_SYS_NICE)")
    args = parser.parse_args()
    with embedded_zookeeper_and_ray(zk_heap_mb=args.zk_heap_mb) as env:
        connect = env.connect
        print(json.dumps({"machine": f"{platform.node()} {platform.machine()}",
                          "cpus": ray.cluster_resources().get("CPU")}))
        for p in args.broker_failure:
            runs = [broker_failure(connect, p) for _ in range(args.repeats)]
            for r in runs:
                r["ratio_to_floor"] = round(r["total_s"] / r["floor_s"], 2)
                print(json.dumps(r), flush=True)
            if len(runs) > 1:
                print(json.dumps({"median_total_s": statistics.median(r["total_s"] for r in runs), "p": p}))
        for n in args.controller_failover:
            rows = controller_failover(connect, n, args.load_rates, env.zk_server, args.control_niceness,
                                       args.partitions_per_topic, session_timeout_ms=args.session_timeout_ms,
                                       socket_timeout_ms=args.socket_timeout_ms)
            for r in rows:
                r["ratio_to_floor"] = round(r["total_s"] / r["floor_s"], 2)
                print(json.dumps(r), flush=True)
            medians = {rate: statistics.median(r["total_s"] for r in rows if r["load_rate"] == rate)
                       for rate in dict.fromkeys(args.load_rates)}
            for rate, median in medians.items():
                print(json.dumps({"partitions": n, "load_rate": rate, "failovers": args.load_rates.count(rate),
                                  "median_total_s": median} | ({"ratio_to_idle": round(median / medians[0], 2)}
                                                               if medians.get(0) else {})), flush=True)


if __name__ == "__main__":
    main()
