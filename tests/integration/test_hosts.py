"""Hosts of their own on this machine, through `kray hosts` as a user runs it (as root, as CI does):
each with its own address, hostname and processes, reachable over the bridge and by SSH, made
again only where missing, powered off whole, and unmade without a trace. Their names and subnet
are the tests' own, so a user's `kray hosts` on the same machine is left alone."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import ray

from jobs.cli import main
from jobs.hosts.layout import RAY_TOKEN
from jobs.hosts.netns import Hosts

PREFIX, SUBNET = "krt", "10.78.0.0/24"


def kray(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def netns_names() -> set[str]:
    return {line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                                        check=True).stdout.splitlines() if line.strip()}


def ns_pids(name: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.fixture
def kray_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KRAY_HOME", str(tmp_path))
    yield tmp_path
    started = Hosts.started()
    if started:  # a test that failed half-way leaves nothing behind
        started.down()


def test_hosts_have_their_own_address_name_and_processes_and_reach_each_other(kray_home, capsys, ray_session):
    code, out, _ = kray(capsys, "hosts", "up", "3", "--prefix", PREFIX, "--subnet", SUBNET)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["HOST", "NAME", "ADDRESS", "PID", "1"]
    assert [line.split()[:3] for line in lines[1:4]] == [["h1", "krt-h1", "10.78.0.11"], ["h2", "krt-h2", "10.78.0.12"],
                                                         ["h3", "krt-h3", "10.78.0.13"]]
    hosts = Hosts.started()
    for host in hosts.layout.hosts:
        seen = hosts.run(host, ["sh", "-c", "hostname; hostname -I; ps -e -o pid=,comm="], capture_output=True,
                         text=True, check=True).stdout.split("\n")
        assert seen[0] == host.name and seen[1].split() == [host.address]
        processes = [line.split() for line in seen[2:] if line.strip()]
        assert processes[0] == ["1", "sshd"] and len(processes) <= 3  # its PID 1, the shell, ps: nothing of the machine's
    h1, h2, h3 = hosts.layout.hosts
    assert hosts.run(h1, ["ping", "-c", "1", "-W", "2", h3.address], capture_output=True).returncode == 0
    assert subprocess.run(["ping", "-c", "1", "-W", "2", h2.address], capture_output=True).returncode == 0  # from here
    # SSH as `ray up` uses it: a login shell that finds the project's ray, in a home of the host's own
    login = hosts.ssh(h2, "hostname; command -v ray; echo $RAY_AUTH_MODE; ls -A ~ | sort | tr '\\n' ' '",
                      capture_output=True, text=True, timeout=30)
    assert login.returncode == 0, login.stderr
    name, ray_bin, auth, home = login.stdout.splitlines()
    assert (name, auth) == ("krt-h2", "token") and ray_bin.endswith(".venv/bin/ray")
    assert {".bashrc", ".ssh", ".ray"} <= set(home.split())  # .ray: the hosts' Ray token, none of this machine's
    # `ray stop` kills by name among the processes it sees: in a host, only the host's own
    assert hosts.run(h1, ["ray", "stop", "--force"], capture_output=True).returncode == 0
    assert ray.get(ray.remote(lambda: "alive").remote(), timeout=30) == "alive"
    # the real interpreter is bound in read-only
    touched = hosts.run(h3, ["sh", "-c", f"touch {Path(os.path.realpath(sys.executable)).parent}/kray-was-here"],
                        capture_output=True, text=True)
    assert touched.returncode != 0 and "Read-only file system" in touched.stderr


def test_up_again_makes_only_what_is_missing_and_a_powered_off_host_comes_back(kray_home, capsys):
    assert kray(capsys, "hosts", "up", "2", "--prefix", PREFIX, "--subnet", SUBNET)[0] == 0
    first = Hosts.started()
    h1, h2 = first.layout.hosts
    assert hosts_exec(capsys, "h2", "sh", "-c", "setsid sleep 600 > /dev/null 2>&1 < /dev/null &") == 0
    deadline = time.monotonic() + 10
    while not (sleeping := [p for p in ns_pids(h2.name) if Path(f"/proc/{p}/comm").read_text().strip() == "sleep"]) \
            and time.monotonic() < deadline:  # setsid's child execs sleep a moment later
        time.sleep(0.05)
    assert len(sleeping) == 1
    # the hosts' Ray token in each home, dated 1970 so that rsync never takes a user's token for it; a token that
    # `ray up` put in its place outlives the host's power loss, as a machine's disk does
    token = first.layout.home(h2) / RAY_TOKEN
    assert token.read_text() == first.layout.ray_token.read_text() and token.stat().st_mtime == 0
    token.write_text("the user's token")
    first.power_off(h2)
    assert ns_pids(h2.name) == [] and not Path(f"/proc/{sleeping[0]}").exists()  # every process of it at once
    assert kray(capsys, "hosts", "up", "3", "--prefix", PREFIX, "--subnet", SUBNET)[0] == 0  # grown by one
    again = Hosts.started()
    assert again.init_pids[h1.name] == first.init_pids[h1.name]  # untouched
    assert again.init_pids[h2.name] != first.init_pids[h2.name]  # started again
    assert token.read_text() == "the user's token"
    assert again.run(again.layout.hosts[2], ["hostname"], capture_output=True, text=True).stdout.strip() == "krt-h3"
    code, _, err = kray(capsys, "hosts", "up", "2", "--prefix", PREFIX, "--subnet", SUBNET)
    assert code == 1 and err == "Error: KrayError: 3 hosts are up: `kray hosts down` first to have 2\n"
    code, _, err = kray(capsys, "hosts", "up", "3", "--subnet", "10.79.0.0/24")
    assert code == 1 and "are up on 10.78.0.0/24" in err


def hosts_exec(capsys, host: str, *argv: str) -> int:
    with pytest.raises(SystemExit) as exited:
        main(["hosts", "exec", host, "--", *argv])
    capsys.readouterr()
    return exited.value.code


def test_down_removes_the_hosts_the_bridge_its_rule_and_their_files(kray_home, capsys):
    assert kray(capsys, "hosts", "up", "2", "--prefix", PREFIX, "--subnet", SUBNET)[0] == 0
    pids = [*Hosts.started().init_pids.values(), Hosts.started().control_pid]
    code, out, _ = kray(capsys, "hosts", "down")
    assert (code, out) == (0, "Hosts down: removed krt-h1, krt-h2, krtbr0\n")
    assert not {n for n in netns_names() if n.startswith("krt-")}
    assert subprocess.run(["ip", "link", "show", "krtbr0"], capture_output=True).returncode != 0
    assert "krtbr0" not in subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout
    assert not any(Path(f"/proc/{p}").exists() for p in pids)
    assert not (kray_home / "hosts").exists() and not (kray_home / "hosts.json").exists()
    assert kray(capsys, "hosts", "down")[1] == "No hosts are up (kray hosts up)\n"
    assert kray(capsys, "hosts", "list")[1] == "No hosts are up (kray hosts up)\n"


def test_without_root_kray_hosts_says_so_in_one_line_and_makes_nothing():
    """As nobody, with Debian's python3 (the venv's interpreter lives in root's home) and the venv's packages,
    in a directory nobody can reach (pytest's are root's alone)."""
    tmp_path = Path(tempfile.mkdtemp(prefix="kray-nobody-"))
    tmp_path.chmod(0o777)
    repo = Path(__file__).resolve().parents[2]
    site = next((repo / ".venv" / "lib").glob("python3*/site-packages"))
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", f"HOME={tmp_path}",
         f"KRAY_HOME={tmp_path}/kray", f"PYTHONPATH={repo}:{site}", "/usr/bin/python3", "-m", "jobs.cli",
         "hosts", "up", "2", "--prefix", PREFIX, "--subnet", SUBNET],
        capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 1
    assert done.stderr == ("Error: KrayError: kray hosts needs root (network namespaces, a bridge, iptables); "
                           "without hosts, kray runs on loopback\n")
    assert not {n for n in netns_names() if n.startswith("krt-")} and not (tmp_path / "kray" / "hosts").exists()
    shutil.rmtree(tmp_path)
