"""Hosts brought up and down on this machine (`kray hosts up N`, `kray hosts down`): the commands of
`jobs.hosts.layout` run, what was made kept in $KRAY_HOME/hosts.json.

How it fails:
- without root, or on a kernel that refuses namespaces, or without iproute2/openssh-server: one
  KrayError before anything is made (the loopback default needs none of it);
- run twice, `up` makes only what is missing (a host whose PID 1 died is started again);
- `down` unmakes what a state file or the namespaces' names show, even after a crash of `up`;
- a host's processes die with its PID 1 (the kernel kills a PID namespace's members with it), so
  `down` and a power loss leave nothing running; a powered-off host's link is down, so that it answers
  nothing (its peers' connections time out, as to a machine without power, rather than being reset);
- partitions are the hosts' own iptables rules (`jobs.hosts.shapes`), set on every host at once.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from coordination.errors import KrayError
from jobs.experiments import local
from jobs.hosts import shapes
from jobs.hosts.layout import (
    CONTROL_PORT,
    CONTROL_TOKEN,
    HOST_KEY,
    RAY_TOKEN,
    SSHD,
    Host,
    HostsLayout,
    bashrc,
    bridge_commands,
    enter_command,
    etc_hosts,
    forward_rule,
    init_command,
    network_commands,
)

STATE = "hosts"
NODE_CPUS = 2  # what Ray may schedule on each host (all share this machine's cores)
NODE_MEMORY = 2 * 2**30
NODE_OBJECT_STORE = 256 * 2**20
TOOLS = {"ip": "iproute2", "iptables": "iptables", "unshare": "util-linux", "nsenter": "util-linux",
         SSHD: "openssh-server", "ssh": "openssh-client", "ssh-keygen": "openssh-client"}
REPO = Path(__file__).resolve().parents[2]
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes",
               "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"]


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise KrayError(f"{' '.join(argv)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done


def preflight() -> None:
    """Root, the tools and a kernel that makes namespaces, or one line saying which is missing."""
    if os.geteuid() != 0:
        raise KrayError("kray hosts needs root (network namespaces, a bridge, iptables); "
                        "without hosts, kray runs on loopback")
    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        raise KrayError(f"kray hosts needs Debian's {', '.join(missing)} (make setup installs them)")
    refused = _run(["unshare", "--net", "--pid", "--fork", "--mount", "true"], check=False)
    if refused.returncode != 0:
        raise KrayError(f"this kernel refuses new namespaces ({refused.stderr.strip()}); "
                        "without hosts, kray runs on loopback")


def _alive(pid: int | None) -> bool:
    try:
        return pid is not None and Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _init_of(pid: int | None, name: str) -> bool:
    """Whether `pid` is alive in network namespace `name`: a PID in a state file may be another
    process's by now (a reboot, a host whose PID 1 died and whose number was reused)."""
    try:
        return _alive(pid) and os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return False


def _netns_pids(name: str) -> list[int]:
    return [int(p) for p in _run(["ip", "netns", "pids", name], check=False).stdout.split()]


def real_home() -> Path:
    """root's home as sshd and `ray up` see it (the password file's), whatever $HOME says."""
    return Path(pwd.getpwuid(os.geteuid()).pw_dir).resolve()


def _netns_names() -> set[str]:
    return {line.split()[0] for line in _run(["ip", "netns", "list"]).stdout.splitlines() if line.strip()}


def _first_child(pid: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.01)
    raise KrayError(f"process {pid} started no host")


def _listening(address: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=0.5):
        return True
    return False


def _wait_listening(address: str, port: int, timeout: float, log: Path, what: str = "sshd") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _listening(address, port):
            return
        time.sleep(0.05)
    raise KrayError(f"{what} on {address}:{port} not up after {timeout:.0f} s; see {log}")


