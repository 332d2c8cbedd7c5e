"""Every controller flow end to end, through real ZooKeeper and real broker / controller actors."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from typing import NamedTuple

import ray

from actors.config import BrokerConfig
from coordination import admin, zkdata
from coordination.errors import ApiError, Errors
from coordination.zkdata import TopicPartition
from tests.integration.conftest import (
    caches_match_zookeeper,
    create_topic_and_wait,
    write_isr_as_leader,
    wait_until,
    zk_states,
)

# one cluster for the two tests whose partitions must move only as the test says: no follower shrunk out of
# an ISR by lag within a test, no auto leader rebalance
STILL = {"broker": BrokerConfig(replica_lag_time_max_ms=300_000), "auto_leader_rebalance_enable": False}


class Controller(NamedTuple):
    id: int
    epoch: int
    actor: object
    other_broker: int  # a broker that is not the controller's: safe to kill without a controller failover


def controller_of(cluster, zk) -> Controller:
    controller_id, epoch = cluster.wait_for_controller(zk)
    return Controller(controller_id, epoch, cluster.controller_actor(controller_id),
                      next(b for b in cluster.brokers if b != controller_id))


def test_broker_failure_moves_leaders_and_shrinks_isrs(new_cluster):
    cluster, zk = new_cluster()
    create_topic_and_wait(cluster, zk, "t", 6, 3)
    controller_id, _, _, victim = controller_of(cluster, zk)
    before = zk_states(zk, "t")
    cluster.kill_broker(victim)
    wait_until(lambda: all(victim not in s.isr for s in zk_states(zk, "t").values()), what="ISR shrink")
    after = zk_states(zk, "t")
    for tp, s in after.items():
        assert s.leader != victim and s.leader in cluster.brokers
        assert s.isr == [r for r in before[tp].isr if r != victim]
        assert s.leader_epoch == before[tp].leader_epoch + 1  # one change per partition: election or shrink
        if before[tp].leader == victim:
            assert s.leader == next(r for r in zk.get_topic_znodes(["t"])["t"].assignment()[tp.partition]
                                    if r != victim)
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "t"), what="caches to converge")
    caches = ray.get([h.metadata.remote() for h in cluster.brokers.values()])
    assert all(victim not in c["brokers"] for c in caches)


def test_broker_failure_rereads_isrs_that_leaders_changed_behind_the_controller(new_cluster):
    """The controller writes ISR removals on the zkVersion it holds: states a leader changed meanwhile
    (its notification not yet in) are refused, read again and written again, and an ISR it has without
    the dead broker is read first (a leader may have taken it back in). The dead broker leaves every
    ISR and the leaders' changes are kept."""
    cluster, zk = new_cluster()
    create_topic_and_wait(cluster, zk, "t", 12, 3)
    _, _, _, victim = controller_of(cluster, zk)
    before = zk_states(zk, "t")
    followed = {tp: s for tp, s in before.items() if s.leader != victim}
    assert len(followed) >= 4  # more than a batch's STALE_VERSIONS_PER_BATCH
    probe = next(iter(followed))  # the controller hears that its leader dropped the victim...
    write_isr_as_leader(zk, probe, [r for r in before[probe].isr if r != victim])
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "t"), what="the shrink to reach the caches")
    for tp, s in followed.items():  # ...but not that leaders took it (back) in: no notification
        path = zkdata.partition_state_path(tp)
        zk.kazoo.set(path, s.model_copy(update={"isr": [s.leader, victim]}).encode())
    cluster.kill_broker(victim)
    wait_until(lambda: all(victim not in s.isr for s in zk_states(zk, "t").values()), what="ISR shrink")
    after = zk_states(zk, "t")
    for tp, s in after.items():
        assert s.leader_epoch == before[tp].leader_epoch + 1 and s.leader != victim
    for tp in followed:  # the leader alone, or with followers it has taken back in since
        assert after[tp].leader == before[tp].leader and after[tp].leader in after[tp].isr
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "t"), what="caches to converge")


