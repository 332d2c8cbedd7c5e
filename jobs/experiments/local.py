"""Where a kray cluster's ZooKeeper and Ray are, for the CLI and the main job.

State lives in $KRAY_HOME (default ~/.kray): zk.json for a server started with
`kray zk start`, cluster.json for brokers started with `kray cluster up`, and the
brokers' logs under logs/<namespace>/broker-N.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from coordination.errors import KrayError
from coordination.server import ZK_CONNECT_ENV, connect_string


RAY_UP_CONFIG = Path.home() / "ray_bootstrap_config.yaml"  # what `ray up` leaves on a cluster's head


def nodes_expected(config: dict) -> int:
    """The nodes a `ray up` cluster starts with: its head and the min_workers of its node types (the
    local provider's one type is the head's too; a cloud head's type has none), or, in the flat form
    of a config not yet prepared, its min_workers."""
    types = config.get("available_node_types")
    if types:
        return 1 + sum(t.get("min_workers", 0) for t in types.values())
    return 1 + config.get("min_workers", 0)


def wait_for_nodes(step, timeout_s: float = 300.0) -> list[str]:
    """The live nodes' addresses, once a `ray up` cluster's workers have all joined: `ray submit` right
    after `ray up` finds only the head (the autoscaler starts the workers after `ray up` returns), and
    brokers placed then would all sit there, advertising loopback."""
    import ray
    import yaml

    def alive() -> list[str]:
        return sorted({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]})

    expected = nodes_expected(yaml.safe_load(RAY_UP_CONFIG.read_text())) if RAY_UP_CONFIG.exists() else 1
    deadline = time.monotonic() + timeout_s
    while len(nodes := alive()) < expected:
        if time.monotonic() > deadline:
            raise KrayError(f"the Ray cluster has {len(nodes)} of its {expected} nodes after {timeout_s:.0f} s")
        step(f"Waiting for the Ray cluster's nodes ({RAY_UP_CONFIG.name}): {len(nodes)} of {expected} up")
        time.sleep(5)
    return nodes


def kray_home() -> Path:
    home = Path(os.environ.get("KRAY_HOME", Path.home() / ".kray"))
    home.mkdir(parents=True, exist_ok=True)
    return home


def read_state(name: str) -> dict | None:
    path = kray_home() / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def write_state(name: str, state: dict) -> None:
    """Whole or not at all (a reader, the hosts' control agent among them, never sees half a file)."""
    path = kray_home() / f"{name}.json"
    part = path.with_name(f".{path.name}.{os.getpid()}")
    part.write_text(json.dumps(state, indent=2))
    os.replace(part, path)


def clear_state(name: str) -> None:
    (kray_home() / f"{name}.json").unlink(missing_ok=True)


def zk_connect(explicit: str | None = None) -> str:
    """--zookeeper, else KRAY_ZK_CONNECT, else the server `kray zk start` launched."""
    connect = explicit or connect_string((read_state("zk") or {}).get("connect"))
    if not connect:
        raise KrayError(f"no ZooKeeper: run `kray zk start`, set {ZK_CONNECT_ENV}, or pass --zookeeper")
    return connect


def fresh_chroot(connect: str, prefix: str, credential: str | None = None) -> str:
    """A connect string rooted at a new, empty chroot, so runs can share one ZooKeeper (created with
    the credential's ACL when there is one: a chroot is what keeps others from writing beside kray)."""
    from coordination.zkclient import KrayZkClient, credential_from_env

    chroot = f"/{prefix}-{uuid.uuid4().hex[:8]}"
    with KrayZkClient(connect, credential=credential or credential_from_env()).start() as root:
        root.kazoo.ensure_path(chroot)
    return connect + chroot


class Environment(NamedTuple):
    connect: str  # ZooKeeper connect string
    zk_server: object | None  # the server started here (coordination.server launcher), None for an external one


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


@contextmanager
def embedded_zookeeper_and_ray(step=lambda message: None, zk_heap_mb: int | None = None):
    """ZooKeeper (KRAY_ZK_CONNECT, else a server started here) and Ray: the session this process already
    has, else the cluster RAY_ADDRESS names, else a local Ray. What was started here is stopped on exit;
    until then KRAY_ZK_CONNECT names it, so that runs started inside (a sweep's, a benchmark's) join it.
    A SIGTERM (`timeout`, `kill`) stops it the same way as Ctrl-C does. `zk_heap_mb`: the started
    server's heap (ZooKeeperSettings' default when None)."""
    import ray

    from actors.runtime import ray_worker_environment
    from coordination.server import ZooKeeperServer, ZooKeeperSettings

    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    if main:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    server = None
    started_ray = False
    try:
        connect = connect_string()
        if not connect:
            step("Starting an embedded ZooKeeper server on loopback")
            server = ZooKeeperServer(ZooKeeperSettings(tick_time_ms=500, **(
                {"heap_mb": zk_heap_mb} if zk_heap_mb else {}))).start()
            connect = os.environ[ZK_CONNECT_ENV] = server.connect_string
        if not ray.is_initialized():
            started_ray = True
            address = os.environ.get("RAY_ADDRESS")
            if not address:
                ray_worker_environment()
            # without an address, ray.init joins the cluster this node is part of (`ray start`, `ray up`), if any
            ray.init(address=address, include_dashboard=False if not address else None, log_to_driver=False,
                     configure_logging=False)
            nodes = wait_for_nodes(step)
            step(f"ZooKeeper at {connect}; Ray at {ray.get_runtime_context().gcs_address}: "
                 f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} ({', '.join(nodes)})")
            if main:  # again: ray.init sets its own
                signal.signal(signal.SIGTERM, _exit_on_sigterm)
        yield Environment(connect, server)
    finally:
        if started_ray:
            ray.shutdown()
        if server is not None:
            os.environ.pop(ZK_CONNECT_ENV, None)
            server.stop()
        if main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
