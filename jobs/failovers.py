"""Failover records: each controller timeline joined with the fault that caused it and the load at that
moment (the failover timeline of docs/ARCHITECTURE.md). What the client waited through each fault,
partition by partition, is jobs/waits.py's. Pure: plain records in, FailoverRecords out.
"""
from __future__ import annotations

import bisect
from collections import defaultdict

from actors.records import TimelineRecord
from jobs.rundir import FailoverRecord, FaultRecord, LoadAtFault, LoadSample


def compose(timelines: list[TimelineRecord], faults: list[FaultRecord], samples: list[LoadSample],
            session_timeout_ms: int, detector: bool) -> list[FailoverRecord]:
    """One FailoverRecord per timeline, joined with the latest fault before it (for a broker failure, the
    latest that hit one of its brokers: faults overlap when deaths wait for session timeouts)."""
    faults = sorted(faults, key=lambda f: f.injected_ms)
    fault_times = [f.injected_ms for f in faults]
    samples = sorted(samples, key=lambda s: s.ts_ms)
    sample_times = [s.ts_ms for s in samples]
    by_fault: dict[int | None, list[TimelineRecord]] = defaultdict(list)
    for t in sorted(timelines, key=lambda t: t.detected_ms):  # the latest fault before it, of its broker if any
        earlier = faults[:bisect.bisect_right(fault_times, t.detected_ms)]
        fault = next((f for f in reversed(earlier) if t.kind == "broker_failure" and f.target in t.brokers),
                     earlier[-1] if earlier else None)
        by_fault[fault.fault_id if fault else None].append(t)
    out = []
    fault_by_id = {f.fault_id: f for f in faults}
    for fault_id, group in by_fault.items():
        fault = fault_by_id.get(fault_id)
        for t in group:
            at = fault.injected_ms if fault is not None else t.detected_ms
            j = bisect.bisect_right(sample_times, at)
            sample = samples[j - 1] if j else None
            out.append(FailoverRecord(
                fault_id=fault_id, fault_kind=fault.kind if fault else None, kind=t.kind,
                controller_id=t.controller_id, controller_epoch=t.epoch, brokers=t.brokers,
                fault_injected_ms=fault.injected_ms if fault else None, detected_ms=t.detected_ms,
                processing_started_ms=t.processing_started_ms, zk_written_ms=t.zk_written_ms,
                requests_sent_ms=t.requests_sent_ms, requests_acked_ms=t.requests_acked_ms,
                load=LoadAtFault(
                    partitions_total=t.partitions_total, partitions_affected=t.partitions_affected,
                    produce_rate=sample.produce_rate if sample else 0.0, inbox_depth=t.inbox_depth,
                    sender_queue_depths=sample.sender_queue_depths if sample else {},
                    session_timeout_ms=session_timeout_ms,
                    brokers_alive=sample.brokers_alive if sample else t.live_brokers, detector=detector)))
    return sorted(out, key=lambda r: r.detected_ms)
