"""Failover records: each controller timeline joined with the fault that caused it and the load at that
moment (the failover timeline of docs/ARCHITECTURE.md). What the client waited through each fault,
partition by partition, is jobs/measures/waits.py's. Pure: plain records in, FailoverRecords out.
"""
from __future__ import annotations

import bisect
from typing import Iterable

from actors.records import TimelineRecord
from jobs.measures.rundir import FailoverRecord, FaultRecord, LoadAtFault, LoadSample


def compose(timelines: list[TimelineRecord], faults: list[FaultRecord], samples: list[LoadSample],
            session_timeout_ms: int, detector: bool) -> list[FailoverRecord]:
    """One FailoverRecord per timeline, joined with the latest fault before it (for a broker failure, the
    latest that hit one of its brokers: faults overlap when deaths wait for session timeouts) and the last
    load sample before that fault (before its detection, without a fault)."""
    faults = sorted(faults, key=lambda f: f.injected_ms)
    fault_times = [f.injected_ms for f in faults]
    samples = sorted(samples, key=lambda s: s.ts_ms)
    sample_times = [s.ts_ms for s in samples]
    out = []
    for t in timelines:
        earlier = faults[:bisect.bisect_right(fault_times, t.detected_ms)]
        fault = next((f for f in reversed(earlier) if t.kind == "broker_failure" and f.target in t.brokers),
                     earlier[-1] if earlier else None)
        j = bisect.bisect_right(sample_times, fault.injected_ms if fault is not None else t.detected_ms)
        sample = samples[j - 1] if j else None
        out.append(FailoverRecord(
            fault_id=fault.fault_id if fault else None, fault_kind=fault.kind if fault else None, kind=t.kind,
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


def of_faults(failovers: Iterable[FailoverRecord]) -> dict[int, FailoverRecord]:
    """Each fault's failover: its broker failure if it has one (a broker's death, the controller's with it
    or not), else its first. The Spark job orders the same way (jobs/analysis.py: wait_table)."""
    out: dict[int, FailoverRecord] = {}
    for f in sorted(failovers, key=lambda f: (f.kind != "broker_failure", f.detected_ms)):
        if f.fault_id is not None:
            out.setdefault(f.fault_id, f)
    return out
