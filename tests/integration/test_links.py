"""Link faults on a running cluster (link_faults_enable): a process cut off from ZooKeeper while it
lives, the shape of Jepsen's partitions and of KAFKA-6082's zombie controller."""
from __future__ import annotations

import threading
import time

import confluent_kafka
import pytest
import ray

from actors.clients.producer import Producer, producer_config
from actors.config import BrokerConfig
from actors.links.faults import HEALTHY, ZOOKEEPER_LINK, Direction, LinkFault
from actors.links.shapes import CUT, DROP, LinkSetting, Role, healed
from actors.runtime import poll
from coordination import admin
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from jobs.experiments.chaos import Chaos
from jobs.measures.rundir import FaultKind
from tests.integration.conftest import (
    caches_match_zookeeper,
    produce_request,
    produced,
    read_all,
    send_to,
    zk_states,
)


def active_candidates(cluster) -> dict[int, int]:
    """broker id -> controller epoch of every candidate that says it is the active controller."""
    out = {}
    for b in cluster.brokers:
        status = ray.get(cluster.controller_actor(b).status.remote(), timeout=30)
        if status["active"]:
            out[b] = status["epoch"]
    return out


def one_partition_of_three_replicas(new_cluster):
    """A cluster with links, topic `t` of one partition on all three brokers, a lagging follower shrunk
    out after 1.5 s and min.insync.replicas 2: (cluster, zk, chaos, the partition)."""
    cluster, zk = new_cluster(link_faults=True, broker=BrokerConfig(replica_lag_time_max_ms=1500,
                                                                      min_insync_replicas=2))
    admin.create_topic(zk, "t", 1, 3)
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 1)
    return cluster, zk, Chaos(cluster, zk), TopicPartition("t", 0)


def test_a_controller_cut_off_from_zookeeper_is_replaced_and_fenced_and_steps_down_when_healed(new_cluster):
    """Only the controller's ZooKeeper link is cut: its process lives and still reaches the brokers.
    ZooKeeper expires its session, another candidate wins a newer epoch, brokers follow the newer
    epoch; when the link heals the old controller finds its session gone and steps down."""
    cluster, zk = new_cluster(link_faults=True)
    chaos = Chaos(cluster, zk)
    admin.create_topic(zk, "t", 6, 3)
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 6)
    old, old_epoch = cluster.wait_for_controller(zk)

    target, settings, _ = chaos.link_fault(FaultKind.CUT_CONTROLLER_ZOOKEEPER)
    assert target == old
    new, new_epoch = cluster.wait_for_controller(zk, min_epoch=old_epoch + 1, timeout=60)
    assert new != old
    assert ray.get(cluster.controller_actor(old).process.remote(), timeout=30)["pid"]  # it lives on, cut off
    cluster.wait_for_metadata(lambda m: m["controller_epoch"] == new_epoch)

    chaos.apply_links(healed(settings))
    poll(lambda: active_candidates(cluster) == {new: new_epoch}, timeout=60, what="one active controller")
    admin.create_topic(zk, "after-heal", 3, 3)  # the cluster works on under the new controller
    cluster.wait_for_metadata(lambda m: sum(tp.topic == "after-heal" for tp in m["partitions"]) == 3)
    assert zk.get_controller_epoch()[0] == new_epoch


