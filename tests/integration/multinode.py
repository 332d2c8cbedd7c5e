"""A kray cluster on a multi-node Ray cluster on this machine, run in a process of its own (a test
run already has its one Ray session): `python -m tests.integration.multinode ZK_CONNECT`.

Ray's own `ray.cluster_utils.Cluster` starts a head and three worker nodes; the brokers spread one
per worker, their candidates beside them; acks=all load runs while a broker is restarted by Ray
(on its node, with its log directory) and then a whole worker node is removed. Prints one JSON
line: what the test (test_multinode.py) checks.
"""
from __future__ import annotations

import json
import sys
import time
import uuid

import ray
from ray.cluster_utils import Cluster

from actors.cluster import LocalCluster
from actors.config import BrokerConfig, ClusterConfig
from actors.runtime import ray_worker_environment
from coordination import admin
from coordination.errors import KrayError
from jobs.experiments.local import fresh_chroot
from tests.integration.conftest import AckedLoad, wait_until, zk_states


def main(connect: str) -> dict:
    ray_worker_environment()
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    workers = [nodes.add_node(num_cpus=1) for _ in range(3)]
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    config = ClusterConfig(zk_connect=fresh_chroot(connect, "kray-multinode"), namespace=f"mn-{uuid.uuid4().hex[:8]}",
                           zk_session_timeout_ms=6000,
                           broker=BrokerConfig(min_insync_replicas=2, replica_fetch_wait_max_ms=200,
                                               replica_fetch_backoff_ms=200))
    kray = LocalCluster(config, [1, 2, 3]).start()
    zk = config.zk_client().start()
    out: dict = {"workers": sorted(w.node_id for w in workers), "head": nodes.head_node.node_id}
    try:
        controller_id, _ = kray.wait_until_ready(zk)
        out["broker_nodes"] = {b: ray.get(h.info.remote())["node_id"] for b, h in kray.brokers.items()}
        out["candidate_nodes"] = {b: ray.get(kray.controller_actor(b).status.remote())["node_id"] for b in kray.brokers}
        admin.create_topic(zk, "t", 6, 3)
        kray.wait_for_metadata(lambda m: len(m["partitions"]) == 6)
        load = AckedLoad(kray, "t")
        wait_until(lambda: len(load.acked) > 200, what="records acknowledged")

        others = [b for b in kray.brokers if b != controller_id]
        restarted, victim = others
        before = ray.get(kray.brokers[restarted].info.remote())
        kray.kill_broker(restarted, restart=True)  # Ray restarts it where it was pinned
        wait_until(lambda: ray.get(kray.brokers[restarted].info.remote())["broker_epoch"] > before["broker_epoch"],
                   timeout=60, what="the restarted broker registered again")
        after = ray.get(kray.brokers[restarted].info.remote())
        out["restarted"] = {"node_before": before["node_id"], "node_after": after["node_id"],
                            "log_dir_before": before["log_dir"], "log_dir_after": after["log_dir"],
                            "recovered_partitions": after["recovered_partitions"]}
        wait_until(lambda: all(restarted in s.isr for s in zk_states(zk, "t").values()), timeout=60,
                   what="the restarted broker back in every ISR")

        # Under load a session can expire and the controller move: the victim is a broker the active
        # controller is not on, and the failure is looked for in that controller's timelines.
        controller_id = zk.get_controller_id()
        victim = next(b for b in (victim, restarted) if b != controller_id)
        out["node_failure"] = {"victim": victim, "controller": controller_id,
                               "led_or_in_isr_before": sum(s.leader == victim or victim in s.isr
                                                           for s in zk_states(zk, "t").values())}
        node = next(w for w in workers if w.node_id == out["broker_nodes"][victim])
        removed_at = time.time() * 1000
        nodes.remove_node(node, allow_graceful=False)  # the whole node: raylet, broker, candidate
        kray.brokers.pop(victim)

        def handled() -> list[dict]:
            active = zk.get_controller_id()
            if active not in kray.brokers:
                return []  # an election under way
            timelines = ray.get(kray.controller_actor(active).timelines.remote())
            return [t for t in timelines
                    if t["kind"] == "broker_failure" and victim in t["brokers"] and t["detected_ms"] >= removed_at]
        failure = wait_until(handled, timeout=60, what="the removed node's broker handled as a broker failure")[0]
        wait_until(lambda: all(s.leader != victim and victim not in s.isr for s in zk_states(zk, "t").values()),
                   timeout=60, what="leaders and ISRs without the removed node's broker")
        out["node_failure"]["detected_after_ms"] = failure["detected_ms"] - removed_at
        count = len(load.acked)
        try:
            wait_until(lambda: len(load.acked) > count + 100, timeout=60,
                       what="records acknowledged after the node's removal")
        except KrayError as e:
            raise KrayError(f"{e} ({len(load.acked) - count} since; {load.waiting()})") from None
        load.stop()
        out["acked"] = len(load.acked)
        out["lost"] = len(load.lost(kray, 6))
    finally:
        try:
            kray.stop(delete_logs=True)
            zk.close()
        finally:
            ray.shutdown()
            nodes.shutdown()
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])), flush=True)
