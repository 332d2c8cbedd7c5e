"""The broker's metadata cache, filled only by UpdateMetadata (as Kafka's ZkMetadataCache). No I/O."""
from __future__ import annotations

from actors.protocol import LEADER_DURING_DELETE, LiveBroker, PartitionState, UpdateMetadataRequest
from coordination.zkdata import TopicPartition


class MetadataCache:
    def __init__(self):
        self.controller_id: int | None = None
        self.controller_epoch = 0  # of the last UpdateMetadata applied
        self.alive_brokers: dict[int, LiveBroker] = {}
        self.partitions: dict[TopicPartition, PartitionState] = {}

    def update(self, request: UpdateMetadataRequest) -> list[TopicPartition]:
        """Apply an UpdateMetadata; returns the partitions it deleted."""
        self.controller_id = request.controller_id
        self.controller_epoch = request.controller_epoch
        self.alive_brokers = {b.id: b for b in request.live_brokers}
        deleted = []
        for st in request.partition_states:
            tp = TopicPartition(st.topic, st.partition)
            if st.leader == LEADER_DURING_DELETE:
                self.partitions.pop(tp, None)
                deleted.append(tp)
            else:
                self.partitions[tp] = st
        return deleted

    def leader_and_isr(self) -> dict[TopicPartition, tuple[int, int, list[int]]]:
        """(leader, leader_epoch, isr) per partition: what tests compare against ZooKeeper."""
        return {tp: (st.leader, st.leader_epoch, list(st.isr)) for tp, st in self.partitions.items()}
