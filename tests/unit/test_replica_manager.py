"""The broker side of controller requests: ReplicaManager epoch checks and MetadataCache."""
from __future__ import annotations

import pytest

from actors.broker.metadata_cache import LEADER_DURING_DELETE, MetadataCache
from actors.broker.partition import LeaderAndIsrState
from actors.broker.replica_manager import UNKNOWN_BROKER_EPOCH, ReplicaManager, role
from actors.config import BrokerConfig
from actors.protocol import (
    LeaderAndIsrRequest,
    LiveBroker,
    PartitionState,
    StopReplicaPartition,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

BROKER = 1
MAX_BYTES = BrokerConfig().message_max_bytes
BROKER_EPOCH = 500
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
T2 = TopicPartition("t", 2)


def ps(tp, leader, leader_epoch, isr=(1, 2, 3), replicas=(1, 2, 3), controller_epoch=1, zk_version=0):
    return PartitionState(topic=tp.topic, partition=tp.partition, controller_epoch=controller_epoch, leader=leader,
                          leader_epoch=leader_epoch, isr=tuple(isr), zk_version=zk_version, replicas=tuple(replicas))


def lai(*states, controller_epoch=1, broker_epoch=BROKER_EPOCH, controller_id=9):
    return LeaderAndIsrRequest(controller_id=controller_id, controller_epoch=controller_epoch,
                               broker_epoch=broker_epoch, partition_states=list(states), live_leaders=[])


def stop(*partitions, controller_epoch=1, broker_epoch=BROKER_EPOCH):
    return StopReplicaRequest(controller_id=9, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
                              partitions=list(partitions))


def errors(response):
    return {TopicPartition(e.topic, e.partition): e.error_code for e in response.partition_errors}


def roles(rm):
    return {tp: role(r, rm.broker_id) for tp, r in rm.replicas.items()}


@pytest.fixture
def rm(tmp_path):
    return ReplicaManager(BROKER, tmp_path)


# -- LeaderAndIsr ----------------------------------------------------------------------------------

def test_first_leader_and_isr_applies_roles(rm):
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), ps(T1, leader=2, leader_epoch=0)),
                                        BROKER_EPOCH)
    assert resp.api == "LeaderAndIsr"
    assert resp.broker_id == BROKER
    assert resp.error_code == Errors.NONE
    assert [(e.topic, e.partition, e.error_code) for e in resp.partition_errors] == [
        ("t", 0, Errors.NONE), ("t", 1, Errors.NONE)]
    assert roles(rm) == {T0: "Leader", T1: "Follower"}
    assert rm.replicas[T0] == LeaderAndIsrState(leader=1, leader_epoch=0, isr=(1, 2, 3), replicas=(1, 2, 3), zk_version=0,
                                                controller_epoch=1)
    assert rm.controller_epoch == 1


def test_newer_leader_epoch_replaces_state(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=3)), BROKER_EPOCH)
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=4, isr=(2, 3), zk_version=7)),
                                        BROKER_EPOCH)
    assert errors(resp) == {T0: Errors.NONE}
    assert roles(rm) == {T0: "Follower"}
    assert rm.replicas[T0] == LeaderAndIsrState(2, 4, (2, 3), (1, 2, 3), 7, controller_epoch=1)


@pytest.mark.parametrize("epoch", [5, 4, 0])
def test_equal_or_older_leader_epoch_is_stale(rm, epoch):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=5, zk_version=2)), BROKER_EPOCH)
    before = dict(rm.replicas)
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=epoch, isr=(2,))), BROKER_EPOCH)
    assert resp.error_code == Errors.NONE
    assert errors(resp) == {T0: Errors.STALE_CONTROLLER_EPOCH}
    assert rm.replicas == before
    assert roles(rm) == {T0: "Leader"}


