"""The ZooKeeper side against a real server: launcher, typed client, fencing, election, registration, admin."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError

from coordination import admin, zkclient, zkdata
from coordination.election import ControllerElection
from coordination.errors import (
    ControllerMovedException,
    InvalidPartitionsException,
    InvalidReplicationFactorException,
    InvalidTopicException,
    TopicExistsException,
)
from coordination.registration import BrokerRegistration
from coordination.server import ZooKeeperEnsemble, ZooKeeperServer, ZooKeeperSettings, server_mode
from coordination.zkclient import CreateOp, DeleteOp, KrayZkClient, SetDataOp
from coordination.zkdata import TopicPartition
from tests.live_brokers import live_broker


def tree(client: KrayZkClient, path: str = "/") -> dict[str, bytes]:
    """Every znode under path with its data: a snapshot to compare before and after."""
    out = {}
    for child in client.children(path):
        full = f"{path.rstrip('/')}/{child}"
        out[full] = client.get(full)[0]
        out.update(tree(client, full))
    return out


def expire_session(client: KrayZkClient) -> None:
    """Expire a live session the way a partition would."""
    zkclient.expire_session(client.connect, client.kazoo.client_id)


# -- launcher ----------------------------------------------------------------

def test_standalone_server_stops_cleanly():
    server = ZooKeeperServer().start()
    port, base, pid = server.servers[0].client_port, server.base_dir, server.servers[0].process.pid
    assert server_mode(port) == "standalone"
    server.stop()
    assert server_mode(port) is None
    assert not base.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_server_states_its_settings_takes_znodes_past_1_mb_and_logs_its_collections():
    """Sized for 200,000 partitions: a topic's znode of a few MB (ZooKeeper's own limit is 1 MB), the
    settings in its log, its garbage collector's pauses in gc.log, its snapshots every snapCount writes."""
    settings = ZooKeeperSettings(snap_count=1000)
    with ZooKeeperServer(settings) as server:
        client = KazooClient(server.connect_string)
        client.start()
        try:
            client.create("/big", b"x" * (3 * 1024 * 1024))
            assert len(client.get("/big")[0]) == 3 * 1024 * 1024
            for i in range(1100):
                client.create_async(f"/n{i}")
            client.sync("/")
        finally:
            client.stop()
        out = (server.base_dir / "zookeeper.out").read_text()
        assert out.startswith(f"ZooKeeper on 127.0.0.1:{server.servers[0].client_port}: {settings.describe()}")
        assert "jute.maxbuffer 4096 KB" in out and "G1" in out
        assert "Using G1" in (server.base_dir / "gc.log").read_text()
        assert "snapCount=1000" in (server.base_dir / "zoo.cfg").read_text()
        assert len(list((server.base_dir / "data" / "version-2").glob("snapshot.*"))) >= 2


def test_ensemble_elects_new_leader_after_leader_killed():
    with ZooKeeperEnsemble(3) as ensemble:
        leader = ensemble.leader_index()
        assert leader is not None
        with KrayZkClient(ensemble.connect_string).start() as client:
            client.kazoo.create("/before", b"1")
            ensemble.kill_server(leader)
            deadline = time.monotonic() + 20
            while ensemble.leader_index() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert ensemble.leader_index() not in (None, leader)
            client.kazoo.create("/after", b"2")  # the session moved to a surviving server
            ensemble.restart_server(leader)
            assert server_mode(ensemble.servers[leader].client_port) == "follower"
            assert client.get("/before")[0] == b"1"


# -- typed client and fencing ------------------------------------------------

def test_partition_states_create_read_and_conditional_update(zk):
    epoch, epoch_version = zk.register_controller_and_increment_epoch(1)
    zk.kazoo.create(zkdata.topic_path("t"), zkdata.TopicZNode.from_assignment({}, None).encode())
    states = {TopicPartition("t", p): zkdata.PartitionStateZNode(leader=p % 3, leader_epoch=0,
                                                                 controller_epoch=epoch, isr=[0, 1, 2])
              for p in range(500)}
    created = zk.create_partition_states(states, epoch_version)
    assert set(created) == set(states) and all(e is None for e in created.values())
    read = zk.get_partition_states(states)
    assert {tp: r.state for tp, r in read.items()} == states
    assert all(r.zk_version == 0 for r in read.values())
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    new = zkdata.PartitionStateZNode(leader=1, leader_epoch=1, controller_epoch=epoch, isr=[1, 2])
    outcome = zk.update_partition_states({tp0: (new, 0), tp1: (new, 7)}, epoch_version)
    assert outcome[tp0] == 1  # the new zkVersion
    assert isinstance(outcome[tp1], BadVersionError)  # stale zkVersion: refused, and alone
    assert zk.get_partition_states([tp0, tp1])[tp0].state == new
    assert zk.get_partition_states([tp1])[tp1].state == states[tp1]


