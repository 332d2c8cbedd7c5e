"""Failover records: each controller timeline joined with the fault that caused it, the load at that
moment, and when each partition the fault took down was first written again (the failover timeline
of docs/ARCHITECTURE.md, `first_produce_ok`). Pure: plain records in, FailoverRecords out.

A fault's affected partitions are those whose last acknowledgement before the fault came from the
broker the fault hit and, with acks=all, also those that had that broker in their ISR (a leader
acknowledges nothing more until the dead follower is taken out): the partitions whose leader or ISR
the controller wrote for the fault, and those the last ZooKeeper sample before it shows with the
broker in their ISR (a leader may have shrunk the ISR itself before the controller acted; a broker
may have rejoined ISRs after the sample). A partition is
available again at its first acknowledgement after the fault that is not a leftover of the old
state: one from another broker or a newer leader epoch, or, after a pause, any acknowledgement once
the paused process runs again.
"""
from __future__ import annotations

import bisect
import math
from collections import defaultdict
from typing import Collection, Iterable, NamedTuple

from actors.records import Ack, TimelineRecord, tp_key
from jobs.rundir import FailoverRecord, FaultKind, FaultRecord, LoadAtFault, LoadSample, StateSample

LEADER_FAULTS = {FaultKind.KILL_BROKER, FaultKind.RESTART_BROKER, FaultKind.PAUSE_BROKER,
                 FaultKind.EXPIRE_BROKER_SESSION, FaultKind.CONTROLLED_SHUTDOWN, FaultKind.CORRUPT_LOG_TAIL,
                 FaultKind.TRUNCATE_LOG_TAIL, FaultKind.LOSE_UNFLUSHED_TAIL}
PAUSES = {FaultKind.PAUSE_BROKER, FaultKind.PAUSE_CONTROLLER}


class AckPoint(NamedTuple):
    acked_ms: float
    broker_id: int
    leader_epoch: int
    sent_ms: float = 0.0


def attribute(acks: Iterable[Ack], epochs: dict[tuple[str, int], int],
              leaders: dict[tuple[str, int], int]) -> Iterable[Ack]:
    """Acks with the leader epoch their record was appended in and the broker that led in it: Kafka's
    produce response names neither, but every batch carries its leader's epoch (`epochs`: (partition,
    offset) -> epoch, from the final read-back) and the ZooKeeper samples name each epoch's leader
    (`leaders`: (partition, epoch) -> broker). What cannot be told stays -1."""
    for a in acks:
        key = tp_key(a.topic, a.partition)
        epoch = epochs.get((key, a.offset), a.leader_epoch)
        yield a.model_copy(update={"leader_epoch": epoch, "broker_id": leaders.get((key, epoch), a.broker_id)})


def epoch_leaders(states: Iterable[StateSample]) -> dict[tuple[str, int], int]:
    """(partition, leader epoch) -> its leader, as the ZooKeeper samples saw them."""
    return {(tp, p.leader_epoch): p.leader for s in states for tp, p in s.partitions.items() if p.leader >= 0}


class AckIndex:
    """Acknowledgements per partition in time order, for looking up around a moment."""

    def __init__(self, acks: Iterable[Ack]):
        points: dict[str, list[AckPoint]] = defaultdict(list)
        for a in acks:
            points[tp_key(a.topic, a.partition)].append(AckPoint(a.acked_ms, a.broker_id, a.leader_epoch, a.sent_ms))
        self.points = {tp: sorted(p) for tp, p in points.items()}
        self.times = {tp: [p.acked_ms for p in ps] for tp, ps in self.points.items()}

    def last_before(self, tp: str, ms: float) -> AckPoint | None:
        i = bisect.bisect_left(self.times[tp], ms)
        return self.points[tp][i - 1] if i > 0 else None

    def first_after(self, tp: str, ms: float, stale) -> AckPoint | None:
        for p in self.points[tp][bisect.bisect_right(self.times[tp], ms):]:
            if not stale(p):
                return p
        return None


