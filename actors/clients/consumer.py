"""A consumer of assigned partitions (Kafka's KafkaConsumer with assign()): reads from each
partition's leader up to its high watermark, tracks positions, follows leader changes."""
from __future__ import annotations

import time

import ray

from actors.broker.records import Record
from actors.clients.metadata import ClusterMetadata
from actors.data_protocol import CONSUMER_REPLICA_ID, FetchPartition, FetchPartitions, FetchRequest
from coordination.errors import Errors, KrayError
from coordination.zkdata import TopicPartition

REFRESH_ON = {Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH, Errors.UNKNOWN_TOPIC_OR_PARTITION,
              Errors.LEADER_NOT_AVAILABLE}


class Consumer:
    def __init__(self, namespace: str, bootstrap: list[int], max_wait_ms: int = 500,
                 max_partition_bytes: int = 1024 * 1024):
        self.metadata = ClusterMetadata(namespace, bootstrap)
        self.max_wait_ms, self.max_partition_bytes = max_wait_ms, max_partition_bytes
        self.positions: dict[TopicPartition, int] = {}

    def assign(self, partitions: list[TopicPartition], offset: int = 0) -> None:
        self.positions = {tp: offset for tp in partitions}
        self.metadata.refresh()

    def poll(self) -> list[tuple[TopicPartition, Record]]:
        """One fetch per leader (long-polling up to max_wait_ms); records in offset order per partition."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in self.positions:
            by_leader.setdefault(self.metadata.leader(tp), []).append(tp)
        calls = []
        for leader, tps in by_leader.items():
            if leader < 0:
                continue
            request = FetchRequest(replica_id=CONSUMER_REPLICA_ID, max_wait_ms=self.max_wait_ms, partitions=FetchPartitions(
                FetchPartition(tp.topic, tp.partition, self.positions[tp], -1, self.max_partition_bytes) for tp in tps))
            try:
                calls.append((leader, self.metadata.broker(leader).fetch.remote(request)))
            except Exception:
                self.metadata.forget(leader)
        out, refresh = [], len(calls) < len(by_leader)
        for leader, ref in calls:
            try:
                response = ray.get(ref, timeout=self.max_wait_ms / 1000 + 30)
            except Exception:  # the leader died: the metadata will name another
                self.metadata.forget(leader)
                refresh = True
                continue
            for fetched in response.partitions:
                tp = TopicPartition(fetched.topic, fetched.partition)
                if fetched.error_code == Errors.NONE:
                    out += [(tp, r) for r in fetched.records]
                    if fetched.records:
                        self.positions[tp] = fetched.records[-1].offset + 1
                elif Errors(fetched.error_code) in REFRESH_ON:
                    refresh = True
                else:
                    raise KrayError(f"{tp} at offset {self.positions[tp]}: {Errors(fetched.error_code).name}")
        if refresh:
            time.sleep(0.05)
            self.metadata.refresh()
        return out
