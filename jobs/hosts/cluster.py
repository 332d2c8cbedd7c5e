"""A Ray cluster and a ZooKeeper ensemble across the hosts (`kray hosts up N --cluster`): the Ray
head and a ZooKeeper server on h1, a Ray worker on each other host, ZooKeeper servers on the first
three hosts. Each node starts itself with `jobs.node`, the commands `ray up` runs on a cluster's
nodes, entered without SSH (`Hosts.run`). A driver runs on a host (`kray hosts exec h1 -- ...`): a
driver in this namespace would give Ray an address the hosts cannot reach.
"""
from __future__ import annotations

import subprocess
import sys
import time

from coordination.errors import KrayError
from coordination.server import EnsembleMember, ensemble_connect_string, server_mode
from jobs.hosts.layout import Host
from jobs.hosts.netns import Hosts

ENSEMBLE_SIZE = 3


def ensemble_of(hosts: Hosts) -> list[EnsembleMember]:
    """The first three hosts' (one when there are fewer than three: a quorum of two is no safer than one)."""
    chosen = hosts.layout.hosts[:ENSEMBLE_SIZE] if hosts.layout.count >= ENSEMBLE_SIZE else hosts.layout.hosts[:1]
    return [EnsembleMember(host=h.address) for h in chosen]


def _node(hosts: Hosts, host: Host, *argv: str) -> None:
    try:
        done = hosts.run(host, [sys.executable, "-m", "jobs.node", *argv], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise KrayError(f"{host.short}: jobs.node {argv[0]} did not finish in 120 s") from None
    if done.returncode != 0:
        raise KrayError(f"{host.short}: jobs.node {argv[0]} failed: {(done.stderr or done.stdout).strip()[-500:]}")


def start_cluster(hosts: Hosts, timeout: float = 120.0) -> dict:
    """ZooKeeper's members and Ray on every host, waited for: {zk_connect, ray_address, ensemble}, also
    kept with the hosts (what a host's return starts again)."""
    members = ensemble_of(hosts)
    head = hosts.layout.hosts[0]
    hosts.cluster = {"zk_connect": ensemble_connect_string(members), "ray_address": f"{head.address}:6379",
                     "ensemble": ",".join(m.host for m in members)}
    hosts.save()
    for host in hosts.layout.hosts:
        hosts.write_bashrc(host)  # KRAY_ZK_CONNECT: a driver on a host finds the ensemble
        start_node(hosts, host)
    deadline = time.monotonic() + timeout
    while not all(server_mode(m.client_port, m.host) for m in members):
        if time.monotonic() > deadline:
            raise KrayError(f"ZooKeeper's ensemble {hosts.cluster['ensemble']} has no quorum after {timeout:.0f} s")
        time.sleep(0.2)
    while _ray_nodes(hosts, head) < hosts.layout.count:
        if time.monotonic() > deadline:
            raise KrayError(f"Ray has {_ray_nodes(hosts, head)} of {hosts.layout.count} nodes after {timeout:.0f} s")
        time.sleep(0.5)
    return hosts.cluster


def start_node(hosts: Hosts, host: Host) -> list[str]:
    """A host's share of the cluster started (at `--cluster`, and at a host's return): its ZooKeeper
    server if it is a member (on the data it kept), then Ray's head on h1, a worker joining it elsewhere
    (each node's share of the machine: its ~/.bashrc). What was started."""
    cluster = hosts.cluster
    if cluster is None:
        return []
    started = []
    if host.address in cluster["ensemble"].split(","):
        _node(hosts, host, "zookeeper", "--ensemble", cluster["ensemble"])
        started.append("ZooKeeper")
    if host.address == cluster["ray_address"].rsplit(":", 1)[0]:
        _node(hosts, host, "ray-head", "--", "--include-dashboard=false")
        started.append("Ray's head")
    else:
        _node(hosts, host, "ray-worker", f"--address={cluster['ray_address']}")
        started.append("a Ray worker")
    return started


def _ray_nodes(hosts: Hosts, head: Host) -> int:
    probe = "import ray; ray.init(address='auto', logging_level='ERROR'); print(sum(n['Alive'] for n in ray.nodes()))"
    done = hosts.run(head, [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    try:
        return int(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0

