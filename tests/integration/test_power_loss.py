"""A follower that lost its unflushed log, back, and the leader of its partitions killed as it returns
(real ZooKeeper, real Ray, a real Kafka client). Kafka survives this sequence: the returning broker
joins an ISR only through its own fetches, so it cannot be elected with an empty log."""
from __future__ import annotations

import time

import ray

from actors.clients.producer import Producer
from actors.links.faults import HEALTHY, Direction, LinkFault, broker_link
from coordination import zkdata
from coordination.zkdata import TopicPartition
from jobs.experiments.chaos import Chaos
from jobs.measures.rundir import FaultKind
from tests.integration.conftest import caches_match_zookeeper, read_all, wait_until, zk_states
from tests.integration.test_replication import FAST

TOPIC = "power"


def create_topic_with_assignment(zk, topic: str, assignment: dict[int, list[int]]) -> None:
    """As `kafka-topics --create --replica-assignment`: the topic znode with the replicas given."""
    txn = zk.kazoo.transaction()
    txn.create(zkdata.topic_config_path(topic), zkdata.TopicConfigZNode(config={}).encode())
    txn.create(zkdata.topic_path(topic), zkdata.TopicZNode.from_assignment(assignment, zkdata.new_topic_id()).encode())
    assert not [r for r in txn.commit() if isinstance(r, Exception)]


def test_a_follower_that_lost_its_log_is_not_taken_into_an_isr_before_it_fetches_nor_elected(new_cluster):
    """Issue 28's sequence, with the window made certain: broker `victim` loses every unflushed byte
    (SIGKILL, logs cut back to their recovery points, here empty), and returns with its replication
    links cut, so that it cannot fetch. The leader of its partition [leader, victim, controller] hears
    that it is back, and is killed then. The controller must elect `controller`, the only replica with
    the records, and no acknowledged record may be lost."""
    cluster, zk = new_cluster(broker=FAST, link_faults=True, auto_leader_rebalance_enable=False)
    controller = zk.get_controller_id()
    leader, victim = [b for b in sorted(cluster.brokers) if b != controller]
    assignment = {0: [leader, victim, controller], 1: [controller, victim, leader], 2: [leader, controller, victim]}
    create_topic_with_assignment(zk, TOPIC, assignment)
    partitions = [TopicPartition(TOPIC, p) for p in assignment]
    wait_until(lambda: len(zk_states(zk, TOPIC)) == 3
               and all(len(s.isr) == 3 for s in zk_states(zk, TOPIC).values()), what="the topic fully replicated")
    cluster.wait_for_metadata(lambda m: all(m["partitions"].get(tp, (-1,))[0] >= 0 for tp in partitions))
    producer = Producer(cluster.bootstrap_servers(), acks=-1)
    acked = []
    for tp in partitions:  # acks=all with the whole assignment in the ISR: on all three brokers
        values = [f"{tp.partition}-{i}".encode() for i in range(20)]
        acked += [(tp, m.offset, v) for m, v in zip(producer.send(TOPIC, values, partition=tp.partition), values)]

    _, damages = Chaos(cluster, zk).disk_fault(FaultKind.LOSE_UNFLUSHED_TAIL, victim)
    cut_back = {d.partition: d.offsets[0] for d in damages}
    assert cut_back.get(f"{TOPIC}-0") == 0, f"the victim's log of {TOPIC}-0 was not emptied: {damages}"
    wait_until(lambda: victim not in zk_states(zk, TOPIC)[partitions[0]].isr, timeout=30,
               what="the controller to take the dead victim out of the ISR")

    held = {broker_link(leader): LinkFault(cut=True), broker_link(controller): LinkFault(cut=True)}
    cluster.start_broker(victim, links_at_start=held)  # registered, and no fetch of it reaches a leader
    wait_until(lambda: victim in ray.get(cluster.brokers[leader].metadata.remote())["brokers"], timeout=30,
               what="the leader to hear that the victim is back")
    # the old code wrote the victim into the ISR within 0.27-0.51 s of this, and once the controller had
    # told every broker, elected it: wait as long, and for the controller
    time.sleep(1.0)
    wait_until(lambda: caches_match_zookeeper(cluster, zk, TOPIC), what="the controller to tell every ISR")
    isr_at_kill = zk_states(zk, TOPIC)[partitions[0]].isr
    cluster.kill_broker(leader)
    wait_until(lambda: zk_states(zk, TOPIC)[partitions[0]].leader not in (-1, leader), timeout=30,
               what=f"a new leader of {TOPIC}-0")
    elected = zk_states(zk, TOPIC)[partitions[0]].leader

    victim_actor = cluster.brokers[victim]
    ray.get([victim_actor.set_link_fault.remote(link, d, HEALTHY) for link in held for d in Direction])
    wait_until(lambda: all(set(s.isr) == {controller, victim} for s in zk_states(zk, TOPIC).values()), timeout=60,
               what="the victim caught up and back in every ISR")
    logs = read_all(cluster, partitions)
    in_log = {(tp, r.offset): r.value for tp, records in logs.items() for r in records}
    lost = [(tp, offset, value) for tp, offset, value in acked if in_log.get((tp, offset)) != value]
    assert victim not in isr_at_kill, f"the victim was in the ISR {isr_at_kill} before it fetched anything"
    assert elected == controller and lost == [], \
        f"broker {elected} elected; {len(lost)} of {len(acked)} acknowledged records lost, e.g. {lost[:3]}"
