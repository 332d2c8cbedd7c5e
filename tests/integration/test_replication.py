"""The replication data plane end to end: produce, fetch, failover, ISR, truncation (real ZooKeeper, real Ray)."""
from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest
import ray

from actors.broker.log.batches import decode_records
from actors.clients.consumer import ConsumedRecord, Consumer
from actors.clients.producer import Producer
from actors.config import BrokerConfig
from coordination import admin
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from tests.integration.conftest import (
    AckedLoad,
    fetch_request,
    produce_request,
    produced,
    read_all,
    send_to,
    wait_until,
    zk_states,
)

FAST = BrokerConfig(min_insync_replicas=2, replica_lag_time_max_ms=2000, replica_fetch_wait_max_ms=200,
                    isr_change_propagation_interval_ms=200, replica_fetch_backoff_ms=200)
# a follower paused for seconds stays in the ISR (Kafka's default lag, 30 s)
PATIENT = FAST.model_copy(update={"replica_lag_time_max_ms": 30_000})
# the topic's own min.insync.replicas where a test needs 1: the module's clusters are shared by their settings
MIN_ISR_1 = {"min.insync.replicas": "1"}


def one_partition_topic(cluster, zk, replication_factor: int = 3, config: dict[str, str] | None = None):
    """Topic t with one partition, in every broker's cache; (its TopicPartition, its state in ZooKeeper)."""
    admin.create_topic(zk, "t", 1, replication_factor, config)
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 1)
    tp = TopicPartition("t", 0)
    return tp, zk_states(zk, "t")[tp]


def test_acks_all_survives_the_leaders_death_without_losing_or_duplicating(new_cluster):
    cluster, zk = new_cluster(broker=FAST)
    admin.create_topic(zk, "orders", 3, 3)
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 3)
    partitions = [TopicPartition("orders", p) for p in range(3)]
    live = Consumer(cluster.bootstrap_servers(), max_wait_ms=100)
    live.assign(partitions)
    seen: dict[TopicPartition, list[ConsumedRecord]] = {tp: [] for tp in partitions}
    caught_up = threading.Event()

    def consume() -> None:  # one consumer all along: it has to follow the leader change
        while not caught_up.is_set():
            for tp, r in live.poll():
                seen[tp].append(r)

    consumer = threading.Thread(target=consume)
    consumer.start()
    load = AckedLoad(cluster, "orders", batch=30)
    wait_until(lambda: len(load.acked) > 300, what="records acknowledged before the fault")
    victim = ray.get(cluster.brokers[1].metadata.remote())["partitions"][TopicPartition("orders", 0)][0]
    before = len(load.acked)
    cluster.kill_broker(victim)  # SIGKILL: its session lingers until it times out, then the controller elects
    wait_until(lambda: len(load.acked) > before + 600, timeout=60, what="records acknowledged after the failover")
    load.stop()

    logs = read_all(cluster, partitions)
    try:
        wait_until(lambda: all(len(seen[tp]) >= len(logs[tp]) for tp in partitions), timeout=30,
                   what="the live consumer to catch up")
    finally:
        caught_up.set()
        consumer.join(30)
        live.close()
    assert {tp: [(r.offset, r.value) for r in rs] for tp, rs in seen.items()} == \
        {tp: [(r.offset, r.value) for r in rs] for tp, rs in logs.items()}
    in_log = {(tp, r.offset): r.value for tp, records in logs.items() for r in records}
    for tp, offset, value in load.acked:  # every acknowledged record is there, where its acknowledgement said
        assert in_log.get((tp, offset)) == value, f"acknowledged {value!r} at {tp}@{offset} is missing"
    values = [r.value for records in logs.values() for r in records]
    assert len(values) == len(set(values)), "a record was written twice"
    for tp, records in logs.items():  # offsets are dense and acknowledged records in send order
        assert [r.offset for r in records] == list(range(len(records)))
        sent = [int(v[1:]) for t, _, v in load.acked if t == tp]
        assert sent == sorted(sent)


