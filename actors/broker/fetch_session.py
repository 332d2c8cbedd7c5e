"""Incremental fetch sessions (KIP-227): a fetch names only the partitions whose fetch position
changed since the last one, and the leader answers only the partitions with something new.

Without them every fetch round lists and answers every partition a follower has on the leader:
on brokers of 1,000 partitions those rounds were most of the brokers' CPU.

Leader side, `FetchSessionCache`: one session per follower broker (a new full fetch replaces it)
and up to `max_consumer_sessions` for consumers (the least recently used goes, as Kafka's
max.incremental.fetch.session.cache.slots), each holding the last FetchPartition sent for each of
its partitions and the high watermark last sent back. Kafka reads every partition of a session on
every fetch; here the replica manager marks a partition `dirty` in the sessions that hold it when
something about it changes (an append, the high watermark, its role), so a fetch reads only the
partitions it names and the dirty ones: a round's cost follows what changed, not how many
partitions a follower has. The answer carries only those with records, an error, a diverging
epoch, or a high watermark other than the one last sent.

Follower side, `FetchSessionHandler`: remembers what the session holds and builds the next request
from the difference (changed or new partitions to send, dropped ones to forget).

Either side losing track costs one full fetch, never a wrong answer: a restarted leader answers
FETCH_SESSION_ID_NOT_FOUND, a fetch out of turn INVALID_FETCH_SESSION_EPOCH, and a client whose
fetch failed starts a new session. Pure and single-threaded (the broker's event loop owns it).
"""
from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable

from actors.data_protocol import FetchedPartition, FetchParams, FetchPartition
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

INITIAL_EPOCH = 0  # a full fetch that opens a session
FINAL_EPOCH = -1  # a full fetch outside any session
INVALID_SESSION_ID = 0
MAX_CONSUMER_SESSIONS = 1000  # Kafka's max.incremental.fetch.session.cache.slots


def next_epoch(epoch: int) -> int:
    """Session epochs count up from 1 and wrap back to 1 (0 and -1 mean full fetches)."""
    return 1 if epoch >= 2 ** 31 - 1 else epoch + 1


@dataclass(eq=False)
class FetchSession:
    id: int
    replica_id: int
    epoch: int  # the epoch the next incremental fetch must carry
    partitions: dict[TopicPartition, FetchPartition]
    high_watermarks: dict[TopicPartition, int] = field(default_factory=dict)  # last sent back; -1: send again
    dirty: set[TopicPartition] = field(default_factory=set)  # changed since they were last read


