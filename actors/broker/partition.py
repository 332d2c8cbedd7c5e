"""One replica of a partition on a broker: its log, its role, its high watermark, and as leader
what it knows of its followers and of idempotent producers (Kafka's Partition).

No Ray and no ZooKeeper: the broker's shell decides when to call these (a LeaderAndIsr,
a produce, a follower's fetch, the ISR check), writes ISR changes to ZooKeeper and
sends fetches. A Condition wakes produce calls waiting for acks=all when the high
watermark moves, and anything else waiting on the partition.
"""
from __future__ import annotations

import threading
from typing import NamedTuple

from actors.broker.log import Log
from actors.broker.producer_state import ProducerState, find_run
from actors.broker.records import Record
from actors.broker.replication import (
    FollowerState,
    diverging_epoch,
    high_watermark,
    in_sync_again,
    out_of_sync_replicas,
    update_fetch_state,
)
from coordination.errors import (
    Errors,
    NotEnoughReplicasException,
    NotLeaderOrFollowerException,
    OffsetOutOfRangeException,
    OutOfOrderSequenceException,
)


class LeaderAndIsrState(NamedTuple):
    """The part of a LeaderAndIsr partition state a replica acts on."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int = 0  # of the controller that chose this leader; the leader writes it back with ISR changes


class FetchResult(NamedTuple):
    records: list[Record]
    high_watermark: int
    log_end_offset: int
    diverging_epoch: tuple[int, int] | None = None  # KIP-320: where a follower's log left this one


class Partition:
    def __init__(self, topic: str, partition: int, broker_id: int, log: Log, high_watermark_: int = 0):
        self.topic, self.partition, self.broker_id, self.log = topic, partition, broker_id, log
        self.state = LeaderAndIsrState(-1, -1, (), (), -1)
        self.high_watermark = min(high_watermark_, log.log_end_offset)
        self.followers: dict[int, FollowerState] = {}
        self.leader_epoch_start_offset = 0
        self.producers = ProducerState(log)
        self.changed = threading.Condition()  # reentrant: the shell may hold it around a call
        self.leader_term = 0  # counts the times this replica started leading: a wait belongs to one term
        self.stopped = False  # StopReplica: a fetcher still holding this object must leave it alone

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    # -- role changes (LeaderAndIsr) -----------------------------------------

    def make_leader(self, state: LeaderAndIsrState, now_ms: int) -> None:
        """Kafka's makeLeader: a new epoch starts at the log end; every follower's last caught-up time
        restarts (now for ISR members); a new leader knows no follower's log end until it fetches."""
        with self.changed:
            was_leader = self.is_leader
            self.leader_term += 0 if was_leader else 1
            self.state = state
            self.leader_epoch_start_offset = self.log.log_end_offset
            self.log.leader_epochs.assign(state.leader_epoch, self.log.log_end_offset)
            self.followers = {
                r: FollowerState(log_end_offset=self.followers[r].log_end_offset
                                 if was_leader and r in self.followers else -1,
                                 last_caught_up_ms=now_ms if r in state.isr else 0)
                for r in state.replicas if r != self.broker_id}
            self._advance_high_watermark()
            self.changed.notify_all()

    def make_follower(self, state: LeaderAndIsrState) -> None:
        """Kafka's makeFollower: record the new leader; the fetcher truncates and then fetches."""
        with self.changed:
            self.leader_term += 1 if self.is_leader else 0
            self.state = state
            self.followers = {}
            self.changed.notify_all()  # waiting produce calls learn they are no longer leader

    def stop_leading(self, leader_epoch: int) -> bool:
        """This leader's ISR write found a newer partition state in ZooKeeper: someone else (a new
        controller's election) has moved on, so stop serving as leader until a LeaderAndIsr says
        otherwise. Ignored when a LeaderAndIsr for another epoch arrived meanwhile."""
        with self.changed:
            if not self.is_leader or self.state.leader_epoch != leader_epoch:
                return False
            self.leader_term += 1
            self.state = self.state._replace(leader=-1)
            self.followers = {}
            self.changed.notify_all()
            return True

    def update_isr(self, isr: tuple[int, ...], zk_version: int, leader_epoch: int | None = None) -> None:
        """The leader's own ISR change, once ZooKeeper has it (ignored if a LeaderAndIsr for another
        leader epoch came in meanwhile)."""
        with self.changed:
            if leader_epoch is not None and leader_epoch != self.state.leader_epoch:
                return
            self.state = self.state._replace(isr=isr, zk_version=zk_version)
            self._advance_high_watermark()
            self.changed.notify_all()

    # -- leader: produce -----------------------------------------------------

    def append_as_leader(self, batch: list[Record], required_acks: int, min_insync_replicas: int) -> tuple[int, int]:
        """Append a producer's records; (first offset, last offset). A retried idempotent batch
        (its sequence already in the log) gets its original offsets back and is not appended twice."""
        with self.changed:
            if not self.is_leader:
                raise NotLeaderOrFollowerException(f"broker {self.broker_id} does not lead {self.topic}-{self.partition}")
            if required_acks == -1 and len(self.state.isr) < min_insync_replicas:
                raise NotEnoughReplicasException(
                    f"{self.topic}-{self.partition}: ISR {list(self.state.isr)} is smaller than "
                    f"min.insync.replicas={min_insync_replicas}")
            first, last = batch[0], batch[-1]
            runs = self.producers.get(first.producer_id)
            if runs:
                known = find_run(runs, first.sequence, last.sequence)
                if known is not None:  # a retry of what is already in the log
                    return known
                if first.sequence != runs[-1][1] + 1:
                    raise OutOfOrderSequenceException(
                        f"producer {first.producer_id}: sequence {first.sequence} after {runs[-1][1]}")
            offsets = self.log.append_as_leader(batch, self.state.leader_epoch)
            self.producers.append(first.producer_id, first.sequence, last.sequence, offsets[0])
            self._advance_high_watermark()
            self.changed.notify_all()
            return offsets

    def wait_for_high_watermark(self, offset: int, timeout_s: float, min_insync_replicas: int = 1,
                                term: int | None = None) -> Errors:
        """acks=all: block until the high watermark passes `offset` (the ISR has the record), as Kafka's
        DelayedProduce: NOT_LEADER_OR_FOLLOWER if this broker stopped leading meanwhile (even if it
        leads again: the record may have been truncated), NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR
        that has it is smaller than min.insync.replicas. `term` is leader_term when it was appended."""
        with self.changed:
            term = self.leader_term if term is None else term
            lost = lambda: not self.is_leader or self.leader_term != term  # noqa: E731
            done = self.changed.wait_for(lambda: self.high_watermark > offset or lost(), timeout_s)
            if lost():
                return Errors.NOT_LEADER_OR_FOLLOWER
            if not done:
                return Errors.REQUEST_TIMED_OUT
            if len(self.state.isr) < min_insync_replicas:
                return Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return Errors.NONE

    # -- leader: follower fetches and the ISR --------------------------------

    def fetch_for_follower(self, replica_id: int, fetch_offset: int, max_bytes: int, now_ms: int,
                           last_fetched_epoch: int = -1) -> FetchResult:
        """A follower fetching from `fetch_offset` has everything below it: update what the leader
        knows of it, advance the high watermark, and hand it what follows. A fetch that names the
        epoch of the follower's last record (KIP-320) is checked against this log first: if they
        diverged it gets where to truncate instead, and counts for nothing (as in Kafka)."""
        with self.changed:
            if not self.is_leader:
                raise NotLeaderOrFollowerException(f"broker {self.broker_id} does not lead {self.topic}-{self.partition}")
            if last_fetched_epoch >= 0:
                diverged = diverging_epoch(fetch_offset, last_fetched_epoch, self.log.leader_epochs.end_offset_for(
                    last_fetched_epoch, self.log.log_end_offset))
                if diverged is not None:
                    return FetchResult([], self.high_watermark, self.log.log_end_offset, diverged)
            if not self.log.log_start_offset <= fetch_offset <= self.log.log_end_offset:
                raise OffsetOutOfRangeException(f"{self.topic}-{self.partition}: follower {replica_id} fetches "
                                                f"{fetch_offset}, the log ends at {self.log.log_end_offset}")
            if replica_id in self.followers:
                self.followers[replica_id] = update_fetch_state(self.followers[replica_id], fetch_offset,
                                                                self.log.log_end_offset, now_ms)
                if self._advance_high_watermark():
                    self.changed.notify_all()
            return FetchResult(self.log.read(fetch_offset, max_bytes), self.high_watermark, self.log.log_end_offset)

    def follower_is_current(self, replica_id: int, fetch_offset: int, now_ms: int, refresh_ms: int) -> bool:
        """Whether a fetch from `fetch_offset` would change nothing: the follower had this log's end at a
        fetch less than `refresh_ms` ago and still has it (read without the lock: an append racing
        with it wakes the waiting fetch, which then looks again)."""
        follower = self.followers.get(replica_id)
        return self.is_leader and follower is not None and now_ms - follower.last_fetch_ms < refresh_ms \
            and fetch_offset == follower.log_end_offset == self.log.log_end_offset

    def isr_to_shrink(self, now_ms: int, replica_lag_time_max_ms: int) -> tuple[int, ...] | None:
        """The ISR without the followers that lag too long, or None when it stays."""
        with self.changed:
            if not self.is_leader:
                return None
            out = out_of_sync_replicas(self.broker_id, self.state.isr, self.followers, now_ms, replica_lag_time_max_ms)
            return tuple(r for r in self.state.isr if r not in out) if out else None

    def isr_to_expand(self, replica_id: int) -> tuple[int, ...] | None:
        """The ISR with this follower added when it has caught up (checked as it fetches, as Kafka's
        maybeExpandIsr), or None when it stays."""
        with self.changed:
            follower = self.followers.get(replica_id)
            if not self.is_leader or follower is None or replica_id in self.state.isr \
                    or not in_sync_again(follower, self.high_watermark, self.leader_epoch_start_offset):
                return None
            return self.state.isr + (replica_id,)

    def _advance_high_watermark(self) -> bool:
        if not self.is_leader:
            return False
        new = high_watermark(self.high_watermark, self.broker_id, self.log.log_end_offset, self.followers,
                             self.state.isr)
        moved, self.high_watermark = new > self.high_watermark, new
        return moved

    # -- follower ------------------------------------------------------------

    def following(self, leader_epoch: int) -> bool:
        """Still a follower in this leader epoch (a fetcher's answer may come after a role change)."""
        return not self.stopped and not self.is_leader and self.state.leader_epoch == leader_epoch

    def append_as_follower(self, batch: list[Record], leader_high_watermark: int, leader_epoch: int) -> bool:
        with self.changed:
            if not self.following(leader_epoch):
                return False
            self.log.append(batch)
            for r in batch:
                self.producers.append(r.producer_id, r.sequence, r.sequence, r.offset)
            self.high_watermark = max(self.high_watermark, min(leader_high_watermark, self.log.log_end_offset))
            return True

    def truncate_to(self, offset: int, leader_epoch: int) -> bool:
        with self.changed:
            if not self.following(leader_epoch):
                return False
            if offset < self.log.log_end_offset:
                self.log.truncate_to(offset)
                self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
                self.producers.truncate(self.log, offset)
            return True

    def stop(self) -> None:
        """StopReplica: no more leading or following through this object."""
        with self.changed:
            self.stopped = True
            self.leader_term += 1 if self.is_leader else 0
            self.state = self.state._replace(leader=-1)
            self.followers = {}
            self.changed.notify_all()

    # -- consumers -----------------------------------------------------------

    def read_for_consumer(self, offset: int, max_bytes: int) -> FetchResult:
        """Records below the high watermark only. An offset between the high watermark and the log
        end gets nothing (seed 000: it may have been acknowledged by a previous leader); beyond the
        log end is OFFSET_OUT_OF_RANGE."""
        with self.changed:
            if not self.is_leader:
                raise NotLeaderOrFollowerException(f"broker {self.broker_id} does not lead {self.topic}-{self.partition}")
            if offset > self.log.log_end_offset or offset < self.log.log_start_offset:
                raise OffsetOutOfRangeException(
                    f"{self.topic}-{self.partition}: offset {offset} outside [{self.log.log_start_offset}, "
                    f"{self.log.log_end_offset}]")
            records = self.log.read(offset, max_bytes, max_offset=self.high_watermark) \
                if offset < self.high_watermark else []
            return FetchResult(records, self.high_watermark, self.log.log_end_offset)