def test_stale_partition_does_not_block_others(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=5)), BROKER_EPOCH)
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=5), ps(T1, leader=1, leader_epoch=0)),
                                        BROKER_EPOCH)
    assert errors(resp) == {T0: Errors.STALE_CONTROLLER_EPOCH, T1: Errors.NONE}
    assert roles(rm) == {T0: "Leader", T1: "Leader"}


def test_partition_not_assigned_to_this_broker(rm):
    resp = rm.become_leader_or_follower(
        lai(ps(T0, leader=2, leader_epoch=0, isr=(2, 3), replicas=(2, 3)), ps(T1, leader=1, leader_epoch=0)),
        BROKER_EPOCH)
    assert errors(resp) == {T0: Errors.UNKNOWN_TOPIC_OR_PARTITION, T1: Errors.NONE}
    assert T0 not in rm.replicas
    assert set(rm.replicas) == {T1}


def test_lower_controller_epoch_refused_whole(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), controller_epoch=7), BROKER_EPOCH)
    before = dict(rm.replicas)
    resp = rm.become_leader_or_follower(
        lai(ps(T0, leader=2, leader_epoch=9), ps(T1, leader=1, leader_epoch=0), controller_epoch=6), BROKER_EPOCH)
    assert resp.error_code == Errors.STALE_CONTROLLER_EPOCH
    assert resp.partition_errors == ()
    assert rm.replicas == before
    assert rm.controller_epoch == 7


def test_equal_and_higher_controller_epoch_accepted(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), controller_epoch=7), BROKER_EPOCH)
    resp = rm.become_leader_or_follower(lai(ps(T1, leader=1, leader_epoch=0), controller_epoch=7), BROKER_EPOCH)
    assert resp.error_code == Errors.NONE
    resp = rm.become_leader_or_follower(lai(ps(T2, leader=2, leader_epoch=0), controller_epoch=8), BROKER_EPOCH)
    assert resp.error_code == Errors.NONE
    assert rm.controller_epoch == 8
    assert roles(rm) == {T0: "Leader", T1: "Leader", T2: "Follower"}


def test_stale_broker_epoch_refused_whole(rm):
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), controller_epoch=3,
                                            broker_epoch=BROKER_EPOCH - 1), BROKER_EPOCH)
    assert resp.error_code == Errors.STALE_BROKER_EPOCH
    assert resp.partition_errors == ()
    assert rm.replicas == {}
    assert rm.controller_epoch == 0  # a refused request does not adopt its controller epoch


def test_broker_epoch_checked_before_controller_epoch(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), controller_epoch=5), BROKER_EPOCH)
    resp = rm.become_leader_or_follower(lai(ps(T1, leader=1, leader_epoch=0), controller_epoch=4,
                                            broker_epoch=BROKER_EPOCH - 10), BROKER_EPOCH)
    assert resp.error_code == Errors.STALE_BROKER_EPOCH


def test_unknown_broker_epoch_is_accepted(rm):
    assert UNKNOWN_BROKER_EPOCH == -1
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), broker_epoch=-1), BROKER_EPOCH)
    assert resp.error_code == Errors.NONE
    assert errors(resp) == {T0: Errors.NONE}
    assert roles(rm) == {T0: "Leader"}


def test_newer_broker_epoch_is_accepted(rm):
    # Kafka: the controller may learn a broker's new epoch before the broker itself does
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), broker_epoch=BROKER_EPOCH + 1),
                                        BROKER_EPOCH)
    assert resp.error_code == Errors.NONE
    assert T0 in rm.replicas


def test_empty_request_adopts_controller_epoch(rm):
    resp = rm.become_leader_or_follower(lai(controller_epoch=12), BROKER_EPOCH)
    assert resp.error_code == Errors.NONE and resp.partition_errors == ()
    assert rm.controller_epoch == 12