def test_a_broker_cut_off_from_zookeeper_loses_its_leaderships_and_registers_again_when_healed(new_cluster):
    """The broker lives and its listener still answers, but its session expires: the controller
    handles it as a failed broker (its leaderships move, it leaves the ISRs); healed, it registers
    with a newer broker epoch and is taken back into every ISR."""
    cluster, zk = new_cluster(link_faults=True)
    chaos = Chaos(cluster, zk)
    admin.create_topic(zk, "t", 6, 3)
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 6)
    controller, _ = cluster.wait_for_controller(zk)
    victim = next(b for b in cluster.brokers if b != controller)
    epoch = ray.get(cluster.brokers[victim].info.remote(), timeout=30)["broker_epoch"]

    _, settings, _ = chaos.link_fault(FaultKind.CUT_BROKER_ZOOKEEPER, victim)
    poll(lambda: all(s.leader != victim and victim not in s.isr for s in zk_states(zk, "t").values()), timeout=60,
         what="the cut-off broker's leaderships and ISR memberships gone")
    assert victim not in zk.get_all_broker_ids()

    chaos.apply_links(healed(settings))
    poll(lambda: ray.get(cluster.brokers[victim].info.remote(), timeout=30)["broker_epoch"] > epoch, timeout=60,
         what="the broker registered again")
    poll(lambda: all(victim in s.isr for s in zk_states(zk, "t").values()), timeout=60,
         what="the broker back in every ISR")


def test_a_follower_cut_off_from_its_leader_leaves_the_isr_and_rejoins_when_healed(new_cluster):
    """Replication only: broker F is cut off from the other brokers (its fetches from the leader L
    stall) while it keeps its ZooKeeper session. L shrinks F out of the ISR after replica.lag.time.max.ms; with
    min.insync.replicas 2 of RF 3 acks=all writes go on; healed, F catches up and is taken back."""
    cluster, zk, chaos, tp = one_partition_of_three_replicas(new_cluster)
    leader = zk_states(zk, "t")[tp].leader
    follower = next(b for b in cluster.brokers if b != leader)
    producer = Producer(cluster.bootstrap_servers(), acks=-1)

    _, settings, _ = chaos.link_fault(FaultKind.CUT_REPLICATION, follower)
    producer.send("t", [b"during"] * 5)  # the leader waits for the cut follower until it shrinks it out
    poll(lambda: follower not in zk_states(zk, "t")[tp].isr, timeout=60, what="the cut follower out of the ISR")
    assert follower in zk.get_all_broker_ids()  # it lives and keeps its session
    producer.send("t", [b"shrunk"] * 5)  # two in the ISR: acks=all goes on

    chaos.apply_links(healed(settings))
    # the leader takes a follower back only once it has caught up to the high watermark
    poll(lambda: follower in zk_states(zk, "t")[tp].isr, timeout=60, what="the follower back in the ISR")


def test_zookeeper_connections_dropped_under_an_event_lose_no_event_no_session_and_move_no_controller(new_cluster):
    """The controller's requests to ZooKeeper are held as a topic is created (its watch's read of the
    topics among them), then its and every broker's ZooKeeper connections are closed and refused for half
    a second: what was in flight is sent again once connected and the watches are set again, so the topic
    comes online under the same controller epoch, every broker keeps its session (broker epoch), and no
    controller event failed. (A write whose answer is lost: tests/integration/test_connection_loss.py.)"""
    cluster, zk = new_cluster(link_faults=True)
    chaos = Chaos(cluster, zk)
    controller, epoch = cluster.wait_for_controller(zk)
    broker_epochs = {b: ray.get(h.info.remote(), timeout=30)["broker_epoch"] for b, h in cluster.brokers.items()}
    sessions = [LinkSetting(Role.CANDIDATE, controller, ZOOKEEPER_LINK, DROP)] + \
        [LinkSetting(Role.BROKER, b, ZOOKEEPER_LINK, DROP) for b in cluster.brokers]
    ray.get(cluster.controller_actor(controller).set_link_fault.remote(ZOOKEEPER_LINK, Direction.FORWARD, CUT),
            timeout=30)  # its requests held; ZooKeeper's watch events still reach it
    admin.create_topic(zk, "t", 30, 3)
    time.sleep(0.5)  # the controller's read of the topics is held
    chaos.apply_links(sessions)
    time.sleep(0.5)
    chaos.apply_links(healed(sessions))
    cluster.wait_for_metadata(lambda m: sum(tp.topic == "t" for tp in m["partitions"]) == 30)
    assert all(s.leader >= 0 for s in zk_states(zk, "t").values())
    assert cluster.wait_for_controller(zk) == (controller, epoch)
    assert {b: ray.get(h.info.remote(), timeout=30)["broker_epoch"] for b, h in cluster.brokers.items()} == \
        broker_epochs
    statuses = {b: ray.get(cluster.controller_actor(b).status.remote(), timeout=30) for b in cluster.brokers}
    assert [s["failed_events"] for s in statuses.values()] == [0] * len(statuses)


