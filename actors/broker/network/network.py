"""The Kafka wire protocol over TCP: one of a broker's listeners (Kafka's SocketServer: the acceptor
and processors of one endpoint) and a connection to another broker (the NetworkClient its replica
fetchers use). Frames are a 4-byte size and a request or response; kafka-python's message classes
(generated from Kafka's JSON message definitions) encode and decode them, headers included.

How a connection fails, as Kafka's: a frame larger than socket.request.max.bytes (or of a negative
size), an unknown API key, a version the broker does not serve (except ApiVersions, answered at v0
with UNSUPPORTED_VERSION and the list, KIP-511), or bytes that do not decode close that connection
and touch nothing else; every other connection goes on. Requests of one connection start in the order
they arrive, each running up to its first wait (a produce's appends happen there) before the next
starts, and are answered in that order; up to MAX_IN_FLIGHT of them wait at once. Kafka mutes a
channel while its one request is in flight; kray lets a connection's waiting requests overlap
because librdkafka sends one partition per ProduceRequest (five in flight): handled one at a time,
each acks=all produce paid a replication round of its own, and a producer over 1,000 partitions
queued for hundreds of milliseconds. Everything runs on the broker's event loop: a request that
waits (acks=all, a long-polling fetch) costs no thread.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import struct
from collections import Counter, deque
from typing import Awaitable, Callable, NamedTuple

from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest

from actors.broker.network import wire
from actors.broker.network.api_versions import API_VERSIONS, api_versions_response, supported
from actors.protocol import CLIENT_LISTENER
from coordination.errors import Errors

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes
MAX_IN_FLIGHT = 32  # requests of one connection waiting at once; reading stops beyond (backpressure)


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
    share one count of requests served (`requests`)."""

    def __init__(self, handler: Handler, host: str, port: int, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 listener: str = CLIENT_LISTENER, requests: Counter[str] | None = None):
        self.handler, self.host, self.port, self.max_request_bytes = handler, host, port, max_request_bytes
        self.listener = listener
        self.requests: Counter[str] = Counter() if requests is None else requests
        self.closed_for_errors = 0  # connections closed for bad input
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    async def start(self, serving: bool = True, port: int | None = None) -> int:
        """Listen (on `port` if given); the port bound (a free one when it is 0). Not `serving`:
        connections wait in the backlog, accepted by the kernel and unanswered, until `start_serving`,
        as Kafka's acceptor listens at startup and accepts from startProcessingRequests on."""
        if port is not None:
            self.port = port
        sock = socket.create_server((self.host, self.port), reuse_port=False)
        sock.setblocking(False)
        self._server = await asyncio.start_server(self._serve, sock=sock, start_serving=serving)
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
        for writer in list(self._connections):
            writer.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = "%s:%s" % writer.get_extra_info("peername")[:2]
        self._connections.add(writer)
        in_flight: deque[tuple[asyncio.Future, int, int]] = deque()  # (answer, correlation id, version)

        def answer_in_order(_=None) -> None:
            while in_flight and in_flight[0][0].done():
                answer, correlation_id, version = in_flight.popleft()
                if answer.cancelled():
                    continue
                if (e := answer.exception()) is not None:
                    if isinstance(e, CloseConnection):
                        log.info("Closing connection from %s: %s", peer, e)
                    else:
                        log.error("Closing connection from %s after an unexpected error", peer, exc_info=e)
                    writer.close()
                    return
                if answer.result() is not None and not writer.is_closing():
                    self._write(writer, answer.result(), correlation_id, version)

        try:
            while not writer.is_closing():
                if len(in_flight) >= MAX_IN_FLIGHT:
                    await asyncio.wait([in_flight[0][0]])
                    continue
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if not 0 <= size <= self.max_request_bytes:
                    return self._refuse(peer, f"a request of {size} bytes (socket.request.max.bytes="
                                              f"{self.max_request_bytes})")
                frame = await reader.readexactly(size)
                if size < _KEY_VERSION.size:
                    return self._refuse(peer, f"a {size}-byte request")
                api_key, version = _KEY_VERSION.unpack_from(frame)
                if api_key not in API_VERSIONS:
                    return self._refuse(peer, f"unknown API key {api_key}")
                cls = API_VERSIONS[api_key][0]
                answer = asyncio.get_running_loop().create_future()
                if not supported(api_key, version):
                    if api_key != ApiVersionsRequest.API_KEY:
                        return self._refuse(peer, f"unsupported version {version} of {cls.__name__}")
                    try:
                        header = wire.read_request_header(frame, flexible=False)
                    except (ValueError, IndexError, struct.error):
                        return self._refuse(peer, "an undecodable ApiVersions header")
                    answer.set_result(api_versions_response(Errors.UNSUPPORTED_VERSION))
                    in_flight.append((answer, header.correlation_id, 0))
                    answer_in_order()
                    continue
                try:
                    header = wire.read_request_header(frame, cls.flexible_version_q(version))
                    request = cls.decode(memoryview(frame)[header.body:], version=version)
                except Exception as e:  # garbage or cut short: Kafka's InvalidRequestException
                    return self._refuse(peer, f"{cls.__name__} v{version} that does not decode "
                                              f"({type(e).__name__}: {e})")
                self.requests[request_name(api_key, request)] += 1
                if api_key == ApiVersionsRequest.API_KEY:
                    answer.set_result(api_versions_response())
                else:  # a task's first step runs in creation order (the loop's FIFO): appends stay in order
                    answer = asyncio.ensure_future(self.handler(
                        RequestContext(api_key, version, header.correlation_id, header.client_id, peer, self.listener),
                        request))
                in_flight.append((answer, header.correlation_id, version))
                answer.add_done_callback(answer_in_order)
                if writer.transport.get_write_buffer_size() > 1 << 20:
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the client went away
        except Exception:
            log.exception("Closing connection from %s after an unexpected error", peer)
        finally:
            for answer, _, _ in in_flight:
                answer.cancel()
            self._connections.discard(writer)
            writer.close()

    def _refuse(self, peer: str, what: str) -> None:
        self.closed_for_errors += 1
        log.warning("Closing connection from %s: %s", peer, what)

    @staticmethod
    def _write(writer: asyncio.StreamWriter, response, correlation_id: int, version: int) -> None:
        if isinstance(response, bytes):  # a whole frame already (wire.py)
            writer.write(response)
            return
        response.API_VERSION = version  # before the header: kafka-python would set it on the header too
        response.with_header(correlation_id=correlation_id)
        writer.write(response.encode(header=True, framed=True))


