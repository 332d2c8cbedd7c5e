"""Faults the kernel makes between hosts of their own (`kray hosts`), as a user makes them: from this
namespace, and from inside a host through the hosts' control agent. What each host can reach is
probed from inside every host (a TCP connection to each other host's sshd): a cut is silence (the
connection times out, it is not refused), a one-way isolation cuts only the connections others
open, a powered-off host answers nothing and comes back with its disk."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from jobs.cli import main
from jobs.hosts.layout import CONTROL_PORT, RAY_TOKEN, enter_command
from jobs.hosts.netns import Hosts, real_home
from tests.integration.test_hosts import kray, kray_home  # noqa: F401 (a fixture)

PREFIX, SUBNET = "krf", "10.80.0.0/24"
PROBE = """
import socket, sys
from concurrent.futures import ThreadPoolExecutor
def answers(address):
    try:
        socket.create_connection((address, 22), timeout=0.5).close()
        return "y"
    except socket.timeout:
        return "."
    except OSError:
        return "r"
with ThreadPoolExecutor(len(sys.argv) - 1) as pool:
    print("".join(pool.map(answers, sys.argv[1:])))
"""


def reach(hosts: Hosts) -> dict[str, str]:
    """For each host, what each host (h1..) answers it: y (connected), . (silence), r (refused)."""
    addresses = [h.address for h in hosts.layout.hosts]

    def probe(host):
        done = hosts.run(host, [sys.executable, "-c", PROBE, *addresses], capture_output=True, text=True, timeout=30)
        return done.stdout.strip()
    with ThreadPoolExecutor(len(addresses)) as pool:
        return dict(zip((h.short for h in hosts.layout.hosts), pool.map(probe, hosts.layout.hosts)))


def sees(*rows: str) -> dict[str, str]:
    return {f"h{i}": row for i, row in enumerate(rows, 1)}


ALL = sees("yyyyy", "yyyyy", "yyyyy", "yyyyy", "yyyyy")


@pytest.fixture
def five(kray_home, capsys):  # noqa: F811
    assert kray(capsys, "hosts", "up", "5", "--prefix", PREFIX, "--subnet", SUBNET)[0] == 0
    return Hosts.started()


def test_every_partition_shape_cuts_what_it_says_and_heals(five, capsys):
    assert reach(five) == ALL
    for argv, expected in [
        (["isolate", "h3"], sees("yy.yy", "yy.yy", "..y..", "yy.yy", "yy.yy")),
        (["isolate-one-way", "h3"], sees("yy.yy", "yy.yy", "yyyyy", "yy.yy", "yy.yy")),  # h3's own connections work
        (["cut", "h2", "h4"], sees("yyyyy", "yyy.y", "yyyyy", "y.yyy", "yyyyy")),
        (["halves"], sees("yy...", "yy...", "..yyy", "..yyy", "..yyy")),  # the smaller half first, as Jepsen's
        (["bridge"], sees("yyy..", "yyy..", "yyyyy", "..yyy", "..yyy")),  # h3, first of the second half, bridges
        (["majorities-ring"], sees("yy..y", "yyy..", ".yyy.", "..yyy", "y..yy")),
        (["halves", "--among", "h2,h3,h4,h5"], sees("yyyyy", "yyy..", "yyy..", "y..yy", "y..yy")),  # h1 outside it
    ]:
        code, out, err = kray(capsys, "hosts", "partition", *argv)
        assert code == 0, err
        assert reach(five) == expected, argv
    assert kray(capsys, "hosts", "heal") == (0, "Healed: every host's rules removed\n", "")
    assert reach(five) == ALL


LISTENER = """
import socket, sys, threading, time
s = socket.create_server((sys.argv[1], 5555))
c, _ = s.accept()
c.settimeout(0.5)
def beat():  # its own bytes too: a connection a cut meets in the middle carries both ways
    while True:
        c.send(b"h")
        time.sleep(0.05)
threading.Thread(target=beat, daemon=True).start()
while True:
    try:
        if not c.recv(100):
            break
        print(time.time(), flush=True)
    except TimeoutError:  # silence
        pass
