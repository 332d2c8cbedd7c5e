"""The leader's replication arithmetic: follower fetch state, high watermark, ISR shrink and
expand, and where a follower truncates. Pure functions over plain values (Kafka's
Partition.maybeIncrementLeaderHW, getOutOfSyncReplicas, isFollowerInSync and
Replica.updateFetchState; KIP-101 for truncation by leader epoch, KIP-320 for finding it within
the fetch).
"""
from __future__ import annotations

from typing import Callable, NamedTuple


class FollowerState(NamedTuple):
    """What the leader knows of one follower (Kafka's Replica), learnt from the fetches of one
    incarnation of its broker (`broker_epoch`, -1 until one fetches: KIP-903); its log end is unknown
    (-1) until that incarnation fetches from this leader."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0  # the last time the follower had everything the leader had
    last_fetch_leader_leo: int = 0  # the leader's LEO at the follower's previous fetch
    last_fetch_ms: int = 0
    broker_epoch: int = -1  # the registration whose fetches these are


def broker_died(state: FollowerState, last_caught_up_ms: int) -> FollowerState:
    """What the leader keeps of a follower whose broker died: not where its log ended (a power loss
    takes the unflushed tail), but whose fetches those were, so that a fetch of that incarnation still
    on its way counts as its and any later incarnation's starts afresh; and the ISR's lag clock as it
    stood (`last_caught_up_ms`, its session's fetches counted): whether an ISR member lags is the
    controller's to settle when its broker dies, and a leader shrinking at the same moment would only
    fence itself on the controller's zkVersion."""
    return FollowerState(last_caught_up_ms=last_caught_up_ms, broker_epoch=state.broker_epoch)


def new_incarnation(broker_epoch: int) -> FollowerState:
    """What the leader knows of a new incarnation of a follower's broker (KIP-903): nothing, not even
    that it was ever caught up (an ISR member whose broker registered again, which the controller did
    not take out, lags from now on and leaves the ISR unless its own fetches keep it in)."""
    return FollowerState(broker_epoch=broker_epoch)


def update_fetch_state(state: FollowerState, fetch_offset: int, leader_leo: int, now_ms: int,
                       broker_epoch: int = -1) -> FollowerState:
    """A fetch from `fetch_offset`, sent by the incarnation `broker_epoch`, means the follower has
    everything below it. It is caught up now if it reached the leader's LEO, or caught up as of its
    previous fetch if it reached the LEO the leader had then (so a steady stream of produces does not
    make a keeping-up follower look lagging). A fetch of an earlier incarnation than the one already
    heard from says nothing; the first of a later one starts afresh (the first heard at all keeps the
    lag clock a new leader gives its ISR)."""
    if broker_epoch < state.broker_epoch:
        return state
    if broker_epoch > state.broker_epoch:
        state = new_incarnation(broker_epoch) if state.broker_epoch >= 0 else state._replace(broker_epoch=broker_epoch)
    caught_up = state.last_caught_up_ms
    if fetch_offset >= leader_leo:
        caught_up = max(caught_up, now_ms)
    elif fetch_offset >= state.last_fetch_leader_leo:
        caught_up = max(caught_up, state.last_fetch_ms)
    return FollowerState(fetch_offset, caught_up, leader_leo, now_ms, broker_epoch)


def high_watermark(current_hw: int, leader_id: int, leader_leo: int, followers: dict[int, FollowerState],
                   isr: tuple[int, ...]) -> int:
    """The smallest LEO in the ISR (the maximal ISR: with a member being added, Kafka's
    PendingExpandIsr); the leader's high watermark never moves back."""
    leos = [leader_leo if r == leader_id else followers[r].log_end_offset if r in followers else -1 for r in isr]
    return max(current_hw, min(leos, default=leader_leo))


def out_of_sync_replicas(leader_id: int, isr: tuple[int, ...], last_caught_up_ms: Callable[[int], int], now_ms: int,
                         replica_lag_time_max_ms: int) -> tuple[int, ...]:
    """ISR followers that have not been caught up (`last_caught_up_ms(r)`) for longer than
    replica.lag.time.max.ms."""
    return tuple(r for r in isr if r != leader_id and now_ms - last_caught_up_ms(r) > replica_lag_time_max_ms)


def in_sync_again(follower: FollowerState, high_watermark_: int, leader_epoch_start_offset: int,
                  alive_broker_epoch: int | None) -> bool:
    """A follower outside the ISR rejoins once it has reached the high watermark and has records
    from the current leader epoch (Kafka's isFollowerInSync), as the leader knows from fetches of the
    incarnation of its broker that the metadata has alive (`alive_broker_epoch`, None when dead:
    KIP-903's isReplicaIsrEligible; kray's followers always send their epoch, so one that did not
    is not taken)."""
    return alive_broker_epoch is not None and follower.broker_epoch == alive_broker_epoch >= 0 \
        and follower.log_end_offset >= high_watermark_ and follower.log_end_offset >= leader_epoch_start_offset


def truncation_offset(follower_leo: int, follower_high_watermark: int, leader_answer: tuple[int, int],
                      follower_end_for_answer_epoch: int) -> int:
    """Where a new follower truncates before fetching (KIP-101/KIP-279). The follower asked the leader
    where its latest epoch ended; `leader_answer` is (epoch, end offset), the epoch being the largest
    the leader knows up to the one asked. The follower keeps what both logs agree on: up to the
    leader's end offset for that epoch and its own (`follower_end_for_answer_epoch`, -1 if unknown).
    Without an answer ((-1, -1): the leader knows no such epoch) it falls back to its high watermark,
    as seed 000 describes."""
    epoch, end = leader_answer
    if epoch < 0 or end < 0:
        return min(follower_leo, follower_high_watermark)
    own = follower_end_for_answer_epoch if follower_end_for_answer_epoch >= 0 else follower_leo
    return min(follower_leo, end, own)


def diverging_epoch(fetch_offset: int, last_fetched_epoch: int, leader_answer: tuple[int, int]) -> tuple[int, int] | None:
    """KIP-320: a follower's fetch names the epoch of its last record; `leader_answer` is where the
    leader's log has that epoch end ((largest epoch <= it, end offset), as for OffsetsForLeaderEpoch).
    The logs diverged if the leader's copy of that epoch ends before the fetch offset, or the leader
    never had that epoch: the answer is then the follower's truncation point, None when they agree."""
    epoch, end = leader_answer
    return leader_answer if end < fetch_offset or epoch < last_fetched_epoch else None