def test_partition_with_no_live_isr_goes_offline_with_leader_minus_one(new_cluster):
    cluster, zk = new_cluster()
    create_topic_and_wait(cluster, zk, "single", 3, 1)
    controller_id, _, controller, victim = controller_of(cluster, zk)
    hosted = [tp for tp, s in zk_states(zk, "single").items() if s.leader == victim]
    assert hosted
    cluster.kill_broker(victim)
    wait_until(lambda: all(zk_states(zk, "single")[tp].leader == -1 for tp in hosted), what="offline partition")
    for tp in hosted:
        assert zk_states(zk, "single")[tp].isr == [victim]  # the last ISR member is kept (clean election only)
    described = admin.format_describe(admin.describe_topics(zk, ["single"]))
    assert "Leader: none" in described
    wait_until(lambda: ray.get(controller.status.remote())["offline_partitions"] == len(hosted))


def test_turning_on_a_topics_unclean_election_elects_its_offline_partitions(new_cluster):
    """kafka-configs --alter unclean.leader.election.enable=true on a topic whose partition has no live
    ISR member but a live replica: the controller elects that replica at once (Kafka's
    TopicUncleanLeaderElectionEnable), not at the next broker change."""
    cluster, zk = new_cluster()
    create_topic_and_wait(cluster, zk, "u", 3, 2)
    controller_id, _, controller, _ = controller_of(cluster, zk)
    tp, state = next((tp, s) for tp, s in zk_states(zk, "u").items() if controller_id not in s.isr)
    leader = state.leader
    follower = next(r for r in state.isr if r != leader)
    cluster.kill_broker(follower)
    wait_until(lambda: zk_states(zk, "u")[tp].isr == [leader], what="the follower out of the ISR")
    cluster.kill_broker(leader)
    wait_until(lambda: zk_states(zk, "u")[tp].leader == -1, what="the partition offline")
    cluster.start_broker(follower)
    wait_until(lambda: follower in ray.get(controller.status.remote())["live_brokers"], what="the follower back")
    assert zk_states(zk, "u")[tp].leader == -1  # a clean election cannot take a replica outside the ISR
    admin.alter_topic_config(zk, "u", {"unclean.leader.election.enable": "true"})
    wait_until(lambda: zk_states(zk, "u")[tp].leader == follower, what="the unclean election")
    assert zk_states(zk, "u")[tp].isr == [follower]
    assert ray.get(controller.status.remote())["unclean_leader_elections"] == 1


def test_restarted_broker_gets_its_replicas_back(new_cluster):
    cluster, zk = new_cluster()
    create_topic_and_wait(cluster, zk, "t", 4, 3)
    controller_id, _, controller, victim = controller_of(cluster, zk)
    old_epoch = ray.get(cluster.brokers[victim].info.remote())["broker_epoch"]
    listener = ray.get(cluster.brokers[victim].listener.remote())
    registered = zk.get_brokers([victim])[victim][0].listeners()
    cluster.kill_broker(victim, restart=True)
    wait_until(lambda: ray.get(controller.status.remote())["live_brokers"] == sorted(cluster.brokers)
               and ray.get(cluster.brokers[victim].info.remote(), timeout=30)["broker_epoch"] > old_epoch,
               timeout=60, what="the broker to come back")
    # where it was, as a Kafka broker comes back: clients reconnect to the address they know (base_port 0 here)
    assert ray.get(cluster.brokers[victim].listener.remote()) == listener == registered["PLAINTEXT"]
    assert zk.get_brokers([victim])[victim][0].listeners() == registered  # REPLICATION's port too
    # onBrokerStartup: the new incarnation is sent every partition (UpdateMetadata) and its replicas (LeaderAndIsr)
    wait_until(lambda: len(ray.get(cluster.brokers[victim].replicas.remote())) == 4, what="replicas online")
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "t"), what="caches to converge")


