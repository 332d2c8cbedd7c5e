"""What a node of a kray Ray cluster runs at its start: its set-up, its ZooKeeper server (when it is
a member of the ensemble) and Ray. The one source of these commands for every kind of cluster:
`cluster.yaml` (cloud nodes) and `cluster-local.yaml` (hosts of their own on one machine) run the same
lines, and `kray hosts up --cluster` the same steps, so a test of one tests them all.

    python3 ~/kray/jobs/node.py setup --ensemble HEAD:2181:2888:3888,HEAD:2182:2889:3889,HEAD:2183:2890:3890
    python -m jobs.node zookeeper [--ensemble 10.0.0.11,10.0.0.12,10.0.0.13]
    python -m jobs.node connect --ensemble 10.0.0.11,10.0.0.12,10.0.0.13     # KRAY_ZK_CONNECT's value
    python -m jobs.node ray-head [--num-cpus N] [-- ray start's own options]
    python -m jobs.node ray-worker --address HEAD:6379 [--num-cpus N] [-- ...]

`setup` runs on any Python >= 3.10 with the standard library alone (before the project is installed):
what is missing of Java, Debian's zookeeper and venv support is installed, a virtualenv made
($KRAY_VENV, default ~/kray-venv) and the project installed in it editable, unless it imports already
(a host of this machine shares both); ~/.bashrc activates the venv, turns Ray's token authentication
on and exports KRAY_ZK_ENSEMBLE and KRAY_ZK_CONNECT. The start commands then start this node's
members of the ensemble (`zookeeper`, the ensemble from KRAY_ZK_ENSEMBLE) before Ray: `ray up` runs
them again each time, where it skips a set-up that is up to date, so a member that died comes back.

A member is `host` (ports 2181, 2888, 3888) or `host:client:quorum:election`; HEAD stands for the Ray
head's address ($RAY_HEAD_IP on a worker, this node's own on the head). A node starts the members at
its own addresses (`hostname -I`) whose port takes no connection, and waits until each listens. Ray is started with the node's address (Ray guesses 127.0.0.1 where there is no
default route), kray's worker environment (actors/runtime.py), 65,536 open files, and the resources
of $KRAY_NODE_NUM_CPUS, $KRAY_NODE_MEMORY and $KRAY_NODE_OBJECT_STORE_MEMORY where set (hosts that
share one machine must not each claim all of it).
"""
from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

OPEN_FILES = 65_536
CHECKOUT = Path(__file__).resolve().parents[1]
PACKAGES = {"java": "openjdk-17-jre-headless", "/usr/share/java/zookeeper.jar": "zookeeper"}
BASHRC_MARK = "# kray node"


def node_addresses() -> list[str]:
    """This node's addresses, as `hostname -I` gives them (its first is the one it is known by)."""
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True).stdout.split()
    if not found:
        raise ValueError("`hostname -I` names no address of this node")
    return found


def head_address() -> str:
    return os.environ.get("RAY_HEAD_IP") or node_addresses()[0]


def ensemble(spec: str, head: str | None = None):
    """The members of `spec`, HEAD replaced by `head`."""
    from coordination.server import EnsembleMember

    return [EnsembleMember.parse(m.replace("HEAD", head) if head else m) for m in spec.split(",") if m.strip()]


def _sh(argv: list[str]) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, check=True)


def _base_python() -> str:
    """The first Python >= 3.10 found (kray and Ray need one): the system's on Ubuntu 22.04+ or Debian 12,
    conda's on Ray's default AMI."""
    for candidate in ("python3.12", "python3.11", "python3.10", str(Path.home() / "anaconda3/envs/tensorflow2_p310/bin/python"),
                      "python3"):
        found = shutil.which(candidate)
        if found and subprocess.run([found, "-c", "import sys; sys.exit(sys.version_info < (3, 10))"]).returncode == 0:
            return found
    raise SystemExit("no Python >= 3.10 on this node")


