"""Followers pull over the Kafka protocol: one fetcher per source broker, covering every partition
this broker follows there (Kafka's ReplicaFetcherManager / ReplicaFetcherThread), each an asyncio
task on the broker's event loop with its own connection to the leader's listener.

A partition whose log has a leader epoch joins ready to fetch: each fetch names the epoch of the
follower's last batch, and a leader whose log diverged from it answers where to truncate instead
of records (KIP-320: no extra round trip after a failover). One with no epoch yet, or told its
offset is out of range, first asks the leader where its latest epoch ended (OffsetForLeaderEpoch,
KIP-101; its high watermark when the leader cannot tell); one below the leader's log start starts
again there (retention moved it). Fetched batches are appended as they are. Fetches long-poll on
the leader (replica.fetch.wait.max.ms) and run in a fetch session (KIP-227): each names only the
partitions whose position changed, and the answer carries only the partitions with news.

A fetcher given a partition while its fetch long-polls does not wait for that fetch (kray, not
Kafka, whose fetcher waits out replica.fetch.wait.max.ms): it drops the connection and fetches again
at once on a new one. After a failover, an acks=all produce to a partition that moved waits for its
new follower's first fetch, and with it every later answer on the producer's connection (answers
go in order); with a single producer no other append ended the poll, and every partition of the
cluster stood still for half a second.

Errors back off per partition, as Kafka 2.8 does (a delayed partition leaves the session until its
backoff ends), but for kray's amounts: FIRST_BACKOFF_MS (10 ms) doubling up to PARTITION_BACKOFF_MS
(40 ms), where Kafka waits replica.fetch.backoff.ms (1 s) each time; the commonest error after a
failover is a new leader that has not applied its LeaderAndIsr yet, over within milliseconds. A move
to the next leader epoch ends the backoff. A lost connection backs the whole fetcher off from
FIRST_BACKOFF_MS doubling up to replica.fetch.backoff.ms (kray's; Kafka waits replica.fetch.backoff.ms
at once and delays every partition by it too), and opens a new session. Both make kray's failover
figures shorter than Kafka's would be (docs/KAFKA_DIFFERENCES.md, "Follower backoff after errors").
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass
from typing import Callable

from kafka.protocol.consumer import ListOffsetsRequest, OffsetForLeaderEpochRequest

from actors.broker.network import wire
from actors.broker.errors import CorruptRecordException, InvalidRecordException
from actors.broker.fetch_session import FetchSessionHandler
from actors.broker.network.network import NetworkClient
from actors.broker.partition import Partition
from actors.broker.replication import truncation_offset
from actors.config import BrokerConfig
from actors.data_protocol import FetchPartition, FetchResponseData
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)

FIRST_BACKOFF_MS = 10
PARTITION_BACKOFF_MS = 40
EPOCH_VERSION, LIST_OFFSETS_VERSION = 4, 6  # Kafka 2.8's, as its fetcher sends them (Fetch: wire.FETCH_VERSION)
RESPONSE_MAX_BYTES = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
EARLIEST_TIMESTAMP = -2


@dataclass
class FetchState:
    partition: Partition
    epoch: int  # the leader epoch it follows in
    truncated: bool  # False: ask the leader where to truncate first
    added: int = 0  # the fetcher's count of adds when this was added: answers to earlier fetches are not its own
    failures: int = 0
    delayed_until: float = 0.0  # monotonic


class ReplicaFetcher:
    """Fetches the partitions led by one source broker."""

    def __init__(self, broker_id: int, source_id: int, address: Callable[[], tuple[str, int] | None],
                 config: BrokerConfig, on_storage_error: Callable[[TopicPartition, Partition, OSError], None] | None = None,
                 broker_epoch: Callable[[], int] = lambda: -1):
        self.broker_id, self.source_id, self.address, self.config = broker_id, source_id, address, config
        self.broker_epoch = broker_epoch  # this broker's registration, which each fetch names (KIP-903)
        self.on_storage_error = on_storage_error  # this broker's disk failed a partition (KIP-112)
        self.partitions: dict[TopicPartition, FetchState] = {}
        self._wanted: dict[TopicPartition, FetchPartition] = {}  # what the next fetch asks, of ready partitions
        self._changed: set[TopicPartition] = set()  # partitions whose entry may have changed since the last fetch
        self._delayed: set[TopicPartition] = set()  # backing off
        self.session = FetchSessionHandler()
        self._client: NetworkClient | None = None
        self._wake = asyncio.Event()
        self._failures = 0  # consecutive rounds that lost the connection
        self._stopped = False
        self._polling = False  # a long-polling fetch is in flight
        self._interrupted = False  # ... and add() dropped its connection so as not to wait for it
        self._added_since_interrupt = False
        self._adds = 0
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"ReplicaFetcher-{broker_id}-{source_id}")

    def add(self, tp: TopicPartition, partition: Partition, interrupt: bool = True) -> None:
        """With an epoch it truncates within the fetch; without, it asks first. `interrupt`: the long-polling
        fetch in flight is not waited for, now (else at `interrupt_for_added`)."""
        self._adds += 1
        self.partitions[tp] = FetchState(partition, partition.state.leader_epoch,
                                         partition.log.leader_epochs.latest_epoch >= 0, added=self._adds)
        self._delayed.discard(tp)
        self._refresh(tp)
        self._wake.set()
        self._added_since_interrupt = True
        if interrupt:
            self.interrupt_for_added()

    def interrupt_for_added(self) -> None:
        """Partitions were added: drop the long-polling fetch in flight, so that the next fetch asks for them
        at once. Its session goes with it (the leader may have answered it), and the next fetch is a full
        one: a LeaderAndIsr applied in steps interrupts once at its end, not at each step (75,000 new
        partitions a thousand a step made 75 full fetches of ever more partitions: 130 s a broker)."""
        if self._added_since_interrupt and self._polling:
            self._polling, self._interrupted = False, True
            self._client.close()
        self._added_since_interrupt = False

    def _refresh(self, tp: TopicPartition) -> None:
        """Recompute what the next fetch asks of tp (after an append, a truncation, a new epoch, a backoff
        or its end): only such partitions are compared with the session, not every one followed."""
        state = self.partitions.get(tp)
        self._changed.add(tp)
        if state is None or not state.truncated or tp in self._delayed:
            self._wanted.pop(tp, None)
            return
        log = state.partition.log
        self._wanted[tp] = FetchPartition(tp.topic, tp.partition, log.log_end_offset, state.epoch,
                                          self.config.replica_fetch_max_bytes, log.leader_epochs.latest_epoch,
                                          log.log_start_offset)

    def update_epoch(self, tp: TopicPartition, partition: Partition) -> bool:
        """Carry on fetching tp in the partition's next leader epoch; False if tp is not here, or epochs were
        missed (the leader may have followed someone else meanwhile and truncated: truncate again)."""
        state = self.partitions.get(tp)
        if state is None or state.partition is not partition or partition.state.leader_epoch != state.epoch + 1:
            return False
        state.epoch, state.failures, state.delayed_until = partition.state.leader_epoch, 0, 0.0
        self._delayed.discard(tp)
        self._refresh(tp)
        self._wake.set()  # a fetch fenced by the leader's newer epoch need not wait out its backoff
        return True

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)
        self._delayed.discard(tp)
        self._refresh(tp)

    async def stop(self) -> None:
        """End the task. Also by flag: Python 3.11's wait_for swallows a cancellation that arrives as
        the awaited fetch fails (the leader closing too), and the loop would go on for good."""
        self._stopped = True
        self._wake.set()
        self._task.cancel()
        if self._client is not None:
            self._client.close()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass

    async def _run(self) -> None:
        while not self._stopped:
            self._wake.clear()  # this round sees every change made before it: only later ones wake a wait
            now = time.monotonic()
            for tp in [tp for tp in self._delayed if self.partitions[tp].delayed_until <= now]:
                self._delayed.discard(tp)  # its backoff is over
                self._refresh(tp)
            pending = {tp: self.partitions[tp] for tp in self.partitions.keys() - self._wanted.keys() - self._delayed
                       if not self.partitions[tp].truncated} if len(self._wanted) + len(self._delayed) < len(self.partitions) \
                else {}  # every ready partition that has not truncated yet (none, usually: no per-partition pass)
            if not pending and not self._wanted:
                delays = [self.partitions[tp].delayed_until - now for tp in self._delayed]
                await self._sleep(min(delays) if delays else 1.0)
                continue
            try:
                if self._client is None:
                    self._client = await self._connect()
                if pending:
                    await self._truncate(pending)
                if self._wanted:  # no long poll while some wait to truncate
                    await self._fetch(long_poll=not pending)
                self._failures = 0
            except (ConnectionError, OSError, asyncio.TimeoutError) as e:  # the leader is gone or restarting
                if self._interrupted:  # our own doing (add): fetch again at once
                    self._interrupted = False
                    self._disconnect()
                    continue
                self._lost(e)
                await self._sleep(min(self.config.replica_fetch_backoff_ms,
                                      FIRST_BACKOFF_MS * 2 ** (self._failures - 1)) / 1000)

    async def _sleep(self, seconds: float) -> None:
        """Until the time passes or partitions come or change epoch."""
        try:
            await asyncio.wait_for(self._wake.wait(), max(0.0, seconds))
        except asyncio.TimeoutError:
            pass

    async def _connect(self) -> NetworkClient:
        address = self.address()
        if address is None:
            raise ConnectionError(f"no address known for broker {self.source_id}")
        client = NetworkClient()
        await asyncio.wait_for(client.connect(*address, client_id=f"broker-{self.broker_id}-fetcher-0"), 5)
        return client

    def _disconnect(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = None
        self.session.reset()

    def _lost(self, error: Exception) -> None:
        self._failures += 1
        self._disconnect()
        log.warning("[ReplicaFetcher replicaId=%d, leaderId=%d] Error fetching: %s: %s", self.broker_id,
                    self.source_id, type(error).__name__, error)

    def _storage_error(self, tp: TopicPartition, state: FetchState, error: OSError) -> None:
        """An I/O error on this broker's own log of tp (not the leader's connection): the partition leaves
        this fetcher (Kafka's markPartitionFailed) and the error goes to the log dir failure channel."""
        log.error("[ReplicaFetcher replicaId=%d, leaderId=%d] Error while processing data for partition %s: "
                  "%s: %s", self.broker_id, self.source_id, tp, type(error).__name__, error)
        self.remove(tp)
        if self.on_storage_error is None:
            raise error
        self.on_storage_error(tp, state.partition, error)

    def _partition_error(self, tp: TopicPartition, state: FetchState, error: Exception) -> None:
        """Processing one partition's answer failed (Kafka's processFetchRequest): invalid records
        (CorruptRecordException, InvalidRecordException) are fetched again after the backoff, as Kafka's
        partitionsWithError; anything else leaves the fetcher (Kafka's markPartitionFailed) until a
        LeaderAndIsr gives it again. Either way the fetcher lives on for its other partitions."""
        if isinstance(error, (CorruptRecordException, InvalidRecordException)):
            log.error("[ReplicaFetcher replicaId=%d, leaderId=%d] Found invalid messages during fetch for partition "
                      "%s: %s", self.broker_id, self.source_id, tp, error)
            self._delay(tp, state)
            self.session.reset()  # the leader's session took them as delivered: a full fetch asks for them again
        else:
            log.exception("[ReplicaFetcher replicaId=%d, leaderId=%d] Unexpected error occurred while processing data "
                          "for partition %s", self.broker_id, self.source_id, tp)
            self.remove(tp)

    def _delay(self, tp: TopicPartition, state: FetchState) -> None:
        """Back off this partition alone; it leaves the session meanwhile, as in Kafka."""
        state.failures += 1
        state.delayed_until = time.monotonic() + min(PARTITION_BACKOFF_MS, self.config.replica_fetch_backoff_ms,
                                                     FIRST_BACKOFF_MS * 2 ** (state.failures - 1)) / 1000
        self._delayed.add(tp)
        self._refresh(tp)

    async def _truncate(self, pending: dict[TopicPartition, FetchState]) -> None:
        """Truncate the new partitions where the leader says (OffsetForLeaderEpoch)."""
        R = OffsetForLeaderEpochRequest
        by_topic: dict[str, list] = {}
        for tp, s in pending.items():
            by_topic.setdefault(tp.topic, []).append(R.OffsetForLeaderTopic.OffsetForLeaderPartition(
                partition=tp.partition, current_leader_epoch=s.epoch,
                leader_epoch=s.partition.log.leader_epochs.latest_epoch))
        response = await self._client.send(R(replica_id=self.broker_id, topics=[
            R.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in by_topic.items()]), EPOCH_VERSION)
        for t in response.topics:
            for answer in t.partitions:
                tp = TopicPartition(t.topic, answer.partition)
                state = pending.get(tp)
                if state is None or self.partitions.get(tp) is not state:
                    continue
                try:
                    if answer.error_code != Errors.NONE:
                        self._delay(tp, state)  # not the leader (yet): asked again after the backoff
                    elif _truncate_where_agreed(state.partition, state.epoch,
                                                (answer.leader_epoch, answer.end_offset)):
                        state.truncated, state.failures = True, 0
                        self._refresh(tp)
                except OSError as e:
                    self._storage_error(tp, state, e)
                except Exception as e:
                    self._partition_error(tp, state, e)

    async def _fetch(self, long_poll: bool) -> None:
        sent_after = self._adds  # a partition added since is not the one asked for (a count, not a copy per fetch)
        session_id, session_epoch, to_send, forgotten = self.session.build(self._wanted, self._changed)
        self._changed = set()  # a failed fetch resets the session: the next one is full
        frame = functools.partial(wire.fetch_request, client_id=self._client.client_id, replica_id=self.broker_id,
                                  max_wait_ms=self.config.replica_fetch_wait_max_ms if long_poll else 0,
                                  min_bytes=1, max_bytes=RESPONSE_MAX_BYTES, session_id=session_id,
                                  session_epoch=session_epoch, partitions=to_send, forgotten=forgotten,
                                  replica_epoch=self.broker_epoch())
        self._polling = long_poll
        try:
            response = await self._client.send_frame(frame, _read_fetch_response,
                                                     self.config.replica_fetch_wait_max_ms / 1000 + 30)
        finally:
            self._polling = False
        if not self.session.handle_response(response.error_code, response.session_id):
            log.info("[ReplicaFetcher replicaId=%d, leaderId=%d] %s: opening a new fetch session", self.broker_id,
                     self.source_id, Errors(response.error_code).name)
            return  # the next round sends a full fetch at once
        out_of_range = []
        for f in response.partitions:
            tp = TopicPartition(f.topic, f.partition)
            state = self.partitions.get(tp)
            if state is None or state.added > sent_after or state.partition.state.leader_epoch != state.epoch:
                continue  # the leadership moved while the fetch was in flight
            try:
                if f.error_code == Errors.NONE and f.diverging_epoch is not None and f.diverging_epoch[1] >= 0:
                    _truncate_where_agreed(state.partition, state.epoch, f.diverging_epoch)
                    self._refresh(tp)
                    continue
                if f.error_code == Errors.NONE:
                    state.partition.append_as_follower(f.records, f.high_watermark, f.log_start_offset, state.epoch)
                    state.failures = 0
                    if f.records:
                        self._refresh(tp)
                    continue
            except OSError as e:  # this broker's disk, not the connection
                self._storage_error(tp, state, e)
                continue
            except Exception as e:  # this partition's data, not the connection: the others go on
                self._partition_error(tp, state, e)
                continue
            if f.error_code == Errors.OFFSET_OUT_OF_RANGE:
                out_of_range.append((tp, state))
            else:
                self._delay(tp, state)
                log.debug("[ReplicaFetcher replicaId=%d, leaderId=%d] %s for %s", self.broker_id,
                          self.source_id, Errors(f.error_code).name, tp)
        if out_of_range:
            await self._handle_out_of_range(out_of_range)

    async def _handle_out_of_range(self, partitions: list[tuple[TopicPartition, FetchState]]) -> None:
        """Kafka's handleOutOfRangeError: below the leader's log start (retention moved it) start again
        there; otherwise the logs diverged: ask where to truncate."""
        R = ListOffsetsRequest
        by_topic: dict[str, list] = {}
        for tp, s in partitions:
            by_topic.setdefault(tp.topic, []).append(R.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=tp.partition, current_leader_epoch=s.epoch, timestamp=EARLIEST_TIMESTAMP))
        response = await self._client.send(R(replica_id=self.broker_id, isolation_level=0, topics=[
            R.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()]), LIST_OFFSETS_VERSION)
        states = dict(partitions)
        for t in response.topics:
            for answer in t.partitions:
                tp = TopicPartition(t.name, answer.partition_index)
                state = states.get(tp)
                if state is None:
                    continue
                if answer.error_code != Errors.NONE:
                    self._delay(tp, state)
                    continue
                try:
                    if answer.offset > state.partition.log.log_end_offset:
                        state.partition.truncate_fully_and_start_at(answer.offset, state.epoch)
                    else:
                        state.truncated = False
                except OSError as e:
                    self._storage_error(tp, state, e)
                    continue
                self._refresh(tp)