def test_a_broker_the_controller_cannot_reach_hears_of_no_change_until_healed(new_cluster):
    """Only the controller's requests to broker N are cut (the RequestSender path): N keeps its
    session and its replication, but a topic created meanwhile reaches every other broker and not N;
    healed, the held requests arrive (Kafka's RequestSendThread retries until answered) and N serves it."""
    cluster, zk = new_cluster(link_faults=True)
    chaos = Chaos(cluster, zk)
    controller, _ = cluster.wait_for_controller(zk)
    victim = next(b for b in cluster.brokers if b != controller)

    def knows(broker_id: int) -> bool:
        cache = ray.get(cluster.brokers[broker_id].metadata.remote(), timeout=30)
        return sum(tp.topic == "during-cut" for tp in cache["partitions"]) == 3

    target, settings, _ = chaos.link_fault(FaultKind.CUT_CONTROLLER_BROKER, victim)
    assert target == victim and [s.link for s in settings] == [f"broker-{controller}"]
    admin.create_topic(zk, "during-cut", 3, 3)
    poll(lambda: all(knows(b) for b in cluster.brokers if b != victim), timeout=60, what="the others to know the topic")
    poll(lambda: all(s.leader != -1 for s in zk_states(zk, "during-cut").values()), timeout=30, what="leaders")
    assert not knows(victim)
    assert victim in zk.get_all_broker_ids()  # not a failed broker: only out of the controller's reach

    chaos.apply_links(healed(settings))
    poll(lambda: knows(victim), timeout=60, what="the held requests to reach the broker")
    producer = Producer(cluster.bootstrap_servers(), acks=-1)  # and it serves as what the controller made it
    assert all(producer.send("during-cut", [f"r{p}".encode()], partition=p)[0].offset == 0 for p in range(3))


def test_a_broker_killed_while_cut_off_comes_back_with_healthy_links_and_the_others_keep_theirs(new_cluster):
    """A link fault lives in the processes that carry it: broker F's new incarnation starts with
    healthy links and fetches again, while the other brokers' links to F stay cut until healed
    (so F, leading nothing, rejoins the ISR; no other broker can fetch from it)."""
    cluster, zk, chaos, tp = one_partition_of_three_replicas(new_cluster)
    controller, _ = cluster.wait_for_controller(zk)
    leader = zk_states(zk, "t")[tp].leader
    follower = next(b for b in cluster.brokers if b not in (leader, controller))
    producer = Producer(cluster.bootstrap_servers(), acks=-1)

    _, settings, _ = chaos.link_fault(FaultKind.CUT_REPLICATION, follower)
    producer.send("t", [b"during"] * 5)
    poll(lambda: follower not in zk_states(zk, "t")[tp].isr, timeout=60, what="the cut follower out of the ISR")
    cluster.kill_broker(follower)
    cluster.start_broker(follower)

    def links(broker_id: int) -> dict:  # set_link_fault answers every link's faults; a healthy link set healthy
        return ray.get(cluster.brokers[broker_id].set_link_fault.remote(
            "zookeeper", Direction.FORWARD, HEALTHY), timeout=30)
    assert all(fault == HEALTHY for faults in links(follower).values() for fault in faults.values())
    assert links(leader)[f"broker-{follower}"] == {"forward": CUT, "backward": CUT}
    producer.send("t", [b"back"] * 5)
    poll(lambda: follower in zk_states(zk, "t")[tp].isr, timeout=60, what="the new incarnation back in the ISR")

    chaos.apply_links(healed(settings))
    assert links(leader)[f"broker-{follower}"] == {"forward": HEALTHY, "backward": HEALTHY}


