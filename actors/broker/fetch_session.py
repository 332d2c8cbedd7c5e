"""Incremental fetch sessions (KIP-227): a fetch names only the partitions whose fetch position
changed since the last one, and the leader answers only the partitions with something new.

Without them every fetch round lists and answers every partition a follower has on the leader:
on brokers of 1,000 partitions those rounds were most of the brokers' CPU.

Leader side, `FetchSessionCache`, with Kafka's lifecycle (FetchManager.newContext and
FetchSessionCache): a full fetch (epoch 0) or a final one (-1) naming a session closes it; a full
fetch opens a session when the cache (max.incremental.fetch.session.cache.slots) has room or can
evict one: a session idle for 120 s, else the least valuable one the newcomer outranks (followers'
sessions are privileged, then the larger wins; a consumer never evicts a follower's); otherwise the
fetch is answered without a session (id 0). An incremental fetch that leaves its session empty
closes it and is answered without one. Each session holds the last FetchPartition sent for each of
its partitions and the high watermark last sent back. Kafka reads every partition of a session on
every fetch; here the replica manager marks a partition `dirty` in the sessions that hold it when
something about it changes (an append, the high watermark, its role), so a fetch reads only the
partitions it names and the dirty ones: a round's cost follows what changed, not how many
partitions a follower has. The answer carries only those with records, an error, a diverging
epoch, or a high watermark other than the one last sent.

Follower side, `FetchSessionHandler` (Kafka's client FetchSessionHandler): remembers what the session
holds and builds the next request from the difference (changed or new partitions to send, dropped
ones to forget); after a failure its full fetch names the old session, which closes it.

Either side losing track costs one full fetch, never a wrong answer: a restarted leader answers
FETCH_SESSION_ID_NOT_FOUND, a fetch out of turn INVALID_FETCH_SESSION_EPOCH, and a client whose
fetch failed starts a new session. Pure and single-threaded (the broker's event loop owns it).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from actors.data_protocol import FetchedPartition, FetchParams, FetchPartition, FetchResult
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

INITIAL_EPOCH = 0  # a full fetch that opens a session
FINAL_EPOCH = -1  # a full fetch outside any session
INVALID_SESSION_ID = 0
MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS = 1000  # Kafka's max.incremental.fetch.session.cache.slots
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000  # Kafka's: a session unused for longer may be evicted


def next_epoch(epoch: int) -> int:
    """Session epochs count up from 1 and wrap back to 1 (0 and -1 mean full fetches)."""
    return 1 if epoch >= 2 ** 31 - 1 else epoch + 1


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool  # a follower's: a consumer's new session cannot evict it unless it is idle
    epoch: int  # the epoch the next incremental fetch must carry
    partitions: dict[TopicPartition, FetchPartition]
    creation_ms: int
    last_used_ms: int = -1
    # as of its last use (Kafka's touch): its size, and which newcomers may evict it
    cached_size: int = -1
    evictable_by_privileged: bool = False
    evictable_by_all: bool = False
    high_watermarks: dict[TopicPartition, int] = field(default_factory=dict)  # last sent back; -1: send again
    dirty: set[TopicPartition] = field(default_factory=set)  # changed since they were last read

    def evictable_key(self) -> tuple[bool, int, int]:
        """Kafka's EvictableKey: consumers' sessions rank below followers', then smaller below larger."""
        return self.privileged, self.cached_size, self.id


class FetchContext(NamedTuple):
    """What Kafka's FetchManager.newContext makes of a fetch: a session error, or the session it runs in
    (None: none) with the partitions it reads now; `full`: its answer carries every partition read."""

    error: Errors
    session: FetchSession | None
    partitions: list[FetchPartition]
    full: bool


