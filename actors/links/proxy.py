"""A link made faultable: a TCP forwarder on loopback between a process and what it connects to (a
ZooKeeper server, another broker's listener) or between a broker's listener and its clients, each
direction shaped by its own `LinkFault`.

The process connects to the proxy instead of the target, and nothing else changes for it: a cut link
stalls its connections (bytes wait, as TCP's retransmissions would, and flow again once healed)
while the process itself lives on, which is what a network partition does and a kill does not; a
dropped link closes them (a reset) and refuses new ones until healed. A
direction that is cut stops reading once its queue is full, so the sender's socket buffer fills and
its writes block, as they would on a partitioned network. `LinkTable` keeps a process's proxies on
one event loop and takes faults from any thread.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading

from actors.links.faults import HEALTHY, ZOOKEEPER_LINK, Direction, FaultTable, LinkFault, Shaper, describe

log = logging.getLogger(__name__)

CHUNK_BYTES = 65_536
QUEUED_CHUNKS = 64  # per direction and connection; beyond it the proxy stops reading (backpressure)


class LinkProxy:
    """One link: connections accepted on `host`:`port` (0: a free port) are forwarded to `target`."""

    def __init__(self, name: str, target: tuple[str, int], host: str = "127.0.0.1", port: int = 0) -> None:
        self.name, self.target, self.host, self.port = name, target, host, port
        self.rng = random.Random()
        self.faults = {d: HEALTHY for d in Direction}
        self._healed = {d: asyncio.Event() for d in Direction}  # set: not cut
        for event in self._healed.values():
            event.set()
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        self.faults = {d: HEALTHY for d in Direction}
        for d in Direction:
            self._healed[d].set()  # pumps held by a cut go on, find their writers closed and end

    def set_fault(self, direction: Direction, fault: LinkFault) -> None:
        """On the proxy's loop. A cut holds what is sent from now on, and what is still on its way."""
        previous, self.faults[direction] = self.faults[direction], fault
        if fault.drop:  # a connection is both directions: either one dropped closes it
            for writer in list(self._writers):
                writer.transport.abort()
        if fault.cut:
            self._healed[direction].clear()
        else:
            self._healed[direction].set()
        if previous != fault:
            log.info("Link %s %s: %s", self.name, direction.value, describe(fault))

    async def _serve(self, down_reader: asyncio.StreamReader, down_writer: asyncio.StreamWriter) -> None:
        if any(f.drop for f in self.faults.values()):  # refused while dropped: accepted and reset at once
            down_writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:  # the target is down: so is the connection through the link
            down_writer.close()
            return
        if any(f.drop for f in self.faults.values()):  # dropped while it connected
            for w in (down_writer, up_writer):
                w.transport.abort()
            return
        self._writers |= {down_writer, up_writer}
        try:
            await asyncio.gather(self._pump(down_reader, up_writer, Direction.FORWARD),
                                 self._pump(up_reader, down_writer, Direction.BACKWARD))
        except (ConnectionError, OSError):
            pass
        finally:
            for w in (down_writer, up_writer):
                self._writers.discard(w)
                w.close()

    async def _held(self, direction: Direction) -> bool:
        """Wait while `direction` is cut; whether it was."""
        held = False
        while self.faults[direction].cut:
            held = True
            await self._healed[direction].wait()
        return held

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: Direction) -> None:
        """Read chunks as they come (stamped with when they were sent) and write each when the link
        delivers it; the end of the stream passes on once everything before it has."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue(QUEUED_CHUNKS)  # None: a reset
        shaper = Shaper(self.rng)

        async def read() -> None:
            while True:
                try:
                    data = await reader.read(CHUNK_BYTES)
                except (ConnectionError, OSError):  # reset: passed on as a reset, after what came before it
                    await queue.put((loop.time(), None))
                    return
                await queue.put((loop.time(), data))
                if not data:
                    return

        reading = asyncio.ensure_future(read())
        try:
            while True:
                sent_at, data = await queue.get()
                if await self._held(direction):
                    sent_at = max(sent_at, loop.time())  # held by the cut: it leaves when the link heals
                if writer.is_closing():
                    return
                wait = shaper.deliver_at(sent_at, len(data or b""), self.faults[direction]) - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._held(direction)  # cut while on its way
                if data is None:
                    writer.transport.abort()
                    return
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await reading


class LinkTable:
    """A process's faultable links, by name (`zookeeper`, `broker-N`, a broker's `clients`), on an event
    loop of their own thread (never one whose code waits on a link it carries: a broker's data-plane
    loop makes ZooKeeper calls). A fault set on a link holds for every proxy it has or opens later, so a
    link can be cut before it is first used."""

    def __init__(self, name: str = "kray-links") -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name=name, daemon=True).start()
        self._lock = threading.Lock()  # the table changes from the process's threads; the loop never takes it
        self._proxies: dict[str, list[LinkProxy]] = {}  # a link to an ensemble is one proxy per server
        self._faults = FaultTable()

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def _open(self, name: str, target: tuple[str, int], host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        proxy = LinkProxy(name, target, host, port)
        for direction, fault in self._faults.of(name).items():
            proxy.set_fault(direction, fault)
        self._run(proxy.start())
        self._proxies.setdefault(name, []).append(proxy)
        return proxy.host, proxy.port

    def route_zookeeper(self, connect: str) -> str:
        """zookeeper.connect with each server reached through link `zookeeper` (the chroot kept)."""
        servers, slash, chroot = connect.partition("/")
        routed = []
        with self._lock:
            for server in servers.split(","):
                host, port = server.rsplit(":", 1)
                routed.append("%s:%d" % self._open(ZOOKEEPER_LINK, (host, int(port))))
        return ",".join(routed) + slash + chroot

    def route(self, name: str, target: tuple[str, int]) -> tuple[str, int]:
        """The address to reach one peer at `target` through link `name`: opened on first use, and again
        when the peer moved (a restarted broker listens on a new port)."""
        with self._lock:
            proxies = self._proxies.get(name, [])
            if proxies and proxies[0].target == target:
                return proxies[0].host, proxies[0].port
            for proxy in proxies:
                self._run(proxy.stop())
            self._proxies[name] = []
            return self._open(name, target)

    def expose(self, name: str, target: tuple[str, int], host: str, port: int = 0) -> int:
        """Link `name` in front of this process's own listener at `target`, accepting on `host`:`port`
        (0: a free one): the port others reach the listener on. OSError when `port` is taken."""
        with self._lock:
            return self._open(name, target, host, port)[1]

    def set_fault(self, name: str, direction: Direction, fault: LinkFault) -> dict[str, dict[str, LinkFault]]:
        """Every link's faults, this one set."""
        with self._lock:
            self._faults.set(name, direction, fault)
            proxies = list(self._proxies.get(name, []))

            async def apply() -> None:
                for proxy in proxies:
                    proxy.set_fault(direction, fault)
            self._run(apply())
        return self.faults()

    def faults(self) -> dict[str, dict[str, LinkFault]]:
        """Every link opened or faulted, each direction's fault."""
        with self._lock:
            return self._faults.report(self._proxies)

    def close(self) -> None:
        with self._lock:
            for proxy in (p for ps in self._proxies.values() for p in ps):
                self._run(proxy.stop())
            self._proxies.clear()
