"""Where each partition's recovery went, step by step from the fault to the client's acknowledgement:
the controller's steps (its failover timeline, failovers.jsonl) and the brokers' (broker_events.jsonl,
actors/broker/events.py), lined up per partition.

The steps, each the first seen after the fault and before the partition recovered:

    fault_end_ms        the fault ends (a pause's SIGCONT, a link healed, a broker back: ended_ms)
    record_sent_ms      the client hands over the record that recovers the partition (its sent time: a
                        probe's next turn, up to its interval after the fault; the load's pacing)
    detection_ms        the controller learns of the fault (detected_ms)
    inbox_wait_ms       it starts handling it (processing_started_ms)
    election_zk_ms      the new leaders and ISRs are in ZooKeeper (zk_written_ms)
    send_ms             the controller's requests are sent (requests_sent_ms)
    leader_apply_ms     a broker applies a LeaderAndIsr leading the partition
    followers_apply_ms  the last follower in its ISR applies the LeaderAndIsr of that epoch
    follower_fetch_ms   the last of them fetches from the leader in that epoch
    isr_write_ms        the leader writes a new ISR (a shrink or an expansion)
    refused_ms          a broker last refuses a client's batch before the first append (an old leader
                        answering NOT_LEADER_OR_FOLLOWER, a leader NOT_ENOUGH_REPLICAS; the brokers record
                        a refusal at most once a second per partition and error, of any client)
    first_append_ms     the leader appends a client's first batch (in that epoch, if one began)
    hw_ms               the leader's high watermark moves, after the steps above
    during_fault_ms     the acknowledgement, while a fault that slows requests (rundir.DEGRADING_FAULTS:
                        a slowed link, clients cut from a broker) still lasted: the wait was the fault's
    client_queue_ms     the acknowledgement, when that move did not reach the record that recovered the
                        partition (its offset at or past the high watermark then): the record waited in
                        the client's queue behind the batches the move committed (the load's client
                        sends one partition per request, five in flight per connection)

The controller's steps are those of the fault's failover (jobs/measures/failovers.py: `of_faults`); its
phases carry the names of the controller's own (jobs/measures/phases.py). A step not seen (a fault the
controller did not handle, a leader that stayed) is left out. Each phase lasts from the step before
it in time (the fault for the first) to its own step, so the phases add up to the time of the last
step; the rest, to the acknowledgement, is unexplained unless it is client_queue_ms (None for a censored partition, which was
never acknowledged within its observation). Pure: records in, phases out.
"""
from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Iterable, NamedTuple

from actors.records import BrokerEvent
from jobs.measures.failovers import of_faults
from jobs.measures.phases import PARTITION_PHASES
from jobs.measures.rundir import DEGRADING_FAULTS, FailoverRecord, FaultRecord, PartitionWait, Source

CONTROLLER_STEPS = {"detection_ms": "detected_ms", "inbox_wait_ms": "processing_started_ms",
                    "election_zk_ms": "zk_written_ms", "send_ms": "requests_sent_ms"}


class Seen(NamedTuple):
    ts_ms: float
    leader_epoch: int
    broker_id: int
    replica: int | None = None  # follower_fetch: the follower
    high_watermark: int | None = None  # hw_moved: where it moved to


class BrokerSteps:
    """The brokers' events per partition and kind, in time order, and the ISR each leader epoch began with."""

    def __init__(self, events: Iterable[BrokerEvent]):
        by: dict[tuple[str, str], list[Seen]] = defaultdict(list)
        self.isr: dict[tuple[str, int], set[int]] = {}  # (partition, leader epoch) -> its ISR then
        for e in events:
            if e.kind == "leader_and_isr":
                for tp, epoch in e.leaders.items():
                    by[(tp, "leader")].append(Seen(e.ts_ms, epoch, e.broker_id))
                    self.isr[(tp, epoch)] = set(e.isrs.get(tp, ()))
                for tp, epoch in e.followers.items():
                    by[(tp, "follower")].append(Seen(e.ts_ms, epoch, e.broker_id))
            elif e.partition is not None and e.kind in ("follower_fetch", "isr_change", "client_append", "hw_moved",
                                                        "produce_error"):
                by[(e.partition, e.kind)].append(Seen(
                    e.ts_ms, e.leader_epoch if e.leader_epoch is not None else -1, e.broker_id, e.replica,
                    int(e.detail) if e.kind == "hw_moved" and e.detail.isdigit() else None))
        self.seen = {key: sorted(v) for key, v in by.items()}
        self.times = {key: [s.ts_ms for s in v] for key, v in self.seen.items()}

    def between(self, tp: str, kind: str, start: float, end: float) -> list[Seen]:
        """Those of one partition and kind after `start`, at or before `end`."""
        times = self.times.get((tp, kind))
        if not times:
            return []
        return self.seen[(tp, kind)][bisect.bisect_right(times, start):bisect.bisect_right(times, end)]


