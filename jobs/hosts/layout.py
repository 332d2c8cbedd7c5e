"""Hosts of their own on one machine: what each is (name, address, files) and the commands that
make and unmake it. Pure: the commands are argv lists, run by `jobs.hosts.netns`.

A host is three namespaces of the kernel:
- a network namespace on a bridge, with an address of its own on a private /24 (no default route:
  nothing leaves the machine);
- a PID namespace with sshd as its PID 1, so that `ray stop` (which kills by process name among the
  PIDs it sees) stops only the host's Ray, and killing PID 1 is the host's power loss;
- a mount namespace with a private home (the host's .bashrc, .ssh and what `ray up` copies there),
  its own /tmp and /dev/shm (Ray's default temp dir and object store, ZooKeeper's throwaway data),
  an /etc/hosts naming every host, and the interpreter, the virtualenv and the checkout bound in
  read-only where those would hide them.
"""
from __future__ import annotations

import ipaddress
import shlex
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from coordination.server import ZK_CONNECT_ENV

MAX_HOSTS = 200  # the addresses .11 to .210 of the /24
SSHD = "/usr/sbin/sshd"
HOST_KEY = Path(".ssh/host_key")  # in the host's home
RAY_TOKEN = Path(".ray/auth_token")  # in the host's home: where Ray looks for its authentication token
# in the host's home, the token a host's requests to the control agent carry: its own, not Ray's, which
# `ray up` replaces with the user's
CONTROL_TOKEN = Path(".kray/hosts_control_token")
CONTROL_PORT = 7707  # the hosts' control agent's, on the bridge's address (jobs.hosts.control)
CONTROL_ENV = "KRAY_HOSTS_CONTROL"  # where a host finds it
POWER_LOSS_LOGS = ("kept", "unflushed", "lost")  # what a host's power loss may leave of its broker's logs


class Host(BaseModel, frozen=True):
    index: int = Field(ge=1, le=MAX_HOSTS)  # h1, h2, ...
    name: str  # the network namespace's, and the host's hostname
    address: str
    veth: str  # the root namespace's end of its link to the bridge (eth0 inside)

    @property
    def short(self) -> str:
        return f"h{self.index}"


class HostsLayout(BaseModel, frozen=True):
    """N hosts named <prefix>-h1.. on bridge <bridge>, at <subnet>'s .11, .12, ...; the bridge at .1."""

    count: int = Field(ge=1, le=MAX_HOSTS)
    prefix: str = Field(default="kray", pattern=r"^[a-z][a-z0-9]{0,7}$")
    subnet: str = "10.77.0.0/24"
    directory: Path  # keys, homes and temp dirs of the hosts: $KRAY_HOME/hosts

    @field_validator("subnet")
    @classmethod
    def _a_24(cls, subnet: str) -> str:
        if ipaddress.IPv4Network(subnet).prefixlen != 24:
            raise ValueError(f"{subnet}: hosts take an IPv4 /24")
        return subnet

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br0"

    @property
    def bridge_address(self) -> str:
        return str(ipaddress.ip_network(self.subnet).network_address + 1)

    @property
    def hosts(self) -> list[Host]:
        base = ipaddress.ip_network(self.subnet).network_address
        return [Host(index=i, name=f"{self.prefix}-h{i}", address=str(base + 10 + i), veth=f"{self.prefix}v-h{i}")
                for i in range(1, self.count + 1)]

    def host(self, name: str) -> Host:
        """A host by its name (kray-h2), its short name (h2) or its address."""
        for h in self.hosts:
            if name in (h.name, h.short, h.address):
                return h
        raise KeyError(name)

    # files
    @property
    def client_key(self) -> Path:
        return self.directory / "ssh" / "client_key"

    @property
    def host_key(self) -> Path:
        return self.directory / "ssh" / "host_key"

    @property
    def ray_token(self) -> Path:
        return self.directory / "ssh" / "ray_auth_token"

    @property
    def control_token(self) -> Path:
        return self.directory / "ssh" / "control_token"

    @property
    def etc_hosts(self) -> Path:
        """The hosts' /etc/hosts (each names the others, as a real network's DNS would: Spark's master
        looks its own name up)."""
        return self.directory / "etc-hosts"

    def home(self, host: Host) -> Path:
        return self.directory / host.short / "home"

    def tmp(self, host: Host) -> Path:
        return self.directory / host.short / "tmp"


def etc_hosts(layout: HostsLayout) -> str:
    return "".join(["127.0.0.1\tlocalhost\n", "::1\tlocalhost ip6-localhost ip6-loopback\n",
                    *(f"{h.address}\t{h.name} {h.short}\n" for h in layout.hosts)])


def bridge_commands(layout: HostsLayout) -> list[list[str]]:
    """The bridge, up with its address; its traffic let through the FORWARD chain (bridged packets
    pass the root namespace's iptables, and a FORWARD policy of DROP, Docker's, would cut the hosts
    apart)."""
    return [
        ["ip", "link", "add", layout.bridge, "type", "bridge"],
        ["ip", "addr", "add", f"{layout.bridge_address}/24", "dev", layout.bridge],
        ["ip", "link", "set", layout.bridge, "up"],
    ]


def forward_rule(layout: HostsLayout, action: str) -> list[str]:
    """iptables -C (check), -I (insert) or -D (delete) of the rule that lets the bridge forward."""
    return ["iptables", action, "FORWARD", "-i", layout.bridge, "-o", layout.bridge, "-j", "ACCEPT"]


