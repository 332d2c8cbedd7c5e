"""Brokers, controller candidates and RequestSenders as real Ray actors on a real ZooKeeper.

One 3-broker cluster serves the whole module, in order: election, topic
creation, controller failover, then fencing of the old epoch.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import pytest

from actors.runtime import DATA_PLANE_NICENESS, poll
from actors.protocol import LeaderAndIsrRequest, PartitionState, UpdateMetadataRequest
from coordination import admin, zkdata
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from tests.integration.conftest import start_cluster


@pytest.fixture(scope="module")
def env(zk_connect, ray_session):
    cluster, zk = start_cluster(zk_connect)
    state = {"cluster": cluster, "zk": zk, "ray": ray_session}
    yield state
    cluster.stop(delete_logs=True)
    zk.close()


def statuses(env) -> dict[int, dict]:
    ray, cluster = env["ray"], env["cluster"]
    return {b: ray.get(cluster.controller_actor(b).status.remote(), timeout=30) for b in cluster.brokers}


def request_senders(env) -> dict[str, str]:
    """The RequestSender actors alive in the cluster's namespace: name -> actor id."""
    ray, namespace = env["ray"], env["cluster"].config.namespace
    senders = {}
    for a in ray.util.list_named_actors(all_namespaces=True):
        if a["namespace"] == namespace and a["name"].startswith("RequestSender-to-broker-"):
            with contextlib.suppress(ValueError):  # gone since it was listed
                senders[a["name"]] = ray.get_actor(a["name"], namespace=namespace)._actor_id.hex()
    return senders


def zk_leadership(zk, topic: str) -> dict[TopicPartition, tuple[int, int, list[int]]]:
    tps = [TopicPartition(topic, p) for p in zk.get_topic_znodes([topic])[topic].assignment()]
    return {tp: (r.state.leader, r.state.leader_epoch, r.state.isr) for tp, r in zk.get_partition_states(tps).items()}


def test_one_controller_elected_among_three(env):
    cluster, zk = env["cluster"], env["zk"]
    controller_id, epoch = cluster.wait_for_controller(zk)
    assert epoch == 1
    doc = json.loads(zk.get(zkdata.CONTROLLER)[0])
    assert doc["version"] == 1 and doc["brokerid"] == controller_id and doc["timestamp"].isdigit()
    active = [b for b, s in statuses(env).items() if s["active"]]
    assert active == [controller_id]
    assert statuses(env)[controller_id]["live_brokers"] == [1, 2, 3]
    assert sorted(zk.get_all_broker_ids()) == [1, 2, 3]


def test_created_topic_is_identical_in_zookeeper_and_every_cache(env):
    cluster, zk, ray = env["cluster"], env["zk"], env["ray"]
    assignment = admin.create_topic(zk, "orders", 12, 3)
    caches = cluster.wait_for_metadata(lambda m: sum(tp.topic == "orders" for tp in m["partitions"]) == 12)
    expected = zk_leadership(zk, "orders")
    assert len(expected) == 12
    for tp, (leader, leader_epoch, isr) in expected.items():
        replicas = assignment[tp.partition]
        assert leader == replicas[0] and leader_epoch == 0 and isr == replicas  # NewPartition -> Online
    for broker_id, cache in caches.items():
        assert {tp: v for tp, v in cache["partitions"].items() if tp.topic == "orders"} == expected
        assert cache["brokers"] == [1, 2, 3]
    # LeaderAndIsr reached exactly the replicas, with the right roles
    for broker_id, handle in cluster.brokers.items():
        roles = {tp: role for tp, role in ray.get(handle.replicas.remote()).items() if tp.topic == "orders"}
        assert set(roles) == {TopicPartition("orders", p) for p, r in assignment.items() if broker_id in r}
        assert all((role == "Leader") == (expected[tp][0] == broker_id) for tp, role in roles.items())