def test_topic_deletion_removes_everything(new_cluster):
    cluster, zk = new_cluster()
    admin.create_topic(zk, "doomed", 4, 2)
    admin.create_topic(zk, "kept", 2, 2)
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "doomed") and len(zk_states(zk, "doomed")) == 4)
    admin.delete_topic(zk, "doomed")
    wait_until(lambda: "doomed" not in zk.get_all_topics(), what="topic znode removed")
    assert zk.get(zkdata.topic_config_path("doomed")) is None
    assert zk.get(zkdata.delete_topic_path("doomed")) is None
    assert zk.get("/brokers/topics/doomed/partitions") is None

    def gone_from_brokers():
        caches = ray.get([h.metadata.remote() for h in cluster.brokers.values()])
        replicas = ray.get([h.replicas.remote() for h in cluster.brokers.values()])
        return (all(tp.topic != "doomed" for c in caches for tp in c["partitions"])
                and all(tp.topic != "doomed" for r in replicas for tp in r))
    wait_until(gone_from_brokers, what="brokers to drop the topic")
    assert "kept" in zk.get_all_topics() and caches_match_zookeeper(cluster, zk, "kept")
    admin.create_topic(zk, "doomed", 1, 1)  # the name can be used again
    wait_until(lambda: len(zk_states(zk, "doomed")) == 1)


def test_topic_deletion_disabled_ignores_the_request(new_cluster):
    cluster, zk = new_cluster(delete_topic_enable=False, own=True)  # its topic cannot be deleted
    admin.create_topic(zk, "stays", 2, 2)
    wait_until(lambda: len(zk_states(zk, "stays")) == 2)
    admin.delete_topic(zk, "stays")
    wait_until(lambda: zk.get(zkdata.delete_topic_path("stays")) is None, what="request removed")
    assert "stays" in zk.get_all_topics() and len(zk_states(zk, "stays")) == 2


def test_topic_deletion_waits_for_a_dead_replica_and_resumes(new_cluster):
    cluster, zk = new_cluster()
    create_topic_and_wait(cluster, zk, "t", 3, 3)
    controller_id, _, controller, victim = controller_of(cluster, zk)
    cluster.kill_broker(victim)
    wait_until(lambda: victim not in ray.get(controller.status.remote())["live_brokers"], what="broker death")
    admin.delete_topic(zk, "t")
    wait_until(lambda: ray.get(controller.status.remote())["topics_to_be_deleted"] == ["t"])
    time.sleep(1)
    assert "t" in zk.get_all_topics()  # halted: a replica cannot be deleted while its broker is down
    cluster.start_broker(victim)
    wait_until(lambda: "t" not in zk.get_all_topics(), timeout=60, what="deletion to resume and finish")
    assert ray.get(controller.status.remote())["topics_to_be_deleted"] == []


def test_partition_expansion(new_cluster):
    cluster, zk = new_cluster()
    admin.create_topic(zk, "grow", 2, 2)
    wait_until(lambda: len(zk_states(zk, "grow")) == 2)
    added = admin.add_partitions(zk, "grow", 5)
    assert sorted(added) == [2, 3, 4] and all(len(r) == 2 for r in added.values())
    wait_until(lambda: len(zk_states(zk, "grow")) == 5 and caches_match_zookeeper(cluster, zk, "grow"))
    for p, replicas in added.items():
        state = zk_states(zk, "grow")[TopicPartition("grow", p)]
        assert state.leader == replicas[0] and state.isr == replicas and state.leader_epoch == 0


def test_isr_change_notification_reaches_every_cache(new_cluster):
    cluster, zk = new_cluster()
    create_topic_and_wait(cluster, zk, "t", 1, 3)
    tp = TopicPartition("t", 0)
    leader = zk_states(zk, "t")[tp].leader
    write_isr_as_leader(zk, tp, [leader])  # a shrink, as the leader would write it
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "t"), what="UpdateMetadata with the new ISR")
    assert ray.get(cluster.brokers[leader].metadata.remote())["partitions"][tp][2] == [leader]
    wait_until(lambda: zk.children(zkdata.ISR_CHANGE_NOTIFICATION) == [], what="notifications deleted")