def network_commands(layout: HostsLayout, host: Host) -> list[list[str]]:
    """A host's network namespace, joined to the bridge by a veth pair (eth0 inside), loopback up."""
    inside = ["ip", "netns", "exec", host.name]
    return [
        ["ip", "netns", "add", host.name],
        ["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.name],
        ["ip", "link", "set", host.veth, "master", layout.bridge, "up"],
        [*inside, "ip", "addr", "add", f"{host.address}/24", "dev", "eth0"],
        [*inside, "ip", "link", "set", "eth0", "up"],
        [*inside, "ip", "link", "set", "lo", "up"],
    ]


def bound_read_only(hidden: Path, needed: list[Path]) -> list[Path]:
    """Of the directories the host needs (the interpreter's prefix, the virtualenv, the checkout),
    those under `hidden` (the real home, /tmp), which the host's own home or tmp hides: bound back in,
    read-only. One bind each for the outermost (a venv inside the checkout comes with it)."""
    under = sorted({p for p in needed if p.is_relative_to(hidden) and p != hidden})
    return [p for i, p in enumerate(under) if not any(p.is_relative_to(q) for q in under[:i])]


def init_script(layout: HostsLayout, host: Host, real_home: Path, needed: list[Path]) -> str:
    """What the host's PID 1 runs, in its new mount, UTS and PID namespaces: its private mounts,
    its hostname, then sshd in the foreground (PID 1 reaps what it adopts). Every source is bound
    while its path resolves (any may lie under /tmp or the home that are replaced): /etc/hosts at
    once, the host's home and tmp to /run/kray first; sshd's host key is read from the host's home."""
    home, tmp = layout.home(host), layout.tmp(host)
    q = shlex.quote
    lines = ["set -e"]
    for hidden, private in ((real_home, home), (Path("/tmp"), tmp)):  # what each private directory hides
        for path in bound_read_only(hidden, needed):
            inside = private / path.relative_to(hidden)
            lines += [f"mkdir -p {q(str(inside))}", f"mount --bind {q(str(path))} {q(str(inside))}",
                      f"mount -o remount,bind,ro {q(str(inside))}"]
    lines += [
        f"mount --bind {q(str(layout.etc_hosts))} /etc/hosts",
        "mount -t tmpfs -o mode=755 tmpfs /run",  # the host's own: sshd's privilege-separation directory
        "mkdir -p /run/sshd /run/kray/home /run/kray/tmp",
        f"mount --rbind {q(str(home))} /run/kray/home",
        f"mount --rbind {q(str(tmp))} /run/kray/tmp",
        f"mount --rbind /run/kray/home {q(str(real_home))}",
        "mount --rbind /run/kray/tmp /tmp",
        "mount -t tmpfs -o mode=1777 tmpfs /dev/shm",
        f"hostname {q(host.name)}",
        " ".join(["exec", SSHD, "-D", "-e", "-o", f"ListenAddress={host.address}", "-o", "PidFile=none",
                  "-h", q(str(real_home / HOST_KEY)), "-o", "PasswordAuthentication=no", "-o", "UsePAM=no",
                  "-o", "PermitRootLogin=prohibit-password"]),
    ]
    return "\n".join(lines)


def init_command(layout: HostsLayout, host: Host, real_home: Path, needed: list[Path]) -> list[str]:
    """The host's start: its network namespace entered, new mount/UTS/PID namespaces made, PID 1 run."""
    return ["ip", "netns", "exec", host.name, "unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc",
            "--propagation", "private", "sh", "-c", init_script(layout, host, real_home, needed)]


def bashrc(venv: Path, auth_mode: str, cpus: int, memory: int, object_store: int, control: str,
           zk_connect: str | None = None) -> str:
    """The host's ~/.bashrc: the project's tools on PATH (Ray's SSH runner and `ray down` find `ray`
    there) and its venv for `jobs.node setup`, one Ray authentication mode on every node (a token in a
    home turns it on for a head only), each node's share of the machine for Ray, where the hosts'
    control agent listens (host faults made from a host), and the ensemble of a `--cluster`."""
    return (f"export PATH={shlex.quote(str(venv / 'bin'))}:$PATH\n"
            f"export KRAY_VENV={shlex.quote(str(venv))}\n"
            "export RAY_USAGE_STATS_ENABLED=0\n"
            f"export RAY_AUTH_MODE={auth_mode}\n"
            f"export KRAY_NODE_NUM_CPUS={cpus} KRAY_NODE_MEMORY={memory} KRAY_NODE_OBJECT_STORE_MEMORY={object_store}\n"
            f"export {CONTROL_ENV}={control}\n"
            + (f"export {ZK_CONNECT_ENV}={shlex.quote(zk_connect)}\n" if zk_connect else ""))


def enter_command(init_pid: int, home: Path, argv: list[str]) -> list[str]:
    """argv run inside a host, in all of its namespaces (its PID 1's, `init_pid` as the root namespace
    numbers it), with the host's environment, not the caller's: a login shell's, as SSH gives it."""
    return ["nsenter", "--target", str(init_pid), "--all", "env", "-i", f"HOME={home}",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "bash", "-lc", 'exec "$@"', "bash",
            *argv]