def recovery(fault: FaultRecord, acks: AckIndex, changed: Collection[str] = ()) -> dict[str, float]:
    """When each partition the fault took down was acknowledged again (partition -> ms): those the
    victim led, and with acks=all those in `changed`, the partitions that had it in their ISR (a
    follower in the ISR holds up acks=all until it is removed)."""
    if fault.kind not in LEADER_FAULTS or fault.target is None:
        return {}
    out = {}
    for tp in acks.points:
        before = acks.last_before(tp, fault.injected_ms)
        if before is None or (before.broker_id != fault.target and tp not in changed):
            continue
        stale_until = fault.ended_ms if fault.kind in PAUSES and fault.ended_ms else float("inf")

        def stale(p: AckPoint) -> bool:
            """An answer the old state still gave: a response on its way when the fault hit."""
            if p.broker_id != before.broker_id or p.leader_epoch != before.leader_epoch:
                return False
            if before.broker_id != fault.target:  # the victim was a follower: a record sent after the fault
                return p.sent_ms < fault.injected_ms  # is one its leader took after it (Kafka's response does
            return p.acked_ms < stale_until  # not say when the leader decided)
        after = acks.first_after(tp, fault.injected_ms, stale)
        if after is not None:
            out[tp] = after.acked_ms
    return out


def compose(timelines: list[TimelineRecord], faults: list[FaultRecord], acks: AckIndex, samples: list[LoadSample],
            session_timeout_ms: int, detector: bool, states: list[StateSample] | None = None) -> list[FailoverRecord]:
    """One FailoverRecord per timeline, joined with the latest fault before it (for a broker failure, the
    latest that hit one of its brokers: faults overlap when deaths wait for session timeouts); a
    fault's recoveries go with its first timeline (its broker failure when it has one), so that no
    partition is counted twice. `states` (the ZooKeeper samples of an acks=all run) add the partitions
    that had the faulty broker in their ISR, by the sample and by the timelines' writes."""
    states = sorted(states or [], key=lambda s: s.ts_ms)
    state_times = [s.ts_ms for s in states]

    def in_isr_before(fault: FaultRecord) -> set[str]:
        i = bisect.bisect_right(state_times, fault.injected_ms)
        return {tp for tp, p in states[i - 1].partitions.items() if fault.target in p.isr} if i else set()
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
        carrier = next((t for t in group if t.kind == "broker_failure"), group[0])
        changed = {tp for t in group for tp in t.partitions} | in_isr_before(fault) \
            if states and fault is not None else set()
        recovered = recovery(fault, acks, changed) if fault is not None else {}
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
                first_produce_ok_ms=recovered if t is carrier else {},
                load=LoadAtFault(
                    partitions_total=t.partitions_total, partitions_affected=t.partitions_affected,
                    produce_rate=sample.produce_rate if sample else 0.0, inbox_depth=t.inbox_depth,
                    sender_queue_depths=sample.sender_queue_depths if sample else {},
                    session_timeout_ms=session_timeout_ms,
                    brokers_alive=sample.brokers_alive if sample else t.live_brokers, detector=detector)))
    return sorted(out, key=lambda r: r.detected_ms)


class UnavailableWindow(NamedTuple):
    partition: str  # topic-partition
    fault_id: int | None
    start_ms: float  # the fault
    end_ms: float  # the partition's first acknowledgement after it


def unavailable_windows(failovers: list[FailoverRecord]) -> list[UnavailableWindow]:
    """Client-visible unavailability of every affected partition, as a window: from the fault to its
    first acknowledgement after (the summary's percentiles take their lengths, the timeline page
    draws them)."""
    return [UnavailableWindow(tp, f.fault_id, f.fault_injected_ms, ok) for f in failovers
            if f.fault_injected_ms is not None for tp, ok in f.first_produce_ok_ms.items()]


def unavailability_ms(failovers: list[FailoverRecord]) -> list[float]:
    """Client-visible unavailability of every affected partition: first acknowledgement after - fault."""
    return [w.end_ms - w.start_ms for w in unavailable_windows(failovers)]


def first_write_after(at_ms: float, acks: AckIndex, partitions: Collection[str]) -> dict[str, float]:
    """When each partition first acknowledged a record sent at or after `at_ms` (partition -> ms): the
    moment it took new writes again, whatever the fault (one that kills no process, such as a cut
    link, has no failover to measure from)."""
    out = {}
    for tp in partitions:
        after = acks.first_after(tp, at_ms, lambda p: p.sent_ms < at_ms) if tp in acks.points else None
        if after is not None:
            out[tp] = after.acked_ms
    return out


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile of sorted values, p in 0-100 (every p50/p99 of a run: its summary, its
    timeline page, the unavailability benchmark)."""
    if not values:
        return None
    return values[max(0, math.ceil(p / 100 * len(values)) - 1)]
