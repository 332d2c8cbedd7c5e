"""The groups this broker coordinates and their place in `__consumer_offsets` (Kafka's
GroupMetadataManager): which offsets partitions' groups are here or loading, the load of a partition's
groups and offsets from its log, and every write to that log (a group's metadata, committed offsets,
a deleted group's tombstones), each appended with acks=all. The coordinator (group_coordinator.py)
decides when; this keeps the groups and their records.

It reaches the replica server only through a `GroupLog`, handed to it as the controller's flows are
handed a FlowScope: the broker's replicas of the offsets partitions, how many there are, and the run
directory's account of what the coordinator did. Pure: no Ray, no ZooKeeper.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Callable, Protocol

from actors.broker.group.group_metadata import GroupMetadata
from actors.broker.group.group_records import (
    GROUP_METADATA_TOPIC,
    GroupKey,
    GroupMetadataValue,
    MalformedRecord,
    OffsetAndMetadata,
    OffsetKey,
    group_key,
    group_value,
    offset_key,
    offset_value,
    partition_for,
    read_group_value,
    read_key,
    read_offset_value,
)
from actors.broker.log.batches import build, decode_records
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

if TYPE_CHECKING:  # for the annotation only: actors.config loads kazoo (ClusterConfig's client) and this stays pure
    from actors.config import BrokerConfig

log = logging.getLogger(__name__)

# Kafka's GroupMetadataManager error mappings for a failed append
_STORE_GROUP_ERRORS = {Errors.UNKNOWN_TOPIC_OR_PARTITION: Errors.COORDINATOR_NOT_AVAILABLE,
                       Errors.NOT_ENOUGH_REPLICAS: Errors.COORDINATOR_NOT_AVAILABLE,
                       Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND: Errors.COORDINATOR_NOT_AVAILABLE,
                       Errors.NOT_LEADER_OR_FOLLOWER: Errors.NOT_COORDINATOR,
                       Errors.KAFKA_STORAGE_ERROR: Errors.NOT_COORDINATOR,
                       Errors.REQUEST_TIMED_OUT: Errors.REBALANCE_IN_PROGRESS,
                       Errors.MESSAGE_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
                       Errors.RECORD_LIST_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR}
_STORE_OFFSET_ERRORS = {**_STORE_GROUP_ERRORS, Errors.REQUEST_TIMED_OUT: Errors.REQUEST_TIMED_OUT,
                        Errors.MESSAGE_TOO_LARGE: Errors.INVALID_COMMIT_OFFSET_SIZE,
                        Errors.RECORD_LIST_TOO_LARGE: Errors.INVALID_COMMIT_OFFSET_SIZE}


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupEvents(Protocol):
    """What the run directory hears of the coordinator (the broker's BrokerEvents records it)."""

    def group_loaded(self, tp: TopicPartition, leader_epoch: int, groups: int, took_ms: float) -> None: ...

    def group_stabilized(self, group: str, generation: int, members: int) -> None: ...

    def group_synced(self, group: str, generation: int) -> None: ...


class GroupLog(Protocol):
    """The replica server as the group coordinator reaches it, as Kafka's GroupMetadataManager reaches
    its ReplicaManager: the offsets partitions led here, appended to and read back."""

    events: GroupEvents

    def offsets_partitions(self) -> int:
        """How many partitions __consumer_offsets has."""

    async def append(self, tp: TopicPartition, batch: bytes, timeout_ms: int) -> Errors:
        """The batch appended with acks=all (Kafka's appendForGroup): whether the ISR has it."""

    def read(self, tp: TopicPartition, offset: int) -> tuple[bytes, int]:
        """Whole batches from `offset`, and the log end offset."""


class GroupMetadataManager:
    def __init__(self, broker_id: int, config: BrokerConfig, group_log: GroupLog):
        self.config, self.group_log = config, group_log
        self.groups: dict[str, GroupMetadata] = {}
        self.owned: set[int] = set()  # offsets partitions whose groups are here
        self.loading: set[int] = set()
        self.epochs: dict[int, int] = {}  # offsets partition -> the newest leader epoch seen for it
        self._terms: dict[int, int] = {}  # offsets partition -> leaderships here so far: a load counts for its own
        self.prefix = f"[GroupMetadataManager brokerId={broker_id}]"

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.group_log.offsets_partitions())

    # -- loading and unloading -------------------------------------------------

    def schedule_load(self, partition: int, epoch: int, on_group_loaded: Callable[[GroupMetadata], None]) -> None:
        """Kafka's scheduleLoadGroupAndOffsets: load the groups of offsets partition `partition`, led here at
        leader epoch `epoch`, unless they are here or loading already (a new epoch of the same leadership
        keeps them, as Kafka keeps the groups it has cached); `on_group_loaded` hears of each."""
        if self.epochs.get(partition, -1) > epoch:
            return  # an older LeaderAndIsr than one seen
        self.epochs[partition] = epoch
        if partition in self.owned or partition in self.loading:
            return
        self._terms[partition] = self._terms.get(partition, 0) + 1
        self.loading.add(partition)
        asyncio.get_running_loop().create_task(self._load(partition, self._terms[partition], on_group_loaded))

    def remove_groups_for_partition(self, partition: int, epoch: int | None,
                                    on_group_unloaded: Callable[[GroupMetadata], None]) -> None:
        """Kafka's removeGroupsForPartition: this broker no longer leads `partition` (as of `epoch`, when the
        request gave one): its groups go, each first to `on_group_unloaded`, and a load under way is
        abandoned."""
        if epoch is not None:
            if self.epochs.get(partition, -1) > epoch:
                return
            self.epochs[partition] = epoch
        self._terms[partition] = self._terms.get(partition, 0) + 1
        self.loading.discard(partition)
        self.owned.discard(partition)
        gone = [g for g in self.groups.values() if self.partition_of(g.group_id) == partition]
        for group in gone:
            on_group_unloaded(group)
            self.groups.pop(group.group_id, None)
        if gone:
            log.info("%s Unloaded %d groups of %s-%d", self.prefix, len(gone), GROUP_METADATA_TOPIC, partition)

    async def _load(self, partition: int, term: int, on_group_loaded: Callable[[GroupMetadata], None]) -> None:
        """Kafka's doLoadGroupsAndOffsets: replay the partition's records to its log end, the last record
        of a key winning and a tombstone deleting."""
        started = time.monotonic()
        tp = TopicPartition(GROUP_METADATA_TOPIC, partition)
        offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        metadata: dict[str, GroupMetadataValue | None] = {}
        position, end = 0, None
        try:
            while end is None or position < end:
                data, end = self.group_log.read(tp, position)
                if not data:
                    break
                for record in decode_records(data):
                    position = record.offset + 1
                    try:
                        key = read_key(record.key)
                        if isinstance(key, OffsetKey):
                            group_offsets = offsets.setdefault(key.group, {})
                            ktp = TopicPartition(key.topic, key.partition)
                            if record.value is None:
                                group_offsets.pop(ktp, None)
                            else:
                                group_offsets[ktp] = read_offset_value(record.value)
                        elif isinstance(key, GroupKey):
                            metadata[key.group] = None if record.value is None else read_group_value(record.value)
                    except MalformedRecord as e:
                        log.error("%s Skipping a malformed record at offset %d of %s: %s", self.prefix, record.offset,
                                  tp, e)
                await asyncio.sleep(0)  # other requests run between batches of a long load
        except Exception:
            log.exception("%s Error loading offsets from %s", self.prefix, tp)
            return
        if self._terms.get(partition) != term or partition not in self.loading:
            return  # resigned (perhaps elected again) while loading: that term's load stands
        now = now_ms()
        for group_id in set(offsets) | set(metadata):
            if metadata.get(group_id) is None and not offsets.get(group_id):
                self.groups.pop(group_id, None)  # deleted
                continue
            group = GroupMetadata.loaded(group_id, metadata.get(group_id), offsets.get(group_id, {}), now)
            self.groups[group_id] = group
            on_group_loaded(group)
        self.loading.discard(partition)
        self.owned.add(partition)
        took_ms, groups = (time.monotonic() - started) * 1000, sum(self.partition_of(g) == partition for g in self.groups)
        self.group_log.events.group_loaded(tp, self.epochs.get(partition, -1), groups, took_ms)
        log.info("%s Finished loading offsets and group metadata from %s in %d milliseconds (%d groups)",
                 self.prefix, tp, took_ms, groups)

    # -- the log ---------------------------------------------------------------

    async def store_group(self, group: GroupMetadata) -> Errors:
        """Kafka's storeGroup: the group's metadata appended to its partition; the error the client sees."""
        error = await self._append(group.group_id, [group_key(group.group_id)], [group_value(group.record(now_ms()))])
        return _STORE_GROUP_ERRORS.get(error, error)

    async def store_offsets(self, group: GroupMetadata, offsets: dict[TopicPartition, OffsetAndMetadata]
                            ) -> dict[TopicPartition, Errors]:
        """Kafka's storeOffsets: metadata over offset.metadata.max.bytes refused, the rest appended; they
        count (the group holds them) once the ISR has them."""
        too_large = {tp for tp, o in offsets.items() if len(o.metadata.encode()) > self.config.offset_metadata_max_bytes}
        valid = {tp: o for tp, o in offsets.items() if tp not in too_large}
        errors = {tp: Errors.OFFSET_METADATA_TOO_LARGE for tp in too_large}
        if valid:
            keys = [offset_key(group.group_id, tp.topic, tp.partition) for tp in valid]
            error = await self._append(group.group_id, keys, [offset_value(o) for o in valid.values()])
            error = _STORE_OFFSET_ERRORS.get(error, error)
            if error == Errors.NONE and self.groups.get(group.group_id) is group:
                group.offsets.update(valid)
            errors |= dict.fromkeys(valid, error)
        return {tp: errors[tp] for tp in offsets}

    def get_offsets(self, group_id: str, partitions: list[TopicPartition] | None
                    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """Kafka's getOffsets: the group's committed offsets, all of them when `partitions` is None."""
        group = self.groups.get(group_id)
        known = {} if group is None else group.offsets
        if partitions is None:
            return dict(known)
        return {tp: known.get(tp) for tp in partitions}

    async def cleanup_group_metadata(self, deleted: list[GroupMetadata]) -> None:
        """Kafka's cleanupGroupMetadata: each deleted group's offsets and metadata get tombstones. As in Kafka,
        a tombstone that fails is logged, not answered: the group is deleted here, and another coordinator
        loading the partition may bring it back."""
        if deleted:
            log.info("%s The following groups were deleted: %s. A total of %d offsets were removed.", self.prefix,
                     ", ".join(g.group_id for g in deleted), sum(len(g.offsets) for g in deleted))
        for group in deleted:
            keys = [offset_key(group.group_id, tp.topic, tp.partition) for tp in group.offsets]
            error = await self._append(group.group_id, keys + [group_key(group.group_id)], [None] * (len(keys) + 1))
            if error != Errors.NONE:
                log.error("%s Failed to append %d tombstones to %s-%d for the deleted group %s: %s", self.prefix,
                          len(keys) + 1, GROUP_METADATA_TOPIC, self.partition_of(group.group_id), group.group_id,
                          error.name)

    async def _append(self, group_id: str, keys: list[bytes], values: list[bytes | None]) -> Errors:
        tp = TopicPartition(GROUP_METADATA_TOPIC, self.partition_of(group_id))
        return await self.group_log.append(tp, build(values, keys, timestamp_ms=now_ms()),
                                           self.config.offsets_commit_timeout_ms)
