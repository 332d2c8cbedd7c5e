"""The requests that wait, on the broker's event loop, for their partitions to change (Kafka's
DelayedProduce and DelayedFetch, in its produce and fetch purgatories): a produce with acks=all for
the ISR to have its batches, a fetch with nothing to answer yet for records to arrive. Waiting costs
no thread: each is a future that the partitions' changes or its timeout complete. The request's local
work ends as it starts waiting (its RemoteTimeMs begins).
"""
from __future__ import annotations

import asyncio

from actors.broker.request_metrics import mark_waiting
from actors.broker.partition import Partition
from coordination.errors import Errors
from coordination.zkdata import TopicPartition


class DelayedProduce:
    """An acks=all produce waiting for the high watermarks of the partitions it appended to; done
    when all have answered or its timeout ends (the rest then get REQUEST_TIMED_OUT)."""

    def __init__(self, waits: list[tuple[TopicPartition, Partition, int, int]], timeout_s: float):
        mark_waiting()
        loop = asyncio.get_running_loop()
        self.future = loop.create_future()
        self.errors: dict[TopicPartition, Errors] = {}
        self._pending = {tp: partition for tp, partition, _, _ in waits}
        self._callbacks = {}
        self._timer = loop.call_later(timeout_s, self._expire)
        for tp, partition, last_offset, term in waits:
            self._callbacks[tp] = callback = lambda error, tp=tp: self._answered(tp, error)
            partition.await_high_watermark(last_offset, term, callback)

    def _answered(self, tp: TopicPartition, error: Errors) -> None:
        if self._pending.pop(tp, None) is not None:
            self.errors[tp] = error
            if not self._pending:
                self._finish()

    def _expire(self) -> None:
        for tp, partition in self._pending.items():
            partition.forget_waiter(self._callbacks[tp])
            self.errors[tp] = Errors.REQUEST_TIMED_OUT
        self._pending.clear()
        self._finish()

    def _finish(self) -> None:
        """Answered: the timer and the callbacks go, which would otherwise tie this object to itself in a
        cycle (callbacks and timer both hold it), left for the garbage collector: at thousands of acks=all
        produces a second its passes paused the broker's loop 20-250 ms (bench_capacity)."""
        self._timer.cancel()
        self._timer, self._callbacks = None, {}
        if not self.future.done():
            self.future.set_result(self.errors)


class DelayedFetch:
    """A fetch with nothing to answer yet, woken by a change to any of its partitions (`keys`); a
    follower's not by a moved high watermark alone (it hears of it with its next fetch, as in Kafka)."""

    def __init__(self, keys, follower: bool):
        self.keys, self.follower = keys, follower
        self.future = asyncio.get_running_loop().create_future()

    def wake(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    async def wait(self, timeout_s: float) -> None:
        mark_waiting()
        timer = asyncio.get_running_loop().call_later(timeout_s, self.wake)
        try:
            await self.future
        finally:
            timer.cancel()
