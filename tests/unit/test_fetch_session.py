"""Incremental fetch sessions (KIP-227): the leader's cache and the follower's handler, alone and
together, including every way either side can lose track, and the cache's lifecycle (Kafka's
FetchManager.newContext and FetchSessionCache)."""
from __future__ import annotations

import random

import pytest

from actors.broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
    FetchContext,
    FetchSessionCache,
    FetchSessionHandler,
    next_epoch,
)
from actors.data_protocol import FetchedPartition, FetchParams, FetchPartition
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
EVICTION_MS = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS


def fp(tp: TopicPartition, offset: int, epoch: int = 0) -> FetchPartition:
    return FetchPartition(tp.topic, tp.partition, offset, epoch, 1024, epoch)


def fetched(tp: TopicPartition, hw: int, records: int = 0, error: Errors = Errors.NONE,
            diverging=None) -> FetchedPartition:
    return FetchedPartition(tp.topic, tp.partition, int(error), hw, 0, b"x" * records, diverging)


def FetchRequest(replica_id: int, partitions=(), session_id: int = 0, session_epoch: int = FINAL_EPOCH,
                 forgotten=()) -> FetchParams:
    return FetchParams(replica_id=replica_id, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                       partitions=list(partitions), session_id=session_id, session_epoch=session_epoch,
                       forgotten=list(forgotten))


def request(handler: FetchSessionHandler, wanted: dict, replica_id: int = 2) -> FetchParams:
    sid, epoch, send, forget = handler.build(wanted)
    return FetchRequest(replica_id=replica_id, session_id=sid, session_epoch=epoch, partitions=send, forgotten=forget)


def tps(rows) -> list[TopicPartition]:
    return [TopicPartition(r.topic, r.partition) for r in rows]


def full(cache: FetchSessionCache, replica_id: int = 2, partitions=(A,), now: int = 0) -> FetchContext:
    """A full fetch opening a session of `partitions`."""
    return cache.new_context(FetchRequest(replica_id=replica_id, session_epoch=INITIAL_EPOCH,
                                          partitions=[fp(tp, 0) for tp in partitions]), now)


def answer(cache: FetchSessionCache, context: FetchContext, *rows: FetchedPartition) -> list[FetchedPartition]:
    return cache.respond(context, rows).partitions


def test_epochs_count_from_one_and_wrap_back_to_one():
    assert next_epoch(INITIAL_EPOCH) == 1 and next_epoch(41) == 42 and next_epoch(2 ** 31 - 1) == 1


def test_a_fetch_outside_a_session_covers_its_partitions_and_opens_nothing():
    cache = FetchSessionCache()
    req = FetchRequest(replica_id=-1, partitions=[fp(A, 3)])
    assert req.session_epoch == FINAL_EPOCH
    context = cache.new_context(req, 0)
    assert context == FetchContext(Errors.NONE, None, [fp(A, 3)], True) and len(cache) == 0
    assert cache.respond(context, [fetched(A, 5)]) == (Errors.NONE, INVALID_SESSION_ID, [fetched(A, 5)])


def test_the_first_fetch_is_full_and_the_next_names_only_what_changed():
    cache, handler = FetchSessionCache(rng=random.Random(1)), FetchSessionHandler()
    wanted = {A: fp(A, 0), B: fp(B, 0), C: fp(C, 0)}
    req = request(handler, wanted)
    assert (req.session_id, req.session_epoch, tps(req.partitions)) == (INVALID_SESSION_ID, INITIAL_EPOCH, [A, B, C])
    context = cache.new_context(req, 0)
    session = context.session
    assert context.error == Errors.NONE and tps(context.partitions) == [A, B, C]
    result = cache.respond(context, [fetched(A, 0), fetched(B, 0), fetched(C, 0)])
    assert result.session_id == session.id and tps(result.partitions) == [A, B, C]  # a full answer: every one
    assert handler.handle_response(Errors.NONE, session.id)

    wanted[B] = fp(B, 4)  # B appended records
    req = request(handler, wanted)
    assert (req.session_id, req.session_epoch, tps(req.partitions), list(req.forgotten)) == (session.id, 1, [B], [])
    cache.mark(C)  # the leader appended to C meanwhile
    context = cache.new_context(req, 0)
    assert context.session is session and sorted(tps(context.partitions)) == [B, C]  # named, or changed here
    assert {p.partition: p.fetch_offset for p in context.partitions if p.topic == "t"} == {1: 4}
    assert [p.fetch_offset for p in session.partitions.values()] == [0, 4, 0]  # the session holds them all
    assert tps(answer(cache, context, fetched(B, 0), fetched(C, 0, records=2))) == [C]
    assert handler.handle_response(Errors.NONE, session.id)