class FetchSessionCache:
    def __init__(self, max_entries: int = MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS,
                 eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS, rng: random.Random | None = None):
        self.max_entries, self.eviction_ms = max_entries, eviction_ms
        self._rng = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def new_context(self, params: FetchParams, now: int) -> FetchContext:
        """Kafka's FetchManager.newContext. A full fetch closes the session it names, then at
        INITIAL_EPOCH opens one of its partitions if the cache takes it, at FINAL_EPOCH runs without. An
        incremental fetch updates its session with the request's changes and reads those and the
        session's dirty partitions; one that leaves the session empty closes it and runs without."""
        if params.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if params.session_id != INVALID_SESSION_ID:
                self.remove(params.session_id)
            partitions = {TopicPartition(p.topic, p.partition): p for p in params.partitions}
            session = self.maybe_create_session(now, params.replica_id >= 0, partitions) \
                if params.session_epoch == INITIAL_EPOCH else None
            return FetchContext(Errors.NONE, session, list(partitions.values()), True)
        session = self.get(params.session_id)
        if session is None:
            return FetchContext(Errors.FETCH_SESSION_ID_NOT_FOUND, None, [], True)
        if session.epoch != params.session_epoch:
            return FetchContext(Errors.INVALID_FETCH_SESSION_EPOCH, None, [], True)
        read = self.take_dirty(session)
        for p in params.partitions:
            tp = TopicPartition(p.topic, p.partition)
            old = session.partitions.get(tp)
            if old is None or old.current_leader_epoch != p.current_leader_epoch:
                session.high_watermarks.pop(tp, None)  # a new replica or leader epoch hears the HW again
            session.partitions[tp] = p
            read[tp] = p
        for topic, partition in params.forgotten:
            tp = TopicPartition(topic, partition)
            session.partitions.pop(tp, None)
            session.high_watermarks.pop(tp, None)
            read.pop(tp, None)
        if not session.partitions:
            self.remove(session.id)
            return FetchContext(Errors.NONE, None, list(params.partitions), True)
        self.touch(session, now)
        session.epoch = next_epoch(session.epoch)
        return FetchContext(Errors.NONE, session, list(read.values()), False)

    def maybe_create_session(self, now: int, privileged: bool,
                             partitions: dict[TopicPartition, FetchPartition]) -> FetchSession | None:
        """Kafka's maybeCreateSession: a new session if the cache has room or evicts one for it."""
        if len(self._sessions) >= self.max_entries and not self.try_evict(privileged, len(partitions), now):
            return None
        session = FetchSession(self._new_id(), privileged, next_epoch(INITIAL_EPOCH), partitions, now)
        self._sessions[session.id] = session
        self.touch(session, now)
        return session

    def try_evict(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's tryEvict, for a newcomer of `size` partitions: the session used least recently goes if
        unused for over eviction_ms; otherwise the lowest ranked one the newcomer may evict goes if the
        newcomer does not rank below it (a tie keeps the incumbent)."""
        stalest = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id), default=None)
        if stalest is None:
            return False
        if now - stalest.last_used_ms > self.eviction_ms:
            self.remove(stalest.id)
            return True
        lowest = min((s for s in self._sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)),
                     key=FetchSession.evictable_key, default=None)
        if lowest is None or (privileged, size, 0) < lowest.evictable_key():
            return False
        self.remove(lowest.id)
        return True

    def touch(self, session: FetchSession, now: int) -> None:
        """Kafka's touch: the session was used now. A session younger than eviction_ms is evictable only
        by followers, and only if it is a consumer's."""
        session.last_used_ms = now
        session.cached_size = len(session.partitions)
        old = now - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    def _new_id(self) -> int:
        while (sid := self._rng.randint(1, 2 ** 31 - 2)) in self._sessions:
            pass
        return sid

    def mark(self, tp: TopicPartition) -> None:
        """Something about tp changed: the sessions holding it read it on their next fetch."""
        for session in self._sessions.values():
            if tp in session.partitions:
                session.dirty.add(tp)

    @staticmethod
    def take_dirty(session: FetchSession) -> dict[TopicPartition, FetchPartition]:
        """The session's dirty partitions (as last sent), no longer dirty."""
        read = {tp: session.partitions[tp] for tp in session.dirty if tp in session.partitions}
        session.dirty.clear()
        return read

    def respond(self, context: FetchContext, fetched: Iterable[FetchedPartition]) -> FetchResult:
        """The answer (Kafka's updateAndGenerateResponseData): every partition for a full fetch, otherwise
        those with records, an error, a diverging epoch or a moved high watermark (Kafka's
        maybeUpdateResponseData). The high watermark sent is remembered; after an error it is forgotten,
        so that the partition is sent again once the error clears. The answer names the session only if
        it is still cached: one evicted or closed while this fetch waited is not offered to the client."""
        session, out = context.session, []
        for f in fetched:
            tp = TopicPartition(f.topic, f.partition)
            sent_hw = session.high_watermarks.get(tp, -1) if session is not None else -1
            if session is not None and tp in session.partitions:
                session.high_watermarks[tp] = f.high_watermark if f.error_code == Errors.NONE else -1
            if context.full or f.records or f.error_code != Errors.NONE or f.diverging_epoch is not None \
                    or f.high_watermark != sent_hw:
                out.append(f)
        cached = session is not None and self.get(session.id) is session
        return FetchResult(int(Errors.NONE), session.id if cached else INVALID_SESSION_ID, out)


class FetchSessionHandler:
    """The follower's side of its session with one leader (Kafka's client FetchSessionHandler)."""

    def __init__(self):
        self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        self._sent: dict[TopicPartition, FetchPartition] = {}  # what the leader's session holds
        self._building: tuple[dict | list, list[TopicPartition]] = ({}, [])  # the fetch in flight's changes

    def build(self, wanted: dict[TopicPartition, FetchPartition], changed: Iterable[TopicPartition] | None = None
              ) -> tuple[int, int, list[FetchPartition], list[tuple[str, int]]]:
        """(session id, epoch, partitions to send, partitions to forget) for a fetch of `wanted`. With
        `changed` (every partition whose entry may differ since the last build, dropped ones included),
        only those are compared: a round's cost follows what changed, not how many are followed. A full
        fetch names the session it replaces, if any, so that the leader closes it."""
        if self.epoch == INITIAL_EPOCH:
            self._building = (dict(wanted), [])
            return self.session_id, INITIAL_EPOCH, list(wanted.values()), []
        candidates = list(wanted) + [tp for tp in self._sent if tp not in wanted] if changed is None else changed
        send = [wanted[tp] for tp in candidates if tp in wanted and self._sent.get(tp) != wanted[tp]]
        forget = [tp for tp in candidates if tp not in wanted and tp in self._sent]
        self._building = (send, forget)
        return self.session_id, self.epoch, send, [(tp.topic, tp.partition) for tp in forget]

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """After the leader answered the fetch just built: whether the answer is usable (Kafka's
        handleResponse). A session error is not: the next fetch is a full one (naming the session, unless
        the leader did not know it). An answer without a session (the leader keeps none, or closed the
        session) is, and the next fetch is a full one."""
        if error_code != Errors.NONE:
            self.reset()
            if error_code == Errors.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            return False
        if session_id == INVALID_SESSION_ID:
            self.session_id, self.epoch, self._sent = INVALID_SESSION_ID, INITIAL_EPOCH, {}
            return True
        sent, forgotten = self._building
        if self.epoch == INITIAL_EPOCH:
            self.session_id, self._sent = session_id, sent
        else:
            self._sent.update((TopicPartition(p.topic, p.partition), p) for p in sent)
            for tp in forgotten:
                self._sent.pop(tp, None)
        self.epoch = next_epoch(self.epoch)
        return True

    def reset(self) -> None:
        """The fetch failed: the next one is full and names the session, which the leader then closes
        (Kafka's handleError: nextCloseExisting)."""
        self.epoch, self._sent = INITIAL_EPOCH, {}