def test_a_batch_with_many_stale_versions_gives_the_rest_back_unsent(zk):
    """ZooKeeper names one failing op per multi, so each stale version costs a round trip: after
    STALE_VERSIONS_PER_BATCH of them the rest of the batch comes back as NotAttemptedError (a
    BadVersionError: read again and retry) and stays unchanged in ZooKeeper. Sent one per multi,
    only the stale ones fail."""
    from coordination.zkclient import STALE_VERSIONS_PER_BATCH, NotAttemptedError

    epoch, epoch_version = zk.register_controller_and_increment_epoch(1)
    zk.kazoo.create(zkdata.topic_path("s"), zkdata.TopicZNode.from_assignment({}, None).encode())
    tps = [TopicPartition("s", p) for p in range(20)]
    old = zkdata.PartitionStateZNode(leader=1, leader_epoch=0, controller_epoch=epoch, isr=[1, 2])
    zk.create_partition_states(dict.fromkeys(tps, old), epoch_version)
    new = old.model_copy(update={"leader_epoch": 1})
    stale = set(tps[2:2 + STALE_VERSIONS_PER_BATCH + 2])  # the context lags for these
    outcome = zk.update_partition_states({tp: (new, 5 if tp in stale else 0) for tp in tps}, epoch_version)
    refused = [tp for tp in tps if isinstance(outcome[tp], BadVersionError)
               and not isinstance(outcome[tp], NotAttemptedError)]
    assert refused == sorted(stale, key=tps.index)[:STALE_VERSIONS_PER_BATCH]  # one round trip each
    assert all(isinstance(outcome[tp], NotAttemptedError) for tp in tps if tp not in refused)
    assert {tp: r.state for tp, r in zk.get_partition_states(tps).items()} == dict.fromkeys(tps, old)
    fresh = {tp: (new, 0) for tp in tps if tp not in stale}  # the multi is atomic: nothing went through
    assert set(zk.update_partition_states(fresh, epoch_version).values()) == {1}
    one_each = zk.begin_update_partition_states({tp: (new, 1 if tp in fresh else 5) for tp in tps}, epoch_version,
                                                one_per_multi=True)()  # a write per multi: stale ones fail alone
    assert {tp for tp, r in one_each.items() if type(r) is BadVersionError} == stale
    assert all(one_each[tp] == 2 for tp in fresh)


