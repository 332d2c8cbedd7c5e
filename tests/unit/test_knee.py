"""The capacity ladder: a row per offered rate from the load client's marks, the rates doubling until the
cluster falls behind then bisected, and the knee with what limited it. Against a model cluster whose
latency and throughput are a function of the rate (a double of the measure the ladder calls)."""
from __future__ import annotations

import numpy as np
import pytest

from jobs.measures.knee import SERVED, knee_of, ladder, nice_rate, point


def mark(t: float, sent: int, acked: int, full: int = 0) -> dict:
    return {"t": t, "sent": sent, "acked": acked, "errors": 0, "full": full, "queued": 0, "shipped": acked}


def test_a_row_says_whether_the_rate_was_served_and_met_the_knee():
    latencies = np.arange(1, 1001, dtype=np.float64) / 20  # 0.05 .. 50 ms
    row = point(1000, mark(0, 0, 0), mark(10, 10_000, 9_800), latencies)
    assert (row["offered_per_s"], row["achieved_per_s"], row["achieved_ratio"]) == (1000, 980, 0.98)
    assert row["latency_ms_p50"] == 25.05 and row["latency_ms_p99"] == 49.55 and row["latency_ms_max"] == 50
    assert row["served"] and row["knee_ok"] and not row["client_behind"]
    assert not point(1000, mark(0, 0, 0), mark(10, 10_000, 9_800), latencies + 1)["knee_ok"]  # p99 50.55
    short = point(1000, mark(0, 0, 0), mark(10, 10_000, 9_600), latencies)  # 96% acknowledged
    assert not short["served"] and not short["knee_ok"]


def test_a_client_that_could_not_offer_the_rate_is_behind_unless_its_queue_was_full():
    latencies = np.ones(100)
    behind = point(1000, mark(0, 0, 0), mark(10, 9_000, 9_000), latencies)
    assert behind["client_behind"] and not behind["served"]
    full = point(1000, mark(0, 0, 0), mark(10, 9_000, 9_000, full=3), latencies)
    assert not full["client_behind"] and not full["served"] and full["queue_full"] == 3
    assert np.isnan(point(1000, mark(0, 0, 0), mark(10, 0, 0), np.array([]))["latency_ms_p99"])


def model(capacity: float, client_limit: float = float("inf")):
    """A cluster that serves up to `capacity` with p99 rising towards it, and a client that offers at most
    `client_limit`; every rate the ladder asks for is kept."""
    asked: list[float] = []

    def measure(rate: float) -> dict:
        asked.append(rate)
        offered = min(rate, client_limit)
        achieved = min(offered, capacity)
        p99 = 5 + 60 * (rate / capacity) ** 4
        behind = offered < SERVED * rate
        served = achieved >= SERVED * rate and not behind
        return {"rate": rate, "served": served, "latency_ms_p99": p99, "client_behind": behind,
                "knee_ok": served and p99 <= 50}
    return measure, asked


@pytest.mark.parametrize("capacity", [700, 3000, 4700, 40_000])
def test_the_rates_double_until_behind_then_bisect_towards_the_knee(capacity):
    measure, asked = model(capacity)
    rows = ladder(measure, 500, bisect=3)
    first_behind = next(i for i, r in enumerate(rows) if not r["served"] or r["latency_ms_p99"] > 500)
    assert asked[:first_behind + 1] == [500 * 2 ** i for i in range(first_behind + 1)]
    bisected = asked[first_behind + 1:]
    assert 1 <= len(bisected) <= 3 and all(500 * 2 ** (first_behind - 1) < r < asked[first_behind] for r in bisected)
    knee, limited = knee_of(rows)
    true_knee = capacity * (45 / 60) ** 0.25  # where the model's p99 reaches 50 ms
    above = min(r for r in asked if r > knee)
    assert limited == "cluster" and knee <= true_knee < above
    assert above / knee <= max(1.1, 1 + 1 / 2 ** 3) + 0.01  # each bisection halved the gap, or it was small


def test_a_knee_whose_next_rate_was_beyond_the_client_is_a_lower_bound():
    measure, _ = model(100_000, client_limit=3000)
    rows = ladder(measure, 500, bisect=0)
    assert [r["rate"] for r in rows] == [500, 1000, 2000, 4000]
    assert knee_of(rows) == (2000, "client")


def test_given_rates_run_in_order_and_stop_once_behind_and_the_highest_rate_bounds_the_doubling():
    measure, asked = model(3000)
    ladder(measure, 500, rates=[1000, 2000, 6000, 8000])
    assert asked == [1000, 2000, 6000]
    measure, asked = model(10 ** 9)
    rows = ladder(measure, 500, max_rate=4000, bisect=2)
    assert asked == [500, 1000, 2000, 4000] and knee_of(rows) == (4000, "max rate")
    measure, asked = model(300)  # not even the first rate: the knee is looked for below it
    rows = ladder(measure, 500, bisect=2)
    assert asked == [500, 250, 375] and knee_of(rows) == (250, "cluster")
    measure, asked = model(300)
    assert knee_of(ladder(measure, 500, bisect=0)) == (None, "cluster")


@pytest.mark.parametrize("x, nice", [(750, 750), (1234.5, 1230), (56_789, 56_800), (3, 3)])
def test_a_bisected_rate_has_three_significant_digits(x, nice):
    assert nice_rate(x) == nice
