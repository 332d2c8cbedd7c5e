"""The broker's ReplicaManager (replica_manager.py): its logs on disk and high watermark checkpoints,
produce and fetch with their purgatories (delayed_operations.py), which followers a fetch takes back
into the ISR, fetch sessions' lifecycle (KIP-227), consumers' fetches from followers, and list offsets.
Its controller requests are in test_controller_requests.py, its MetadataCache in test_metadata_cache.py."""
from __future__ import annotations

import asyncio
import time

import pytest

from actors.broker.errors import FencedLeaderEpochException, NotLeaderOrFollowerException
from actors.broker.log.batches import assign_offsets, build, decode_records
from actors.broker.log.log import read_recovery_point
from actors.broker.log.log_config import LogConfig
from actors.broker.metadata_cache import MetadataCache
from actors.broker.replica_manager import ReplicaManager, now_ms
from actors.config import BrokerConfig
from actors.data_protocol import FetchPartition
from actors.protocol import StopReplicaPartition
from coordination.errors import Errors
from tests.unit.replica_manager_helpers import (BROKER, BROKER_EPOCH, CONFIG_FOR, MAX_BYTES, T0, T1, T2, batch, fetch,
                                                follower_epoch, lai, ps, stop)
from tests.unit.replica_manager_helpers import rm  # noqa: F401 (the fixture)

def values(records: bytes) -> list[bytes]:
    return [r.value for r in decode_records(records)]


# -- logs on disk ----------------------------------------------------------------------------------

def test_the_logs_on_disk_are_opened_at_start_and_taken_by_the_first_leader_and_isr(rm, tmp_path):
    """Kafka's LogManager loads every log before the broker registers: the LeaderAndIsr after a restart
    takes the replica opened then (its log and producer state); one no LeaderAndIsr names is still deleted
    by a StopReplica with its topic."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1,)),
                                     ps(T1, leader=1, leader_epoch=0, isr=(1,))), BROKER_EPOCH)
    rm.partition(T0).append_as_leader(batch(3), 1)
    rm.partition(T1).append_as_leader(batch(1), 1)
    rm.checkpoint_high_watermarks()
    again = ReplicaManager(BROKER, tmp_path, CONFIG_FOR)
    assert again.load_logs() == 2 and again.load_logs() == 2 and again.partitions == {}
    assert again.high_watermarks_by_dir() == {tmp_path: [("t", 0, 3), ("t", 1, 1)]}  # a checkpoint keeps theirs
    opened = again._loaded[T0]
    again.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=1)), BROKER_EPOCH)
    assert again.partition(T0) is opened and opened.log.log_end_offset == 3 and T0 not in again._loaded
    again.stop_replicas(stop(StopReplicaPartition(topic="t", partition=1, delete_partition=True)), BROKER_EPOCH)
    assert not (tmp_path / "t-1").exists() and again._loaded == {}


def test_high_watermarks_are_checkpointed_and_read_back(rm, tmp_path):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1,))), BROKER_EPOCH)
    rm.partition(T0).append_as_leader(batch(3), 1)
    assert rm.partition(T0).high_watermark == 3  # alone in the ISR
    assert read_recovery_point(tmp_path / "t-0") == 0  # nothing flushed yet: the segment has not rolled
    rm.checkpoint_high_watermarks()
    assert read_recovery_point(tmp_path / "t-0") == 3  # flushed at shutdown, as Kafka's LogManager does
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 3\n"
    again = ReplicaManager(BROKER, tmp_path, CONFIG_FOR)
    again.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=1)), BROKER_EPOCH)
    assert again.partition(T0).high_watermark == 3 and again.partition(T0).log.log_end_offset == 3


# -- produce and fetch, on an event loop as in the broker -------------------------------------------

def later(delay_s: float, fn) -> None:
    asyncio.get_running_loop().call_later(delay_s, fn)


def run(coroutine):
    return asyncio.run(coroutine)


def test_an_idle_fetch_long_polls_and_an_append_wakes_it(rm):
    """A follower's fetch with nothing to read waits up to max_wait_ms (no thread, no spinning), and
    returns as soon as a produce appends."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)

    async def scenario():
        started = time.monotonic()
        result = await rm.fetch(fetch(partitions=[FetchPartition("t", 0, 0, 0)], max_wait_ms=400))
        assert time.monotonic() - started >= 0.35 and result.partitions[0].records == b""
        later(0.1, lambda: asyncio.ensure_future(rm.append_records(1, 1000, [(T0, batch(1))])))
        started = time.monotonic()
        result = await rm.fetch(fetch(partitions=[FetchPartition("t", 0, 0, 0)], max_wait_ms=30_000))
        assert time.monotonic() - started < 5  # woken by the append, not the timeout
        return result

    assert values(run(scenario()).partitions[0].records) == [b"v0"]


