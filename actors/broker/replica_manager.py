"""The broker's replicas: controller requests applied to Partitions and their logs.

Kafka's ReplicaManager.becomeLeaderOrFollower / stopReplicas: a request from a
stale controller epoch, or meant for an earlier incarnation of this broker, is
refused whole; a partition state is applied only when its leader epoch is newer
than the one held. Each replica's log lives under the broker's log directory,
next to the high-watermark checkpoint. No Ray and no ZooKeeper: the broker's
shell starts and stops fetchers for the role changes this returns.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Callable

from actors.broker.checkpoints import read_checkpoint, write_checkpoint
from actors.broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchSession,
    FetchSessionCache,
)
from actors.broker.log import DEFAULT_SEGMENT_BYTES, Log
from actors.broker.partition import LeaderAndIsrState, Partition
from actors.broker.records import entry_size
from actors.data_protocol import (
    EpochEndOffset,
    EpochEndOffsets,
    FetchedPartition,
    FetchedPartitions,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceResult,
    ProduceResults,
    Records,
)

from actors.protocol import (
    ControllerRequest,
    ControllerResponse,
    LeaderAndIsrRequest,
    PartitionError,
    PartitionErrors,
    StopReplicaRequest,
)
from coordination.errors import (
    Errors,
    FencedLeaderEpochException,
    KrayError,
    NotLeaderOrFollowerException,
    RecordTooLargeException,
)
from coordination.zkdata import TopicPartition

state_change_log = logging.getLogger("state.change.logger")

UNKNOWN_BROKER_EPOCH = -1


HW_CHECKPOINT = "replication-offset-checkpoint"


def role(state: LeaderAndIsrState, broker_id: int) -> str:
    return "Leader" if state.leader == broker_id else "Follower"


class ReplicaManager:
    def __init__(self, broker_id: int, log_dir: Path, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 caught_up_refresh_ms: int = 3_000):
        self.broker_id = broker_id
        # a caught-up follower's partitions are left out of its session's fetches for this long at most
        # (its last caught-up time is then refreshed): keep it well under replica.lag.time.max.ms
        self.caught_up_refresh_ms = caught_up_refresh_ms
        self.controller_epoch = 0
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.partitions: dict[TopicPartition, Partition] = {}
        self._checkpointed = {TopicPartition(t, p): hw for t, p, hw in
                              read_checkpoint(self.log_dir / HW_CHECKPOINT, (str, int, int))}
        self._checkpoint_lock = threading.Lock()
        self.data_arrived = threading.Condition()  # wakes long-polling fetches after every append
        self.generation = 0  # counts role changes, which end long-polling fetches
        # per follower, the newest (broker epoch, partitions_version) its fetcher announced (wake_fetches)
        self.fetcher_versions: dict[int, tuple[int, int]] = {}
        self.fetch_sessions = FetchSessionCache()

    @property
    def replicas(self) -> dict[TopicPartition, LeaderAndIsrState]:
        return {tp: p.state for tp, p in list(self.partitions.items())}

    def partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def checkpoint_high_watermarks(self) -> None:
        """Kafka's replication-offset-checkpoint: where each replica's HW was, for the next start; and
        each log's leader-epoch checkpoint, if it changed."""
        for partition in list(self.partitions.values()):
            with partition.changed:
                if not partition.stopped:
                    partition.log.leader_epochs.flush()
        with self._checkpoint_lock:
            write_checkpoint(self.log_dir / HW_CHECKPOINT, [(tp.topic, tp.partition, p.high_watermark)
                                                            for tp, p in sorted(list(self.partitions.items()))])

    def _get_or_create(self, tp: TopicPartition) -> Partition:
        if tp not in self.partitions:
            log = Log(self.log_dir / f"{tp.topic}-{tp.partition}", self.segment_bytes)
            if log.recovery:
                state_change_log.warning("[Broker id=%d] Log of %s recovered: %s", self.broker_id, tp, log.recovery)
            self.partitions[tp] = Partition(tp.topic, tp.partition, self.broker_id, log,
                                            self._checkpointed.get(tp, 0))
        return self.partitions[tp]

    def check_request(self, request: ControllerRequest, broker_epoch: int) -> Errors:
        """STALE_BROKER_EPOCH for a request meant for an earlier registration; STALE_CONTROLLER_EPOCH
        for a deposed controller. Accepting a request adopts its controller epoch."""
        if request.broker_epoch != UNKNOWN_BROKER_EPOCH and request.broker_epoch < broker_epoch:
            state_change_log.warning("[Broker id=%d] Received %s with stale broker epoch %d (current %d) from "
                                     "controller %d", self.broker_id, request.api, request.broker_epoch,
                                     broker_epoch, request.controller_id)
            return Errors.STALE_BROKER_EPOCH
        if request.controller_epoch < self.controller_epoch:
            state_change_log.warning("[Broker id=%d] Ignoring %s from controller %d with correlation epoch %d since "
                                     "its controller epoch %d is old. Latest known controller epoch is %d",
                                     self.broker_id, request.api, request.controller_id, request.controller_epoch,
                                     request.controller_epoch, self.controller_epoch)
            return Errors.STALE_CONTROLLER_EPOCH
        self.controller_epoch = request.controller_epoch
        return Errors.NONE

    def become_leader_or_follower(self, request: LeaderAndIsrRequest, broker_epoch: int) -> ControllerResponse:
        error = self.check_request(request, broker_epoch)
        if error != Errors.NONE:
            return ControllerResponse(api=request.api, broker_id=self.broker_id, error_code=error)
        results = []
        debug = state_change_log.isEnabledFor(logging.DEBUG)  # a line per partition only when asked
        now_ms = int(time.time() * 1000)
        for st in request.partition_states:
            tp = TopicPartition(st.topic, st.partition)
            current = self.partitions.get(tp)
            current_epoch = current.state.leader_epoch if current else -1
            if st.leader_epoch > current_epoch:
                if self.broker_id not in st.replicas:
                    state_change_log.warning("[Broker id=%d] Ignoring LeaderAndIsr request from controller %d "
                                             "epoch %d for partition %s as itself is not in assigned replica "
                                             "list %s", self.broker_id, request.controller_id,
                                             request.controller_epoch, tp, st.replicas)
                    code = Errors.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    state = LeaderAndIsrState(st.leader, st.leader_epoch, tuple(st.isr), tuple(st.replicas),
                                              st.zk_version, st.controller_epoch)
                    partition = self._get_or_create(tp)
                    if st.leader == self.broker_id:
                        partition.make_leader(state, now_ms)
                    else:
                        partition.make_follower(state)
                    if debug:
                        state_change_log.debug("[Broker id=%d] %s %s with leader epoch %d, leader %d, ISR %s "
                                               "(controller %d epoch %d)", self.broker_id,
                                               "Became leader of" if st.leader == self.broker_id
                                               else "Became follower of", tp, st.leader_epoch, st.leader, st.isr,
                                               request.controller_id, request.controller_epoch)
                    code = Errors.NONE
            else:
                if debug:
                    state_change_log.debug("[Broker id=%d] Ignoring LeaderAndIsr request from controller %d epoch "
                                           "%d for partition %s since its associated leader epoch %d is not higher "
                                           "than the current leader epoch %d", self.broker_id,
                                           request.controller_id, request.controller_epoch, tp, st.leader_epoch,
                                           current_epoch)
                code = Errors.STALE_CONTROLLER_EPOCH
            results.append(PartitionError(tp.topic, tp.partition, int(code)))
        counts = {code: 0 for code in (Errors.NONE, Errors.STALE_CONTROLLER_EPOCH, Errors.UNKNOWN_TOPIC_OR_PARTITION)}
        for r in results:
            counts[r.error_code] += 1
        self.wake_fetches()
        state_change_log.info("[Broker id=%d] Handled LeaderAndIsr request from controller %d epoch %d for %d "
                              "partitions: %d applied, %d with a stale leader epoch, %d not assigned here",
                              self.broker_id, request.controller_id, request.controller_epoch, len(results),
                              *counts.values())
        return ControllerResponse(api=request.api, broker_id=self.broker_id, partition_errors=PartitionErrors(results))

    def stop_replicas(self, request: StopReplicaRequest, broker_epoch: int) -> ControllerResponse:
        error = self.check_request(request, broker_epoch)
        if error != Errors.NONE:
            return ControllerResponse(api=request.api, broker_id=self.broker_id, error_code=error)
        results = []
        for p in request.partitions:
            tp = TopicPartition(p.topic, p.partition)
            current = self.partitions.get(tp)
            if current is not None and 0 <= p.leader_epoch <= current.state.leader_epoch:
                code = Errors.FENCED_LEADER_EPOCH  # -1 (no epoch) and -2 (deleting) always stop
            else:
                stopped = self.partitions.pop(tp, None)
                if stopped is not None:
                    stopped.stop()  # waiting produce calls give up; fetchers leave it alone
                    if p.delete_partition:
                        stopped.log.delete()
                    else:
                        stopped.log.close()
                code = Errors.NONE
            results.append(PartitionError(tp.topic, tp.partition, int(code)))
        self.wake_fetches()
        return ControllerResponse(api=request.api, broker_id=self.broker_id, partition_errors=PartitionErrors(results))

    # -- the data plane ------------------------------------------------------

    def append_records(self, request: ProduceRequest, min_insync_replicas: int,
                       message_max_bytes: int) -> ProduceResponse:
        """Append each partition's records on its leader; with acks=all, wait (up to the request's
        timeout) until the ISR has them. A batch larger than message.max.bytes is refused whole."""
        appended, results = [], {}
        for p in request.partitions:
            tp = TopicPartition(p.topic, p.partition)
            partition = self.partitions.get(tp)
            try:
                if partition is None:
                    raise NotLeaderOrFollowerException(f"broker {self.broker_id} has no replica of {tp}")
                size = sum(map(entry_size, p.records))
                if size > message_max_bytes:
                    raise RecordTooLargeException(
                        f"The request included a message larger than the max message size the server will "
                        f"accept: {size} bytes for {tp}, message.max.bytes={message_max_bytes}")
                with partition.changed:  # the term and epoch the records were appended in
                    first, last = partition.append_as_leader(list(p.records), request.acks, min_insync_replicas)
                    term, epoch = partition.leader_term, partition.state.leader_epoch
                appended.append((tp, partition, last, term))
                results[tp] = ProduceResult(p.topic, p.partition, int(Errors.NONE), first, last, leader_epoch=epoch)
            except KrayError as e:
                results[tp] = ProduceResult(p.topic, p.partition, int(e.error), error_message=str(e))
        if appended:
            with self.data_arrived:
                self.data_arrived.notify_all()
        if request.acks == -1:
            deadline = time.monotonic() + request.timeout_ms / 1000
            for tp, partition, last, term in appended:
                error = partition.wait_for_high_watermark(last, max(0.0, deadline - time.monotonic()),
                                                          min_insync_replicas, term)
                if error != Errors.NONE:
                    results[tp] = results[tp]._replace(error_code=int(error), error_message=error.name)
        answered = time.time() * 1000
        return ProduceResponse(broker_id=self.broker_id, results=ProduceResults(
            r._replace(acked_ms=answered) if r.error_code == Errors.NONE else r for r in results.values()))

    def fetch(self, request: FetchRequest, now_ms: Callable[[], int]) -> tuple[FetchResponse, list[TopicPartition]]:
        """A follower's or a consumer's fetch, long-polled: wait up to max_wait_ms for min_bytes, unless a
        partition has an error (a fenced epoch, a moved leader) or a diverging epoch: answered at once, as
        Kafka's fetchMessages does, so that the fetcher can act on it. A fetch in a session (KIP-227)
        covers all the session's partitions and is answered with those that have news. Also returns the
        partitions whose ISR the fetching follower may now join (for the shell to write)."""
        error, session, partitions = self.fetch_sessions.open(request)
        if error != Errors.NONE:
            return FetchResponse(broker_id=self.broker_id, partitions=FetchedPartitions(), error_code=int(error)), []
        deadline = time.monotonic() + request.max_wait_ms / 1000
        generation = self.generation
        out, size = self._fetch_once(request.replica_id, partitions, now_ms(), session)
        expand = []  # decided as the fetch arrives (Kafka's maybeExpandIsr), for partitions it fetched in
        if request.replica_id >= 0:  # the current epoch
            expand = [tp for tp in (TopicPartition(f.topic, f.partition) for f in out if f.error_code == Errors.NONE)
                      if tp in self.partitions and self.partitions[tp].isr_to_expand(request.replica_id) is not None]
        while size < request.min_bytes and (remaining := deadline - time.monotonic()) > 0 \
                and not self._outdated(request) and not any(_answer_now(f) for f in out):
            with self.data_arrived:  # checked under the lock that appends and role changes notify under
                if self.generation == generation and not self._has_news(request.replica_id, partitions) \
                        and not self._outdated(request):
                    self.data_arrived.wait(remaining)
            if self.generation != generation:  # roles changed: answer now (the fetcher has new work), and
                out, size = self._fetch_once(request.replica_id, partitions, now_ms(), session)  # take no one
                expand = []  # into an ISR that may have moved
                break
            if self._has_news(request.replica_id, partitions):
                out, size = self._fetch_once(request.replica_id, partitions, now_ms(), session)
        out = self.fetch_sessions.respond(session, request.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH), out)
        return FetchResponse(broker_id=self.broker_id, partitions=FetchedPartitions(out),
                             session_id=session.id if session is not None else INVALID_SESSION_ID), expand

    def _has_news(self, replica_id: int, partitions: list[FetchPartition]) -> bool:
        """Whether a waiting fetch would now get records: a cheap look at each partition's offsets,
        so that an append to one partition does not make every waiting fetch read every log."""
        follower = replica_id >= 0
        for p in partitions:
            partition = self.partitions.get(TopicPartition(p.topic, p.partition))
            if partition is None:
                return True
            end = partition.log.log_end_offset if follower else partition.high_watermark
            if end > p.fetch_offset:
                return True
        return False

    def _outdated(self, request: FetchRequest) -> bool:
        """A follower's fetch built before its fetcher took on partitions it has told us of: answer it
        now, so that the fetcher comes back with them (whichever of the two calls arrived first)."""
        return request.replica_id >= 0 and self.fetcher_versions.get(request.replica_id, (-1, -1)) > (
            request.replica_epoch, request.partitions_version)

    def wake_fetches(self, replica_id: int | None = None, replica_epoch: int = -1, partitions_version: int = 0) -> None:
        """End long-polling fetches now: every one (roles changed here: their partitions may have moved),
        or the follower's that are older than the partitions its fetcher has just taken on."""
        with self.data_arrived:
            if replica_id is None:
                self.generation += 1
            else:
                self.fetcher_versions[replica_id] = max(self.fetcher_versions.get(replica_id, (-1, -1)),
                                                        (replica_epoch, partitions_version))
            self.data_arrived.notify_all()

    def _fetch_once(self, replica_id: int, partitions: list[FetchPartition], now_ms: int,
                    session: FetchSession | None = None) -> tuple[list[FetchedPartition], int]:
        """Read each partition for the fetch. In a session, a partition whose follower is caught up and
        whose high watermark it has already been sent is passed over: the answer would leave it out
        anyway, and at a few records per round most of a follower's partitions are such (this is what
        keeps a fetch round's cost in proportion to what changed, not to the partitions followed)."""
        out, size = [], 0
        sent_hw = session.high_watermarks if session is not None else {}
        for p in partitions:
            tp = TopicPartition(p.topic, p.partition)
            partition = self.partitions.get(tp)
            if partition is not None and sent_hw.get(tp) == partition.high_watermark \
                    and p.current_leader_epoch == partition.state.leader_epoch \
                    and partition.follower_is_current(replica_id, p.fetch_offset, now_ms, self.caught_up_refresh_ms):
                continue
            try:
                if partition is None:
                    raise NotLeaderOrFollowerException(f"broker {self.broker_id} has no replica of {p.topic}-{p.partition}")
                if p.current_leader_epoch >= 0 and p.current_leader_epoch != partition.state.leader_epoch:
                    raise FencedLeaderEpochException(
                        f"{p.topic}-{p.partition}: leader epoch {p.current_leader_epoch}, "
                        f"this broker has {partition.state.leader_epoch}")
                got = partition.fetch_for_follower(replica_id, p.fetch_offset, p.partition_max_bytes, now_ms,
                                                   p.last_fetched_epoch) \
                    if replica_id >= 0 else partition.read_for_consumer(p.fetch_offset, p.partition_max_bytes)
                size += sum(len(r.value) for r in got.records)
                out.append(FetchedPartition(p.topic, p.partition, int(Errors.NONE), got.high_watermark,
                                            got.log_end_offset, Records(got.records), got.diverging_epoch))
            except KrayError as e:
                out.append(FetchedPartition(p.topic, p.partition, int(e.error)))
        return out, size

    def offsets_for_leader_epoch(self, request: OffsetsForLeaderEpochRequest) -> OffsetsForLeaderEpochResponse:
        """Where each asked epoch ended in this leader's log (KIP-101), for a follower about to truncate."""
        out = []
        for q in request.partitions:
            partition = self.partitions.get(TopicPartition(q.topic, q.partition))
            if partition is None or not partition.is_leader:
                out.append(EpochEndOffset(q.topic, q.partition, int(Errors.NOT_LEADER_OR_FOLLOWER)))
                continue
            epoch, end = partition.log.leader_epochs.end_offset_for(q.leader_epoch, partition.log.log_end_offset)
            out.append(EpochEndOffset(q.topic, q.partition, int(Errors.NONE), epoch, end))
        return OffsetsForLeaderEpochResponse(broker_id=self.broker_id, partitions=EpochEndOffsets(out))

    def isr_shrinks(self, now_ms: int, replica_lag_time_max_ms: int) -> dict[TopicPartition, tuple[int, ...]]:
        """For each partition led here, the ISR without followers that lag too long (only those that change)."""
        out = {}
        for tp, partition in list(self.partitions.items()):
            isr = partition.isr_to_shrink(now_ms, replica_lag_time_max_ms)
            if isr is not None:
                out[tp] = isr
        return out


def _answer_now(fetched: FetchedPartition) -> bool:
    """The fetcher has something to act on: an error, or where to truncate."""
    return fetched.error_code != Errors.NONE or fetched.diverging_epoch is not None
