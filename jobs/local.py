"""Where a kray cluster's ZooKeeper and Ray are, for the CLI and the main job.

State lives in $KRAY_HOME (default ~/.kray): zk.json for a server started with
`kray zk start`, cluster.json for brokers started with `kray cluster up`, and the
brokers' logs under logs/<namespace>/broker-N.
"""
from __future__ import annotations

import json
import os
import uuid
from contextlib import contextmanager
from pathlib import Path

from coordination.errors import KrayError
from coordination.server import ZK_CONNECT_ENV, connect_string


def kray_home() -> Path:
    home = Path(os.environ.get("KRAY_HOME", Path.home() / ".kray"))
    home.mkdir(parents=True, exist_ok=True)
    return home


def read_state(name: str) -> dict | None:
    path = kray_home() / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def write_state(name: str, state: dict) -> None:
    (kray_home() / f"{name}.json").write_text(json.dumps(state, indent=2))


def clear_state(name: str) -> None:
    (kray_home() / f"{name}.json").unlink(missing_ok=True)


def zk_connect(explicit: str | None = None) -> str:
    """--zookeeper, else KRAY_ZK_CONNECT, else the server `kray zk start` launched."""
    connect = explicit or connect_string((read_state("zk") or {}).get("connect"))
    if not connect:
        raise KrayError(f"no ZooKeeper: run `kray zk start`, set {ZK_CONNECT_ENV}, or pass --zookeeper")
    return connect


def fresh_chroot(connect: str, prefix: str) -> str:
    """A connect string rooted at a new, empty chroot, so runs can share one ZooKeeper."""
    from coordination.zkclient import KrayZkClient

    chroot = f"/{prefix}-{uuid.uuid4().hex[:8]}"
    with KrayZkClient(connect).start() as root:
        root.kazoo.ensure_path(chroot)
    return connect + chroot


@contextmanager
def embedded_zookeeper_and_ray(step=lambda message: None):
    """ZooKeeper (KRAY_ZK_CONNECT, else a server started here) and a local Ray; both stopped on exit."""
    import ray

    from coordination.server import ZooKeeperServer, ZooKeeperSettings

    server = None
    connect = connect_string()
    if not connect:
        step("Starting an embedded ZooKeeper server on loopback")
        server = ZooKeeperServer(ZooKeeperSettings(tick_time_ms=500)).start()
        connect = server.connect_string
    try:
        step(f"ZooKeeper at {connect}; starting a local Ray")
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            yield connect
        finally:
            ray.shutdown()
    finally:
        if server is not None:
            server.stop()