def test_a_fetch_with_a_partition_error_is_answered_at_once(rm):
    """A follower still fetching in the leader epoch before an ISR change (its LeaderAndIsr is on the
    way) learns of it now, not after max_wait_ms; a newer epoch than the leader's is not known yet."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2)),
                                     ps(T1, leader=1, leader_epoch=3, isr=(1, 2)),
                                     ps(T2, leader=1, leader_epoch=3, isr=(1, 2))), BROKER_EPOCH)
    started = time.monotonic()
    result = run(rm.fetch(fetch(partitions=[FetchPartition("t", 0, 0, 0), FetchPartition("t", 1, 0, 2),
                                               FetchPartition("t", 2, 0, 4)], max_wait_ms=30_000)))
    assert time.monotonic() - started < 5
    assert [p.error_code for p in result.partitions] == [Errors.NONE, Errors.FENCED_LEADER_EPOCH,
                                                        Errors.UNKNOWN_LEADER_EPOCH]


def test_a_fetch_whose_log_diverged_is_answered_at_once_with_where_to_truncate(rm):
    """KIP-320: a follower whose last batch's epoch the leader's log ends earlier gets the diverging
    epoch now, not after max_wait_ms, beside the other partitions' answers."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=2, isr=(1,)),
                                     ps(T1, leader=1, leader_epoch=2, isr=(1,))), BROKER_EPOCH)
    rm.partition(T0).append_as_leader(batch(3), 1)
    expanded = []
    rm.expand_isr = lambda replica, tps: expanded.append((replica, tps))
    started = time.monotonic()
    result = run(rm.fetch(fetch(partitions=[
        FetchPartition("t", 0, 4, 2, MAX_BYTES, last_fetched_epoch=1),  # had offset 3 in epoch 1: not here
        FetchPartition("t", 1, 0, 2, MAX_BYTES, last_fetched_epoch=-1)], max_wait_ms=30_000)))
    assert time.monotonic() - started < 5
    assert [(p.error_code, p.diverging_epoch, len(p.records)) for p in result.partitions] == \
        [(Errors.NONE, (1, 0), 0), (Errors.NONE, None, 0)]
    assert expanded == [(2, [T1])]  # caught up on T1; on T0 its fetch offset says nothing of what it has


def test_a_fetch_session_reads_only_named_and_changed_partitions_and_answers_only_news(rm):
    """KIP-227 at the leader: an incremental fetch naming no partition long-polls until an append to any
    of the session's partitions, reads only that one and carries only it; an idle follower stays in
    sync through its session's fetches."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2)),
                                     ps(T1, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)
    read = []
    original = rm._read
    rm._read = lambda params, partitions, now, session=None, **kw: read.append(sorted(p.partition for p in partitions)) \
        or original(params, partitions, now, session, **kw)

    async def scenario():
        result = await rm.fetch(fetch(partitions=[FetchPartition("t", 0, 0, 0), FetchPartition("t", 1, 0, 0)],
                                         session_epoch=0))
        assert result.session_id != 0 and [p.partition for p in result.partitions] == [0, 1]
        later(0.2, lambda: asyncio.ensure_future(rm.append_records(1, 1000, [(T1, batch(1))])))
        started = time.monotonic()
        incremental = await rm.fetch(fetch(session_id=result.session_id, session_epoch=1, max_wait_ms=30_000))
        assert 0.15 < time.monotonic() - started < 5  # long-polled, woken by the append
        stale = await rm.fetch(fetch(session_id=result.session_id, session_epoch=1))  # out of turn
        return incremental, stale

    incremental, stale = run(scenario())
    assert [(p.partition, values(p.records)) for p in incremental.partitions] == [(1, [b"v0"])]
    assert read == [[0, 1], [], [1]]  # the full fetch, the empty first look, then only what changed
    assert rm.isr_shrinks(now_ms() + 25_000, 30_000) == []
    assert (stale.error_code, stale.partitions) == (Errors.INVALID_FETCH_SESSION_EPOCH, [])


def test_a_caught_up_follower_joins_the_isr_as_its_fetch_arrives_not_after_its_wait(rm):
    """Kafka's maybeExpandIsr runs when the fetch arrives: a follower with the whole (here empty) log is
    taken in before its fetch long-polls."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1,), replicas=(1, 2))), BROKER_EPOCH)
    expanded = []
    rm.expand_isr = lambda replica, tps: expanded.append((replica, tps, time.monotonic()))

    async def scenario():
        later(0.5, rm.wake_fetches)
        started = time.monotonic()
        await rm.fetch(fetch(partitions=[FetchPartition("t", 0, 0, 0)], max_wait_ms=30_000))
        return started, time.monotonic()

    started, answered = run(scenario())
    assert [e[:2] for e in expanded] == [(2, [T0])] and expanded[0][2] - started < 0.2 < answered - started


