"""The Kafka wire protocol over TCP: one of a broker's listeners (Kafka's SocketServer: the acceptor
and processors of one endpoint) and a connection to another broker (the NetworkClient its replica
fetchers use). Frames are a 4-byte size and a request or response. Produce and Fetch requests and a
follower's FetchResponse are read by wire.py's decoders; kafka-python's message classes (generated
from Kafka's JSON message definitions) decode the rest and encode what wire.py does not.

Both ends are asyncio Protocols: frames are cut from a buffer as bytes arrive, with no coroutine
awaiting each read, and the answers a turn of the event loop completes for one connection leave in
one write (bench_capacity's profile had the stream API's two `readexactly` awaits and a write per
answer among a broker's costs).

How a connection fails, as Kafka's: a frame larger than socket.request.max.bytes (or of a negative
size), an unknown API key, a version the broker does not serve (except ApiVersions, answered at v0
with UNSUPPORTED_VERSION and the list, KIP-511), or bytes that do not decode close that connection
and touch nothing else; every other connection goes on. Requests of one connection start in the order
they arrive, each running up to its first wait (a produce's appends happen there) before the next
starts, and are answered in that order; up to MAX_IN_FLIGHT of them wait at once, and a client that
does not read its answers (WRITE_BUFFER_HIGH) is not read from. Kafka mutes a channel while its one
request is in flight; kray lets a connection's waiting requests overlap because librdkafka sends one
partition per ProduceRequest (five in flight): handled one at a time, each acks=all produce paid a
replication round of its own, and a producer over 1,000 partitions queued for hundreds of
milliseconds. A Metadata request still starts only when the requests before it are done, as Kafka
reads it. Everything runs on the broker's event loop: a request that waits (acks=all, a long-polling
fetch) costs no thread.

Each request is timed as Kafka's RequestMetrics (request_metrics.py): received when its frame is cut,
started at its handler's first step, locally complete when it first waits in purgatory (or complete if
it never does), complete when its Task is done, sent at the write that carries its answer. uvloop hands
the bytes to the socket at once, so the send time is the write call's (Kafka's, until the selector has
sent them all).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import struct
import time
from collections import Counter, deque
from typing import Awaitable, Callable, NamedTuple

from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from actors.broker.network import wire
from actors.broker.network.api_versions import API_VERSIONS, api_versions_response, supported
from actors.broker.request_metrics import CURRENT, RequestMetrics, RequestTiming
from actors.protocol import CLIENT_LISTENER
from coordination.errors import Errors

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes
MAX_IN_FLIGHT = 32  # requests of one connection waiting at once; reading stops beyond (backpressure)
WRITE_BUFFER_HIGH = 1 << 20  # answers waiting to be sent to one client; reading it stops beyond


# the requests of the replication round, read by wire's struct decoders at every version served
_READERS = {ProduceRequest.API_KEY: wire.read_produce_request, FetchRequest.API_KEY: wire.read_fetch_request}


class RequestContext(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    listener: str = CLIENT_LISTENER  # the listener's name: Metadata answers with its endpoints


class CloseConnection(Exception):
    """A handler's way to close the connection (an acks=0 produce that failed, as Kafka does)."""


Handler = Callable[[RequestContext, object], Awaitable[object | None]]


def request_name(api_key: int, request) -> str:
    """Kafka's RequestsPerSec name: the API, with fetches split between followers and consumers."""
    if api_key == FetchRequest.API_KEY:
        return "FetchFollower" if request.replica_id >= 0 else "FetchConsumer"
    return API_VERSIONS[api_key][0].__name__.removesuffix("Request")