def test_isr_removals_get_through_while_leaders_keep_rewriting_some_states(zk, chroot_connect):
    """A broker's failure takes it out of 1,000 ISRs while the leaders of 30 of those partitions keep
    rewriting their states (ISR changes of their own, conditional on the version they read). Every
    batch then holds a few stale versions; the controller still writes every other removal, and
    the context agrees with ZooKeeper. (Giving whole batches back on every round gave up on all.)"""
    import threading

    from actors.controller.request_batch import ControllerBrokerRequestBatch
    from actors.controller.context import ControllerContext, LeaderAndIsr, LeaderIsrAndControllerEpoch
    from actors.controller.state_machines import ReplicaStateName as R
    from actors.controller.controller_zk import FencedZkClient
    from actors.controller.zk_state_machines import ZkReplicaStateMachine

    epoch, epoch_version = zk.register_controller_and_increment_epoch(1)
    zk.kazoo.create(zkdata.topic_path("busy"), zkdata.TopicZNode.from_assignment({}, None).encode())
    tps = [TopicPartition("busy", p) for p in range(1000)]
    state = zkdata.PartitionStateZNode(leader=1, leader_epoch=0, controller_epoch=epoch, isr=[1, 2, 3])
    zk.create_partition_states(dict.fromkeys(tps, state), epoch_version)
    ctx = ControllerContext(epoch=epoch, epoch_zk_version=epoch_version)
    ctx.add_live_brokers({b: (live_broker(b, "h", 9090 + b), 100 + b) for b in (1, 2)})
    for tp in tps:
        ctx.update_partition_replicas(tp, (1, 2, 3))
        ctx.partition_leadership[tp] = LeaderIsrAndControllerEpoch(LeaderAndIsr(1, 0, (1, 2, 3), 0), epoch)
        ctx.replica_states.update({(tp, r): R.OnlineReplica for r in (1, 2, 3)})
    hot = {zkdata.partition_state_path(tp): tp for tp in tps[::33][:30]}
    stop, rewrites = threading.Event(), [0]

    def leaders(client: KrayZkClient) -> None:
        """Each rewrites its state as it last read it (pipelined), until the controller's write fences it."""
        known = {path: client.kazoo.get(path) for path in hot}  # data, stat
        while not stop.is_set() and known:
            sets = {path: client.kazoo.set_async(path, data, version=stat.version)
                    for path, (data, stat) in known.items()}
            for path, result in sets.items():
                try:
                    known[path] = (known[path][0], result.get())
                    rewrites[0] += 1
                except BadVersionError:
                    data, stat = client.kazoo.get(path)
                    if zkdata.decode(zkdata.PartitionStateZNode, path, data).isr != [1, 2, 3]:
                        del known[path]  # the controller wrote: this leader is fenced
                    else:
                        known[path] = (data, stat)

    with KrayZkClient(chroot_connect).start() as other:
        writer = threading.Thread(target=leaders, args=(other,), daemon=True)
        writer.start()
        deadline = time.monotonic() + 30
        while rewrites[0] < len(hot):  # the context lags for every hot partition
            assert writer.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
        try:
            rsm = ZkReplicaStateMachine(1, ctx, FencedZkClient(zk, lambda: ctx.epoch_zk_version),
                                        ControllerBrokerRequestBatch(1))
            rsm.handle_state_changes([(tp, 3) for tp in tps], R.OfflineReplica)
        finally:
            stop.set()
            writer.join(10)
    in_zk = {tp: r.state.isr for tp, r in zk.get_partition_states(tps).items()}
    assert [tp for tp in tps if tp not in hot.values() and in_zk[tp] != [1, 2]] == []
    assert all(list(ctx.partition_leadership[tp].leader_and_isr.isr) == in_zk[tp] for tp in tps)
    assert all(ctx.replica_states[(tp, 3)] is R.OfflineReplica for tp in tps if in_zk[tp] == [1, 2])


def test_deposed_controller_batch_fails_whole(zk, chroot_connect):
    _, old_version = zk.register_controller_and_increment_epoch(1)
    path = zkdata.partition_state_path(TopicPartition("t", 0))
    zk.kazoo.create(path, b"{}", makepath=True)
    zk.kazoo.delete(zkdata.CONTROLLER)
    with KrayZkClient(chroot_connect).start() as other:
        assert other.register_controller_and_increment_epoch(2)[0] == 2
    before = tree(zk)
    with pytest.raises(ControllerMovedException):
        zk.fenced_multi([SetDataOp(path, b'{"x":1}'), SetDataOp(zkdata.CONTROLLER_EPOCH, b"99")], old_version)
    assert tree(zk) == before


def test_multi_read_matches_single_reads_across_batches(zk):
    """get_many sends MultiRead requests (opcode 22) of READ_BATCH paths: results in order, per path."""
    paths = [f"/many/{i}" for i in range(1200)]
    zk.kazoo.ensure_path("/many")
    for i, p in enumerate(paths):
        if i % 7:
            zk.kazoo.create(p, b"" if i == 1 else str(i).encode())
    got = zk.get_many(paths)
    assert list(got) == paths
    for i, p in enumerate(paths):
        assert got[p] == (zk.kazoo.get(p) if i % 7 else None)
    assert got[paths[1]][0] == b""


