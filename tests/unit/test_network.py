"""The Kafka wire protocol's transport: a SocketServer on loopback with a handler double (the narrow
interface KafkaApis implements), the NetworkClient, and bad input on the socket — oversized frames,
garbage, truncated requests, unknown API keys and versions, a few thousand fuzzed frames — each
closing only its own connection while the others go on."""
from __future__ import annotations

import asyncio
import random
import socket
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest

from actors.broker.network.api_versions import API_VERSIONS
from actors.broker.network import network
from actors.broker.network.kafka_apis import produce_response
from actors.broker.network.network import CloseConnection, NetworkClient, SocketServer
from actors.broker.request_metrics import TIMERS, mark_waiting
from actors.data_protocol import ProduceResult
from coordination.errors import Errors
from tests.integration.conftest import fetch_request, produce_request


class Handler:
    """Answers Metadata with one broker; remembers every request it was handed."""

    def __init__(self):
        self.seen: list[tuple[int, int]] = []

    async def __call__(self, ctx, request):
        self.seen.append((ctx.api_key, ctx.api_version))
        if ctx.api_key == MetadataRequest.API_KEY:
            await asyncio.sleep(0.01 * random.random())  # answers must still come back in order
            return MetadataResponse(throttle_time_ms=0, brokers=[MetadataResponse.MetadataResponseBroker(
                node_id=1, host="127.0.0.1", port=1)], cluster_id="c", controller_id=1, topics=[])
        if ctx.api_key == 0 and request.acks == 0:
            if request.entries[0][0].topic == "close-me":
                raise CloseConnection("an acks=0 produce failed")
            return None
        return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=[])


def run(scenario):
    """Run `scenario(server, handler)` against a fresh server on a free loopback port."""
    async def main():
        handler = Handler()
        server = SocketServer(handler, "127.0.0.1", 0, max_request_bytes=64 * 1024)
        await server.start()
        try:
            return await scenario(server, handler)
        finally:
            await server.stop()
    return asyncio.run(main())


async def client(server) -> NetworkClient:
    c = NetworkClient()
    await c.connect("127.0.0.1", server.port, "test")
    return c


async def raw(server, payload: bytes, read: bool = True) -> bytes:
    """Send bytes as they are; what comes back until the server closes (or a short while passes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(payload)
    await writer.drain()
    got = b""
    try:
        while read:
            chunk = await asyncio.wait_for(reader.read(65536), 1.0)
            if not chunk:
                break
            got += chunk
    except asyncio.TimeoutError:
        pass
    writer.close()
    return got


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def encoded(request, version: int, correlation_id: int = 7) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="t")
    return bytes(request.encode(version=version, header=True, framed=True))


def test_versions_are_negotiated_and_pipelined_answers_come_in_order():
    async def scenario(server, handler):
        c = await client(server)
        versions = await c.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        listed = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert listed == {key: (low, high) for key, (_, low, high) in API_VERSIONS.items()}
        answers = await asyncio.gather(*(c.send(MetadataRequest(topics=None), v) for v in (0, 4, 9, 11) * 5))
        c.close()
        return answers, handler.seen

    answers, seen = run(scenario)
    assert all(a.brokers[0].node_id == 1 for a in answers)
    assert seen == [(3, v) for v in (0, 4, 9, 11) * 5]  # ApiVersions is the server's own


def test_waiting_requests_of_one_connection_overlap_up_to_a_bound_and_are_answered_in_order():
    """A request that waits (an acks=all produce) does not hold back the next one's start; reading
    stops at MAX_IN_FLIGHT waiting requests; answers keep the requests' order."""
    started: list[int] = []
    release = asyncio.Event()

    async def waiting(ctx, request):
        started.append(ctx.correlation_id)
        if len(started) <= network.MAX_IN_FLIGHT:
            await release.wait()
        return produce_response([ProduceResult("t", 0, Errors.NONE, base_offset=ctx.correlation_id)])

    async def scenario(server, handler):
        server.handler = waiting
        c = await client(server)
        sends = [asyncio.ensure_future(c.send(produce_request("t", 0, [b"x"], acks=-1), 7))
                 for _ in range(network.MAX_IN_FLIGHT + 3)]
        while len(started) < network.MAX_IN_FLIGHT:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        held = len(started)  # every one started before any finished, and no more than the bound
        release.set()
        answers = await asyncio.gather(*sends)
        c.close()
        return held, answers

    held, answers = run(scenario)
    assert held == network.MAX_IN_FLIGHT
    assert [a.responses[0].partition_responses[0].base_offset for a in answers] == sorted(started) == started


