"""The broker's metadata cache, filled only by UpdateMetadata (as Kafka's ZkMetadataCache). No I/O.

Each update builds a new immutable snapshot and swaps it in, so that readers (clients asking
for metadata) never wait for the broker's controller requests and never see half an update.
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from actors.protocol import LEADER_DURING_DELETE, LiveBroker, PartitionState, UpdateMetadataRequest
from coordination.zkdata import TopicPartition


class Snapshot(NamedTuple):
    controller_id: int | None = None
    controller_epoch: int = 0  # of the last UpdateMetadata applied
    alive_brokers: dict[int, LiveBroker] = {}
    partitions: dict[TopicPartition, PartitionState] = {}


class MetadataCache:
    def __init__(self):
        self.snapshot = Snapshot()
        self._partition_counts: Counter[str] = Counter()  # per topic, of the snapshot

    @property
    def controller_id(self) -> int | None:
        return self.snapshot.controller_id

    @property
    def controller_epoch(self) -> int:
        return self.snapshot.controller_epoch

    @property
    def alive_brokers(self) -> dict[int, LiveBroker]:
        return self.snapshot.alive_brokers

    @property
    def partitions(self) -> dict[TopicPartition, PartitionState]:
        return self.snapshot.partitions

    def alive_broker_epoch(self, broker_id: int) -> int | None:
        """The epoch of the live broker's registration (which incarnation of it is alive), None if dead."""
        broker = self.snapshot.alive_brokers.get(broker_id)
        return None if broker is None else broker.epoch

    def incarnations_since(self, before: Snapshot) -> dict[int, int]:
        """Brokers alive in `before` that died since (-1) or registered again (their new epoch)."""
        alive = self.snapshot.alive_brokers
        return {b: alive[b].epoch if b in alive else -1 for b, broker in before.alive_brokers.items()
                if b not in alive or alive[b].epoch != broker.epoch}

    def update(self, request: UpdateMetadataRequest) -> list[TopicPartition]:
        """Apply an UpdateMetadata; returns the partitions it deleted."""
        partitions = dict(self.snapshot.partitions)
        counts = self._partition_counts.copy()  # kept as partitions come and go, not counted again
        deleted = []
        for st in request.partition_states:
            tp = TopicPartition(st.topic, st.partition)
            if st.leader == LEADER_DURING_DELETE:
                if partitions.pop(tp, None) is not None:
                    counts[tp.topic] -= 1
                deleted.append(tp)
            else:
                if tp not in partitions:
                    counts[tp.topic] += 1
                partitions[tp] = st
        self.snapshot = Snapshot(request.controller_id, request.controller_epoch,
                                 {b.id: b for b in request.live_brokers}, partitions)
        self._partition_counts = counts
        return deleted

    def partition_count(self, topic: str) -> int:
        """How many partitions the topic has (0: none known)."""
        return self._partition_counts[topic]

    def leader_and_isr(self, snapshot: Snapshot | None = None) -> dict[TopicPartition, tuple[int, int, list[int]]]:
        """(leader, leader_epoch, isr) per partition, of `snapshot` or the current one: what clients read."""
        return {tp: (st.leader, st.leader_epoch, list(st.isr))
                for tp, st in (snapshot or self.snapshot).partitions.items()}
