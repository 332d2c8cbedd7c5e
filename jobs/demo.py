"""The main job: a 3-broker kray cluster on an embedded ZooKeeper and a local Ray.

Starts ZooKeeper (or uses KRAY_ZK_CONNECT) and Ray, brings up 3 brokers, waits
for the controller election, creates a topic and prints it as
`kafka-topics --describe` does, kills the active controller's actor and shows
the new controller, its epoch, the old epoch being refused by the brokers, and
the killed candidate started again by its broker. Leaves no processes behind.

    python -m jobs.demo        (or: kray demo)
"""
from __future__ import annotations

import argparse
import sys
import time
import uuid

import ray

from actors.cluster import LocalCluster, listener_host
from actors.config import ClusterConfig
from actors.protocol import LeaderAndIsrRequest
from actors.runtime import poll
from coordination import admin
from coordination.zkclient import KrayZkClient
from jobs.experiments.expected_deaths import EXPECTED_DEATHS, RAY_REPORTS_FOLLOW
from jobs.experiments.local import embedded_zookeeper_and_ray, fresh_chroot


def step(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(brokers: int = 3, partitions: int = 6, replication_factor: int = 3, session_timeout_ms: int = 6000,
        topic: str = "kray-demo") -> None:
    with embedded_zookeeper_and_ray(step) as env:
        connect = env.connect
        config = ClusterConfig(zk_connect=fresh_chroot(connect, "kray-demo"),
                               namespace=f"kray-demo-{uuid.uuid4().hex[:6]}", zk_session_timeout_ms=session_timeout_ms,
                               host=listener_host())
        zk = config.zk_client().start()
        cluster = LocalCluster(config, list(range(1, brokers + 1)))
        try:
            _scenario(cluster, zk, config, topic, partitions, replication_factor)
        finally:
            step("Stopping brokers, Ray and ZooKeeper")
            cluster.stop(delete_logs=True)
            zk.close()
    step("Done")


def _scenario(cluster: LocalCluster, zk: KrayZkClient, config: ClusterConfig, topic: str, partitions: int,
              replication_factor: int) -> None:
    t0 = time.monotonic()
    cluster.start()
    controller_id, epoch = cluster.wait_for_controller(zk)
    step(f"{len(cluster.brokers)} brokers registered at /brokers/ids {zk.get_all_broker_ids()}; "
         f"controller is broker {controller_id} with epoch {epoch} ({time.monotonic() - t0:.1f}s)")

    admin.create_topic(zk, topic, partitions, replication_factor)
    cluster.wait_for_metadata(lambda m: sum(tp.topic == topic for tp in m["partitions"]) == partitions)
    step(f"Created topic {topic}; every broker's metadata cache has it. kafka-topics --describe:")
    print(admin.format_describe(admin.describe_topics(zk, [topic])), flush=True)

    old_pid = ray.get(cluster.controller_actor(controller_id).status.remote())["pid"]
    EXPECTED_DEATHS.expect([old_pid])
    step(f"Killing the active controller's actor (controller-{controller_id}, pid {old_pid}); the other candidates "
         f"hear of it from Ray and remove its /controller (Kafka waits for its {config.zk_session_timeout_ms} ms "
         f"ZooKeeper session to expire), then race for /controller" +
         ("" if EXPECTED_DEATHS.install() else RAY_REPORTS_FOLLOW))
    killed = time.monotonic()
    cluster.kill_controller(controller_id)
    new_id, new_epoch = cluster.wait_for_controller(zk, min_epoch=epoch + 1)
    step(f"New controller: broker {new_id}, epoch {new_epoch} ({time.monotonic() - killed:.1f}s after the kill)")
    cluster.wait_for_metadata(lambda m: m["controller_epoch"] == new_epoch)

    stale = LeaderAndIsrRequest(controller_id=controller_id, controller_epoch=epoch, broker_epoch=-1,
                                partition_states=[], live_leaders=[])
    answers = ray.get([b.leader_and_isr.remote(stale) for b in cluster.brokers.values()])
    step("A LeaderAndIsr from the old epoch %d is answered %s by brokers %s" % (
        epoch, sorted({a.error_code.name for a in answers}), sorted(cluster.brokers)))

    status = poll(lambda: ray.get(cluster.controller_actor(controller_id).status.remote()), timeout=60,
                  what=f"controller-{controller_id} to be started again")
    step(f"controller-{controller_id} was started again by its broker (pid {old_pid} -> {status['pid']}) and "
         f"is a candidate again (active={status['active']})")
    print(admin.format_describe(admin.describe_topics(zk, [topic])), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kray demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    args = parser.parse_args(argv)
    run(args.brokers, args.partitions, args.replication_factor, args.session_timeout_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