def test_controlled_shutdown_moves_leadership_first(new_cluster):
    cluster, zk = new_cluster()
    create_topic_and_wait(cluster, zk, "t", 6, 3)
    controller_id, _, controller, leaving = controller_of(cluster, zk)
    led_before = [tp for tp, s in zk_states(zk, "t").items() if s.leader == leaving]
    assert led_before
    result = cluster.controlled_shutdown(leaving)
    assert result["succeeded"] and result["remaining"] == [] and result["attempts"] == 1
    assert all(s.leader != leaving for s in zk_states(zk, "t").values())  # moved before the broker went
    wait_until(lambda: leaving not in ray.get(controller.status.remote())["live_brokers"], what="deregistration")
    assert ray.get(controller.status.remote())["shutting_down_brokers"] == []
    # until it stopped, it followed (and leaders may have let it back in); once gone, it is out of every ISR
    wait_until(lambda: all(leaving not in s.isr for s in zk_states(zk, "t").values()), what="ISRs without it")


def bounce(cluster, zk, controller, broker_id: int) -> None:
    """Crash and restart a broker: its leaderships move away; once back and caught up, the leaders
    let it rejoin the ISRs."""
    epoch = ray.get(cluster.brokers[broker_id].info.remote())["broker_epoch"]
    cluster.kill_broker(broker_id, restart=True)
    wait_until(lambda: ray.get(cluster.brokers[broker_id].info.remote())["broker_epoch"] > epoch
               and broker_id in ray.get(controller.status.remote())["live_brokers"], timeout=60,
               what=f"broker {broker_id} back")
    wait_until(lambda: all(s.leader != -1 for s in zk_states(zk, "t").values()))
    wait_until(lambda: all(broker_id in s.isr for s in zk_states(zk, "t").values()), timeout=60,
               what=f"broker {broker_id} back in the ISRs")


def test_preferred_replica_election_via_znode(new_cluster):
    cluster, zk = new_cluster(**STILL)  # the election must be the znode's
    create_topic_and_wait(cluster, zk, "t", 3, 3)
    controller_id, _, controller, preferred = controller_of(cluster, zk)
    moved = [tp for tp, s in zk_states(zk, "t").items() if s.leader == preferred]
    bounce(cluster, zk, controller, preferred)
    assert moved and all(zk_states(zk, "t")[tp].leader != preferred for tp in moved)
    admin.preferred_replica_election(zk, moved)
    wait_until(lambda: all(zk_states(zk, "t")[tp].leader == preferred for tp in moved),
               what="preferred leaders back")
    wait_until(lambda: zk.get(zkdata.PREFERRED_REPLICA_ELECTION) is None, what="znode removed")
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "t"))


def test_a_broker_that_died_while_no_controller_was_active_leaves_the_isrs_at_failover(new_cluster):
    """The new controller finds in ZooKeeper a broker that is not alive in ISRs and as a leader (it died
    with the old controller, or before it could act). As Kafka's ReplicaStateMachine.startup, it moves
    the broker's replicas Offline before any election: out of the ISRs, and a partition it led with no
    other replica gets leader -1, its ISR kept (the leaders' replica.lag.time.max.ms, far longer than
    the test here, is not what takes it out)."""
    cluster, zk = new_cluster(**STILL)
    create_topic_and_wait(cluster, zk, "t", 6, 3)
    controller = controller_of(cluster, zk)
    victim = controller.other_broker
    zk.kazoo.create(zkdata.topic_path("single"), zkdata.TopicZNode.from_assignment({0: [victim]}, None).encode())
    wait_until(lambda: zk_states(zk, "single").get(TopicPartition("single", 0)), what="single's partition")
    cluster.kill_broker(victim)
    wait_until(lambda: all(victim not in s.isr for s in zk_states(zk, "t").values())
               and zk_states(zk, "single")[TopicPartition("single", 0)].leader == -1, what="ISR shrink")
    for topic, update in (("t", lambda s: {"isr": s.isr + [victim]}),  # as if no controller had seen the death
                          ("single", lambda s: {"leader": victim})):
        for tp, s in zk_states(zk, topic).items():
            zk.kazoo.set(zkdata.partition_state_path(tp), s.model_copy(update=update(s)).encode(),
                         version=zk.get(zkdata.partition_state_path(tp))[1].version)
    cluster.kill_controller(controller.id)
    cluster.wait_for_controller(zk, min_epoch=controller.epoch + 1, timeout=60)
    wait_until(lambda: all(victim not in s.isr for s in zk_states(zk, "t").values()), timeout=20,
               what="the new controller to take the dead broker out of the ISRs")
    wait_until(lambda: zk_states(zk, "single")[TopicPartition("single", 0)].leader == -1, timeout=20,
               what="the dead broker's only partition offline, with leader -1")
    assert zk_states(zk, "single")[TopicPartition("single", 0)].isr == [victim]  # the last ISR member stays
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "t"), what="caches to converge")


