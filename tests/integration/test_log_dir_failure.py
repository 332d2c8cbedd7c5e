"""KIP-112 on a real cluster: a log directory fails under a running broker (a real I/O error: the
directory is replaced by a file), the broker tells the controller through /log_dir_event_notification,
and the controller moves the leaderships of that directory's replicas only, while acks=all produce
goes on and the broker's other directory keeps serving."""
from __future__ import annotations

from pathlib import Path

import ray

from actors.config import BrokerConfig
from coordination import zkdata
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from jobs.experiments.chaos import Chaos
from tests.integration.conftest import (
    AckedLoad,
    caches_match_zookeeper,
    create_topic_and_wait,
    produce_request,
    produced,
    send_to,
    wait_until,
    zk_states,
)

TOPIC, PARTITIONS = "kip112", 6


def test_a_failed_log_dir_moves_its_leaderships_only_and_the_broker_serves_from_the_other(new_cluster):
    # its own: the failed log dir stays failed (an offline dir comes back only with its broker's restart)
    cluster, zk = new_cluster(broker=BrokerConfig(log_dirs_per_broker=2, min_insync_replicas=2,
                                                  replica_high_watermark_checkpoint_interval_ms=200), own=True)
    create_topic_and_wait(cluster, zk, TOPIC, PARTITIONS, 3)
    victim = 1
    info = ray.get(cluster.brokers[victim].info.remote())
    kept, failing = (Path(d) for d in info["log_dirs"])  # log dir 1 fails
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    load = AckedLoad(cluster, TOPIC)
    try:
        # a log's directory is made at its first record: every partition written before looking
        wait_until(lambda: len(load.acked) >= 50 and {tp for tp, _, _ in load.acked} == set(tps),
                   what="acks=all load under way on every partition")
        on_failing = {tp for tp in tps if (failing / f"{tp.topic}-{tp.partition}").is_dir()}
        on_kept = {tp for tp in tps if (kept / f"{tp.topic}-{tp.partition}").is_dir()}
        assert len(on_failing) == len(on_kept) == PARTITIONS // 2  # the dir with the fewest logs, in turn
        before = zk_states(zk, TOPIC)
        assert any(before[tp].leader == victim for tp in on_failing) and \
            any(before[tp].leader == victim for tp in on_kept)
        # a child created and deleted within a watch's re-read escapes a ChildrenWatch (the controller
        # consumes a notification in milliseconds): the parent's cversion counts every creation and deletion
        children_changes = zk.kazoo.exists(zkdata.LOG_DIR_EVENT_NOTIFICATION).cversion
        Chaos(cluster, zk).fail_log_dir(victim)  # its last dir, `failing`
        failed_at = len(load.acked)

        wait_until(lambda: all(victim not in s.isr and s.leader != victim
                               for tp, s in zk_states(zk, TOPIC).items() if tp in on_failing),
                   what="the failed dir's partitions led elsewhere, the broker out of their ISRs")
        wait_until(lambda: zk.children(zkdata.LOG_DIR_EVENT_NOTIFICATION) == [], what="the notification consumed")
        assert zk.kazoo.exists(zkdata.LOG_DIR_EVENT_NOTIFICATION).cversion >= children_changes + 2  # made, consumed
        after = zk_states(zk, TOPIC)
        for tp in on_kept:  # the other dir's replicas: untouched
            assert (after[tp].leader, after[tp].isr) == (before[tp].leader, before[tp].isr)
        for tp in on_failing:
            assert after[tp].isr == [r for r in before[tp].isr if r != victim]
        assert victim in zk.get_all_broker_ids()  # the broker lives
        assert ray.get(cluster.brokers[victim].info.remote())["offline_log_dirs"] == [str(failing)]

        # acks=all goes on through the new leaders, on every partition
        wait_until(lambda: {tp for tp, _, _ in load.acked[failed_at:]} == set(tps) and len(load.acked) > failed_at + 200,
                   what="acks=all produce on every partition after the failure")
        wait_until(lambda: caches_match_zookeeper(cluster, zk, TOPIC), what="caches to converge")
        assert ray.get(cluster.brokers[2].metadata.remote())["brokers"] == sorted(cluster.brokers)
    finally:
        load.stop()
    assert load.lost(cluster, PARTITIONS) == []

    # the broker answers for its dirs: the failed one's partitions KAFKA_STORAGE_ERROR, the kept one's served
    led_on_kept = next(tp for tp in on_kept if zk_states(zk, TOPIC)[tp].leader == victim)
    code, _ = produced(send_to(cluster, victim, produce_request(TOPIC, led_on_kept.partition, [b"x"], acks=-1), 9))
    assert code == Errors.NONE
    on_failed = sorted(on_failing)[0]
    code, _ = produced(send_to(cluster, victim, produce_request(TOPIC, on_failed.partition, [b"x"]), 9))
    assert code == Errors.KAFKA_STORAGE_ERROR


def test_the_last_log_dir_failing_stops_the_broker_as_kafka_halts(new_cluster):
    """One log dir: its failure halts the broker (Kafka's LogManager: Exit.halt(1)); to the controller, a
    broker that died. Its restart by Ray fails on the same dir, as a Kafka broker's would."""
    # its own: the halted broker cannot start again on its failed dir
    cluster, zk = new_cluster(broker=BrokerConfig(replica_high_watermark_checkpoint_interval_ms=200), own=True)
    create_topic_and_wait(cluster, zk, TOPIC, 3, 3)
    victim = 1
    pid = ray.get(cluster.brokers[victim].info.remote())["pid"]
    Chaos(cluster, zk).fail_log_dir(victim)  # the broker may halt before it answers: the fault tells it apart
    wait_until(lambda: all(s.leader != victim and victim not in s.isr for s in zk_states(zk, TOPIC).values()),
               what="the halted broker's leaderships moved, it out of the ISRs")
    assert victim not in zk.get_all_broker_ids()
    try:
        alive = ray.get(cluster.brokers[victim].info.remote(), timeout=10)["pid"]
    except Exception:
        alive = None  # dead, or its restart failing on the failed dir
    assert alive != pid


def test_chaos_fails_a_log_dir_then_replaces_the_disk_and_the_broker_comes_back_whole(new_cluster):
    """kray chaos's fail-log-dir and its repair (the runner's order): the broker's replicas on the failed
    dir go offline, then with the dir back and the broker started again they rejoin every ISR."""
    cluster, zk = new_cluster(broker=BrokerConfig(log_dirs_per_broker=2,
                                                  replica_high_watermark_checkpoint_interval_ms=200))
    create_topic_and_wait(cluster, zk, TOPIC, 4, 3)
    chaos, victim = Chaos(cluster, zk), 2
    _, failed = chaos.fail_log_dir(victim)
    wait_until(lambda: sum(victim not in s.isr for s in zk_states(zk, TOPIC).values()) == 2,
               what="the failed dir's two replicas out of their ISRs")
    chaos.repair_log_dir(victim, failed)
    cluster.start_broker(victim)
    wait_until(lambda: all(victim in s.isr for s in zk_states(zk, TOPIC).values()), timeout=60,
               what="the broker back in every ISR")
    info = ray.get(cluster.brokers[victim].info.remote())
    assert info["offline_log_dirs"] == [] and Path(failed["log_dir"]).is_dir()
