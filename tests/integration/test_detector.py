"""The Ray-based failure detector: deaths found long before the ZooKeeper session times out, no
false suspicion of a paused broker, and a wrongly removed broker comes back (real ZooKeeper, real Ray).

The clusters here use a 30 s session timeout, so that anything handled within seconds was
found by Ray rather than by ZooKeeper, and one setting for all (a killed candidate's backoff of 3 s) so
that they share one cluster.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid

import ray

from actors.config import ClusterConfig
from actors.controller.actor import ControllerActor
from actors.names import broker_actor_name, controller_actor_name
from actors.runtime import poll
from coordination import zkdata
from jobs.experiments.local import fresh_chroot
from tests.integration.conftest import create_topic_and_wait, caches_match_zookeeper, wait_until, zk_states

LONG_SESSION_MS = 30_000
# long enough that the failover and the checks after it end within it, so a candidate started at once is seen
BACKOFF_MS = 3000
SHARED = {"session_timeout_ms": LONG_SESSION_MS, "candidate_restart_backoff_ms": BACKOFF_MS}  # one cluster for all


def broker_failures(cluster, controller_id: int, since_ms: float = 0) -> list[dict]:
    """The controller's broker-failure timelines, those detected from `since_ms` on (a shared cluster
    keeps the earlier tests')."""
    return [t for t in ray.get(cluster.controller_actor(controller_id).timelines.remote())
            if t["kind"] == "broker_failure" and t["detected_ms"] >= since_ms]


def test_a_killed_broker_is_handled_before_its_session_expires(new_cluster):
    cluster, zk = new_cluster(**SHARED)
    controller_id, _ = cluster.wait_for_controller(zk)
    create_topic_and_wait(cluster, zk, "t", 6, 3)
    victim = next(b for b in cluster.brokers if b != controller_id)
    killed_ms = time.time() * 1000
    cluster.kill_broker(victim)  # for good: only Ray can tell
    wait_until(lambda: broker_failures(cluster, controller_id, killed_ms), timeout=10, what="the broker failure handled")
    failure = broker_failures(cluster, controller_id, killed_ms)[0]
    assert failure["brokers"] == [victim]
    assert failure["detected_ms"] - killed_ms < LONG_SESSION_MS / 3  # Ray's report, not the session timeout
    assert victim not in zk.get_all_broker_ids()  # ZooKeeper says so too
    assert all(s.leader != victim and victim not in s.isr for s in zk_states(zk, "t").values())
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "t"), what="caches to converge")


def test_a_restarted_broker_registers_again_at_once_and_gets_its_replicas_back(new_cluster):
    cluster, zk = new_cluster(**SHARED)
    controller_id, _ = cluster.wait_for_controller(zk)
    create_topic_and_wait(cluster, zk, "t", 3, 3)
    victim = next(b for b in cluster.brokers if b != controller_id)
    before = ray.get(cluster.brokers[victim].info.remote())
    killed_ms = time.time() * 1000
    cluster.kill_broker(victim, restart=True)
    # its old registration is removed on Ray's word: the new incarnation need not wait out the session
    # (how soon it registers is the time a new worker process takes to start, seconds on a busy machine)
    wait_until(lambda: broker_failures(cluster, controller_id, killed_ms), timeout=20, what="the broker failure handled")
    assert broker_failures(cluster, controller_id, killed_ms)[0]["detected_ms"] - killed_ms < LONG_SESSION_MS / 3
    wait_until(lambda: ray.get(cluster.brokers[victim].info.remote())["broker_epoch"] > before["broker_epoch"],
               timeout=LONG_SESSION_MS / 1000, what="the restarted broker to register (its old registration removed)")
    wait_until(lambda: all(victim in s.isr for s in zk_states(zk, "t").values()), timeout=30,
               what="the restarted broker back in every ISR")


