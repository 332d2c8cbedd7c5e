"""The controller at scale: one cluster of N partitions taken through every failover, each split into its
phases and set beside the same run's floors.

    .venv/bin/python -m benchmarks.bench_scale [--partitions 10000 100000] [--load-partitions 300]
        [--load-rate 0] [--warm-standby] [--zk-heap-mb 4096] [--out runs/bench-scale.jsonl]

Per N (3 brokers, RF 3, topics of at most 25,000 partitions), in this order, a JSON line each:
- `start`: the cluster's start, then `create`: the topics created until every broker's cache has them (the
  controller's timeline of the creation is not kept: the figure is the operator's, from the first znode
  to the last cache);
- `floors`: a MultiRead of every partition state, a fenced multi writing every state, and one actor call
  per broker carrying every partition state (the transport of a LeaderAndIsr);
- `memory`: each process's resident memory and its share per partition (the controller, each broker,
  ZooKeeper);
- `controller_failover`: the active controller SIGKILLed; the new controller's timeline from winning to the
  last broker's acknowledgement, with its steps (its log line's laps), and its warm standby's last round
  (how many assignments and states it read again; with `--warm-standby`; without, Kafka's failover reads all);
- `broker_failure`: a broker that is not the controller's SIGKILLed (it leads a third); the controller's
  timeline from detection to the last acknowledgement;
- `broker_restart`: the same broker started again, until it is back in every ISR (the logs it loads, its
  registration, the controller's LeaderAndIsr, its fetchers catching up);
- `controlled_shutdown`: the third broker shut down the controlled way: the time until the controller has
  moved its leaderships away (asked as the broker asks it), and until the broker has closed too;
- `teardown`: the cluster stopped and its logs deleted, beside `start` + `create`.
With `--load-rate`, a producer streams acks=all records over the first `--load-partitions` partitions from
the floors on, and each row says how many it had acknowledged and how many failed.
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import time
from pathlib import Path

import ray

from actors.clients.load import LoadGenerator
from actors.cluster import poll
from actors.config import ClusterConfig
from benchmarks.bench_failover import (
    bench_topics, call_floor, cpu_seconds, cpu_used_since, new_cluster, timeline_phases, write_floor,
    zookeeper_memory, zookeeper_mntr,
)
from coordination import admin, zkdata
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition
from jobs.experiments.local import embedded_zookeeper_and_ray

BROKERS = (1, 2, 3)


def floors(zk: KrayZkClient, partitions: list[TopicPartition]) -> dict:
    """The same run's floors: read every state, write every state (fenced, as the controller writes), and
    carry every state to each broker in one call."""
    paths = [zkdata.partition_state_path(tp) for tp in partitions]
    start = time.perf_counter()
    assert all(zk.get_many(paths).values())
    read = time.perf_counter() - start
    return {"floor_multi_read_s": round(read, 3), "floor_fenced_multi_write_s": round(write_floor(zk, len(paths)), 3),
            "floor_call_per_broker_s": round(call_floor(len(partitions), len(BROKERS)), 3)}


def memory(cluster, controller_id: int, connect: str, server, n: int) -> dict:
    """Resident memory (MB) of the active controller, each broker and ZooKeeper, and KB per partition."""
    brokers = {b: ray.get(cluster.broker_actor(b).info.remote())["rss_mb"] for b in cluster.brokers}
    controller = ray.get(cluster.controller_actor(controller_id).status.remote())["rss_mb"]
    zk = zookeeper_memory(connect, server)
    out = {"controller_rss_mb": round(controller), "brokers_rss_mb": {b: round(m) for b, m in brokers.items()},
           "controller_kb_per_partition": round(controller * 1024 / n, 2),
           "broker_kb_per_partition": round(max(brokers.values()) * 1024 / n, 2)} | zk
    if "zk_rss_mb" in zk:
        out["zk_kb_per_partition"] = round(zk["zk_rss_mb"] * 1024 / n, 2)
    return out


def leader_and_isr_handled(cluster) -> dict:
    """Each live broker's last LeaderAndIsr: its partitions, those applied, and ms from its first step to its
    last (the target: 100,000 unchanged partitions under 500 ms)."""
    return {"brokers_last_leader_and_isr": {b: ray.get(h.info.remote())["last_leader_and_isr"]
                                            for b, h in cluster.brokers.items()}}


LOOK_S = 1.0  # between looks at what is measured: each ships every partition (the figures are the cluster's own
# timestamps, so looking less often changes them by nothing; looking every 50 ms slowed what it measured)


def wait_timeline(controller, kind: str, since_ms: float, timeout: float = 600) -> dict:
    return poll(lambda: next((t for t in ray.get(controller.timelines.remote())
                              if t["kind"] == kind and t["detected_ms"] >= since_ms and t["requests_acked_ms"]),
                             None), timeout, f"the {kind} timeline", interval=LOOK_S)


def controller_failover(cluster, zk) -> dict:
    poll(lambda: ray.get([cluster.controller_actor(b).status.remote() for b in cluster.brokers], timeout=10),
         120, "every controller candidate to answer")
    old_id, old_epoch = cluster.wait_for_controller(zk)
    cpu, wall = cpu_seconds(), time.monotonic()
    killed_ms = cluster.kill_controller(old_id)
    new_id, epoch = cluster.wait_for_controller(zk, min_epoch=old_epoch + 1, timeout=600)
    controller = cluster.controller_actor(new_id)
    t = wait_timeline(controller, "controller_failover", killed_ms)
    return timeline_phases(t, "processing_started_ms") | cpu_used_since(cpu, time.monotonic() - wall) | {
        "controller": new_id, "epoch": epoch, "steps_ms": t["steps_ms"],
        "warm_standby": ray.get(controller.status.remote())["warm_standby"]} | leader_and_isr_handled(cluster)


def broker_failure(cluster, zk, victim: int) -> dict:
    controller_id, _ = cluster.wait_for_controller(zk)
    controller = cluster.controller_actor(controller_id)
    cpu, wall = cpu_seconds(), time.monotonic()
    killed_ms = cluster.kill_broker(victim)
    t = wait_timeline(controller, "broker_failure", killed_ms)
    return timeline_phases(t, "detected_ms") | cpu_used_since(cpu, time.monotonic() - wall) | {
        "victim": victim, "detection_ms": round(t["detected_ms"] - killed_ms, 1)} | leader_and_isr_handled(cluster)


def broker_restart(cluster, zk, victim: int, partitions: list[TopicPartition], timeout_s: float) -> dict:
    """The victim started again, until every ISR holds it (the partition states polled in ZooKeeper), or
    `timeout_s`: the seconds until half, 90% and all of the ISRs held it, and how many did not in time."""
    start = time.perf_counter()
    cluster.start_broker(victim, timeout=900)
    started = time.perf_counter() - start
    info = ray.get(cluster.broker_actor(victim).info.remote())
    reached: dict[str, float] = {}
    while True:
        back = sum(victim in r.state.isr for r in zk.get_partition_states(partitions).values()) / len(partitions)
        elapsed = round(time.perf_counter() - start, 2)
        for name, share in (("half", 0.5), ("90%", 0.9), ("every", 1.0)):
            if back >= share:
                reached.setdefault(name, elapsed)
        if back == 1 or elapsed > timeout_s:
            break
        time.sleep(5 * LOOK_S)  # a look reads every partition state from ZooKeeper
    return {"victim": victim, "actor_started_s": round(started, 2), "logs_loaded": info["recovered_partitions"],
            "back_in_isrs_s": reached, "isrs_without_it_at_the_end": round((1 - back) * len(partitions))}


def controlled_shutdown(cluster, zk, broker_id: int, partitions: list[TopicPartition]) -> dict:
    """The controller asked as the broker asks it (Kafka's figure: its leaderships moved away), then the broker
    shut down the controlled way (it asks again, finds nothing left to move, and closes)."""
    led = sum(r.state.leader == broker_id for r in zk.get_partition_states(partitions).values())
    controller_id, _ = cluster.wait_for_controller(zk)
    epoch = ray.get(cluster.broker_actor(broker_id).info.remote())["broker_epoch"]
    start = time.perf_counter()
    remaining = ray.get(cluster.controller_actor(controller_id).controlled_shutdown.remote(broker_id, epoch, 600))
    moved = time.perf_counter() - start
    result = cluster.controlled_shutdown(broker_id)
    return {"broker": broker_id, "partitions_led": led, "leaderships_moved_s": round(moved, 3),
            "still_led_after_the_first_ask": remaining if isinstance(remaining, int) else len(remaining),
            "total_s": round(time.perf_counter() - start, 3)} | result


def run(connect: str, server, n: int, per_topic: int, load_partitions: int, load_rate: float, session_timeout_ms: int,
        restart_timeout_s: float, warm_standby: bool, emit) -> None:
    start = time.perf_counter()
    cluster, zk = new_cluster(connect, BROKERS, session_timeout_ms=session_timeout_ms, warm_standby=warm_standby)
    emit("start", {"total_s": round(time.perf_counter() - start, 2)})
    load = None
    try:
        start = time.perf_counter()
        topics = bench_topics(n, per_topic)
        for topic, size in topics.items():
            admin.create_topic(zk, topic, size, 3)
        cluster.wait_for_metadata(lambda m: len(m["partitions"]) == n, timeout=3600,
                                  interval=max(LOOK_S, n / 20_000))  # a look ships N partitions three times
        emit("create", {"total_s": round(time.perf_counter() - start, 2), "topics": len(topics)})
        partitions = [TopicPartition(t, i) for t, size in topics.items() for i in range(size)]
        if load_rate > 0:
            load = LoadGenerator.remote(0, cluster.config, partitions[:load_partitions], load_rate, 100, -1)
            ray.get(load.start.remote())
            poll(lambda: ray.get(load.stats.remote())["acked"] >= load_rate * 3, 120, "the load to flow")
        emit("floors", floors(zk, partitions))
        controller_id, _ = cluster.wait_for_controller(zk)
        emit("memory", memory(cluster, controller_id, connect, server, n))
        emit("controller_failover", controller_failover(cluster, zk), load)
        controller_id, _ = cluster.wait_for_controller(zk)
        victim, third = [b for b in BROKERS if b != controller_id]
        emit("broker_failure", broker_failure(cluster, zk, victim), load)
        if restart_timeout_s > 0:
            emit("broker_restart", broker_restart(cluster, zk, victim, partitions, restart_timeout_s), load)
        emit("controlled_shutdown", controlled_shutdown(cluster, zk, third, partitions), load)
    finally:
        if load is not None:
            ray.get(load.stop.remote())
            ray.kill(load)
        start = time.perf_counter()
        cluster.stop(delete_logs=True)
        zk.close()
        emit("teardown", {"total_s": round(time.perf_counter() - start, 2)})


class ZooKeeperWatch:
    """What the server went through since the last look: sessions it expired (`mntr`) and its garbage
    collector's pauses (gc.log): a pause longer than a session's timeout ends sessions."""

    PAUSE = re.compile(r"GC\(\d+\) Pause.* ([\d.]+)ms$")

    def __init__(self, server):
        """`server`: the launcher of the server this run started (None: an external one, not watched)."""
        self.server, self.pauses_seen = server, 0
        self.expired = self._expired() if server is not None else 0

    def _expired(self) -> int:
        return int(zookeeper_mntr(self.server.connect_string)["zk_stale_sessions_expired"])

    def since_last(self) -> dict:
        if self.server is None:
            return {}
        now = self._expired()  # one look: two could count a session expired between them in neither
        expired, self.expired = now - self.expired, now
        pauses = [float(m.group(1)) for line in (self.server.base_dir / "gc.log").read_text().splitlines()
                  if (m := self.PAUSE.search(line))]
        new, self.pauses_seen = pauses[self.pauses_seen:], len(pauses)
        return {"zk_sessions_expired": expired, "zk_gc_pauses": len(new),
                "zk_gc_max_pause_ms": max(new, default=0.0), "zk_gc_pause_total_ms": round(sum(new), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--partitions-per-topic", type=int, default=25_000)
    parser.add_argument("--load-partitions", type=int, default=300)
    parser.add_argument("--load-rate", type=float, default=0, help="acks=all records/s (0: idle)")
    parser.add_argument("--session-timeout-ms", type=int, default=ClusterConfig.model_fields["zk_session_timeout_ms"].default,
                        help="zookeeper.session.timeout.ms of the brokers and controllers (Kafka's default)")
    parser.add_argument("--restart-timeout-s", type=float, default=300,
                        help="how long the killed broker's return is followed (0: it stays dead, and the "
                             "controlled shutdown leaves one broker)")
    parser.add_argument("--warm-standby", action=argparse.BooleanOptionalAction, default=False,
                        help="the controller candidates' warm standby (off: Kafka's failover, reading everything)")
    parser.add_argument("--zk-heap-mb", type=int, default=None, help="the embedded ZooKeeper server's heap")
    parser.add_argument("--out", type=Path, default=None, help="also append the rows to this JSON-lines file")
    args = parser.parse_args()
    with embedded_zookeeper_and_ray(zk_heap_mb=args.zk_heap_mb) as env:
        machine = {"machine": f"{platform.node()} {platform.machine()}", "cpus": ray.cluster_resources().get("CPU")}
        watch = ZooKeeperWatch(env.zk_server)
        for n in args.partitions:
            def emit(scenario: str, row: dict, load=None) -> None:
                row = {"scenario": scenario, "partitions": n, "load_rate": args.load_rate,
                       "warm_standby": args.warm_standby} | row | \
                    watch.since_last() | machine
                if load is not None:
                    stats = ray.get(load.stats.remote())
                    row |= {"load_acked": stats["acked"], "load_errors": stats["errors"]}
                line = json.dumps(row)
                print(line, flush=True)
                if args.out:
                    with args.out.open("a") as f:
                        f.write(line + "\n")
            run(env.connect, env.zk_server, n, args.partitions_per_topic, args.load_partitions, args.load_rate,
                args.session_timeout_ms, args.restart_timeout_s, args.warm_standby, emit)


if __name__ == "__main__":
    main()