def setup(spec: str, venv: Path) -> None:
    """This node made ready for kray, each step skipped where it is done already (see the module's doc)."""
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    missing = [pkg for thing, pkg in PACKAGES.items() if not (shutil.which(thing) or Path(thing).exists())]
    if "openjdk-17-jre-headless" not in missing and java_major() < 17:  # ZooKeeper's GC log and Spark need 17
        missing.append("openjdk-17-jre-headless")
    if not (venv / "bin" / "python").exists() and subprocess.run(
            [_base_python(), "-c", "import venv, ensurepip"], capture_output=True).returncode != 0:
        missing.append("python3-venv")
    if missing:
        _sh([*sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "update", "-y"])
        _sh([*sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-o",
             "DPkg::Lock::Timeout=600", *missing])
    python = venv / "bin" / "python"
    if not python.exists():
        _sh([_base_python(), "-m", "venv", str(venv)])
    if subprocess.run([str(python), "-c", "import jobs.node"], capture_output=True, cwd="/").returncode != 0:
        _sh([str(python), "-m", "pip", "install", "-q", "-U", "pip", "setuptools", "wheel"])
        _sh([str(python), "-m", "pip", "install", "-e", str(CHECKOUT)])
    members = subprocess.run([str(python), "-m", "jobs.node", "connect", "--ensemble", spec],
                             capture_output=True, text=True, check=True, cwd="/").stdout.strip()
    bashrc = Path.home() / ".bashrc"
    kept = [line for line in (bashrc.read_text().splitlines() if bashrc.exists() else []) if BASHRC_MARK not in line]
    q = shlex.quote
    bashrc.write_text("\n".join(kept + [f"source {q(str(venv / 'bin' / 'activate'))}  {BASHRC_MARK}",
                                        f"export RAY_AUTH_MODE=token  {BASHRC_MARK}",
                                        f"export KRAY_ZK_ENSEMBLE={q(spec)}  {BASHRC_MARK}",
                                        f"export KRAY_ZK_CONNECT={q(members)}  {BASHRC_MARK}"]) + "\n")


def java_major() -> int:
    """The major version of the `java` on PATH (0: none, or unreadable)."""
    try:
        said = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    except OSError:
        return 0
    version = said.split('"')[1] if '"' in said else ""
    major = version.split(".")[1] if version.startswith("1.") else version.split(".")[0]
    return int(major) if major.isdigit() else 0


def _answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def start_zookeeper(members, addresses: list[str], base_dir: Path, timeout_s: float = 60.0) -> list[str]:
    """This node's members started (those at `addresses` whose port takes no connection), each then
    waited for until it listens (a quorum needs the other nodes' members: `ray up` starts them later);
    what was done. A member that exits instead is a ZooKeeperServerError naming its log."""
    from coordination.errors import ZooKeeperServerError
    from coordination.server import ZooKeeperNodeServer

    done, started = [], []
    for myid, member in enumerate(members, 1):
        if member.host not in addresses:
            continue
        if _answers(member.host, member.client_port):
            done.append(f"ZooKeeper server {myid} already running on {member.host}:{member.client_port}")
            continue
        server = ZooKeeperNodeServer(members, myid, base_dir / f"zookeeper-{myid}").servers[0]
        server.start()
        started.append((myid, member, server))
    deadline = time.monotonic() + timeout_s
    for myid, member, server in started:
        log = server.directory / "zookeeper.out"
        while not _answers(member.host, member.client_port):
            if server.process.poll() is not None or time.monotonic() > deadline:
                raise ZooKeeperServerError(f"ZooKeeper server {myid} on {member.host}:{member.client_port} "
                                           f"{'exited' if server.process.poll() is not None else 'not listening'}: "
                                           f"see {log}")
            time.sleep(0.2)
        done.append(f"ZooKeeper server {myid} started on {member.host}:{member.client_port} (data and log in "
                    f"{server.directory})")
    return done