def test_produce_to_a_follower_is_refused_and_consumers_read_below_the_high_watermark(new_cluster):
    cluster, zk = new_cluster(broker=FAST)
    tp, state = one_partition_topic(cluster, zk)
    follower = next(b for b in state.isr if b != state.leader)
    assert produced(send_to(cluster, follower, produce_request("t", 0, [b"x"]), 9))[0] == \
        Errors.NOT_LEADER_OR_FOLLOWER
    assert produced(send_to(cluster, follower, produce_request("nope", 0, [b"x"]), 9))[0] == \
        Errors.UNKNOWN_TOPIC_OR_PARTITION
    producer = Producer(cluster.bootstrap_servers(), acks=-1)
    metas = producer.send("t", [f"v{i}".encode() for i in range(10)])
    assert [m.offset for m in metas] == list(range(10))
    logs = read_all(cluster, [tp])
    assert [r.value for r in logs[tp]] == [f"v{i}".encode() for i in range(10)]


def test_isr_shrinks_and_expands_in_zookeeper_and_the_controller_hears_of_it(new_cluster):
    """A follower paused for longer than replica.lag.time.max.ms (but not long enough to lose its
    ZooKeeper session) is dropped from the ISR by its leader, and taken back once it has caught up;
    both changes reach ZooKeeper with the same leader epoch and, through the notifications, every cache."""
    cluster, zk = new_cluster(broker=FAST.model_copy(update={"replica_lag_time_max_ms": 600}))
    tp, state = one_partition_topic(cluster, zk)
    follower = next(b for b in state.isr if b != state.leader)
    pid = ray.get(cluster.brokers[follower].info.remote())["pid"]

    def caches_show(isr: list[int]) -> bool:
        return all(sorted(m["partitions"][tp][2]) == sorted(isr)
                   for m in ray.get([h.metadata.remote() for h in cluster.brokers.values()]))

    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: follower not in zk_states(zk, "t")[tp].isr, timeout=2, interval=0.02,
                   what="the leader to shrink the ISR")
    finally:
        os.kill(pid, signal.SIGCONT)
    shrunk = zk_states(zk, "t")[tp]
    assert shrunk.leader == state.leader and shrunk.leader_epoch == state.leader_epoch  # the leader's own write
    Producer(cluster.bootstrap_servers(), acks=1).send("t", [b"a"] * 10)
    wait_until(lambda: sorted(zk_states(zk, "t")[tp].isr) == sorted(state.isr), timeout=30,
               what="the follower back in the ISR")
    assert zk_states(zk, "t")[tp].leader_epoch == state.leader_epoch
    wait_until(lambda: caches_show(state.isr), timeout=30, what="UpdateMetadata after the ISR change notifications")


@pytest.mark.parametrize("acks", [1, -1])
def test_not_enough_replicas(new_cluster, acks):
    cluster, zk = new_cluster(broker=FAST)
    tp, state = one_partition_topic(cluster, zk, replication_factor=2)
    other = next(b for b in state.isr if b != state.leader)
    cluster.kill_broker(other)
    wait_until(lambda: all(m["partitions"][tp][2] == [state.leader]  # the leader's LeaderAndIsr came first
                           for m in ray.get([h.metadata.remote() for h in cluster.brokers.values()])),
               timeout=30, what="the ISR to shrink to the leader")
    response = send_to(cluster, state.leader, produce_request("t", 0, [b"x"], acks=acks), 9)
    expected = Errors.NOT_ENOUGH_REPLICAS if acks == -1 else Errors.NONE
    assert produced(response)[0] == expected


