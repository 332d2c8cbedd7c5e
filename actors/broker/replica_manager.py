"""The broker's replicas: Partitions and their logs, produce and fetch served from them (Kafka's
ReplicaManager). What the controller's requests do to them is controller_requests.py's, the requests
that wait for them delayed_operations.py's.

Each replica's log lives in one of the broker's log directories (log_dirs.py), next to that
directory's high-watermark checkpoint. A failed log directory (KIP-112): an I/O error on a replica's
log or a directory's checkpoint goes to the LogDirFailureChannel; `handle_log_dir_failure` then
stops serving every replica in that directory (Kafka's HostedPartition.Offline): produce, fetch and
the controller's requests get KAFKA_STORAGE_ERROR for them. The shell stops their fetchers and tells
the controller.

Waiting costs no thread: everything here runs on the broker's event loop. An acks=all produce
awaits a `DelayedProduce` that the partitions complete as their high watermarks pass its batches;
a fetch with nothing to answer awaits a `DelayedFetch` that any change to one of its partitions
completes (Kafka's purgatories, keyed by partition). No ZooKeeper and no sockets: the shell writes
ISR changes and starts fetchers for the role changes this returns.
"""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import AbstractSet, Callable, Iterable

from actors.broker.controller_requests import ControllerRequests, now_ms
from actors.broker.delayed_operations import DelayedFetch, DelayedProduce
from actors.broker.events import BrokerEvents
from actors.broker.errors import (
    FencedLeaderEpochException,
    KafkaStorageException,
    NotLeaderOrFollowerException,
    UnknownLeaderEpochException,
)
from actors.broker.fetch_session import INVALID_SESSION_ID, FetchSession, FetchSessionCache
from actors.broker.log.checkpoints import read_checkpoint, write_checkpoint
from actors.broker.log.log import Log
from actors.broker.log.log_config import LogConfig
from actors.broker.log.log_dirs import LogDirFailureChannel, LogDirs, log_dir_name
from actors.broker.partition import LeaderAndIsrState, Partition
from actors.data_protocol import (
    EpochEndOffset,
    FetchedPartition,
    FetchParams,
    FetchPartition,
    FetchResult,
    ProduceResult,
)
from coordination.errors import Errors, KrayError, UnknownTopicOrPartitionException
from coordination.zkdata import TopicPartition, in_partition_order

state_change_log = logging.getLogger("state.change.logger")

HW_CHECKPOINT = "replication-offset-checkpoint"
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1  # ListOffsets' special timestamps


def role(state: LeaderAndIsrState, broker_id: int) -> str:
    return "Leader" if state.leader == broker_id else "Follower"