def test_auto_leader_rebalance(new_cluster):
    cluster, zk = new_cluster(leader_imbalance_check_interval_seconds=1)
    create_topic_and_wait(cluster, zk, "t", 3, 3)
    controller_id, _, controller, _ = controller_of(cluster, zk)
    tp = next(tp for tp, s in zk_states(zk, "t").items() if s.leader != controller_id)
    preferred = zk_states(zk, "t")[tp].leader
    bounce(cluster, zk, controller, preferred)
    wait_until(lambda: zk_states(zk, "t")[tp].leader == preferred, timeout=20, what="auto rebalance")


@contextlib.contextmanager
def paused(cluster, broker_ids):
    """SIGSTOP the brokers' processes (their replicas cannot catch up), SIGCONT on the way out."""
    pids = [ray.get(cluster.brokers[b].info.remote())["pid"] for b in broker_ids]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def test_reassignment_full_protocol(new_cluster):
    cluster, zk = new_cluster(broker_ids=(1, 2, 3, 4))
    zk.kazoo.create(zkdata.topic_path("r"), zkdata.TopicZNode.from_assignment({0: [1, 2]}, None).encode())
    tp = TopicPartition("r", 0)
    wait_until(lambda: len(zk_states(zk, "r")) == 1 and caches_match_zookeeper(cluster, zk, "r"))
    epoch0 = zk_states(zk, "r")[tp].leader_epoch
    with paused(cluster, (3, 4)):  # the new replicas cannot catch up: the reassignment waits in phase A
        admin.reassign_partitions(zk, admin.parse_reassignment(
            '{"version":1,"partitions":[{"topic":"r","partition":0,"replicas":[3,4]}]}'))
        # phase A: RS = TRS + ORS, AR and RR persisted; new replicas started; leader epoch bumped
        wait_until(lambda: json.loads(zk.get(zkdata.topic_path("r"))[0]).get("adding_replicas") == {"0": [3, 4]})
        doc = json.loads(zk.get(zkdata.topic_path("r"))[0])
        assert doc["partitions"] == {"0": [3, 4, 1, 2]} and doc["removing_replicas"] == {"0": [1, 2]}
        wait_until(lambda: zk_states(zk, "r")[tp].leader_epoch == epoch0 + 1)
        assert admin.verify_reassignment(zk, admin.parse_reassignment(
            '{"version":1,"partitions":[{"topic":"r","partition":0,"replicas":[3,4]}]}'))[tp].done is False
    wait_until(lambda: all(tp in ray.get(cluster.brokers[b].replicas.remote()) for b in (3, 4)), what="AR started")
    # the new replicas catch up and the leader adds them to the ISR; then phase B: leader from TRS,
    # old replicas removed and deleted, assignment final, znode gone
    wait_until(lambda: zk.get(zkdata.REASSIGN_PARTITIONS) is None, timeout=60, what="reassignment to complete")
    state = zk_states(zk, "r")[tp]
    assert state.leader == 3 and sorted(state.isr) == [3, 4]
    doc = json.loads(zk.get(zkdata.topic_path("r"))[0])
    assert doc["partitions"] == {"0": [3, 4]} and doc.get("adding_replicas", {}) == {} \
        and doc.get("removing_replicas", {}) == {}
    wait_until(lambda: all(tp not in ray.get(cluster.brokers[b].replicas.remote()) for b in (1, 2)),
               what="StopReplica with delete on the removed replicas")
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "r"))
    assert admin.verify_reassignment(zk, admin.parse_reassignment(
        '{"version":1,"partitions":[{"topic":"r","partition":0,"replicas":[3,4]}]}')) == \
        {tp: admin.ReassignmentState(current=[3, 4], target=[3, 4], done=True)}


