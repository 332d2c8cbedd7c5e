"""ZooKeeper ACLs as Kafka's zookeeper.set.acl: with a credential, kray's znodes are writable by
kray's digest identity alone and readable by anyone, and the cluster works as before."""
from __future__ import annotations

import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from actors.cluster import LocalCluster
from actors.config import ClusterConfig
from coordination import admin, zkdata
from coordination.errors import KrayError
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition
from jobs.experiments.local import fresh_chroot
from tests.integration.conftest import caches_match_zookeeper, wait_until, zk_states


@pytest.fixture
def secured(zk_connect, ray_session):
    credential = f"kray:{uuid.uuid4().hex}"  # made up per test run: no credential lives in the code
    config = ClusterConfig(zk_connect=fresh_chroot(zk_connect, "kray-acl", credential),
                           namespace=f"test-{uuid.uuid4().hex[:8]}", zk_session_timeout_ms=6000,
                           zk_credential=credential)
    cluster = LocalCluster(config, [1, 2, 3]).start()
    zk = config.zk_client().start()
    try:
        cluster.wait_until_ready(zk)
        yield cluster, zk, config
    finally:
        cluster.stop(delete_logs=True)
        zk.close()


def stranger(connect: str, credential: str | None = None) -> KazooClient:
    client = KazooClient(hosts=connect, auth_data=[("digest", credential)] if credential else None)
    client.start(timeout=10)
    return client


def test_strangers_can_read_but_not_write_krays_znodes(secured):
    cluster, zk, config = secured
    admin.create_topic(zk, "orders", 3, 3)
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 3)
    before = {p: zk.get(p)[0] for p in (zkdata.CONTROLLER, zkdata.broker_path(1), zkdata.topic_path("orders"))}
    for who in (None, "kray:wrong-password"):
        other = stranger(config.zk_connect, who)
        try:
            assert other.get(zkdata.CONTROLLER)[0] == before[zkdata.CONTROLLER]  # anyone may read
            attempts = [
                lambda: other.set(zkdata.CONTROLLER, b'{"version":1,"brokerid":9,"timestamp":"1"}'),
                lambda: other.delete(zkdata.CONTROLLER),
                lambda: other.create(zkdata.CONTROLLER + "-x", b""),
                lambda: other.set(zkdata.broker_path(1), b"{}"),
                lambda: other.delete(zkdata.broker_path(1)),
                lambda: other.create(zkdata.broker_path(9), b"{}", ephemeral=True),
                lambda: other.set(zkdata.topic_path("orders"), b"{}"),
                lambda: other.delete(zkdata.topic_path("orders"), recursive=True),
                lambda: other.create("/admin/delete_topics/orders", b""),
                lambda: other.create("/admin/reassign_partitions", b"{}"),
                lambda: other.set(zkdata.CONTROLLER_EPOCH, b"999"),  # would fence the controller out
                lambda: other.set(zkdata.partition_state_path(TopicPartition("orders", 0)), b"{}"),
                lambda: other.delete(zkdata.partition_state_path(TopicPartition("orders", 0))),
            ]
            for attempt in attempts:
                with pytest.raises(NoAuthError):
                    attempt()
        finally:
            other.stop()
            other.close()
    assert {p: zk.get(p)[0] for p in before} == before  # nothing changed
    assert zk.get("/admin/delete_topics/orders") is None


def test_the_cluster_elects_and_fails_over_with_acls_on(secured):
    cluster, zk, config = secured
    controller_id, epoch = cluster.wait_for_controller(zk)
    admin.create_topic(zk, "t", 6, 3)
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 6)
    victim = next(b for b in cluster.brokers if b != controller_id)
    cluster.kill_broker(victim)  # the detector removes its registration; the controller moves leaders
    wait_until(lambda: all(s.leader != victim and victim not in s.isr for s in zk_states(zk, "t").values()),
               timeout=30, what="leaders and ISRs without the killed broker")
    cluster.kill_controller(controller_id)  # the candidates remove /controller and elect again
    new_id, new_epoch = cluster.wait_for_controller(zk, min_epoch=epoch + 1, timeout=30)
    assert new_epoch == epoch + 1
    cluster.wait_for_metadata(lambda m: m["controller_epoch"] == new_epoch)  # the new controller reached all
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "t"), what="caches to converge")


def test_a_malformed_credential_is_refused(zk_connect):
    with pytest.raises(KrayError, match="user:password"):
        KrayZkClient(zk_connect, credential="no-colon")
