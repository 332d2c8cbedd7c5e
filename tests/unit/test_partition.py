"""A partition replica as leader and follower: produce, acks, HW, ISR, idempotence, consumer reads,
all on v2 batches as producers send them."""
from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from actors.broker.log.batches import decode_records
from actors.broker.errors import (
    NotEnoughReplicasException,
    NotLeaderOrFollowerException,
    OffsetOutOfRangeException,
    OutOfOrderSequenceException,
)
from actors.broker.log.log import Log
from actors.broker.log.log_config import LogConfig
from actors.broker.partition import LeaderAndIsrState, Partition
from actors.broker.replication import FollowerState
from actors.config import BrokerConfig
from coordination.errors import Errors

LEADS = LeaderAndIsrState(leader=1, leader_epoch=3, isr=(1, 2, 3), replicas=(1, 2, 3), zk_version=0)
FOLLOWS = LeaderAndIsrState(leader=2, leader_epoch=3, isr=(1, 2, 3), replicas=(1, 2, 3), zk_version=0)
CONFIG = LogConfig.from_overrides(BrokerConfig(), {"min.insync.replicas": "2"})


def batch(n: int, producer_id: int = -1, first_sequence: int = 0, producer_epoch: int = 0) -> bytes:
    """A producer's batch of n records (values v<sequence>), idempotent when it has a producer id."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=producer_epoch if producer_id >= 0 else -1,
                                        base_sequence=first_sequence if producer_id >= 0 else -1, batch_size=1 << 20)
    for i in range(n):
        builder.append(i, timestamp=1_000, key=None, value=f"v{first_sequence + i}".encode(), headers=[])
    return bytes(builder.build())


def offsets(records: bytes) -> list[int]:
    return [r.offset for r in decode_records(records)]


def new(tmp_path, name: str, broker_id: int, config: LogConfig = CONFIG) -> Partition:
    return Partition("t", 0, broker_id, Log(tmp_path / name), config)


@pytest.fixture
def leader(tmp_path) -> Partition:
    p = new(tmp_path, "t-0", 1)
    p.make_leader(LEADS, now_ms=0)
    return p


def span(result) -> tuple[int, int]:
    return result.first_offset, result.last_offset


class Waiter:
    """An acks=all produce's callback: what it was told, if anything."""

    def __init__(self):
        self.errors: list[Errors] = []

    def __call__(self, error: Errors) -> None:
        self.errors.append(error)


def waiting(partition: Partition, records: bytes) -> Waiter:
    appended = partition.append_as_leader(records, required_acks=-1)
    waiter = Waiter()
    partition.await_high_watermark(appended.last_offset, appended.term, waiter)
    return waiter


def test_high_watermark_waits_for_the_whole_isr(leader):
    assert span(leader.append_as_leader(batch(5), required_acks=-1)) == (0, 4)
    assert leader.high_watermark == 0
    assert leader.fetch_for_follower(2, 5, 1 << 20, now_ms=10).high_watermark == 0  # 3 still has nothing
    result = leader.fetch_for_follower(3, 0, 1 << 20, now_ms=10)
    assert leader.high_watermark == 0 and offsets(result.records) == [0, 1, 2, 3, 4]
    leader.fetch_for_follower(3, 5, 1 << 20, now_ms=20)
    assert leader.high_watermark == 5


def test_batches_are_stored_as_sent_with_their_offsets_and_epoch_stamped(leader):
    sent = batch(3)
    leader.append_as_leader(batch(2), 1)
    leader.append_as_leader(sent, 1)
    stored = leader.fetch_for_follower(2, 2, 1 << 20, now_ms=1).records
    assert int.from_bytes(stored[12:16], "big") == 3 and int.from_bytes(stored[:8], "big") == 2  # epoch, offset
    assert bytes(stored[16:]) == sent[16:]  # everything from the magic byte on is as sent (CRC too)
    assert [r.value for r in decode_records(stored)] == [b"v0", b"v1", b"v2"]


