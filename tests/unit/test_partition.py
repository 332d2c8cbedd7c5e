"""A partition replica as leader and follower: produce, acks, HW, ISR, idempotence, consumer reads."""
from __future__ import annotations

import threading

import pytest

from actors.broker.log import Log
from actors.broker.partition import LeaderAndIsrState, Partition
from actors.broker.records import Record
from coordination.errors import (
    Errors,
    NotEnoughReplicasException,
    NotLeaderOrFollowerException,
    OffsetOutOfRangeException,
    OutOfOrderSequenceException,
)

LEADS = LeaderAndIsrState(leader=1, leader_epoch=3, isr=(1, 2, 3), replicas=(1, 2, 3), zk_version=0)
FOLLOWS = LeaderAndIsrState(leader=2, leader_epoch=3, isr=(1, 2, 3), replicas=(1, 2, 3), zk_version=0)


def batch(n: int, producer_id: int = -1, first_sequence: int = 0) -> list[Record]:
    return [Record(-1, -1, 0, None, f"v{first_sequence + i}".encode(), producer_id,
                   first_sequence + i if producer_id >= 0 else -1) for i in range(n)]


@pytest.fixture
def leader(tmp_path) -> Partition:
    p = Partition("t", 0, 1, Log(tmp_path / "t-0"))
    p.make_leader(LEADS, now_ms=0)
    return p


def test_high_watermark_waits_for_the_whole_isr(leader):
    assert leader.append_as_leader(batch(5), required_acks=-1, min_insync_replicas=2) == (0, 4)
    assert leader.high_watermark == 0
    assert leader.fetch_for_follower(2, 5, 1 << 20, now_ms=10).high_watermark == 0  # 3 still has nothing
    result = leader.fetch_for_follower(3, 3, 1 << 20, now_ms=10)
    assert leader.high_watermark == 3 and [r.offset for r in result.records] == [3, 4]
    leader.fetch_for_follower(3, 5, 1 << 20, now_ms=20)
    assert leader.high_watermark == 5
    assert leader.wait_for_high_watermark(4, timeout_s=0) == Errors.NONE


def waiting(partition: Partition, offset: int) -> tuple[threading.Thread, list]:
    """A produce waiting (acks=all) in another thread; its outcome lands in the list."""
    outcome = []
    waiter = threading.Thread(target=lambda: outcome.append(partition.wait_for_high_watermark(offset, timeout_s=5)))
    waiter.start()
    return waiter, outcome


def test_acks_all_waits_until_followers_have_the_records(leader):
    leader.append_as_leader(batch(2), -1, 2)
    waiter, outcome = waiting(leader, 1)
    leader.fetch_for_follower(2, 2, 1 << 20, now_ms=1)
    leader.fetch_for_follower(3, 2, 1 << 20, now_ms=1)
    waiter.join(5)
    assert outcome == [Errors.NONE]
    assert leader.wait_for_high_watermark(5, timeout_s=0.01) == Errors.REQUEST_TIMED_OUT


def test_a_leader_epoch_bump_does_not_fail_a_waiting_produce_but_a_small_isr_does(leader):
    leader.append_as_leader(batch(1), -1, 2)
    leader.make_leader(LEADS._replace(leader_epoch=4, isr=(1, 2)), now_ms=1)  # the controller dropped 3
    leader.fetch_for_follower(2, 1, 1 << 20, now_ms=2)
    assert leader.wait_for_high_watermark(0, timeout_s=1, min_insync_replicas=2) == Errors.NONE
    leader.update_isr((1,), zk_version=2)
    assert leader.wait_for_high_watermark(0, 1, min_insync_replicas=2) == Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_a_waiting_produce_learns_that_leadership_moved(leader):
    leader.append_as_leader(batch(1), -1, 2)
    waiter, outcome = waiting(leader, 0)
    leader.make_follower(FOLLOWS._replace(leader_epoch=4))
    waiter.join(5)
    assert outcome == [Errors.NOT_LEADER_OR_FOLLOWER]