def test_a_moved_high_watermark_wakes_a_waiting_consumer_but_not_a_waiting_follower(rm):
    """Consumers read below the high watermark, so its move is their news; a follower hears of it with
    its next fetch (Kafka does not complete a follower's DelayedFetch for it either)."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2, 3))), BROKER_EPOCH)
    rm.partition(T0).append_as_leader(batch(1), 1)
    run(rm.fetch(fetch(replica_id=2, partitions=[FetchPartition("t", 0, 1, 0)])))  # follower 2 has it

    async def waited(replica_id: int, offset: int) -> float:
        hw = rm.partition(T0).high_watermark
        later(0.2, lambda: rm.partition(T0).follower_fetched(3, offset or 1, now_ms()))  # 3 has it too
        later(0.3, lambda: moved.append(rm.partition(T0).high_watermark > hw))
        started = time.monotonic()
        await rm.fetch(fetch(replica_id=replica_id, partitions=[FetchPartition("t", 0, offset, 0)], max_wait_ms=1000))
        return time.monotonic() - started

    moved: list[bool] = []
    assert run(waited(-1, 0)) < 0.6  # the consumer's record became readable
    rm.partition(T0).append_as_leader(batch(1), 1)
    run(rm.fetch(fetch(replica_id=2, partitions=[FetchPartition("t", 0, 2, 0)])))
    assert run(waited(2, 2)) >= 0.9  # the follower waited out its max_wait_ms
    assert moved == [True]  # (the consumer's fetch ended before its check) the HW did move meanwhile


def test_a_follower_that_stops_fetching_leaves_the_isr_even_with_a_session(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2), replicas=(1, 2))), BROKER_EPOCH)
    run(rm.fetch(fetch(partitions=[FetchPartition("t", 0, 0, 0)], session_epoch=0)))
    epoch, last = rm.last_session_fetch(2)
    assert epoch == follower_epoch(2)
    assert rm.isr_shrinks(last + 3_000, 4_000) == []
    assert rm.isr_shrinks(last + 4_001, 4_000) == [T0]


def test_the_periodic_tasks_see_the_partitions_led_here_as_roles_and_isrs_change(rm, tmp_path):
    """The ISR-shrink task and the UnderReplicatedPartitions count look only at the partitions led here (an
    index kept as roles and ISRs change); the high-watermark checkpoint is listed again only when a
    partition's high watermark (a follower's too), role or presence changed since it was last listed."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2)), ps(T1, leader=1, leader_epoch=0),
                                     ps(T2, leader=2, leader_epoch=0, isr=(2,))), BROKER_EPOCH)
    assert rm.under_replicated_partitions() == 1  # T0 (T2's ISR is short too, but broker 2 leads it)
    assert sorted(rm.isr_shrinks(now_ms() + 60_000, 30_000)) == [T0, T1]  # no follower has fetched
    listed = rm.high_watermarks_by_dir()
    assert listed == {tmp_path: [("t", 0, 0), ("t", 1, 0), ("t", 2, 0)]}
    assert rm.high_watermarks_by_dir() is listed  # nothing changed since: not listed again
    rm.partition(T2).append_as_follower(bytes(assign_offsets(batch(2), 0, 0)), 2, 0, 0)  # the leader's HW: 2
    assert rm.high_watermarks_by_dir() == {tmp_path: [("t", 0, 0), ("t", 1, 0), ("t", 2, 2)]}  # a follower's HW
    rm.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=1, isr=(1, 2)),
                                     ps(T1, leader=1, leader_epoch=1, isr=(1, 2))), BROKER_EPOCH)
    assert rm.under_replicated_partitions() == 1  # T1 now; T0 is followed here
    assert rm.isr_shrinks(now_ms() + 60_000, 30_000) == [T1]
    rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=1)), BROKER_EPOCH)
    assert rm.under_replicated_partitions() == 0 and rm.isr_shrinks(now_ms() + 60_000, 30_000) == []
    assert rm.high_watermarks_by_dir() == {tmp_path: [("t", 0, 0), ("t", 2, 2)]}