def test_zombie_controller_is_fenced_and_resigns(new_cluster):
    import os
    import signal

    cluster, zk = new_cluster()
    create_topic_and_wait(cluster, zk, "t", 3, 3)
    old_id, old_epoch = cluster.wait_for_controller(zk)
    zombie = cluster.controller_actor(old_id)
    pid = ray.get(zombie.status.remote())["pid"]
    os.kill(pid, signal.SIGSTOP)  # a GC pause longer than the session timeout
    try:
        new_id, new_epoch = cluster.wait_for_controller(zk, min_epoch=old_epoch + 1, timeout=60)
        wait_until(lambda: all(m["controller_epoch"] == new_epoch
                               for m in ray.get([h.metadata.remote() for h in cluster.brokers.values()])))
        before = zk_states(zk, "t")
        epoch_before = zk.get_controller_epoch()
    finally:
        os.kill(pid, signal.SIGCONT)
    # the zombie wakes up believing it is the controller; whatever it tries is fenced
    answer = ray.get(zombie.elect_leaders.remote(), timeout=60)
    wait_until(lambda: not ray.get(zombie.status.remote())["active"], what="the zombie to resign")
    assert zk_states(zk, "t") == before and zk.get_controller_epoch() == epoch_before
    # refused, or every election failed
    assert answer == Errors.NOT_CONTROLLER or all(isinstance(v, ApiError) for v in answer.values())
    infos = ray.get([h.info.remote() for h in cluster.brokers.values()])
    assert all(i["controller_epoch"] == new_epoch for i in infos)
    assert [b for b in cluster.brokers if ray.get(cluster.controller_actor(b).status.remote())["active"]] == [new_id]


def test_broker_dies_during_reassignment(new_cluster):
    # its own: the killed broker comes back with its removed replica's log, a stray that stays on its
    # disk (as in Kafka 2.8: no LeaderAndIsr names it, so no StopReplica deletes it)
    cluster, zk = new_cluster(broker_ids=(1, 2, 3, 4), own=True)
    zk.kazoo.create(zkdata.topic_path("r"), zkdata.TopicZNode.from_assignment({0: [1, 2]}, None).encode())
    tp = TopicPartition("r", 0)
    wait_until(lambda: len(zk_states(zk, "r")) == 1 and caches_match_zookeeper(cluster, zk, "r"))
    controller_id, _ = cluster.wait_for_controller(zk)
    victim = 1 if controller_id != 1 else 2  # the old leader (or its follower), not the controller's broker
    with paused(cluster, (3, 4)):  # the new replicas cannot catch up: the reassignment waits in phase A
        admin.reassign_partitions(zk, admin.parse_reassignment(
            '{"version":1,"partitions":[{"topic":"r","partition":0,"replicas":[3,4]}]}'))
        wait_until(lambda: json.loads(zk.get(zkdata.topic_path("r"))[0]).get("adding_replicas") == {"0": [3, 4]})
        cluster.kill_broker(victim)
        wait_until(lambda: zk_states(zk, "r")[tp].leader not in (victim, -1)
                   and victim not in zk_states(zk, "r")[tp].isr, what="failover of the reassigning partition")
    # the new replicas catch up and the leader adds them to the ISR; the reassignment then completes
    wait_until(lambda: zk.get(zkdata.REASSIGN_PARTITIONS) is None, timeout=60, what="reassignment to complete")
    state = zk_states(zk, "r")[tp]
    assert state.leader == 3 and sorted(state.isr) == [3, 4]
    assert json.loads(zk.get(zkdata.topic_path("r"))[0])["partitions"] == {"0": [3, 4]}
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "r"))