def test_check_request_for_update_metadata(rm):
    um = UpdateMetadataRequest(controller_id=9, controller_epoch=4, broker_epoch=BROKER_EPOCH,
                               partition_states=[], live_brokers=[])
    assert rm.check_request(um, BROKER_EPOCH) == Errors.NONE
    assert rm.controller_epoch == 4
    old = um.model_copy(update={"controller_epoch": 3})
    assert rm.check_request(old, BROKER_EPOCH) == Errors.STALE_CONTROLLER_EPOCH
    assert rm.check_request(um, BROKER_EPOCH + 1) == Errors.STALE_BROKER_EPOCH
    assert rm.controller_epoch == 4


# -- StopReplica ----------------------------------------------------------------------------------

def _with_partitions(rm, epoch=3):
    rm.become_leader_or_follower(
        lai(ps(T0, leader=1, leader_epoch=epoch), ps(T1, leader=2, leader_epoch=epoch),
            ps(T2, leader=3, leader_epoch=epoch)), BROKER_EPOCH)
    assert set(rm.replicas) == {T0, T1, T2}


def test_stop_replicas_removes_partitions(rm):
    _with_partitions(rm)
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0),
                                 StopReplicaPartition(topic="t", partition=2, delete_partition=True)), BROKER_EPOCH)
    assert resp.api == "StopReplica"
    assert resp.error_code == Errors.NONE
    assert errors(resp) == {T0: Errors.NONE, T2: Errors.NONE}
    assert set(rm.replicas) == {T1}


def test_stop_replicas_with_newer_leader_epoch_and_sentinels(rm):
    _with_partitions(rm, epoch=3)
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0, leader_epoch=4),
                                 StopReplicaPartition(topic="t", partition=1, leader_epoch=-1),
                                 StopReplicaPartition(topic="t", partition=2, leader_epoch=-2)), BROKER_EPOCH)
    assert errors(resp) == {T0: Errors.NONE, T1: Errors.NONE, T2: Errors.NONE}
    assert rm.replicas == {}


def test_stop_replicas_unknown_partition_is_fine(rm):
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="nope", partition=5)), BROKER_EPOCH)
    assert errors(resp) == {TopicPartition("nope", 5): Errors.NONE}


def test_stop_replicas_older_leader_epoch_fenced(rm):
    _with_partitions(rm, epoch=3)
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0, leader_epoch=2)), BROKER_EPOCH)
    assert errors(resp) == {T0: Errors.FENCED_LEADER_EPOCH}
    assert T0 in rm.replicas


def test_stop_replicas_equal_leader_epoch_fenced_as_in_kafka(rm):
    _with_partitions(rm, epoch=3)
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0, leader_epoch=3)), BROKER_EPOCH)
    assert errors(resp) == {T0: Errors.FENCED_LEADER_EPOCH}
    assert T0 in rm.replicas


def test_stop_replicas_stale_controller_epoch(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), controller_epoch=5), BROKER_EPOCH)
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0), controller_epoch=4), BROKER_EPOCH)
    assert resp.error_code == Errors.STALE_CONTROLLER_EPOCH
    assert resp.partition_errors == ()
    assert T0 in rm.replicas


def test_stop_replicas_stale_broker_epoch(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0)), BROKER_EPOCH)
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0), broker_epoch=1), BROKER_EPOCH)
    assert resp.error_code == Errors.STALE_BROKER_EPOCH
    assert T0 in rm.replicas


def test_local_replica_role():
    r = LeaderAndIsrState(leader=3, leader_epoch=0, isr=(3,), replicas=(3, 4), zk_version=0)
    assert role(r, 3) == "Leader"
    assert role(r, 4) == "Follower"


def test_replicas_get_logs_that_stop_replica_keeps_or_deletes(rm, tmp_path):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), ps(T1, leader=2, leader_epoch=0)),
                                 BROKER_EPOCH)
    assert (tmp_path / "t-0").is_dir() and (tmp_path / "t-1").is_dir()
    assert rm.partition(T0).is_leader and not rm.partition(T1).is_leader
    rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0, delete_partition=True),
                          StopReplicaPartition(topic="t", partition=1)), BROKER_EPOCH)
    assert not (tmp_path / "t-0").exists()  # deleted with the topic
    assert (tmp_path / "t-1").is_dir()  # only stopped: the log stays for when the replica returns