class Hosts:
    """The hosts of one layout: made, entered, powered off, unmade."""

    def __init__(self, layout: HostsLayout, init_pids: dict[str, int] | None = None, cluster: dict | None = None,
                 control_pid: int | None = None):
        self.layout = layout
        self.init_pids = dict(init_pids or {})  # host name -> its PID 1, as the root namespace numbers it
        self.cluster = cluster  # what `--cluster` started (jobs.hosts.cluster): what a host's return starts again
        self.control_pid = control_pid  # the control agent's (jobs.hosts.control)

    @classmethod
    def started(cls) -> "Hosts | None":
        """The hosts `kray hosts up` made here, if any."""
        try:
            state = local.read_state(STATE)
            return cls(HostsLayout(**state["layout"]), state["init_pids"], state.get("cluster"),
                       state.get("control_pid")) if state else None
        except (ValueError, KeyError, TypeError) as e:  # pydantic's ValidationError is a ValueError
            raise KrayError(f"{local.kray_home() / (STATE + '.json')} is unreadable ({e.__class__.__name__}): "
                            "remove the hosts by hand (ip netns, the bridge) and the file") from None

    def save(self) -> None:
        local.write_state(STATE, {"layout": self.layout.model_dump(mode="json"), "init_pids": self.init_pids,
                                  "cluster": self.cluster, "control_pid": self.control_pid})

    # making
    def up(self, timeout: float = 30.0) -> "Hosts":
        preflight()
        self.save()  # first: `down` finds what a failed `up` made
        self._keys()
        if _run(["ip", "link", "show", "dev", self.layout.bridge], check=False).returncode != 0:
            for argv in bridge_commands(self.layout):
                _run(argv)
        if _run(forward_rule(self.layout, "-C"), check=False).returncode != 0:
            _run(forward_rule(self.layout, "-I"))
        self.layout.etc_hosts.write_text(etc_hosts(self.layout))  # in place: running hosts see the new ones too
        existing = _netns_names()
        for host in self.layout.hosts:
            if host.name not in existing:
                _run(["ip", "link", "del", host.veth], check=False)  # a pair outliving its namespace a moment
                for argv in network_commands(self.layout, host):
                    _run(argv)
                self._restore_rules(host, frozenset())  # conntrack on before its first connection (shapes.py)
            self._boot(host)
        for host in self.layout.hosts:
            _wait_listening(host.address, 22, timeout, self.layout.directory / host.short / "init.log")
        self._start_control(timeout)
        return self

    def _start_control(self, timeout: float) -> None:
        """The control agent, on the bridge's address: how a driver on a host makes host faults (a host
        cannot see the others' processes or namespaces). Started again if it is not running."""
        if self._control_alive():
            if _listening(self.layout.bridge_address, CONTROL_PORT):
                return
            os.kill(self.control_pid, signal.SIGKILL)  # alive but deaf: replaced
        log = self.layout.directory / "control.log"
        with open(log, "ab") as out:
            agent = subprocess.Popen([sys.executable, "-m", "jobs.hosts.control"], cwd=REPO, stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=os.environ | {"KRAY_HOME": str(local.kray_home())})
        self.control_pid = agent.pid
        self.save()
        _wait_listening(self.layout.bridge_address, CONTROL_PORT, timeout, log, "the control agent")

    def _control_alive(self) -> bool:
        """Whether the agent this state names runs (its PID may be another process's by now)."""
        try:
            return _alive(self.control_pid) and b"jobs.hosts.control" in Path(
                f"/proc/{self.control_pid}/cmdline").read_bytes()
        except OSError:
            return False

    def _boot(self, host: Host) -> None:
        """The host's link up, and its PID 1 started unless it runs (a host powered off)."""
        _run(["ip", "link", "set", host.veth, "up"])
        if not _init_of(self.init_pids.get(host.name), host.name):
            self._start(host)
            self.save()

    def _keys(self) -> None:
        """SSH's client and host keys, the token of Ray's authentication on the hosts (a Ray without it
        would run anyone's tasks as root: every user of this machine reaches the bridge) and the control
        agent's token."""
        for key in (self.layout.client_key, self.layout.host_key):
            if not key.exists():
                key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"kray hosts {key.name}", "-f", str(key)])
        for token in (self.layout.ray_token, self.layout.control_token):
            if not token.exists():
                token.touch(mode=0o600)
                token.write_text(secrets.token_hex(32))

    def write_bashrc(self, host: Host) -> None:
        """The host's ~/.bashrc (layout.bashrc), naming the ensemble once a `--cluster` has one."""
        (self.layout.home(host) / ".bashrc").write_text(bashrc(
            Path(sys.prefix), "token", NODE_CPUS, NODE_MEMORY, NODE_OBJECT_STORE,
            f"{self.layout.bridge_address}:{CONTROL_PORT}", (self.cluster or {}).get("zk_connect")))

    def _start(self, host: Host) -> None:
        """The host's home and temp dir, then its PID 1 (sshd), in a session of its own."""
        home, tmp = self.layout.home(host), self.layout.tmp(host)
        (home / ".ssh").mkdir(parents=True, exist_ok=True, mode=0o700)
        home.chmod(0o700)
        tmp.mkdir(parents=True, exist_ok=True)
        tmp.chmod(0o1777)
        authorized = home / ".ssh" / "authorized_keys"
        authorized.write_text(self.layout.client_key.with_suffix(".pub").read_text())
        authorized.chmod(0o600)
        for source, target in ((self.layout.host_key, home / HOST_KEY), (self.layout.ray_token, home / RAY_TOKEN),
                               (self.layout.control_token, home / CONTROL_TOKEN)):
            if target.exists():  # a host's files outlive its power loss, as a disk does: a token `ray up` put there too
                continue
            target.parent.mkdir(exist_ok=True, mode=0o700)
            shutil.copyfile(source, target)
            target.chmod(0o600)
            # dated 1970: rsync's quick check (size, and mtime to the second) would take a user's token of the same
            # size written in the same second for this one, and `ray up`'s file mount of it would skip this host
            os.utime(target, (0, 0))
        self.write_bashrc(host)
        (home / ".profile").write_text(". ~/.bashrc\n")
        needed = [Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), REPO]
        log = self.layout.directory / host.short / "init.log"
        with open(log, "ab") as out:
            launcher = subprocess.Popen(init_command(self.layout, host, real_home(), needed),
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self.init_pids[host.name] = _first_child(launcher.pid)

    # using
    def host(self, name: str) -> Host:
        try:
            return self.layout.host(name)
        except KeyError:
            raise KrayError(f"no host {name}: the hosts are {', '.join(h.short for h in self.layout.hosts)}") from None

    def run(self, host: Host, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        """argv inside the host (every namespace of its PID 1, a login shell's environment): the way in without SSH."""
        return subprocess.run(enter_command(self.init_pids[host.name], real_home(), argv), **kwargs)

    def ssh(self, host: Host, command: str, **kwargs) -> subprocess.CompletedProcess:
        """A command over SSH, as `ray up` reaches a host: a login shell, ~/.bashrc read."""
        return subprocess.run(["ssh", "-i", str(self.layout.client_key), *SSH_OPTIONS, f"root@{host.address}",
                               command], **kwargs)

    def power_off(self, host: Host) -> float:
        """Every process of the host at once: SIGKILL of its PID 1 (the kernel kills the rest of its PID
        namespace), and of anything else still in its network namespace; its link down first, so that
        nothing it sent as it died (a reset, a FIN) gets out. When (wall-clock ms)."""
        _run(["ip", "link", "set", host.veth, "down"], check=False)
        at = time.time() * 1000
        pid = self.init_pids.get(host.name)
        killed = _init_of(pid, host.name)
        if killed:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (left := _netns_pids(host.name)) and time.monotonic() < deadline:
            for p in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.01)
        # and PID 1 itself reaped: a dying one has left the namespace's list while its parent has not reaped it
        while killed and os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.01)
        return at

    def power_on(self, host: Host, timeout: float = 30.0) -> None:
        """A powered-off host started again (its PID 1, on the disk it had), its link up; until sshd answers.
        What its kernel kept of the dead processes' connections goes first, unsent: a machine that boots
        again knows none of them (its peers' next packets are answered with resets)."""
        if _init_of(self.init_pids.get(host.name), host.name):
            raise KrayError(f"{host.short} is not powered off")
        _run(["ip", "netns", "exec", host.name, "ss", "-K", "-t", "-n", "-H", "state", "all"], check=False)
        self._boot(host)
        _wait_listening(host.address, 22, timeout, self.layout.directory / host.short / "init.log")

    def partition(self, drops: shapes.Grudge, one_way: bool = False) -> float:
        """Every host's rules replaced at once: each drops packets from the hosts `drops` names for it
        (on the connections they opened only, with `one_way`), the others none. When they were all set."""
        failed = self._restore_every_host(drops, one_way)
        if failed:
            if drops:  # not half a partition: every host healed
                self._restore_every_host({})
            raise KrayError(f"iptables-restore failed on {'; '.join(failed)}")
        return time.time() * 1000

    def _restore_every_host(self, drops: shapes.Grudge, one_way: bool = False) -> list[str]:
        """Every host's rules replaced at once (_restore_rules); what failed."""
        with ThreadPoolExecutor(len(self.layout.hosts)) as pool:
            return [f for f in pool.map(lambda h: self._restore_rules(h, drops.get(h.name, frozenset()), one_way,
                                                                       check=False), self.layout.hosts) if f]

    def _restore_rules(self, host: Host, drops: frozenset[str], one_way: bool = False, check: bool = True) -> str:
        """The host's rules replaced (shapes.ruleset); what failed ("" when nothing did)."""
        addresses = {h.name: h.address for h in self.layout.hosts}
        done = subprocess.run(["ip", "netns", "exec", host.name, "iptables-restore", "-w"], text=True,
                              capture_output=True, input=shapes.ruleset(drops, addresses, one_way))
        failed = f"{host.short}: {(done.stderr or done.stdout).strip()}" if done.returncode != 0 else ""
        if failed and check:
            raise KrayError(f"iptables-restore failed on {failed}")
        return failed

    # unmaking
    def down(self) -> list[str]:
        """Every host powered off and unmade, the bridge and its rule removed, the files deleted;
        what was removed."""
        removed = []
        if self._control_alive():
            os.kill(self.control_pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):  # started by this process: reaped here
                os.waitpid(self.control_pid, 0)
        for host in self.layout.hosts:
            self.power_off(host)
        names = {h.name for h in self.layout.hosts} | {n for n in _netns_names() if n.startswith(f"{self.layout.prefix}-h")}
        for name in sorted(names):
            for p in _netns_pids(name):  # a host of an earlier layout (grown, then shrunk by hand)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            veth = name.replace(f"{self.layout.prefix}-h", f"{self.layout.prefix}v-h", 1)  # Host.veth's naming
            _run(["ip", "link", "del", veth], check=False)  # at once: the namespace's
            _run(["ip", "netns", "del", name], check=False)  # deletion takes its pair with it a moment later
            removed.append(name)
        if _run(["ip", "link", "del", self.layout.bridge], check=False).returncode == 0:
            removed.append(self.layout.bridge)
        while _run(forward_rule(self.layout, "-C"), check=False).returncode == 0:
            _run(forward_rule(self.layout, "-D"))
        shutil.rmtree(self.layout.directory, ignore_errors=True)
        local.clear_state(STATE)
        return removed