def test_a_returning_old_leader_truncates_what_it_alone_had(new_cluster):
    """The leader appends records (acks=1) that no follower fetched, then dies. A follower takes over
    and gets other records at the same offsets. The old leader, back, truncates its divergent records
    (by leader epoch, found within its fetch: KIP-320), catches up, and once it leads again serves
    exactly the new leader's log."""
    cluster, zk = new_cluster(broker=PATIENT)
    tp, state = one_partition_topic(cluster, zk, config=MIN_ISR_1)
    old_leader, followers = state.leader, [b for b in state.isr if b != state.leader]
    producer = Producer(cluster.bootstrap_servers(), acks=-1)
    producer.send("t", [f"shared-{i}".encode() for i in range(5)], partition=0)
    pids = [ray.get(cluster.brokers[b].info.remote())["pid"] for b in followers]
    old_pid = ray.get(cluster.brokers[old_leader].info.remote())["pid"]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(0.6)  # fetches already on their way to the leader come back empty meanwhile
        alone = send_to(cluster, old_leader, produce_request("t", 0, [f"lost-{i}".encode() for i in range(3)]), 9)
        assert produced(alone) == (Errors.NONE, 5)
        cluster.kill_broker(old_leader)  # for good: back only after a follower took over
        wait_until(lambda: not process_alive(old_pid), what="the old leader's process to be gone")  # before any
    finally:  # follower runs again and could fetch the records it alone has
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    wait_until(lambda: zk_states(zk, "t")[tp].leader in followers, timeout=30, what="a follower to take over")
    new_leader = zk_states(zk, "t")[tp].leader
    Producer(cluster.bootstrap_servers(), acks=-1).send("t", [f"new-{i}".encode() for i in range(4)], partition=0)
    expected = [f"shared-{i}".encode() for i in range(5)] + [f"new-{i}".encode() for i in range(4)]
    assert [r.value for r in read_all(cluster, [tp])[tp]] == expected
    cluster.start_broker(old_leader)
    wait_until(lambda: old_leader in zk_states(zk, "t")[tp].isr, timeout=60, what="the old leader back in the ISR")
    admin.preferred_replica_election(zk, [tp])
    wait_until(lambda: zk_states(zk, "t")[tp].leader == old_leader, timeout=30, what="the old leader leading again")
    wait_until(lambda: [r.value for r in read_all(cluster, [tp])[tp]] == expected, timeout=30,
               what="the old leader's log to equal the new leader's")
    # every replica had a leader epoch: each truncation was found within a fetch, none asked first
    assert ray.get(cluster.brokers[new_leader].info.remote())["requests"].get("OffsetForLeaderEpoch", 0) == 0


def test_a_corrupted_segment_is_recovered_and_refilled_from_the_leader(new_cluster):
    """A broker's segment is damaged while it is down: on restart its log is truncated at the first bad
    record, the rest comes again from the new leader, and once it leads again it serves every record."""
    cluster, zk = new_cluster(broker=FAST)
    tp, state = one_partition_topic(cluster, zk, config=MIN_ISR_1)
    victim = state.leader
    values = [f"v{i}".encode() for i in range(20)]
    Producer(cluster.bootstrap_servers(), acks=-1).send("t", values, partition=0)
    cluster.kill_broker(victim)
    segment = cluster.config.log_dir(victim) / "t-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside one of the batches
    segment.write_bytes(bytes(data))
    wait_until(lambda: zk_states(zk, "t")[tp].leader not in (victim, -1), timeout=30, what="a new leader")
    cluster.start_broker(victim)
    wait_until(lambda: victim in zk_states(zk, "t")[tp].isr, timeout=60, what="the recovered broker back in the ISR")
    admin.preferred_replica_election(zk, [tp])
    wait_until(lambda: zk_states(zk, "t")[tp].leader == victim, timeout=30, what="the recovered broker leading")
    wait_until(lambda: [r.value for r in read_all(cluster, [tp])[tp]] == values, timeout=30,
               what="every record from the recovered broker")


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def consumer_fetch(cluster, broker: int, offset: int, version: int = 12):
    """A consumer's fetch of t-0 from one broker: (error, high watermark, log start, records)."""
    p = send_to(cluster, broker, fetch_request("t", 0, offset), version).responses[0].partitions[0]
    return p.error_code, p.high_watermark, p.log_start_offset, decode_records(p.records or b"")


