"""Host faults: a host's power loss and return, and partitions between hosts, made here or asked of
the hosts' control agent.

A host cannot make them: it sees neither the other hosts' processes nor their namespaces. So `kray
hosts up` starts a control agent in this (the root) namespace, on the bridge's address, which no
partition cuts: a driver on a host (an experiment's, `kray chaos` run there) asks it, as a test
harness asks a cloud's API to stop a machine. One JSON line a request, one a reply, each request
carrying the hosts' control token (in every host's home); requests run one at a time. Run here as root,
`HostsControl.find()` makes the faults itself, with the same code.
"""
from __future__ import annotations

import hmac
import logging
import os
import socket
import socketserver
import threading
from pathlib import Path
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from coordination.errors import KrayError
from jobs.hosts import shapes
from jobs.hosts.layout import CONTROL_ENV, CONTROL_PORT, CONTROL_TOKEN, HostsLayout
from jobs.hosts.shapes import HostShape

log = logging.getLogger(__name__)
REQUEST_TIMEOUT_S = 300.0  # a return starts a host (30 s at most), its ZooKeeper server and Ray node (120 s each)
LINE_LIMIT = 65536  # a request's longest line


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str = ""
    op: Literal["power-off", "power-on", "partition", "heal"]
    hosts: list[str] = []  # power-off, power-on: one; partition: those the shape names (shapes.TARGETED)
    shape: HostShape | None = None
    among: list[str] = []  # partition: the hosts it spans, in order (default: every host)

    @model_validator(mode="after")
    def _shape_for_a_partition(self) -> "Request":
        if (self.op == "partition") != (self.shape is not None):
            raise ValueError("a partition, and only a partition, names a shape")
        return self


class Reply(BaseModel):
    ok: bool = True
    error: str = ""
    at_ms: float = 0.0  # when the fault took effect (wall clock)
    detail: str = ""


def perform(request: Request, caller: str | None = None) -> Reply:
    """One request against the hosts `kray hosts up` made (read afresh: a host's return changes them);
    `caller`: the address of the host that asked (None: this namespace), which may not power itself off."""
    from jobs.hosts.cluster import start_node
    from jobs.hosts.netns import Hosts

    hosts = Hosts.started()
    if hosts is None:
        raise KrayError("no hosts are up (kray hosts up)")
    if request.op == "heal":
        return Reply(at_ms=hosts.partition({}), detail="every host's rules removed")
    if request.op == "partition":
        among = [hosts.host(h).name for h in request.among] or [h.name for h in hosts.layout.hosts]
        named = [hosts.host(h).name for h in request.hosts]
        try:
            drops = shapes.grudge(request.shape, among, named)
        except ValueError as e:
            raise KrayError(str(e)) from None
        at = hosts.partition(drops, one_way=request.shape is HostShape.ISOLATE_ONE_WAY)
        return Reply(at_ms=at, detail=shapes.describe(request.shape, drops))
    if len(request.hosts) != 1:
        raise KrayError(f"{request.op} takes one host, not {len(request.hosts)}")
    host = hosts.host(request.hosts[0])
    if request.op == "power-off":
        if host.address == caller:
            raise KrayError(f"{host.short} asked to power itself off: nobody would power it on again")
        return Reply(at_ms=hosts.power_off(host), detail=f"{host.short} powered off")
    hosts.power_on(host)
    started = start_node(hosts, host)
    return Reply(detail=f"{host.short} powered on" + (f": {', '.join(started)} started" if started else ""))


def answer(line: bytes, token: str, caller: str | None = None) -> Reply:
    """The agent's reply to one request line (from the host at `caller`)."""
    try:
        request = Request.model_validate_json(line)
    except ValidationError as e:
        return Reply(ok=False, error=f"a bad request: {e.errors()[0]['msg']}")
    if not hmac.compare_digest(request.token.encode(), token.encode()):
        return Reply(ok=False, error="a request without the hosts' token")
    try:
        return _local(request, caller)
    except Exception as e:  # reported to the caller; the agent goes on
        log.exception("%s failed", request.op)
        return Reply(ok=False, error=f"{type(e).__name__}: {e}")


