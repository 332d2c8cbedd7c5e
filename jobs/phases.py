"""What the failover analysis measures and hands on: the phases of a failover, the load features, the
load buckets, and the Analysis. The Spark job (jobs/analysis.py) computes them and the report
(jobs/report.py) prints them; both take them from here, so the job calls its report and the report
needs nothing from the job."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

PHASES = ["detection_ms", "inbox_wait_ms", "election_zk_ms", "propagation_ms", "unavailability_ms"]
# the timestamps each phase runs between (unavailability_ms is computed from first_produce_ok_ms)
PHASE_SPANS = {"detection_ms": ("fault_injected_ms", "detected_ms"),
               "inbox_wait_ms": ("detected_ms", "processing_started_ms"),
               "election_zk_ms": ("processing_started_ms", "zk_written_ms"),
               "propagation_ms": ("zk_written_ms", "requests_acked_ms")}
FEATURES = ["partitions_affected", "partitions_total", "produce_rate", "inbox_depth", "sender_queue_depth",
            "session_timeout_ms", "detector"]
BUCKET_EDGES = (1, 100, 500, 1000, 5000)  # partitions affected


def bucket_label(affected: int, edges: tuple[int, ...] = BUCKET_EDGES) -> str:
    """The load bucket of a failover by partitions affected: "0", "1-99", ..., "5000+"."""
    if affected < edges[0]:
        return "0" if edges[0] == 1 else f"0-{edges[0] - 1}"
    for low, high in zip(edges, edges[1:]):
        if affected < high:
            return f"{low}-{high - 1}"
    return f"{edges[-1]}+"


def bucket_order(label: str) -> int:
    return int(label.split("-")[0].rstrip("+"))


class Analysis(NamedTuple):
    failovers: int  # rows analysed
    inputs: list[dict]  # per run: failovers, malformed, unexplained, status, examples
    percentiles: list[dict]  # detector, bucket, phase, n, p50, p95, p99
    correlations: list[dict]  # method, phase, feature, value (None: a constant column)
    regressions: list[dict]  # phase, n, intercept, r2, coefficients {feature: value}, skipped
    out: Path
    on_ray: bool
