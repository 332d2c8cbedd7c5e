"""The warm standby (beyond Kafka's ZooKeeper mode): a controller candidate that is not active keeps a
copy of what a failover reads most of, every topic's assignment and every partition's leader and ISR,
so that the one that wins reads only what changed since.

Kafka's new controller reads all of it; KRaft's standbys hold the metadata log instead.
docs/KAFKA_DIFFERENCES.md, "Controller failover: warm standby". Off by default: at 100,000 partitions on
one 2-core host its rounds cost the brokers more than the copy saved the winner, whose context step is
mostly building the context's objects, not reading them (BENCHMARKS.md).

How it stays right, and how it fails:
- The copy is as of a zxid: each znode in it is as ZooKeeper held it at that zxid or later. A round
  asks which of the znodes held changed after it (`KrayZkClient.changed_since`, ZooKeeper's
  SetWatches: answered by zxid, without the data) and reads only those, and the topics that came.
- The rounds have a ZooKeeper session of their own, closed when the candidate wins: SetWatches leaves
  a watch on every znode that had not changed, and 100,000 watches left on the candidate's own session
  fired into the active controller's process at the next broker failure (its failover at 100,000
  partitions took 21 s instead of 7.5). (A session per round cost ZooKeeper 100,000 watches made and
  dropped every round: its collector paused up to 3.7 s while 100,000 partitions were created.)
- The rounds run below the brokers' priority, and give way to a win between their steps.
- The winner runs a round after its election, and builds its context from the copy only then. What
  it missed while it waited (a dropped connection, an expired session, a failed round) is read then:
  a change is found by its zxid, never by a watch having reached the standby.
- A failed round changes nothing that matters: held values are only replaced by newer ones, and the
  zxid moves on only when a round is complete. Fencing is unchanged: the copy is only read, and the
  controller epoch guards every write.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Iterable

from coordination import zkdata
from coordination.zkclient import KrayZkClient, PartitionStateRecord, partition_state_of, topic_znode_of
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)

STANDBY_NICENESS = 19  # the rounds' thread and its session's threads
ROUND_STEP = 10_000  # partition states read between two looks at whether the candidate won


def _state_key(path: str) -> TopicPartition:
    """/brokers/topics/T/partitions/P/state -> (T, P)"""
    parts = path.split("/")
    return TopicPartition(parts[3], int(parts[5]))


class StandbyCopy:
    """The copy and the zxid it is as of; no I/O. A value is a decoded znode, None when it is absent or
    malformed (as the readers leave it out)."""

    def __init__(self) -> None:
        self.topics: dict[str, zkdata.TopicZNode | None] = {}
        self.states: dict[TopicPartition, PartitionStateRecord | None] = {}
        self.as_of: int | None = None  # None: nothing is held yet, every znode is read

    def held_paths(self) -> list[str]:
        return [zkdata.topic_path(t) for t in self.topics] + [zkdata.partition_state_path(tp) for tp in self.states]

    def topics_to_read(self, topics: set[str], changed: set[str]) -> list[str]:
        """The topics not held, or whose znode changed."""
        return sorted(t for t in topics if t not in self.topics or zkdata.topic_path(t) in changed)

    def set_topics(self, topics: set[str], read: dict[str, zkdata.TopicZNode | None]) -> None:
        """Keep these topics only, with the assignments just read."""
        for gone in self.topics.keys() - topics:
            del self.topics[gone]
        self.topics.update(read)

    def partitions(self) -> set[TopicPartition]:
        """Every partition of the topics held."""
        return {TopicPartition(t, p) for t, znode in self.topics.items() if znode is not None
                for p in znode.assignment()}

    def states_to_read(self, partitions: set[TopicPartition], changed: set[str]) -> list[TopicPartition]:
        """The partitions whose state is not held, or changed."""
        changed_states = {_state_key(p) for p in changed if p.endswith("/state")}
        return sorted(tp for tp in partitions if tp not in self.states or tp in changed_states)

    def set_states(self, partitions: set[TopicPartition], read: dict[TopicPartition, PartitionStateRecord | None],
                   drop: bool = True) -> None:
        """Keep these partitions' states only (`drop`), with those just read."""
        if drop:
            for gone in self.states.keys() - partitions:
                del self.states[gone]
        self.states.update(read)


class WarmReads:
    """The copy as a failover reads it (ControllerZk's two reads); what it does not hold is read from
    ZooKeeper."""

    def __init__(self, copy: StandbyCopy, zk: KrayZkClient):
        self._copy, self._zk = copy, zk

    def get_topic_znodes(self, topics: Iterable[str]) -> dict[str, zkdata.TopicZNode]:
        topics = list(topics)
        held = self._copy.topics
        out = {t: held[t] for t in topics if held.get(t) is not None}
        return out | self._zk.get_topic_znodes(t for t in topics if t not in held)

    def get_partition_states(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionStateRecord]:
        partitions = list(partitions)
        held = self._copy.states
        out = {tp: held[tp] for tp in partitions if held.get(tp) is not None}
        return out | self._zk.get_partition_states(tp for tp in partitions if tp not in held)