class SocketServer:
    """One listener (Kafka's Acceptor and Processors for one endpoint). The listeners of a broker
    share one count of requests served (`requests`) and one RequestMetrics (`metrics`)."""

    def __init__(self, handler: Handler, host: str, port: int, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 listener: str = CLIENT_LISTENER, requests: Counter[str] | None = None,
                 metrics: RequestMetrics | None = None):
        self.handler, self.host, self.port, self.max_request_bytes = handler, host, port, max_request_bytes
        self.listener = listener
        self.requests: Counter[str] = Counter() if requests is None else requests
        self.metrics = RequestMetrics() if metrics is None else metrics
        self.closed_for_errors = 0  # connections closed for bad input
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[_Connection] = set()

    async def start(self, serving: bool = True, port: int | None = None) -> int:
        """Listen (on `port` if given); the port bound (a free one when it is 0). Not `serving`:
        connections wait in the backlog, accepted by the kernel and unanswered, until `start_serving`,
        as Kafka's acceptor listens at startup and accepts from startProcessingRequests on."""
        if port is not None:
            self.port = port
        sock = socket.create_server((self.host, self.port), reuse_port=False)
        sock.setblocking(False)
        self._server = await asyncio.get_running_loop().create_server(lambda: _Connection(self), sock=sock,
                                                                      start_serving=serving)
        self.port = sock.getsockname()[1]
        return self.port

    async def start_serving(self) -> None:
        await self._server.start_serving()

    @property
    def serving(self) -> bool:
        return self._server is not None and self._server.is_serving()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.close()
        if self._server is not None:
            await self._server.wait_closed()

    def _refuse(self, peer: str, what: str) -> None:
        self.closed_for_errors += 1
        log.warning("Closing connection from %s: %s", peer, what)

    def decode(self, frame, peer: str) -> tuple[RequestContext, object] | str:
        """A frame's context and request (the replication round's by wire's decoders, the rest by
        kafka-python's classes), or why the connection must close."""
        if len(frame) < _KEY_VERSION.size:
            return f"a {len(frame)}-byte request"
        api_key, version = _KEY_VERSION.unpack_from(frame)
        if api_key not in API_VERSIONS:
            return f"unknown API key {api_key}"
        cls = API_VERSIONS[api_key][0]
        if not supported(api_key, version):
            if api_key != ApiVersionsRequest.API_KEY:
                return f"unsupported version {version} of {cls.__name__}"
            try:
                header = wire.read_request_header(frame, flexible=False)
            except (ValueError, IndexError, struct.error):
                return "an undecodable ApiVersions header"
            return RequestContext(api_key, 0, header.correlation_id, header.client_id, peer, self.listener), None
        try:
            header = wire.read_request_header(frame, cls.flexible_version_q(version))
            read = _READERS.get(api_key)
            request = read(frame, header.body, version) if read is not None else \
                cls.decode(memoryview(frame)[header.body:], version=version)
        except Exception as e:  # garbage or cut short: Kafka's InvalidRequestException
            return f"{cls.__name__} v{version} that does not decode ({type(e).__name__}: {e})"
        return RequestContext(api_key, version, header.correlation_id, header.client_id, peer, self.listener), request


