"""ZooKeeper requests ride out a lost connection, as Kafka's retryRequestsUntilConnected: a real
ZooKeeper reached through a faultable link whose answers are held, then the connection dropped and
healed. A write that landed before the drop counts as done, with the version it made; one that never
reached the server is sent again; a session that expired meanwhile fails the write and not a read."""
from __future__ import annotations

import threading
import time
from typing import Callable

import pytest
from kazoo.exceptions import SessionExpiredError

from actors.links.faults import HEALTHY, ZOOKEEPER_LINK, Direction, LinkFault
from actors.links.proxy import LinkTable
from actors.cluster import poll as wait_until
from coordination import zkdata
from coordination.zkclient import CreateOp, KrayZkClient
from coordination.zkdata import TopicPartition

F, B = Direction.FORWARD, Direction.BACKWARD
CUT, DROP = LinkFault(cut=True), LinkFault(drop=True)


@pytest.fixture
def linked(chroot_connect):
    """(the link table, a client through its `zookeeper` link, a client straight to the server)."""
    table = LinkTable("test-zookeeper-link")
    client = KrayZkClient(table.route_zookeeper(chroot_connect), session_timeout_ms=6000).start()
    direct = KrayZkClient(chroot_connect).start()
    client.ensure_persistent_paths()
    yield table, client, direct
    client.close()
    direct.close()
    table.close()


def in_thread(fn: Callable) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except Exception as e:  # the test looks at it
            out["error"] = e
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def dropped_while(table: LinkTable, held: Direction, write: Callable, sent: Callable[[], bool],
                  drop_s: float = 0.3) -> dict:
    """Hold `held` on the link, start `write`, once `sent()` holds drop the connection for `drop_s`,
    heal; the write's outcome ({"value": ...} or {"error": ...})."""
    table.set_fault(ZOOKEEPER_LINK, held, CUT)
    thread, out = in_thread(write)
    wait_until(sent, timeout=10, what="the write to reach its point", interval=0.01)
    table.set_fault(ZOOKEEPER_LINK, held, DROP)
    time.sleep(drop_s)
    table.set_fault(ZOOKEEPER_LINK, held, HEALTHY)
    thread.join(20)
    assert not thread.is_alive(), "the write did not come back after the link healed"
    return out


def epoch_zk_version(client: KrayZkClient) -> int:
    return client.register_controller_and_increment_epoch(1)[1]


def test_a_fenced_write_that_landed_before_the_connection_dropped_counts_as_done_with_its_version(linked):
    table, client, direct = linked
    tp = TopicPartition("lost", 0)
    fence = epoch_zk_version(client)
    client.create(zkdata.topic_path(tp.topic), b"{}", makepath=True)
    client.create_partition_states({tp: zkdata.PartitionStateZNode.encode_fields(1, 0, 1, [1, 2])}, fence)
    path = zkdata.partition_state_path(tp)
    new = zkdata.PartitionStateZNode.encode_fields(2, 1, 1, [2])
    out = dropped_while(table, B, lambda: client.update_partition_states({tp: (new, 0)}, fence),
                        sent=lambda: direct.get(path)[0] == new)  # applied; its answer held
    assert out == {"value": {tp: 1}}  # done, at the version it made: not a stale-version failure
    assert client.lost_answers >= 1


def test_a_fenced_write_that_never_reached_the_server_is_sent_again(linked):
    table, client, direct = linked
    fence = epoch_zk_version(client)
    sent_at = client.lost_answers
    out = dropped_while(table, F, lambda: client.fenced_multi([CreateOp("/made", b"x")], fence),
                        sent=lambda: True, drop_s=0.5)
    assert "error" not in out and out["value"][0].error is None
    assert direct.get("/made")[0] == b"x" and client.lost_answers > sent_at


def test_a_registration_that_landed_before_the_connection_dropped_is_this_sessions(linked):
    table, client, direct = linked
    info = zkdata.BrokerIdZNode.plaintext("127.0.0.1", 9092)
    out = dropped_while(table, B, lambda: client.register_broker(5, info),
                        sent=lambda: direct.get(zkdata.broker_path(5)) is not None)
    stat = direct.get(zkdata.broker_path(5))[1]
    assert out == {"value": stat.czxid} and stat.ephemeralOwner == client.session_id


