"""The group coordinator's failover (issue 32): three consumers in a group beside a producing load; the
broker that coordinates the group is SIGKILLed (the Ray detector on), then started again once measured.

    .venv/bin/python -m benchmarks.bench_group_failover [--kills 5] [--partitions 12] [--rate 300]

Per kill, from the fault, on one clock: the group's offsets partition led again (its new leader's
LeaderAndIsr applied), the group loaded by the new coordinator, a FindCoordinator answered with it, the
members rejoined and synced (when the move made the group rebalance), the group's next commit stored,
and, per partition of the topic, the first record sent after the fault that the group consumed. Beside
them, same run: the producers' recovery, per partition the first acknowledgement of a record sent after
the fault. The brokers' steps are read from their run-directory events (broker_events.jsonl).
Defaults are Kafka's and librdkafka's: a 50-partition, 3-replica __consumer_offsets, the consumers'
session.timeout.ms and heartbeat.interval.ms as librdkafka sets them, so that the figures are a user's.
"members rejoined" is empty when the move needed no rebalance: the new coordinator loaded the group
Stable, with its members and generation, and their heartbeats went on.
"""
from __future__ import annotations

import argparse
import json
import platform
import tempfile
import threading
import time
import uuid
from pathlib import Path

import ray

GROUP, TOPIC = "bench-group", "orders"


def now_ms() -> float:
    return time.time() * 1000


class Load(threading.Thread):
    """A producer (acks=all) sending `rate` records a second over the partitions; each value is its send time."""

    def __init__(self, servers: str, partitions: int, rate: float):
        from confluent_kafka import Producer

        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 1, "retry.backoff.ms": 20, "retry.backoff.max.ms": 100})
        self.partitions, self.rate = partitions, rate
        self.acks: list[tuple[int, float, float]] = []  # (partition, sent, acked)
        self.stopping = threading.Event()

    def run(self) -> None:
        sent, started = 0, time.monotonic()
        while not self.stopping.is_set():
            while sent < self.rate * (time.monotonic() - started):
                stamp = now_ms()
                self.producer.produce(TOPIC, json.dumps(stamp).encode(), partition=sent % self.partitions,
                                      on_delivery=lambda err, msg, s=stamp: err is None and self.acks.append(
                                          (msg.partition(), s, now_ms())))
                sent += 1
            self.producer.poll(0.005)
        self.producer.flush(30)


class Member(threading.Thread):
    """A group member (librdkafka, Kafka's defaults but for a quick auto-commit): when it read what."""

    def __init__(self, servers: str, index: int, consumed: list):
        from confluent_kafka import Consumer

        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": servers, "group.id": GROUP, "client.id": f"m{index}",
                                  "auto.offset.reset": "latest", "auto.commit.interval.ms": 200})
        self.consumer.subscribe([TOPIC])
        self.consumed, self.stopping = consumed, threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for msg in self.consumer.consume(1000, timeout=0.1):
                if not msg.error():
                    self.consumed.append((msg.partition(), float(msg.value()), now_ms()))
        self.consumer.close()