def test_fenced_multi_applies_creates_sets_and_deletes_under_the_chroot(zk, chroot_connect):
    _, version = zk.register_controller_and_increment_epoch(1)
    zk.kazoo.create("/w/a", b"1", makepath=True)
    zk.kazoo.create("/w/b", b"1")
    ops = [CreateOp("/w/e", b"x", ephemeral=True), SetDataOp("/w/a", b"2", 0), SetDataOp("/w/b", b"2", 5),
           DeleteOp("/w/b")]
    results = {r.op: r for r in zk.fenced_multi(ops, version)}
    assert [type(results[op].error) for op in ops] == [type(None), type(None), BadVersionError, type(None)]
    assert results[ops[1]].stat.version == 1
    assert zk.kazoo.get("/w/a")[0] == b"2" and zk.kazoo.exists("/w/b") is None
    assert zk.kazoo.exists("/w/e").ephemeralOwner == zk.session_id
    root, chroot = chroot_connect.split("/", 1)
    with KrayZkClient(root).start() as unrooted:
        assert unrooted.get(f"/{chroot}/w/a")[0] == b"2"


def test_malformed_partition_state_is_skipped(zk, caplog):
    good, bad = TopicPartition("t", 0), TopicPartition("t", 1)
    zk.kazoo.create(zkdata.partition_state_path(good), zkdata.PartitionStateZNode(
        leader=1, leader_epoch=0, controller_epoch=1, isr=[1]).encode(), makepath=True)
    zk.kazoo.create(zkdata.partition_state_path(bad), b'{"leader": "one"', makepath=True)
    states = zk.get_partition_states([good, bad])
    assert list(states) == [good]
    assert "malformed data at /brokers/topics/t/partitions/1/state" in caplog.text


# -- controller election -----------------------------------------------------

def test_controller_election_epochs_and_resignation(chroot_connect):
    a = KrayZkClient(chroot_connect, session_timeout_ms=4000).start()
    b = KrayZkClient(chroot_connect, session_timeout_ms=4000).start()
    try:
        ea, eb = ControllerElection(a, 1, lambda: None), ControllerElection(b, 2, lambda: None)
        assert ea.elect() == (1, 1)
        assert eb.elect() is None
        assert json.loads(a.get(zkdata.CONTROLLER)[0])["brokerid"] == 1
        assert ea.still_controller() and not eb.still_controller()
        with pytest.raises(ControllerMovedException):
            b.register_controller_and_increment_epoch(2)
        assert b.get_controller_epoch()[0] == 1  # the failed attempt changed nothing
        expire_session(a)
        deadline = time.monotonic() + 10
        while b.get(zkdata.CONTROLLER) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert eb.elect() == (2, 2)
        assert eb.still_controller()
    finally:
        a.close()
        b.close()


def test_removing_a_dead_controller_spares_a_newer_one_even_of_the_same_broker(chroot_connect):
    """Ray reports the watched controller dead; by then another election may have run. Only the
    watched election's /controller goes (a newer znode has version 0 again, so a versioned delete
    alone would remove it; CI saw two candidates elected one after the other that way)."""
    a, b, c = (KrayZkClient(chroot_connect, session_timeout_ms=4000).start() for _ in range(3))
    try:
        ea, eb, ec = (ControllerElection(z, i, lambda: None) for i, z in ((1, a), (2, b), (3, c)))
        assert ea.elect() is not None
        dead = ec.current()
        assert dead is not None and dead.broker_id == 1 and dead.czxid == a.get(zkdata.CONTROLLER)[1].czxid
        a.kazoo.delete(zkdata.CONTROLLER)  # the old controller resigned, and broker 1 won again
        assert ea.elect() is not None
        newer = a.get(zkdata.CONTROLLER)[1]
        assert newer.version == 0 and ec.current().epoch_zk_version == dead.epoch_zk_version + 1
        assert not ec.remove_dead_controller(dead)
        assert a.get(zkdata.CONTROLLER)[1].czxid == newer.czxid and ea.still_controller()
        assert eb.remove_dead_controller(ec.current())  # the current one goes
        assert a.get(zkdata.CONTROLLER) is None
        assert not eb.remove_dead_controller(dead)  # nothing left to remove
    finally:
        for z in (a, b, c):
            z.close()


# -- broker registration -------------------------------------------------------