@pytest.mark.parametrize("news, included", [
    (dict(records=1), True),
    (dict(hw=9), True),
    (dict(error=Errors.NOT_LEADER_OR_FOLLOWER), True),
    (dict(diverging=(1, 3)), True),
    ({}, False),
])
def test_an_incremental_answer_carries_a_partition_only_with_news(news, included):
    cache = FetchSessionCache()
    context = full(cache)
    answer(cache, context, fetched(A, 5))
    args = dict(hw=5) | news
    hw = args.pop("hw")
    incremental = context._replace(full=False)
    assert bool(answer(cache, incremental, fetched(A, hw, **args))) is included


def test_a_partition_that_had_an_error_is_sent_again_once_it_clears():
    """Its cached high watermark is forgotten with the error: the follower hears the partition is
    fine again even though the high watermark did not move."""
    cache = FetchSessionCache()
    context = full(cache)
    answer(cache, context, fetched(A, 5))
    incremental = context._replace(full=False)
    assert answer(cache, incremental, fetched(A, -1, error=Errors.FENCED_LEADER_EPOCH))
    assert tps(answer(cache, incremental, fetched(A, 5))) == [A]
    assert answer(cache, incremental, fetched(A, 5)) == []


def test_a_new_leader_epoch_in_the_request_hears_the_high_watermark_again():
    cache, handler = FetchSessionCache(), FetchSessionHandler()
    wanted = {A: fp(A, 5, epoch=1)}
    context = cache.new_context(request(handler, wanted), 0)
    answer(cache, context, fetched(A, 5))
    handler.handle_response(Errors.NONE, context.session.id)
    wanted[A] = fp(A, 5, epoch=2)
    context = cache.new_context(request(handler, wanted), 0)
    assert tps(answer(cache, context, fetched(A, 5))) == [A]


def test_dropped_partitions_are_forgotten_and_new_ones_added():
    cache, handler = FetchSessionCache(), FetchSessionHandler()
    wanted = {A: fp(A, 0), B: fp(B, 0)}
    context = cache.new_context(request(handler, wanted), 0)
    session = context.session
    answer(cache, context, fetched(A, 0), fetched(B, 0))
    handler.handle_response(Errors.NONE, session.id)
    req = request(handler, {A: fp(A, 0), C: fp(C, 7)})
    assert tps(req.partitions) == [C] and list(req.forgotten) == [("t", 1)]
    context = cache.new_context(req, 0)
    assert {TopicPartition(p.topic, p.partition): p.fetch_offset for p in context.partitions} == {C: 7}
    assert {tp: p.fetch_offset for tp, p in session.partitions.items()} == {A: 0, C: 7}
    assert tps(answer(cache, context, fetched(C, 7))) == [C]  # new: its HW is news


def test_an_unknown_session_is_refused_and_the_follower_starts_again():
    """A restarted leader knows no session: FETCH_SESSION_ID_NOT_FOUND, and the follower's next fetch
    is full, naming no session."""
    old, handler = FetchSessionCache(), FetchSessionHandler()
    wanted = {A: fp(A, 0), B: fp(B, 0)}
    context = old.new_context(request(handler, wanted), 0)
    handler.handle_response(Errors.NONE, context.session.id)
    restarted = FetchSessionCache()
    context = restarted.new_context(request(handler, wanted), 0)
    assert (context.error, context.session, context.partitions) == (Errors.FETCH_SESSION_ID_NOT_FOUND, None, [])
    assert not handler.handle_response(context.error, INVALID_SESSION_ID)
    req = request(handler, wanted)
    assert (req.session_id, req.session_epoch, tps(req.partitions)) == (INVALID_SESSION_ID, INITIAL_EPOCH, [A, B])


