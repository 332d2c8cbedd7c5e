"""A kray cluster on a 3-server ZooKeeper ensemble on loopback: it keeps electing leaders when one
server dies, stops changing metadata without a quorum (no split brain, a clear error for clients),
and recovers when the quorum returns; no acknowledged record is lost throughout."""
from __future__ import annotations

import pytest
import ray
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from coordination import admin
from coordination.errors import KrayError
from coordination.server import ZooKeeperEnsemble, ZooKeeperSettings
from coordination.zkclient import KrayZkClient
from tests.integration.conftest import AckedLoad, start_cluster, wait_until, zk_states

SETTINGS = ZooKeeperSettings(tick_time_ms=250, min_session_timeout_ms=1000)


def test_the_cluster_rides_out_a_lost_server_and_waits_out_a_lost_quorum(ray_session):
    with ZooKeeperEnsemble(3, SETTINGS) as ensemble:
        cluster, zk = start_cluster(ensemble.connect_string, session_timeout_ms=6000)
        try:
            admin.create_topic(zk, "t", 6, 3)
            cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 6)
            load = AckedLoad(cluster, "t")
            wait_until(lambda: len(load.acked) > 200, what="records acknowledged before the faults")

            # one server (the leader) dies during the load and a broker failure
            leader = ensemble.leader_index()
            ensemble.kill_server(leader)
            controller_id, epoch = cluster.wait_for_controller(zk, timeout=30)
            victim = next(b for b in cluster.brokers if b != controller_id)
            cluster.kill_broker(victim)
            wait_until(lambda: all(s.leader != victim and victim not in s.isr for s in zk_states(zk, "t").values()),
                       timeout=60, what="new leaders and ISRs without the killed broker, on two servers")
            admin.create_topic(zk, "two-servers", 2, 2)  # metadata still changes
            cluster.wait_for_metadata(lambda m: sum(tp.topic == "two-servers" for tp in m["partitions"]) == 2)
            ensemble.restart_server(leader)

            # two servers die: no quorum, no metadata change, a clear error
            survivor = ensemble.leader_index()
            lost = [i for i in range(3) if i != survivor]
            epoch_before = zk.kazoo.create("/mark", b"", include_data=True)[1].czxid >> 32  # ZooKeeper's epoch
            for i in lost:
                ensemble.kill_server(i)
            with pytest.raises(KrayError, match="cannot connect to ZooKeeper"):  # a new client: a clear error
                KrayZkClient(cluster.config.zk_connect).start(timeout=5)
            with pytest.raises((KazooException, KazooTimeoutError)):  # the admin's own session: no answer
                zk.kazoo.create_async("/no-quorum", b"x").get(timeout=5)  # (kazoo sends it again later)
            for i in lost:
                ensemble.restart_server(i)
            wait_until(lambda: ensemble.leader_index() is not None, timeout=30, what="a quorum again")
            late = zk.get("/no-quorum")  # if it was written, then only once a quorum (a new epoch) was back
            assert late is None or late[1].czxid >> 32 > epoch_before
            before = len(load.acked)
            controller_id, _ = cluster.wait_for_controller(zk, timeout=60)
            active = [b for b in cluster.brokers if ray.get(cluster.controller_actor(b).status.remote())["active"]]
            assert active == [controller_id]  # one controller acts: no split brain
            admin.create_topic(zk, "after-quorum", 2, 2)
            cluster.wait_for_metadata(lambda m: sum(tp.topic == "after-quorum" for tp in m["partitions"]) == 2,
                                      timeout=60)
            wait_until(lambda: len(load.acked) > before + 100, timeout=60, what="records acknowledged after the quorum")
            load.stop()
            missing = load.lost(cluster, 6)
            assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
        finally:
            cluster.stop(delete_logs=True)
            zk.close()