def test_acks_all_waits_until_followers_have_the_records(leader):
    waiter = waiting(leader, batch(2))
    assert waiter.errors == []
    leader.fetch_for_follower(2, 2, 1 << 20, now_ms=1)
    assert waiter.errors == []
    leader.fetch_for_follower(3, 2, 1 << 20, now_ms=1)
    assert waiter.errors == [Errors.NONE]


def test_a_produce_that_stops_waiting_is_forgotten(leader):
    waiter = waiting(leader, batch(1))
    leader.forget_waiter(waiter)
    leader.fetch_for_follower(2, 1, 1 << 20, now_ms=1)
    leader.fetch_for_follower(3, 1, 1 << 20, now_ms=1)
    assert waiter.errors == []


def test_a_leader_epoch_bump_does_not_fail_a_waiting_produce_but_a_small_isr_does(leader):
    waiter = waiting(leader, batch(1))
    leader.make_leader(LEADS._replace(leader_epoch=4, isr=(1, 2)), now_ms=1)  # the controller dropped 3
    leader.fetch_for_follower(2, 1, 1 << 20, now_ms=2)
    assert waiter.errors == [Errors.NONE]
    second = waiting(leader, batch(1, first_sequence=1))
    leader.update_isr((1,), zk_version=2)
    assert second.errors == [Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND]


def test_a_waiting_produce_learns_that_leadership_moved(leader):
    waiter = waiting(leader, batch(1))
    leader.make_follower(FOLLOWS._replace(leader_epoch=4))
    assert waiter.errors == [Errors.NOT_LEADER_OR_FOLLOWER]


def test_an_acks_all_wait_fails_once_leadership_was_lost_even_if_regained(leader):
    appended = leader.append_as_leader(batch(1), -1)
    leader.make_follower(FOLLOWS._replace(leader_epoch=4))
    leader.make_leader(LEADS._replace(leader_epoch=5, isr=(1,)), now_ms=1)
    assert leader.high_watermark == 1  # alone in the ISR: the HW passes the offset again...
    waiter = Waiter()
    leader.await_high_watermark(appended.last_offset, appended.term, waiter)
    assert waiter.errors == [Errors.NOT_LEADER_OR_FOLLOWER]  # ...but not that batch


def test_min_insync_replicas_and_produce_to_a_follower(tmp_path, leader):
    leader.update_isr((1,), zk_version=1)
    with pytest.raises(NotEnoughReplicasException):
        leader.append_as_leader(batch(1), required_acks=-1)
    assert span(leader.append_as_leader(batch(1), required_acks=1)) == (0, 0)
    assert leader.log.log_end_offset == 1  # only the refused acks=all batch was left out
    follower = new(tmp_path, "f", 1)
    follower.make_follower(FOLLOWS)
    with pytest.raises(NotLeaderOrFollowerException):
        follower.append_as_leader(batch(1), 1)


def test_min_insync_replicas_comes_from_the_topic_config_and_changes_at_run_time(leader):
    leader.update_isr((1, 2), zk_version=1)
    leader.append_as_leader(batch(1), required_acks=-1)  # 2 >= min.insync.replicas=2
    leader.config = LogConfig.from_overrides(BrokerConfig(), {"min.insync.replicas": "3"})
    with pytest.raises(NotEnoughReplicasException):
        leader.append_as_leader(batch(1, first_sequence=1), required_acks=-1)


def test_idempotent_retries_are_not_appended_twice(leader):
    assert span(leader.append_as_leader(batch(3, producer_id=7), 1)) == (0, 2)
    assert span(leader.append_as_leader(batch(2, producer_id=8), 1)) == (3, 4)
    assert span(leader.append_as_leader(batch(2, producer_id=7, first_sequence=3), 1)) == (5, 6)
    retry = leader.append_as_leader(batch(3, producer_id=7), 1)  # a retry of the first batch
    assert span(retry) == (0, 2) and retry.duplicate
    assert span(leader.append_as_leader(batch(2, producer_id=7, first_sequence=3), 1)) == (5, 6)
    assert leader.log.log_end_offset == 7
    with pytest.raises(OutOfOrderSequenceException):
        leader.append_as_leader(batch(1, producer_id=7, first_sequence=9), 1)