def test_a_paused_broker_is_not_suspected(new_cluster):
    """SIGSTOP is invisible to Ray: nothing is published, the registration stays, no failover."""
    cluster, zk = new_cluster(**SHARED)
    controller_id, _ = cluster.wait_for_controller(zk)
    create_topic_and_wait(cluster, zk, "t", 3, 3)
    victim = next(b for b in cluster.brokers if b != controller_id)
    epoch = ray.get(cluster.brokers[victim].info.remote())["broker_epoch"]
    pid = ray.get(cluster.brokers[victim].info.remote())["pid"]
    paused_ms = time.time() * 1000
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(3)
        assert victim in zk.get_all_broker_ids()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert broker_failures(cluster, controller_id, since_ms=paused_ms) == []
    assert ray.get(cluster.brokers[victim].info.remote())["broker_epoch"] == epoch


def test_a_live_broker_whose_registration_was_removed_registers_again_and_is_fenced_meanwhile(new_cluster):
    """What a false suspicion leaves behind: the controller moves the broker's leaderships with newer
    leader epochs (its old epoch is fenced), the broker registers again with a new broker epoch, and
    it gets its replicas back."""
    cluster, zk = new_cluster(**SHARED)
    controller_id, _ = cluster.wait_for_controller(zk)
    create_topic_and_wait(cluster, zk, "t", 6, 3)
    victim = next(b for b in cluster.brokers if b != controller_id)
    led = {tp: s.leader_epoch for tp, s in zk_states(zk, "t").items() if s.leader == victim}
    assert led
    old_epoch = ray.get(cluster.brokers[victim].info.remote())["broker_epoch"]
    zk.kazoo.delete(zkdata.broker_path(victim))  # as the detector does on a (here: false) report
    wait_until(lambda: ray.get(cluster.brokers[victim].info.remote())["broker_epoch"] > old_epoch, timeout=10,
               what="the broker to register again")
    states = zk_states(zk, "t")
    assert all(states[tp].leader_epoch > epoch for tp, epoch in led.items())  # the old leaderships are fenced
    wait_until(lambda: all(victim in s.isr for s in zk_states(zk, "t").values()), timeout=30,
               what="the broker back in every ISR")
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "t"), what="caches to converge")


def test_a_killed_controller_is_replaced_before_its_session_expires(new_cluster):
    """The other candidates see the controller's actor die and remove its /controller at once; the
    killed candidate's broker starts a new one only after candidate_restart_backoff_ms, off the
    failover's cores (Ray does not restart it at once)."""
    cluster, zk = new_cluster(**SHARED)
    backoff_s = BACKOFF_MS / 1000
    old_id, old_epoch = cluster.wait_until_ready(zk)
    old_pid = ray.get(cluster.controller_actor(old_id).status.remote())["pid"]
    killed = time.monotonic()
    cluster.kill_controller(old_id)
    new_id, new_epoch = cluster.wait_for_controller(zk, min_epoch=old_epoch + 1, timeout=20)
    assert time.monotonic() - killed < LONG_SESSION_MS / 1000 / 3
    assert new_epoch == old_epoch + 1
    cluster.wait_for_metadata(lambda m: m["controller_epoch"] == new_epoch)
    try:
        cluster.controller_actor(old_id)
        assert time.monotonic() - killed >= backoff_s, "a candidate was started before the backoff"
    except ValueError:
        pass  # none yet: the broker is waiting out the backoff
    back = poll(lambda: ray.get(cluster.controller_actor(old_id).status.remote(), timeout=10), timeout=60,
                what="the killed candidate started again by its broker")
    assert time.monotonic() - killed >= backoff_s
    assert back["pid"] != old_pid and not back["active"]