class HostsControl:
    """Host faults, made here or by the agent (`send`: a request to its reply)."""

    def __init__(self, send: Callable[[Request], Reply]):
        self._send = send

    @classmethod
    def find(cls) -> "HostsControl | None":
        """On a host, the agent its ~/.bashrc names; here, as root with hosts up, this process; else None."""
        address = os.environ.get(CONTROL_ENV)
        if address:
            try:
                host, port = address.rsplit(":", 1)
                agent, token = (host, int(port)), (Path.home() / CONTROL_TOKEN).read_text().strip()
            except (ValueError, OSError) as e:
                raise KrayError(f"{CONTROL_ENV}={address}: no agent to ask ({e})") from None
            return cls(lambda request: _ask(agent, request.model_copy(update={"token": token})))
        from jobs.hosts.netns import Hosts

        if os.geteuid() == 0 and Hosts.started() is not None:
            return cls(_local)
        return None

    def _do(self, **request) -> Reply:
        reply = self._send(Request(**request))
        if not reply.ok:
            raise KrayError(reply.error)
        return reply

    def power_off(self, host: str) -> float:
        """Every process of the host killed at once, its link down; when."""
        return self._do(op="power-off", hosts=[host]).at_ms

    def power_on(self, host: str) -> str:
        """The host started again with its disk, and its share of a `--cluster` (ZooKeeper, Ray); what
        was started."""
        return self._do(op="power-on", hosts=[host]).detail

    def partition(self, shape: HostShape, named: list[str] = (), among: list[str] = ()) -> tuple[float, str]:
        """Every host's rules replaced by `shape`'s (a partition already made is healed by it); (when, which
        host drops whose packets)."""
        reply = self._do(op="partition", shape=shape, hosts=list(named), among=list(among))
        return reply.at_ms, reply.detail

    def heal(self) -> float:
        return self._do(op="heal").at_ms


def _local(request: Request, caller: str | None = None) -> Reply:
    """perform's reply, a refusal (KrayError) as its one line."""
    try:
        return perform(request, caller)
    except KrayError as e:
        return Reply(ok=False, error=e.args[0] if e.args else str(e))


def _ask(address: tuple[str, int], request: Request) -> Reply:
    try:
        with socket.create_connection(address, timeout=REQUEST_TIMEOUT_S) as s:
            s.sendall(request.model_dump_json().encode() + b"\n")
            line = s.makefile("rb").readline()
    except OSError as e:
        raise KrayError(f"the hosts' control agent at {address[0]}:{address[1]} did not answer: {e}") from None
    if not line:
        raise KrayError(f"the hosts' control agent at {address[0]}:{address[1]} closed the connection")
    return Reply.model_validate_json(line)


def serve(layout: HostsLayout, token: str) -> None:
    """The agent: every request line answered, one request at a time."""
    lock = threading.Lock()

    class Handler(socketserver.StreamRequestHandler):
        timeout = REQUEST_TIMEOUT_S  # a connection silent this long is closed

        def handle(self) -> None:
            while line := self.rfile.readline(LINE_LIMIT):
                with lock:
                    reply = answer(line, token, self.client_address[0])
                log.info("%s: %s", self.client_address[0], reply.error or reply.detail or "done")
                self.wfile.write(reply.model_dump_json().encode() + b"\n")

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer((layout.bridge_address, CONTROL_PORT), Handler) as server:
        server.daemon_threads = True
        log.info("The hosts' control agent listens on %s:%d", layout.bridge_address, CONTROL_PORT)
        server.serve_forever()


def main() -> None:
    from jobs.hosts.netns import Hosts

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    hosts = Hosts.started()
    if hosts is None:
        raise SystemExit("no hosts are up (kray hosts up)")
    serve(hosts.layout, hosts.layout.control_token.read_text().strip())


if __name__ == "__main__":
    main()
