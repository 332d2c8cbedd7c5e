"""Where a Produce request's time goes in a benchmark's window: Kafka's RequestMetrics timers of the
requests the brokers answered in it, from the difference of their request timers (request_metrics.py's
snapshots) at its start and end, summed over the brokers."""
from __future__ import annotations

import ray

from actors.broker.request_metrics import TIMERS, difference, merge, summary


def request_timers(cluster) -> dict[int, dict]:
    """Each broker's request timers so far (request_metrics.py's snapshots)."""
    return dict(zip(cluster.brokers, ray.get([h.request_metrics.remote() for h in cluster.brokers.values()])))


# Kafka's RequestMetrics timers as the breakdown line names them (TotalTimeMs is the sum of the others)
BREAKDOWN = dict(zip(TIMERS, ("total", "queue", "local", "remote", "response queue", "send")))


def produce_breakdown(before: dict[int, dict], after: dict[int, dict]) -> dict | None:
    """The Produce requests answered in the window, summed over the brokers: mean and p99 of each timer
    (ms), from the difference of the snapshots at its start and end."""
    window = merge([difference(after[b], before.get(b, {})) for b in after]).get("Produce")
    if window is None:
        return None
    return {"requests": window["count"], **{BREAKDOWN[timer]: {"mean": round(s["mean"], 3), "p99": round(s["p99"], 3)}
                                            for timer, s in summary(window).items()}}


def breakdown_line(produce_ms: dict | None) -> str:
    """`produce ms (mean/p99): total 7.1/12 = queue 0.1/0.4 + local ...`: Kafka's RequestMetrics of the
    window's Produce requests."""
    if produce_ms is None:
        return "produce ms: no Produce request answered in the window"
    ms = lambda v: f"{v:.0f}" if v >= 10 else f"{v:.2g}"
    part = lambda name: f"{name} {ms(produce_ms[name]['mean'])}/{ms(produce_ms[name]['p99'])}"
    return (f"produce ms (mean/p99) over {produce_ms['requests']:,} requests: {part('total')} = "
            + " + ".join(part(name) for name in list(BREAKDOWN.values())[1:]))