def test_controller_dies_in_the_middle_of_a_topic_deletion(new_cluster):
    cluster, zk = new_cluster()
    create_topic_and_wait(cluster, zk, "t", 3, 3)
    controller_id, epoch, controller, victim = controller_of(cluster, zk)
    cluster.kill_broker(victim)  # halts the deletion until it returns
    wait_until(lambda: victim not in ray.get(controller.status.remote())["live_brokers"])
    admin.delete_topic(zk, "t")
    wait_until(lambda: ray.get(controller.status.remote())["topics_to_be_deleted"] == ["t"])
    cluster.kill_controller(controller_id)
    new_id, _ = cluster.wait_for_controller(zk, min_epoch=epoch + 1, timeout=60)
    assert ray.get(cluster.controller_actor(new_id).status.remote())["topics_to_be_deleted"] == ["t"]
    assert "t" in zk.get_all_topics()  # the new controller resumed the deletion, halted on the dead broker
    cluster.start_broker(victim)
    wait_until(lambda: "t" not in zk.get_all_topics(), timeout=90, what="the new controller to finish the deletion")
    assert zk.get(zkdata.delete_topic_path("t")) is None

    def gone_from_brokers():
        caches = ray.get([h.metadata.remote() for h in cluster.brokers.values()])
        replicas = ray.get([h.replicas.remote() for h in cluster.brokers.values()])
        return (all(tp.topic != "t" for c in caches for tp in c["partitions"])
                and all(tp.topic != "t" for r in replicas for tp in r))
    wait_until(gone_from_brokers, timeout=30, what="every broker to drop the topic")


def test_controller_metrics_are_exported_with_kafka_names(new_cluster):
    """A scrape of the Ray node shows the controller's metrics under jmx_exporter's names for Kafka's
    MBeans behind Ray's `ray_` (README, "Metrics"): the KafkaController gauges with a topic halted in
    deletion, the ControllerState and per-state timers (a broker failure is timed as Kafka's
    LeaderElectionRateAndTimeMs), the inbox, and the RequestSenders' queues per broker."""
    import urllib.request

    cluster, zk = new_cluster()
    admin.create_topic(zk, "m", 5, 2)
    admin.create_topic(zk, "doomed", 3, 3)
    wait_until(lambda: len(zk_states(zk, "m")) == 5 and len(zk_states(zk, "doomed")) == 3)
    controller = controller_of(cluster, zk)
    cluster.kill_broker(controller.other_broker)  # for good: the deletion below halts on its replicas
    wait_until(lambda: all(controller.other_broker not in s.isr for s in zk_states(zk, "doomed").values()),
               what="the broker failure handled")
    admin.delete_topic(zk, "doomed")
    namespace = cluster.config.namespace

    def scraped():
        body = urllib.request.urlopen(f"http://127.0.0.1:{ray.metrics_export_port}/metrics", timeout=5).read().decode()
        values = {}
        for line in body.splitlines():
            if line.startswith("ray_kafka_controller_") and f'cluster="{namespace}"' in line \
                    and f'broker="{controller.id}"' in line:
                name = line.split("{")[0]
                broker = re.search(r'brokerId="(\d+)"', line)
                values[f"{name}[{broker.group(1)}]" if broker else name] = float(line.rsplit(" ", 1)[1])
        return values
    gauge = "ray_kafka_controller_kafkacontroller_"
    values = wait_until(lambda: (v := scraped()).get(gauge + "topicstodeletecount") == 1
                        and v.get(gauge + "replicastodeletecount") == 3 and v, timeout=60,
                        what="metrics export, the live brokers' replicas of the doomed topic deleted")
    assert values[gauge + "activecontrollercount"] == 1
    assert values[gauge + "globaltopiccount"] == 2  # the doomed topic stays until its last replica is deleted
    assert values[gauge + "globalpartitioncount"] == 5  # its partitions are NonExistent already
    assert values[gauge + "offlinepartitionscount"] == 0
    assert values[gauge + "topicsineligibletodeletecount"] == 1
    # the dead broker's three replicas were ineligible until the others' deletion answered: then, as Kafka's
    # resumeDeletions, they went back to OfflineReplica to be retried (the topic stays ineligible)
    assert values[gauge + "replicasineligibletodeletecount"] == 0
    assert gauge + "controllerstate" in values
    assert values["ray_kafka_controller_controllerstats_leaderelectionrateandtimems_count"] >= 1
    assert values["ray_kafka_controller_controllerstats_topicdeletionrateandtimems_count"] >= 1
    assert values["ray_kafka_controller_controllerstats_controllerchangerateandtimems_count"] >= 1
    assert "ray_kafka_controller_controllereventmanager_eventqueuesize" in values
    assert values["ray_kafka_controller_controllereventmanager_eventqueuetimems_count"] >= 1
    live = set(cluster.brokers) - {controller.other_broker}
    assert {f"ray_kafka_controller_controllerchannelmanager_queuesize[{b}]" for b in live} <= set(values)
    assert "ray_kafka_controller_controllerchannelmanager_totalqueuesize" in values