def test_broker_registration_is_kafka_v5_and_survives_session_expiry(chroot_connect):
    client = KrayZkClient(chroot_connect, session_timeout_ms=4000).start()
    client.ensure_persistent_paths()
    try:
        registration = BrokerRegistration(client, 7, lambda: zkdata.BrokerIdZNode.plaintext("127.0.0.1", 9099))
        epoch = registration.register()
        registration.keep_registered()
        data, stat = client.get("/brokers/ids/7")
        doc = json.loads(data)
        assert doc["version"] == 5 and doc["endpoints"] == ["PLAINTEXT://127.0.0.1:9099"]
        assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
        assert {"host", "port", "jmx_port", "timestamp", "features"} <= set(doc)
        assert stat.ephemeralOwner == client.session_id and stat.czxid == epoch
        with pytest.raises(NodeExistsError):  # a second broker with the same id is refused
            with KrayZkClient(chroot_connect).start() as other:
                other.register_broker(7, zkdata.BrokerIdZNode.plaintext("127.0.0.1", 1))
        expire_session(client)
        deadline = time.monotonic() + 15
        while registration.broker_epoch == epoch and time.monotonic() < deadline:
            time.sleep(0.05)
        assert registration.broker_epoch > epoch
        assert client.get("/brokers/ids/7")[1].ephemeralOwner == client.session_id
        registration.stop()
    finally:
        client.close()


# -- admin ---------------------------------------------------------------------

def _register(zk, *ids):
    for b in ids:
        zk.register_broker(b, zkdata.BrokerIdZNode.plaintext("127.0.0.1", 9092 + b))


def test_create_topic_writes_kafka_znodes(zk):
    _register(zk, 1, 2, 3)
    assignment = admin.create_topic(zk, "orders", 6, 3, {"compression.type": "lz4"})
    topic = json.loads(zk.get("/brokers/topics/orders")[0])
    assert topic["version"] == 2 and len(topic["topic_id"]) == 22
    assert topic["partitions"] == {str(p): r for p, r in assignment.items()}
    assert all(sorted(r) == [1, 2, 3] for r in assignment.values())
    assert json.loads(zk.get("/config/topics/orders")[0]) == {"version": 1, "config": {"compression.type": "lz4"}}


@pytest.mark.parametrize("topic,partitions,rf,error", [
    ("bad name", 1, 1, InvalidTopicException),
    ("..", 1, 1, InvalidTopicException),
    ("x" * 250, 1, 1, InvalidTopicException),
    ("ok", 0, 1, InvalidPartitionsException),
    ("ok", 3, 0, InvalidReplicationFactorException),
    ("ok", 3, 4, InvalidReplicationFactorException),
    ("existing", 1, 1, TopicExistsException),
    ("exist.ing2", 1, 1, InvalidTopicException),  # collides with exist_ing2
])
def test_invalid_create_changes_nothing(zk, topic, partitions, rf, error):
    _register(zk, 1, 2, 3)
    admin.create_topic(zk, "existing", 1, 1)
    admin.create_topic(zk, "exist_ing2", 1, 1)
    before = tree(zk)
    with pytest.raises(error):
        admin.create_topic(zk, topic, partitions, rf)
    assert tree(zk) == before


def test_zk_restart_fault_brings_the_server_back_and_sessions_survive():
    """The chaos fault zk-restart: SIGKILL of the server, started again on its data; a session shorter
    lived than its timeout reconnects to the same session and its data is there."""
    from jobs.experiments.chaos import Chaos

    server = ZooKeeperServer(ZooKeeperSettings(tick_time_ms=250, min_session_timeout_ms=1000)).start()
    try:
        # a session of 30 s: the restarted JVM may take seconds to answer on a busy machine (a run
        # with 10 s saw the session expire), and the claim is only that a restart shorter than the
        # timeout keeps it
        client = KrayZkClient(server.connect_string, session_timeout_ms=30_000).start()
        client.kazoo.create("/kept", b"v", ephemeral=True)
        session = client.session_id
        assert Chaos(None, client, server).zk_restart(1.0) == 0
        assert server_mode(server.servers[0].client_port) == "standalone"
        deadline = time.monotonic() + 30
        while not client.kazoo.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.session_id == session and client.get("/kept")[0] == b"v"
        client.close()
    finally:
        server.stop()