def test_a_session_is_found_by_its_id_alone():
    """Kafka's cache.get(sessionId): whoever sends the fetch (a session holds no replica id)."""
    cache = FetchSessionCache()
    session = full(cache, replica_id=2).session
    assert cache.new_context(FetchRequest(replica_id=3, session_id=session.id, session_epoch=1), 0).session is session


def test_a_fetch_out_of_turn_is_refused_without_touching_the_session():
    """A fetch that timed out at the follower and arrives late carries an old epoch."""
    cache = FetchSessionCache()
    session = full(cache).session
    assert cache.new_context(FetchRequest(replica_id=2, session_id=session.id, session_epoch=1), 0).error == Errors.NONE
    context = cache.new_context(FetchRequest(replica_id=2, session_id=session.id, session_epoch=1,
                                             partitions=[fp(A, 99)]), 0)
    assert context.error == Errors.INVALID_FETCH_SESSION_EPOCH
    assert session.partitions[A].fetch_offset == 0 and session.epoch == 2


@pytest.mark.parametrize("epoch", [INITIAL_EPOCH, FINAL_EPOCH])
def test_a_full_fetch_closes_the_session_it_names_and_only_that_one(epoch):
    """Kafka's newContext: "Any session specified in a FULL fetch request will be closed"; a full fetch
    naming none leaves the others (the same follower's too); the final epoch opens none."""
    cache = FetchSessionCache()
    first, other = full(cache, replica_id=2).session, full(cache, replica_id=3).session
    unnamed = full(cache, replica_id=2, partitions=(B,)).session
    context = cache.new_context(FetchRequest(replica_id=2, session_id=first.id, session_epoch=epoch,
                                             partitions=[fp(B, 0)]), 0)
    assert cache.get(first.id) is None and cache.get(other.id) is other and cache.get(unnamed.id) is unnamed
    assert context.full and tps(context.partitions) == [B]
    assert (context.session is None) is (epoch == FINAL_EPOCH) and len(cache) == (2 if epoch == FINAL_EPOCH else 3)


def test_an_incremental_fetch_that_empties_its_session_closes_it_and_runs_without():
    cache = FetchSessionCache()
    session = full(cache, partitions=(A, B)).session
    context = cache.new_context(FetchRequest(replica_id=2, session_id=session.id, session_epoch=1,
                                             forgotten=[("t", 0), ("t", 1)]), 0)
    assert context == FetchContext(Errors.NONE, None, [], True) and len(cache) == 0
    assert cache.respond(context, []).session_id == INVALID_SESSION_ID


def test_a_full_cache_keeps_its_sessions_and_answers_the_newcomer_without_one():
    """Nothing idle, nothing outranked: the new full fetch still reads its partitions."""
    cache = FetchSessionCache(max_entries=2)
    kept = [full(cache, replica_id=2).session, full(cache, replica_id=3).session]
    context = full(cache, replica_id=4, partitions=(A, B), now=1000)
    assert context.session is None and tps(context.partitions) == [A, B] and context.full
    assert cache.respond(context, [fetched(A, 0), fetched(B, 0)]).session_id == INVALID_SESSION_ID
    assert [cache.get(s.id) for s in kept] == kept


def test_a_session_idle_for_the_eviction_time_goes_for_any_newcomer():
    """Kafka's tryEvict: first the session used least recently, if unused for over 120 s (a follower's
    too, for a consumer)."""
    cache = FetchSessionCache(max_entries=2)
    idle, used = full(cache, replica_id=2, now=0).session, full(cache, replica_id=3, now=1).session
    cache.new_context(FetchRequest(replica_id=3, session_id=used.id, session_epoch=1, partitions=[fp(A, 1)]), 50_000)
    assert full(cache, replica_id=-1, now=EVICTION_MS).session is None  # not idle for *over* 120 s yet
    newcomer = full(cache, replica_id=-1, now=EVICTION_MS + 1).session
    assert newcomer is not None and cache.get(idle.id) is None and cache.get(used.id) is used