def test_high_watermarks_are_checkpointed_and_read_back(rm, tmp_path):
    from actors.broker.records import Record
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1,))), BROKER_EPOCH)
    rm.partition(T0).append_as_leader([Record(-1, -1, 0, None, b"x")] * 3, 1, 1)
    assert rm.partition(T0).high_watermark == 3  # alone in the ISR
    rm.checkpoint_high_watermarks()
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 3\n"
    again = ReplicaManager(BROKER, tmp_path)
    again.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=1)), BROKER_EPOCH)
    assert again.partition(T0).high_watermark == 3 and again.partition(T0).log.log_end_offset == 3


def test_an_idle_fetch_long_polls_and_an_append_wakes_it(rm):
    """A follower's fetch with nothing to read waits up to max_wait_ms (no spinning), and returns as
    soon as a produce appends."""
    import threading
    import time

    from actors.data_protocol import FetchPartition, FetchRequest, ProducePartition, ProduceRequest
    from actors.broker.records import Record

    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)
    request = FetchRequest(replica_id=2, max_wait_ms=400, partitions=[FetchPartition("t", 0, 0, 0)])
    started = time.monotonic()
    response, _ = rm.fetch(request, lambda: 0)
    assert time.monotonic() - started >= 0.35 and list(response.partitions[0].records) == []
    produce = ProduceRequest(acks=1, partitions=[ProducePartition("t", 0, [Record(-1, -1, 0, None, b"x")])])
    threading.Timer(0.1, rm.append_records, (produce, 1, MAX_BYTES)).start()
    request = request.model_copy(update={"max_wait_ms": 30_000})
    response, _ = rm.fetch(request, lambda: 0)
    assert [r.value for r in response.partitions[0].records] == [b"x"]  # woken by the append, not the timeout


def test_a_fetch_with_a_partition_error_is_answered_at_once(rm):
    """A follower still fetching in the leader epoch before an ISR change (its LeaderAndIsr is on the
    way) learns of it now, not after max_wait_ms: waiting would hold acks=all for that partition until
    some other append woke the fetch."""
    import time

    from actors.data_protocol import FetchPartition, FetchRequest

    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2)),
                                     ps(T1, leader=1, leader_epoch=3, isr=(1, 2))), BROKER_EPOCH)
    request = FetchRequest(replica_id=2, max_wait_ms=30_000,
                           partitions=[FetchPartition("t", 0, 0, 0), FetchPartition("t", 1, 0, 2)])
    started = time.monotonic()
    response, _ = rm.fetch(request, lambda: 0)
    assert time.monotonic() - started < 5
    assert [p.error_code for p in response.partitions] == [Errors.NONE, Errors.FENCED_LEADER_EPOCH]


def test_a_fetch_whose_log_diverged_is_answered_at_once_with_where_to_truncate(rm):
    """KIP-320: a follower whose last record's epoch the leader's log ends earlier gets the diverging
    epoch now, not after max_wait_ms, beside the other partitions' answers."""
    import time

    from actors.broker.records import Record
    from actors.data_protocol import FetchPartition, FetchRequest

    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=2, isr=(1,)),
                                     ps(T1, leader=1, leader_epoch=2, isr=(1,))), BROKER_EPOCH)
    rm.partition(T0).append_as_leader([Record(-1, -1, 0, None, b"x")] * 3, 1, 1)
    request = FetchRequest(replica_id=2, max_wait_ms=30_000, partitions=[
        FetchPartition("t", 0, 4, 2, MAX_BYTES, last_fetched_epoch=1),  # had offset 3 in epoch 1: not here
        FetchPartition("t", 1, 0, 2, MAX_BYTES, last_fetched_epoch=-1)])
    started = time.monotonic()
    response, expand = rm.fetch(request, lambda: 0)
    assert time.monotonic() - started < 5
    assert [(p.error_code, p.diverging_epoch, len(p.records)) for p in response.partitions] == \
        [(Errors.NONE, (1, 0), 0), (Errors.NONE, None, 0)]
    assert expand == [T1]  # caught up on T1; on T0 its fetch offset says nothing of what it has


