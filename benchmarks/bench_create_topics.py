"""CreateTopics of a large topic through the admin API against the same through `kray topics` (ZooKeeper
written directly), in the same run on the same cluster (issue 32).

    .venv/bin/python -m benchmarks.bench_create_topics [--partitions 1000] [--rounds 3]

Both ways end the same way, so both are timed to the same point: the controller's broker's metadata
cache has a leader for every partition (what Kafka's DelayedCreatePartitions waits for before the API
answers). Through the API: confluent-kafka's AdminClient.create_topics until its future resolves (the
request goes to the controller's broker, which validates, writes the topic's znodes and waits). Through
`kray topics`: coordination.admin.create_topic (the tool's function) then polling that cache. The
rounds alternate the two ways; each topic is deleted (and gone from every broker) before the next round.
The baseline, same run: the raw ZooKeeper rate of as many small znodes as partitions, written in pipelined
multis of kray's MULTI_BATCH.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time
import uuid

import ray


def wait_for_leaders(cluster, zk, topic: str, partitions: int, timeout: float = 300.0) -> None:
    from actors.runtime import poll

    def ready() -> bool:
        cache = ray.get(cluster.broker_actor(zk.get_controller_id()).metadata.remote())
        return sum(tp.topic == topic and v[0] >= 0 for tp, v in cache["partitions"].items()) == partitions
    poll(ready, timeout, f"{topic}'s leaders in the controller's broker's cache", interval=0.01)


def delete_and_wait(cluster, zk, topic: str) -> None:
    from actors.runtime import poll
    from coordination import admin

    admin.delete_topic(zk, topic)
    poll(lambda: topic not in zk.get_all_topics(), 300, f"{topic} deleted")
    poll(lambda: not any(tp.topic == topic for m in ray.get([h.metadata.remote() for h in cluster.brokers.values()])
                         for tp in m["partitions"]), 120, f"{topic} gone from every cache")


def zk_multi_rate(zk, count: int) -> float:
    """znodes a second for multis creating `count` small znodes, MULTI_BATCH to a multi (more in one would
    pass jute.maxbuffer, 1 MB, and ZooKeeper would drop the connection) and all sent before the first answer,
    as the controller writes; then as many deleting them."""
    from coordination.zkclient import MULTI_BATCH

    def multis(op) -> None:
        pending = []
        for start in range(0, count, MULTI_BATCH):
            txn = zk.kazoo.transaction()
            for i in range(start, min(count, start + MULTI_BATCH)):
                op(txn, f"{base}/{i}")
            pending.append(txn.commit_async())
        for sent in pending:
            sent.get()

    base = f"/bench-multi-{uuid.uuid4().hex[:8]}"
    zk.kazoo.create(base)
    started = time.monotonic()
    multis(lambda txn, path: txn.create(path, b"x" * 40))
    elapsed = time.monotonic() - started
    multis(lambda txn, path: txn.delete(path))
    zk.kazoo.delete(base)
    return count / elapsed


def main(argv: list[str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from actors.cluster import LocalCluster
    from actors.config import ClusterConfig, ControllerConfig
    from coordination import admin
    from jobs.experiments.local import embedded_zookeeper_and_ray, fresh_chroot

    parser = argparse.ArgumentParser(prog="bench_create_topics", description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    with embedded_zookeeper_and_ray() as environment:
        config = ClusterConfig(zk_connect=fresh_chroot(environment.connect, "bench-create"),
                               namespace=f"bench-{uuid.uuid4().hex[:8]}", zk_session_timeout_ms=6000,
                               controller=ControllerConfig(auto_leader_rebalance_enable=False))
        zk = config.zk_client().start()
        cluster = LocalCluster(config, [1, 2, 3]).start()
        cluster.wait_until_ready(zk)
        # the API answers once every leader is known: at tens of thousands of partitions longer than librdkafka's
        # default 60 s for a request
        client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers(), "socket.timeout.ms": 300_000})
        try:
            for r in range(args.rounds):
                for way in ("api", "kray topics"):
                    topic = f"big-{r}-{way.replace(' ', '-')}"
                    baseline = zk_multi_rate(zk, args.partitions)
                    started = time.monotonic()
                    if way == "api":
                        futures = client.create_topics([NewTopic(topic, args.partitions, 3)], operation_timeout=290,
                                                       request_timeout=300)
                        futures[topic].result(timeout=330)
                    else:
                        admin.create_topic(zk, topic, args.partitions, 3)
                        wait_for_leaders(cluster, zk, topic, args.partitions)
                    elapsed = time.monotonic() - started
                    wait_for_leaders(cluster, zk, topic, args.partitions, timeout=5)  # the API's answer meant this
                    rows.append((r + 1, way, elapsed, baseline))
                    delete_and_wait(cluster, zk, topic)
        finally:
            cluster.stop(delete_logs=True)
            zk.close()
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}, python "
          f"{platform.python_version()}, ray {ray.__version__}")
    print(f"| round | way | {args.partitions} partitions, RF 3: s to leaders in the controller's cache | "
          "ZooKeeper multi, same round: znodes/s |")
    print("|---|---|---|---|")
    for r, way, elapsed, baseline in rows:
        print(f"| {r} | {way} | {elapsed:.2f} | {baseline:,.0f} |")
    api = statistics.median(e for _, w, e, _ in rows if w == "api")
    direct = statistics.median(e for _, w, e, _ in rows if w != "api")
    print(f"median: API {api:.2f} s, kray topics {direct:.2f} s, ratio {api / direct:.2f}")


if __name__ == "__main__":
    main()