class NetworkClient:
    """One connection to a broker's listener; requests may be pipelined, answers come in order."""

    def __init__(self):
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: deque[tuple[int, type, int, asyncio.Future]] = deque()
        self._ids = itertools.count(1)
        self._task: asyncio.Task | None = None
        self.client_id = "kray"

    async def connect(self, host: str, port: int, client_id: str = "kray") -> None:
        self.client_id = client_id
        self._reader, self._writer = await asyncio.open_connection(host, port)
        self._task = asyncio.get_running_loop().create_task(self._read_responses())

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def send(self, request, version: int):
        def frame(correlation_id: int) -> bytes:
            request.with_header(correlation_id=correlation_id, client_id=self.client_id)
            return request.encode(version=version, header=True, framed=True)
        request.with_header(client_id=self.client_id)  # the header names the response's class
        return await self.send_frame(frame, ResponseClassRegistry.get_response_class(request.header), version)

    async def send_frame(self, frame: Callable[[int], bytes], response_class: type, version: int):
        """Send the frame `frame(correlation id)` makes (wire.py's, or a message's encoding); its answer."""
        if not self.connected:
            raise ConnectionError("not connected")
        correlation_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._writer.write(frame(correlation_id))
        self._pending.append((correlation_id, response_class, version, future))
        return await future

    async def _read_responses(self) -> None:
        error: Exception = ConnectionError("connection closed")
        try:
            while True:
                (size,) = _SIZE.unpack(await self._reader.readexactly(4))
                frame = await self._reader.readexactly(size)
                correlation_id, response_class, version, future = self._pending.popleft()
                response = response_class.decode(frame, version=version, header=True)
                if response.header.correlation_id != correlation_id:
                    raise ConnectionError(f"response {response.header.correlation_id} to request {correlation_id}")
                if not future.done():
                    future.set_result(response)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            error = ConnectionError(str(e) or "connection closed")
        except Exception as e:  # an answer that does not decode: the connection is no longer usable
            error = ConnectionError(f"{type(e).__name__}: {e}")
        finally:
            self.close()
            while self._pending:
                future = self._pending.popleft()[3]
                if not future.done():
                    future.set_exception(error)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
