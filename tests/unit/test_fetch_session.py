"""Incremental fetch sessions (KIP-227): the leader's cache and the follower's handler, alone and
together, including every way either side can lose track."""
from __future__ import annotations

import random

import pytest

from actors.broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchSessionCache,
    FetchSessionHandler,
    next_epoch,
)
from actors.data_protocol import FetchedPartition, FetchParams, FetchPartition
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


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


def test_epochs_count_from_one_and_wrap_back_to_one():
    assert next_epoch(INITIAL_EPOCH) == 1 and next_epoch(41) == 42 and next_epoch(2 ** 31 - 1) == 1


def test_a_fetch_outside_a_session_covers_its_partitions_and_opens_nothing():
    cache = FetchSessionCache()
    req = FetchRequest(replica_id=-1, partitions=[fp(A, 3)])
    assert req.session_epoch == FINAL_EPOCH
    error, session, partitions = cache.open(req)
    assert (error, session, partitions, len(cache)) == (Errors.NONE, None, [fp(A, 3)], 0)
    assert cache.respond(None, True, [fetched(A, 5)]) == [fetched(A, 5)]


def test_the_first_fetch_is_full_and_the_next_names_only_what_changed():
    cache, handler = FetchSessionCache(random.Random(1)), FetchSessionHandler()
    wanted = {A: fp(A, 0), B: fp(B, 0), C: fp(C, 0)}
    req = request(handler, wanted)
    assert (req.session_id, req.session_epoch, tps(req.partitions)) == (INVALID_SESSION_ID, INITIAL_EPOCH, [A, B, C])
    error, session, partitions = cache.open(req)
    assert error == Errors.NONE and tps(partitions) == [A, B, C]
    answer = cache.respond(session, True, [fetched(A, 0), fetched(B, 0), fetched(C, 0)])
    assert tps(answer) == [A, B, C]  # a full answer carries every partition
    assert handler.handle_response(Errors.NONE, session.id)

    wanted[B] = fp(B, 4)  # B appended records
    req = request(handler, wanted)
    assert (req.session_id, req.session_epoch, tps(req.partitions), list(req.forgotten)) == (session.id, 1, [B], [])
    cache.mark(C)  # the leader appended to C meanwhile
    error, same, partitions = cache.open(req)
    assert same is session and sorted(tps(partitions)) == [B, C]  # named, or changed at the leader
    assert {p.partition: p.fetch_offset for p in partitions if p.topic == "t"} == {1: 4}
    assert [p.fetch_offset for p in session.partitions.values()] == [0, 4, 0]  # the session holds them all
    answer = cache.respond(session, False, [fetched(B, 0), fetched(C, 0, records=2)])
    assert tps(answer) == [C]
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
    _, session, _ = cache.open(FetchRequest(replica_id=2, session_epoch=INITIAL_EPOCH, partitions=[fp(A, 5)]))
    cache.respond(session, True, [fetched(A, 5)])
    args = dict(hw=5) | news
    hw = args.pop("hw")
    assert bool(cache.respond(session, False, [fetched(A, hw, **args)])) is included


def test_a_partition_that_had_an_error_is_sent_again_once_it_clears():
    """Its cached high watermark is forgotten with the error: the follower hears the partition is
    fine again even though the high watermark did not move."""
    cache = FetchSessionCache()
    _, session, _ = cache.open(FetchRequest(replica_id=2, session_epoch=INITIAL_EPOCH, partitions=[fp(A, 5)]))
    cache.respond(session, True, [fetched(A, 5)])
    assert cache.respond(session, False, [fetched(A, -1, error=Errors.FENCED_LEADER_EPOCH)])
    assert tps(cache.respond(session, False, [fetched(A, 5)])) == [A]
    assert cache.respond(session, False, [fetched(A, 5)]) == []