def test_a_follower_turned_leader_recognises_retries_of_the_old_leaders_batches(tmp_path, leader):
    leader.append_as_leader(batch(4, producer_id=7), 1)
    follower = new(tmp_path, "f", 2)
    follower.make_follower(FOLLOWS._replace(leader=1))
    fetched = leader.fetch_for_follower(2, 0, 1 << 20, now_ms=1)
    assert follower.append_as_follower(fetched.records, fetched.high_watermark, fetched.log_start_offset, 3)
    follower.make_leader(LeaderAndIsrState(2, 4, (2, 3), (1, 2, 3), 1), now_ms=2)
    assert span(follower.append_as_leader(batch(4, producer_id=7), 1)) == (0, 3)
    assert span(follower.append_as_leader(batch(1, producer_id=7, first_sequence=4), 1)) == (4, 4)
    reopened = new(tmp_path, "f", 2)  # and after a restart, from the log
    reopened.make_leader(LeaderAndIsrState(2, 5, (2,), (1, 2, 3), 2), now_ms=3)
    assert span(reopened.append_as_leader(batch(1, producer_id=7, first_sequence=4), 1)) == (4, 4)


def test_consumers_read_below_the_high_watermark_only(leader):
    leader.append_as_leader(batch(1), 1)
    leader.append_as_leader(batch(3, first_sequence=1), 1)
    leader.append_as_leader(batch(2, first_sequence=4), 1)
    leader.fetch_for_follower(2, 4, 1 << 20, now_ms=1)
    leader.fetch_for_follower(3, 4, 1 << 20, now_ms=1)
    assert leader.high_watermark == 4
    assert offsets(leader.read_records(1, 1 << 20).records) == [1, 2, 3]
    assert leader.read_records(5, 1 << 20).records == b""  # between HW and LEO: nothing, no error
    assert leader.read_records(6, 1 << 20).records == b""  # at the log end
    with pytest.raises(OffsetOutOfRangeException):
        leader.read_records(7, 1 << 20)


def test_isr_shrinks_for_a_lagging_follower_and_expands_when_it_catches_up(leader):
    leader.append_as_leader(batch(3), 1)
    leader.fetch_for_follower(2, 3, 1 << 20, now_ms=5_000)  # 2 keeps up, 3 never fetches
    assert leader.isr_to_shrink(now_ms=9_000, replica_lag_time_max_ms=10_000) is None
    assert leader.isr_to_shrink(now_ms=10_001, replica_lag_time_max_ms=10_000) == (1, 2)
    leader.update_isr((1, 2), zk_version=1)
    assert leader.high_watermark == 3  # 3 no longer holds it back
    assert leader.isr_to_expand(3, 30) is None  # it has not fetched since
    leader.fetch_for_follower(3, 0, 1 << 20, now_ms=10_100, broker_epoch=30)
    assert leader.isr_to_expand(3, 30) is None  # below the high watermark
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=10_200, broker_epoch=30)
    assert leader.isr_to_expand(3, 30) == (1, 2, 3)
    assert leader.isr_to_expand(2, 20) is None  # already in


