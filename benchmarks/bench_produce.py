"""Produce benchmark: throughput and latency of the replication data plane, beside the raw Ray rate.

    .venv/bin/python -m benchmarks.bench_produce [--seconds 30] [--producers 4] [--batch 1000] [--partitions 6]

A topic with RF 3 on 3 brokers; `--producers` load-generator actors each send batches of
`--batch` 100-byte records in a loop (one synchronous `Producer.send` at a time, the
records spread over the partitions), for acks=1 and then acks=all (min.insync.replicas=2).
A consumer actor reads every partition meanwhile. Figures per mode:
- throughput: acknowledged records/s and MB/s of values;
- produce latency: send -> acknowledgement of a batch, p50/p99;
- end-to-end latency: a record's producer timestamp -> the consumer holding it, p50/p99
  (consumers read below the high watermark, so this includes replication);
- resident memory of each broker actor at the end.
Floor, same run: the same producers making plain Ray calls with a request of the same size to an
actor that only answers (records/s through Ray alone).
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

from actors.broker.records import Record
from actors.cluster import LocalCluster
from actors.config import BrokerConfig, ClusterConfig
from actors.data_protocol import ProducePartition, ProducePartitions, ProduceRequest, Records
from coordination import admin
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition
from jobs.local import embedded_zookeeper_and_ray, fresh_chroot

VALUE = b"x" * 100


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 2) if values else float("nan")


@ray.remote(num_cpus=0)
class LoadProducer:
    def run(self, namespace: str, bootstrap: list[int], topic: str, batch: int, seconds: float, acks: int) -> dict:
        from actors.clients.producer import Producer
        producer = Producer(namespace, bootstrap, acks=acks)
        latencies, sent = [], 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            start = time.perf_counter()
            producer.send(topic, [VALUE] * batch)
            latencies.append((time.perf_counter() - start) * 1000)
            sent += batch
        return {"records": sent, "latencies_ms": latencies, "retries": producer.retries}

    def raw(self, sink, batch: int, seconds: float) -> int:
        """Plain Ray calls carrying a produce request of the same size, to an actor that only answers."""
        request = ProduceRequest(acks=1, partitions=ProducePartitions(
            [ProducePartition("t", 0, Records(Record(-1, -1, 0, None, VALUE) for _ in range(batch)))]))
        sent, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            ray.get(sink.take.remote(request))
            sent += batch
        return sent


@ray.remote(num_cpus=0)
class Sink:
    def take(self, request) -> int:
        return len(request.partitions)


@ray.remote(num_cpus=0)
class LoadConsumer:
    def run(self, namespace: str, bootstrap: list[int], partitions: list[TopicPartition], seconds: float) -> dict:
        from actors.clients.consumer import Consumer
        consumer = Consumer(namespace, bootstrap, max_wait_ms=100)
        consumer.assign(partitions)
        latencies, count = [], 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            now = time.time() * 1000
            got = consumer.poll()
            count += len(got)
            latencies += [now - r.timestamp_ms for _, r in got[::50]]  # a sample: every 50th record
        return {"records": count, "latencies_ms": latencies}


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return round(kb / 1024, 1)


def run_mode(cluster: LocalCluster, topic: str, partitions: int, args, acks: int) -> dict:
    ns, bootstrap = cluster.config.namespace, list(cluster.brokers)
    producers = [LoadProducer.remote() for _ in range(args.producers)]
    consumer = LoadConsumer.remote()
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumed = consumer.run.remote(ns, bootstrap, tps, args.seconds + 3)
    results = ray.get([p.run.remote(ns, bootstrap, topic, args.batch, args.seconds, acks) for p in producers])
    consumed = ray.get(consumed)
    records = sum(r["records"] for r in results)
    latencies = [x for r in results for x in r["latencies_ms"]]
    for actor in producers + [consumer]:
        ray.kill(actor)
    return {"acks": "all" if acks == -1 else acks, "records": records,
            "records_per_s": round(records / args.seconds), "mb_per_s": round(records * len(VALUE) / args.seconds / 1e6, 2),
            "produce_latency_ms_p50": percentile(latencies, 0.5), "produce_latency_ms_p99": percentile(latencies, 0.99),
            "e2e_latency_ms_p50": percentile(consumed["latencies_ms"], 0.5),
            "e2e_latency_ms_p99": percentile(consumed["latencies_ms"], 0.99),
            "consumed": consumed["records"], "retries": sum(r["retries"] for r in results),
            "broker_rss_mb": {b: rss_mb(ray.get(h.info.remote())["pid"]) for b, h in cluster.brokers.items()}}


def raw_floor(args) -> dict:
    sink = Sink.remote()
    producers = [LoadProducer.remote() for _ in range(args.producers)]
    sent = sum(ray.get([p.raw.remote(sink, args.batch, args.seconds) for p in producers]))
    for actor in producers + [sink]:
        ray.kill(actor)
    return {"raw_ray_records_per_s": round(sent / args.seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    with embedded_zookeeper_and_ray() as env:
        connect = env.connect
        print(json.dumps({"machine": f"{platform.node()} {platform.machine()}", "cpus": os.cpu_count(),
                          "producers": args.producers, "batch": args.batch, "partitions": args.partitions,
                          "seconds": args.seconds}), flush=True)
        print(json.dumps(raw_floor(args)), flush=True)
        config = ClusterConfig(zk_connect=fresh_chroot(connect, "bench"), namespace=f"bench-{uuid.uuid4().hex[:6]}",
                               broker=BrokerConfig(min_insync_replicas=2))
        zk = config.zk_client().start()
        cluster = LocalCluster(config, [1, 2, 3]).start()
        try:
            cluster.wait_until_ready(zk)
            for acks in (1, -1):
                topic = f"load-acks{acks}"
                admin.create_topic(zk, topic, args.partitions, 3)
                cluster.wait_for_metadata(lambda m: sum(tp.topic == topic for tp in m["partitions"]) == args.partitions)
                print(json.dumps(run_mode(cluster, topic, args.partitions, args, acks)), flush=True)
        finally:
            cluster.stop(delete_logs=True)
            zk.close()


if __name__ == "__main__":
    main()