class _Connection(asyncio.Protocol):
    """One client's connection: frames cut from what arrives, each request started as a Task as it is
    read (ApiVersions answered at once), the answers written in order, once per turn of the loop."""

    def __init__(self, server: SocketServer):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.peer = "?"
        self._buffer = bytearray()
        # (waiting, answer, correlation id, version, timing)
        self._in_flight: deque[tuple[asyncio.Future | None, object, int, int, RequestTiming]] = deque()
        self._out: list[bytes] = []  # answers to write at the end of this turn
        self._out_timings: list[RequestTiming] = []  # those answers' requests, timed at the write
        self._paused = self._writing_paused = False
        self._closing = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._loop = asyncio.get_running_loop()
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        self.peer = "%s:%s" % transport.get_extra_info("peername")[:2]
        self.server._connections.add(self)

    def connection_lost(self, exc) -> None:
        self._closing = True
        self.server._connections.discard(self)
        for waiting, *_ in self._in_flight:
            if waiting is not None:
                waiting.cancel()
        self._in_flight.clear()

    def close(self) -> None:
        self._closing = True
        if self.transport is not None:
            self.transport.close()

    def pause_writing(self) -> None:  # the client reads slower than it is answered: stop reading from it
        self._writing_paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        if not self._paused:
            self.transport.resume_reading()
            self._parse()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._parse()

    def _parse(self) -> None:
        buf, pos, server = self._buffer, 0, self.server
        received = time.monotonic()  # every frame this read completed arrived with it
        try:
            while not self._closing and len(buf) - pos >= 4:
                if len(self._in_flight) >= MAX_IN_FLIGHT:
                    self._paused = True
                    self.transport.pause_reading()
                    break
                (size,) = _SIZE.unpack_from(buf, pos)
                if not 0 <= size <= server.max_request_bytes:
                    return self._refuse(f"a request of {size} bytes (socket.request.max.bytes="
                                        f"{server.max_request_bytes})")
                if len(buf) - pos - 4 < size:
                    break
                frame = bytes(buf[pos + 4:pos + 4 + size])
                pos += 4 + size
                decoded = server.decode(frame, self.peer)
                if isinstance(decoded, str):
                    return self._refuse(decoded)
                self._start(*decoded, received)
        finally:
            del buf[:pos]

    def _start(self, ctx: RequestContext, request, received: float) -> None:
        server = self.server
        name = "ApiVersions" if request is None else request_name(ctx.api_key, request)
        timing = RequestTiming(name, received)
        if request is None:  # an ApiVersions of a version not served: v0, UNSUPPORTED_VERSION and the list
            return self._answer(api_versions_response(Errors.UNSUPPORTED_VERSION), ctx, timing)
        server.requests[name] += 1
        if ctx.api_key == ApiVersionsRequest.API_KEY:
            return self._answer(api_versions_response(), ctx, timing)
        # Metadata is read when its turn to be answered comes, as a Kafka broker reads it (a connection's
        # channel is muted until its request in progress is answered): a snapshot taken at once and sent
        # behind an acks=all produce waiting out a failover named the dead leader, and librdkafka, taking
        # that leader as known, asked again only at its once-a-second topic scan
        before = [t for t, *_ in self._in_flight if t is not None and not t.done()] \
            if ctx.api_key == MetadataRequest.API_KEY else None
        # a task's first step runs in creation order (the loop's FIFO): appends stay in order
        task = self._loop.create_task(self._handle(ctx, request, timing, before))
        self._in_flight.append((task, None, ctx.correlation_id, ctx.api_version, timing))
        task.add_done_callback(self._answer_in_order)

    async def _handle(self, ctx: RequestContext, request, timing: RequestTiming, before: list | None = None):
        """The handler, timed from its first step; CURRENT is this request's in its Task's own context,
        for purgatory to mark when it starts waiting. `before`: the connection's requests to wait for first."""
        if before:
            await asyncio.wait(before)
        timing.started = time.monotonic()
        CURRENT.set(timing)
        try:
            return await self.server.handler(ctx, request)
        finally:
            timing.complete = time.monotonic()

    def _answer(self, answer, ctx: RequestContext, timing: RequestTiming) -> None:
        """An answer of the SocketServer's own, handled as soon as it is read."""
        timing.started = timing.complete = time.monotonic()
        self._in_flight.append((None, answer, ctx.correlation_id, ctx.api_version, timing))
        self._answer_in_order()

    def _answer_in_order(self, _=None) -> None:
        in_flight = self._in_flight
        while in_flight and (in_flight[0][0] is None or in_flight[0][0].done()):
            waiting, answer, correlation_id, version, timing = in_flight.popleft()
            if waiting is not None:
                if waiting.cancelled():
                    continue
                if (e := waiting.exception()) is not None:
                    if isinstance(e, CloseConnection):
                        log.info("Closing connection from %s: %s", self.peer, e)
                    else:
                        log.error("Closing connection from %s after an unexpected error", self.peer, exc_info=e)
                    return self.close()
                answer = waiting.result()
            if self._closing:
                continue
            if answer is None:  # acks=0: nothing to send, its response queue and send times are none
                self.server.metrics.record(timing, timing.complete, timing.complete)
                continue
            if not self._out:
                self._loop.call_soon(self._flush)
            self._out.append(_encode(answer, correlation_id, version))
            self._out_timings.append(timing)
        if self._paused and len(in_flight) < MAX_IN_FLIGHT and not self._closing:
            self._paused = False
            if not self._writing_paused:
                self.transport.resume_reading()
                self._parse()

    def _flush(self) -> None:
        """One write for every answer of this turn (a follower's fetch answered with several produces)."""
        out, self._out = self._out, []
        timings, self._out_timings = self._out_timings, []
        if not self._closing:
            write_started = time.monotonic()
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            written = time.monotonic()
            record = self.server.metrics.record
            for timing in timings:
                record(timing, write_started, written)

    def _refuse(self, what: str) -> None:
        self.server._refuse(self.peer, what)
        self.close()