def test_a_replaced_partitions_late_change_leaves_the_new_ones_leadership_indexed(rm):
    """An ISR write that lands after a StopReplica and a new LeaderAndIsr updates the object it started
    from: that stale object's change must not take the new leader's partition out of the led index."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)
    old = rm.partition(T0)
    rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0)), BROKER_EPOCH)
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=1, isr=(1, 2))), BROKER_EPOCH)
    assert rm.partition(T0) is not old and rm.under_replicated_partitions() == 1
    old.update_isr((1,), 1, leader_epoch=0)  # the write it sent as leader at epoch 0 lands on the old object
    assert rm.under_replicated_partitions() == 1 and rm.isr_shrinks(now_ms() + 60_000, 30_000) == [T0]


def test_a_role_change_ends_every_waiting_fetch(rm):
    """A LeaderAndIsr here may give a follower's fetcher new partitions: its waiting fetch answers now."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)

    async def scenario():
        later(0.1, lambda: rm.become_leader_or_follower(lai(ps(T1, leader=1, leader_epoch=0, isr=(1, 2))),
                                                        BROKER_EPOCH))
        started = time.monotonic()
        await rm.fetch(fetch(partitions=[FetchPartition("t", 0, 0, 0)], max_wait_ms=30_000))
        return time.monotonic() - started

    assert run(scenario()) < 5


@pytest.mark.parametrize("acks, expected", [(0, Errors.NONE), (1, Errors.NONE), (-1, Errors.REQUEST_TIMED_OUT)])
def test_acks_decide_what_a_produce_waits_for(rm, acks, expected):
    """acks=0 and acks=1 are answered once the leader has the batch; acks=all waits for the ISR (here a
    follower that never fetches) until the request's timeout. The batch is in the leader's log either way."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)
    started = time.monotonic()
    [result] = run(rm.append_records(acks, 300, [(T0, batch(2))]))
    waited = time.monotonic() - started
    assert (result.error_code, result.base_offset) == (expected, 0)
    assert (waited >= 0.25) == (acks == -1)
    assert rm.partition(T0).log.log_end_offset == 2 and rm.partition(T0).high_watermark == 0


def test_acks_all_is_answered_when_the_followers_fetch_completes_it(rm):
    """Kafka's DelayedProduce: woken by the follower's fetch that moves the high watermark, not by polling."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)

    async def scenario():
        later(0.1, lambda: asyncio.ensure_future(rm.fetch(fetch(partitions=[FetchPartition("t", 0, 2, 0)]))))
        started = time.monotonic()
        [result] = await rm.append_records(-1, 30_000, [(T0, batch(2))])
        return result, time.monotonic() - started

    result, waited = run(scenario())
    assert result.error_code == Errors.NONE and 0.05 < waited < 5


def test_a_batch_larger_than_max_message_bytes_is_refused_whole(rm):
    """Kafka's RecordTooLargeException (MESSAGE_TOO_LARGE): nothing of that batch is appended, and the
    other partitions of the same request are not held back by it."""
    small = batch(1)
    rm.config_for = lambda topic: LogConfig.from_overrides(BrokerConfig(), {"max.message.bytes": str(len(small))})
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1,)),
                                     ps(T1, leader=1, leader_epoch=0, isr=(1,))), BROKER_EPOCH)
    results = {r.partition: r for r in run(rm.append_records(1, 1000, [(T0, batch(40)), (T1, small)]))}
    assert results[0].error_code == Errors.MESSAGE_TOO_LARGE
    assert results[1].error_code == Errors.NONE and results[1].base_offset == 0
    assert rm.partition(T0).log.log_end_offset == 0 and rm.partition(T1).log.log_end_offset == 1


def test_produce_to_a_partition_not_led_here(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=0)), BROKER_EPOCH)
    results = run(rm.append_records(1, 1000, [(T0, batch(1)), (T1, batch(1))]))
    assert [r.error_code for r in results] == [Errors.NOT_LEADER_OR_FOLLOWER] * 2


