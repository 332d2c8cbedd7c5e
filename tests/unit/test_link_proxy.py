"""A faultable link on real loopback sockets: a server that records what it receives and can push, a
client through a LinkProxy, and faults set on each direction on its own."""
from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time

import pytest

from actors.links.faults import HEALTHY, Direction, LinkFault
from actors.links.proxy import LinkProxy, LinkTable
from coordination.errors import KrayError

F, B = Direction.FORWARD, Direction.BACKWARD


class Server:
    """Echoes what it receives unless told to only record it; says `hello` to each connection."""

    def __init__(self, echo: bool = True):
        self.echo, self.received, self.eof = echo, bytearray(), asyncio.Event()

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return "127.0.0.1", self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader, writer):
        writer.write(b"hello")
        while data := await reader.read(65_536):
            self.received += data
            if self.echo:
                writer.write(data)
                await writer.drain()
        self.eof.set()
        writer.close()


async def link(echo: bool = True):
    server = Server(echo)
    proxy = LinkProxy("test", await server.start())
    reader, writer = await asyncio.open_connection("127.0.0.1", await proxy.start())
    assert await asyncio.wait_for(reader.readexactly(5), 5) == b"hello"
    return server, proxy, reader, writer


async def until(predicate, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def test_a_healthy_link_passes_a_stream_both_ways_intact():
    async def scenario():
        server, proxy, reader, writer = await link()
        payload = os.urandom(3_000_000)
        writer.write(payload)
        echoed = await asyncio.wait_for(reader.readexactly(len(payload)), 10)
        writer.write_eof()
        await asyncio.wait_for(server.eof.wait(), 5)  # the end of the stream passes too
        await proxy.stop()
        return echoed == payload == server.received
    assert asyncio.run(scenario())


def test_a_cut_direction_holds_its_bytes_until_healed_in_order():
    async def scenario():
        server, proxy, reader, writer = await link(echo=False)
        proxy.set_fault(F, LinkFault(cut=True))
        writer.write(b"first")
        writer.write(b"second")
        await asyncio.sleep(0.3)
        held = bytes(server.received)
        proxy.set_fault(F, HEALTHY)
        await until(lambda: bytes(server.received) == b"firstsecond")
        await proxy.stop()
        return held
    assert asyncio.run(scenario()) == b""


def test_a_cut_forward_direction_lets_the_server_reach_the_client():
    async def scenario():
        server = Server(echo=True)
        proxy = LinkProxy("test", await server.start())
        proxy_port = await proxy.start()
        proxy.set_fault(F, LinkFault(cut=True))
        reader, _writer = await asyncio.open_connection("127.0.0.1", proxy_port)
        greeting = await asyncio.wait_for(reader.readexactly(5), 5)  # backward flows while forward is cut
        await proxy.stop()
        return greeting
    assert asyncio.run(scenario()) == b"hello"


def test_a_cut_backward_direction_stalls_answers_while_requests_arrive():
    async def scenario():
        server, proxy, reader, writer = await link()
        proxy.set_fault(B, LinkFault(cut=True))
        writer.write(b"ping")
        await until(lambda: bytes(server.received) == b"ping")  # forward still flows
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(reader.readexactly(4), 0.3)
        proxy.set_fault(B, HEALTHY)
        answer = await asyncio.wait_for(reader.readexactly(4), 5)
        await proxy.stop()
        return answer
    assert asyncio.run(scenario()) == b"ping"


def test_a_dropped_link_closes_its_connections_refuses_new_ones_and_accepts_again_once_healed():
    async def scenario():
        server, proxy, reader, writer = await link()
        async def ended(r: asyncio.StreamReader) -> bytes:
            try:
                return await asyncio.wait_for(r.read(100), 5)  # b"": the stream ended
            except ConnectionResetError:
                return b""

        proxy.set_fault(B, LinkFault(drop=True))  # either direction drops the whole connection
        closed = await ended(reader)
        refused_reader, _ = await asyncio.open_connection("127.0.0.1", proxy.port)
        refused = await ended(refused_reader)  # no greeting: reset at once
        proxy.set_fault(B, HEALTHY)
        again, again_writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        greeting = await asyncio.wait_for(again.readexactly(5), 5)
        again_writer.write(b"ping")
        echoed = await asyncio.wait_for(again.readexactly(4), 5)
        await proxy.stop()
        return closed, refused, greeting, echoed
    assert asyncio.run(scenario()) == (b"", b"", b"hello", b"ping")


def test_a_delay_on_each_direction_adds_up_on_a_round_trip():
    async def scenario():
        _server, proxy, reader, writer = await link()
        proxy.set_fault(F, LinkFault(delay_ms=120))
        proxy.set_fault(B, LinkFault(delay_ms=80))
        started = time.monotonic()
        writer.write(b"x")
        await asyncio.wait_for(reader.readexactly(1), 5)
        elapsed = time.monotonic() - started
        await proxy.stop()
        return elapsed
    assert asyncio.run(scenario()) >= 0.2


def test_a_throttle_limits_the_rate_of_a_direction():
    async def scenario():
        server, proxy, _reader, writer = await link(echo=False)
        proxy.set_fault(F, LinkFault(rate_bytes_per_s=400_000))
        started = time.monotonic()
        writer.write(os.urandom(200_000))
        await until(lambda: len(server.received) == 200_000)
        elapsed = time.monotonic() - started
        await proxy.stop()
        return elapsed
    assert asyncio.run(scenario()) >= 0.45


def test_a_cut_link_pushes_back_on_its_sender_and_loses_nothing():
    """Cut, the proxy stops reading once its queue is full: the sender's writes block, as on a
    partitioned network, rather than the proxy buffering without bound."""
    async def scenario():
        server, proxy, _reader, writer = await link(echo=False)
        proxy.set_fault(F, LinkFault(cut=True))
        payload = os.urandom(48_000_000)
        writer.write(payload)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(writer.drain(), 1.0)
        proxy.set_fault(F, HEALTHY)
        await asyncio.wait_for(writer.drain(), 30)
        await until(lambda: len(server.received) == len(payload), timeout=30)
        await proxy.stop()
        return bytes(server.received) == payload
    assert asyncio.run(scenario())


def test_a_connection_to_a_target_that_is_down_is_closed():
    async def scenario():
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        proxy = LinkProxy("test", ("127.0.0.1", port))
        reader, _writer = await asyncio.open_connection("127.0.0.1", await proxy.start())
        data = await asyncio.wait_for(reader.read(), 5)
        await proxy.stop()
        return data
    assert asyncio.run(scenario()) == b""


def test_a_connection_the_target_resets_is_reset_through_the_link_too():
    """A peer that dies with unread data, or whose sockets are destroyed (the chaos tool's `ss -K`),
    resets its connections: the link ends the client's side too. It once left it open, and a follower
    fetching through it waited for its socket timeout."""
    async def scenario():
        async def reset_after_hello(reader, writer):
            writer.write(b"hello")
            await writer.drain()
            await reader.read(1)
            writer.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                                 struct.pack("ii", 1, 0))
            writer.transport.abort()  # closed with linger 0: a reset
        target = await asyncio.start_server(reset_after_hello, "127.0.0.1", 0)
        proxy = LinkProxy("test", ("127.0.0.1", target.sockets[0].getsockname()[1]))
        reader, writer = await asyncio.open_connection("127.0.0.1", await proxy.start())
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"hello"
        writer.write(b"?")
        try:
            ended = await asyncio.wait_for(reader.read(), 5)
        except ConnectionResetError:
            ended = "reset"
        await proxy.stop()
        target.close()
        return ended
    assert asyncio.run(scenario()) in (b"", "reset")  # ended (an end or a reset), not left waiting


