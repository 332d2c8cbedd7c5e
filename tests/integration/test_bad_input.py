"""Bad input against a running cluster: garbage written by hand into every znode kind the controller
and brokers read, and a produce larger than message.max.bytes. Each is skipped and reported or
refused with Kafka's error; nothing else changes, and no actor crashes (README's bad-input table)."""
from __future__ import annotations

import re

import pytest
import ray

from actors.clients.producer import Producer, ProducerError
from coordination import admin, zkdata
from coordination.errors import Errors, KrayError
from coordination.zkdata import TopicPartition
from jobs.experiments.chaos import Chaos
from jobs.measures.rundir import FaultKind
from tests.integration.conftest import (
    assert_as_found,
    caches_match_zookeeper,
    produce_request,
    produced,
    put_back,
    read_all,
    send_to,
    wait_until,
    znode_tree,
    zk_states,
)

GARBAGE = b"{not json at all"


def alive(cluster) -> dict[int, int]:
    """Every broker's and controller candidate's pid (an ActorDiedError here is a crash)."""
    pids = {b: i["pid"] for b, i in zip(cluster.brokers, ray.get([h.info.remote() for h in cluster.brokers.values()],
                                                                 timeout=30))}
    pids.update({-b: s["pid"] for b, s in zip(cluster.brokers, ray.get(
        [cluster.controller_actor(b).status.remote() for b in cluster.brokers], timeout=30))})
    return pids


def test_garbage_in_every_znode_kind_is_skipped_and_reported(new_cluster):
    cluster, zk = new_cluster(own=True)  # its own: the garbage topics cannot be deleted (as in Kafka)
    controller_id, epoch = cluster.wait_for_controller(zk)
    admin.create_topic(zk, "good", 3, 3)
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "good"), what="the good topic everywhere")
    before_pids, before_states = alive(cluster), zk_states(zk, "good")
    k = zk.kazoo
    k.create(zkdata.topic_path("bad-topic"), GARBAGE)  # a topic znode that is not JSON
    k.create(zkdata.topic_config_path("bad-topic"), GARBAGE)
    state = zkdata.partition_state_path(TopicPartition("bad-state", 0))
    t = k.transaction()  # the topic and its garbage state at once, before the controller can elect a leader
    t.create(zkdata.topic_path("bad-state"), zkdata.TopicZNode.from_assignment({0: [1, 2]}, None).encode())
    for parent in (state.rsplit("/", 2)[0], state.rsplit("/", 1)[0]):
        t.create(parent)
    t.create(state, GARBAGE)
    assert all(r is True or isinstance(r, str) for r in t.commit())
    k.create(zkdata.broker_path(9), GARBAGE, ephemeral=True)  # a registration that is not a broker's
    k.create(zkdata.REASSIGN_PARTITIONS, GARBAGE)
    k.create(zkdata.PREFERRED_REPLICA_ELECTION, GARBAGE)
    k.create(f"{zkdata.ISR_CHANGE_NOTIFICATION}/{zkdata.ISR_CHANGE_PREFIX}", GARBAGE, sequence=True)
    k.create(zkdata.delete_topic_path("no-such-topic"), b"")

    # the controller goes on: a new topic is created and reaches every broker
    admin.create_topic(zk, "after", 2, 3)
    wait_until(lambda: caches_match_zookeeper(cluster, zk, "after"), timeout=30, what="a topic created after it")
    assert zk_states(zk, "good") == before_states  # nothing else changed
    assert alive(cluster) == before_pids  # no actor crashed or restarted
    assert cluster.wait_for_controller(zk) == (controller_id, epoch)
    # the garbage notifications were consumed and reported, not left to fire again
    wait_until(lambda: not zk.children(zkdata.ISR_CHANGE_NOTIFICATION), timeout=30,
               what="the malformed ISR change notification removed")
    assert not zk.kazoo.exists(zkdata.PREFERRED_REPLICA_ELECTION)
    assert not zk.kazoo.exists(zkdata.REASSIGN_PARTITIONS)


def test_a_produce_larger_than_message_max_bytes_is_refused_and_changes_nothing(new_cluster):
    cluster, zk = new_cluster()
    admin.create_topic(zk, "t", 1, 3)
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 1)
    limit = cluster.config.broker.message_max_bytes
    producer = Producer(cluster.bootstrap_servers(), acks=-1, **{"message.max.bytes": 2 * limit})  # the broker judges
    assert [m.offset for m in producer.send("t", [b"small"])] == [0]
    with pytest.raises(ProducerError, match="MSG_SIZE_TOO_LARGE"):
        producer.send("t", [b"x" * (limit + 1)])
    assert [m.offset for m in producer.send("t", [b"after"])] == [1]  # the log did not move for it
    leader = zk_states(zk, "t")[TopicPartition("t", 0)].leader
    assert ray.get(cluster.brokers[leader].info.remote())["broker_id"] == leader