class _Superseded(Exception):
    """A background round stopped between two steps: its candidate won and catches up itself."""


class WarmStandby:
    """The copy kept current on a thread of its own while the candidate waits; `caught_up` at its win."""

    def __init__(self, session: Callable[[], KrayZkClient], zk: KrayZkClient, broker_id: int, refresh_ms: int):
        """`session()`: a new, started ZooKeeper client for the standby's rounds; `zk`: the candidate's
        own, for what a failover reads that the copy does not hold."""
        self.session = session
        self.zk = zk
        self.broker_id = broker_id
        self.refresh_s = refresh_ms / 1000
        self.copy = StandbyCopy()
        self.last_round: dict = {}  # what the last complete round found and read, and its time
        self._client: KrayZkClient | None = None  # the rounds' session, while waiting
        self._lock = threading.Lock()
        self._active = False  # its candidate is the controller: the copy waits
        self._winning = threading.Event()  # the candidate won: a background round gives way
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"controller-standby-{broker_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            self._close_session()

    def _run(self) -> None:
        # below the brokers (Ray's workers run at 15): after a change of 100,000 states a round reads them
        # all, seconds of CPU the failover in progress should have first. The session's threads are
        # started from here and take this nice value too.
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), STANDBY_NICENESS)
        while not self._stopped.is_set():
            with self._lock:
                if not self._active and not self._stopped.is_set():
                    try:
                        if self._client is None:
                            self._client = self.session()
                        self._round(self._client, background=True)
                    except _Superseded:
                        pass
                    except Exception as e:  # the next round starts from the same zxid, in a new session
                        log.warning("[Controller id=%d] Warm standby round failed: %s", self.broker_id, e)
                        self._close_session()
            self._stopped.wait(self.refresh_s)

    def caught_up(self) -> WarmReads:
        """A round now, after the election, in a session of its own: the copy as of a zxid past the
        win. The copy then waits (is not refreshed) until `resume`; the rounds' session is closed, so
        that none of the watches its rounds left fires into the active controller's process."""
        self._winning.set()
        with self._lock:
            self._winning.clear()
            self._active = True
            self._close_session()
            with self.session() as zk:
                self._round(zk, background=False)
            r = self.last_round
            log.info("[Controller id=%d] Warm standby caught up in %.0f ms: %d of %d partition states and %d of "
                     "%d topics read again (changed since zxid %s)", self.broker_id, r["ms"], r["states_read"],
                     r["partitions"], r["topics_read"], r["topics"], hex(r["since_zxid"] or 0))
        return WarmReads(self.copy, self.zk)

    def resume(self) -> None:
        """Its candidate resigned: keep the copy current again (from the zxid it was left at)."""
        self._active = False

    def _close_session(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            try:
                client.close()
            except Exception:  # already gone with its connection: nothing of it is left to close
                pass

    def _round(self, zk: KrayZkClient, background: bool) -> None:
        """Read what changed since the copy's zxid; a background round gives way, between steps, to a
        candidate that won (what it read stays: newer values, the zxid unchanged)."""
        def step() -> None:
            if background and self._winning.is_set():
                raise _Superseded()

        started, copy = time.monotonic(), self.copy
        topics = zk.get_all_topics()
        zxid = zk.last_zxid  # ZooKeeper had applied every change up to it before anything below is read
        changed = zk.changed_since(copy.held_paths(), copy.as_of) if copy.as_of is not None else set()
        step()
        topic_paths = {zkdata.topic_path(t): t for t in copy.topics_to_read(topics, changed)}
        copy.set_topics(topics, {topic_paths[p]: topic_znode_of(p, got) for p, got in zk.get_many(topic_paths).items()})
        partitions = copy.partitions()
        to_read = copy.states_to_read(partitions, changed)
        copy.set_states(partitions, {})
        for i in range(0, len(to_read), ROUND_STEP):
            step()
            paths = {zkdata.partition_state_path(tp): tp for tp in to_read[i:i + ROUND_STEP]}
            copy.set_states(partitions, {paths[p]: partition_state_of(p, got) for p, got in zk.get_many(paths).items()},
                            drop=False)
        self.last_round = {"since_zxid": copy.as_of, "as_of_zxid": zxid, "topics": len(topics),
                           "topics_read": len(topic_paths), "partitions": len(partitions),
                           "states_read": len(to_read), "ms": round((time.monotonic() - started) * 1000, 1)}
        copy.as_of = zxid

    def describe(self) -> dict:
        """The last round's figures, for the candidate's status."""
        return dict(self.last_round, active=self._active)
