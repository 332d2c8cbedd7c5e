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

STRAGGLER_WAIT_S = 0.02  # after the first answer, how long the others may take
REFRESH_TIMEOUT_S = 10.0


class Refresh:
    """A metadata request to every known broker, in flight: done once every broker answered, or
    STRAGGLER_WAIT_S after the first answer, or at REFRESH_TIMEOUT_S. A producer waits on its
    `pending` calls beside its produce calls, so that answers keep coming in while it refreshes."""

    def __init__(self, calls: dict, errors: dict[int, str]):
        self.calls = calls  # ref -> broker id
        self.pending = list(calls)
        self.answers: list[dict] = []
        self.errors = errors  # broker id -> what went wrong: its handle is looked up again next time
        self.first_answer_at: float | None = None
        self.started = time.monotonic()
        self.deadline = self.started + REFRESH_TIMEOUT_S

    def take(self, ready: list) -> list:
        """Keep the answers among `ready`; returns the refs that are not this refresh's."""
        ours = [ref for ref in ready if ref in self.calls]
        for ref in ours:
            self.pending.remove(ref)
            try:
                self.answers.append(ray.get(ref))
                self.first_answer_at = self.first_answer_at or time.monotonic()
            except Exception as e:  # that broker died: the others answer
                self.errors[self.calls[ref]] = type(e).__name__
        return [ref for ref in ready if ref not in self.calls]

    def remaining_s(self) -> float:
        """How long it may still wait."""
        until = self.deadline if self.first_answer_at is None else min(self.deadline,
                                                                       self.first_answer_at + STRAGGLER_WAIT_S)
        return 0.0 if not self.pending else max(0.0, until - time.monotonic())

    @property
    def done(self) -> bool:
        return self.remaining_s() == 0.0


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
        refresh = self.begin_refresh()
        while not refresh.done:
            refresh.take(ray.wait(refresh.pending, num_returns=1, timeout=refresh.remaining_s())[0])
        self.finish_refresh(refresh)

    def begin_refresh(self) -> Refresh:
        calls, errors = {}, {}
        for broker_id in self.bootstrap:
            try:
                calls[self.broker(broker_id).metadata.remote()] = broker_id
            except Exception as e:  # no such actor (any more)
                errors[broker_id] = type(e).__name__
        return Refresh(calls, errors)

    def finish_refresh(self, refresh: Refresh) -> None:
        """Merge the answers: per partition, the newest leader epoch any broker knows."""
        for broker_id in refresh.errors:
            self._handles.pop(broker_id, None)
        if not refresh.answers:
            raise KrayError("no bootstrap broker answered "
                            f"({', '.join(f'{b}: {e}' for b, e in refresh.errors.items()) or 'timed out'})")
        merged = dict(self.leaders)
        for cache in refresh.answers:
            for tp, (leader, epoch, _) in cache["partitions"].items():
                if tp not in merged or epoch >= merged[tp][1]:
                    merged[tp] = (leader, epoch)
        live = {b for cache in refresh.answers for b in cache["brokers"]}
        self.leaders = {tp: v for tp, v in merged.items() if any(tp in c["partitions"] for c in refresh.answers)}
        self.bootstrap = sorted(set(self.bootstrap) | live)

    def partitions_for(self, topic: str) -> list[int]:
        return sorted(tp.partition for tp in self.leaders if tp.topic == topic)

    def leader(self, tp: TopicPartition) -> int:
        return self.leaders.get(tp, (-1, -1))[0]

    def forget(self, broker_id: int) -> None:
        self._handles.pop(broker_id, None)