def test_high_watermark_semantics_for_consumers(new_cluster):
    """Records the followers do not have yet sit between the HW and the log end: a consumer asking for
    them gets nothing (no error) until the followers fetch; beyond the log end is OFFSET_OUT_OF_RANGE."""
    cluster, zk = new_cluster(broker=FAST)
    _, state = one_partition_topic(cluster, zk, config=MIN_ISR_1)
    Producer(cluster.bootstrap_servers(), acks=-1).send("t", [b"a"] * 10, partition=0)
    pids = [ray.get(cluster.brokers[b].info.remote())["pid"] for b in state.isr if b != state.leader]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(0.6)  # in-flight fetches come back empty
        assert produced(send_to(cluster, state.leader, produce_request("t", 0, [b"b"] * 3), 9)) == (Errors.NONE, 10)
        error, high_watermark, _, records = consumer_fetch(cluster, state.leader, 10)
        assert (error, high_watermark, len(records)) == (Errors.NONE, 10, 0)
        assert consumer_fetch(cluster, state.leader, 14)[0] == Errors.OFFSET_OUT_OF_RANGE
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    wait_until(lambda: len(consumer_fetch(cluster, state.leader, 10)[3]) == 3, what="the HW to pass them")


def test_a_consumers_fetch_v11_is_served_by_a_follower_up_to_its_high_watermark(new_cluster):
    """Kafka 2.8's fetchOnlyFromLeader: a consumer's Fetch v11 (kafka-python's classes on the wire) is
    answered by a follower from its own log, below its own high watermark; a Fetch v10 only by the
    leader."""
    cluster, zk = new_cluster(broker=FAST)
    _, state = one_partition_topic(cluster, zk)
    follower = next(b for b in state.isr if b != state.leader)
    Producer(cluster.bootstrap_servers(), acks=-1).send("t", [f"v{i}".encode() for i in range(10)], partition=0)
    wait_until(lambda: consumer_fetch(cluster, follower, 0, version=11)[1] == 10, what="the follower's HW at 10")
    error, high_watermark, _, records = consumer_fetch(cluster, follower, 0, version=11)
    assert (error, high_watermark) == (Errors.NONE, 10)
    assert [r.value for r in records] == [f"v{i}".encode() for i in range(10)]
    assert consumer_fetch(cluster, follower, 0, version=10)[0] == Errors.NOT_LEADER_OR_FOLLOWER


def test_produces_waiting_for_acks_all_cost_no_thread(new_cluster):
    """80 acks=all produces on 80 connections wait for a paused follower: the controller's requests, a
    consumer's fetch and the metadata still get answered at once (Kafka's purgatory; waiting requests
    hold no thread), and every produce completes once the follower is back."""
    cluster, zk = new_cluster(broker=PATIENT)
    tp, state = one_partition_topic(cluster, zk)
    leader = cluster.brokers[state.leader]
    host, port = ray.get(leader.listener.remote())
    follower = next(b for b in state.isr if b != state.leader)
    pid = ray.get(cluster.brokers[follower].info.remote())["pid"]
    os.kill(pid, signal.SIGSTOP)  # in the ISR still (replica.lag.time.max.ms is 30 s): acks=all waits

    async def waiting_produces():
        from actors.broker.network.network import NetworkClient

        clients = [NetworkClient() for _ in range(80)]
        for c in clients:
            await c.connect(host, port, "kray-test")
        sends = [asyncio.ensure_future(c.send(produce_request("t", 0, [f"r{i}".encode()], acks=-1, timeout_ms=60_000),
                                              9)) for i, c in enumerate(clients)]
        await asyncio.sleep(1)
        assert not any(s.done() for s in sends)  # every produce still waits
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, check_the_broker_answers)
        os.kill(pid, signal.SIGCONT)
        responses = await asyncio.wait_for(asyncio.gather(*sends), 60)
        for c in clients:
            c.close()
        return responses

    def check_the_broker_answers() -> None:
        assert ray.get(leader.metadata.remote(), timeout=10)["partitions"][tp][0] == state.leader
        assert consumer_fetch(cluster, state.leader, 0)[0] == Errors.NONE
        admin.create_topic(zk, "u", 3, 1)  # the controller's LeaderAndIsr and UpdateMetadata get through
        wait_until(lambda: sum(p.topic == "u" for p in ray.get(leader.metadata.remote())["partitions"]) == 3,
                   timeout=10, what="the new topic in the leader's metadata cache")

    try:
        responses = asyncio.run(waiting_produces())
    finally:
        os.kill(pid, signal.SIGCONT)
    assert all(produced(r)[0] == Errors.NONE for r in responses)
    assert sorted(produced(r)[1] for r in responses) == list(range(80))