def test_a_fetch_session_keeps_unnamed_partitions_caught_up_and_answers_only_news(rm):
    """KIP-227 at the leader: an incremental fetch naming no partition still covers the whole session
    (an idle follower stays in sync), long-polls until an append to any of them, and carries only the
    partition with records."""
    import threading
    import time

    from actors.broker.records import Record
    from actors.data_protocol import FetchPartition, FetchRequest, ProducePartition, ProduceRequest

    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2)),
                                     ps(T1, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)
    t0 = int(time.time() * 1000)
    full = FetchRequest(replica_id=2, session_epoch=0, max_wait_ms=0,
                        partitions=[FetchPartition("t", 0, 0, 0), FetchPartition("t", 1, 0, 0)])
    response, _ = rm.fetch(full, lambda: t0 + 1000)
    assert response.session_id != 0 and [p.partition for p in response.partitions] == [0, 1]
    produce = ProduceRequest(acks=1, partitions=[ProducePartition("t", 1, [Record(-1, -1, 0, None, b"x")])])
    threading.Timer(0.2, rm.append_records, (produce, 1, MAX_BYTES)).start()
    incremental = FetchRequest(replica_id=2, session_id=response.session_id, session_epoch=1, max_wait_ms=30_000,
                               partitions=[])
    started = time.monotonic()
    response, _ = rm.fetch(incremental, lambda: t0 + 20_000)
    assert 0.15 < time.monotonic() - started < 5  # long-polled, woken by the append
    assert [(p.partition, [r.value for r in p.records]) for p in response.partitions] == [(1, [b"x"])]
    assert T0 not in rm.isr_shrinks(t0 + 25_000, 10_000)  # caught up as of the incremental fetch
    stale = incremental.model_copy(update={"max_wait_ms": 0})  # the same epoch again: out of turn
    response, _ = rm.fetch(stale, lambda: t0 + 20_000)
    assert (response.error_code, list(response.partitions)) == (Errors.INVALID_FETCH_SESSION_EPOCH, [])


def test_a_session_passes_over_caught_up_partitions_but_keeps_their_follower_in_sync(rm):
    """A round's cost follows what changed: partitions whose follower is caught up and has the high
    watermark are not read (their follower state is left as it was), but at least every
    caught_up_refresh_ms (3 s here), so that a follower fetching steadily stays in the ISR under a
    replica.lag.time.max.ms longer than that, and one that stops is still removed (at most 3 s early)."""
    import time

    from actors.broker.records import Record
    from actors.data_protocol import FetchPartition, FetchRequest, ProducePartition, ProduceRequest

    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2), replicas=(1, 2)),
                                     ps(T1, leader=1, leader_epoch=0, isr=(1, 2), replicas=(1, 2))), BROKER_EPOCH)
    t0 = int(time.time() * 1000) + 1_000  # the clock given to fetches: ms after t0
    response, _ = rm.fetch(FetchRequest(replica_id=2, session_epoch=0, max_wait_ms=0, partitions=[
        FetchPartition("t", 0, 0, 0), FetchPartition("t", 1, 0, 0)]), lambda: t0 + 1_000)
    session, epoch, visits, t1_offset = response.session_id, 1, set(), 0
    for now in range(1_500, 20_001, 500):
        changed = []
        if now == 10_000:  # one record to T1: only T1 is read and answered, and named in the next fetch
            rm.append_records(ProduceRequest(acks=1, partitions=[
                ProducePartition("t", 1, [Record(-1, -1, 0, None, b"x")])]), 1, MAX_BYTES)
        elif now == 10_500:
            changed, t1_offset = [FetchPartition("t", 1, 1, 0)], 1
        response, _ = rm.fetch(FetchRequest(replica_id=2, session_id=session, session_epoch=epoch, max_wait_ms=0,
                                            partitions=changed), lambda: t0 + now)
        epoch += 1
        assert [p.partition for p in response.partitions] == ([1] if now in (10_000, 10_500) else [])
        if rm.partition(T0).followers[2].last_fetch_ms == t0 + now:
            visits.add(now)
        assert rm.isr_shrinks(t0 + now, 4_000) == {}
    assert visits == {4_000, 7_000, 10_000, 13_000, 16_000, 19_000}  # T0 read every 3 s, not every 500 ms
    assert rm.partition(T1).followers[2].log_end_offset == t1_offset == 1
    assert rm.isr_shrinks(t0 + 21_000, 4_000) == {}  # stopped fetching at 20 s: not out before 20 + 4 - 3 s
    assert set(rm.isr_shrinks(t0 + 24_001, 4_000)) == {T0, T1}