def _truncate_where_agreed(partition: Partition, epoch: int, leader_answer: tuple[int, int]) -> bool:
    """Truncate where the leader's answer ((epoch, end offset) of the follower's latest epoch, from
    OffsetForLeaderEpoch or a fetch's diverging epoch) and this log last agree; False if the
    partition no longer follows in `epoch`."""
    own = partition.log.leader_epochs.end_offset_for(leader_answer[0], partition.log.log_end_offset)[1]
    return partition.truncate_to(truncation_offset(partition.log.log_end_offset, partition.high_watermark,
                                                   leader_answer, own), epoch)


class ReplicaFetcherManager:
    """Fetchers by source broker, created when a partition first follows there; runs on the loop."""

    def __init__(self, broker_id: int, config: BrokerConfig,
                 route: Callable[[int, tuple[str, int]], tuple[str, int]] | None = None,
                 on_storage_error: Callable[[TopicPartition, Partition, OSError], None] | None = None,
                 broker_epoch: Callable[[], int] = lambda: -1):
        """`route(leader, listener)`: the address to connect to instead (the link to that leader, when
        links can be faulted); `on_storage_error(tp, partition, error)`: an I/O error on this broker's log
        of tp (the log dir failure channel's); `broker_epoch()`: this broker's current registration."""
        self.broker_id, self.config, self.route = broker_id, config, route
        self.on_storage_error = on_storage_error
        self.broker_epoch = broker_epoch
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.assigned: dict[TopicPartition, int] = {}  # partition -> the broker it fetches from
        self.addresses: dict[int, tuple[str, int]] = {}  # leader -> its listener, from LeaderAndIsr's live leaders

    def follow(self, tp: TopicPartition, partition: Partition, leader_id: int, interrupt: bool = True) -> None:
        """Fetch tp from leader_id. A new leader epoch of the same leader (an ISR change the controller
        made) is taken over in place: the leader's log went on, there is nothing to truncate. Without
        `interrupt`, a fetch in flight to that leader is waited for until `interrupt_for_added`."""
        if self.assigned.get(tp) == leader_id and self.fetchers[leader_id].update_epoch(tp, partition):
            return
        self.unfollow(tp)
        if leader_id not in self.fetchers:
            self.fetchers[leader_id] = ReplicaFetcher(self.broker_id, leader_id, lambda: self._address(leader_id),
                                                      self.config, self.on_storage_error, self.broker_epoch)
        self.fetchers[leader_id].add(tp, partition, interrupt)
        self.assigned[tp] = leader_id

    def interrupt_for_added(self) -> None:
        """Every fetcher given partitions since its last interrupt stops waiting for its fetch in flight."""
        for fetcher in self.fetchers.values():
            fetcher.interrupt_for_added()

    def _address(self, leader_id: int) -> tuple[str, int] | None:
        address = self.addresses.get(leader_id)
        return self.route(leader_id, address) if address is not None and self.route is not None else address

    def unfollow(self, tp: TopicPartition) -> None:
        source = self.assigned.pop(tp, None)
        if source is not None:
            self.fetchers[source].remove(tp)

    async def shutdown(self) -> None:
        await asyncio.gather(*(fetcher.stop() for fetcher in self.fetchers.values()))


def _read_fetch_response(frame: bytes) -> tuple[int, FetchResponseData]:
    response = wire.read_fetch_response(frame)
    return response.correlation_id, response