def broker_events(run_dir: Path) -> list[dict]:
    path = run_dir / "broker_events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def first_after(rows, since: float, key=lambda r: True) -> float | None:
    found = [r["ts_ms"] for r in rows if r["ts_ms"] >= since and key(r)]
    return min(found) - since if found else None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> None:
    from actors.broker.group_records import GROUP_METADATA_TOPIC, partition_for
    from actors.cluster import LocalCluster
    from actors.config import ClusterConfig
    from actors.recording import RunRecorder
    from actors.runtime import poll
    from coordination import admin, zkdata
    from coordination.zkdata import TopicPartition
    from jobs.local import embedded_zookeeper_and_ray, fresh_chroot

    parser = argparse.ArgumentParser(prog="bench_group_failover", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--rate", type=float, default=300)
    parser.add_argument("--horizon-s", type=float, default=30)
    args = parser.parse_args(argv)
    rows, per_partition, producers = [], [], []
    run_dir = Path(tempfile.mkdtemp(prefix="bench-group-failover-"))
    with embedded_zookeeper_and_ray() as environment:
        namespace = f"bench-{uuid.uuid4().hex[:8]}"
        config = ClusterConfig(zk_connect=fresh_chroot(environment.connect, "bench-group"), namespace=namespace,
                               zk_session_timeout_ms=6000, recorder="bench-recorder")
        recorder = RunRecorder.options(name="bench-recorder", namespace=namespace).remote(str(run_dir))
        zk = config.zk_client().start()
        cluster = LocalCluster(config, [1, 2, 3]).start()
        cluster.wait_until_ready(zk)
        admin.create_topic(zk, TOPIC, args.partitions, 3, {"min.insync.replicas": "2"})
        cluster.wait_for_metadata(lambda m: sum(tp.topic == TOPIC for tp in m["partitions"]) == args.partitions)
        servers = cluster.bootstrap_servers()
        load = Load(servers, args.partitions, args.rate)
        consumed: list = []
        members = [Member(servers, i, consumed) for i in range(3)]
        for thread in (load, *members):
            thread.start()
        offsets_tp = None
        try:
            for kill in range(1, args.kills + 1):
                poll(lambda: len({p for p, _, t in consumed if t > now_ms() - 2000}) == args.partitions, 120,
                     "the group consuming every partition")
                if offsets_tp is None:
                    partitions = len(zk.get_znode(zkdata.TopicZNode, zkdata.topic_path(GROUP_METADATA_TOPIC)).assignment())
                    offsets_tp = TopicPartition(GROUP_METADATA_TOPIC, partition_for(GROUP, partitions))
                victim = zk.get_partition_states([offsets_tp])[offsets_tp].state.leader  # the group's coordinator
                fault = cluster.kill_broker(victim)
                print(f"kill {kill}: SIGKILL of broker {victim}, the group's coordinator", flush=True)
                time.sleep(args.horizon_s)
                events = broker_events(run_dir)
                key = f"{offsets_tp.topic}-{offsets_tp.partition}"
                elected = first_after(events, fault, lambda r: r["kind"] == "leader_and_isr" and key in
                                      r.get("leaders", {}))
                loaded = first_after(events, fault, lambda r: r["kind"] == "group_loaded" and r["partition"] == key)
                found = first_after(events, fault, lambda r: r["kind"] == "coordinator_found" and
                                    r["group"] == GROUP and r["replica"] != victim)
                rejoined = first_after(events, fault, lambda r: r["kind"] == "group_synced" and r["group"] == GROUP)
                firsts = {}
                for p, sent, at in consumed:
                    if sent >= fault and p not in firsts:
                        firsts[p] = at - fault
                acked = {}
                for p, sent, at in load.acks:
                    if sent >= fault and p not in acked:
                        acked[p] = at - fault
                per_partition += list(firsts.values())
                producers += list(acked.values())
                rows.append((kill, victim, elected, loaded, found, rejoined,
                             max(firsts.values()) if len(firsts) == args.partitions else None,
                             max(acked.values()) if len(acked) == args.partitions else None))
                cluster.start_broker(victim)
                poll(lambda: all(victim in s.state.isr for s in zk.get_partition_states(
                    [TopicPartition(TOPIC, p) for p in range(args.partitions)]).values()), 120,
                     f"broker {victim} back in every ISR")
        finally:
            load.stopping.set()
            for m in members:
                m.stopping.set()
            for thread in (load, *members):
                thread.join(30)
            cluster.stop(delete_logs=True)
            zk.close()
            ray.get(recorder.close.remote())

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}, python "
          f"{platform.python_version()}, ray {ray.__version__}")
    print(f"{args.partitions} partitions, {args.rate:.0f} records/s, 3 consumers, 3 brokers, Ray detector on; "
          "ms after the SIGKILL of the group's coordinator")
    print("| kill | coordinator killed | offsets partition led again | group loaded | FindCoordinator answered | "
          "members rejoined | every partition consumed again | every partition acknowledged again |")
    print("|---|---|---|---|---|---|---|---|")
    for kill, victim, *phases in rows:
        print(f"| {kill} | {victim} | " + " | ".join(ms(v) for v in phases) + " |")
    if per_partition and producers:
        print(f"fault -> first record consumed, per partition: p50 {percentile(per_partition, 50):,.0f} ms, "
              f"p99 {percentile(per_partition, 99):,.0f} ms ({len(per_partition)} partitions x kills)")
        print(f"fault -> first acknowledgement, per partition: p50 {percentile(producers, 50):,.0f} ms, "
              f"p99 {percentile(producers, 99):,.0f} ms")
    print(f"run directory: {run_dir}")


if __name__ == "__main__":
    main()