def ray_start_command(head: bool, address: str | None, node_ip: str, num_cpus: int | None, memory: int | None,
                      object_store_memory: int | None, extra: list[str]) -> list[str]:
    ray = str(Path(sys.executable).parent / "ray")
    argv = [ray, "start", "--head", "--port=6379"] if head else [ray, "start", f"--address={address}"]
    argv += [f"--node-ip-address={node_ip}", "--disable-usage-stats"]
    for flag, value in (("--num-cpus", num_cpus), ("--memory", memory), ("--object-store-memory", object_store_memory)):
        if value is not None:
            argv.append(f"{flag}={value}")
    return argv + extra


def start_ray(argv: list[str]) -> int:
    from actors.runtime import RAY_WORKER_ENV

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(OPEN_FILES, hard), hard))
    subprocess.run([argv[0], "stop"], capture_output=True)  # a node's earlier Ray, as Ray's own start commands do
    return subprocess.run(argv, env={**os.environ, **RAY_WORKER_ENV}).returncode


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value and not value.isdigit():
        raise SystemExit(f"Error: {name}={value!r}: a whole number is needed")
    return int(value) if value else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(prog="python -m jobs.node", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("setup", "zookeeper", "connect"):
        s = sub.add_parser(name)
        s.add_argument("--ensemble", required=name == "setup", default=os.environ.get("KRAY_ZK_ENSEMBLE"),
                       help="host[:client:quorum:election],... in myid order; HEAD: the Ray head's address "
                            "(default: $KRAY_ZK_ENSEMBLE, which setup exports)")
        s.add_argument("--dir", type=Path, default=Path.home() / ".kray", help="where a member keeps its data")
        s.add_argument("--venv", type=Path, default=Path(os.environ.get("KRAY_VENV", Path.home() / "kray-venv")))
    for name in ("ray-head", "ray-worker"):
        s = sub.add_parser(name)
        if name == "ray-worker":
            s.add_argument("--address", required=True, help="the head's HOST:6379")
        s.add_argument("--num-cpus", type=int, default=_env_int("KRAY_NODE_NUM_CPUS"))
        s.add_argument("--memory", type=int, help="bytes", default=_env_int("KRAY_NODE_MEMORY"))
        s.add_argument("--object-store-memory", type=int, help="bytes", default=_env_int("KRAY_NODE_OBJECT_STORE_MEMORY"))
    args = p.parse_args(argv)
    try:
        return _command(args, extra)
    except ValueError as e:  # a bad option or environment: its own words
        print(f"Error: {e}", file=sys.stderr)
    except subprocess.CalledProcessError as e:
        print(f"Error: {' '.join(map(str, e.cmd))} exited with {e.returncode}: {(e.stderr or '').strip()[-500:]}",
              file=sys.stderr)
    except Exception as e:  # a node's set-up says what failed in one line; `ray up` prints it
        print(f"Error: {type(e).__name__}: {e}", file=sys.stderr)
    return 1


def _command(args, extra: list[str]) -> int:
    if args.command == "setup":
        setup(args.ensemble, args.venv)
        return 0
    if args.command in ("zookeeper", "connect"):
        if not args.ensemble:
            raise ValueError("--ensemble: no ensemble given, and KRAY_ZK_ENSEMBLE is not set (setup sets it)")
        try:
            members = ensemble(args.ensemble, head_address() if "HEAD" in args.ensemble else None)
        except ValueError as e:
            raise ValueError(f"--ensemble: {e}") from None
        if args.command == "connect":
            from coordination.server import ensemble_connect_string

            print(ensemble_connect_string(members))
            return 0
        for line in start_zookeeper(members, node_addresses(), args.dir) or ["not a member of the ensemble"]:
            print(line)
        return 0
    command = ray_start_command(args.command == "ray-head", getattr(args, "address", None), node_addresses()[0],
                                args.num_cpus, args.memory, args.object_store_memory, extra)
    return start_ray(command)


if __name__ == "__main__":
    sys.exit(main())