def test_a_new_leader_epoch_in_the_request_hears_the_high_watermark_again():
    cache, handler = FetchSessionCache(), FetchSessionHandler()
    wanted = {A: fp(A, 5, epoch=1)}
    _, session, _ = cache.open(request(handler, wanted))
    cache.respond(session, True, [fetched(A, 5)])
    handler.handle_response(Errors.NONE, session.id)
    wanted[A] = fp(A, 5, epoch=2)
    cache.open(request(handler, wanted))
    assert tps(cache.respond(session, False, [fetched(A, 5)])) == [A]


def test_dropped_partitions_are_forgotten_and_new_ones_added():
    cache, handler = FetchSessionCache(), FetchSessionHandler()
    wanted = {A: fp(A, 0), B: fp(B, 0)}
    _, session, _ = cache.open(request(handler, wanted))
    cache.respond(session, True, [fetched(A, 0), fetched(B, 0)])
    handler.handle_response(Errors.NONE, session.id)
    req = request(handler, {A: fp(A, 0), C: fp(C, 7)})
    assert tps(req.partitions) == [C] and list(req.forgotten) == [("t", 1)]
    _, _, partitions = cache.open(req)
    assert {TopicPartition(p.topic, p.partition): p.fetch_offset for p in partitions} == {C: 7}
    assert {tp: p.fetch_offset for tp, p in session.partitions.items()} == {A: 0, C: 7}
    assert tps(cache.respond(session, False, [fetched(C, 7)])) == [C]  # new: its HW is news


def test_an_unknown_session_is_refused_and_the_follower_starts_again():
    """A restarted leader knows no session: FETCH_SESSION_ID_NOT_FOUND, and the follower's next fetch
    is full."""
    old, handler = FetchSessionCache(), FetchSessionHandler()
    wanted = {A: fp(A, 0), B: fp(B, 0)}
    _, session, _ = old.open(request(handler, wanted))
    handler.handle_response(Errors.NONE, session.id)
    restarted = FetchSessionCache()
    error, none, partitions = restarted.open(request(handler, wanted))
    assert (error, none, partitions) == (Errors.FETCH_SESSION_ID_NOT_FOUND, None, [])
    assert not handler.handle_response(error, INVALID_SESSION_ID)
    req = request(handler, wanted)
    assert (req.session_epoch, tps(req.partitions)) == (INITIAL_EPOCH, [A, B])


def test_another_followers_session_id_is_not_found():
    cache = FetchSessionCache()
    _, session, _ = cache.open(FetchRequest(replica_id=2, session_epoch=INITIAL_EPOCH, partitions=[fp(A, 0)]))
    error, _, _ = cache.open(FetchRequest(replica_id=3, session_id=session.id, session_epoch=1, partitions=[]))
    assert error == Errors.FETCH_SESSION_ID_NOT_FOUND


def test_a_fetch_out_of_turn_is_refused_without_touching_the_session():
    """A fetch that timed out at the follower and arrives late carries an old epoch."""
    cache = FetchSessionCache()
    _, session, _ = cache.open(FetchRequest(replica_id=2, session_epoch=INITIAL_EPOCH, partitions=[fp(A, 0)]))
    assert cache.open(FetchRequest(replica_id=2, session_id=session.id, session_epoch=1, partitions=[]))[0] == Errors.NONE
    error, _, _ = cache.open(FetchRequest(replica_id=2, session_id=session.id, session_epoch=1,
                                          partitions=[fp(A, 99)]))
    assert error == Errors.INVALID_FETCH_SESSION_EPOCH
    assert session.partitions[A].fetch_offset == 0 and session.epoch == 2