def test_clients_cut_off_from_a_leader_wait_while_it_leads_and_replicates_and_are_answered_when_healed(new_cluster):
    """Only the clients' link to broker L is cut (its PLAINTEXT listener, advertised through link
    `clients`): L keeps its session, its leaderships and its replication, which runs on its
    REPLICATION listener. A record for L's partition waits unacknowledged and nothing fails over; a
    record for a partition L follows is acknowledged with min.insync.replicas 3, so L fetched it;
    healed, the waiting record is acknowledged, once. Then slowed, not cut, L's clients wait the delay."""
    cluster, zk = new_cluster(link_faults=True, broker=BrokerConfig(replica_lag_time_max_ms=1500,
                                                                      min_insync_replicas=2))
    chaos = Chaos(cluster, zk)
    admin.create_topic(zk, "t", 3, 3, {"min.insync.replicas": "3"})  # the module's clusters are shared by settings
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 3)
    states = zk_states(zk, "t")
    victim = states[TopicPartition("t", 0)].leader
    led = [tp.partition for tp, s in states.items() if s.leader == victim]
    followed = [tp.partition for tp, s in states.items() if s.leader != victim]
    assert led and followed, states
    registered = zk.get_brokers([victim])[victim][0].listeners()
    assert registered["PLAINTEXT"] == ray.get(cluster.brokers[victim].listener.remote(), timeout=30)
    assert registered["REPLICATION"][1] != registered["PLAINTEXT"][1]

    producer = confluent_kafka.Producer(producer_config(cluster.bootstrap_servers(), -1))
    acked: dict[int, list[int]] = {}

    def send(partition: int) -> None:
        producer.produce("t", b"x", partition=partition, on_delivery=lambda err, msg: acked.setdefault(
            msg.partition(), []).append(msg.offset() if err is None else err.str()))

    for p in range(3):  # connected to every leader before the cut
        send(p)
    assert producer.flush(60) == 0 and all(acked[p] == [0] for p in range(3)), acked

    target, settings, _ = chaos.link_fault(FaultKind.CUT_CLIENTS, victim)
    assert target == victim and [(s.broker_id, s.link) for s in settings] == [(victim, "clients")]
    send(led[0])
    send(followed[0])
    def answered(partition: int) -> int:
        producer.poll(0.1)
        return len(acked[partition])

    poll(lambda: answered(followed[0]) == 2, timeout=30,
         what="the record for a partition the cut broker follows acknowledged")
    assert acked[followed[0]] == [0, 1]
    producer.flush(1)  # the other waits behind the cut
    assert acked[led[0]] == [0] and len(producer) == 1
    cut = zk_states(zk, "t")[TopicPartition("t", led[0])]
    assert cut.leader == victim and len(cut.isr) == 3 and victim in zk.get_all_broker_ids()

    chaos.apply_links(healed(settings))
    assert producer.flush(60) == 0
    assert acked[led[0]] == [0, 1]

    # slow-clients: each direction 400 ms late, so a produce's round trip takes at least 800 ms
    _, settings, _ = chaos.link_fault(FaultKind.SLOW_CLIENTS, victim, LinkFault(delay_ms=400))
    started = time.monotonic()
    send(led[0])
    assert producer.flush(60) == 0 and acked[led[0]] == [0, 1, 2]
    assert time.monotonic() - started >= 0.8
    chaos.apply_links(healed(settings))


class PlainLoad:
    """acks=all records from a producer without idempotence (librdkafka retries them itself, as Kafka's
    producer does), streamed round the partitions from a thread: each record's delivery report kept."""

    def __init__(self, cluster, topic: str, partitions: int):
        self.producer = confluent_kafka.Producer({**producer_config(cluster.bootstrap_servers(), 1), "acks": "all"})
        self.topic, self.partitions = topic, partitions
        self.acked: dict[bytes, tuple[int, int]] = {}  # value -> (partition, offset)
        self.refused: dict[bytes, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="plain-load", daemon=True)
        self._thread.start()

    def _report(self, err, msg) -> None:
        if err is None:
            self.acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            self.refused[msg.value()] = err.name()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            self.producer.produce(self.topic, f"r{n}".encode(), partition=n % self.partitions,
                                  on_delivery=self._report)
            self.producer.poll(0.005)
            n += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(120) == 0


