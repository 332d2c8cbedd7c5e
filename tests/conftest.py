"""Shared fixtures: one real ZooKeeper server and one real local Ray per test run.

Tests isolate themselves with a fresh ZooKeeper chroot and a fresh Ray
namespace each, so they can share the server and the Ray session.
"""
from __future__ import annotations


import pytest

from coordination.server import ZooKeeperServer, ZooKeeperSettings, connect_string
from coordination.zkclient import KrayZkClient
from jobs.experiments.local import fresh_chroot


@pytest.fixture(scope="session")
def zk_connect():
    """A ZooKeeper connect string: KRAY_ZK_CONNECT, or a server started for this run."""
    existing = connect_string()
    if existing:
        yield existing
        return
    server = ZooKeeperServer(ZooKeeperSettings(tick_time_ms=250, min_session_timeout_ms=1000)).start()
    yield server.connect_string
    server.stop()


@pytest.fixture
def chroot_connect(zk_connect):
    """A connect string rooted at a fresh chroot: an empty ZooKeeper namespace for one test."""
    return fresh_chroot(zk_connect, "kray-test")


@pytest.fixture
def zk(chroot_connect):
    client = KrayZkClient(chroot_connect, session_timeout_ms=6000).start()
    client.ensure_persistent_paths()
    yield client
    client.close()


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from actors.runtime import ray_worker_environment
    from coordination.server import free_port

    port = free_port()
    ray_worker_environment()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             namespace="kray-tests", _metrics_export_port=port)
    ray.metrics_export_port = port  # where tests scrape the Prometheus metrics
    yield ray
    ray.shutdown()
