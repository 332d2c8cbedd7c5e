"""What the client waited through each fault, partition by partition: the two measures of a failover
as a client sees it, under the same names everywhere (summary, CLI, Spark report, timeline page).

- recovery: from the fault to the first acknowledgement of a record sent at or after it, the moment
  the partition took new writes again, whatever the fault (a response on its way when a leader died
  was sent before, so it does not count);
- worst wait: the longest any record stayed unacknowledged, among those in flight at the fault or
  sent within the horizon after it.

Each fault is observed from its injection until the horizon (`Experiment.horizon_s`) has passed,
and no further than the next fault (whose own rows then take over) or the end of the load. A
partition that has not recovered by then is censored: its recovery is at least that long, and it is
counted, never dropped. A record still unacknowledged at the end of the observation (or whose
delivery failed) waited at least until then: its partition's worst wait is censored too.

Every fault is measured, whatever its kind, over every partition written before it that had records
in flight or sent in its window: `Role` says whether the fault's broker led it (the last ZooKeeper
sample before the fault), followed it (one of its replicas), or neither; every partition is CLUSTER
for a fault with no broker or one on the active controller alone. The load's records and the probes' are measured apart
(`Source`): a probe has one record in flight per partition, so its figures are the partition's, not
the load client's queue. A run with a consumer group measures the group as a third source, each
record's delivery being its giving to a member: its recovery is the first record sent at or after the
fault that the group was given, end to end through the producer, the leader and the group's
coordinator and members. Pure: deliveries in, PartitionWait out.
"""
from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from typing import Iterable, NamedTuple

from actors.records import PROBE_PRODUCER, tp_key
from jobs.measures.rundir import CONTROLLER_FAULTS, FaultRecord, PartitionWait, Role, Source, StateSample, WaitStats

RATE_WINDOW_MS = 1000.0  # a partition's load at the fault: its acknowledgements over the second before


class Delivery(NamedTuple):
    sent_ms: float
    acked_ms: float  # math.inf: never acknowledged (its delivery failed)
    done_ms: float  # when the client heard: its acknowledgement, or its failure
    offset: int | None = None  # where the leader appended it (None: failed, or not told)


class Measured(NamedTuple):
    observed_ms: float
    recovery_ms: float
    recovery_censored: bool
    recovery_offset: int | None
    recovery_sent_ms: float | None
    worst_wait_ms: float
    worst_wait_censored: bool
    records: int
    rate: float


def source_of(record_id: str) -> Source:
    return Source.PROBE if record_id.rpartition("-")[0] == PROBE_PRODUCER else Source.LOAD


class Deliveries:
    """Every record's send and acknowledgement (or failure), per (source, partition), in send order."""

    def __init__(self, rows: Iterable[tuple]):
        """rows: (partition, record id or its Source, sent ms, acked ms or math.inf, acked or failed ms[, offset])."""
        by: dict[tuple[Source, str], list[Delivery]] = defaultdict(list)
        for tp, record_id, *delivery in rows:
            by[(record_id if isinstance(record_id, Source) else source_of(record_id), tp)].append(Delivery(*delivery))
        self.deliveries = {key: sorted(ds) for key, ds in by.items()}
        self.sent = {key: [d.sent_ms for d in ds] for key, ds in self.deliveries.items()}
        self.acked = {key: sorted(d.acked_ms for d in ds if d.acked_ms < math.inf) for key, ds in self.deliveries.items()}


def roles(fault: FaultRecord, states: list[StateSample], assignments: dict[str, list[int]]) -> dict[str, Role]:
    """Each partition's role in the fault: LEADER if the fault's broker led it at the last sample before the
    fault (`states` in time order); FOLLOWER if the broker is one of its replicas (`assignments`) or was in
    its sampled ISR; absent (OTHER) if neither. Empty for a fault with no broker or on the controller alone
    (every partition is then CLUSTER)."""
    if fault.target is None or fault.kind in CONTROLLER_FAULTS:
        return {}
    i = bisect.bisect_right([s.ts_ms for s in states], fault.injected_ms)
    sampled = states[i - 1].partitions if i else {}
    out = {tp: Role.FOLLOWER for tp, replicas in assignments.items() if fault.target in replicas}
    out |= {tp: Role.FOLLOWER for tp, p in sampled.items() if fault.target in p.isr}
    return out | {tp: Role.LEADER for tp, p in sampled.items() if p.leader == fault.target}


