"""Kafka's RequestMetrics as plain aggregates: each request's six timers from its times, bucket counts,
quantiles from the buckets, and the difference of two snapshots (a benchmark's window) and their sum
over brokers."""
from __future__ import annotations

import math

import pytest

from actors.broker.request_metrics import (
    BOUNDS_MS,
    TIMERS,
    RequestMetrics,
    RequestTiming,
    difference,
    merge,
    quantile,
    summary,
)


def timing(name: str, received: float, started: float, local_complete: float | None, complete: float) -> RequestTiming:
    t = RequestTiming(name, received)
    t.started, t.local_complete, t.complete = started, local_complete, complete
    return t


def test_each_timer_is_the_stretch_kafka_gives_it():
    metrics = RequestMetrics()
    # received 0, started 1 ms later, waits from 3 ms, complete at 10, written at 10.5 to 10.75 (seconds: /1000)
    metrics.record(timing("Produce", 0.0, 0.001, 0.003, 0.010), 0.0105, 0.01075)
    stats = metrics.snapshot()["Produce"]
    assert stats["count"] == 1
    ms = dict(zip(TIMERS, stats["sum"]))
    assert ms == pytest.approx({"TotalTimeMs": 10.75, "RequestQueueTimeMs": 1, "LocalTimeMs": 2, "RemoteTimeMs": 7,
                                "ResponseQueueTimeMs": 0.5, "ResponseSendTimeMs": 0.25})
    for i, timer in enumerate(TIMERS):  # one count, in the bucket whose bounds hold the value
        (bucket,) = [b for b, n in enumerate(stats["buckets"][i]) if n]
        assert BOUNDS_MS[bucket - 1] < ms[timer] <= BOUNDS_MS[bucket] * (1 + 1e-9), timer


def test_a_request_that_never_waits_has_its_handler_in_local_time_and_no_remote_time():
    metrics = RequestMetrics()
    metrics.record(timing("Metadata", 0.0, 0.001, None, 0.004), 0.004, 0.004)
    stats = metrics.snapshot()["Metadata"]
    ms = dict(zip(TIMERS, stats["sum"]))
    assert ms["LocalTimeMs"] == pytest.approx(3)
    assert ms["RemoteTimeMs"] == 0 and stats["buckets"][TIMERS.index("RemoteTimeMs")][0] == 1


def test_quantiles_come_from_the_buckets_within_a_bucket_s_width():
    values = [0.1 * (i + 1) for i in range(1000)]  # 0.1 .. 100 ms
    metrics = RequestMetrics()
    for v in values:
        metrics.record(timing("Fetch", 0.0, 0.0, None, v / 1000), v / 1000, v / 1000)
    buckets = metrics.snapshot()["Fetch"]["buckets"][TIMERS.index("LocalTimeMs")]
    width = 2 ** 0.25  # a quarter of an octave
    for q in (0.5, 0.99, 0.999):
        exact = values[math.ceil(q * len(values)) - 1]
        assert exact / width <= quantile(buckets, q) <= exact * width, q
    s = summary(metrics.snapshot()["Fetch"])["LocalTimeMs"]
    assert s["mean"] == pytest.approx(sum(values) / len(values))
    assert s["p50"] <= s["p99"] <= s["p999"]
    assert math.isnan(quantile([0] * len(buckets), 0.5))


def test_a_window_is_the_difference_of_two_snapshots_and_brokers_add_up():
    metrics = RequestMetrics()
    metrics.record(timing("Produce", 0.0, 0.0, 0.0, 1.0), 1.0, 1.0)  # a slow one before the window
    before = metrics.snapshot()
    for _ in range(3):
        metrics.record(timing("Produce", 0.0, 0.0, 0.0, 0.002), 0.002, 0.002)
    metrics.record(timing("Metadata", 0.0, 0.0, None, 0.001), 0.001, 0.001)
    window = difference(metrics.snapshot(), before)
    assert window["Produce"]["count"] == 3 and window["Metadata"]["count"] == 1
    remote = TIMERS.index("RemoteTimeMs")
    assert window["Produce"]["sum"][remote] == pytest.approx(6)
    assert sum(window["Produce"]["buckets"][remote]) == 3
    assert summary(window["Produce"])["RemoteTimeMs"]["p999"] < 3  # the slow one is outside the window
    assert difference(metrics.snapshot(), metrics.snapshot()) == {}  # no request in between
    both = merge([window, window])
    assert both["Produce"]["count"] == 6 and both["Produce"]["sum"][remote] == pytest.approx(12)
    assert sum(both["Metadata"]["buckets"][0]) == 2
