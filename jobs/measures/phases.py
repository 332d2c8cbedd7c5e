"""What the failover analysis measures and hands on: the controller's phases of a failover, each
partition's steps to its recovery, the client's two measures, the load features, the load buckets,
and the Analysis. The run's report (jobs/experiments/summary.py) names the steps, the Spark job (jobs/analysis.py)
computes over them and the report (jobs/reports/report.py) prints them; all take the names from here."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

# the controller's part, one value per failover: the timestamps each phase runs between
CONTROLLER_PHASES = ["detection_ms", "inbox_wait_ms", "election_zk_ms", "propagation_ms"]
PHASE_SPANS = {"detection_ms": ("fault_injected_ms", "detected_ms"),
               "inbox_wait_ms": ("detected_ms", "processing_started_ms"),
               "election_zk_ms": ("processing_started_ms", "zk_written_ms"),
               "propagation_ms": ("zk_written_ms", "requests_acked_ms")}
# the consumer group's coordinator through a fault on its broker, one value per such fault: each step's ms after
# the fault (jobs/measures/group_failovers.py; they overlap, so they are not added up)
COORDINATOR_STEPS = {"elected_ms": "led again", "loaded_ms": "loaded", "found_ms": "found", "rejoined_ms": "rejoined",
                     "committed_ms": "committed", "consumed_first_ms": "first read", "consumed_all_ms": "all read"}
PER_FAULT_SOURCES = ("controller", "coordinator")  # the analysis's sources of one row per fault, not per partition
# the client's, one value per partition and fault (jobs/measures/waits.py)
MEASURES = ["recovery_ms", "worst_wait_ms"]
# a partition's way from the fault to its recovery: the steps seen, in time order, each phase named by
# the step that ends it and lasting from the step before (jobs/measures/partition_phases.py)
PARTITION_PHASES = {
    "fault_end_ms": "the fault ends (a pause's SIGCONT, a link healed, a broker back)",
    "record_sent_ms": "the client hands over the record that recovers the partition (a probe's next turn, the "
                      "load's pacing)",
    "detection_ms": "the controller learns of the fault",
    "inbox_wait_ms": "the controller starts handling it",
    "election_zk_ms": "the partition's new leader and ISR written to ZooKeeper",
    "send_ms": "the controller's requests sent",
    "leader_apply_ms": "the partition's leader applies its LeaderAndIsr",
    "followers_apply_ms": "its last follower applies its LeaderAndIsr",
    "follower_fetch_ms": "its last follower fetches from the leader",
    "isr_write_ms": "the leader writes a new ISR",
    "refused_ms": "a broker refuses the client's batch (an old leader: NOT_LEADER_OR_FOLLOWER)",
    "first_append_ms": "the leader appends the client's first record",
    "hw_ms": "the leader's high watermark moves past it",
    "during_fault_ms": "acknowledged while a fault that slows requests still lasted (a slowed link, clients "
                       "cut from a broker)",
    "client_queue_ms": "the client's first record sent after the fault is acknowledged, when the high "
                       "watermark's move did not reach it (it waited in the client's queue behind the batches "
                       "that were)",
}
PHASE_LABELS = dict(zip(PARTITION_PHASES, ["end", "sent", "detect", "inbox", "zk", "send", "leader", "follow",
                                            "fetch", "isr", "refused", "append", "hw", "during", "cqueue"],
                        strict=True))  # column heads in narrow tables
UNEXPLAINED = "unexplained_ms"  # from the last step seen to the acknowledgement (client_queue_ms aside)
# who spends each phase (the step that ends it is theirs), so that a chart can colour them by it; every phase of
# PARTITION_PHASES and UNEXPLAINED in one of them
PHASE_OWNERS = {
    "controller": ["detection_ms", "inbox_wait_ms", "election_zk_ms", "send_ms"],
    "brokers": ["leader_apply_ms", "followers_apply_ms", "follower_fetch_ms", "isr_write_ms", "refused_ms",
                "first_append_ms", "hw_ms"],
    "client": ["record_sent_ms", "client_queue_ms"],
    "fault": ["fault_end_ms", "during_fault_ms"],
    "unexplained": [UNEXPLAINED],
}
FEATURES = ["partitions_affected", "partitions_total", "produce_rate", "inbox_depth", "sender_queue_depth",
            "session_timeout_ms", "detector", "partition_rate", "led", "followed"]
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
    failovers: int  # controller failovers analysed
    partitions: int  # partition-fault rows analysed (every source and role)
    inputs: list[dict]  # per run: failovers, waits, malformed, unexplained, status, examples
    percentiles: list[dict]  # source, detector, bucket, measure, n, censored, p50, p95, p99
    correlations: list[dict]  # source, method, measure, feature, n, value, ci_low, ci_high (None: constant)
    regressions: list[dict]  # source, measure, n, intercept, r2, coefficients {feature: (value, ci_low, ci_high)},
    # dropped (features a linear combination of the others), skipped
    out: Path
    on_ray: bool
    faults: list[dict] = []  # per fault and source (analysis.fault_table): measures' p50/p99, offered load, knee
    by_count: list[dict] = []  # per failover kind, detector and partitions_total: the controller's phases'
    # p50 and mean (analysis.controller_by_count)