def test_controller_failover_bumps_epoch_and_resends_state(env):
    cluster, zk, ray = env["cluster"], env["zk"], env["ray"]
    old_id, old_epoch = cluster.wait_for_controller(zk)
    old_pid = statuses(env)[old_id]["pid"]
    senders = request_senders(env)
    assert sorted(senders) == [f"RequestSender-to-broker-{b}" for b in (1, 2, 3)]  # each broker's own
    cluster.kill_controller(old_id)
    new_id, new_epoch = cluster.wait_for_controller(zk, min_epoch=old_epoch + 1, timeout=60)
    assert new_epoch == old_epoch + 1
    assert zk.get_controller_epoch()[0] == new_epoch
    caches = cluster.wait_for_metadata(lambda m: m["controller_epoch"] == new_epoch)
    assert all(c["controller_id"] == new_id for c in caches.values())
    assert all(c["partitions"] == caches[new_id]["partitions"] for c in caches.values())
    infos = ray.get([h.info.remote() for h in cluster.brokers.values()])
    assert all(i["controller_epoch"] == new_epoch for i in infos)
    assert request_senders(env) == senders  # the new controller took them over: no process started
    # the killed candidate is back, started by its broker after candidate_restart_backoff_ms (off the
    # failover's cores), and only a candidate
    restarted = poll(lambda: statuses(env), timeout=60, what="the killed candidate to answer again")
    if new_id != old_id:
        assert restarted[old_id]["pid"] != old_pid and not restarted[old_id]["active"]
    assert [b for b, s in restarted.items() if s["active"]] == [new_id]
    # the new controller handles new topics
    admin.create_topic(zk, "after-failover", 3, 2)
    cluster.wait_for_metadata(lambda m: sum(tp.topic == "after-failover" for tp in m["partitions"]) == 3)
    env["old_epoch"] = old_epoch


def test_brokers_reject_the_old_controller_epoch_and_stale_broker_epochs(env):
    cluster, ray = env["cluster"], env["ray"]
    old_epoch = env.get("old_epoch", 1)
    tp = TopicPartition("orders", 0)
    before = ray.get(cluster.brokers[1].metadata.remote())
    state = PartitionState(topic=tp.topic, partition=tp.partition, controller_epoch=old_epoch, leader=1,
                           leader_epoch=99, isr=[1], zk_version=5, replicas=[1, 2, 3])
    stale = LeaderAndIsrRequest(controller_id=1, controller_epoch=old_epoch, broker_epoch=-1,
                                partition_states=[state], live_leaders=[])
    response = ray.get(cluster.brokers[1].leader_and_isr.remote(stale))
    assert response.error_code == Errors.STALE_CONTROLLER_EPOCH
    stale_um = UpdateMetadataRequest(controller_id=1, controller_epoch=old_epoch, broker_epoch=-1,
                                     partition_states=[state], live_brokers=[])
    assert ray.get(cluster.brokers[1].update_metadata.remote(stale_um)).error_code == Errors.STALE_CONTROLLER_EPOCH
    info = ray.get(cluster.brokers[2].info.remote())
    wrong_incarnation = LeaderAndIsrRequest(controller_id=1, controller_epoch=info["controller_epoch"],
                                            broker_epoch=info["broker_epoch"] - 1, partition_states=[state],
                                            live_leaders=[])
    assert ray.get(cluster.brokers[2].leader_and_isr.remote(wrong_incarnation)).error_code == Errors.STALE_BROKER_EPOCH
    assert ray.get(cluster.brokers[1].metadata.remote()) == before  # nothing changed


def test_a_killed_request_sender_is_replaced_by_one_of_the_controllers_and_requests_flow(env):
    """kill-request-sender: the controller starts a sender under a name of its own (the broker's
    name stays free for its next incarnation) and the broker hears of new topics again."""
    from jobs.experiments.chaos import Chaos

    cluster, zk = env["cluster"], env["zk"]
    controller_id = Chaos(cluster, zk).kill_request_sender(2)
    replaced = poll(lambda: [n for n in request_senders(env) if n.startswith("RequestSender-to-broker-2-")] or None,
                    timeout=60, what="the controller's own sender to broker 2")
    assert replaced[0].startswith(f"RequestSender-to-broker-2-of-controller-{controller_id}-")
    poll(lambda: "RequestSender-to-broker-2" not in request_senders(env), what="the killed sender's name gone")
    admin.create_topic(zk, "after-sender-kill", 3, 3)
    cluster.wait_for_metadata(lambda m: sum(tp.topic == "after-sender-kill" for tp in m["partitions"]) == 3)


