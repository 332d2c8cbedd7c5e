"""The data plane alone: three brokers' replication in one process, no Ray and no ZooKeeper (issue 42).

    .venv/bin/python -m benchmarks.bench_data_plane [--partitions 1000] [--rate 2000] [--seconds 10]
                                                    [--repeats 3] [--profile]

A leader (a ReplicaManager behind KafkaApis and a SocketServer) and two followers (ReplicaManagers with
their ReplicaFetcherManagers) hold `--partitions` partitions, all in sync, on one uvloop event loop in
this process, over loopback; a client on the same loop sends one-record acks=all ProduceRequests v9
(kray's NetworkClient, pipelined), round robin over random partitions, at `--rate` a second, open loop.
What it prints, per repeat: the CPU this process spent per acknowledged record, the exchanges per record
(produces, and the followers' fetch rounds), the CPU per exchange, and beside it, from the same run, two
floors: the same client against a protocol that answers a fixed frame, per exchange; and the barest
round (`_Barest`): the same records through the least that kray's round does in CPython (the same wire
codecs, a file write per batch on each replica, offsets, the high watermark, the answers; none of the
checks, state or bookkeeping). All include the client's side. With `--profile`, cProfile over one more window: the Python function calls per record
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
import os
import pstats
import random
import struct
import tempfile
import time

import uvloop
from kafka.protocol.producer import ProduceRequest

from actors.broker.fetcher import ReplicaFetcherManager
from actors.broker.log.batches import assign_offsets, build, iter_batches, read_header
from actors.broker.log.log_config import LogConfig
from actors.broker.metadata_cache import MetadataCache
from actors.broker.network.kafka_apis import KafkaApis
from actors.broker.network.network import NetworkClient, SocketServer
from actors.broker.replica_manager import ReplicaManager
from actors.config import BrokerConfig
from actors.data_protocol import FetchedPartition, FetchPartition, ProduceResult
from actors.broker.network import wire
from actors.protocol import LeaderAndIsrRequest, PartitionState
from coordination.zkdata import TopicPartition
from benchmarks.bench_produce import FixedAnswer

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
        T = ProduceRequest.TopicProduceData
        request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
            T(name=TOPIC, partition_data=[T.PartitionProduceData(index=tp.partition, records=build([b"x" * 100]))])])
        request.with_header(correlation_id=0, client_id="bench")
        frames.append(bytes(request.encode(version=9, header=True, framed=True)))
    return server, managers, frames, port


async def _floor(rate: float, seconds: float) -> float:
    """µs of CPU per exchange: the same client against a protocol answering a fixed frame at once."""
    server = await asyncio.get_running_loop().create_server(FixedAnswer, "127.0.0.1", 0)
    client = NetworkClient()
    await client.connect("127.0.0.1", server.sockets[0].getsockname()[1])
    load = _Client(client, [struct.pack(">ihhi", 120, 0, 9, 0) + bytes(112)])
    cpu = time.process_time()
    await load.offer(rate, seconds)
    used = time.process_time() - cpu
    client.close()
    server.close()
    return used / load.acked * 1e6


class _Barest:
    """The least kray's round could do in CPython: the same wire codecs (wire.py), one file write per
    batch on the leader and on each follower, an offset per follower, the high watermark, and the
    answers; no validation, CRC, producer state, epochs, indexes, fetch-session bookkeeping, metrics or
    logs. A leader protocol answers produces and follower fetches (from the batches it keeps in memory,
    as kray's active segment serves a follower that keeps up); each follower fetches again as soon as an
    answer comes, naming the partitions it appended to."""

    def __init__(self, partitions: int, log_dir: str):
        self.leo = [0] * partitions
        self.hw = [0] * partitions
        self.fds = {b: [os.open(f"{log_dir}/{b}-{i}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                        for i in range(partitions)] for b in BROKERS}
        self.batches: list[list[tuple[int, bytes]]] = [[] for _ in range(partitions)]
        self.offsets = {b: [0] * partitions for b in BROKERS[1:]}  # what each follower has, as it said
        self.news = {b: set() for b in BROKERS[1:]}  # partitions with records or a high watermark to tell
        self.held: dict[int, tuple] = {}  # a follower's fetch with nothing to answer yet: (protocol, correlation id)
        self.acks: list[list[tuple[int, object, int]]] = [[] for _ in range(partitions)]  # (last offset, protocol, id)

    def produce(self, protocol, frame) -> None:
        header = wire.read_request_header(frame, True)
        request = wire.read_produce_request(frame, header.body, 9)
        protocol.expect(header.correlation_id)
        for tp, records in request.entries:
            i, base = tp.partition, self.leo[tp.partition]
            batch = assign_offsets(records, base, 0)
            os.write(self.fds[LEADER][i], batch)
            self.batches[i].append((base, bytes(batch)))
            self.leo[i] = read_header(batch).last_offset + 1
            self.acks[i].append((self.leo[i] - 1, protocol, header.correlation_id))
            for follower, news in self.news.items():
                news.add(i)
                if follower in self.held:  # answered in the next turn, with every append of this one
                    asyncio.get_running_loop().call_soon(self._answer, follower, *self.held.pop(follower))

    def fetch(self, protocol, frame) -> None:
        header = wire.read_request_header(frame, True)
        params = wire.read_fetch_request(frame, header.body, 12)
        follower, offsets = params.replica_id, self.offsets[params.replica_id]
        for p in params.partitions:
            i = p.partition
            offsets[i] = p.fetch_offset
            hw = min(self.leo[i], *(o[i] for o in self.offsets.values()))
            if hw > self.hw[i]:
                self.hw[i] = hw
                for news in self.news.values():
                    news.add(i)
                done = [a for a in self.acks[i] if a[0] < hw]
                self.acks[i] = [a for a in self.acks[i] if a[0] >= hw]
                for last, producer, correlation_id in done:
                    producer.answer(correlation_id, wire.produce_response(correlation_id,
                                                                          [ProduceResult(TOPIC, i, 0, last, 0)]))
        if self.news[follower]:
            self._answer(follower, protocol, header.correlation_id)
        else:
            self.held[follower] = (protocol, header.correlation_id)

    def _answer(self, follower: int, protocol, correlation_id: int) -> None:
        offsets, news, self.news[follower] = self.offsets[follower], self.news[follower], set()
        out = []
        for i in news:
            batches, n = self.batches[i], len(self.batches[i])
            first = n
            while first > 0 and batches[first - 1][0] >= offsets[i]:
                first -= 1
            out.append(FetchedPartition(TOPIC, i, 0, self.hw[i], 0, b"".join(b for _, b in batches[first:])))
        protocol.reply(wire.fetch_response(correlation_id, 0, 1, out))

    def close(self) -> None:
        for fds in self.fds.values():
            for fd in fds:
                os.close(fd)

    def follower_answered(self, follower: int, frame) -> list[FetchPartition]:
        response = wire.read_fetch_response(frame)
        changed = []
        for f in response.partitions:
            if f.records:
                os.write(self.fds[follower][f.partition], f.records)
                *_, (_, last) = iter_batches(f.records)  # the log end: after the last batch
                changed.append(FetchPartition(TOPIC, f.partition, last.last_offset + 1, 0))
        return changed


class _Frames(asyncio.Protocol):
    """Frames cut from a buffer, each to `on_frame(self, frame)`; `reply` writes one, in the order the
    requests came (`expect`), as Kafka answers a connection's requests."""

    def __init__(self, on_frame):
        self.on_frame, self.buffer = on_frame, bytearray()
        self.order: dict[int, bytes | None] = {}  # correlation id -> its answer once made, in arrival order

    def expect(self, correlation_id: int) -> None:
        self.order[correlation_id] = None

    def answer(self, correlation_id: int, frame: bytes) -> None:
        order = self.order
        order[correlation_id] = frame
        ready = []
        for cid, answer in order.items():
            if answer is None:
                break
            ready.append(cid)
        if ready:
            self.transport.write(b"".join(order.pop(cid) for cid in ready))

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            size = struct.unpack_from(">i", buf, pos)[0]
            if len(buf) - pos - 4 < size:
                break
            frame = bytes(buf[pos + 4:pos + 4 + size])
            pos += 4 + size
            self.on_frame(self, frame)
        del buf[:pos]

    def reply(self, frame: bytes) -> None:
        self.transport.write(frame)


async def _barest(partitions: int, frames: list[bytes], rate: float, seconds: float, log_dir: str) -> tuple[float, float]:
    """µs of CPU per record and exchanges per record of `_Barest`, with the same client and frames."""
    loop = asyncio.get_running_loop()
    round_ = _Barest(partitions, log_dir)
    leader = await loop.create_server(lambda: _Frames(lambda p, f: (round_.produce if f[1] == 0 else round_.fetch)(p, f)),
                                      "127.0.0.1", 0)
    port = leader.sockets[0].getsockname()[1]
    fetches = [0]

    def fetch(protocol, follower: int, partitions_: list[FetchPartition]) -> None:
        fetches[0] += 1
        protocol.reply(wire.fetch_request(fetches[0], "f", follower, 500, 1, 1 << 20, 1, 1, partitions_, []))

    followers = []
    for follower in BROKERS[1:]:
        transport, protocol = await loop.create_connection(
            lambda b=follower: _Frames(lambda p, f, b=b: fetch(p, b, round_.follower_answered(b, f))), "127.0.0.1", port)
        followers.append(transport)
        fetch(protocol, follower, [])
    client = NetworkClient()
    await client.connect("127.0.0.1", port)
    load = _Client(client, frames)
    await load.offer(rate, 2)
    acked, fetched, cpu = load.acked, fetches[0], time.process_time()
    await load.offer(rate, seconds)
    used, records = time.process_time() - cpu, load.acked - acked
    client.close()
    for transport in followers:
        transport.close()
    leader.close()
    round_.close()
    return used / records * 1e6, 1 + (fetches[0] - fetched) / records


async def main(args) -> None:
    with tempfile.TemporaryDirectory() as log_dir:
        server, managers, frames, port = await _cluster(args.partitions, log_dir)
        client = NetworkClient()
        await client.connect("127.0.0.1", port)
        load = _Client(client, frames)
        await load.offer(args.rate, 2)  # warm: sessions open, every file touched
        print(f"{args.partitions:,} partitions, {args.rate:,} acks=all records/s, {args.seconds} s windows")
        for repeat in range(args.repeats + (1 if args.profile else 0)):
            os.makedirs(f"{log_dir}/barest-{repeat}")
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
            barest_us, barest_exchanges = await _barest(args.partitions, frames, args.rate, args.seconds,
                                                        f"{log_dir}/barest-{repeat}")
            per_exchange, barest_per_exchange = used / records / exchanges * 1e6, barest_us / barest_exchanges
            print(f"  kray: {records:,} records, {used / records * 1e6:.0f} µs of CPU per record, {exchanges:.2f} "
                  f"exchanges per record (a produce, {fetches / records:.2f} fetch rounds), {per_exchange:.0f} µs per "
                  f"exchange = {per_exchange / floor:.1f}x the floor ({floor:.0f} µs per exchange); the barest round: "
                  f"{barest_us:.0f} µs per record, {barest_exchanges:.2f} exchanges, {barest_per_exchange:.0f} µs per "
                  f"exchange = {barest_per_exchange / floor:.1f}x", flush=True)
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