def test_a_link_table_runs_proxies_on_its_own_loop_and_takes_faults_from_any_thread():
    loop = asyncio.new_event_loop()
    server = Server()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    target = asyncio.run_coroutine_threadsafe(server.start(), loop).result()
    table = LinkTable()
    host, port = table.route("zookeeper", target)
    table.set_fault("zookeeper", B, LinkFault(delay_ms=10))
    assert table.faults() == {"zookeeper": {"forward": HEALTHY, "backward": LinkFault(delay_ms=10)}}
    with pytest.raises(KrayError, match="no link 'zookeper'"):
        table.set_fault("zookeper", F, LinkFault(cut=True))

    async def round_trip():
        reader, writer = await asyncio.open_connection(host, port)
        await reader.readexactly(5)
        writer.write(b"abc")
        return await asyncio.wait_for(reader.readexactly(3), 5)
    assert asyncio.run(round_trip()) == b"abc"
    table.close()
    loop.call_soon_threadsafe(loop.stop)


def test_a_link_exposing_a_listener_takes_the_port_asked_and_refuses_one_taken():
    """A broker's `clients` link listens on the port the broker advertises (kept across incarnations)
    and forwards to the listener's own port; a port in use is an OSError the broker handles."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    server = Server()
    target = asyncio.run_coroutine_threadsafe(server.start(), loop).result()
    table = LinkTable()
    port = table.expose("clients", target, "127.0.0.1")  # a free one
    with pytest.raises(OSError):
        table.expose("clients", target, "127.0.0.1", port)
    table.close()
    again = LinkTable()  # the next incarnation asks for the same port and gets it, with healthy links
    assert again.expose("clients", target, "127.0.0.1", port) == port

    async def hello(timeout_s: float) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        got = await asyncio.wait_for(reader.readexactly(5), timeout_s)
        writer.close()
        return got
    assert asyncio.run(hello(5)) == b"hello"
    again.set_fault("clients", B, LinkFault(cut=True))
    with pytest.raises(asyncio.TimeoutError):  # a second of silence: the link answered in milliseconds before
        asyncio.run(hello(1))
    again.close()
    loop.call_soon_threadsafe(loop.stop)


def test_a_fault_set_before_a_link_is_used_holds_for_it_and_a_moved_peer_keeps_the_link_faults():
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    first, second = Server(), Server()
    targets = [asyncio.run_coroutine_threadsafe(s.start(), loop).result() for s in (first, second)]
    table = LinkTable()
    table.set_fault("broker-3", F, LinkFault(cut=True))  # before the link exists
    assert table.faults() == {"broker-3": {"forward": LinkFault(cut=True), "backward": HEALTHY}}

    async def send(address, server) -> bool:
        """Whether a byte sent through the link reached the server."""
        before = len(server.received)
        reader, writer = await asyncio.open_connection(*address)
        await reader.readexactly(5)  # backward flows
        writer.write(b"x")
        await asyncio.sleep(0.3)
        writer.close()
        return len(server.received) > before
    address = table.route("broker-3", targets[0])
    assert table.route("broker-3", targets[0]) == address  # the same link while the peer stays
    assert not asyncio.run(send(address, first))  # forward held by the cut
    moved = table.route("broker-3", targets[1])  # the peer restarted elsewhere: a new proxy, still cut
    assert moved != address and not asyncio.run(send(moved, second))
    table.set_fault("broker-3", F, HEALTHY)
    assert asyncio.run(send(moved, second))
    table.close()
    loop.call_soon_threadsafe(loop.stop)
