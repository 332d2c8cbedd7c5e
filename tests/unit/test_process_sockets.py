"""A killed process's TCP sockets are found among its namespace's and closed as its death closes them."""
import os
import socket
import subprocess
import sys

import pytest

from actors.process_sockets import TcpSocket, abort_tcp_sockets, ss_filters, tcp_sockets

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


def test_listeners_are_closed_by_address_and_connections_by_both_ends():
    sockets = [TcpSocket("127.0.0.1:8080", "0.0.0.0:0", True), TcpSocket("[::1]:9000", "[::]:0", True),
               TcpSocket("127.0.0.1:8080", "127.0.0.1:50000", False)]
    assert ss_filters(sockets) == [
        ["state", "listening", "src 127.0.0.1:8080 or src [::1]:9000"],
        ["state", "connected", "( src 127.0.0.1:8080 and dst 127.0.0.1:50000 )"],
    ]
    assert ss_filters(sockets[2:]) == [["state", "connected", "( src 127.0.0.1:8080 and dst 127.0.0.1:50000 )"]]
    assert ss_filters([]) == []


CHILD = """
import socket, sys, time
server = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print(server.getsockname()[1], flush=True)
time.sleep(60)
"""


def test_a_processs_sockets_are_reset_and_its_listener_refuses_or_it_says_why_not():
    """Run on a child process's real sockets (never this one's: a test run's Ray and ZooKeeper
    connections live here): as root (CI) they are closed; without CAP_NET_ADMIN nothing is closed
    and the reason is given. This process's own connection to the child's listener stays open."""
    here = socket.create_server(("127.0.0.1", 0))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(here.getsockname()[1])], stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        from_child, _ = here.accept()
        to_child = socket.create_connection(("127.0.0.1", port))  # in its backlog, never accepted
        count, failed = abort_tcp_sockets(child.pid)
        assert count == 2  # its listener and its connection to here
        if os.geteuid() != 0:
            assert "Operation not permitted" in failed
            return
        assert failed == ""
        from_child.settimeout(5)
        with pytest.raises(ConnectionResetError):
            from_child.recv(1)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
        to_child.settimeout(5)
        with pytest.raises(ConnectionResetError):  # a handshake done by the kernel, reset with its listener
            to_child.recv(1)
        assert child.poll() is None  # alive: only its sockets are gone
    finally:
        child.kill()
        child.wait()
        here.close()


def test_a_process_gone_has_nothing_to_close():
    assert abort_tcp_sockets(2 ** 22 + 1) == (0, f"[Errno 2] No such file or directory: '/proc/{2 ** 22 + 1}/fd'")