def test_a_batch_with_a_producer_id_and_no_sequence_is_refused_each_time_and_appends_nothing(new_cluster):
    """Kafka's validateBatch refuses it with INVALID_RECORD: a broker cannot tell its retry from a new batch.
    Before, the first was appended and the second taken for its retry: answered with the first's offsets,
    its records silently dropped."""
    cluster, zk = new_cluster()
    admin.create_topic(zk, "t", 1, 3)
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 1)
    leader = zk_states(zk, "t")[TopicPartition("t", 0)].leader
    for values in ([b"first"], [b"second"]):
        request = produce_request("t", 0, values, acks=-1, producer_id=4242, first_sequence=-1)
        assert produced(send_to(cluster, leader, request, 9))[0] == Errors.INVALID_RECORD
    assert read_all(cluster, [TopicPartition("t", 0)]) == {TopicPartition("t", 0): []}  # nothing appended
    for sequence, offset in ((0, 0), (1, 1), (1, 1)):  # the same producer, now valid; its retry deduplicated
        request = produce_request("t", 0, [f"s{sequence}".encode()], acks=-1, producer_id=4242,
                                  first_sequence=sequence)
        assert produced(send_to(cluster, leader, request, 9)) == (Errors.NONE, offset)
    assert [r.value for r in read_all(cluster, [TopicPartition("t", 0)])[TopicPartition("t", 0)]] == [b"s0", b"s1"]


@pytest.mark.parametrize("plan, error", [
    ('{"version":1,"partitions":[{"topic":"doomed","partition":0,"replicas":[1,2]}]}', "queued for deletion"),
    ('{"version":1,"partitions":[{"topic":"kept","partition":0,"replicas":[1,7]}]}', "Unknown broker ids [7]"),
    ('{"version":1,"partitions":[{"topic":"kept","partition":0,"replicas":[1,1]}]}', "duplicate entries"),
    ('{"version":1,"partitions":[{"topic":"kept","partition":5,"replicas":[1,2]}]}', "does not exist"),
    ('{"version":1,"partitions":[{"topic":"kept","partition":0,"replicas":[1,2]}', "Malformed reassignment JSON"),
])
def test_a_bad_reassignment_is_refused_and_writes_nothing(zk, plan, error):
    for b in (1, 2, 3):
        zk.register_broker(b, zkdata.BrokerIdZNode.plaintext("127.0.0.1", 9092 + b))
    for topic in ("doomed", "kept"):
        zk.kazoo.create(zkdata.topic_path(topic), zkdata.TopicZNode.from_assignment({0: [1, 2]}, None).encode())
    zk.kazoo.create(zkdata.delete_topic_path("doomed"), b"")  # a deletion waiting for its brokers
    with pytest.raises(KrayError, match=re.escape(error)):
        admin.reassign_partitions(zk, admin.parse_reassignment(plan))
    assert zk.get(zkdata.REASSIGN_PARTITIONS) is None


def test_a_topic_deleted_and_made_again_takes_its_own_configs_not_the_old_ones(new_cluster):
    """The brokers forget a deleted topic's configs (UpdateMetadata says it is being deleted): a topic made
    again under its name with no override takes the broker's default, as Kafka reads /config/topics/T
    for each log it creates."""
    cluster, zk = new_cluster()
    admin.create_topic(zk, "t", 1, 3, config={"max.message.bytes": "1000"})
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 1)
    producer = Producer(cluster.bootstrap_servers(), acks=-1, **{"message.max.bytes": 100_000})
    with pytest.raises(ProducerError, match="MSG_SIZE_TOO_LARGE"):
        producer.send("t", [b"x" * 5000])
    admin.delete_topic(zk, "t")
    wait_until(lambda: zk.get(zkdata.topic_path("t")) is None and not zk.children(zkdata.DELETE_TOPICS),
               what="the topic deleted")
    cluster.wait_for_metadata(lambda m: not m["partitions"])
    admin.create_topic(zk, "t", 1, 3)
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 1)
    assert [m.offset for m in producer.send("t", [b"x" * 5000])] == [0]


def test_what_a_test_leaves_on_a_shared_cluster_is_put_back_or_named(new_cluster):
    """The shared cluster's teardown (tests/integration/conftest.py): a broker killed for good and a topic
    are put back (the broker started again, the topic deleted everywhere); a znode that nothing puts back
    is named by the check, which so fails the test that left it."""
    cluster, zk = new_cluster()
    found = znode_tree(zk)
    admin.create_topic(zk, "left", 2, 3)
    cluster.wait_for_metadata(lambda m: len(m["partitions"]) == 2)
    victim = next(b for b in cluster.brokers if b != zk.get_controller_id())
    cluster.kill_broker(victim)
    zk.kazoo.create("/left-behind", b"")
    put_back(cluster, zk)
    assert sorted(cluster.brokers) == sorted(cluster.broker_ids) and zk.get_all_topics() == set()
    with pytest.raises(AssertionError, match="znodes added \\['/left-behind'\\], removed \\[\\]"):
        assert_as_found(cluster, zk, found, timeout=1)
    zk.kazoo.delete("/left-behind")
    assert_as_found(cluster, zk, found)


def test_faulting_a_link_of_a_cluster_without_link_faults_is_refused(new_cluster):
    cluster, zk = new_cluster()
    try:
        Chaos(cluster, zk).link_fault(FaultKind.CUT_BROKER_ZOOKEEPER, 1)
    except ray.exceptions.RayTaskError as e:
        assert "link_faults_enable" in str(e)
    else:
        raise AssertionError("a fault was set on a cluster without links")
