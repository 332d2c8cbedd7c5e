"""A killed process's TCP sockets are found among its namespace's and closed as its death closes them."""
import os
import socket
import subprocess
import sys

import pytest

from actors.process_sockets import TcpSocket, abort_tcp_sockets, ss_filter, tcp_sockets

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1
   2: 0100007F:C351 0100007F:0885 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0 20 4 30 10 -1
"""
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:2328 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 444 1 0 100 0 0 10 0
"""


def test_a_processs_sockets_are_picked_from_its_namespaces_table_by_inode_in_both_families():
    found = tcp_sockets({111, 222, 444, 999}, [TCP, TCP6])
    assert found == [
        TcpSocket("127.0.0.1:8080", "0.0.0.0:0", True),
        TcpSocket("127.0.0.1:8080", "127.0.0.1:50000", False),
        TcpSocket("[::1]:9000", "[::]:0", True),
    ]  # 333 (another process's connection) is left alone
    assert tcp_sockets(set(), [TCP, TCP6]) == []


def test_listeners_are_closed_by_address_and_no_peer_port_and_connections_by_both_ends():
    sockets = [TcpSocket("127.0.0.1:8080", "0.0.0.0:0", True), TcpSocket("[::1]:9000", "[::]:0", True),
               TcpSocket("127.0.0.1:8080", "127.0.0.1:50000", False)]
    assert ss_filter(sockets) == ("( src 127.0.0.1:8080 and dport = :0 ) or ( src [::1]:9000 and dport = :0 ) or "
                                  "( src 127.0.0.1:8080 and dst 127.0.0.1:50000 )")


CHILD = """
import socket, sys, time
server = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print(server.getsockname()[1], flush=True)
time.sleep(60)
"""


def child_connected_to(here: socket.socket) -> tuple[subprocess.Popen, int, socket.socket]:
    """A process listening on a port of its own and connected to `here`: (it, its port, its connection's end here)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(here.getsockname()[1])], stdout=subprocess.PIPE, text=True)
    port = int(child.stdout.readline())
    return child, port, here.accept()[0]


def test_processes_sockets_are_reset_and_their_listeners_refuse_or_it_says_why_not():
    """Run on child processes' real sockets (never this one's: a test run's Ray and ZooKeeper
    connections live here): as root (CI) they are closed, in one call for both; without
    CAP_NET_ADMIN nothing is closed and the reason is given. A process gone has nothing to close."""
    here = socket.create_server(("127.0.0.1", 0))
    first, first_port, from_first = child_connected_to(here)
    second, second_port, from_second = child_connected_to(here)
    bystander = socket.create_connection(("127.0.0.1", here.getsockname()[1]))  # this process's own
    try:
        to_first = socket.create_connection(("127.0.0.1", first_port))  # in its backlog, never accepted
        count, failed = abort_tcp_sockets([first.pid, 2 ** 22 + 1, second.pid])
        assert count == 4  # two listeners, two connections to here
        if os.geteuid() != 0:
            assert "Operation not permitted" in failed
            return
        assert failed == ""
        for s in (from_first, from_second, to_first):
            s.settimeout(5)
            with pytest.raises(ConnectionResetError):  # to_first: a handshake the kernel did, reset with its listener
                s.recv(1)
        for port in (first_port, second_port):
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=5)
        bystander.send(b"x")
        assert here.accept()[0].recv(1) == b"x"  # this process's listener and connection are untouched
        assert first.poll() is None and second.poll() is None  # alive: only their sockets are gone
    finally:
        for child in (first, second):
            child.kill()
            child.wait()
        here.close()


def test_processes_gone_have_nothing_to_close():
    assert abort_tcp_sockets([2 ** 22 + 1]) == (0, "")