def test_an_isr_expansion_takes_in_only_a_registered_broker(zk, tmp_path):
    """A caught-up follower whose broker has lost its registration (dead, its registration removed
    before the controller read the ISRs) is not taken into the ISR: ZooKeeper refuses the multi, the
    leader keeps its ISR and keeps leading. Nor while another incarnation is registered (KIP-903: the
    registration's czxid is not the broker epoch that fetched). Once its own fetches are by the
    registered incarnation, it is taken in."""
    from actors.broker.isr import IsrManager
    from actors.broker.log.log_config import LogConfig
    from actors.broker.replica_manager import ReplicaManager
    from actors.config import BrokerConfig
    from actors.protocol import LeaderAndIsrRequest, PartitionState

    tp = TopicPartition("t", 0)
    zk.ensure_persistent_paths()
    zk.kazoo.create(zkdata.partition_state_path(tp), zkdata.PartitionStateZNode.encode_fields(1, 0, 1, [1]),
                    makepath=True)
    alive = {2: 20}  # the leader's metadata has incarnation 20 of broker 2
    rm = ReplicaManager(1, tmp_path, lambda topic: LogConfig.from_overrides(BrokerConfig(), {}),
                        alive_broker_epoch=alive.get)
    rm.become_leader_or_follower(LeaderAndIsrRequest(
        controller_id=1, controller_epoch=1, broker_epoch=-1, live_leaders=[], partition_states=[PartitionState(
            topic="t", partition=0, controller_epoch=1, leader=1, leader_epoch=0, isr=(1,), zk_version=0,
            replicas=(1, 2))]), -1)
    partition = rm.partition(tp)
    partition.fetch_for_follower(2, 0, 1024, int(time.time() * 1000), broker_epoch=20)  # 2 has the whole log
    assert partition.isr_to_expand(2, 20) == (1, 2)
    isr = IsrManager(1, zk, rm, on_loop=lambda fn: fn())  # no event loop here: the test's thread is the loop

    def zk_isr() -> list[int]:
        return zkdata.decode(zkdata.PartitionStateZNode, "", zk.get(zkdata.partition_state_path(tp))[0]).isr

    for written in isr.expand([tp], 2):  # /brokers/ids/2 does not exist
        written.result()
    assert zk_isr() == [1] and partition.state.isr == (1,) and partition.is_leader
    epoch = zk.kazoo.create(zkdata.broker_path(2), b"{}", ephemeral=True, include_data=True)[1].czxid
    for written in isr.expand([tp], 2):  # registered, but not as incarnation 20
        written.result()
    assert zk_isr() == [1] and partition.joining == ()
    alive[2] = epoch
    partition.fetch_for_follower(2, 0, 1024, int(time.time() * 1000), broker_epoch=epoch)
    busy = threading.Event()
    isr._writer.submit(busy.wait, 10)  # the writer busy with another change: the fetches' asks queue
    queued = isr.expand([tp], 2)
    assert len(queued) == 1 and isr.expand([tp], 2) == []  # one expansion per partition and follower at a time
    busy.set()
    for written in queued:
        written.result()
    assert zk_isr() == [1, 2] and partition.state.isr == (1, 2)


def led_alone_with_a_registered_follower(zk, tmp_path, tps: list[TopicPartition], isr: tuple[int, ...] = (1,)):
    """Broker 1 leading `tps` with the ISR `isr` (their state znodes so), replicas [1, 2], and broker 2
    registered: (broker 1's ReplicaManager, broker 2's epoch, which its metadata has alive)."""
    from actors.broker.log.log_config import LogConfig
    from actors.broker.replica_manager import ReplicaManager
    from actors.config import BrokerConfig
    from actors.protocol import LeaderAndIsrRequest, PartitionState

    zk.ensure_persistent_paths()
    epoch = zk.kazoo.create(zkdata.broker_path(2), b"{}", ephemeral=True, include_data=True)[1].czxid
    tx = zk.kazoo.transaction()
    for path in sorted({zkdata.partition_state_path(tp).rsplit("/", 2)[0] for tp in tps}):
        zk.kazoo.ensure_path(path)
    for tp in tps:
        zk.kazoo.ensure_path(zkdata.partition_state_path(tp).rsplit("/", 1)[0])
        tx.create(zkdata.partition_state_path(tp), zkdata.PartitionStateZNode.encode_fields(1, 0, 1, list(isr)))
    assert not [r for r in tx.commit() if isinstance(r, Exception)]
    rm = ReplicaManager(1, tmp_path, lambda topic: LogConfig.from_overrides(BrokerConfig(), {}),
                        alive_broker_epoch={2: epoch}.get)
    rm.become_leader_or_follower(LeaderAndIsrRequest(
        controller_id=1, controller_epoch=1, broker_epoch=-1, live_leaders=[], partition_states=[PartitionState(
            topic=tp.topic, partition=tp.partition, controller_epoch=1, leader=1, leader_epoch=0, isr=isr,
            zk_version=0, replicas=(1, 2)) for tp in tps]), -1)
    return rm, epoch


