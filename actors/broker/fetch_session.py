"""Incremental fetch sessions (KIP-227): a follower's fetch names only the partitions whose fetch
position changed since its last one, and the leader answers only the partitions with something new.

Without them every fetch round lists and answers every partition a follower has on the leader: on
brokers of 1,000 partitions those rounds were most of the brokers' CPU, and the controller's work
in a failover waited for that CPU.

Leader side, `FetchSessionCache`: one session per follower broker (a new full fetch replaces it),
holding the last FetchPartition the follower sent for each partition and the high watermark last
sent back. Every fetch still covers all of the session's partitions (a follower that is caught up
stays caught up, as in Kafka; the replica manager passes over those with nothing new for a while,
see its `_fetch_once`), but the answer carries only those with records, an error, a diverging
epoch, or a high watermark other than the one last sent.

Follower side, `FetchSessionHandler`: remembers what the session holds and builds the next request
from the difference (changed or new partitions to send, dropped ones to forget).

Either side losing track costs one full fetch, never a wrong answer: a restarted leader answers
FETCH_SESSION_ID_NOT_FOUND, a fetch out of turn (one that timed out at the follower and arrived
late) INVALID_FETCH_SESSION_EPOCH, and a follower whose fetch failed starts a new session. Pure:
no Ray; the cache's lock is there because fetches from several followers run at once.
"""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Iterable

from actors.data_protocol import FetchedPartition, FetchPartition, FetchRequest, ForgottenPartition
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

INITIAL_EPOCH = 0  # a full fetch that opens a session
FINAL_EPOCH = -1  # a full fetch outside any session (consumers)
INVALID_SESSION_ID = 0


def next_epoch(epoch: int) -> int:
    """Session epochs count up from 1 and wrap back to 1 (0 and -1 mean full fetches)."""
    return 1 if epoch >= 2 ** 31 - 1 else epoch + 1


@dataclass
class FetchSession:
    id: int
    replica_id: int
    epoch: int  # the epoch the next incremental fetch must carry
    partitions: dict[TopicPartition, FetchPartition]
    high_watermarks: dict[TopicPartition, int] = field(default_factory=dict)  # last sent back; -1: send again


class FetchSessionCache:
    """The leader's sessions, one per follower broker."""

    def __init__(self, rng: random.Random | None = None):
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._sessions: dict[int, FetchSession] = {}
        self._by_replica: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, request: FetchRequest) -> tuple[Errors, FetchSession | None, list[FetchPartition]]:
        """(error, session, the partitions this fetch covers). FINAL_EPOCH: no session, the request's
        partitions; INITIAL_EPOCH: a new session of the request's partitions, replacing the follower's
        older one; otherwise the named session updated with the request's changes."""
        if request.session_epoch == FINAL_EPOCH:
            return Errors.NONE, None, list(request.partitions)
        with self._lock:
            if request.session_epoch == INITIAL_EPOCH:
                self._sessions.pop(self._by_replica.pop(request.replica_id, INVALID_SESSION_ID), None)
                session = FetchSession(self._new_id(), request.replica_id, next_epoch(INITIAL_EPOCH),
                                       {TopicPartition(p.topic, p.partition): p for p in request.partitions})
                self._sessions[session.id] = session
                self._by_replica[request.replica_id] = session.id
                return Errors.NONE, session, list(session.partitions.values())
            session = self._sessions.get(request.session_id)
            if session is None or session.replica_id != request.replica_id:
                return Errors.FETCH_SESSION_ID_NOT_FOUND, None, []
            if session.epoch != request.session_epoch:
                return Errors.INVALID_FETCH_SESSION_EPOCH, None, []
            session.epoch = next_epoch(session.epoch)
            for p in request.partitions:
                tp = TopicPartition(p.topic, p.partition)
                old = session.partitions.get(tp)
                if old is None or old.current_leader_epoch != p.current_leader_epoch:
                    session.high_watermarks.pop(tp, None)  # a new replica or leader epoch hears the HW again
                session.partitions[tp] = p
            for f in request.forgotten:
                tp = TopicPartition(f.topic, f.partition)
                session.partitions.pop(tp, None)
                session.high_watermarks.pop(tp, None)
            return Errors.NONE, session, list(session.partitions.values())

    def _new_id(self) -> int:
        while (sid := self._rng.randint(1, 2 ** 31 - 1)) in self._sessions:
            pass
        return sid

    def respond(self, session: FetchSession | None, full: bool,
                fetched: Iterable[FetchedPartition]) -> list[FetchedPartition]:
        """What the answer carries: every partition for a full fetch, otherwise those with records, an
        error, a diverging epoch or a moved high watermark (Kafka's maybeUpdateResponseData). The high
        watermark sent is remembered; after an error it is forgotten, so that the partition is sent
        again once the error clears."""
        out = []
        with self._lock:
            for f in fetched:
                tp = TopicPartition(f.topic, f.partition)
                sent_hw = session.high_watermarks.get(tp, -1) if session is not None else -1
                if session is not None:
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
        self._building: dict[TopicPartition, FetchPartition] = {}

    def build(self, wanted: dict[TopicPartition, FetchPartition]
              ) -> tuple[int, int, list[FetchPartition], list[ForgottenPartition]]:
        """(session id, epoch, partitions to send, partitions to forget) for a fetch of `wanted`."""
        self._building = dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return INVALID_SESSION_ID, INITIAL_EPOCH, list(wanted.values()), []
        return (self.session_id, self.epoch, [p for tp, p in wanted.items() if self._sent.get(tp) != p],
                [ForgottenPartition(tp.topic, tp.partition) for tp in self._sent if tp not in wanted])

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """After the leader answered the fetch just built: whether the answer is usable (a session
        error is not: the next fetch is a full one)."""
        if error_code != Errors.NONE:
            self.reset()
            return False
        if self.epoch == INITIAL_EPOCH:
            if session_id == INVALID_SESSION_ID:  # the leader keeps no session: full fetches on
                return True
            self.session_id = session_id
        self.epoch = next_epoch(self.epoch)
        self._sent = self._building
        return True

    def reset(self) -> None:
        """The fetch failed or the session is gone: the next fetch opens a new one."""
        self.session_id, self.epoch, self._sent = INVALID_SESSION_ID, INITIAL_EPOCH, {}
