"""The data plane alone: three brokers' replication in one process, no Ray and no ZooKeeper (issue 42).

    .venv/bin/python -m benchmarks.bench_data_plane [--partitions 1000] [--rate 2000] [--seconds 10]
                                                    [--repeats 3] [--profile]

A leader (a ReplicaManager behind KafkaApis and a SocketServer) and two followers (ReplicaManagers with
their ReplicaFetcherManagers) hold `--partitions` partitions, all in sync, on one uvloop event loop in
this process, over loopback; a client on the same loop sends one-record acks=all ProduceRequests v9
(kray's NetworkClient, pipelined), round robin over random partitions, at `--rate` a second, open loop.
What it prints, per repeat: the CPU this process spent per acknowledged record, the exchanges per record
(produces, and the followers' fetch rounds), the CPU per exchange, and beside it, from the same run, the
floor: the same client against a protocol that answers a fixed frame, per exchange. Both include the
client's side. With `--profile`, cProfile over one more window: the Python function calls per record
and the functions with the most time of their own.

What it is for: the brokers' Python cost per record without what the cluster adds (Ray's threads, a
process woken per message, the kernel's scheduling of ten processes on two cores), in seconds rather
than minutes, for trying a change; bench_capacity measures the cluster.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import random
import struct
import tempfile
import time

import uvloop

from actors.broker.fetcher import ReplicaFetcherManager
from actors.broker.log.log_config import LogConfig
from actors.broker.metadata_cache import MetadataCache
from actors.broker.network.kafka_apis import KafkaApis
from actors.broker.network.network import NetworkClient, SocketServer
from actors.broker.replica_manager import ReplicaManager
from actors.config import BrokerConfig
from actors.protocol import LeaderAndIsrRequest, PartitionState
from coordination.zkdata import TopicPartition
from tests.integration.conftest import produce_request

BROKERS, LEADER, TOPIC = (1, 2, 3), 1, "t"
CONFIG = BrokerConfig()


def _read_correlation_id(frame: bytes) -> tuple[int, None]:
    return struct.unpack_from(">i", frame)[0], None


class _Client:
    """Produce frames sent open loop at a rate; acknowledged ones counted."""

    def __init__(self, client: NetworkClient, frames: list[bytes]):
        self.client, self.frames, self.acked, self.pending = client, frames, 0, set()

    async def _one(self, i: int) -> None:
        def frame(correlation_id: int) -> bytearray:
            f = bytearray(self.frames[i])
            struct.pack_into(">i", f, 8, correlation_id)  # size, api key, version, then the correlation id
            return f
        await self.client.send_frame(frame, _read_correlation_id)
        self.acked += 1

    async def offer(self, rate: float, seconds: float) -> int:
        started, sent = time.monotonic(), 0
        while (now := time.monotonic()) - started < seconds:
            for _ in range(int((now - started) * rate) - sent):
                task = asyncio.ensure_future(self._one(random.randrange(len(self.frames))))
                self.pending.add(task)
                task.add_done_callback(self.pending.discard)
                sent += 1
            await asyncio.sleep(0.001)
        await asyncio.gather(*self.pending)
        return sent


async def _cluster(partitions: int, log_dir: str):
    tps = [TopicPartition(TOPIC, i) for i in range(partitions)]
    config_for = lambda topic: LogConfig.from_overrides(CONFIG, {})  # noqa: E731
    rms = {b: ReplicaManager(b, f"{log_dir}/{b}", config_for) for b in BROKERS}
    states = [PartitionState(topic=TOPIC, partition=tp.partition, controller_epoch=1, leader=LEADER, leader_epoch=0,
                             isr=BROKERS, zk_version=0, replicas=BROKERS) for tp in tps]
    for rm in rms.values():
        rm.become_leader_or_follower(LeaderAndIsrRequest(controller_id=9, controller_epoch=1, broker_epoch=-1,
                                                         partition_states=states, live_leaders=[]), -1)
    apis = KafkaApis(LEADER, rms[LEADER], MetadataCache(), lambda: "c", lambda: 0)
    server = SocketServer(apis.handle, "127.0.0.1", 0)
    port = await server.start()
    managers = []
    for b in BROKERS[1:]:
        manager = ReplicaFetcherManager(b, CONFIG)
        manager.addresses[LEADER] = ("127.0.0.1", port)
        for tp in tps:
            manager.follow(tp, rms[b].partition(tp), LEADER)
        managers.append(manager)
    frames = []
    for tp in tps:
        request = produce_request(TOPIC, tp.partition, [b"x" * 100], acks=-1)
        request.with_header(correlation_id=0, client_id="bench")
        frames.append(bytes(request.encode(version=9, header=True, framed=True)))
    return server, managers, frames, port


async def _floor(rate: float, seconds: float) -> float:
    """µs of CPU per exchange: the same client against a protocol answering a fixed frame at once."""
    answer = bytearray(struct.pack(">ii", 4, 0))

    class Answer(asyncio.Protocol):
        def connection_made(self, transport) -> None:
            self.transport, self.buffer = transport, bytearray()

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while len(self.buffer) >= 4:
                end = 4 + struct.unpack_from(">i", self.buffer)[0]
                if len(self.buffer) < end:
                    break
                struct.pack_into(">i", answer, 4, struct.unpack_from(">i", self.buffer, 8)[0])
                del self.buffer[:end]
                self.transport.write(bytes(answer))

    server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", 0)
    client = NetworkClient()
    await client.connect("127.0.0.1", server.sockets[0].getsockname()[1])
    load = _Client(client, [struct.pack(">ihhi", 120, 0, 9, 0) + bytes(112)])
    cpu = time.process_time()
    await load.offer(rate, seconds)
    used = time.process_time() - cpu
    client.close()
    server.close()
    return used / load.acked * 1e6


async def main(args) -> None:
    with tempfile.TemporaryDirectory() as log_dir:
        server, managers, frames, port = await _cluster(args.partitions, log_dir)
        client = NetworkClient()
        await client.connect("127.0.0.1", port)
        load = _Client(client, frames)
        await load.offer(args.rate, 2)  # warm: sessions open, every file touched
        print(f"{args.partitions:,} partitions, {args.rate:,} acks=all records/s, {args.seconds} s windows")
        for repeat in range(args.repeats + (1 if args.profile else 0)):
            profile = cProfile.Profile() if repeat == args.repeats else None
            acked_before, requests_before = load.acked, dict(server.requests)
            cpu = time.process_time()
            if profile:
                profile.enable()
            await load.offer(args.rate, args.seconds)
            if profile:
                profile.disable()
            used = time.process_time() - cpu
            records = load.acked - acked_before
            fetches = server.requests["FetchFollower"] - requests_before.get("FetchFollower", 0)
            exchanges = (records + fetches) / records
            if profile:
                stats = pstats.Stats(profile, stream=(out := io.StringIO()))
                stats.sort_stats("tottime").print_stats(args.top)
                print(f"profiled: {stats.total_calls / records:.0f} Python function calls per record\n"
                      + "\n".join(out.getvalue().splitlines()[-args.top - 2:]))
                continue
            floor = await _floor(args.rate * exchanges, args.seconds / 2)
            per_exchange = used / records / exchanges * 1e6
            print(f"  {records:,} records: {used / records * 1e6:.0f} µs of CPU per record, {exchanges:.2f} exchanges "
                  f"per record (a produce, {fetches / records:.2f} fetch rounds), {per_exchange:.0f} µs per exchange; "
                  f"floor {floor:.0f} µs per exchange: {per_exchange / floor:.1f}x", flush=True)
        client.close()
        for manager in managers:
            await manager.shutdown()
        await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    uvloop.run(main(parser.parse_args()))