def test_only_the_live_incarnation_of_a_follower_is_taken_into_the_isr(leader):
    """KIP-903 in kray's terms: what the leader knows of a follower belongs to the broker epoch that
    fetched it; a follower joins only on fetches of the incarnation the metadata has alive."""
    leader.append_as_leader(batch(3), 1)
    leader.update_isr((1, 2), zk_version=1)
    leader.fetch_for_follower(2, 3, 1 << 20, now_ms=1, broker_epoch=20)  # the high watermark is 3
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=1, broker_epoch=30)  # caught up, as incarnation 30
    assert leader.isr_to_expand(3, None) is None  # its broker is not alive in the metadata
    assert leader.isr_to_expand(3, 31) is None  # another incarnation is
    assert leader.isr_to_expand(3, 30) == (1, 2, 3)
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=2)  # a fetch that names no incarnation
    assert leader.isr_to_expand(3, 30) == (1, 2, 3)  # ... says nothing: 30's fetch stands
    leader.forget_follower(3, 31)  # registered again, as 31: nothing 30 fetched counts now
    assert leader.isr_to_expand(3, 31) is None
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=3, broker_epoch=30)  # 30's, long-polling as it died
    assert leader.isr_to_expand(3, 31) is None and leader.followers[3].log_end_offset == -1
    leader.fetch_for_follower(3, 0, 1 << 20, now_ms=4, broker_epoch=31)  # 31 lost its log
    assert leader.isr_to_expand(3, 31) is None
    leader.forget_follower(3, 31)  # the same registration again: 31's own fetch stays
    assert leader.followers[3].log_end_offset == 0
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=5, broker_epoch=31)
    assert leader.isr_to_expand(3, 31) == (1, 2, 3)


def test_a_leader_that_stays_leader_forgets_a_dead_followers_log_end_and_the_high_watermark_waits(leader):
    """Issue 28's sequence on one partition: the leader kept its followers' state through the epoch bump
    that took the dead follower out of the ISR; forgotten when its broker died, it cannot make the
    follower's return look caught up, and an ISR member forgotten holds the high watermark back."""
    leader.append_as_leader(batch(3), 1)
    leader.fetch_for_follower(2, 3, 1 << 20, now_ms=1, broker_epoch=20)
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=1, broker_epoch=30)
    assert leader.high_watermark == 3
    leader.make_leader(LeaderAndIsrState(1, 1, (1, 2), (1, 2, 3), 1), now_ms=2)  # 3 died: out of the ISR
    assert leader.followers[3].log_end_offset == 3  # a leader that stays leader keeps what it knew (Kafka)
    leader.forget_follower(3)
    leader.forget_follower(2)
    assert leader.isr_to_expand(3, 31) is None and leader.followers[2].last_caught_up_ms == 2
    assert leader.followers[3] == FollowerState(broker_epoch=30)  # its LEO unknown, whose fetches known
    leader.append_as_leader(batch(1, first_sequence=3), 1)
    assert leader.high_watermark == 3  # 2 is in the ISR, and nothing is known of its log now
    leader.fetch_for_follower(2, 4, 1 << 20, now_ms=3, broker_epoch=20)
    assert leader.high_watermark == 4


def test_a_caught_up_follower_stays_in_sync_through_its_sessions_fetches(leader):
    """A fetch session leaves a caught-up partition unnamed (KIP-227): the follower's latest fetch of any
    partition keeps it caught up while it has this whole log, and only then."""
    leader.append_as_leader(batch(3), 1)
    leader.fetch_for_follower(2, 3, 1 << 20, now_ms=1_000, broker_epoch=20)
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=1_000, broker_epoch=30)
    session = {2: (20, 20_000), 3: (30, 20_000)}.get
    assert leader.isr_to_shrink(25_000, 10_000, session) is None
    assert leader.isr_to_shrink(25_000, 10_000, {2: (20, 20_000), 3: (31, 20_000)}.get) == (1, 2)  # 3's next
    leader.append_as_leader(batch(1, first_sequence=3), 1)  # now 2 and 3 miss the newest batch   # incarnation
    assert leader.isr_to_shrink(25_000, 10_000, session) == (1,)