def measure(fault: FaultRecord, ds: list[Delivery], sent: list[float], acked: list[float], horizon_ms: float,
            until_ms: float) -> Measured | None:
    """One partition's deliveries through `fault`, observed until `until_ms` (the next fault or the load's
    end) and at most `horizon_ms`; None when no record was in flight at the fault or sent within its
    window, or none was sent before the fault (a partition created after it has nothing to recover)."""
    t0 = fault.injected_ms
    end = min(until_ms, t0 + horizon_ms)  # the window in which records count and recovery is looked for
    first = bisect.bisect_left(sent, t0)
    if first == 0 or end <= t0:
        return None
    start = first
    while start > 0 and ds[start - 1].done_ms > t0:  # in flight at the fault (answered in send order)
        start -= 1
    last = bisect.bisect_left(sent, end)
    if start == last:
        return None
    recovery, offset, sent_ms = min(((d.acked_ms, d.offset, d.sent_ms) for d in ds[first:last]),
                                    default=(math.inf, None, None), key=lambda a: a[0])  # acked >= sent: none later
    recovered = recovery <= end
    worst, open_ended = 0.0, False
    for d in ds[start:last]:
        worst = max(worst, min(d.done_ms, until_ms) - d.sent_ms)  # a wait past the next fault is that fault's
        open_ended |= d.acked_ms > until_ms  # still waiting then, or never acknowledged
    rate = (bisect.bisect_left(acked, t0) - bisect.bisect_left(acked, t0 - RATE_WINDOW_MS)) * 1000 / RATE_WINDOW_MS
    return Measured(end - t0, (recovery if recovered else end) - t0, not recovered, offset if recovered else None,
                    sent_ms if recovered else None, worst, open_ended, last - start, rate)


def partition_waits(faults: list[FaultRecord], deliveries: Deliveries, states: list[StateSample],
                    horizon_ms: float, load_ended_ms: float,
                    assignments: dict[str, list[int]] | None = None) -> list[PartitionWait]:
    """Every partition through every fault that struck (a fault that failed to inject is left out);
    `assignments`: partition -> its replicas."""
    faults = sorted((f for f in faults if not f.detail.startswith("failed")), key=lambda f: f.injected_ms)
    states = sorted(states, key=lambda s: s.ts_ms)
    out = []
    for i, fault in enumerate(faults):
        until = min([f.injected_ms for f in faults[i + 1:]] + [load_ended_ms])
        role_of = roles(fault, states, assignments or {})
        default = Role.CLUSTER if fault.target is None or fault.kind in CONTROLLER_FAULTS else Role.OTHER
        for (source, tp), ds in sorted(deliveries.deliveries.items()):
            m = measure(fault, ds, deliveries.sent[(source, tp)], deliveries.acked[(source, tp)], horizon_ms, until)
            if m is not None:
                out.append(PartitionWait(fault_id=fault.fault_id, fault_kind=fault.kind, partition=tp, source=source,
                                         role=role_of.get(tp, default), fault_ms=fault.injected_ms, **m._asdict()))
    return out


def touched(w: PartitionWait) -> bool:
    """A partition the fault's broker led or followed, or any partition of a fault with no broker: the
    ones the summary's figures are over (the others show what a fault cost its bystanders)."""
    return w.role is not Role.OTHER


def by_fault(waits: Iterable[PartitionWait]) -> dict[tuple[int, Source], list[PartitionWait]]:
    """Waits grouped by (fault id, source), in fault order, the load before the probes."""
    out: dict[tuple[int, Source], list[PartitionWait]] = defaultdict(list)
    for w in sorted(waits, key=lambda w: (w.fault_ms, w.fault_id, w.source is Source.PROBE)):
        out[(w.fault_id, w.source)].append(w)
    return out