@pytest.mark.parametrize("incumbent, newcomer, evicted", [
    # (replica id, partitions, creation time) of the incumbent; (replica id, partitions) of the newcomer
    ((-1, 2, 0), (2, 1), True),  # a follower evicts a consumer's session, even a young and larger one
    ((-1, 2, 0), (-1, 3), False),  # a consumer evicts none younger than the eviction time ...
    ((-1, 2, -EVICTION_MS - 1), (-1, 3), True),  # ... then a smaller one
    ((-1, 2, -EVICTION_MS - 1), (-1, 2), False),  # a tie keeps the incumbent
    ((2, 1, 0), (3, 5), False),  # a follower's young session is evicted by no one
    ((2, 1, -EVICTION_MS - 1), (3, 5), True),  # an old one by a larger follower's
    ((2, 1, -EVICTION_MS - 1), (-1, 5), False),  # never by a consumer's
])
def test_a_full_cache_evicts_the_lowest_ranked_session_the_newcomer_outranks(incumbent, newcomer, evicted):
    """Kafka's EvictableKey (privileged, size, id) and its two maps: followers may evict consumers'
    sessions and followers' older than the eviction time; consumers only sessions older than that. Ages
    are as of the session's last use (Kafka's touch)."""
    replica, size, created = incumbent
    cache = FetchSessionCache(max_entries=1)
    old = full(cache, replica_id=replica, partitions=[TopicPartition("t", i) for i in range(size)],
               now=created).session
    cache.new_context(FetchRequest(replica_id=replica, session_id=old.id, session_epoch=1), 100)  # used now
    replica, size = newcomer
    new = full(cache, replica_id=replica, partitions=[TopicPartition("u", i) for i in range(size)], now=100).session
    assert (new is not None, cache.get(old.id) is None) == (evicted, evicted)


def test_an_answer_does_not_name_a_session_evicted_while_the_fetch_waited():
    """Kafka creates a full fetch's session as it answers; here it is made as the fetch arrives (so that
    changes during its long poll mark it), and a session evicted meanwhile is not offered."""
    cache = FetchSessionCache(max_entries=1)
    waiting = full(cache, replica_id=-1)
    full(cache, replica_id=2)  # a follower's evicts it
    assert cache.respond(waiting, [fetched(A, 0)]).session_id == INVALID_SESSION_ID


def test_a_leader_that_keeps_no_session_gets_full_fetches():
    handler = FetchSessionHandler()
    request(handler, {A: fp(A, 0)})
    assert handler.handle_response(Errors.NONE, INVALID_SESSION_ID)
    assert request(handler, {A: fp(A, 0)}).session_epoch == INITIAL_EPOCH


def test_an_incremental_answer_without_a_session_means_the_leader_closed_it():
    """Kafka's handleResponse: "The incremental fetch session was closed by the server": the answer is
    used, and the next fetch is a full one naming no session."""
    handler = FetchSessionHandler()
    request(handler, {A: fp(A, 0)})
    handler.handle_response(Errors.NONE, 77)
    req = request(handler, {})
    assert (req.session_id, req.session_epoch, req.forgotten) == (77, 1, [("t", 0)])
    assert handler.handle_response(Errors.NONE, INVALID_SESSION_ID)
    req = request(handler, {A: fp(A, 3)})
    assert (req.session_id, req.session_epoch, tps(req.partitions)) == (INVALID_SESSION_ID, INITIAL_EPOCH, [A])