def test_a_full_fetch_replaces_the_followers_older_session():
    cache = FetchSessionCache()
    _, first, _ = cache.open(FetchRequest(replica_id=2, session_epoch=INITIAL_EPOCH, partitions=[fp(A, 0)]))
    _, other, _ = cache.open(FetchRequest(replica_id=3, session_epoch=INITIAL_EPOCH, partitions=[fp(A, 0)]))
    _, second, _ = cache.open(FetchRequest(replica_id=2, session_epoch=INITIAL_EPOCH, partitions=[fp(B, 0)]))
    assert len(cache) == 2 and first.id != second.id
    assert cache.open(FetchRequest(replica_id=2, session_id=first.id, session_epoch=1,
                                   partitions=[]))[0] == Errors.FETCH_SESSION_ID_NOT_FOUND
    assert cache.open(FetchRequest(replica_id=3, session_id=other.id, session_epoch=1, partitions=[]))[0] == Errors.NONE


def test_a_leader_that_keeps_no_session_gets_full_fetches():
    handler = FetchSessionHandler()
    request(handler, {A: fp(A, 0)})
    assert handler.handle_response(Errors.NONE, INVALID_SESSION_ID)
    assert request(handler, {A: fp(A, 0)}).session_epoch == INITIAL_EPOCH


def test_a_failed_fetch_starts_a_new_session():
    handler = FetchSessionHandler()
    request(handler, {A: fp(A, 0)})
    handler.handle_response(Errors.NONE, 77)
    assert request(handler, {A: fp(A, 0)}).session_epoch == 1
    handler.reset()  # the call raised (the leader died, or it timed out)
    req = request(handler, {A: fp(A, 0)})
    assert (req.session_id, req.session_epoch, tps(req.partitions)) == (INVALID_SESSION_ID, INITIAL_EPOCH, [A])


def test_random_rounds_keep_the_leaders_view_equal_to_the_followers():
    """Whatever partitions come, go and move, and whichever fetches fail, the leader's session holds
    exactly what the follower wants after every answered fetch, and each answer carries every
    partition whose high watermark the follower has not heard."""
    rng = random.Random(7)
    universe = [TopicPartition("t", i) for i in range(12)]
    cache, handler = FetchSessionCache(rng), FetchSessionHandler()
    wanted = {tp: fp(tp, 0) for tp in universe[:6]}
    leader_hw = {tp: 0 for tp in universe}
    follower_hw: dict[TopicPartition, int] = {}
    for _ in range(500):
        for tp in rng.sample(universe, 3):  # moves, additions and removals
            choice = rng.random()
            if choice < 0.5 and tp in wanted:
                wanted[tp] = fp(tp, wanted[tp].fetch_offset + rng.randint(0, 3), wanted[tp].current_leader_epoch)
            elif choice < 0.7:
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
        error, session, partitions = cache.open(req)
        assert error == Errors.NONE
        assert session.partitions == wanted
        answer = cache.respond(session, req.session_epoch == INITIAL_EPOCH,
                               [fetched(TopicPartition(p.topic, p.partition), leader_hw[TopicPartition(p.topic, p.partition)])
                                for p in partitions])
        assert handler.handle_response(Errors.NONE, session.id)
        for f in answer:
            follower_hw[TopicPartition(f.topic, f.partition)] = f.high_watermark
        assert all(follower_hw.get(tp) == leader_hw[tp] for tp in wanted)


def test_building_from_the_changed_partitions_gives_what_a_full_comparison_gives():
    """A fetcher names the partitions that may have changed (appended, truncated, moved epoch, dropped):
    the request is the same as comparing every partition it follows with the session."""
    rng = random.Random(11)
    universe = [TopicPartition("t", i) for i in range(20)]
    full, incremental = FetchSessionHandler(), FetchSessionHandler()
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
        a, b = full.build(wanted), incremental.build(wanted, changed)
        assert (a[0], a[1], sorted(a[2]), sorted(a[3])) == (b[0], b[1], sorted(b[2]), sorted(b[3])), round_
        changed = set()
        session_id = 5 if round_ == 0 else full.session_id
        assert full.handle_response(Errors.NONE, session_id) and incremental.handle_response(Errors.NONE, session_id)