def test_an_isr_write_that_landed_before_the_connection_dropped_is_taken_whole(linked, tmp_path):
    """The leader's multi of ISR shrinks went through and its answer was lost: sent again it fails on
    the versions it moved itself, and the whole chunk is recognised as written (one read), the leader
    leading on at the versions found."""
    from actors.broker.isr import IsrManager
    from actors.broker.log.log_config import LogConfig
    from actors.broker.replica_manager import ReplicaManager
    from actors.config import BrokerConfig
    from actors.protocol import LeaderAndIsrRequest, PartitionState

    table, client, direct = linked
    tps = [TopicPartition("isr", p) for p in range(3)]
    for tp in tps:
        client.create(zkdata.partition_state_path(tp), zkdata.PartitionStateZNode.encode_fields(1, 0, 1, [1, 2]),
                      makepath=True)
    rm = ReplicaManager(1, tmp_path, lambda topic: LogConfig.from_overrides(BrokerConfig(), {}))
    rm.become_leader_or_follower(LeaderAndIsrRequest(
        controller_id=1, controller_epoch=1, broker_epoch=-1, live_leaders=[], partition_states=[PartitionState(
            topic=tp.topic, partition=tp.partition, controller_epoch=1, leader=1, leader_epoch=0, isr=(1, 2),
            zk_version=0, replicas=(1, 2)) for tp in tps]), -1)
    isr = IsrManager(1, client, rm, on_loop=lambda fn: fn())

    def isr_of(tp) -> list[int]:
        return zkdata.decode(zkdata.PartitionStateZNode, "", direct.get(zkdata.partition_state_path(tp))[0]).isr
    out = dropped_while(table, B, lambda: isr.shrink(int(time.time() * 1000) + 60_000, 1000),  # 2 never fetched
                        sent=lambda: all(isr_of(tp) == [1] for tp in tps))
    assert "error" not in out
    assert [(rm.partition(tp).is_leader, rm.partition(tp).state.isr, rm.partition(tp).state.zk_version)
            for tp in tps] == [(True, (1,), 1)] * 3


def test_a_write_fails_if_its_session_expired_while_disconnected_and_a_read_goes_on_in_the_next(chroot_connect):
    table = LinkTable("test-zookeeper-link")
    client = KrayZkClient(table.route_zookeeper(chroot_connect), session_timeout_ms=2000).start()
    try:
        client.ensure_persistent_paths()
        session = client.session_id
        table.set_fault(ZOOKEEPER_LINK, B, DROP)
        write, wrote = in_thread(lambda: client.create("/after", b"x"))
        read, got = in_thread(lambda: client.get(zkdata.BROKER_IDS))
        time.sleep(3.5)  # past the session timeout: the server expires it
        table.set_fault(ZOOKEEPER_LINK, B, HEALTHY)
        write.join(20)
        read.join(20)
        assert isinstance(wrote.get("error"), SessionExpiredError)
        assert "value" in got and client.session_id not in (0, session)
        assert client.get("/after") is None  # the expired session's write was not made in the next one
    finally:
        client.close()
        table.close()


class NoBrokers:
    """The controller's links to brokers, in a cluster that has none."""

    def send(self, requests) -> None:
        assert not requests

    def shutdown(self) -> None:
        pass


def test_a_controller_event_that_fails_is_answered_with_its_error_and_the_controller_moves(chroot_connect):
    """An event whose handler raises (here: its ZooKeeper client closed under it) is not dropped
    silently: `process` gives its error (the actor counts it and writes it in controller_events.jsonl)
    and the controller resigns and gives /controller up, so that the next one starts from ZooKeeper."""
    from actors.controller.controller import KafkaController
    from actors.controller.events import ControllerChange, ControllerEventManager, Startup, TopicChange

    zk = KrayZkClient(chroot_connect).start()
    zk.ensure_persistent_paths()
    controller = KafkaController(1, zk, ControllerEventManager("test-inbox", lambda event: None),
                                 channel_factory=lambda epoch: NoBrokers())
    assert controller.process(Startup()) is None and controller.process(ControllerChange()) is None
    assert controller.active and zk.get_controller_id() == 1
    zk.close()
    error = controller.process(TopicChange())
    assert error is not None and error.startswith("ConnectionClosedError") and not controller.active