class ReplicaManager(ControllerRequests):
    def __init__(self, broker_id: int, log_dir: Path | list[Path], config_for: Callable[[str], LogConfig],
                 in_metadata: Callable[[TopicPartition], bool] = lambda tp: True,
                 expand_isr: Callable[[int, list[TopicPartition]], object] = lambda replica, tps: None,
                 alive_broker_epoch: Callable[[int], int | None] = lambda broker_id: None,
                 events: BrokerEvents | None = None):
        self.broker_id = broker_id
        self.events = events or BrokerEvents(broker_id)  # what the run directory hears of (nothing by default)
        self.expand_isr = expand_isr  # (follower, partitions whose ISR it may join): the shell writes them
        self.alive_broker_epoch = alive_broker_epoch  # a live broker's epoch in the metadata cache, None if dead
        self.config_for = config_for  # a topic's LogConfig (its overrides over the broker's defaults)
        self.in_metadata = in_metadata  # whether the metadata cache knows a partition (Kafka tells apart
        # UNKNOWN_TOPIC_OR_PARTITION and NOT_LEADER_OR_FOLLOWER by it)
        self.controller_epoch = 0
        self.last_leader_and_isr: dict[str, float] = {}
        self.log_dirs = LogDirs([Path(log_dir)] if isinstance(log_dir, (str, Path)) else [Path(d) for d in log_dir])
        self.log_dir = self.log_dirs.dirs[0]
        self.failure_channel = LogDirFailureChannel()  # its on_offline: the shell's, to the event loop
        self.partitions: dict[TopicPartition, Partition] = {}
        self._loaded: dict[TopicPartition, Partition] = {}  # opened at start, not yet named by a LeaderAndIsr
        self.offline_partitions: set[TopicPartition] = set()  # in a failed log dir (Kafka's HostedPartition.Offline)
        self._checkpointed: dict[TopicPartition, int] = {}
        for d in self.log_dirs.live:
            try:
                listed = {TopicPartition(t, p): hw for t, p, hw in read_checkpoint(d / HW_CHECKPOINT, (str, int, int))}
                self._checkpointed.update(listed)
                self.log_dirs.place_listed(d, listed)
            except OSError as e:  # offline from the start, as a directory Kafka cannot read at start
                state_change_log.error("[Broker id=%d] Error while reading the high watermark checkpoint in dir %s: "
                                       "%s", broker_id, d, e)
                self.log_dirs.mark_offline(d)
        if not self.log_dirs.live:
            raise KafkaStorageException(f"all log dirs of broker {broker_id} have failed")
        self.fetch_sessions = FetchSessionCache()
        self._waiting: list[DelayedFetch] = []
        self.generation = 0  # counts role changes here: a fetch waiting across one answers at once
        self._last_fetch: dict[int, tuple[int, int]] = {}  # follower -> (broker epoch, ms) of its latest fetch
        # follower -> the partitions led here whose ISR it is out of: the ones its fetches may take it back
        # into, indexed so that a fetch need not look at every partition of its session
        self._outside_isr: dict[int, set[TopicPartition]] = {}
        # the partitions led here, with their state as indexed and the followers outside their ISR: the
        # periodic tasks look at these only (a third of a broker's partitions, with three brokers)
        self._led: dict[TopicPartition, tuple[LeaderAndIsrState, tuple[int, ...]]] = {}
        # the high-watermark checkpoint's entries as last listed, and whether a partition's HW, role or presence
        # changed since (listed again only then)
        self._listed: dict[Path, list[tuple[str, int, int]]] = {}
        self._high_watermarks_changed = True
        # Kafka's BrokerTopicMetrics MessagesInPerSec and BytesInPerSec (all topics): appended by produce here
        self.messages_in = self.bytes_in = 0

    @property
    def replicas(self) -> dict[TopicPartition, LeaderAndIsrState]:
        return {tp: p.state for tp, p in self.partitions.items()}

    def partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def partition_or_error(self, tp: TopicPartition, leader: bool = False) -> Partition:
        """Kafka's getPartitionOrException: no replica here is NOT_LEADER_OR_FOLLOWER for a partition
        the cluster has, UNKNOWN_TOPIC_OR_PARTITION otherwise; with `leader`, only the leader's replica."""
        partition = self.partitions.get(tp)
        if partition is None and tp in self.offline_partitions:
            raise KafkaStorageException(f"Partition {tp} is in an offline log directory")
        if partition is None and not self.in_metadata(tp):
            raise UnknownTopicOrPartitionException(f"This server does not host this topic-partition: {tp}")
        if partition is None or leader and not partition.is_leader:
            raise NotLeaderOrFollowerException(f"broker {self.broker_id} does not lead {tp}")
        return partition

    def high_watermarks_by_dir(self) -> dict[Path, list[tuple[str, int, int]]]:
        """The checkpoint entries of each live log directory (every one gets its file, empty or not), listed
        again only when a partition's high watermark, role or presence changed since the last listing (an
        idle broker of 100,000 partitions sorted them all every 5 s); the files are written each time all
        the same, as Kafka's are, and a failed directory is found by that write."""
        if self._high_watermarks_changed:
            self._high_watermarks_changed = False
            out: dict[Path, list[tuple[str, int, int]]] = {d: [] for d in self.log_dirs.live}
            here = {**self._loaded, **self.partitions}  # those opened at start keep theirs
            for tp in in_partition_order(here):
                d = self.log_dirs.dir_of(tp)
                if d in out:
                    out[d].append((tp.topic, tp.partition, here[tp].high_watermark))
            self._listed = out
        return self._listed

    def _high_watermark_moved(self) -> None:
        self._high_watermarks_changed = True

    def write_high_watermark_checkpoints(self, by_dir: dict[Path, list[tuple[str, int, int]]]) -> None:
        """Write each directory's checkpoint (any thread); a directory that fails goes to the failure
        channel, the others are written all the same (Kafka's checkpointHighWatermarks)."""
        for d, entries in by_dir.items():
            try:
                write_checkpoint(d / HW_CHECKPOINT, entries)
            except OSError as e:
                self.failure_channel.maybe_add_offline_log_dir(
                    d, f"Error while writing to checkpoint file {d / HW_CHECKPOINT}", e)

    # -- failed log directories (KIP-112) --------------------------------------

    def io_failed(self, log_dir: Path, what: str, error: OSError) -> KafkaStorageException:
        """Kafka's maybeHandleIOException: report the directory to the failure channel; the exception to
        raise in place of the I/O error."""
        msg = f"Error while {what} in dir {log_dir}"
        self.failure_channel.maybe_add_offline_log_dir(log_dir, msg, error)
        return KafkaStorageException(f"{msg}: {error}")

    def _dir_of(self, partition: Partition) -> Path:
        return partition.log.dir.parent

    def describe_log_dirs(self, wanted: set[TopicPartition] | None = None
                          ) -> list[tuple[Path, Errors, dict[TopicPartition, tuple[int, int]]]]:
        """Kafka's describeLogDirs: per log dir, its error (KAFKA_STORAGE_ERROR once failed) and each
        replica in it (those `wanted`, all when None) with its size and its lag (the HW past its LEO)."""
        out = []
        for d in self.log_dirs.dirs:
            if d in self.log_dirs.offline:
                out.append((d, Errors.KAFKA_STORAGE_ERROR, {}))
                continue
            out.append((d, Errors.NONE, {tp: (p.log.size_in_bytes, max(0, p.high_watermark - p.log.log_end_offset))
                                         for tp, p in self.partitions.items()
                                         if self._dir_of(p) == d and (wanted is None or tp in wanted)}))
        return out

    def handle_log_dir_failure(self, log_dir: Path) -> list[TopicPartition]:
        """Kafka's ReplicaManager.handleLogDirFailure with LogManager's: every replica in the directory goes
        offline (its waiting produces and fetches answer, its log's files are closed); the replicas that
        did, for the shell to stop their fetchers. Nothing the second time."""
        if log_dir in self.log_dirs.offline:
            return []
        state_change_log.warning("[Broker id=%d] Stopping serving replicas in dir %s", self.broker_id, log_dir)
        offline = self.log_dirs.mark_offline(log_dir)
        self._high_watermark_moved()  # its checkpoint is no longer written
        for tp in offline:
            partition = self.partitions.pop(tp, None)
            self.offline_partitions.add(tp)
            if partition is not None:
                partition.stop()
            partition = partition or self._loaded.pop(tp, None)
            if partition is not None:
                try:
                    partition.log.close()
                except OSError:
                    pass  # its files are on the failed disk: closed as far as they can be
        self.wake_fetches()
        state_change_log.warning("[Broker id=%d] Broker %d stopped fetcher for partitions %s because they are in "
                                 "the failed log directory %s.", self.broker_id, self.broker_id,
                                 ",".join(map(str, offline)), log_dir)
        if not self.log_dirs.live:
            state_change_log.error("[Broker id=%d] Shutdown broker because all log dirs in %s have failed",
                                   self.broker_id, ", ".join(map(str, self.log_dirs.dirs)))
        return offline

    def checkpoint_leader_epochs(self, files_per_turn: int = 50) -> None:
        """Write the leader-epoch checkpoints that changed, a few files per turn of the event loop: on
        the loop, since a thread doing it made the loop yield the GIL at each of its file calls
        (after an election of 1,000 partitions, produce latency went from 10 ms to a second)."""
        caches = [(p, p.log.leader_epochs) for p in self.partitions.values()
                  if p.log.leader_epochs.unwritten(p.log.log_end_offset)]

        def write(start: int) -> None:
            for partition, cache in caches[start:start + files_per_turn]:
                try:
                    cache.flush(partition.log.log_end_offset)  # a log deleted meanwhile flushed when it closed
                except OSError as e:
                    self.io_failed(self._dir_of(partition), f"writing the leader epoch checkpoint of "
                                                            f"{partition.topic}-{partition.partition}", e)
            if start + files_per_turn < len(caches):
                asyncio.get_running_loop().call_soon(write, start + files_per_turn)
        write(0)

    def checkpoint_high_watermarks(self) -> None:
        """Every checkpoint at once, each log flushed first (at shutdown, as Kafka's LogManager.shutdown
        flushes every log and checkpoints its recovery point: a broker stopped cleanly loses nothing
        to a power loss afterwards)."""
        for partition in self.partitions.values():
            try:
                partition.log.flush()
                partition.log.leader_epochs.flush(partition.log.log_end_offset)
            except OSError as e:
                self.io_failed(self._dir_of(partition), "flushing a log and its leader epoch checkpoint", e)
        self.write_high_watermark_checkpoints(self.high_watermarks_by_dir())

    def load_logs(self) -> int:
        """Open every log the live directories hold, now, with its producer state (Kafka's
        LogManager.loadLogs, which runs before the broker registers): the controller's first LeaderAndIsr
        after a restart then finds its replicas ready instead of reading every batch header of a thousand
        logs while the partitions wait. A directory that fails goes offline. How many are ready."""
        for tp, log_dir in sorted(self.log_dirs.placed.items()):
            if log_dir in self.log_dirs.offline or tp in self._loaded or tp in self.partitions:
                continue
            try:
                self._loaded[tp] = self._new_partition(tp, log_dir)
                self._high_watermark_moved()
            except KafkaStorageException:
                continue
        return len(self._loaded)

    def _new_partition(self, tp: TopicPartition, log_dir: Path) -> Partition:
        config = self.config_for(tp.topic)
        try:
            log = Log(log_dir / log_dir_name(tp), config.segment_bytes)
        except OSError as e:
            raise self.io_failed(log_dir, f"creating log for {tp}", e) from None
        if log.recovery:
            state_change_log.warning("[Broker id=%d] Log of %s recovered: %s", self.broker_id, tp, log.recovery)
        return Partition(tp.topic, tp.partition, self.broker_id, log, config, self._checkpointed.get(tp, 0),
                         listener=self._changed, on_high_watermark=self._high_watermark_moved,
                         on_truncate=lambda epoch, before, after: self.events.truncation(tp, epoch, before, after))

    def _get_or_create(self, tp: TopicPartition, is_new: bool = False) -> Partition:
        """KafkaStorageException when its log is, or may be, in an offline directory, or cannot be opened."""
        if tp not in self.partitions:
            if tp in self.offline_partitions:
                raise KafkaStorageException(f"Partition {tp} is in an offline log directory")
            log_dir = self.log_dirs.assign(tp, is_new)
            self.partitions[tp] = self._loaded.pop(tp, None) or self._new_partition(tp, log_dir)
        return self.partitions[tp]

    def update_log_config(self, topic: str, config: LogConfig) -> None:
        """A topic's configs changed at run time (kafka-configs --alter): its replicas use them now."""
        for tp, partition in [*self.partitions.items(), *self._loaded.items()]:
            if tp.topic == topic:
                partition.config = config
                partition.log.segment_bytes = config.segment_bytes

    def _changed(self, partition: Partition, hw_only: bool) -> None:
        """A partition changed (records, high watermark, role): sessions read it again, and the fetches
        waiting on it answer."""
        tp = TopicPartition(partition.topic, partition.partition)
        self._high_watermark_moved()
        if self.events.enabled:
            self.events.high_watermark(tp, partition.state, partition.high_watermark, partition.is_leader)
        self.fetch_sessions.mark(tp)
        for fetch in self._waiting:
            if tp in fetch.keys and not (hw_only and fetch.follower):
                fetch.wake()
        current = self.partitions.get(tp)
        if current is None:
            self._index_led(tp, None)  # stopped, or offline: no longer here
        elif current is partition:  # not a replaced object's late change (an ISR write landing after a StopReplica)
            indexed = self._led.get(tp)
            if indexed is not None and indexed[0] is not partition.state or indexed is None and partition.is_leader:
                self._index_led(tp, partition)  # its role or ISR changed

    def _index_led(self, tp: TopicPartition, partition: Partition | None) -> None:
        _, before = self._led.pop(tp, (None, ()))
        for r in before:
            self._outside_isr[r].discard(tp)
        if partition is not None and partition.is_leader:
            now = partition.outside_isr()
            for r in now:
                self._outside_isr.setdefault(r, set()).add(tp)
            self._led[tp] = (partition.state, now)

    def wake_fetches(self) -> None:
        """End every waiting fetch now (roles changed here: a follower's fetcher may have new work)."""
        self.generation += 1
        for fetch in self._waiting:
            fetch.wake()

    # -- produce -------------------------------------------------------------

    async def append_records(self, acks: int, timeout_ms: int,
                             entries: Iterable[tuple[TopicPartition, bytes]]) -> list[ProduceResult]:
        """Append each partition's batch on its leader; with acks=all, wait (up to the request's
        timeout) until the ISR has them."""
        results: dict[TopicPartition, ProduceResult] = {}
        waits = []
        for tp, records in entries:
            try:
                partition = self.partition_or_error(tp)
                hw_before = partition.high_watermark
                try:
                    appended = partition.append_as_leader(records, acks)
                except OSError as e:
                    raise self.io_failed(self._dir_of(partition), f"appending to {tp}", e) from None
                results[tp] = ProduceResult(tp.topic, tp.partition, int(Errors.NONE), appended.first_offset,
                                            appended.log_start_offset)
                if not appended.duplicate:  # the offsets come from the batch headers: no record is decoded
                    self.messages_in += appended.last_offset - appended.first_offset + 1
                    self.bytes_in += len(records)
                if self.events.enabled:
                    self.events.client_append(tp, partition.state, hw_before, partition.high_watermark)
                if acks == -1:
                    waits.append((tp, partition, appended.last_offset, appended.term))
            except KrayError as e:
                results[tp] = ProduceResult(tp.topic, tp.partition, int(e.error), error_message=str(e))
                self.events.produce_error(tp, e.error)
        if waits:
            errors = await DelayedProduce(waits, timeout_ms / 1000).future
            for tp, error in errors.items():
                if error != Errors.NONE:
                    results[tp] = results[tp]._replace(error_code=int(error), error_message=error.name)
                    self.events.produce_error(tp, error)
        return list(results.values())

    def under_replicated_partitions(self) -> int:
        """Kafka's ReplicaManager UnderReplicatedPartitions: partitions led here whose ISR is smaller
        than their replicas."""
        return sum(1 for state, _ in self._led.values() if len(state.isr) < len(state.replicas))

    # -- fetch ---------------------------------------------------------------

    async def fetch(self, params: FetchParams, client_metadata: bool = False) -> FetchResult:
        """A follower's or a consumer's fetch, long-polled: wait up to max_wait_ms for min_bytes, unless
        a partition has an error or a diverging epoch, answered at once (Kafka's fetchMessages) so
        that the fetcher can act on it, or the fetch reads no partition. A follower that has caught up
        is taken into the ISR as its fetch arrives (Kafka's maybeExpandIsr), before any wait; that is
        the only way into an ISR. A consumer's fetch with `client_metadata` (Fetch v11 on, KIP-392)
        may read from a follower, as Kafka's fetchOnlyFromLeader allows."""
        now = now_ms()
        context = self.fetch_sessions.new_context(params, now)
        if context.error != Errors.NONE:
            return FetchResult(int(context.error), INVALID_SESSION_ID, [])
        session, to_read = context.session, context.partitions
        follower = params.replica_id >= 0
        fetch_only_from_leader = follower or not client_metadata
        outside = frozenset(self._outside_isr.get(params.replica_id, ())) if follower else frozenset()
        if follower:
            self._last_fetch[params.replica_id] = (params.replica_epoch, now)
            if session is not None and outside:
                to_read = to_read + self._unread_in_session(session, to_read, outside)
        if session is not None and not fetch_only_from_leader:
            to_read = to_read + self._followed_in_session(session, to_read)
        out = self._read(params, to_read, now, session, fetch_only_from_leader=fetch_only_from_leader)
        if outside:
            alive_epoch = self.alive_broker_epoch(params.replica_id)
            expand = [tp for tp in outside & out.keys() if out[tp].error_code == Errors.NONE
                      and self.partitions[tp].isr_to_expand(params.replica_id, alive_epoch) is not None]
            if expand:
                self.expand_isr(params.replica_id, expand)
        keys = session.partitions if session is not None else {TopicPartition(p.topic, p.partition) for p in to_read}
        deadline = time.monotonic() + params.max_wait_ms / 1000
        generation = self.generation
        while keys and sum(len(f.records) for f in out.values()) < params.min_bytes and generation == self.generation \
                and not any(_answer_now(f) for f in out.values()) and (remaining := deadline - time.monotonic()) > 0:
            waiting = DelayedFetch(keys, follower)
            self._waiting.append(waiting)
            try:
                await waiting.wait(remaining)
            finally:
                self._waiting.remove(waiting)
            again = to_read
            if session is not None:
                again = list(FetchSessionCache.take_dirty(session).values())
                if not fetch_only_from_leader:
                    again += self._followed_in_session(session, again)
            out.update(self._read(params, again, now_ms(), session, arrival=False,
                                  fetch_only_from_leader=fetch_only_from_leader))
        return self.fetch_sessions.respond(context, out.values())

    @staticmethod
    def _unread_in_session(session, to_read: list[FetchPartition],
                           outside: AbstractSet[TopicPartition]) -> list[FetchPartition]:
        """The session's partitions this fetch does not read whose ISR the follower is out of, as its
        session last named them. Kafka's leader reads every partition of a session at each fetch, so a
        follower refused while its broker was not yet alive here is taken at its next fetch, though its
        incremental fetches name nothing new; these are the ones that reading can change."""
        read = {TopicPartition(p.topic, p.partition) for p in to_read}
        return [session.partitions[tp] for tp in outside if tp in session.partitions and tp not in read]

    def _followed_in_session(self, session: FetchSession, to_read: list[FetchPartition]) -> list[FetchPartition]:
        """The session's partitions this broker follows that this fetch does not read yet. A follower's
        appends and high watermark mark no session (only a leader's changes do), so a consumer reading
        from a follower reads them at every fetch, as Kafka reads every partition of a session."""
        read = {TopicPartition(p.topic, p.partition) for p in to_read}
        return [p for tp, p in session.partitions.items()
                if tp not in read and (replica := self.partitions.get(tp)) is not None and not replica.is_leader]

    def _read(self, params: FetchParams, partitions: list[FetchPartition], now: int,
              session=None, arrival: bool = True, fetch_only_from_leader: bool = True
              ) -> dict[TopicPartition, FetchedPartition]:
        """Read each partition for the fetch, within the request's max_bytes (the first batch always,
        KIP-74); a follower's fetch updates what the leader knows of it on its arrival only. A
        consumer's reads a follower's replica too unless `fetch_only_from_leader`."""
        out: dict[TopicPartition, FetchedPartition] = {}
        budget = params.max_bytes
        for p in partitions:
            tp = TopicPartition(p.topic, p.partition)
            try:
                partition = self.partition_or_error(tp)
                _check_leader_epoch(partition, p.current_leader_epoch)
                max_bytes = min(p.partition_max_bytes, budget) if budget > 0 or not out else 0
                try:
                    got = partition.fetch_for_follower(params.replica_id, p.fetch_offset, max_bytes, now,
                                                       p.last_fetched_epoch, params.replica_epoch, arrival) \
                        if params.replica_id >= 0 else partition.read_records(p.fetch_offset, max_bytes,
                                                                              fetch_only_from_leader)
                except OSError as e:
                    raise self.io_failed(self._dir_of(partition), f"reading from {tp}", e) from None
                budget -= len(got.records)
                if arrival and params.replica_id >= 0 and self.events.enabled:
                    self.events.follower_fetch(tp, params.replica_id, partition.state.leader_epoch)
                out[tp] = FetchedPartition(p.topic, p.partition, int(Errors.NONE), got.high_watermark,
                                           got.log_start_offset, got.records, got.diverging_epoch, got.log_end_offset)
            except KrayError as e:
                out[tp] = FetchedPartition(p.topic, p.partition, int(e.error))
        if session is not None:
            session.dirty.difference_update(out)  # what reading them changed is in the answer already
        return out

    # -- offsets -------------------------------------------------------------

    def offsets_for_leader_epoch(self, queries: Iterable[tuple[str, int, int, int]]) -> list[EpochEndOffset]:
        """Where each asked epoch ended in this leader's log (KIP-101): (topic, partition, current leader
        epoch, epoch asked)."""
        out = []
        for topic, index, current_epoch, leader_epoch in queries:
            try:
                partition = self.partition_or_error(TopicPartition(topic, index), leader=True)
                _check_leader_epoch(partition, current_epoch)
                epoch, end = partition.log.leader_epochs.end_offset_for(leader_epoch, partition.log.log_end_offset)
                out.append(EpochEndOffset(topic, index, int(Errors.NONE), epoch, end))
            except KrayError as e:
                out.append(EpochEndOffset(topic, index, int(e.error)))
        return out

    def list_offset(self, tp: TopicPartition, timestamp: int, current_leader_epoch: int = -1,
                    replica_id: int = -1) -> tuple[int, int, int]:
        """ListOffsets for one partition on its leader: (timestamp, offset, leader epoch). Earliest is the
        log start; latest the high watermark for clients (the log end for replicas); a timestamp gives
        the first offset at or after it below the high watermark, or -1."""
        partition = self.partition_or_error(tp, leader=True)
        _check_leader_epoch(partition, current_leader_epoch)
        log, epoch = partition.log, partition.state.leader_epoch
        if timestamp == EARLIEST_TIMESTAMP:
            return -1, log.log_start_offset, epoch
        if timestamp == LATEST_TIMESTAMP:
            return -1, log.log_end_offset if replica_id >= 0 else partition.high_watermark, epoch
        found = log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= partition.high_watermark:
            return -1, -1, -1
        return found[1], found[0], epoch

    def forget_followers(self, incarnations: dict[int, int]) -> None:
        """Brokers that failed (-1) or registered again (their new broker epoch), as an UpdateMetadata
        shows: what their earlier incarnations fetched from the partitions led here is forgotten
        (KIP-903), and only their new incarnations' own fetches can take them back into an ISR."""
        for broker_id, broker_epoch in incarnations.items():
            session = self._last_fetch.pop(broker_id, (-1, 0))
            for tp in self._led:
                if (partition := self.partitions.get(tp)) is not None:
                    partition.forget_follower(broker_id, broker_epoch, session)

    # -- periodic tasks ------------------------------------------------------

    def isr_shrinks(self, now: int, replica_lag_time_max_ms: int) -> list[TopicPartition]:
        """The partitions led here whose ISR holds a follower that lags too long."""
        return [tp for tp in self._led if (partition := self.partitions.get(tp)) is not None
                and partition.isr_to_shrink(now, replica_lag_time_max_ms, self.last_session_fetch) is not None]

    def last_session_fetch(self, broker_id: int) -> tuple[int, int]:
        """(broker epoch, ms) of a follower broker's latest fetch, of any partition; (-1, 0) before one."""
        return self._last_fetch.get(broker_id, (-1, 0))

    def delete_old_segments(self) -> int:
        """Kafka's log retention task: whole segments past retention.ms or retention.bytes go."""
        now, deleted = now_ms(), 0
        for tp, partition in list(self.partitions.items()):
            try:
                deleted += partition.delete_old_segments(now)
            except OSError as e:
                self.io_failed(self._dir_of(partition), f"deleting old segments of {tp}", e)
        return deleted


def _check_leader_epoch(partition: Partition, requested: int) -> None:
    """A request naming the leader epoch it knows (KIP-320): older than this replica's is fenced, newer
    is not known here yet."""
    if requested < 0 or requested == partition.state.leader_epoch:
        return
    if requested < partition.state.leader_epoch:
        raise FencedLeaderEpochException(f"{partition.topic}-{partition.partition}: leader epoch {requested}, "
                                         f"this broker has {partition.state.leader_epoch}")
    raise UnknownLeaderEpochException(f"{partition.topic}-{partition.partition}: leader epoch {requested} is newer "
                                      f"than this broker's {partition.state.leader_epoch}")


def _answer_now(fetched: FetchedPartition) -> bool:
    """The fetcher has something to act on: an error, or where to truncate."""
    return fetched.error_code != Errors.NONE or fetched.diverging_epoch is not None
