"""A killed process's TCP sockets, closed as its death closes them.

The chaos tool stops a process (SIGSTOP) before it tells Ray and kills it, so that the fault takes
effect at one instant. A stopped process's sockets stay open: its peers see nothing, its listener
still completes handshakes into its backlog, and a client learns of the death only from Ray's side
of it (the controller's new metadata), in the middle of the transition. A SIGKILLed process's
kernel closes every socket at once, before anyone else acts: the clients' connections are reset and
new ones refused. So the tool closes the stopped process's TCP sockets first (`ss -K`, the kernel's
SOCK_DESTROY: a reset to each peer, a listener closed), then tells Ray.

How it fails: SOCK_DESTROY needs CAP_NET_ADMIN and a kernel built with INET_DIAG_DESTROY; without
them nothing is closed and `abort_tcp_sockets` says so (the kill itself still happens: its peers
learn of it later, from Ray's side first). A process gone meanwhile has no sockets left to close.
"""
from __future__ import annotations

import contextlib
import ipaddress
import os
import subprocess
from typing import NamedTuple

LISTEN = "0A"  # the kernel's TCP_LISTEN, as /proc/net/tcp writes states


class TcpSocket(NamedTuple):
    local: str  # "host:port", as ss's filters take it ([host]:port for IPv6)
    remote: str
    listening: bool


def _address(field: str) -> str:
    """/proc/net/tcp's "0100007F:1F90" (each 32-bit word of the address in host order) as "127.0.0.1:8080"."""
    hex_ip, hex_port = field.split(":")
    raw = b"".join(int(hex_ip[i:i + 8], 16).to_bytes(4, "little") for i in range(0, len(hex_ip), 8))
    ip = ipaddress.ip_address(raw)
    host = str(ip) if ip.version == 4 else f"[{ip}]"
    return f"{host}:{int(hex_port, 16)}"


def tcp_sockets(inodes: set[int], tables: list[str]) -> list[TcpSocket]:
    """The sockets of `tables` (the text of /proc/PID/net/tcp and tcp6) whose inode is one of
    `inodes` (a process's open sockets): one process's TCP sockets, out of its namespace's."""
    found = []
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and int(fields[9]) in inodes:
                found.append(TcpSocket(_address(fields[1]), _address(fields[2]), fields[3] == LISTEN))
    return found


def ss_filter(sockets: list[TcpSocket]) -> str:
    """The `ss -K state all` filter that closes exactly `sockets`: a listener by its address and no
    peer port, a connection by both ends."""
    return " or ".join(f"( src {s.local} and dport = :0 )" if s.listening else f"( src {s.local} and dst {s.remote} )"
                       for s in sockets)


def _open_socket_inodes(pid: int) -> set[int]:
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def abort_tcp_sockets(pids: list[int]) -> tuple[int, str]:
    """Close every TCP socket of processes `pids` (stopped, so that they open none meanwhile; of one
    node, so of one network namespace) as their death would, in one `ss` call: (how many they had,
    "" or why they were not closed)."""
    inodes: set[int] = set()
    alive = []
    try:
        for pid in pids:
            with contextlib.suppress(FileNotFoundError):  # gone meanwhile: nothing of it to close
                inodes |= _open_socket_inodes(pid)
                alive.append(pid)
        if not alive:
            return 0, ""
        tables = [open(f"/proc/{alive[0]}/net/{name}").read() for name in ("tcp", "tcp6")]
    except OSError as e:  # not ours to read
        return 0, str(e)
    sockets = tcp_sockets(inodes, tables)
    if not sockets:
        return 0, ""
    try:
        done = subprocess.run(["ss", "-K", "-t", "-n", "-H", "state", "all", ss_filter(sockets)],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return len(sockets), f"ss -K: {e}"
    if done.returncode != 0 or done.stderr.strip():
        return len(sockets), f"ss -K: {done.stderr.strip() or done.returncode}"
    closed = len(done.stdout.splitlines())  # ss prints each socket it closed: none where the kernel cannot
    if closed < len(sockets):  # none: a kernel without INET_DIAG_DESTROY; some: the others ended meanwhile
        why = " (a kernel without INET_DIAG_DESTROY closes none)" if not closed else ""
        return len(sockets), f"ss -K closed {closed} of {len(sockets)}{why}"
    return len(sockets), ""