def test_min_insync_replicas_and_produce_to_a_follower(tmp_path, leader):
    leader.update_isr((1,), zk_version=1)
    with pytest.raises(NotEnoughReplicasException):
        leader.append_as_leader(batch(1), required_acks=-1, min_insync_replicas=2)
    assert leader.append_as_leader(batch(1), required_acks=1, min_insync_replicas=2) == (0, 0)
    assert leader.log.log_end_offset == 1  # only the refused acks=all batch was left out
    follower = Partition("t", 0, 1, Log(tmp_path / "f"))
    follower.make_follower(FOLLOWS)
    with pytest.raises(NotLeaderOrFollowerException):
        follower.append_as_leader(batch(1), 1, 1)


def test_idempotent_retries_are_not_appended_twice(leader):
    assert leader.append_as_leader(batch(3, producer_id=7), 1, 1) == (0, 2)
    assert leader.append_as_leader(batch(2, producer_id=8), 1, 1) == (3, 4)
    assert leader.append_as_leader(batch(2, producer_id=7, first_sequence=3), 1, 1) == (5, 6)
    assert leader.append_as_leader(batch(3, producer_id=7), 1, 1) == (0, 2)  # a retry of the first batch
    assert leader.append_as_leader(batch(2, producer_id=7, first_sequence=3), 1, 1) == (5, 6)
    assert leader.log.log_end_offset == 7
    with pytest.raises(OutOfOrderSequenceException):
        leader.append_as_leader(batch(1, producer_id=7, first_sequence=9), 1, 1)


def test_a_follower_turned_leader_recognises_retries_of_the_old_leaders_batches(tmp_path, leader):
    leader.append_as_leader(batch(4, producer_id=7), 1, 1)
    follower = Partition("t", 0, 2, Log(tmp_path / "f"))
    follower.make_follower(FOLLOWS._replace(leader=1))
    fetched = leader.fetch_for_follower(2, 0, 1 << 20, now_ms=1)
    assert follower.append_as_follower(fetched.records, fetched.high_watermark, leader_epoch=3)
    follower.make_leader(LeaderAndIsrState(2, 4, (2, 3), (1, 2, 3), 1), now_ms=2)
    assert follower.append_as_leader(batch(4, producer_id=7), 1, 1) == (0, 3)
    assert follower.append_as_leader(batch(1, producer_id=7, first_sequence=4), 1, 1) == (4, 4)
    reopened = Partition("t", 0, 2, Log(tmp_path / "f"))  # and after a restart, from the log
    assert reopened.producers.runs[7] == follower.producers.runs[7]


def test_consumers_read_below_the_high_watermark_only(leader):
    leader.append_as_leader(batch(6), 1, 1)
    leader.fetch_for_follower(2, 4, 1 << 20, now_ms=1)
    leader.fetch_for_follower(3, 4, 1 << 20, now_ms=1)
    assert leader.high_watermark == 4
    assert [r.offset for r in leader.read_for_consumer(1, 1 << 20).records] == [1, 2, 3]
    assert leader.read_for_consumer(5, 1 << 20).records == []  # between HW and LEO: nothing, no error
    assert leader.read_for_consumer(6, 1 << 20).records == []  # at the log end
    with pytest.raises(OffsetOutOfRangeException):
        leader.read_for_consumer(7, 1 << 20)


def test_isr_shrinks_for_a_lagging_follower_and_expands_when_it_catches_up(leader):
    leader.append_as_leader(batch(3), 1, 1)
    leader.fetch_for_follower(2, 3, 1 << 20, now_ms=5_000)  # 2 keeps up, 3 never fetches
    assert leader.isr_to_shrink(now_ms=9_000, replica_lag_time_max_ms=10_000) is None
    assert leader.isr_to_shrink(now_ms=10_001, replica_lag_time_max_ms=10_000) == (1, 2)
    leader.update_isr((1, 2), zk_version=1)
    assert leader.high_watermark == 3  # 3 no longer holds it back
    assert leader.isr_to_expand(3) is None  # it has not fetched since
    leader.fetch_for_follower(3, 2, 1 << 20, now_ms=10_100)
    assert leader.isr_to_expand(3) is None  # below the high watermark
    leader.fetch_for_follower(3, 3, 1 << 20, now_ms=10_200)
    assert leader.isr_to_expand(3) == (1, 2, 3)
    assert leader.isr_to_expand(2) is None  # already in


