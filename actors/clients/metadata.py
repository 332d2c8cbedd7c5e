"""Client-side metadata: partition leaders as the brokers' caches have them (Kafka clients ask a
broker for a MetadataResponse, which comes from its UpdateMetadata cache).

A refresh asks every known broker at once and keeps, per partition, the answer with the
newest leader epoch (clients ignore older metadata, KIP-320): a broker whose cache lags, or
one that is dead or restarting and never answers, does not hold the client back.
"""
from __future__ import annotations

import time

import ray

from actors.controller.channel import broker_actor_name
from coordination.errors import KrayError
from coordination.zkdata import TopicPartition

STRAGGLER_WAIT_S = 0.05  # after the first answer, how long the others may take
REFRESH_TIMEOUT_S = 10.0


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
        """Ask every known broker; merge what answers within STRAGGLER_WAIT_S of the first answer."""
        calls, errors = {}, []
        for broker_id in self.bootstrap:
            try:
                calls[self.broker(broker_id).metadata.remote()] = broker_id
            except Exception as e:  # no such actor (any more)
                errors.append(f"{broker_id}: {type(e).__name__}")
        deadline = time.monotonic() + REFRESH_TIMEOUT_S
        answers: list[dict] = []
        pending = list(calls)
        while pending and not answers and time.monotonic() < deadline:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if ready and pending:  # the first answer is in: the others get a moment
                more, pending = ray.wait(pending, num_returns=len(pending), timeout=STRAGGLER_WAIT_S)
                ready += more
            for ref in ready:
                try:
                    answers.append(ray.get(ref))
                except Exception as e:  # that broker died: the others answer
                    self._handles.pop(calls[ref], None)
                    errors.append(f"{calls[ref]}: {type(e).__name__}")
        if not answers:
            raise KrayError(f"no bootstrap broker answered ({', '.join(errors) or 'timed out'})")
        merged = dict(self.leaders)
        for cache in answers:
            for tp, (leader, epoch, _) in cache["partitions"].items():
                if tp not in merged or epoch >= merged[tp][1]:
                    merged[tp] = (leader, epoch)
        live = {b for cache in answers for b in cache["brokers"]}
        self.leaders = {tp: v for tp, v in merged.items() if any(tp in c["partitions"] for c in answers)}
        self.bootstrap = sorted(set(self.bootstrap) | live)

    def partitions_for(self, topic: str) -> list[int]:
        return sorted(tp.partition for tp in self.leaders if tp.topic == topic)

    def leader(self, tp: TopicPartition) -> int:
        return self.leaders.get(tp, (-1, -1))[0]

    def forget(self, broker_id: int) -> None:
        self._handles.pop(broker_id, None)
