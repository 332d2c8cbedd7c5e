"""The knee: the highest offered rate a cluster serves in full with p99 at most KNEE_P99_MS, found by a
ladder of open-loop rates (pure: jobs/experiments/capacity.py runs it on a cluster, bench_capacity with
the machine's figures beside it).

Rates double from a start until one falls behind (acknowledged < SERVED of offered, or p99 above a stop
bound), then are bisected between the highest that met the knee and the lowest above it that did not.
Each rate's row comes from the load client's marks at its window's ends (`point`).
"""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
from pydantic import BaseModel

SERVED = 0.97  # acknowledged / offered at or above this: the cluster kept up
KNEE_P99_MS = 50.0
STOP_P99_MS = 250.0  # a p99 above this (five times the knee's bound) ends the doubling too


class Capacity(BaseModel):
    """What a capacity measure found: the knee (None: not even the first rate met it) and every rate tried."""

    partitions: int
    knee_per_s: float | None
    limited_by: str  # "cluster", "client" (the rate above the knee was beyond the load client), "max rate"
    knee_p99_ms: float
    rows: list[dict]
    seconds: float  # how long the measure took, cluster start included


def percentile(ordered: np.ndarray, q: float) -> float:
    """The value at index q * n of sorted values (NaN for none)."""
    return round(float(ordered[min(len(ordered) - 1, int(q * len(ordered)))]), 2) if len(ordered) else float("nan")


def point(rate: float, m0: dict, m1: dict, latencies_ms: np.ndarray, knee_p99_ms: float = KNEE_P99_MS) -> dict:
    """One offered rate's row from the load client's marks at its window's ends (LoadGenerator.mark) and the
    latencies acknowledged in it: offered and acknowledged rates, latency p50 / p99 / p99.9 / max, whether
    the cluster kept up (`served`), whether the client could not offer the rate with room in its queue
    (`client_behind`: the client, not the cluster, was the limit) and whether the knee's bound held."""
    wall = m1["t"] - m0["t"]
    acked, offered = m1["acked"] - m0["acked"], (m1["sent"] - m0["sent"]) / wall
    ordered = np.sort(latencies_ms)
    row = {"rate": rate, "offered_per_s": round(offered), "achieved_per_s": round(acked / wall),
           "achieved_ratio": round(acked / wall / rate, 3), "latency_ms_p50": percentile(ordered, 0.5),
           "latency_ms_p99": percentile(ordered, 0.99), "latency_ms_p999": percentile(ordered, 0.999),
           "latency_ms_max": percentile(ordered, 1.0), "delivery_errors": m1["errors"] - m0["errors"],
           "queue_full": m1["full"] - m0["full"], "queued_at_end": m1["queued"], "window_s": round(wall, 2)}
    # offering less than the rate with librdkafka's queue full is the cluster's doing; with room in it, the client's
    row["client_behind"] = offered < SERVED * rate and not row["queue_full"]
    row["served"] = acked / wall >= SERVED * rate and not row["client_behind"]
    row["knee_ok"] = row["served"] and row["latency_ms_p99"] <= knee_p99_ms
    return row


def nice_rate(x: float) -> int:
    """x to three significant digits (a bisected rate)."""
    step = 10 ** max(0, len(str(int(x))) - 3)
    return int(round(x / step) * step)


def ladder(measure: Callable[[float], dict], start: float, rates: Iterable[float] | None = None,
           max_rate: float = 1_024_000, bisect: int = 2, stop_p99_ms: float = STOP_P99_MS) -> list[dict]:
    """The rows of the offered rates: `rates` in order, else doubling from `start`, then bisecting near
    the knee; either list stops at the first rate at which the cluster (or the client) fell behind."""
    rows: list[dict] = []
    behind = lambda r: not r["served"] or r["latency_ms_p99"] > stop_p99_ms
    given = iter(rates) if rates is not None else None
    while True:
        rate = next(given, None) if given is not None else (rows[-1]["rate"] * 2 if rows else start)
        if rate is None or rate > max_rate:
            break
        rows.append(measure(rate))
        if behind(rows[-1]):
            break
    if given is not None:
        return rows
    for _ in range(bisect):
        lo = max((r["rate"] for r in rows if r["knee_ok"]), default=0)
        hi = min((r["rate"] for r in rows if r["rate"] > lo and not r["knee_ok"]), default=None)
        if hi is None or (lo and hi / lo <= 1.1):
            break
        rows.append(measure(nice_rate((lo + hi) / 2)))
    return rows


def knee_of(rows: list[dict]) -> tuple[float | None, str]:
    """The knee and what limited it: the cluster, the client (the next rate tried was beyond the load
    client: the cluster's knee is at least this) or the highest rate allowed."""
    knee = max((r["rate"] for r in rows if r["knee_ok"]), default=None)
    above = min((r for r in rows if r["rate"] > (knee or 0)), key=lambda r: r["rate"], default=None)
    return knee, "max rate" if above is None else "client" if above["client_behind"] else "cluster"