def test_list_offsets_earliest_latest_and_by_timestamp(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=4, isr=(1, 2))), BROKER_EPOCH)
    rm.partition(T0).append_as_leader(batch(3), 1)
    assert rm.list_offset(T0, -2) == (-1, 0, 4)
    assert rm.list_offset(T0, -1) == (-1, 0, 4)  # a client's latest is the high watermark
    assert rm.list_offset(T0, -1, replica_id=2) == (-1, 3, 4)  # a replica's the log end
    run(rm.fetch(fetch(partitions=[FetchPartition("t", 0, 3, 4)])))
    assert rm.list_offset(T0, -1) == (-1, 3, 4)
    assert rm.list_offset(T0, 500) == (1_000, 0, 4)  # every record of batch() has timestamp 1000
    assert rm.list_offset(T0, 2_000) == (-1, -1, -1)
    with pytest.raises(FencedLeaderEpochException):
        rm.list_offset(T0, -1, current_leader_epoch=3)
    with pytest.raises(NotLeaderOrFollowerException):
        rm.list_offset(T1, -1)


def test_offsets_for_leader_epoch(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=4, isr=(1,))), BROKER_EPOCH)
    rm.partition(T0).append_as_leader(batch(3), 1)
    answers = rm.offsets_for_leader_epoch([("t", 0, 4, 4), ("t", 0, -1, 2), ("t", 0, 3, 4), ("t", 1, -1, 0)])
    assert [(a.error_code, a.leader_epoch, a.end_offset) for a in answers] == [
        (Errors.NONE, 4, 3), (Errors.NONE, 2, 0), (Errors.FENCED_LEADER_EPOCH, -1, -1),
        (Errors.NOT_LEADER_OR_FOLLOWER, -1, -1)]


# -- which followers a fetch takes back into the ISR -----------------------------------------------

def test_a_follower_refused_while_its_broker_was_not_alive_here_joins_at_its_next_fetch_naming_nothing(rm):
    """The race the detector test showed: a returning broker's first (full) fetch reaches the leader
    before the leader's metadata has it alive, and its incremental fetches after it name no partition.
    The leader reads the session's partitions whose ISR the follower is out of at every fetch (Kafka
    reads them all), so the first fetch after the UpdateMetadata takes it in; nothing else does."""
    alive: dict[int, int] = {}
    rm.alive_broker_epoch = alive.get
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1,), replicas=(1, 2)),
                                     ps(T1, leader=1, leader_epoch=0, isr=(1, 2), replicas=(1, 2)),
                                     ps(T2, leader=3, leader_epoch=0, isr=(3, 1), replicas=(3, 1, 2))), BROKER_EPOCH)
    expanded = []
    rm.expand_isr = lambda replica, tps: expanded.append((replica, tps))
    first = run(rm.fetch(fetch(partitions=[FetchPartition("t", 0, 0, 0), FetchPartition("t", 1, 0, 0)],
                               session_epoch=0)))
    assert expanded == []  # not alive here yet
    alive[2] = follower_epoch(2)  # the UpdateMetadata arrives: nothing is expanded by it
    assert expanded == []
    run(rm.fetch(fetch(session_id=first.session_id, session_epoch=1)))  # names nothing
    assert expanded == [(2, [T0])]  # T1 has it already; T2 is not led here


def test_a_restarted_follower_is_not_taken_back_on_what_its_earlier_incarnation_fetched(rm):
    """Issue 28's loss: a follower caught up, its broker lost its unflushed log and registered again. The
    leader forgets what the dead incarnation fetched (the UpdateMetadata that shows it gone or back), a
    fetch still long-polling from the dead one counts for nothing, and the new incarnation joins only
    once its own fetches reach the high watermark."""
    old, new = follower_epoch(2), follower_epoch(2) + 50
    alive = {2: old}
    rm.alive_broker_epoch = alive.get
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2), replicas=(1, 2))), BROKER_EPOCH)
    rm.partition(T0).append_as_leader(batch(3), -1)
    run(rm.fetch(fetch(partitions=[FetchPartition("t", 0, 3, 0)])))  # 2 has all 3: HW 3
    assert rm.partition(T0).high_watermark == 3
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=1, isr=(1,), replicas=(1, 2))), BROKER_EPOCH)
    expanded = []
    rm.expand_isr = lambda replica, tps: expanded.append((replica, tps))
    del alive[2]
    rm.forget_followers({2: -1})  # broker 2 died (the controller took it out of the ISR: epoch 1)
    alive[2] = new
    rm.forget_followers({2: new})  # ... and registered again, its log cut back to nothing
    run(rm.fetch(fetch(partitions=[FetchPartition("t", 0, 3, 1)], replica_epoch=old)))  # the dead one's
    assert expanded == []
    run(rm.fetch(fetch(partitions=[FetchPartition("t", 0, 0, 1)], replica_epoch=new)))  # its own: behind
    assert expanded == [] and rm.partition(T0).followers[2].log_end_offset == 0
    run(rm.fetch(fetch(partitions=[FetchPartition("t", 0, 3, 1)], replica_epoch=new)))  # caught up again
    assert expanded == [(2, [T0])]


