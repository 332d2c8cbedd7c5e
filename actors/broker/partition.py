"""One replica of a partition on a broker: its log, its role, its high watermark, and as leader
what it knows of its followers and of idempotent producers (Kafka's Partition).

Single-threaded: the broker's event loop owns every Partition (no locks). No Ray, no ZooKeeper
and no sockets: the shell decides when to call these (a LeaderAndIsr, a produce, a follower's
fetch, the ISR check), writes ISR changes to ZooKeeper and sends fetches. Records stay the v2
batches the producer sent; only batch headers are read here.

What waits on a partition registers a callback rather than blocking: an acks=all produce waits
for the high watermark to pass its batch (`await_high_watermark`, Kafka's DelayedProduce), and
fetches waiting for news hear of every change through `listener` (Kafka's DelayedFetch keys).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from actors.broker.log import batches
from actors.broker.errors import (
    NotEnoughReplicasException,
    NotLeaderOrFollowerException,
    OffsetOutOfRangeException,
)
from actors.broker.log.log import Log
from actors.broker.log.log_config import LogConfig
from actors.broker.log.producer_state import ProducerStateManager
from actors.broker.replication import (
    FollowerState,
    broker_died,
    diverging_epoch,
    high_watermark,
    in_sync_again,
    new_incarnation,
    out_of_sync_replicas,
    update_fetch_state,
)
from coordination.errors import Errors


class LeaderAndIsrState(NamedTuple):
    """The part of a LeaderAndIsr partition state a replica acts on."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int = 0  # of the controller that chose this leader; the leader writes it back with ISR changes


class FetchResult(NamedTuple):
    records: bytes
    high_watermark: int
    log_end_offset: int
    log_start_offset: int
    diverging_epoch: tuple[int, int] | None = None  # KIP-320: where a follower's log left this one


class AppendResult(NamedTuple):
    first_offset: int
    last_offset: int
    leader_epoch: int
    log_start_offset: int
    term: int  # leader_term at the append: a wait for its acks belongs to this term
    duplicate: bool = False  # an idempotent retry answered with the offsets it already had


HwWaiter = Callable[[Errors], None]


