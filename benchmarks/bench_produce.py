"""Produce benchmark: a real Kafka client (confluent-kafka, librdkafka) against kray's brokers, beside a
floor from the same run.

    .venv/bin/python -m benchmarks.bench_produce [--seconds 20] [--producers 2] [--partitions 6]
                                                 [--rate 2000] [--rate-partitions 1000] [--modes throughput latency]

throughput: a topic of `--partitions` partitions, RF 3, min.insync.replicas=2, on 3 brokers; `--producers`
producer actors send 100-byte records as fast as librdkafka's queue allows (acks=all, idempotent,
linger.ms=5), round-robin over the partitions, for `--seconds`: acknowledged records/s, and produce
latency (librdkafka's per-record send -> acknowledgement) p50/p99.

latency: one producer at `--rate` records/s round-robin over `--rate-partitions` partitions (RF 3, acks=all,
idempotent): produce latency p50/p99 and each broker's CPU over the window (% of one core).

Floor, same run, same producers: a bare asyncio server on loopback (kray's SocketServer and
kafka-python's message classes, as the brokers use them) that decodes the same produce frames and
answers at once: no log, no replication. The ratio to it is the cost of kray's data plane itself.

Per request, latency mode: each broker's requests a second (served by its listener, and the follower
fetches it sends, taken as a third of all follower fetches) and its CPU per request, beside a second floor
from the same run: the least a request costs in CPython here, a uvloop protocol answering a fixed
frame to a request/response client at the brokers' request rate (no decoding, nothing stored).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import struct
import threading
import time
import uuid

import psutil
import ray

from actors.cluster import LocalCluster
from actors.config import BrokerConfig, ClusterConfig
from coordination import admin
from jobs.experiments.local import embedded_zookeeper_and_ray, fresh_chroot

VALUE = b"x" * 100


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 2) if values else float("nan")


@ray.remote(num_cpus=0)
class LoadProducer:
    """confluent-kafka in its own process: as fast as the queue allows, or at a fixed rate."""

    def run(self, servers: str, topic: str, partitions: int, seconds: float, rate: float = 0) -> dict:
        import confluent_kafka

        producer = confluent_kafka.Producer({"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True,
                                             "linger.ms": 5, "queue.buffering.max.messages": 500_000,
                                             "log_level": 3})
        latencies, acked, errors = [], [0], []

        def delivered(err, msg) -> None:
            if err is not None:
                errors.append(err.name())
                return
            acked[0] += 1
            if acked[0] % 10 == 0 or rate:
                latencies.append(msg.latency() * 1000)

        producer.list_topics(topic, timeout=30)  # connected and the metadata known before the clock starts
        sent, started = 0, time.monotonic()
        while (now := time.monotonic()) - started < seconds:
            if rate and sent >= rate * (now - started):
                producer.poll(0.001)
                continue
            try:
                producer.produce(topic, VALUE, partition=sent % partitions, on_delivery=delivered)
                sent += 1
            except BufferError:
                producer.poll(0.01)
                continue
            if sent % 1000 == 0:
                producer.poll(0)
        window_acked = acked[0]
        producer.flush(60)
        return {"acked": window_acked, "latencies_ms": latencies, "errors": len(errors)}


@ray.remote(num_cpus=0, max_concurrency=2)
class FloorBroker:
    """The floor: a listener that answers Metadata (itself leading every partition), InitProducerId and
    Produce (at once, offsets counted) and stores nothing."""

    def __init__(self, topic: str, partitions: int):
        from actors.broker.network.network import SocketServer

        self.topic, self.partitions, self.offsets = topic, partitions, {}
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server = SocketServer(self.handle, "127.0.0.1", 0)
        self.port = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result()

    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pid(self) -> int:
        return os.getpid()

    async def handle(self, ctx, request):
        from kafka.protocol.metadata import MetadataResponse
        from kafka.protocol.producer import InitProducerIdResponse, ProduceResponse

        if ctx.api_key == 3:
            R = MetadataResponse
            P = R.MetadataResponseTopic.MetadataResponsePartition
            return R(throttle_time_ms=0, brokers=[R.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=self.port)],
                     cluster_id="floor", controller_id=1, topics=[R.MetadataResponseTopic(
                         error_code=0, name=self.topic, is_internal=False, partitions=[P(
                             error_code=0, partition_index=p, leader_id=1, leader_epoch=0, replica_nodes=[1],
                             isr_nodes=[1], offline_replicas=[]) for p in range(self.partitions)])])
        if ctx.api_key == 22:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=1, producer_epoch=0)
        R = ProduceResponse
        out = []
        for t in request.topic_data:
            parts = []
            for p in t.partition_data:
                from actors.broker.log.batches import read_header

                base = self.offsets.get(p.index, 0)
                self.offsets[p.index] = base + read_header(p.records).records_count
                parts.append(R.TopicProduceResponse.PartitionProduceResponse(
                    index=p.index, error_code=0, base_offset=base, log_append_time_ms=-1, log_start_offset=0,
                    record_errors=[], error_message=None))
            out.append(R.TopicProduceResponse(name=t.name, partition_responses=parts))
        return R(responses=out, throttle_time_ms=0)


class FixedAnswer(asyncio.Protocol):
    """Frames requests and answers each at once with a fixed 60-byte frame that starts with the request's
    correlation id (a Kafka request header's, bytes 8-12 with the size): the least a request costs here."""

    def connection_made(self, transport) -> None:
        self.transport, self.buffer = transport, bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            end = 4 + struct.unpack_from(">i", self.buffer)[0]
            if len(self.buffer) < end:
                break
            answer = struct.pack(">i", 60) + self.buffer[8:12] + bytes(56)
            del self.buffer[:end]
            self.transport.write(answer)


@ray.remote(num_cpus=0)
class ExchangeFloor:
    """The least a request costs here: a uvloop protocol that frames requests and answers each at once."""

    def __init__(self):
        import uvloop

        self.loop = uvloop.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        server = asyncio.run_coroutine_threadsafe(self.loop.create_server(FixedAnswer, "127.0.0.1", 0),
                                                  self.loop).result()
        self.port = server.sockets[0].getsockname()[1]

    def address(self) -> tuple[int, int]:
        return os.getpid(), self.port


@ray.remote(num_cpus=0)
def exchange(port: int, rate: float, seconds: float) -> int:
    """Requests of 120 bytes, one at a time, at `rate` a second; how many were answered."""
    async def run() -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        frame, started, n = struct.pack(">i", 120) + bytes(120), time.monotonic(), 0
        while (now := time.monotonic()) - started < seconds:
            if n >= rate * (now - started):
                await asyncio.sleep(0.0005)
                continue
            writer.write(frame)
            await reader.readexactly(struct.unpack(">i", await reader.readexactly(4))[0])
            n += 1
        return n
    return asyncio.run(run())


def exchange_floor(rate: float, seconds: float) -> dict:
    """CPU per request of the ExchangeFloor at `rate` requests a second."""
    floor = ExchangeFloor.remote()
    pid, port = ray.get(floor.address.remote())
    before = cpu_seconds({0: pid})[0]
    answered = ray.get(exchange.remote(port, rate, seconds))
    used = cpu_seconds({0: pid})[0] - before
    ray.kill(floor)
    return {"requests_per_s": round(answered / seconds), "cpu_pct_of_a_core": round(100 * used / seconds, 1),
            "cpu_us_per_request": round(1e6 * used / max(1, answered), 1)}


def request_counts(cluster: LocalCluster) -> dict[int, dict[str, int]]:
    return {b: ray.get(h.info.remote())["requests"] for b, h in cluster.brokers.items()}


def per_request(before: dict[int, dict[str, int]], after: dict[int, dict[str, int]], kray: dict) -> dict:
    """Each broker's requests a second (served, and follower fetches sent: a third of all) and CPU per request."""
    delta = {b: {k: v - before[b].get(k, 0) for k, v in after[b].items()} for b in after}
    fetches_sent = sum(d.get("FetchFollower", 0) for d in delta.values()) / len(delta)
    out, seconds = {}, kray["elapsed_s"]
    for b, d in delta.items():
        rate = (sum(d.values()) + fetches_sent) / seconds
        out[b] = {"requests_per_s": round(rate), "served_per_s": {k: round(v / seconds) for k, v in d.items() if v},
                  "cpu_us_per_request": round(1e4 * kray["cpu_pct_of_a_core"][b] / rate, 1)}
    return out


def cpu_seconds(pids: dict[int, int]) -> dict[int, float]:
    out = {}
    for key, pid in pids.items():
        times = psutil.Process(pid).cpu_times()
        out[key] = times.user + times.system
    return out


def drive(servers: str, topic: str, partitions: int, producers: int, seconds: float, rate: float,
          pids: dict[int, int]) -> dict:
    actors = [LoadProducer.remote() for _ in range(producers)]
    before, started = cpu_seconds(pids), time.monotonic()
    results = ray.get([a.run.remote(servers, topic, partitions, seconds, rate / producers) for a in actors])
    elapsed, after = time.monotonic() - started, cpu_seconds(pids)
    for a in actors:
        ray.kill(a)
    latencies = [x for r in results for x in r["latencies_ms"]]
    return {"records_per_s": round(sum(r["acked"] for r in results) / seconds),
            "latency_ms_p50": percentile(latencies, 0.5), "latency_ms_p99": percentile(latencies, 0.99),
            "errors": sum(r["errors"] for r in results), "elapsed_s": round(elapsed, 2),
            "cpu_pct_of_a_core": {k: round(100 * (after[k] - before[k]) / elapsed, 1) for k in pids}}


def measure(cluster: LocalCluster, zk, name: str, partitions: int, producers: int, seconds: float, rate: float) -> dict:
    admin.create_topic(zk, name, partitions, 3)
    cluster.wait_for_metadata(lambda m: sum(tp.topic == name and v[0] >= 0 for tp, v in m["partitions"].items())
                              == partitions, timeout=120)
    floor = FloorBroker.remote(name, partitions)
    floor_result = drive(ray.get(floor.address.remote()), name, partitions, producers, seconds, rate,
                         {0: ray.get(floor.pid.remote())})
    ray.kill(floor)
    pids = {b: ray.get(h.info.remote())["pid"] for b, h in cluster.brokers.items()}
    counts = request_counts(cluster)
    kray = drive(cluster.bootstrap_servers(), name, partitions, producers, seconds, rate, pids)
    out = {"floor": floor_result, "kray": kray,
           "ratio_to_floor": round(kray["records_per_s"] / max(1, floor_result["records_per_s"]), 3)}
    if rate:  # the cost of a request, against the least a request costs here
        out["kray_per_request"] = per_request(counts, request_counts(cluster), kray)
        busiest = max(r["requests_per_s"] for r in out["kray_per_request"].values())
        out["exchange_floor"] = exchange_floor(busiest, seconds)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--rate-partitions", type=int, default=1000)
    parser.add_argument("--modes", nargs="+", default=["throughput", "latency"], choices=["throughput", "latency"])
    args = parser.parse_args()
    with embedded_zookeeper_and_ray() as env:
        print(json.dumps({"machine": f"{platform.node()} {platform.machine()}", "cpus": os.cpu_count(),
                          **{k: v for k, v in vars(args).items()}}), flush=True)
        config = ClusterConfig(zk_connect=fresh_chroot(env.connect, "bench"), namespace=f"bench-{uuid.uuid4().hex[:6]}",
                               broker=BrokerConfig(min_insync_replicas=2))
        zk = config.zk_client().start()
        cluster = LocalCluster(config, [1, 2, 3]).start()
        try:
            cluster.wait_until_ready(zk)
            if "throughput" in args.modes:
                print(json.dumps({"mode": "throughput", **measure(cluster, zk, "throughput", args.partitions,
                                                                  args.producers, args.seconds, 0)}), flush=True)
            if "latency" in args.modes:
                print(json.dumps({"mode": f"latency at {args.rate:.0f} records/s", **measure(
                    cluster, zk, "latency", args.rate_partitions, 1, args.seconds, args.rate)}), flush=True)
        finally:
            cluster.stop(delete_logs=True)
            zk.close()


if __name__ == "__main__":
    main()
