"""Followers pull: one fetcher thread per source broker, covering every partition this broker
follows there (Kafka's ReplicaFetcherManager / ReplicaFetcherThread).

A partition whose log has a leader epoch joins a fetcher ready to fetch: each fetch
names the epoch of the follower's last record, and a leader whose log diverged from
it answers where to truncate instead of records (KIP-320's truncation within the
fetch: no extra round trip after a failover). One with no epoch yet, or told its
offset is out of range, first asks the leader where its latest epoch ended
(OffsetsForLeaderEpoch, KIP-101; its high watermark when the leader cannot tell).
Either way it truncates where the two logs last agree, then fetches from its log end. Fetches
long-poll on the leader (replica.fetch.wait.max.ms), so an idle fetcher waits instead of
spinning, and run in a fetch session (KIP-227): each names only the partitions whose position
changed, and the answer carries only the partitions with news. A partition whose leader epoch changed
while a fetch was in flight ignores that fetch's answer.

After an error the fetcher backs off, starting at FIRST_BACKOFF_MS and doubling up to
replica.fetch.backoff.ms (Kafka waits the full backoff every time): the commonest error
right after a failover is a new leader that has not applied its LeaderAndIsr yet, which
is over within milliseconds. The backoff also ends when partitions are added or move to a
new leader epoch here (a fetch fenced by the leader's newer epoch can go again at once).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import ray

from actors.broker.fetch_session import FetchSessionHandler
from actors.broker.partition import Partition
from actors.broker.replication import truncation_offset
from actors.config import BrokerConfig
from actors.data_protocol import (
    EpochQueries,
    EpochQuery,
    FetchPartition,
    FetchPartitions,
    FetchRequest,
    ForgottenPartitions,
    OffsetsForLeaderEpochRequest,
)
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)

FIRST_BACKOFF_MS = 10
PARTITION_BACKOFF_MS = 40


class ReplicaFetcher:
    """Fetches for the partitions led by one source broker."""

    def __init__(self, broker_id: int, source_id: int, leader: Callable[[], object], config: BrokerConfig,
                 broker_epoch: Callable[[], int] = lambda: -1):
        self.broker_id, self.source_id, self.leader, self.config = broker_id, source_id, leader, config
        self.broker_epoch = broker_epoch
        self._lock = threading.Lock()
        self.partitions: dict[TopicPartition, tuple[Partition, int, bool]] = {}  # partition, its epoch, truncated?
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._handle = None  # the source broker's actor, looked up again after an error
        self._failures = 0  # consecutive rounds that failed
        self.added = False  # partitions were added since the last nudge
        self.version = 0  # counts additions; each fetch carries the count it was built with
        self.session = FetchSessionHandler()  # KIP-227: fetches name only what changed
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"ReplicaFetcherThread-{broker_id}-from-{source_id}")
        self.thread.start()

    def add(self, tp: TopicPartition, partition: Partition) -> None:
        with self._lock:  # with an epoch it truncates within the fetch; without, it asks first
            self.partitions[tp] = (partition, partition.state.leader_epoch, partition.log.leader_epochs.latest_epoch >= 0)
            self.added = True
            self.version += 1
        self._wake.set()

    def update_epoch(self, tp: TopicPartition, partition: Partition) -> bool:
        """Carry on fetching tp in the partition's next leader epoch; False if tp is not here, or epochs were
        missed (the leader may have followed someone else meanwhile and truncated: truncate again)."""
        with self._lock:
            if tp not in self.partitions or self.partitions[tp][0] is not partition \
                    or partition.state.leader_epoch != self.partitions[tp][1] + 1:
                return False
            self.partitions[tp] = (partition, partition.state.leader_epoch, self.partitions[tp][2])
        self._wake.set()  # a fetch fenced by the leader's newer epoch need not wait out its backoff
        return True

    def nudge(self) -> None:
        """Partitions were added while a fetch may be long-polling at the leader: ask the leader to end
        it, so that the new ones are truncated and fetched now rather than after replica.fetch.wait.max.ms.
        The leader keeps the count it was told, so a fetch that reaches it after the nudge ends too."""
        with self._lock:
            added, self.added, version = self.added, False, self.version
        if added and self._handle is not None:
            self._handle.wake_fetches.remote(self.broker_id, self.broker_epoch(), version)

    def remove(self, tp: TopicPartition) -> None:
        with self._lock:
            self.partitions.pop(tp, None)

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.clear()  # this round sees every change made before it: only later ones wake a wait
            with self._lock:
                current, version = dict(self.partitions), self.version
            if not current:
                self._wake.wait(1.0)
                continue
            try:
                if self._handle is None:
                    self._handle = self.leader()
                leader = self._handle
                pending = {tp: v for tp, v in current.items() if not v[2]}
                failed = self._truncate(leader, pending) if pending else False
                with self._lock:  # the truncated ones fetch in this round: a leader not ready for some stops no one
                    ready = {tp: self.partitions[tp] for tp in current
                             if tp in self.partitions and self.partitions[tp][2]}
                if ready:  # no long poll while some wait to truncate: they are asked again after the backoff
                    failed = self._fetch(leader, ready, version, long_poll=not failed) or failed
                unreachable = False
            except Exception as e:  # the leader is gone or restarting: back off, the controller will move it
                self._handle = None
                self.session.reset()
                log.warning("[ReplicaFetcher replicaId=%d, leaderId=%d] Error fetching: %s: %s", self.broker_id,
                            self.source_id, type(e).__name__, e)
                failed = unreachable = True
            self._failures = self._failures + 1 if failed else 0
            if failed:  # until the backoff ends, or partitions come or change epoch
                self._wake.wait(self.backoff_ms(self._failures, unreachable) / 1000)

    def backoff_ms(self, failures: int, unreachable: bool) -> float:
        """Doubling from FIRST_BACKOFF_MS: up to replica.fetch.backoff.ms for a leader that does not answer,
        up to PARTITION_BACKOFF_MS for one that answers with partition errors (it has not applied the
        LeaderAndIsr that made it leader yet: a matter of milliseconds)."""
        cap = self.config.replica_fetch_backoff_ms if unreachable else min(PARTITION_BACKOFF_MS,
                                                                           self.config.replica_fetch_backoff_ms)
        return min(cap, FIRST_BACKOFF_MS * 2 ** (failures - 1))

    def _truncate(self, leader, pending: dict[TopicPartition, tuple[Partition, int, bool]]) -> bool:
        """Truncate the new partitions where the leader says; whether some could not be (yet)."""
        queries = EpochQueries(EpochQuery(tp.topic, tp.partition, p.log.leader_epochs.latest_epoch)
                               for tp, (p, _, _) in pending.items())
        response = ray.get(leader.offsets_for_leader_epoch.remote(
            OffsetsForLeaderEpochRequest(replica_id=self.broker_id, partitions=queries)), timeout=30)
        for answer in response.partitions:
            tp = TopicPartition(answer.topic, answer.partition)
            partition, epoch, _ = pending[tp]
            if answer.error_code != Errors.NONE:
                continue  # not the leader (yet): asked again on the next round
            if not _truncate_where_agreed(partition, epoch, (answer.leader_epoch, answer.end_offset)):
                continue  # no longer following in that epoch: a newer LeaderAndIsr decides
            with self._lock:
                if self.partitions.get(tp, (None, None))[1] == epoch:
                    self.partitions[tp] = (partition, epoch, True)
        return any(a.error_code != Errors.NONE for a in response.partitions)

    def _fetch(self, leader, current: dict[TopicPartition, tuple[Partition, int, bool]], version: int,
               long_poll: bool = True) -> bool:
        """One fetch for every partition, long-polling unless told not to; whether some failed."""
        wanted = {tp: FetchPartition(tp.topic, tp.partition, p.log.log_end_offset, epoch,
                                     self.config.replica_fetch_max_bytes, p.log.leader_epochs.latest_epoch)
                  for tp, (p, epoch, _) in current.items()}
        session_id, session_epoch, to_send, forgotten = self.session.build(wanted)
        request = FetchRequest(
            replica_id=self.broker_id, replica_epoch=self.broker_epoch(), partitions_version=version,
            max_wait_ms=self.config.replica_fetch_wait_max_ms if long_poll else 0, min_bytes=1,
            partitions=FetchPartitions(to_send), session_id=session_id, session_epoch=session_epoch,
            forgotten=ForgottenPartitions(forgotten))
        response = ray.get(leader.fetch.remote(request), timeout=self.config.replica_fetch_wait_max_ms / 1000 + 30)
        if not self.session.handle_response(response.error_code, response.session_id):
            log.info("[ReplicaFetcher replicaId=%d, leaderId=%d] %s: opening a new fetch session", self.broker_id,
                     self.source_id, Errors(response.error_code).name)
            return False  # the next round sends a full fetch at once
        failed = False
        for fetched in response.partitions:
            tp = TopicPartition(fetched.topic, fetched.partition)
            if tp not in current:
                continue
            partition, epoch, _ = current[tp]
            if partition.state.leader_epoch != epoch or self.partitions.get(tp, (None, None))[1] != epoch:
                continue  # the leadership moved while the fetch was in flight
            if fetched.error_code == Errors.NONE and fetched.diverging_epoch is not None:
                _truncate_where_agreed(partition, epoch, fetched.diverging_epoch)  # then fetch from there
            elif fetched.error_code == Errors.NONE:
                partition.append_as_follower(list(fetched.records), fetched.high_watermark, epoch)
            elif fetched.error_code == Errors.OFFSET_OUT_OF_RANGE:  # diverged: ask where to truncate again
                with self._lock:
                    if self.partitions.get(tp, (None, None))[1] == epoch:
                        self.partitions[tp] = (partition, epoch, False)
                failed = True
            else:
                failed = True
                log.debug("[ReplicaFetcher replicaId=%d, leaderId=%d] %s for %s", self.broker_id, self.source_id,
                          Errors(fetched.error_code).name, tp)
        return failed


def _truncate_where_agreed(partition: Partition, epoch: int, leader_answer: tuple[int, int]) -> bool:
    """Truncate where the leader's answer ((epoch, end offset) of the follower's latest epoch, from
    OffsetsForLeaderEpoch or a fetch's diverging epoch) and this log last agree; False if the
    partition no longer follows in `epoch`."""
    own = partition.log.leader_epochs.end_offset_for(leader_answer[0], partition.log.log_end_offset)[1]
    return partition.truncate_to(truncation_offset(partition.log.log_end_offset, partition.high_watermark,
                                                   leader_answer, own), epoch)


class ReplicaFetcherManager:
    """Fetchers by source broker, created when a partition first follows there."""

    def __init__(self, broker_id: int, leader_handle: Callable[[int], object], config: BrokerConfig,
                 broker_epoch: Callable[[], int] = lambda: -1):
        self.broker_id, self.leader_handle, self.config = broker_id, leader_handle, config
        self.broker_epoch = broker_epoch
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.assigned: dict[TopicPartition, int] = {}  # partition -> the broker it fetches from

    def follow(self, tp: TopicPartition, partition: Partition, leader_id: int) -> None:
        """Fetch tp from leader_id. A new leader epoch of the same leader (an ISR change the controller
        made) is taken over in place: the leader's log went on, there is nothing to truncate."""
        if self.assigned.get(tp) == leader_id and self.fetchers[leader_id].update_epoch(tp, partition):
            return
        self.unfollow(tp)
        if leader_id not in self.fetchers:
            self.fetchers[leader_id] = ReplicaFetcher(self.broker_id, leader_id,
                                                      lambda: self.leader_handle(leader_id), self.config,
                                                      self.broker_epoch)
        self.fetchers[leader_id].add(tp, partition)
        self.assigned[tp] = leader_id

    def nudge(self) -> None:
        """After a LeaderAndIsr: fetchers that got partitions end their current long poll."""
        for fetcher in self.fetchers.values():
            fetcher.nudge()

    def unfollow(self, tp: TopicPartition) -> None:
        source = self.assigned.pop(tp, None)
        if source is not None:
            self.fetchers[source].remove(tp)

    def shutdown(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.stop()
        deadline = time.monotonic() + 5
        for fetcher in self.fetchers.values():
            fetcher.thread.join(max(0.0, deadline - time.monotonic()))