def _encode(response, correlation_id: int, version: int) -> bytes:
    if isinstance(response, bytes):  # a whole frame already (wire.py)
        return response
    response.API_VERSION = version  # before the header: kafka-python would set it on the header too
    response.with_header(correlation_id=correlation_id)
    return response.encode(header=True, framed=True)


class NetworkClient(asyncio.Protocol):
    """One connection to a broker's listener; requests may be pipelined, answers come in order."""

    def __init__(self):
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._pending: deque[tuple[int, Callable[[bytes], tuple[int, object]], asyncio.Future]] = deque()
        self._ids = itertools.count(1)
        self.client_id = "kray"

    async def connect(self, host: str, port: int, client_id: str = "kray") -> None:
        self.client_id = client_id
        await asyncio.get_running_loop().create_connection(lambda: self, host, port)

    def connection_made(self, transport) -> None:
        self._transport = transport

    @property
    def connected(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def send(self, request, version: int):
        def frame(correlation_id: int) -> bytearray:  # kafka-python encodes into a bytearray
            request.with_header(correlation_id=correlation_id, client_id=self.client_id)
            return request.encode(version=version, header=True, framed=True)
        request.with_header(client_id=self.client_id)  # the header names the response's class
        response_class = ResponseClassRegistry.get_response_class(request.header)

        def read(response_frame: bytes) -> tuple[int, object]:
            response = response_class.decode(response_frame, version=version, header=True)
            return response.header.correlation_id, response
        return await self.send_frame(frame, read)

    async def send_frame(self, frame: Callable[[int], bytes | bytearray], read: Callable[[bytes], tuple[int, object]],
                         timeout_s: float | None = None):
        """Send the frame `frame(correlation id)` makes (wire.py's, or a message's encoding); its answer as
        `read` decodes it from the response frame (header included, size excluded): (its correlation
        id, the response). asyncio.TimeoutError after `timeout_s` (a timer, not wait_for's extra Task
        per request: the follower sends one each round)."""
        if not self.connected:
            raise ConnectionError("not connected")
        correlation_id = next(self._ids)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._transport.write(frame(correlation_id))
        self._pending.append((correlation_id, read, future))
        if timeout_s is None:
            return await future
        timer = loop.call_later(timeout_s, _time_out, future)
        try:
            return await future
        finally:
            timer.cancel()

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        pos = 0
        try:
            while len(buf) - pos >= 4:
                (size,) = _SIZE.unpack_from(buf, pos)
                if len(buf) - pos - 4 < size:
                    break
                frame = bytes(buf[pos + 4:pos + 4 + size])
                pos += 4 + size
                if not self._pending:
                    raise ConnectionError("an answer to no request")
                correlation_id, read, future = self._pending.popleft()
                answered, response = read(frame)
                if answered != correlation_id:
                    raise ConnectionError(f"response {answered} to request {correlation_id}")
                if not future.done():
                    future.set_result(response)
        except Exception as e:  # an answer that does not decode: the connection is no longer usable
            self._fail(e if isinstance(e, ConnectionError) else ConnectionError(f"{type(e).__name__}: {e}"))
        finally:
            del buf[:pos]

    def connection_lost(self, exc) -> None:
        self._fail(ConnectionError(str(exc) if exc else "connection closed"))

    def _fail(self, error: Exception) -> None:
        self.close()
        while self._pending:
            future = self._pending.popleft()[2]
            if not future.done():
                future.set_exception(error)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def _time_out(future: asyncio.Future) -> None:
    if not future.done():
        future.set_exception(asyncio.TimeoutError())