def test_a_shrink_decided_on_states_the_controller_rewrote_settles_its_refusals_a_multi_at_a_time(zk, tmp_path):
    """A leader decides to shrink 600 ISRs while the controller has already rewritten half of them (a dead
    follower's removal whose LeaderAndIsr has not arrived yet). Each refused multi is settled at once: one
    read of its znodes gives up every moved partition's change and the rest are written again, so the
    shrinks land with a few reads rather than one read and one multi per refused partition (which held a
    100,000-partition leader's ISR writer for minutes, and its followers' expansions behind it)."""
    from actors.broker.isr import IsrManager

    tps = [TopicPartition("shrunk", p) for p in range(600)]
    rm, _ = led_alone_with_a_registered_follower(zk, tmp_path, tps, isr=(1, 2))
    moved = tps[::2]
    tx = zk.kazoo.transaction()
    for tp in moved:  # the controller's write: epoch 1, the follower out
        tx.set_data(zkdata.partition_state_path(tp), zkdata.PartitionStateZNode.encode_fields(1, 1, 1, [1]))
    tx.commit()

    class ReadsCounted:  # the real client, its get_many calls counted
        reads = 0

        def __getattr__(self, name):
            return getattr(zk, name)

        def get_many(self, paths):
            ReadsCounted.reads += 1
            return zk.get_many(paths)

    isr = IsrManager(1, ReadsCounted(), rm, on_loop=lambda fn: fn())
    isr.shrink(int(time.time() * 1000) + 10**9, 1000)  # follower 2 lags: every ISR is due

    found = zk.get_many(zkdata.partition_state_path(tp) for tp in tps)
    states = {tp: zkdata.decode(zkdata.PartitionStateZNode, "", found[zkdata.partition_state_path(tp)][0])
              for tp in tps}
    assert all((states[tp].leader_epoch, states[tp].isr) == ((1, [1]) if tp in moved else (0, [1])) for tp in tps)
    assert all(rm.partition(tp).isr_change_given_up == (tp in moved) for tp in tps)
    assert [rm.partition(tp).state.isr for tp in tps if tp not in moved] == [(1,)] * 300
    assert isr.failed_isr_updates == 300
    assert ReadsCounted.reads <= 4  # one per refused multi (600 / 500 partitions, the rest written again)


def test_the_isr_expansions_of_one_fetch_go_in_one_multi_and_a_moved_partition_is_refused_alone(zk, tmp_path):
    """A follower caught up on three partitions at once rejoins their ISRs together; the one whose state
    someone else (a controller) rewrote meanwhile is refused, its leader gives that change up and keeps
    leading (with the joining follower still in its maximal ISR until a LeaderAndIsr), and the other two
    are written all the same."""
    from actors.broker.isr import IsrManager

    tps = [TopicPartition("m", p) for p in range(3)]
    rm, epoch = led_alone_with_a_registered_follower(zk, tmp_path, tps)
    for tp in tps:
        rm.partition(tp).fetch_for_follower(2, 0, 1024, int(time.time() * 1000), broker_epoch=epoch)
    zk.kazoo.set(zkdata.partition_state_path(tps[1]), zkdata.PartitionStateZNode.encode_fields(3, 1, 2, [3]))
    isr = IsrManager(1, zk, rm, on_loop=lambda fn: fn())
    [written] = isr.expand(tps, 2)
    written.result()

    def zk_isr(tp) -> list[int]:
        return zkdata.decode(zkdata.PartitionStateZNode, "", zk.get(zkdata.partition_state_path(tp))[0]).isr
    assert [zk_isr(tp) for tp in tps] == [[1, 2], [3], [1, 2]]
    assert [rm.partition(tp).state.isr for tp in tps] == [(1, 2), (1,), (1, 2)]
    assert [rm.partition(tp).is_leader for tp in tps] == [True, True, True]
    assert [rm.partition(tp).isr_change_given_up for tp in tps] == [False, True, False]
    assert rm.partition(tps[1]).joining == (2,) and isr.failed_isr_updates == 1
    assert [rm.partition(tp).state.zk_version for tp in tps] == [1, 0, 1]