def unexplained_share(waits: Iterable[PartitionWait], latency_p99: dict[Source, float | None] | None = None
                      ) -> float | None:
    """The unexplained part of the recoveries of the partitions that were unavailable: recovered (a
    censored one has no rest to explain) and, given each source's latency away from the faults
    (`latency_p99`), slower than it (a recovery within the ordinary latency is no unavailability). None
    when there is none."""
    latency_p99 = latency_p99 or {}
    recovered = [w for w in waits if not w.recovery_censored and w.recovery_ms > (latency_p99.get(w.source) or 0)]
    total = sum(w.recovery_ms for w in recovered)
    return sum(w.unexplained_ms or 0.0 for w in recovered) / total if total else None


def latency_away(samples: Iterable[tuple[Source, float, float]], faults: list[FaultRecord], before_ms: float = 2_000,
                 after_ms: float = 10_000) -> dict[Source, list[float]]:
    """Each source's acknowledgement latencies, sorted, of the records sent away from the faults (not from
    `before_ms` before a fault to `after_ms` after its end): the ordinary latency a recovery compares with.
    `samples`: (source, sent ms, latency ms) of every acknowledged record."""
    windows = sorted((f.injected_ms - before_ms, (f.ended_ms or f.injected_ms) + after_ms) for f in faults)
    starts = [w[0] for w in windows]
    reach = list(itertools.accumulate((w[1] for w in windows), max))  # the latest end among windows so far
    out: dict[Source, list[float]] = {s: [] for s in Source}
    for source, sent, latency in samples:
        i = bisect.bisect_right(starts, sent)
        if i == 0 or reach[i - 1] <= sent:
            out[source].append(latency)
    return {s: sorted(v) for s, v in out.items()}


def stats(waits: Iterable[PartitionWait], latency_away_ms: list[float] | None = None) -> WaitStats:
    """`latency_away_ms`: the source's latencies away from the faults (`latency_away`), for its p99."""
    waits = list(waits)
    recovery = sorted(w.recovery_ms for w in waits)
    worst = sorted(w.worst_wait_ms for w in waits)
    return WaitStats(
        partitions=len(waits), censored=sum(w.recovery_censored for w in waits),
        recovery_ms_p50=percentile(recovery, 50), recovery_ms_p99=percentile(recovery, 99),
        recovery_ms_max=recovery[-1] if recovery else None,
        worst_wait_ms_p50=percentile(worst, 50), worst_wait_ms_p99=percentile(worst, 99),
        worst_wait_ms_max=worst[-1] if worst else None, latency_away_ms_p99=percentile(latency_away_ms or [], 99))


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile of sorted values, p in 0-100 (every p50/p99 of a run: its summary, its
    timeline page, the unavailability benchmark)."""
    if not values:
        return None
    return values[max(0, math.ceil(p / 100 * len(values)) - 1)]


def deliveries_of(acks, errors, given: dict[str, tuple[str, float]] | None = None) -> Deliveries:
    """Deliveries from acknowledgements (Ack) and failed deliveries (ProduceError); with `given` (record id ->
    its partition and when a member of the run's consumer group was first given it), each acknowledged record of a partition
    the group was given records of is a delivery to the group too (Source.GROUP), done when given (never:
    math.inf)."""
    given = given or {}
    read = {tp for tp, _ in given.values()} if given else set()

    def rows():
        for a in acks:
            tp = tp_key(a.topic, a.partition)
            yield tp, a.record_id, a.sent_ms, a.acked_ms, a.acked_ms, a.offset
            if tp in read:
                at = given[a.record_id][1] if a.record_id in given else math.inf
                yield tp, Source.GROUP, a.sent_ms, at, at, a.offset
        for e in errors:
            yield tp_key(e.topic, e.partition), e.record_id, e.sent_ms, math.inf, e.failed_ms
    return Deliveries(rows())