def test_a_metadata_request_is_read_when_the_requests_before_it_on_its_connection_are_done():
    """As a muted Kafka channel: the cache a Metadata answer shows is the one of its turn, not the one of
    its arrival behind an acks=all produce waiting out a failover (librdkafka, told the dead leader by such
    an answer, asked again a second later). Requests after it, and on other connections, do not wait."""
    release, seen = asyncio.Event(), []

    async def handler(ctx, request):
        if ctx.api_key == ProduceRequest.API_KEY:
            seen.append("produce started")
            await release.wait()
            seen.append("produce done")
            return produce_response([ProduceResult("t", 0, Errors.NONE, base_offset=0)])
        seen.append("metadata read")
        return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=[])

    async def scenario(server, _):
        server.handler = handler
        c, other = await client(server), await client(server)
        produce = asyncio.ensure_future(c.send(produce_request("t", 0, [b"x"], acks=-1), 7))
        metadata = asyncio.ensure_future(c.send(MetadataRequest(topics=None), 9))
        while not seen:
            await asyncio.sleep(0.01)
        await other.send(MetadataRequest(topics=None), 9)  # another connection's: at once
        await asyncio.sleep(0.1)
        assert not metadata.done()
        release.set()
        await asyncio.gather(produce, metadata)
        c.close(), other.close()

    run(scenario)
    assert seen == ["produce started", "metadata read", "produce done", "metadata read"]


def test_a_request_waiting_in_purgatory_gets_remote_time_and_one_answered_at_once_none():
    """RequestMetrics through a real connection: the wait a handler marks (as DelayedProduce does) until
    its future completes is remote time, its work before it local; a request answered at once has its
    handler in local time and no remote time; every answered request is timed, its total the sum."""
    async def handler(ctx, request):
        if ctx.api_key == ProduceRequest.API_KEY:
            await asyncio.sleep(0.02)  # local work (the loop's other work meanwhile is not this request's)
            mark_waiting()
            await asyncio.sleep(0.1)  # the ISR catching up
            return produce_response([])
        return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=[])

    async def scenario(server, _):
        server.handler = handler
        c = await client(server)
        await asyncio.gather(c.send(produce_request("t", 0, [b"x"], acks=-1), 7),
                             c.send(MetadataRequest(topics=None), 9))
        c.close()
        return server.metrics.snapshot()

    stats = run(scenario)
    produce, metadata = (dict(zip(TIMERS, stats[name]["sum"])) for name in ("Produce", "Metadata"))
    assert stats["Produce"]["count"] == stats["Metadata"]["count"] == 1
    assert 100 <= produce["RemoteTimeMs"] < 200 and 20 <= produce["LocalTimeMs"] < 100
    assert metadata["RemoteTimeMs"] == 0 and metadata["LocalTimeMs"] < 20
    # the Metadata request waited for the produce before it was read (a muted Kafka channel)
    assert metadata["RequestQueueTimeMs"] >= 100 and metadata["ResponseQueueTimeMs"] < 20
    for timers in (produce, metadata):
        parts = sum(v for k, v in timers.items() if k != "TotalTimeMs")
        assert timers["TotalTimeMs"] == pytest.approx(parts)


def test_an_unknown_api_versions_version_gets_v0_with_unsupported_version_and_its_own_versions():
    """KIP-511: a client newer than the broker learns which ApiVersions versions it serves (Kafka 2.8
    lists only those), and asks again in one of them."""
    async def scenario(server, handler):
        body = struct.pack(">hhi", ApiVersionsRequest.API_KEY, 99, 42) + struct.pack(">h", 1) + b"t"
        return await raw(server, frame(body + b"\x00" * 8))

    got = run(scenario)
    (size,) = struct.unpack_from(">i", got)
    response = ApiVersionsResponse.decode(got[4:4 + size], version=0, header=True)
    assert response.header.correlation_id == 42 and response.error_code == Errors.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, 0, 3)]


@pytest.mark.parametrize("name, payload", [
    ("a frame over socket.request.max.bytes", struct.pack(">i", 64 * 1024 + 1) + b"x" * 100),
    ("a negative size", struct.pack(">i", -5)),
    ("a frame too short for a header", frame(b"\x00\x03")),
    ("an unknown API key", frame(struct.pack(">hhi", 999, 0, 1) + b"\x00\x00")),
    ("an unsupported version", frame(struct.pack(">hhi", 0, 2, 1) + b"\x00\x00")),
    ("a truncated request", frame(encoded(produce_request("t", 0, [b"x"]), 9)[4:-10])),
    ("garbage", frame(bytes(range(256)) * 3)),
])
def test_bad_input_closes_only_its_own_connection_and_reaches_no_handler(name, payload):
    async def scenario(server, handler):
        healthy = await client(server)
        assert await raw(server, payload) == b"", name  # closed without an answer
        answer = await healthy.send(MetadataRequest(topics=None), 9)  # the other connection goes on
        healthy.close()
        return answer, handler.seen, server.closed_for_errors

    answer, seen, refused = run(scenario)
    assert answer.brokers[0].node_id == 1 and seen == [(3, 9)] and refused == 1


def test_acks_0_gets_no_answer_and_a_failed_one_closes_the_connection():
    async def scenario(server, handler):
        c = await client(server)
        silent = encoded(produce_request("t", 0, [b"x"], acks=0), 9)
        after = encoded(MetadataRequest(topics=None), 9, correlation_id=8)
        got = await raw(server, silent + after)
        closed = await raw(server, encoded(produce_request("close-me", 0, [b"x"], acks=0), 9))
        c.close()
        return got, closed

    got, closed = run(scenario)
    (size,) = struct.unpack_from(">i", got)
    assert len(got) == 4 + size  # one answer only: the metadata's
    assert MetadataResponse.decode(got[4:], version=9, header=True).header.correlation_id == 8
    assert closed == b""