def test_a_restarted_follower_elected_leader_answers_a_retry_of_the_old_leaders_last_batch_with_its_offset(
        rm, tmp_path):
    """A broker restarted, followed broker 2 again and was elected (preferred
    leader) holding broker 2's last batch, which broker 2 then answered NOT_LEADER_OR_FOLLOWER. Its
    producer state, read from the log at the restart and kept by every follower append since, answers
    the producer's retry with the batch's offset. The same record under a bumped producer epoch from
    sequence 0 (librdkafka's recovery from an OUT_OF_ORDER_SEQUENCE_NUMBER on another partition) is a
    new record, here as in Kafka (ProducerStateManager.checkSequence): a duplicate seen once in a chaos run."""
    def replicated(replicas: ReplicaManager, offset: int) -> None:  # broker 2's batch: sequence = offset
        records = assign_offsets(build([b"x"], producer_id=7, first_sequence=offset), offset, 1)
        assert replicas.partition(T0).append_as_follower(records, offset, 0, leader_epoch=1)

    rm.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=1)), BROKER_EPOCH)
    for offset in range(3):
        replicated(rm, offset)
    again = ReplicaManager(BROKER, tmp_path, CONFIG_FOR)  # killed and started again
    again.load_logs()
    again.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=1)), BROKER_EPOCH)
    for offset in range(3, 6):
        replicated(again, offset)
    again.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=2)), BROKER_EPOCH)
    [retry] = run(again.append_records(1, 0, [(T0, build([b"x"], producer_id=7, first_sequence=5))]))
    assert (retry.error_code, retry.base_offset, again.partition(T0).log.log_end_offset) == (Errors.NONE, 5, 6)
    [bumped] = run(again.append_records(1, 0, [(T0, build([b"x"], producer_id=7, producer_epoch=1))]))
    assert (bumped.error_code, bumped.base_offset) == (Errors.NONE, 6)


def test_only_the_followers_outside_an_isr_are_indexed_and_consumers_read_only_what_they_name(rm):
    """The partitions a follower's fetch may take it back into follow every role and ISR change, so that
    a fetch reads only those beyond what it names."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2), replicas=(1, 2, 3)),
                                     ps(T1, leader=2, leader_epoch=0, isr=(2,), replicas=(1, 2, 3))), BROKER_EPOCH)
    assert rm._outside_isr == {3: {T0}}
    rm.partition(T0).update_isr((1,), zk_version=1)
    assert rm._outside_isr == {2: {T0}, 3: {T0}}
    rm.become_leader_or_follower(lai(ps(T1, leader=1, leader_epoch=1, isr=(1, 2, 3), replicas=(1, 2, 3))),
                                 BROKER_EPOCH)
    assert rm._outside_isr == {2: {T0}, 3: {T0}}
    rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0, delete_partition=False, leader_epoch=-1)),
                     BROKER_EPOCH)
    assert rm._outside_isr == {2: set(), 3: set()}
    read = []
    original = rm._read
    rm._read = lambda params, partitions, now, session=None, **kw: read.append(sorted(p.partition for p in partitions)) \
        or original(params, partitions, now, session, **kw)
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=5, isr=(1,), replicas=(1, 2))), BROKER_EPOCH)
    session = run(rm.fetch(fetch(replica_id=-1, partitions=[FetchPartition("t", 1, 0, -1)], session_epoch=0)))
    run(rm.fetch(fetch(replica_id=-1, session_id=session.session_id, session_epoch=1)))
    assert read == [[1], []]


# -- fetch sessions' lifecycle (KIP-227) and consumers' fetches from followers -----------------------

def test_a_full_or_final_fetch_naming_a_session_closes_it(rm):
    """Kafka's newContext: a full fetch closes the session it names, then opens a new one at epoch 0 and
    runs without one at -1; neither closed session is found again."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)
    part = [FetchPartition("t", 0, 0, 0)]
    first = run(rm.fetch(fetch(replica_id=-1, partitions=part, session_epoch=0)))
    second = run(rm.fetch(fetch(replica_id=-1, partitions=part, session_id=first.session_id, session_epoch=0)))
    assert second.session_id not in (0, first.session_id) and len(rm.fetch_sessions) == 1
    final = run(rm.fetch(fetch(replica_id=-1, partitions=part, session_id=second.session_id, session_epoch=-1)))
    assert (final.session_id, [p.partition for p in final.partitions], len(rm.fetch_sessions)) == (0, [0], 0)
    for closed in (first, second):
        assert run(rm.fetch(fetch(replica_id=-1, session_id=closed.session_id, session_epoch=1))).error_code == \
            Errors.FETCH_SESSION_ID_NOT_FOUND