def test_a_joining_followers_log_end_holds_the_high_watermark_while_its_expansion_is_written(leader):
    """Kafka's maximal ISR: once the leader decides to take a follower in, the high watermark waits for it
    too, or it could pass what the follower has and the follower join the ISR below it."""
    leader.append_as_leader(batch(3), 1)
    leader.update_isr((1, 2), zk_version=1)
    leader.fetch_for_follower(2, 3, 1 << 20, now_ms=1, broker_epoch=20)
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=1, broker_epoch=30)
    assert leader.expanding(leader.isr_to_expand(3, 30)) == (1, 2, 3)
    leader.append_as_leader(batch(2, first_sequence=3), 1)
    leader.fetch_for_follower(2, 5, 1 << 20, now_ms=2, broker_epoch=20)
    assert leader.high_watermark == 3  # 3, joining, has only 3
    answers = []
    leader.await_high_watermark(4, leader.leader_term, answers.append)  # an acks=all produce of offset 4
    leader.isr_change_failed()  # not written (a ZooKeeper error): the HW moves at once, the produce is answered
    assert leader.high_watermark == 5 and answers == [Errors.NONE]
    leader.expanding(leader.isr_to_expand(3, 30) or (1, 2, 3))
    leader.update_isr((1, 2, 3), zk_version=2)  # landed: 3 is a member, no longer joining
    assert leader.joining == () and leader.high_watermark == 5


def test_follower_high_watermark_and_truncation(tmp_path, leader):
    leader.append_as_leader(batch(3), 1)
    leader.append_as_leader(batch(2, first_sequence=3), 1)
    follower = new(tmp_path, "f", 2)
    follower.make_follower(FOLLOWS._replace(leader=1))
    fetched = leader.fetch_for_follower(2, 0, 1 << 20, now_ms=1)
    follower.append_as_follower(fetched.records, 2, 0, leader_epoch=3)
    assert (follower.log.log_end_offset, follower.high_watermark) == (5, 2)
    assert follower.truncate_to(3, leader_epoch=3)
    assert (follower.log.log_end_offset, follower.high_watermark) == (3, 2)
    with pytest.raises(NotLeaderOrFollowerException):
        follower.read_records(0, 100)


def test_a_leader_whose_isr_write_was_refused_keeps_leading_and_its_waiting_produces_complete_on_leader_and_isr(
        leader):
    """Kafka's handleAlterIsrResponse gives the change up: the controller wrote the state (here its ISR
    removal of the dead follower 3, epoch 4) and its LeaderAndIsr follows. Meanwhile the leader serves
    produces and fetches and tries no other ISR change; the LeaderAndIsr completes what waited."""
    first = waiting(leader, batch(2))
    leader.fetch_for_follower(2, 2, 1 << 20, now_ms=15_000)  # 3 is dead: the high watermark waits for it
    assert leader.isr_to_shrink(20_000, 10_000) == (1, 2)
    assert not leader.give_up_isr_change(leader_epoch=2)  # about another epoch: ignored
    assert leader.give_up_isr_change(leader_epoch=3)
    assert leader.is_leader and leader.isr_to_shrink(20_000, 10_000) is None  # no other change meanwhile
    second = waiting(leader, batch(1, first_sequence=2))
    assert offsets(leader.fetch_for_follower(2, 2, 1 << 20, now_ms=20_001).records) == [2]
    leader.fetch_for_follower(2, 3, 1 << 20, now_ms=20_002)
    assert leader.high_watermark == 0 and first.errors == second.errors == []
    leader.make_leader(LEADS._replace(leader_epoch=4, isr=(1, 2), zk_version=1), now_ms=20_003)  # the controller's
    assert leader.high_watermark == 3 and first.errors == second.errors == [Errors.NONE]             # word
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=20_004, broker_epoch=31)  # 3 is back: ISR changes resume
    assert leader.isr_to_expand(3, 31) == (1, 2, 3)