def test_a_fetch_older_than_its_fetchers_partitions_is_answered_at_once(rm):
    """The follower's nudge (wake_fetches with its fetcher's partition count) may reach the leader before
    the fetch it means to end: that fetch is still answered at once, not after max_wait_ms. A newer fetch,
    or one from the follower's next incarnation (a newer broker epoch), long-polls as usual."""
    import threading
    import time

    from actors.data_protocol import FetchPartition, FetchRequest

    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)

    def waited(epoch: int, version: int, max_wait_ms: int = 400) -> float:
        request = FetchRequest(replica_id=2, replica_epoch=epoch, partitions_version=version, max_wait_ms=max_wait_ms,
                               partitions=[FetchPartition("t", 0, 0, 0)])
        started = time.monotonic()
        rm.fetch(request, lambda: 0)
        return time.monotonic() - started

    rm.wake_fetches(2, 7, 3)  # the nudge arrives first
    assert waited(7, 2) < 0.1  # built before the fetcher took on its third batch of partitions
    assert waited(7, 3) >= 0.35  # built with them: nothing to read, so it waits
    assert waited(8, 0) >= 0.35  # the follower restarted: its counts start again
    rm.wake_fetches(2, 6, 99)  # a late nudge from an earlier incarnation changes nothing
    assert waited(7, 3) >= 0.35
    threading.Timer(0.1, rm.wake_fetches, (2, 7, 4)).start()  # the nudge arrives while the fetch waits
    assert waited(7, 3, max_wait_ms=30_000) < 5


@pytest.mark.parametrize("acks, expected", [(0, Errors.NONE), (1, Errors.NONE), (-1, Errors.REQUEST_TIMED_OUT)])
def test_acks_decide_what_a_produce_waits_for(rm, acks, expected):
    """acks=0 and acks=1 are answered once the leader has the records; acks=all waits for the ISR (here a
    follower that never fetches) until the request's timeout. The records are in the leader's log either way."""
    import time

    from actors.broker.records import Record
    from actors.data_protocol import ProducePartition, ProduceRequest

    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)
    request = ProduceRequest(acks=acks, timeout_ms=300, partitions=[
        ProducePartition("t", 0, [Record(-1, -1, 0, None, b"a"), Record(-1, -1, 0, None, b"b")])])
    started = time.monotonic()
    result = rm.append_records(request, min_insync_replicas=1, message_max_bytes=MAX_BYTES).results[0]
    waited = time.monotonic() - started
    assert (result.error_code, result.base_offset, result.last_offset) == (expected, 0, 1)
    assert (waited >= 0.25) == (acks == -1)
    assert rm.partition(T0).log.log_end_offset == 2 and rm.partition(T0).high_watermark == 0