def test_failover_timelines_are_recorded(new_cluster):
    cluster, zk = new_cluster(own=True)  # the timelines of its controller's first epoch, one broker failure
    create_topic_and_wait(cluster, zk, "t", 6, 3)
    controller_id, _, controller, victim = controller_of(cluster, zk)
    led = sum(1 for s in zk_states(zk, "t").values() if s.leader == victim)
    cluster.kill_broker(victim)

    def broker_failures():
        return [t for t in ray.get(controller.timelines.remote())
                if t["kind"] == "broker_failure" and t["requests_acked_ms"] is not None]
    (t,) = wait_until(broker_failures, what="a completed broker-failure timeline")
    assert t["brokers"] == [victim] and t["partitions_total"] == 6 and t["live_brokers"] == 2
    assert t["partitions_affected"] == 6  # `led` elections plus 6 - `led` ISR shrinks
    assert led > 0 and t["requests"] >= 2
    assert t["detected_ms"] <= t["processing_started_ms"] <= t["zk_written_ms"] <= t["requests_sent_ms"] \
        <= t["requests_acked_ms"]
    failovers = [x for x in ray.get(controller.timelines.remote()) if x["kind"] == "controller_failover"]
    assert failovers and failovers[0]["requests_acked_ms"] is not None and failovers[0]["epoch"] == 1


def test_a_new_controller_builds_its_context_from_its_warm_standby_copy_and_acts_on_it(new_cluster):
    """The candidates hold every assignment and state while they wait; the winner reads none of them
    again when none changed, and its context is right: it handles the next broker failure as a
    controller that read them all would."""
    cluster, zk = new_cluster(warm_standby_enable=True, warm_standby_refresh_ms=200)
    create_topic_and_wait(cluster, zk, "t", 6, 3)
    controller = controller_of(cluster, zk)
    standbys = [cluster.controller_actor(b) for b in cluster.brokers if b != controller.id]
    # a round that read the topic's 6 assignments may have run before the controller wrote their states:
    # both standbys must have had a round since the last state was written
    written = max(zk.kazoo.get(zkdata.partition_state_path(TopicPartition("t", p)))[1].mzxid for p in range(6))
    wait_until(lambda: all((w := ray.get(a.status.remote())["warm_standby"] or {}).get("partitions") == 6
                           and w.get("as_of_zxid", -1) >= written for a in standbys),
               what="both standbys to hold the topic's 6 partitions and their states")
    cluster.kill_controller(controller.id)
    new_id, _ = cluster.wait_for_controller(zk, min_epoch=controller.epoch + 1, timeout=60)
    status = ray.get(cluster.controller_actor(new_id).status.remote())
    warm = status["warm_standby"]
    assert warm["active"] and (warm["topics"], warm["partitions"]) == (1, 6)
    assert (warm["topics_read"], warm["states_read"]) == (0, 0)  # nothing changed since its last round
    assert status["partitions"] == 6 and status["offline_partitions"] == 0
    victim = next(b for b in cluster.brokers if b != new_id)
    before = zk_states(zk, "t")
    cluster.kill_broker(victim)
    wait_until(lambda: all(victim not in s.isr and s.leader != victim for s in zk_states(zk, "t").values()),
               what="the dead broker's leaderships moved and its replicas out of every ISR")
    assert all(s.leader_epoch == before[tp].leader_epoch + 1 for tp, s in zk_states(zk, "t").items())
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "t"), what="caches to converge")
