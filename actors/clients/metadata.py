"""Client-side metadata: partition leaders as any broker's cache has them (Kafka clients ask
any bootstrap broker for a MetadataResponse, which comes from its UpdateMetadata cache)."""
from __future__ import annotations

import random

import ray

from actors.controller.channel import broker_actor_name
from coordination.errors import KrayError
from coordination.zkdata import TopicPartition


class ClusterMetadata:
    def __init__(self, namespace: str, bootstrap: list[int]):
        self.namespace = namespace
        self.bootstrap = list(bootstrap)
        self.leaders: dict[TopicPartition, tuple[int, int]] = {}  # partition -> (leader, leader epoch)
        self._handles: dict[int, object] = {}

    def broker(self, broker_id: int):
        if broker_id not in self._handles:
            self._handles[broker_id] = ray.get_actor(broker_actor_name(broker_id), namespace=self.namespace)
        return self._handles[broker_id]

    def refresh(self) -> None:
        """Ask the bootstrap brokers in random order until one answers."""
        errors = []
        for broker_id in random.sample(self.bootstrap, len(self.bootstrap)):
            try:
                cache = ray.get(self.broker(broker_id).metadata.remote(), timeout=10)
            except Exception as e:  # that broker is down: try the next one
                self._handles.pop(broker_id, None)
                errors.append(f"{broker_id}: {type(e).__name__}")
                continue
            self.leaders = {tp: (leader, epoch) for tp, (leader, epoch, _) in cache["partitions"].items()}
            self.bootstrap = sorted(set(self.bootstrap) | set(cache["brokers"]))
            return
        raise KrayError(f"no bootstrap broker answered ({', '.join(errors)})")

    def partitions_for(self, topic: str) -> list[int]:
        return sorted(tp.partition for tp in self.leaders if tp.topic == topic)

    def leader(self, tp: TopicPartition) -> int:
        return self.leaders.get(tp, (-1, -1))[0]

    def forget(self, broker_id: int) -> None:
        self._handles.pop(broker_id, None)