class Partition:
    def __init__(self, topic: str, partition: int, broker_id: int, log: Log, config: LogConfig,
                 high_watermark_: int = 0, listener: Callable[["Partition", bool], None] = lambda p, hw_only: None,
                 on_truncate: Callable[[int, int, int], None] = lambda leader_epoch, before, after: None,
                 on_high_watermark: Callable[[], None] = lambda: None):
        self.topic, self.partition, self.broker_id, self.log, self.config = topic, partition, broker_id, log, config
        self.state = LeaderAndIsrState(-1, -1, (), (), -1)
        self.high_watermark = max(log.log_start_offset, min(high_watermark_, log.log_end_offset))
        self.followers: dict[int, FollowerState] = {}
        self.joining: tuple[int, ...] = ()  # followers whose ISR expansion is being written (Kafka's PendingExpandIsr)
        self.isr_change_given_up = False  # an ISR write was refused: none until the next LeaderAndIsr
        self.leader_epoch_start_offset = 0
        self.producers = ProducerStateManager(log)
        self.leader_term = 0  # counts the times this replica started or stopped leading
        self.stopped = False  # StopReplica: a fetcher still holding this object must leave it alone
        self.listener = listener  # told of every change a waiting fetch may care about
        self.on_truncate = on_truncate  # (leader epoch, log end before, after): for the run's record
        self.on_high_watermark = on_high_watermark  # a follower's HW moved (the listener hears a leader's)
        self._hw_waiters: list[tuple[int, int, HwWaiter]] = []  # (offset, term, callback), acks=all produces

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    def _changed(self, hw_only: bool = False) -> None:
        """Tell the listener (`hw_only`: only the high watermark moved, which followers hear with their
        next fetch rather than at once, as in Kafka) and complete the produces it satisfies."""
        self.listener(self, hw_only)
        if self._hw_waiters:
            self._complete_waiters()

    # -- role changes (LeaderAndIsr) -----------------------------------------

    def make_leader(self, state: LeaderAndIsrState, now_ms: int) -> None:
        """Kafka's makeLeader: a new epoch starts at the log end; every follower's last caught-up time
        restarts (now for ISR members); a new leader knows no follower's log end until it fetches, one
        that stays leader keeps each follower's with the incarnation it belongs to (Kafka 3.5's
        resetReplicaState)."""
        was_leader = self.is_leader
        self.leader_term += 0 if was_leader else 1
        self.state = state
        self.joining, self.isr_change_given_up = (), False
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.log.leader_epochs.assign(state.leader_epoch, self.log.log_end_offset)
        kept = self.followers if was_leader else {}
        self.followers = {
            r: FollowerState(log_end_offset=kept[r].log_end_offset if r in kept else -1,
                             last_caught_up_ms=now_ms if r in state.isr else 0,
                             broker_epoch=kept[r].broker_epoch if r in kept else -1)
            for r in state.replicas if r != self.broker_id}
        self._advance_high_watermark()
        self._changed()

    def make_follower(self, state: LeaderAndIsrState) -> None:
        """Kafka's makeFollower: record the new leader; the fetcher truncates and then fetches."""
        self.leader_term += 1 if self.is_leader else 0
        self.state = state
        self.followers, self.joining, self.isr_change_given_up = {}, (), False
        self._changed()  # waiting produces learn they are no longer leader

    def give_up_isr_change(self, leader_epoch: int) -> bool:
        """This leader's ISR write found a newer partition state in ZooKeeper: the controller wrote it (an
        ISR removal at epoch + 1, an election, a reassignment's epoch bump) and a LeaderAndIsr follows.
        As Kafka's handleAlterIsrResponse ("Giving up"), keep leading and keep the change pending: an
        expansion's joining follower still holds the high watermark (the maximal ISR), waiting produces
        keep waiting, and no other ISR change is tried until the LeaderAndIsr brings ZooKeeper's state.
        Stopping here instead failed every waiting acks=all produce whose records the LeaderAndIsr then
        kept and committed: a non-idempotent producer's retries made duplicates. Ignored when a
        LeaderAndIsr for another epoch arrived meanwhile."""
        if not self.is_leader or self.state.leader_epoch != leader_epoch:
            return False
        self.isr_change_given_up = True
        return True

    def update_isr(self, isr: tuple[int, ...], zk_version: int, leader_epoch: int | None = None) -> None:
        """The leader's own ISR change, once ZooKeeper has it (ignored if a LeaderAndIsr for another
        leader epoch came in meanwhile)."""
        if leader_epoch is not None and leader_epoch != self.state.leader_epoch:
            return
        self.state = self.state._replace(isr=isr, zk_version=zk_version)
        self.joining = ()
        self._advance_high_watermark()
        self._changed(hw_only=True)

    def expanding(self, isr: tuple[int, ...] | None) -> tuple[int, ...] | None:
        """An ISR expansion to `isr` is being written: until it lands or fails, the high watermark waits
        for the joining follower too (Kafka's maximal ISR), or it could pass what the follower has
        and the follower join below it."""
        if isr is not None:
            self.joining = tuple(r for r in isr if r not in self.state.isr)
        return isr

    def isr_change_failed(self) -> None:
        """The expansion being written failed (a ZooKeeper error: a later fetch asks again) or was not
        written (the joining broker is no longer registered): the high watermark no longer waits for it
        (and may move now, completing produces that waited). A refused write is `give_up_isr_change`."""
        self.joining = ()
        if self._advance_high_watermark():
            self._changed(hw_only=True)

    def stop(self) -> None:
        """StopReplica: no more leading or following through this object."""
        self.stopped = True
        self.leader_term += 1 if self.is_leader else 0
        self.state = self.state._replace(leader=-1)
        self.followers, self.joining, self.isr_change_given_up = {}, (), False
        self._changed()

    # -- leader: produce -----------------------------------------------------

    def append_as_leader(self, records: bytes, required_acks: int) -> AppendResult:
        """Append a producer's batch as sent, giving it its offsets and this leader's epoch. A retried
        idempotent batch (the same sequences already in the log) gets its original offsets back."""
        if not self.is_leader:
            raise NotLeaderOrFollowerException(f"broker {self.broker_id} does not lead {self.topic}-{self.partition}")
        if required_acks == -1 and len(self.state.isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicasException(
                f"{self.topic}-{self.partition}: ISR {list(self.state.isr)} is smaller than "
                f"min.insync.replicas={self.config.min_insync_replicas}")
        header = batches.validate_produce(records, self.config.max_message_bytes)
        epoch = self.state.leader_epoch
        duplicate = self.producers.check(header)
        if duplicate is not None:
            return AppendResult(duplicate.first_offset, duplicate.last_offset, epoch, self.log.log_start_offset,
                                self.leader_term, duplicate=True)
        info = self.log.append_as_leader(records, epoch)
        self.producers.update(header._replace(base_offset=info.first_offset, partition_leader_epoch=epoch))
        self._advance_high_watermark()
        self._changed()
        return AppendResult(info.first_offset, info.last_offset, epoch, self.log.log_start_offset, self.leader_term)

    def await_high_watermark(self, offset: int, term: int, callback: HwWaiter) -> None:
        """acks=all: `callback(error)` once the high watermark passes `offset` (the ISR has the batch),
        as Kafka's DelayedProduce: NOT_LEADER_OR_FOLLOWER if this broker stopped leading after the
        append in `term` (even if it leads again: the batch may have been truncated),
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR that has it is smaller than min.insync.replicas."""
        self._hw_waiters.append((offset, term, callback))
        self._complete_waiters()

    def forget_waiter(self, callback: HwWaiter) -> None:
        """A produce that timed out stops waiting."""
        self._hw_waiters = [w for w in self._hw_waiters if w[2] is not callback]

    def _complete_waiters(self) -> None:
        done, waiting = [], []
        for offset, term, callback in self._hw_waiters:
            if not self.is_leader or self.leader_term != term:
                done.append((callback, Errors.NOT_LEADER_OR_FOLLOWER))
            elif self.high_watermark > offset:
                done.append((callback, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                             if len(self.state.isr) < self.config.min_insync_replicas else Errors.NONE))
            else:
                waiting.append((offset, term, callback))
        self._hw_waiters = waiting
        for callback, error in done:
            callback(error)

    # -- leader: follower fetches and the ISR --------------------------------

    def fetch_for_follower(self, replica_id: int, fetch_offset: int, max_bytes: int, now_ms: int,
                           last_fetched_epoch: int = -1, broker_epoch: int = -1,
                           update_follower_state: bool = True) -> FetchResult:
        """A follower fetching from `fetch_offset` has everything below it: update what the leader
        knows of it (of the incarnation `broker_epoch` of its broker), advance the high watermark, and
        hand it what follows. A fetch that names the epoch of the follower's last batch (KIP-320) is
        checked against this log first: if they diverged it gets where to truncate instead, and counts
        for nothing (as in Kafka). A fetch read again after it waited (`update_follower_state` False)
        tells nothing new, as in Kafka's DelayedFetch: its sender may have died meanwhile."""
        if not self.is_leader:
            raise NotLeaderOrFollowerException(f"broker {self.broker_id} does not lead {self.topic}-{self.partition}")
        log = self.log
        if last_fetched_epoch >= 0:
            diverged = diverging_epoch(fetch_offset, last_fetched_epoch,
                                       log.leader_epochs.end_offset_for(last_fetched_epoch, log.log_end_offset))
            if diverged is not None:
                return FetchResult(b"", self.high_watermark, log.log_end_offset, log.log_start_offset, diverged)
        if not log.log_start_offset <= fetch_offset <= log.log_end_offset:
            raise OffsetOutOfRangeException(f"{self.topic}-{self.partition}: follower {replica_id} fetches "
                                            f"{fetch_offset}, the log is [{log.log_start_offset}, "
                                            f"{log.log_end_offset}]")
        if update_follower_state:
            self.follower_fetched(replica_id, fetch_offset, now_ms, broker_epoch)
        return FetchResult(log.read(fetch_offset, max_bytes), self.high_watermark, log.log_end_offset,
                           log.log_start_offset)

    def follower_fetched(self, replica_id: int, fetch_offset: int, now_ms: int, broker_epoch: int = -1) -> None:
        """What a follower's fetch from `fetch_offset` tells the leader (Kafka's updateFollowerFetchState)."""
        if replica_id in self.followers:
            self.followers[replica_id] = update_fetch_state(self.followers[replica_id], fetch_offset,
                                                            self.log.log_end_offset, now_ms, broker_epoch)
            if self._advance_high_watermark():
                self._changed(hw_only=True)

    def forget_follower(self, replica_id: int, broker_epoch: int = -1, session: tuple[int, int] = (-1, 0)) -> None:
        """Its broker failed, or registered again as `broker_epoch`: what its earlier incarnation
        fetched no longer says what its log holds (a power loss takes the unflushed tail). What the new
        incarnation fetched already stays. `session`: the broker's latest fetch (its epoch and time)."""
        follower = self.followers.get(replica_id)
        if follower is not None and broker_epoch < 0:
            self.followers[replica_id] = broker_died(follower, self._caught_up_ms(follower, session))
        elif follower is not None and follower.broker_epoch < broker_epoch:
            self.followers[replica_id] = new_incarnation(broker_epoch)

    def isr_to_shrink(self, now_ms: int, replica_lag_time_max_ms: int,
                      last_session_fetch: Callable[[int], tuple[int, int]] = lambda r: (-1, 0)
                      ) -> tuple[int, ...] | None:
        """The ISR without the followers that lag too long, or None when it stays. A follower that has
        this whole log was caught up at its session's latest fetch (its fetches leave such partitions
        unnamed: KIP-227), when that fetch was its incarnation's (`last_session_fetch(r)`: its broker
        epoch and time)."""
        if not self.is_leader or self.isr_change_given_up:
            return None
        recent = now_ms - replica_lag_time_max_ms

        def caught_up(r: int) -> int:  # asked for every led partition's ISR every 15 s: no copies made
            f = self.followers.get(r)
            if f is None:
                return FollowerState().last_caught_up_ms  # never caught up
            if f.last_caught_up_ms >= recent:
                return f.last_caught_up_ms
            return self._caught_up_ms(f, last_session_fetch(r))
        out = out_of_sync_replicas(self.broker_id, self.state.isr, caught_up, now_ms, replica_lag_time_max_ms)
        return tuple(r for r in self.state.isr if r not in out) if out else None

    def _caught_up_ms(self, follower: FollowerState, session: tuple[int, int]) -> int:
        """When the follower last had this whole log: its session's latest fetch (`session`: its broker
        epoch and time) counts when that fetch was this incarnation's and the follower has the log's end
        (its fetches leave such partitions unnamed: KIP-227)."""
        epoch, ms = session
        if epoch == follower.broker_epoch and follower.log_end_offset >= self.log.log_end_offset:
            return max(follower.last_caught_up_ms, ms)
        return follower.last_caught_up_ms

    def isr_to_expand(self, replica_id: int, alive_broker_epoch: int | None) -> tuple[int, ...] | None:
        """The ISR with this follower added when its broker's live incarnation (`alive_broker_epoch`, as
        the metadata has it) has caught up, or None when it stays. Asked only for a follower's own
        fetch, as Kafka's maybeExpandIsr is: nothing else adds a replica to an ISR."""
        follower = self.followers.get(replica_id)
        if not self.is_leader or self.isr_change_given_up or follower is None or replica_id in self.state.isr \
                or not in_sync_again(follower, self.high_watermark, self.leader_epoch_start_offset,
                                     alive_broker_epoch):
            return None
        return self.state.isr + (replica_id,)

    def outside_isr(self) -> tuple[int, ...]:
        """As leader, the followers not in the ISR: those a fetch may take back in."""
        return tuple(r for r in self.state.replicas if r != self.broker_id and r not in self.state.isr) \
            if self.is_leader else ()

    def _advance_high_watermark(self) -> bool:
        if not self.is_leader:
            return False
        new = high_watermark(self.high_watermark, self.broker_id, self.log.log_end_offset, self.followers,
                             self.state.isr + self.joining)
        moved, self.high_watermark = new > self.high_watermark, new
        return moved

    # -- follower ------------------------------------------------------------

    def following(self, leader_epoch: int) -> bool:
        """Still a follower in this leader epoch (a fetcher's answer may come after a role change)."""
        return not self.stopped and not self.is_leader and self.state.leader_epoch == leader_epoch

    def append_as_follower(self, records: bytes, leader_high_watermark: int, leader_log_start_offset: int,
                           leader_epoch: int) -> bool:
        """Append the leader's batches as they are; the high watermark follows the leader's."""
        if not self.following(leader_epoch):
            return False
        if records:
            info = self.log.append_as_follower(records)
            if info is not None:
                for header in info.headers:
                    self.producers.update(header)
        if leader_log_start_offset > self.log.log_start_offset:  # the leader's retention moved it
            self.log.delete_segments_below(leader_log_start_offset)
        self._follow_high_watermark(max(self.high_watermark, min(leader_high_watermark, self.log.log_end_offset)))
        return True

    def truncate_to(self, offset: int, leader_epoch: int) -> bool:
        if not self.following(leader_epoch):
            return False
        before = self.log.log_end_offset
        if self.log.truncate_to(offset):
            self._follow_high_watermark(min(self.high_watermark, self.log.log_end_offset))
            self.producers.truncate(self.log, self.log.log_end_offset)
            self.on_truncate(leader_epoch, before, self.log.log_end_offset)
        return True

    def truncate_fully_and_start_at(self, offset: int, leader_epoch: int) -> bool:
        """The leader's log starts beyond this whole log (Kafka's handleOutOfRangeError): start again there."""
        if not self.following(leader_epoch):
            return False
        before = self.log.log_end_offset
        self.log.truncate_fully_and_start_at(offset)
        self.on_truncate(leader_epoch, before, -1)  # everything, whatever the offset it starts at
        self._follow_high_watermark(offset)
        self.producers.truncate_fully_and_start_at(offset)
        return True

    def _follow_high_watermark(self, high_watermark: int) -> None:
        if high_watermark != self.high_watermark:
            self.high_watermark = high_watermark
            self.on_high_watermark()

    # -- consumers and retention ---------------------------------------------

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention (retention.ms, retention.bytes): whole segments below the high watermark go."""
        deleted = self.log.delete_old_segments(now_ms, self.config.retention_ms, self.config.retention_bytes,
                                               self.high_watermark)
        if deleted:
            self.producers.truncate_head(self.log.log_start_offset)
        return deleted

    def read_records(self, offset: int, max_bytes: int, fetch_only_from_leader: bool = True) -> FetchResult:
        """A consumer's read (Kafka's readRecords at FetchHighWatermark): batches below the high watermark
        only. An offset between the high watermark and the log end gets nothing (seed 000: it may have
        been acknowledged by a previous leader); beyond the log end, or below its start, is
        OFFSET_OUT_OF_RANGE. On a follower too unless `fetch_only_from_leader`: a Fetch v11+ consumer may
        read a follower's replica, below the follower's own high watermark (Kafka's
        localLogWithEpochOrException with requireLeader false)."""
        if fetch_only_from_leader and not self.is_leader:
            raise NotLeaderOrFollowerException(f"broker {self.broker_id} does not lead {self.topic}-{self.partition}")
        log = self.log
        if not log.log_start_offset <= offset <= log.log_end_offset:
            raise OffsetOutOfRangeException(f"{self.topic}-{self.partition}: offset {offset} outside "
                                            f"[{log.log_start_offset}, {log.log_end_offset}]")
        records = log.read(offset, max_bytes, max_offset=self.high_watermark) if offset < self.high_watermark else b""
        return FetchResult(records, self.high_watermark, log.log_end_offset, log.log_start_offset)
