"""The leader's replication arithmetic: fetch state, high watermark, ISR shrink and expand, truncation."""
from __future__ import annotations

from actors.broker.replication import (
    FollowerState,
    diverging_epoch,
    high_watermark,
    broker_died,
    in_sync_again,
    new_incarnation,
    out_of_sync_replicas,
    truncation_offset,
    update_fetch_state,
)


def test_fetch_at_the_leader_end_means_caught_up_now():
    s = update_fetch_state(FollowerState(), fetch_offset=10, leader_leo=10, now_ms=1_000)
    assert s == FollowerState(10, 1_000, 10, 1_000)


def test_fetch_reaching_the_previous_leader_end_means_caught_up_as_of_the_previous_fetch():
    s = update_fetch_state(FollowerState(), fetch_offset=5, leader_leo=10, now_ms=1_000)
    assert s.last_caught_up_ms == 0  # behind, and behind at no earlier fetch either
    s = update_fetch_state(s, fetch_offset=10, leader_leo=15, now_ms=1_200)  # the leader moved on meanwhile
    assert s.last_caught_up_ms == 1_000 and s.log_end_offset == 10
    s = update_fetch_state(s, fetch_offset=12, leader_leo=20, now_ms=1_400)  # fell behind what it saw last time
    assert s.last_caught_up_ms == 1_000


def test_high_watermark_is_the_smallest_leo_in_the_isr_and_never_goes_back():
    followers = {2: FollowerState(log_end_offset=7), 3: FollowerState(log_end_offset=4)}
    assert high_watermark(0, 1, 9, followers, (1, 2, 3)) == 4
    assert high_watermark(0, 1, 9, followers, (1, 2)) == 7  # 3 left the ISR: it no longer holds the HW back
    assert high_watermark(8, 1, 9, followers, (1, 2)) == 8  # never backwards
    assert high_watermark(0, 1, 9, followers, (1,)) == 9  # alone in the ISR: its own LEO
    assert high_watermark(2, 1, 9, {4: FollowerState()}, (1, 4)) == 2  # a member not heard from holds it
    assert high_watermark(2, 1, 9, {}, (1, 4)) == 2


def test_out_of_sync_replicas_lag_longer_than_the_limit():
    caught_up = {2: 9_000, 3: 20_000, 4: 0}.__getitem__
    assert out_of_sync_replicas(1, (1, 2, 3), caught_up, now_ms=30_000, replica_lag_time_max_ms=10_000) == (2,)
    assert out_of_sync_replicas(1, (1, 2, 3), caught_up, now_ms=19_000, replica_lag_time_max_ms=10_000) == ()
    assert out_of_sync_replicas(1, (1, 4), caught_up, now_ms=30_000, replica_lag_time_max_ms=10_000) == (4,)


def test_a_follower_rejoins_at_the_high_watermark_with_records_of_the_current_epoch():
    at = lambda leo: FollowerState(log_end_offset=leo, broker_epoch=7)  # noqa: E731 (fetched by incarnation 7)
    assert not in_sync_again(FollowerState(broker_epoch=7), high_watermark_=0, leader_epoch_start_offset=0,
                             alive_broker_epoch=7)  # never fetched
    assert in_sync_again(at(10), high_watermark_=10, leader_epoch_start_offset=8, alive_broker_epoch=7)
    assert not in_sync_again(at(9), 10, 8, 7)
    assert not in_sync_again(at(10), 10, 11, 7)  # nothing yet from this leader's epoch


def test_a_follower_rejoins_only_on_fetches_of_its_live_incarnation():
    """KIP-903: the fetches must be the live broker epoch's; one that named none, or a dead broker, never."""
    assert not in_sync_again(FollowerState(log_end_offset=10, broker_epoch=7), 10, 8, alive_broker_epoch=8)
    assert not in_sync_again(FollowerState(log_end_offset=10, broker_epoch=7), 10, 8, alive_broker_epoch=None)
    assert not in_sync_again(FollowerState(log_end_offset=10), 10, 8, alive_broker_epoch=-1)


def test_a_fetch_of_an_earlier_incarnation_says_nothing_and_a_later_ones_starts_afresh():
    s = update_fetch_state(FollowerState(), fetch_offset=10, leader_leo=10, now_ms=1_000, broker_epoch=7)
    assert s == FollowerState(10, 1_000, 10, 1_000, 7)
    assert update_fetch_state(s, fetch_offset=12, leader_leo=12, now_ms=1_100, broker_epoch=6) is s
    s = update_fetch_state(s, fetch_offset=2, leader_leo=12, now_ms=1_200, broker_epoch=9)  # lost its log
    assert s == FollowerState(2, 0, 12, 1_200, 9)  # never caught up as incarnation 9
    assert new_incarnation(10) == FollowerState(broker_epoch=10)
    dead = broker_died(s, 1_100)  # its log end unknown; the lag clock kept as it stood
    assert dead == FollowerState(last_caught_up_ms=1_100, broker_epoch=9)


def test_the_first_incarnation_heard_under_a_new_leader_keeps_the_lag_clock_it_gave_the_isr():
    s = update_fetch_state(FollowerState(last_caught_up_ms=5_000), fetch_offset=2, leader_leo=12, now_ms=5_100,
                           broker_epoch=9)
    assert s == FollowerState(2, 5_000, 12, 5_100, 9)


def test_truncation_by_leader_epoch_and_fallback_to_the_high_watermark():
    # the old leader wrote 20..24 in epoch 3 that the new leader (epoch 4 from offset 20) never had
    assert truncation_offset(follower_leo=25, follower_high_watermark=18, leader_answer=(3, 20),
                             follower_end_for_answer_epoch=25) == 20
    # the leader knows only an older epoch: keep what both agree on
    assert truncation_offset(25, 18, (2, 22), follower_end_for_answer_epoch=15) == 15
    # a follower behind the leader's epoch end truncates nothing
    assert truncation_offset(12, 10, (3, 20), 12) == 12
    # no answer: seed 000's rule, truncate to the high watermark
    assert truncation_offset(25, 18, (-1, -1), -1) == 18


def test_a_fetch_finds_where_the_follower_diverged():
    """KIP-320: the leader checks the epoch of the follower's last record against its own log."""
    # the follower's epoch 3 runs to 25; the leader's epoch 3 ended at 20 (epoch 4 began there)
    assert diverging_epoch(fetch_offset=25, last_fetched_epoch=3, leader_answer=(3, 20)) == (3, 20)
    # the leader never had epoch 3: its answer is the largest older one, where to truncate
    assert diverging_epoch(25, 3, (2, 22)) == (2, 22)
    # the leader knows no epoch that old or new: the follower falls back to its high watermark
    assert diverging_epoch(25, 3, (-1, -1)) == (-1, -1)
    # agreed: the follower is behind the end of its epoch (or at it), or its epoch is the leader's latest
    assert diverging_epoch(12, 3, (3, 20)) is None
    assert diverging_epoch(20, 3, (3, 20)) is None
    assert diverging_epoch(30, 4, (4, 30)) is None