@pytest.mark.parametrize("failure", ["raised", Errors.INVALID_FETCH_SESSION_EPOCH])
def test_a_failed_fetch_is_followed_by_a_full_fetch_closing_the_session(failure):
    """Kafka's handleError and handleResponse: nextCloseExisting, so that the leader does not keep the
    old session (it would hold a slot of the cache until evicted)."""
    handler = FetchSessionHandler()
    request(handler, {A: fp(A, 0)})
    handler.handle_response(Errors.NONE, 77)
    assert request(handler, {A: fp(A, 0)}).session_epoch == 1
    if failure == "raised":
        handler.reset()  # the call raised (the leader died, or it timed out)
    else:
        assert not handler.handle_response(failure, INVALID_SESSION_ID)
    req = request(handler, {A: fp(A, 0)})
    assert (req.session_id, req.session_epoch, tps(req.partitions)) == (77, INITIAL_EPOCH, [A])
    assert handler.handle_response(Errors.NONE, 78)
    req = request(handler, {A: fp(A, 0)})
    assert (req.session_id, req.session_epoch) == (78, 1)


def test_random_rounds_keep_the_leaders_view_equal_to_the_followers():
    """Whatever partitions come, go and move, and whichever fetches fail, the leader's session holds
    exactly what the follower wants after every answered fetch, and each answer carries every
    partition whose high watermark the follower has not heard; a failed fetch's session is closed."""
    rng = random.Random(7)
    universe = [TopicPartition("t", i) for i in range(12)]
    cache, handler = FetchSessionCache(rng=rng), FetchSessionHandler()
    wanted = {tp: fp(tp, 0) for tp in universe[:6]}
    leader_hw = {tp: 0 for tp in universe}
    follower_hw: dict[TopicPartition, int] = {}
    for _ in range(500):
        for tp in rng.sample(universe, 3):  # moves, additions and removals
            choice = rng.random()
            if choice < 0.5 and tp in wanted:
                wanted[tp] = fp(tp, wanted[tp].fetch_offset + rng.randint(0, 3), wanted[tp].current_leader_epoch)
            elif choice < 0.7 and len(wanted) > 1:  # (a session left empty is closed: tested apart)
                wanted.pop(tp, None)
                follower_hw.pop(tp, None)
            elif tp not in wanted:
                wanted[tp] = fp(tp, 0, rng.randint(0, 2))
            if rng.random() < 0.5:
                leader_hw[tp] += 1
                cache.mark(tp)  # as the replica manager does on every change
        req = request(handler, wanted)
        if rng.random() < 0.05:  # lost on the way: the follower's call failed
            handler.reset()
            follower_hw.clear()
            continue
        context = cache.new_context(req, 0)
        assert context.error == Errors.NONE and len(cache) == 1
        assert context.session.partitions == wanted
        result = cache.respond(context, [fetched(tp, leader_hw[tp]) for tp in tps(context.partitions)])
        assert handler.handle_response(result.error_code, result.session_id)
        for f in result.partitions:
            follower_hw[TopicPartition(f.topic, f.partition)] = f.high_watermark
        assert all(follower_hw.get(tp) == leader_hw[tp] for tp in wanted)


def test_building_from_the_changed_partitions_gives_what_a_full_comparison_gives():
    """A fetcher names the partitions that may have changed (appended, truncated, moved epoch, dropped):
    the request is the same as comparing every partition it follows with the session."""
    rng = random.Random(11)
    universe = [TopicPartition("t", i) for i in range(20)]
    full_, incremental = FetchSessionHandler(), FetchSessionHandler()
    wanted = {tp: fp(tp, 0) for tp in universe[:10]}
    changed: set[TopicPartition] = set(wanted)
    for round_ in range(300):
        for tp in rng.sample(universe, 4):
            if tp in wanted and rng.random() < 0.6:
                wanted[tp] = fp(tp, wanted[tp].fetch_offset + 1, wanted[tp].current_leader_epoch)
            elif tp in wanted:
                del wanted[tp]
            else:
                wanted[tp] = fp(tp, 0, rng.randint(0, 2))
            changed.add(tp)
        a, b = full_.build(wanted), incremental.build(wanted, changed)
        assert (a[0], a[1], sorted(a[2]), sorted(a[3])) == (b[0], b[1], sorted(b[2]), sorted(b[3])), round_
        changed = set()
        session_id = 5 if round_ == 0 else full_.session_id
        assert full_.handle_response(Errors.NONE, session_id) and incremental.handle_response(Errors.NONE, session_id)