@pytest.mark.parametrize("fault", ["controlled-shutdown", "kill"])
def test_a_leader_whose_isr_write_is_refused_keeps_leading_and_a_plain_producers_records_are_written_once(
        new_cluster, fault):
    """The controller takes follower F out of leader L's ISRs at epoch + 1 (F shut down or died) while
    its LeaderAndIsr to L is held (the controller's link to L cut), so L's own shrink of F, written on
    the zkVersion L has, is refused. As Kafka's leader, L gives the change up and keeps leading: it
    appends, and holds its acks=all produces until the LeaderAndIsr comes, which completes them. Before,
    L stopped leading and failed them with NOT_LEADER_OR_FOLLOWER: a producer without idempotence sent
    them again, and the LeaderAndIsr kept and committed the first copies too (duplicates)."""
    cluster, zk = new_cluster(link_faults=True, broker=BrokerConfig(replica_lag_time_max_ms=1500,
                                                                      min_insync_replicas=2))
    chaos = Chaos(cluster, zk)
    controller, _ = cluster.wait_for_controller(zk)
    leader, follower = [b for b in sorted(cluster.brokers) if b != controller]
    admin.create_topic(zk, "t", 4, 3, assignment={p: [leader, follower, controller] for p in range(4)})
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 4)
    before = zk_states(zk, "t")
    load = PlainLoad(cluster, "t", 4)
    poll(lambda: len(load.acked) > 200, timeout=30, what="the load acknowledged")

    _, settings, _ = chaos.link_fault(FaultKind.CUT_CONTROLLER_BROKER, leader)
    failed = ray.get(cluster.brokers[leader].info.remote(), timeout=30)["failed_isr_updates"]
    if fault == "kill":
        cluster.kill_broker(follower)
    else:
        cluster.controlled_shutdown(follower)
    poll(lambda: all(s.leader_epoch == before[tp].leader_epoch + 1 and follower not in s.isr
                     for tp, s in zk_states(zk, "t").items()), timeout=30, what="the controller's ISR removals")
    poll(lambda: ray.get(cluster.brokers[leader].info.remote(), timeout=30)["failed_isr_updates"] >= failed + 4,
         timeout=30, what="the leader's own shrinks refused")
    probe = produce_request("t", 0, [b"probe"], acks=1)
    assert produced(send_to(cluster, leader, probe, 9))[0] == Errors.NONE  # still the leader

    chaos.apply_links(healed(settings))
    poll(lambda: caches_match_zookeeper(cluster, zk, "t"), timeout=30, what="the held LeaderAndIsr applied")
    acked = len(load.acked)
    poll(lambda: len(load.acked) > acked + 200, timeout=60, what="the load acknowledged after the LeaderAndIsr")
    load.stop()

    resent = Producer(cluster.bootstrap_servers(), acks=-1)  # what was refused, sent again (idempotent)
    for value in load.refused:
        resent.send("t", [value], partition=int(value[1:]) % 4)
    logs = read_all(cluster, [TopicPartition("t", p) for p in range(4)])
    where: dict[bytes, list[tuple[int, int]]] = {}
    for tp, records in logs.items():
        for r in records:
            where.setdefault(r.value, []).append((tp.partition, r.offset))
    assert {v: places for v, places in where.items() if len(places) > 1} == {}  # no record twice
    assert {v: at for v, at in load.acked.items() if where.get(v) != [at]} == {}  # each acknowledged one where said
    assert not set(load.refused) - set(where)  # each refused one in the log once, as resent