"""
TALKER = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 5555))
c.setblocking(False)
while True:
    try:
        c.send(b"x")
        c.recv(100_000)
    except BlockingIOError:
        pass
    time.sleep(0.1)
"""


def test_a_one_way_isolation_cuts_a_connection_another_host_opened_before_it(five, capsys):
    h1, h3 = five.layout.hosts[0], five.layout.hosts[2]

    def start(host, script, *argv):
        return subprocess.Popen(enter_command(five.init_pids[host.name], real_home(), [sys.executable, "-c", script,
                                                                                       *argv]),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    listener = start(h3, LISTENER, h3.address)
    time.sleep(0.5)
    talker = start(h1, TALKER, h3.address)
    time.sleep(1.0)  # h1's bytes reach h3, h3's reach h1
    assert kray(capsys, "hosts", "partition", "isolate-one-way", "h3")[0] == 0
    cut = time.time()
    time.sleep(2.0)
    for p in (talker, listener):  # nsenter and the process it forked into the host
        os.killpg(p.pid, signal.SIGKILL)
    out = listener.communicate()[0]
    heard = [float(line) for line in out.split()] if "Traceback" not in out else pytest.fail(out)
    assert len([t for t in heard if t < cut]) >= 5  # h1's bytes, every 0.1 s before the cut
    # h1 opened it: after the cut h3 hears nothing more on it (but what was in flight), though it goes on talking
    assert [t for t in heard if t > cut + 0.3] == []


def test_from_a_host_the_agent_cuts_hosts_and_powers_one_off_and_on_with_its_disk(five, capsys):
    h1, h2, h3 = five.layout.hosts[:3]

    def on_h1(*argv: str):
        return five.run(h1, ["kray", "hosts", *argv], capture_output=True, text=True, timeout=120)
    # h1's Ray token replaced, as `ray up`'s file mount of a user's token does: the agent's token is another
    (five.layout.home(h1) / RAY_TOKEN).write_text("the user's Ray token")
    done = on_h1("partition", "cut", "h2", "h3")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Partitioned: cut: krf-h2 drops krf-h3; krf-h3 drops krf-h2; `kray hosts heal` heals it\n"
    assert reach(five)["h2"] == "yy.yy"
    assert on_h1("heal").returncode == 0 and reach(five) == ALL
    assert five.run(h3, ["sh", "-c", "echo kept > ~/disk"]).returncode == 0
    done = on_h1("power-off", "h3")
    assert done.returncode == 0, done.stderr
    assert reach(five)["h1"] == "yy.yy"  # silence: no process, and its link down
    with pytest.raises(socket.timeout):
        socket.create_connection((h3.address, 22), timeout=0.5)
    done = on_h1("power-on", "h3")
    assert (done.returncode, done.stdout) == (0, "h3 powered on\n"), done.stderr
    again = Hosts.started()
    assert reach(again) == ALL
    assert again.init_pids[h3.name] != five.init_pids[h3.name]  # a new PID 1 ...
    assert again.run(h3, ["sh", "-c", "cat ~/disk"], capture_output=True, text=True).stdout == "kept\n"  # same disk
    # the agent takes nothing without the hosts' token, and a bad request changes nothing
    with socket.create_connection((five.layout.bridge_address, CONTROL_PORT), timeout=5) as s:
        s.sendall(b'{"op": "power-off", "hosts": ["h2"]}\n{"op": "reboot"}\n')
        s.shutdown(socket.SHUT_WR)
        replies = s.makefile().read().splitlines()
    assert '"error":"a request without the hosts\' token"' in replies[0]
    assert '"error":"a bad request: Input should be' in replies[1]
    assert reach(again) == ALL
    done = on_h1("partition", "cut", "h2")
    assert done.returncode == 1 and done.stderr.strip() == \
        "Error: KrayError: cut takes 2 hosts of krf-h1, krf-h2, krf-h3, krf-h4, krf-h5, not krf-h2"


def test_without_hosts_the_host_commands_say_so_in_one_line(kray_home, capsys):  # noqa: F811
    code, _, err = kray(capsys, "hosts", "heal")
    assert (code, err) == (1, "Error: KrayError: no hosts are up here (kray hosts up, as root), and this is no host "
                              "of them\n")
    assert main(["hosts", "partition", "halves"]) == 1
