"""Kafka's request metrics (kafka.network:type=RequestMetrics,name=<timer>,request=<request>), kept as
plain Python aggregates on the broker's event loop: per request name and timer a count, a sum and
fixed-bucket histogram counts. A request pays a few `time.monotonic()` calls and this arithmetic; the
export to Prometheus (broker/metrics.py) reads snapshots once a second, and quantiles come from the
buckets (so they are as fine as the buckets: a quarter of an octave).

The timers are Kafka's (RequestChannel.Request.updateRequestMetrics): queue, received until a handler
starts it; local, the handler's own work until it first waits (`mark_waiting`, from purgatory) or
completes; remote, the wait (an acks=all produce for the ISR, a long-polling fetch) until the response
is complete; response queue, complete until the network thread writes it; send, the write; total,
all of them.
"""
from __future__ import annotations

import contextvars
import math
import time
from bisect import bisect_left

TIMERS = ("TotalTimeMs", "RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseQueueTimeMs",
          "ResponseSendTimeMs")
_LOWEST_MS, _PER_OCTAVE, _OCTAVES = 0.001, 4, 27  # 1 µs to ~134 s
BOUNDS_MS: tuple[float, ...] = tuple(_LOWEST_MS * 2 ** (i / _PER_OCTAVE) for i in range(_PER_OCTAVE * _OCTAVES + 1))
# bucket i holds values in (BOUNDS_MS[i-1], BOUNDS_MS[i]]; bucket 0 everything up to 1 µs (a wait of none)

Snapshot = dict[str, dict]  # request name -> {"count": n, "sum": [per timer], "buckets": [[per bucket] per timer]}


class RequestTiming:
    """One request's way through the broker (time.monotonic() seconds); `local_complete` stays None
    for a request that never waits."""
    __slots__ = ("name", "received", "started", "local_complete", "complete")

    def __init__(self, name: str, received: float):
        self.name, self.received = name, received
        self.started = self.local_complete = self.complete = None


CURRENT: contextvars.ContextVar[RequestTiming | None] = contextvars.ContextVar("kray_request_timing", default=None)


def mark_waiting() -> None:
    """The current request's local work ends here: it waits in purgatory (Kafka's apiLocalCompleteTime).
    Each request's Task runs in a copy of the context its handler coroutine set CURRENT in."""
    timing = CURRENT.get()
    if timing is not None and timing.local_complete is None:
        timing.local_complete = time.monotonic()


class _Stats:
    __slots__ = ("count", "sums", "buckets")

    def __init__(self):
        self.count = 0
        self.sums = [0.0] * len(TIMERS)
        self.buckets = [[0] * (len(BOUNDS_MS) + 1) for _ in TIMERS]


class RequestMetrics:
    """The aggregates of every request a broker answered (its listeners share one)."""

    def __init__(self):
        self._stats: dict[str, _Stats] = {}

    def record(self, timing: RequestTiming, write_started: float, written: float) -> None:
        """A request answered: its timers from its times (seconds) and those of the write that sent it."""
        stats = self._stats.get(timing.name)
        if stats is None:
            stats = self._stats[timing.name] = _Stats()
        complete = timing.complete
        local_complete = complete if timing.local_complete is None else timing.local_complete
        ms = (1000 * (written - timing.received), 1000 * (timing.started - timing.received),
              1000 * (local_complete - timing.started), 1000 * (complete - local_complete),
              1000 * (write_started - complete), 1000 * (written - write_started))
        stats.count += 1
        sums, buckets = stats.sums, stats.buckets
        for i, v in enumerate(ms):
            sums[i] += v
            buckets[i][bisect_left(BOUNDS_MS, v)] += 1

    def snapshot(self) -> Snapshot:
        """Copies of the aggregates so far (to difference with a later one)."""
        return {name: {"count": s.count, "sum": list(s.sums), "buckets": [list(b) for b in s.buckets]}
                for name, s in self._stats.items()}


def difference(later: Snapshot, earlier: Snapshot) -> Snapshot:
    """The requests answered between two snapshots of one broker."""
    out = {}
    for name, s in later.items():
        e = earlier.get(name)
        if e is None:
            out[name] = s
        elif s["count"] > e["count"]:
            out[name] = {"count": s["count"] - e["count"], "sum": [a - b for a, b in zip(s["sum"], e["sum"])],
                         "buckets": [[a - b for a, b in zip(x, y)] for x, y in zip(s["buckets"], e["buckets"])]}
    return out


def merge(snapshots: list[Snapshot]) -> Snapshot:
    """Several brokers' aggregates as one."""
    out: Snapshot = {}
    for snapshot in snapshots:
        for name, s in snapshot.items():
            m = out.get(name)
            out[name] = s if m is None else {
                "count": m["count"] + s["count"], "sum": [a + b for a, b in zip(m["sum"], s["sum"])],
                "buckets": [[a + b for a, b in zip(x, y)] for x, y in zip(m["buckets"], s["buckets"])]}
    return out


def quantile(buckets: list[int], q: float) -> float:
    """The q-quantile (ms) of a timer's bucket counts: interpolated within its bucket, geometrically
    (the buckets are; 0 for bucket 0); NaN without values."""
    total = sum(buckets)
    if not total:
        return math.nan
    rank = q * total
    seen = 0
    for i, n in enumerate(buckets):
        if n and seen + n >= rank:
            if i == 0:
                return 0.0
            low, high = BOUNDS_MS[i - 1], BOUNDS_MS[min(i, len(BOUNDS_MS) - 1)]
            return low * (high / low) ** ((rank - seen) / n)
        seen += n
    return BOUNDS_MS[-1]


def summary(stats: dict) -> dict[str, dict[str, float]]:
    """Per timer of one request name's aggregates: mean and Yammer's 50th, 99th and 99.9th percentiles (ms)."""
    count = stats["count"]
    return {timer: {"mean": stats["sum"][i] / count if count else math.nan,
                    "p50": quantile(stats["buckets"][i], 0.5), "p99": quantile(stats["buckets"][i], 0.99),
                    "p999": quantile(stats["buckets"][i], 0.999)}
            for i, timer in enumerate(TIMERS)}