def steps(wait: PartitionWait, failover: FailoverRecord | None, brokers: BrokerSteps,
          fault_end_ms: float | None = None) -> dict[str, float]:
    """Each step seen for this partition through this fault: phase name -> when."""
    start, end = wait.fault_ms, wait.fault_ms + wait.recovery_ms
    out = {"fault_end_ms": fault_end_ms} if fault_end_ms is not None and start < fault_end_ms <= end else {}
    if wait.recovery_sent_ms is not None and start < wait.recovery_sent_ms <= end:
        out["record_sent_ms"] = wait.recovery_sent_ms
    if failover is not None:
        for name, field in CONTROLLER_STEPS.items():
            t = getattr(failover, field)
            if t is not None and start < t <= end:
                out[name] = t
    tp = wait.partition
    led = brokers.between(tp, "leader", start, end)
    epoch = led[0].leader_epoch if led else None
    if led:
        out["leader_apply_ms"] = led[0].ts_ms
        isr = brokers.isr.get((tp, epoch), set())  # a follower outside it (a victim back) holds nothing up
        followers = [s for s in brokers.between(tp, "follower", start, end) if s.leader_epoch == epoch
                     and s.broker_id in isr]
        if followers:
            out["followers_apply_ms"] = followers[-1].ts_ms
        fetches = [s for s in brokers.between(tp, "follower_fetch", start, end) if s.leader_epoch == epoch
                   and s.replica in isr]
        if fetches:
            out["follower_fetch_ms"] = fetches[-1].ts_ms
    isr = brokers.between(tp, "isr_change", start, end)
    if isr:
        out["isr_write_ms"] = isr[0].ts_ms
    appended = [s for s in brokers.between(tp, "client_append", start, end) if epoch is None or s.leader_epoch >= epoch]
    if appended:
        out["first_append_ms"] = appended[0].ts_ms
    refused = brokers.between(tp, "produce_error", start, out.get("first_append_ms", end))
    if refused:
        out["refused_ms"] = refused[-1].ts_ms
    after = max(out.get("leader_apply_ms", start), out.get("first_append_ms", start))
    moved = [s for s in brokers.between(tp, "hw_moved", after, end) if epoch is None or s.leader_epoch >= epoch]
    if moved:
        out["hw_ms"] = moved[0].ts_ms
        hw = moved[0].high_watermark
        if wait.source is Source.LOAD and wait.recovery_offset is not None and hw is not None \
                and wait.recovery_offset >= hw:
            out["client_queue_ms"] = end  # the record was not among those that move committed (a probe has no
            # queue: one record in flight, its own wait on the broker stays unexplained)
    if wait.fault_kind in DEGRADING_FAULTS and (fault_end_ms is None or fault_end_ms > end) \
            and "client_queue_ms" not in out:
        out["during_fault_ms"] = end
    return out


def phases(wait: PartitionWait, seen: dict[str, float]) -> tuple[dict[str, float], float | None]:
    """(each phase's ms, in the order they ran; the unexplained rest, None if censored) from the steps seen."""
    at = wait.fault_ms
    out = {}
    for name, t in sorted(seen.items(), key=lambda item: (item[1], list(PARTITION_PHASES).index(item[0]))):
        out[name] = t - at
        at = t
    return out, None if wait.recovery_censored else wait.fault_ms + wait.recovery_ms - at


def explain(waits: list[PartitionWait], faults: list[FaultRecord], failovers: list[FailoverRecord],
            events: Iterable[BrokerEvent]) -> list[PartitionWait]:
    """The waits with their phases and unexplained rest."""
    brokers = BrokerSteps(events)
    ended = {f.fault_id: f.ended_ms for f in faults}
    first = of_faults(failovers)
    out = []
    for w in waits:
        named, rest = phases(w, steps(w, first.get(w.fault_id), brokers, ended.get(w.fault_id)))
        out.append(w.model_copy(update={"phases": named, "unexplained_ms": rest}))
    return out