def test_a_refused_expansion_keeps_the_joining_follower_in_the_maximal_isr_until_leader_and_isr(leader):
    """Kafka's PendingExpandIsr stays in flight when given up: the high watermark still waits for the
    follower that was joining, and no expansion is asked again until the LeaderAndIsr."""
    leader.append_as_leader(batch(3), 1)
    leader.update_isr((1, 2), zk_version=1)
    leader.fetch_for_follower(2, 3, 1 << 20, now_ms=1, broker_epoch=20)
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=1, broker_epoch=30)
    assert leader.expanding(leader.isr_to_expand(3, 30)) == (1, 2, 3)
    assert leader.give_up_isr_change(leader_epoch=3)
    waiter = waiting(leader, batch(2, first_sequence=3))
    leader.fetch_for_follower(2, 5, 1 << 20, now_ms=2, broker_epoch=20)
    assert leader.high_watermark == 3 and waiter.errors == [] and leader.isr_to_expand(3, 30) is None
    leader.make_leader(LEADS._replace(leader_epoch=4, isr=(1, 2), zk_version=2), now_ms=3)
    assert leader.joining == () and leader.high_watermark == 5 and waiter.errors == [Errors.NONE]


def test_a_follower_that_starts_over_forgets_the_deleted_logs_producers_and_takes_their_next_batch_as_leader(
        tmp_path, leader):
    """Kafka's truncateFullyAndStartAt clears the producer state with the log. Kept (here from the
    snapshot taken at offset 10,000), a producer's valid next sequence was refused as out of order."""
    leader.append_as_leader(batch(10_000, producer_id=7), 1)
    leader.append_as_leader(batch(1, producer_id=7, first_sequence=10_000), 1)  # past the first snapshot offset
    follower = new(tmp_path, "f", 2)
    follower.make_follower(FOLLOWS._replace(leader=1))
    assert follower.append_as_follower(leader.fetch_for_follower(2, 0, 1 << 30, now_ms=1).records, 0, 0, 3)
    assert follower.producers.snapshots and follower.producers.producers[7].last_seq == 10_000
    assert follower.truncate_fully_and_start_at(20_000, leader_epoch=3)  # the leader's retention passed its log
    assert follower.producers.producers == {}
    follower.make_leader(LeaderAndIsrState(2, 4, (2,), (1, 2), 1), now_ms=2)
    assert span(follower.append_as_leader(batch(1, producer_id=7, first_sequence=15_000), 1)) == (20_000, 20_000)


def test_a_fetchers_late_answer_does_not_touch_a_replica_that_moved_on(tmp_path, leader):
    leader.append_as_leader(batch(5), 1)
    follower = new(tmp_path, "f", 2)
    follower.make_follower(FOLLOWS._replace(leader=1))
    fetched = leader.fetch_for_follower(2, 0, 1 << 20, now_ms=1)
    follower.make_leader(LeaderAndIsrState(2, 4, (2, 3), (1, 2, 3), 1), now_ms=2)  # it leads now
    assert not follower.append_as_follower(fetched.records, 5, 0, leader_epoch=3)
    assert not follower.truncate_to(0, leader_epoch=3)
    assert follower.log.log_end_offset == 0
    follower.make_follower(FOLLOWS._replace(leader=1, leader_epoch=5))
    follower.stop()
    assert not follower.append_as_follower(fetched.records, 5, 0, leader_epoch=5)


def test_a_follower_fetching_beyond_the_log_end_is_out_of_range(leader):
    leader.append_as_leader(batch(2), 1)
    with pytest.raises(OffsetOutOfRangeException):
        leader.fetch_for_follower(2, 3, 1 << 20, now_ms=1)
    assert leader.followers[2].log_end_offset == -1  # not counted as having anything


