"""What a node of a kray Ray cluster runs at its start: its ZooKeeper server (when it is a member of
the ensemble) and Ray. The one source of these commands for every kind of cluster: `cluster.yaml`
(cloud nodes), `cluster-local.yaml` (hosts of their own on one machine, through `ray up`) and
`kray hosts` all call it, so a test of one tests them all.

    python -m jobs.node zookeeper --ensemble 10.0.0.11,10.0.0.12,10.0.0.13
    python -m jobs.node connect --ensemble 10.0.0.11,10.0.0.12,10.0.0.13     # KRAY_ZK_CONNECT's value
    python -m jobs.node ray-head [--num-cpus N] [-- ray start's own options]
    python -m jobs.node ray-worker --address HEAD:6379 [--num-cpus N] [-- ...]

A member is `host` (ports 2181, 2888, 3888) or `host:client:quorum:election`; a node starts the
members at its own addresses (`hostname -I`), each once: a member that answers is left alone, so
`ray up` may run it again. Ray is started with the node's address (Ray guesses 127.0.0.1 where there
is no default route), kray's worker environment (actors/runtime.py) and 65,536 open files.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
from pathlib import Path

from coordination.server import (
    EnsembleMember,
    ZooKeeperNodeServer,
    ensemble_connect_string,
    server_mode,
)

RAY = str(Path(sys.executable).parent / "ray")
OPEN_FILES = 65_536


def node_addresses() -> list[str]:
    """This node's addresses, as `hostname -I` gives them (its first is the one it is known by)."""
    return subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True).stdout.split()


def ensemble(spec: str) -> list[EnsembleMember]:
    return [EnsembleMember.parse(m) for m in spec.split(",") if m.strip()]


def start_zookeeper(members: list[EnsembleMember], addresses: list[str], base_dir: Path) -> list[str]:
    """This node's members started (those at `addresses` not already answering); what was done."""
    done = []
    for myid, member in enumerate(members, 1):
        if member.host not in addresses:
            continue
        if server_mode(member.client_port):
            done.append(f"ZooKeeper server {myid} already running on port {member.client_port}")
            continue
        ZooKeeperNodeServer(members, myid, base_dir / f"zookeeper-{myid}").servers[0].start()
        done.append(f"ZooKeeper server {myid} started on {member.host}:{member.client_port} "
                    f"(data and log in {base_dir / f'zookeeper-{myid}'})")
    return done


def ray_start_command(head: bool, address: str | None, node_ip: str, num_cpus: int | None, memory: int | None,
                      object_store_memory: int | None, extra: list[str]) -> list[str]:
    argv = [RAY, "start", "--head", "--port=6379"] if head else [RAY, "start", f"--address={address}"]
    argv += [f"--node-ip-address={node_ip}", "--disable-usage-stats"]
    for flag, value in (("--num-cpus", num_cpus), ("--memory", memory), ("--object-store-memory", object_store_memory)):
        if value is not None:
            argv.append(f"{flag}={value}")
    return argv + extra


def start_ray(argv: list[str]) -> int:
    from actors.runtime import RAY_WORKER_ENV

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(OPEN_FILES, hard), hard))
    subprocess.run([RAY, "stop"], capture_output=True)  # a node's earlier Ray, as Ray's own start commands do
    return subprocess.run(argv, env={**os.environ, **RAY_WORKER_ENV}).returncode


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(prog="python -m jobs.node", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("zookeeper", "connect"):
        s = sub.add_parser(name)
        s.add_argument("--ensemble", required=True, help="host[:client:quorum:election],... in myid order")
        s.add_argument("--dir", type=Path, default=Path.home() / ".kray", help="where a member keeps its data")
    for name in ("ray-head", "ray-worker"):
        s = sub.add_parser(name)
        if name == "ray-worker":
            s.add_argument("--address", required=True, help="the head's HOST:6379")
        s.add_argument("--num-cpus", type=int)
        s.add_argument("--memory", type=int, help="bytes")
        s.add_argument("--object-store-memory", type=int, help="bytes")
    args = p.parse_args(argv)
    try:
        members = ensemble(args.ensemble) if args.command in ("zookeeper", "connect") else []
    except ValueError as e:
        print(f"Error: --ensemble: {e}", file=sys.stderr)
        return 1
    if args.command == "connect":
        print(ensemble_connect_string(members))
        return 0
    if args.command == "zookeeper":
        for line in start_zookeeper(members, node_addresses(), args.dir) or ["not a member of the ensemble"]:
            print(line)
        return 0
    command = ray_start_command(args.command == "ray-head", getattr(args, "address", None), node_addresses()[0],
                                args.num_cpus, args.memory, args.object_store_memory, extra)
    return start_ray(command)


if __name__ == "__main__":
    sys.exit(main())