def test_a_batch_larger_than_message_max_bytes_is_refused_whole(rm):
    """Kafka's RecordTooLargeException (MESSAGE_TOO_LARGE): nothing of that batch is appended, and the
    other partitions of the same request are not held back by it."""
    from actors.broker.records import Record, entry_size
    from actors.data_protocol import ProducePartition, ProduceRequest

    t1 = TopicPartition("t", 1)
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1,)), ps(t1, leader=1, leader_epoch=0,
                                                                                       isr=(1,))), BROKER_EPOCH)
    small = [Record(-1, -1, 0, None, b"x" * 100)]
    limit = 3 * entry_size(small[0])
    fits = small * 3
    too_big = small * 4
    request = ProduceRequest(acks=1, partitions=[ProducePartition("t", 0, too_big), ProducePartition("t", 1, fits)])
    results = {r.partition: r for r in rm.append_records(request, 1, message_max_bytes=limit).results}
    assert results[0].error_code == Errors.MESSAGE_TOO_LARGE and "message.max.bytes" in results[0].error_message
    assert results[1].error_code == Errors.NONE and results[1].last_offset == 2
    assert rm.partition(T0).log.log_end_offset == 0 and rm.partition(t1).log.log_end_offset == 3


# -- MetadataCache ----------------------------------------------------------------------------------

def um(*states, brokers=(1, 2, 3), controller_id=9):
    return UpdateMetadataRequest(
        controller_id=controller_id, controller_epoch=1, broker_epoch=BROKER_EPOCH, partition_states=list(states),
        live_brokers=[LiveBroker(id=b, host=f"h{b}", port=9090 + b) for b in brokers])


def test_metadata_cache_initially_empty():
    cache = MetadataCache()
    assert cache.controller_id is None
    assert cache.alive_brokers == {} and cache.partitions == {}
    assert cache.leader_and_isr() == {}


def test_metadata_cache_stores_states_and_brokers():
    cache = MetadataCache()
    s0 = ps(T0, leader=1, leader_epoch=2, isr=(1, 2))
    deleted = cache.update(um(s0, ps(T1, leader=3, leader_epoch=0, isr=(3,)), controller_id=2))
    assert deleted == []
    assert cache.controller_id == 2
    assert sorted(cache.alive_brokers) == [1, 2, 3]
    assert cache.alive_brokers[2] == LiveBroker(id=2, host="h2", port=9092)
    assert cache.partitions[T0] == s0
    assert cache.leader_and_isr() == {T0: (1, 2, [1, 2]), T1: (3, 0, [3])}


def test_metadata_cache_replaces_live_brokers_and_merges_partitions():
    cache = MetadataCache()
    cache.update(um(ps(T0, leader=1, leader_epoch=0), brokers=(1, 2, 3)))
    cache.update(um(ps(T1, leader=2, leader_epoch=0), brokers=(2, 4), controller_id=4))
    assert sorted(cache.alive_brokers) == [2, 4]
    assert cache.controller_id == 4
    assert set(cache.partitions) == {T0, T1}  # partitions not mentioned are kept
    cache.update(um(ps(T0, leader=3, leader_epoch=1, isr=(3,)), brokers=()))
    assert cache.alive_brokers == {}
    assert cache.leader_and_isr()[T0] == (3, 1, [3])


def test_metadata_cache_leader_during_delete_removes_partition():
    assert LEADER_DURING_DELETE == -2
    cache = MetadataCache()
    cache.update(um(ps(T0, leader=1, leader_epoch=0), ps(T1, leader=2, leader_epoch=0)))
    deleted = cache.update(um(ps(T0, leader=-2, leader_epoch=0)))
    assert deleted == [T0]
    assert set(cache.partitions) == {T1}
    assert T0 not in cache.leader_and_isr()


def test_metadata_cache_no_leader_is_kept():
    cache = MetadataCache()
    deleted = cache.update(um(ps(T0, leader=-1, leader_epoch=3, isr=())))
    assert deleted == []
    assert cache.leader_and_isr() == {T0: (-1, 3, [])}