def test_an_isr_write_whose_answer_was_lost_counts_as_done_when_the_znode_holds_it(zk, tmp_path):
    """Kafka's checkLeaderAndIsrZkData: the write went through but its answer was lost (a connection loss),
    so the retry finds the version moved; the znode holds exactly the state it would write, so the leader
    takes it as written, at the version found, and goes on leading."""
    from actors.broker.isr import IsrManager

    tp = TopicPartition("lost", 0)
    rm, epoch = led_alone_with_a_registered_follower(zk, tmp_path, [tp])
    rm.partition(tp).fetch_for_follower(2, 0, 1024, int(time.time() * 1000), broker_epoch=epoch)
    zk.kazoo.set(zkdata.partition_state_path(tp), zkdata.PartitionStateZNode.encode_fields(1, 0, 1, [1, 2]))  # "ours"
    [written] = IsrManager(1, zk, rm, on_loop=lambda fn: fn()).expand([tp], 2)
    written.result()
    partition = rm.partition(tp)
    assert partition.is_leader and partition.state.isr == (1, 2) and partition.state.zk_version == 1


def test_a_leaders_isr_change_is_announced_even_if_the_first_announcement_fails(zk, tmp_path):
    """The leader writes its ISR shrink, then announces it under /isr_change_notification, where the
    controller picks it up for UpdateMetadata. If the announcement cannot be written (no session),
    the change is kept and announced on the next round, not forgotten."""
    from actors.broker.isr import IsrManager
    from actors.broker.log.log_config import LogConfig
    from actors.broker.replica_manager import ReplicaManager
    from actors.config import BrokerConfig
    from actors.protocol import LeaderAndIsrRequest, PartitionState

    tp = TopicPartition("t", 0)
    zk.ensure_persistent_paths()
    zk.kazoo.create(zkdata.partition_state_path(tp), zkdata.PartitionStateZNode.encode_fields(1, 0, 1, [1, 2]),
                    makepath=True)
    rm = ReplicaManager(1, tmp_path, lambda topic: LogConfig.from_overrides(BrokerConfig(), {}))
    rm.become_leader_or_follower(LeaderAndIsrRequest(
        controller_id=1, controller_epoch=1, broker_epoch=-1, live_leaders=[], partition_states=[PartitionState(
            topic="t", partition=0, controller_epoch=1, leader=1, leader_epoch=0, isr=(1, 2), zk_version=0,
            replicas=(1, 2))]), -1)
    isr = IsrManager(1, zk, rm, on_loop=lambda fn: fn())
    isr.shrink(now_ms=int(time.time() * 1000) + 60_000, replica_lag_time_max_ms=1000)  # follower 2 never fetched
    assert zkdata.decode(zkdata.PartitionStateZNode, "", zk.get(zkdata.partition_state_path(tp))[0]).isr == [1]
    zk.kazoo.stop()
    with pytest.raises(Exception):
        isr.propagate()
    zk.kazoo.start()
    isr.propagate()
    [name] = zk.children(zkdata.ISR_CHANGE_NOTIFICATION)
    notification = zkdata.decode(zkdata.IsrChangeNotificationZNode, name,
                                 zk.get(f"{zkdata.ISR_CHANGE_NOTIFICATION}/{name}")[0])
    assert [(p.topic, p.partition) for p in notification.partitions] == [("t", 0)]
    isr.propagate()  # announced once
    assert zk.children(zkdata.ISR_CHANGE_NOTIFICATION) == [name]