def test_an_incremental_fetch_that_empties_its_session_closes_it_and_is_answered_at_once(rm):
    """Kafka's newContext: a session left with no partition is removed and the fetch answered without a
    session (id 0, which the client takes as closed); a fetch of no partition does not long-poll
    (Kafka's fetchMessages answers `fetchInfos.isEmpty` at once)."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)
    first = run(rm.fetch(fetch(partitions=[FetchPartition("t", 0, 0, 0)], session_epoch=0)))
    started = time.monotonic()
    emptied = run(rm.fetch(fetch(session_id=first.session_id, session_epoch=1, forgotten=[("t", 0)],
                                 max_wait_ms=2000)))
    assert time.monotonic() - started < 1.5
    assert (emptied.error_code, emptied.session_id, emptied.partitions, len(rm.fetch_sessions)) == \
        (Errors.NONE, 0, [], 0)
    started = time.monotonic()
    sessionless = run(rm.fetch(fetch(replica_id=-1, max_wait_ms=2000)))
    assert time.monotonic() - started < 1.5 and (sessionless.session_id, sessionless.partitions) == (0, [])


def test_a_full_cache_evicts_only_an_idle_session_or_one_the_newcomer_outranks(rm, monkeypatch):
    """Kafka's FetchSessionCache of max.incremental.fetch.session.cache.slots (1,000): filled by
    followers, it has no room for a consumer (followers' sessions are privileged), whose fetch is
    answered without a session; a session unused for 120 s is evicted for any newcomer."""
    clock = [10_000_000]
    monkeypatch.setattr("actors.broker.replica_manager.now_ms", lambda: clock[0])
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0, isr=(1, 2))), BROKER_EPOCH)
    part = [FetchPartition("t", 0, 0, 0)]
    start = clock[0]

    async def fill():
        sessions = []
        for replica in range(100, 1100):  # one a millisecond
            sessions.append((await rm.fetch(fetch(replica_id=replica, partitions=part, session_epoch=0))).session_id)
            clock[0] += 1
        return sessions

    followers = run(fill())
    assert len(rm.fetch_sessions) == 1000 and 0 not in followers
    clock[0] = start + 60_000
    consumer = run(rm.fetch(fetch(replica_id=-1, partitions=part, session_epoch=0)))
    assert (consumer.session_id, [p.partition for p in consumer.partitions]) == (0, [0])  # answered all the same
    clock[0] = start + 100_000
    assert run(rm.fetch(fetch(replica_id=100, session_id=followers[0], session_epoch=1))).error_code == Errors.NONE
    clock[0] = start + 1 + 120_001  # the second session has been idle for over 120 s, the first was used
    consumer = run(rm.fetch(fetch(replica_id=-1, partitions=part, session_epoch=0)))
    assert consumer.session_id != 0 and len(rm.fetch_sessions) == 1000
    assert run(rm.fetch(fetch(replica_id=101, session_id=followers[1], session_epoch=1))).error_code == \
        Errors.FETCH_SESSION_ID_NOT_FOUND
    assert run(rm.fetch(fetch(replica_id=100, session_id=followers[0], session_epoch=2))).error_code == Errors.NONE


def follower_of_t0(rm, tmp_path, high_watermark: int):
    """This broker (1) a follower of t-0 in leader epoch 3, holding batches of 3 and 2 records (offsets
    0-4) with the leader's high watermark `high_watermark`; the leader (broker 2) has 2 more (5-6)."""
    leader = ReplicaManager(2, tmp_path / "leader", CONFIG_FOR)
    leader.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=3, isr=(2, 1))), BROKER_EPOCH)
    for n in (3, 2, 2):
        leader.partition(T0).append_as_leader(batch(n), 1)
    rm.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=3, isr=(2, 1))), BROKER_EPOCH)
    records = leader.partition(T0).fetch_for_follower(1, 0, 1, now_ms()).records  # one batch at a time
    records += leader.partition(T0).fetch_for_follower(1, 3, 1, now_ms()).records
    assert rm.partition(T0).append_as_follower(records, high_watermark, 0, 3)
    return leader.partition(T0)