def test_a_candidate_ends_the_moment_its_brokers_process_does(zk_connect, ray_session):
    """An orphaned candidate could win the election another death started, then die (a second election):
    Ray ends it too, but 70-200 ms after its broker. Here the "broker" is a process of the test's own, so
    Ray never ends the candidate: only the candidate's watch on its broker's process can."""
    config = ClusterConfig(zk_connect=fresh_chroot(zk_connect, "kray-test"), namespace=f"test-{uuid.uuid4().hex[:8]}")
    broker = subprocess.Popen(["sleep", "600"])
    candidate = ControllerActor.options(name=controller_actor_name(7), namespace=config.namespace).remote(
        7, config, broker.pid)

    def ended() -> bool:
        try:
            ray.get(candidate.status.remote(), timeout=10)
            return False
        except ray.exceptions.RayActorError:
            return True
    try:
        assert not ended()
        broker.kill()
        broker.wait()
        wait_until(ended, timeout=10, what="the candidate to end with its broker's process")
    finally:
        broker.kill()
        ray.kill(candidate)


def test_the_broker_that_hosted_the_controller_is_handled_by_the_next_ones_failover(new_cluster):
    """The broker and its controller die together, so the old controller handles nothing, and the
    broker's registration outlives it (a 30 s session). The next controller asks Ray for the registered
    brokers' actors before it loads its context: it removes the dead one's registration and handles
    its death in the failover itself, its leaderships and ISR memberships in the failover's requests,
    with no broker failure of its own after. (The candidate is stopped first and killed once Ray has
    the broker dead, so that the failover surely comes after: it dies within milliseconds of its
    broker otherwise, and Ray's word of the two deaths comes in either order.)"""
    cluster, zk = new_cluster(**SHARED)
    old_id, old_epoch = cluster.wait_until_ready(zk)
    create_topic_and_wait(cluster, zk, "t", 6, 3)
    broker_pid = ray.get(cluster.brokers[old_id].info.remote())["pid"]
    candidate_pid = ray.get(cluster.controller_actor(old_id).status.remote())["pid"]
    killed, killed_ms = time.monotonic(), time.time() * 1000
    os.kill(candidate_pid, signal.SIGSTOP)
    os.kill(broker_pid, signal.SIGKILL)
    cluster.brokers.pop(old_id)
    wait_until(lambda: not actor_named(broker_actor_name(old_id), cluster.config.namespace), timeout=20,
               what="Ray to have the broker dead")
    os.kill(candidate_pid, signal.SIGKILL)
    new_id, new_epoch = cluster.wait_for_controller(zk, min_epoch=old_epoch + 1, timeout=20)
    wait_until(lambda: all(s.leader != old_id and old_id not in s.isr for s in zk_states(zk, "t").values()),
               timeout=20, what="the dead broker's leaderships moved and its ISR memberships ended")
    assert time.monotonic() - killed < LONG_SESSION_MS / 1000 / 3  # Ray's word, not the session timeout
    assert old_id not in zk.get_all_broker_ids()
    timelines = ray.get(cluster.controller_actor(new_id).timelines.remote())
    assert [t["epoch"] for t in timelines if t["kind"] == "controller_failover"] == [new_epoch]
    assert broker_failures(cluster, new_id, killed_ms) == []  # handled by the failover, not after it
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "t"), what="caches to converge")


def actor_named(name: str, namespace: str) -> bool:
    try:
        ray.get_actor(name, namespace=namespace)
        return True
    except ValueError:
        return False


def test_with_the_detector_off_deaths_wait_for_the_session(new_cluster):
    """Kafka's behaviour: a killed broker stays registered until its session times out."""
    # its own: its killed broker's registration would hold a shared cluster's return up for the whole session
    cluster, zk = new_cluster(session_timeout_ms=LONG_SESSION_MS, ray_failure_detector_enable=False, own=True)
    controller_id, _ = cluster.wait_for_controller(zk)
    victim = next(b for b in cluster.brokers if b != controller_id)
    cluster.kill_broker(victim)
    time.sleep(3)
    assert victim in zk.get_all_broker_ids()
    assert broker_failures(cluster, controller_id) == []
