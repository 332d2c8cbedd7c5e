"""Parallel partition-state reads for controller failover.

Loading the context means reading every partition's state znode; one kazoo
session pipelines those reads at a few thousand per second, bound by Python on
one core. Spare sessions in other processes (ZkReader actors, created with the
candidate and idle until it wins) each read a share, so the reads use every core.
"""
from __future__ import annotations

import ray

from coordination.zkclient import KrayZkClient, PartitionStateRecord, decode_partition_states
from coordination.zkdata import TopicPartition

PARALLEL_READ_MIN = 2000  # below this, one session is faster than the fan-out


@ray.remote(num_cpus=0)
class ZkReader:
    """A spare ZooKeeper session in its own process."""

    def __init__(self, connect: str, session_timeout_ms: int):
        self.zk = KrayZkClient(connect, session_timeout_ms).start()

    def read(self, partitions: list[TopicPartition]) -> list[tuple[bytes, int] | None]:
        self.zk.kazoo.sync("/")  # see at least what the controller's session has seen
        return self.zk.get_partition_states_raw(partitions)


class ParallelStateReader:
    """Reads a share locally and hands the other shares to the readers, all at once."""

    def __init__(self, zk: KrayZkClient, readers: list):
        self.zk = zk
        self.readers = readers

    def __call__(self, partitions) -> dict[TopicPartition, PartitionStateRecord]:
        partitions = list(partitions)
        if not self.readers or len(partitions) < PARALLEL_READ_MIN:
            return self.zk.get_partition_states(partitions)
        n = len(self.readers) + 1
        size = -(-len(partitions) // n)
        shards = [partitions[i:i + size] for i in range(0, len(partitions), size)]
        refs = [reader.read.remote(shard) for reader, shard in zip(self.readers, shards[1:])]
        out = self.zk.get_partition_states(shards[0])
        for shard, raw in zip(shards[1:], ray.get(refs)):
            out.update(decode_partition_states(shard, raw))
        return out