def test_the_control_plane_runs_ahead_of_the_data_plane_on_the_cpu(env):
    """The controller candidates and the RequestSenders (the brokers' own and one a controller started)
    run every thread at control_plane_niceness, 0, the brokers at 15; all of them with two malloc arenas,
    from the environment the tests' Ray gave its workers (no runtime_env)."""
    ray, cluster = env["ray"], env["cluster"]

    def nice_values(pid: int) -> set[int]:
        values = set()
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                values.add(os.getpriority(os.PRIO_PROCESS, int(tid)))
        return values

    def arenas(pid: int) -> str | None:
        environ = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)
        return environ.get("MALLOC_ARENA_MAX")

    names = request_senders(env)
    assert any(n.startswith("RequestSender-to-broker-2-of-controller-") for n in names)  # started by the test above
    for sender in [ray.get_actor(name, namespace=cluster.config.namespace) for name in names]:
        pid = ray.get(sender.process.remote())["pid"]
        assert nice_values(pid) == {0} and arenas(pid) == "2"
    for b, status in statuses(env).items():
        assert nice_values(status["pid"]) == {0} and arenas(status["pid"]) == "2"
        broker = ray.get(cluster.brokers[b].info.remote())["pid"]
        assert nice_values(broker) == {DATA_PLANE_NICENESS} and arenas(broker) == "2"


def test_controller_resigns_when_its_session_expires(env):
    from coordination.zkclient import expire_session

    cluster, zk, ray = env["cluster"], env["zk"], env["ray"]
    old_id, old_epoch = cluster.wait_for_controller(zk)
    expire_session(zk.connect, ray.get(cluster.controller_actor(old_id).zk_session.remote()))
    new_id, new_epoch = cluster.wait_for_controller(zk, min_epoch=old_epoch + 1, timeout=60)
    assert new_epoch == old_epoch + 1
    deadline = time.monotonic() + 30  # the zombie learns of its expiry when it next reaches ZooKeeper
    while [b for b, s in statuses(env).items() if s["active"]] != [new_id] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [b for b, s in statuses(env).items() if s["active"]] == [new_id]
    assert statuses(env)[new_id]["epoch"] == new_epoch
    cluster.wait_for_metadata(lambda m: m["controller_epoch"] == new_epoch)


def test_cli_reports_user_errors_in_one_line(env):
    import subprocess
    import sys

    def kray(*args):
        return subprocess.run([sys.executable, "-m", "jobs.cli", "--zookeeper", env["cluster"].config.zk_connect,
                               *args], capture_output=True, text=True, timeout=60)

    bad = kray("topics", "create", "--topic", "bad name", "--partitions", "1")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "Error: InvalidTopicException: Topic name \"bad name\" is illegal, it contains a character other than "
        "ASCII alphanumerics, '.', '_' and '-'"]
    too_many = kray("topics", "create", "--topic", "cli", "--partitions", "2", "--replication-factor", "4")
    assert too_many.returncode == 1
    assert "larger than available brokers: 3" in too_many.stderr
    assert kray("topics", "create", "--topic", "cli", "--partitions", "2", "--replication-factor", "3").returncode == 0
    described = kray("topics", "describe", "--topic", "cli")
    assert described.returncode == 0
    assert described.stdout.splitlines()[0].startswith("Topic: cli\tTopicId: ")
    assert "PartitionCount: 2\tReplicationFactor: 3" in described.stdout
    assert kray("topics", "describe", "--topic", "nope").returncode == 1