def test_follower_high_watermark_and_truncation(tmp_path, leader):
    leader.append_as_leader(batch(5), 1, 1)
    follower = Partition("t", 0, 2, Log(tmp_path / "f"))
    follower.make_follower(FOLLOWS._replace(leader=1))
    fetched = leader.fetch_for_follower(2, 0, 1 << 20, now_ms=1)
    follower.append_as_follower(fetched.records, leader_high_watermark=2, leader_epoch=3)
    assert (follower.log.log_end_offset, follower.high_watermark) == (5, 2)
    assert follower.truncate_to(3, leader_epoch=3)
    assert (follower.log.log_end_offset, follower.high_watermark) == (3, 2)
    with pytest.raises(NotLeaderOrFollowerException):
        follower.read_for_consumer(0, 100)


def test_a_leader_whose_isr_write_was_refused_stops_leading(leader):
    assert not leader.stop_leading(leader_epoch=2)  # about another epoch: ignored
    assert leader.is_leader
    assert leader.stop_leading(leader_epoch=3)
    with pytest.raises(NotLeaderOrFollowerException):
        leader.append_as_leader(batch(1), 1, 1)
    with pytest.raises(NotLeaderOrFollowerException):
        leader.fetch_for_follower(2, 0, 100, now_ms=1)
    leader.make_leader(LEADS._replace(leader_epoch=4, zk_version=5), now_ms=2)  # the controller's word
    assert leader.append_as_leader(batch(1), 1, 1) == (0, 0)


def test_a_fetchers_late_answer_does_not_touch_a_replica_that_moved_on(tmp_path, leader):
    leader.append_as_leader(batch(5), 1, 1)
    follower = Partition("t", 0, 2, Log(tmp_path / "f"))
    follower.make_follower(FOLLOWS._replace(leader=1))
    fetched = leader.fetch_for_follower(2, 0, 1 << 20, now_ms=1)
    follower.make_leader(LeaderAndIsrState(2, 4, (2, 3), (1, 2, 3), 1), now_ms=2)  # it leads now
    assert not follower.append_as_follower(fetched.records, 5, leader_epoch=3)
    assert not follower.truncate_to(0, leader_epoch=3)
    assert follower.log.log_end_offset == 0
    follower.make_follower(FOLLOWS._replace(leader=1, leader_epoch=5))
    follower.stop()
    assert not follower.append_as_follower(fetched.records, 5, leader_epoch=5)


def test_an_acks_all_wait_fails_once_leadership_was_lost_even_if_regained(leader):
    leader.append_as_leader(batch(1), -1, 1)
    term = leader.leader_term
    leader.make_follower(FOLLOWS._replace(leader_epoch=4))
    leader.make_leader(LEADS._replace(leader_epoch=5, isr=(1,)), now_ms=1)
    assert leader.high_watermark == 1  # alone in the ISR: the HW passes the offset again...
    assert leader.wait_for_high_watermark(0, 1, 1, term) == Errors.NOT_LEADER_OR_FOLLOWER  # ...but not that record


def test_a_follower_fetching_beyond_the_log_end_is_out_of_range(leader):
    leader.append_as_leader(batch(2), 1, 1)
    with pytest.raises(OffsetOutOfRangeException):
        leader.fetch_for_follower(2, 3, 1 << 20, now_ms=1)
    assert leader.followers[2].log_end_offset == -1  # not counted as having anything


def test_a_fetch_naming_a_diverged_epoch_gets_where_to_truncate_and_counts_for_nothing(tmp_path, leader):
    """KIP-320: the old leader wrote 5..7 in epoch 3 that this leader (epoch 4 from offset 5) never had."""
    leader.append_as_leader(batch(5), 1, 1)
    leader.make_leader(LEADS._replace(leader_epoch=4, isr=(1, 2)), now_ms=1)
    leader.append_as_leader(batch(3, first_sequence=5), 1, 1)
    diverged = leader.fetch_for_follower(3, 8, 1 << 20, now_ms=2, last_fetched_epoch=3)
    assert (diverged.records, diverged.diverging_epoch) == ([], (3, 5))
    assert leader.followers[3].log_end_offset == -1  # its offset 8 is not what this log has up to 8
    agreed = leader.fetch_for_follower(3, 5, 1 << 20, now_ms=3, last_fetched_epoch=3)
    assert agreed.diverging_epoch is None and [r.offset for r in agreed.records] == [5, 6, 7]
    assert leader.followers[3].log_end_offset == 5
    assert leader.fetch_for_follower(2, 8, 1 << 20, now_ms=3, last_fetched_epoch=4).diverging_epoch is None