def test_a_fetch_naming_a_diverged_epoch_gets_where_to_truncate_and_counts_for_nothing(leader):
    """KIP-320: the old leader wrote 5..7 in epoch 3 that this leader (epoch 4 from offset 5) never had."""
    leader.append_as_leader(batch(5), 1)
    leader.make_leader(LEADS._replace(leader_epoch=4, isr=(1, 2)), now_ms=1)
    leader.append_as_leader(batch(3, first_sequence=5), 1)
    diverged = leader.fetch_for_follower(3, 8, 1 << 20, now_ms=2, last_fetched_epoch=3)
    assert (diverged.records, diverged.diverging_epoch) == (b"", (3, 5))
    assert leader.followers[3].log_end_offset == -1  # its offset 8 is not what this log has up to 8
    agreed = leader.fetch_for_follower(3, 5, 1 << 20, now_ms=3, last_fetched_epoch=3)
    assert agreed.diverging_epoch is None and offsets(agreed.records) == [5, 6, 7]
    assert leader.followers[3].log_end_offset == 5
    assert leader.fetch_for_follower(2, 8, 1 << 20, now_ms=3, last_fetched_epoch=4).diverging_epoch is None


def test_every_change_is_told_to_the_listener(tmp_path):
    told = []
    p = Partition("t", 0, 1, Log(tmp_path / "t-0"), CONFIG,
                  listener=lambda partition, hw_only: told.append((partition, hw_only)))
    p.make_leader(LEADS, now_ms=0)
    p.append_as_leader(batch(1), 1)
    p.fetch_for_follower(2, 1, 1 << 20, now_ms=1)
    p.fetch_for_follower(3, 1, 1 << 20, now_ms=1)  # the high watermark moves
    p.make_follower(FOLLOWS._replace(leader_epoch=4))
    assert [hw_only for _, hw_only in told] == [False, False, True, False] and all(t is p for t, _ in told)


def test_a_dead_followers_lag_clock_counts_its_sessions_fetches_so_the_controller_settles_its_isr(leader):
    """An idle partition is not named in its follower's session fetches (KIP-227): the session's latest
    fetch keeps the follower caught up. Its broker's death keeps that clock, not the partition's own
    last fetch, so the leader does not race the controller's ISR removal with a shrink of its own (at
    100,000 idle partitions every leader tried, and each refused write was settled again)."""
    leader.append_as_leader(batch(3), 1)
    for r in (2, 3):
        leader.fetch_for_follower(r, 3, 1 << 20, now_ms=1_000, broker_epoch=r * 10)
    session = {2: (20, 9_000), 3: (30, 9_000)}.__getitem__  # their sessions' latest fetches
    assert leader.isr_to_shrink(now_ms=15_000, replica_lag_time_max_ms=10_000, last_session_fetch=session) is None
    leader.forget_follower(2, session=session(2))  # died
    assert leader.isr_to_shrink(now_ms=15_000, replica_lag_time_max_ms=10_000, last_session_fetch=session) is None
    assert leader.isr_to_shrink(now_ms=19_001, replica_lag_time_max_ms=10_000, last_session_fetch=session) == (1,)


def test_an_isr_member_whose_broker_registered_again_leaves_the_isr_unless_its_own_fetches_keep_it(leader):
    """The controller takes a bounced broker out of the ISRs before its UpdateMetadata shows the new
    incarnation; where it did not (a controller gap), the leader does: the new incarnation never was
    caught up, and only its own fetches can make it so. A death keeps the lag clock: the controller's."""
    leader.append_as_leader(batch(3), 1)
    leader.fetch_for_follower(2, 3, 1 << 20, now_ms=1_000, broker_epoch=20)
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=1_000, broker_epoch=30)
    leader.forget_follower(2)  # died: left to the controller
    leader.forget_follower(3, 31)  # registered again, still in this ISR
    assert leader.isr_to_shrink(now_ms=10_500, replica_lag_time_max_ms=10_000) == (1, 2)  # 2's clock: 1_000
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=10_500, broker_epoch=31)  # caught up as 31
    assert leader.isr_to_shrink(now_ms=10_500, replica_lag_time_max_ms=10_000) is None