def test_a_disconnect_fails_every_pending_call():
    async def scenario(server, handler):
        c = await client(server)
        pending = asyncio.ensure_future(c.send(MetadataRequest(topics=None), 9))
        c.close()
        with pytest.raises(ConnectionError):
            await pending
        with pytest.raises(ConnectionError):
            await c.send(MetadataRequest(topics=None), 9)

    run(scenario)


def test_a_call_unanswered_in_its_time_fails_with_a_timeout_and_the_next_answer_still_finds_its_call():
    """The fetcher's timeout: a frame's answer that does not come in `timeout_s` raises TimeoutError; the
    late answer then goes to the call it belongs to, not to the next one."""
    async def scenario(server, handler):
        c = await client(server)
        read = lambda f: ((r := MetadataResponse.decode(f, version=9, header=True)).header.correlation_id, r)

        def metadata(correlation_id: int) -> bytes:
            request = MetadataRequest(topics=None)
            request.with_header(correlation_id=correlation_id, client_id="test")
            return request.encode(version=9, header=True, framed=True)
        with pytest.raises(asyncio.TimeoutError):
            await c.send_frame(metadata, read, timeout_s=0)  # due at the next turn, before the server reads it
        answer = await c.send_frame(metadata, read, timeout_s=5)
        assert answer.brokers[0].node_id == 1 and c.connected
        c.close()

    run(scenario)


def mutations(rng: random.Random, valid: list[bytes]):
    """Random and mutated frames: flipped bytes, cuts, extensions, lying sizes, pure noise."""
    for _ in range(3_000):
        base = bytearray(rng.choice(valid))
        kind = rng.randrange(6)
        if kind == 0:
            for _ in range(rng.randint(1, 8)):
                base[rng.randrange(4, len(base))] = rng.randrange(256)
        elif kind == 1:
            base = base[:rng.randrange(4, len(base))]
            base[:4] = struct.pack(">i", len(base) - 4)
        elif kind == 2:
            base += rng.randbytes(rng.randint(1, 200))
            base[:4] = struct.pack(">i", len(base) - 4)
        elif kind == 3:
            base[:4] = struct.pack(">i", rng.choice([len(base) + 50, 1 << 20, -1, 3]))
        elif kind == 4:
            base = bytearray(frame(rng.randbytes(rng.randint(0, 300))))
        else:
            base[4:6] = struct.pack(">h", rng.choice([-1, 5, 999, 32767]))  # an unknown API key
        yield bytes(base)


def test_fuzzed_frames_never_stop_the_server_or_disturb_other_clients():
    """A few thousand random and mutated Produce, Fetch and Metadata frames, a connection each: the
    server keeps answering a well-behaved client throughout, and whatever reached the handler was a
    request that decoded as some supported version."""
    rng = random.Random(17)
    valid = [encoded(produce_request("t", 0, [b"x" * 50], acks=1), 9), encoded(fetch_request("t", 0, 0), 12),
             encoded(MetadataRequest(topics=None), 9)]

    async def scenario(server, handler):
        healthy = await client(server)
        frames = list(mutations(rng, valid))
        for i in range(0, len(frames), 50):
            await asyncio.gather(*(raw(server, f, read=False) for f in frames[i:i + 50]))
            answer = await healthy.send(MetadataRequest(topics=None), 9)
            assert answer.brokers[0].node_id == 1
        healthy.close()
        return handler.seen, server.closed_for_errors

    seen, refused = run(scenario)
    assert refused > 1_000
    assert all(key in API_VERSIONS and API_VERSIONS[key][1] <= version <= API_VERSIONS[key][2]
               for key, version in seen)


def test_the_server_binds_a_free_port_when_asked_for_port_0():
    async def scenario(server, handler):
        with socket.create_connection(("127.0.0.1", server.port), timeout=2):
            return server.port

    assert run(scenario) > 0


def test_a_server_not_yet_serving_holds_connections_unanswered_until_it_starts():
    """A broker binds its port at once and answers only from its first UpdateMetadata on."""
    async def main():
        handler = Handler()
        server = SocketServer(handler, "127.0.0.1", 0)
        await server.start(serving=False)
        try:
            assert not server.serving
            c = NetworkClient()
            await c.connect("127.0.0.1", server.port, "test")  # the kernel accepts it into the backlog
            pending = asyncio.ensure_future(c.send(MetadataRequest(topics=None), 9))
            await asyncio.sleep(0.5)
            assert not pending.done() and handler.seen == []
            await server.start_serving()
            assert server.serving
            response = await asyncio.wait_for(pending, 5)
            assert [b.node_id for b in response.brokers] == [1] and handler.seen == [(MetadataRequest.API_KEY, 9)]
        finally:
            await server.stop()
    asyncio.run(main())