class FetchSessionCache:
    def __init__(self, rng: random.Random | None = None, max_consumer_sessions: int = MAX_CONSUMER_SESSIONS):
        self._rng = rng or random.Random()
        self.max_consumer_sessions = max_consumer_sessions
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._by_replica: dict[int, int] = {}  # follower broker -> its session

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, params: FetchParams) -> tuple[Errors, FetchSession | None, list[FetchPartition]]:
        """(error, session, the partitions this fetch reads). FINAL_EPOCH: no session, the request's
        partitions; INITIAL_EPOCH: a new session of the request's partitions, replacing the follower's
        older one; otherwise the named session updated with the request's changes, reading those
        and the session's dirty partitions."""
        if params.session_epoch == FINAL_EPOCH:
            return Errors.NONE, None, list(params.partitions)
        if params.session_epoch == INITIAL_EPOCH:
            if params.replica_id >= 0:
                self._sessions.pop(self._by_replica.pop(params.replica_id, INVALID_SESSION_ID), None)
            elif sum(s.replica_id < 0 for s in self._sessions.values()) >= self.max_consumer_sessions:
                oldest = next(sid for sid, s in self._sessions.items() if s.replica_id < 0)
                del self._sessions[oldest]
            session = FetchSession(self._new_id(), params.replica_id, next_epoch(INITIAL_EPOCH),
                                   {TopicPartition(p.topic, p.partition): p for p in params.partitions})
            self._sessions[session.id] = session
            if params.replica_id >= 0:
                self._by_replica[params.replica_id] = session.id
            return Errors.NONE, session, list(session.partitions.values())
        session = self._sessions.get(params.session_id)
        if session is None or session.replica_id != params.replica_id:
            return Errors.FETCH_SESSION_ID_NOT_FOUND, None, []
        if session.epoch != params.session_epoch:
            return Errors.INVALID_FETCH_SESSION_EPOCH, None, []
        self._sessions.move_to_end(session.id)
        session.epoch = next_epoch(session.epoch)
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
        return Errors.NONE, session, list(read.values())

    def _new_id(self) -> int:
        while (sid := self._rng.randint(1, 2 ** 31 - 1)) in self._sessions:
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

    def respond(self, session: FetchSession | None, full: bool,
                fetched: Iterable[FetchedPartition]) -> list[FetchedPartition]:
        """What the answer carries: every partition for a full fetch, otherwise those with records, an
        error, a diverging epoch or a moved high watermark (Kafka's maybeUpdateResponseData). The high
        watermark sent is remembered; after an error it is forgotten, so that the partition is sent
        again once the error clears."""
        out = []
        for f in fetched:
            tp = TopicPartition(f.topic, f.partition)
            sent_hw = session.high_watermarks.get(tp, -1) if session is not None else -1
            if session is not None and tp in session.partitions:
                session.high_watermarks[tp] = f.high_watermark if f.error_code == Errors.NONE else -1
            if full or f.records or f.error_code != Errors.NONE or f.diverging_epoch is not None \
                    or f.high_watermark != sent_hw:
                out.append(f)
        return out


class FetchSessionHandler:
    """The follower's side of its session with one leader."""

    def __init__(self):
        self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        self._sent: dict[TopicPartition, FetchPartition] = {}  # what the leader's session holds
        self._building: tuple[dict | list, list[TopicPartition]] = ({}, [])  # the fetch in flight's changes

    def build(self, wanted: dict[TopicPartition, FetchPartition], changed: Iterable[TopicPartition] | None = None
              ) -> tuple[int, int, list[FetchPartition], list[tuple[str, int]]]:
        """(session id, epoch, partitions to send, partitions to forget) for a fetch of `wanted`. With
        `changed` (every partition whose entry may differ since the last build, dropped ones included),
        only those are compared: a round's cost follows what changed, not how many are followed."""
        if self.epoch == INITIAL_EPOCH:
            self._building = (dict(wanted), [])
            return INVALID_SESSION_ID, INITIAL_EPOCH, list(wanted.values()), []
        candidates = list(wanted) + [tp for tp in self._sent if tp not in wanted] if changed is None else changed
        send = [wanted[tp] for tp in candidates if tp in wanted and self._sent.get(tp) != wanted[tp]]
        forget = [tp for tp in candidates if tp not in wanted and tp in self._sent]
        self._building = (send, forget)
        return self.session_id, self.epoch, send, [(tp.topic, tp.partition) for tp in forget]

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """After the leader answered the fetch just built: whether the answer is usable (a session
        error is not: the next fetch is a full one)."""
        if error_code != Errors.NONE:
            self.reset()
            return False
        sent, forgotten = self._building
        if self.epoch == INITIAL_EPOCH:
            if session_id == INVALID_SESSION_ID:  # the leader keeps no session: full fetches on
                return True
            self.session_id, self._sent = session_id, sent
        else:
            self._sent.update((TopicPartition(p.topic, p.partition), p) for p in sent)
            for tp in forgotten:
                self._sent.pop(tp, None)
        self.epoch = next_epoch(self.epoch)
        return True

    def reset(self) -> None:
        """The fetch failed or the session is gone: the next fetch opens a new one."""
        self.session_id, self.epoch, self._sent = INVALID_SESSION_ID, INITIAL_EPOCH, {}