def consumer_fetch_request(offset: int, current_leader_epoch: int = -1, session_id: int = 0, session_epoch: int = -1,
                           partitions: bool = True):
    from kafka.protocol.consumer import FetchRequest

    T = FetchRequest.FetchTopic
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        session_id=session_id, session_epoch=session_epoch, topics=[T(topic="t", partitions=[
                            T.FetchPartition(partition=0, current_leader_epoch=current_leader_epoch,
                                             fetch_offset=offset, log_start_offset=-1, partition_max_bytes=1 << 20)])]
                        if partitions else [], forgotten_topics_data=[], rack_id="")


def apis_fetch(rm, version: int, request):
    """KafkaApis' answer to a consumer's Fetch of `version`: [(partition, error, HW, offsets)], session id."""
    from kafka.protocol.consumer import FetchRequest

    from actors.broker.network import wire
    from actors.broker.network.kafka_apis import KafkaApis
    from actors.broker.network.network import RequestContext

    apis = KafkaApis(BROKER, rm, MetadataCache(), lambda: "cluster", lambda: 0)
    request.with_header(correlation_id=1, client_id="c")
    frame = request.encode(version=version, header=True)  # as the socket server reads it
    params = wire.read_fetch_request(frame, wire.read_request_header(frame, version >= 12).body, version)
    response = asyncio.run(apis.fetch(RequestContext(FetchRequest.API_KEY, version, 1, "c", "peer"), params))
    return [(p.partition_index, Errors(p.error_code), p.high_watermark,
             [r.offset for r in decode_records(p.records or b"")]) for t in response.responses for p in t.partitions], \
        response.session_id


def test_a_consumers_fetch_v11_is_served_by_a_follower_below_its_own_high_watermark(rm, tmp_path):
    """Kafka 2.8's fetchOnlyFromLeader (isFromFollower || isFromConsumer && clientMetadata.isEmpty): from
    Fetch v11 on a consumer reads from a follower, below the follower's high watermark, its current
    leader epoch checked against the follower's (Partition.localLogWithEpochOrException with
    requireLeader false); before v11, only the leader serves it."""
    follower_of_t0(rm, tmp_path, high_watermark=3)
    assert apis_fetch(rm, 11, consumer_fetch_request(0))[0] == [(0, Errors.NONE, 3, [0, 1, 2])]
    assert apis_fetch(rm, 11, consumer_fetch_request(0, current_leader_epoch=3))[0] == \
        [(0, Errors.NONE, 3, [0, 1, 2])]
    assert apis_fetch(rm, 11, consumer_fetch_request(3))[0] == [(0, Errors.NONE, 3, [])]  # above the HW: nothing
    assert apis_fetch(rm, 11, consumer_fetch_request(6))[0][0][1] == Errors.OFFSET_OUT_OF_RANGE  # past its log end
    assert apis_fetch(rm, 11, consumer_fetch_request(0, current_leader_epoch=2))[0][0][1] == \
        Errors.FENCED_LEADER_EPOCH
    assert apis_fetch(rm, 11, consumer_fetch_request(0, current_leader_epoch=4))[0][0][1] == \
        Errors.UNKNOWN_LEADER_EPOCH
    assert apis_fetch(rm, 10, consumer_fetch_request(0))[0][0][1] == Errors.NOT_LEADER_OR_FOLLOWER


def test_a_consumers_session_on_a_follower_hears_what_the_follower_appended(rm, tmp_path):
    """A follower's appends mark no session (partition.py: append_as_follower tells no listener), so a
    consumer's incremental fetch on a follower reads every partition it follows there, as Kafka reads
    every partition of a session: the records and the HW the fetcher brought are answered."""
    leader = follower_of_t0(rm, tmp_path, high_watermark=3)
    answer, session_id = apis_fetch(rm, 11, consumer_fetch_request(3, session_epoch=0))
    assert answer == [(0, Errors.NONE, 3, [])] and session_id != 0
    assert rm.partition(T0).append_as_follower(leader.fetch_for_follower(1, 5, MAX_BYTES, now_ms()).records, 7, 0, 3)
    assert apis_fetch(rm, 11, consumer_fetch_request(3, session_id=session_id, session_epoch=1, partitions=False)) == \
        ([(0, Errors.NONE, 7, [3, 4, 5, 6])], session_id)
