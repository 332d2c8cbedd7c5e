"""The warm standby against a real ZooKeeper: which znodes changed since a zxid, and a standby that
missed changes (no round ran, the candidate's session expired meanwhile) reading them, and only them,
before the failover that needs them acts."""
from __future__ import annotations

from actors.controller.standby import WarmStandby
from coordination import zkclient, zkdata
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition as TP
from tests.integration.conftest import wait_until


def put_topic(zk: KrayZkClient, topic: str, partitions: range, leader: int = 1) -> None:
    """A topic's znode with `partitions` (created or replaced) and a state for each partition not there."""
    znode = zkdata.TopicZNode.from_assignment({p: [1, 2] for p in partitions}, None).encode()
    if zk.exists(zkdata.topic_path(topic)):
        zk.kazoo.set(zkdata.topic_path(topic), znode)
    else:
        zk.kazoo.create(zkdata.topic_path(topic), znode, makepath=True)
    for p in partitions:
        path = zkdata.partition_state_path(TP(topic, p))
        if not zk.exists(path):
            zk.kazoo.create(path, state(leader).encode(), makepath=True)


def state(leader: int) -> zkdata.PartitionStateZNode:
    return zkdata.PartitionStateZNode(controller_epoch=1, leader=leader, leader_epoch=leader, isr=[1, 2])


def test_changed_since_names_the_znodes_changed_or_gone_after_a_zxid_without_reading_them(zk, chroot_connect):
    put_topic(zk, "t", range(3))
    paths = [zkdata.partition_state_path(TP("t", p)) for p in range(3)]
    with KrayZkClient(chroot_connect).start() as other:
        other.get_all_topics()
        zxid = other.last_zxid
        zk.kazoo.set(paths[0], state(2).encode())
        zk.kazoo.delete(paths[2])
        assert other.changed_since(paths, zxid) == {paths[0], paths[2]}
        assert other.get(paths[0])[0] == state(2).encode()
        assert other.changed_since(paths, other.last_zxid) == {paths[2]}  # gone is still gone
        assert other.changed_since(paths[:2], other.last_zxid) == set()


def test_a_standby_that_missed_changes_reads_them_and_only_them_before_it_acts(zk, chroot_connect):
    put_topic(zk, "a", range(20))
    put_topic(zk, "b", range(2))
    client = KrayZkClient(chroot_connect, session_timeout_ms=6000).start()
    standby = WarmStandby(lambda: KrayZkClient(chroot_connect).start(), client, 1,
                          refresh_ms=3_600_000)  # one round at its start, then none until it wins
    try:
        standby.start()
        wait_until(lambda: standby.last_round.get("partitions") == 22, what="the standby's first round")
        assert standby.last_round["states_read"] == 22 and standby.copy.as_of is not None
        # behind its back: a leader moved, a partition added, a topic deleted, a topic created ...
        zk.kazoo.set(zkdata.partition_state_path(TP("a", 3)), state(2).encode())
        put_topic(zk, "a", range(21))
        zk.kazoo.delete(zkdata.topic_path("b"), recursive=True)
        put_topic(zk, "c", range(1), leader=2)
        # ... and the candidate's session expired meanwhile (each round has a session of its own, gone at its
        # end: no watch tells the standby anything, the zxid does)
        session = client.session_id
        zkclient.expire_session(client.connect, client.kazoo.client_id)
        wait_until(lambda: client.session_id not in (0, session), what="a new session")
        reads = standby.caught_up()
        r = standby.last_round
        assert (r["topics"], r["topics_read"], r["partitions"], r["states_read"]) == (2, 2, 22, 3)  # a-3, a-20, c-0
        partitions = [TP("a", p) for p in range(21)] + [TP("c", 0)]
        assert reads.get_partition_states(partitions) == zk.get_partition_states(partitions)
        assert reads.get_topic_znodes({"a", "c"}) == zk.get_topic_znodes({"a", "c"})
        assert reads.get_partition_states([TP("a", 3)])[TP("a", 3)].state.leader == 2
        # a topic made after its round is read from ZooKeeper, not missed
        put_topic(zk, "d", range(1))
        assert set(reads.get_topic_znodes({"a", "d"})) == {"a", "d"}
        assert reads.get_partition_states([TP("d", 0)])[TP("d", 0)].state.leader == 1
        # the next win (after a resignation) reads only what changed since this one
        assert standby.describe()["active"]
        standby.resume()
        assert not standby.describe()["active"]
        standby.caught_up()
        r = standby.last_round
        assert (r["topics"], r["topics_read"], r["partitions"], r["states_read"]) == (3, 1, 23, 1)  # d, d-0
    finally:
        standby.stop()
        client.close()
