"""What a run adds up to, once its cluster is gone: the measures composed from its run directory
(failovers.jsonl, waits.jsonl, group_failovers.jsonl), the invariants checked, summary.json and the
timeline page (`summarise`), and the report that reads them back for people (`report`). Files only:
`kray experiment run` and the tests read a run's report without a cluster.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from actors.records import (
    BROKER_EVENTS,
    CONSUMED,
    GROUP_COMMITS,
    PRODUCE_ERRORS,
    PRODUCED,
    TIMELINES,
    Ack,
    BrokerEvent,
    Consumed,
    GroupCommit,
    RunReader,
    RunWriter,
    ProduceError,
    TimelineRecord,
    tp_key,
)
from coordination.zkdata import TopicPartition
from jobs.measures import failovers, group_failovers, partition_phases, rejoin, rundir, waits
from jobs.measures.check import check_run
from jobs.measures.phases import COORDINATOR_STEPS, PHASE_LABELS
from jobs.measures.rundir import FaultRecord
from jobs.measures.waits import percentile
from jobs.reports.timeline_page import write_timeline

FAULT_COLUMN = 34  # the summary's tables' first column: a fault's label (partition-hosts-majorities-ring, 31)

if TYPE_CHECKING:
    from jobs.experiments.experiment import Experiment


def summarise(run_dir: Path, exp: Experiment, started_ms: float, load_ended_ms: float,
              offsets: TopicPartition | None) -> rundir.Summary:
    """Composes, checks and writes what the run directory holds; its summary. `offsets`: the load
    group's partition of __consumer_offsets, None without a group."""
    reader, writer = RunReader(run_dir), RunWriter(run_dir)
    faults = list(reader.lines(rundir.FAULTS, FaultRecord))
    samples = []  # every acknowledged record's (source, sent, latency), from the same read that indexes them
    given = _given(reader, exp)

    def acks():
        for ack in reader.lines(PRODUCED, Ack):
            samples.append((waits.source_of(ack.record_id), ack.sent_ms, ack.acked_ms - ack.sent_ms))
            if ack.record_id in given:
                samples.append((rundir.Source.GROUP, ack.sent_ms, given[ack.record_id][1] - ack.sent_ms))
            yield ack
    records = failovers.compose(list(reader.lines(TIMELINES, TimelineRecord)), faults,
                                list(reader.lines(rundir.LOAD, rundir.LoadSample)), exp.session_timeout_ms,
                                exp.detector)
    writer.write(rundir.FAILOVERS, records)
    measured = waits.partition_waits(
        faults, waits.deliveries_of(acks(), reader.lines(PRODUCE_ERRORS, ProduceError), given),
        list(reader.lines(rundir.PARTITION_STATES, rundir.StateSample)), exp.horizon_s * 1000, load_ended_ms,
        final.assignments if (final := reader.document(rundir.FINAL_STATE, rundir.FinalState)) else None)
    measured = partition_phases.explain(measured, faults, records, reader.lines(BROKER_EVENTS, BrokerEvent))
    writer.write(rundir.WAITS, measured)
    if offsets is not None:
        writer.write(rundir.GROUP_FAILOVERS, group_failovers.compose(
            faults, list(reader.lines(rundir.PARTITION_STATES, rundir.StateSample)),
            reader.lines(BROKER_EVENTS, BrokerEvent), reader.lines(GROUP_COMMITS, GroupCommit), measured,
            exp.load.group, tp_key(offsets.topic, offsets.partition), exp.horizon_s * 1000, exp.detector))
    check = check_run(run_dir)
    away = waits.latency_away(samples, faults)
    latency = sorted(latency for source, _, latency in samples if source is rundir.Source.LOAD)
    summary = rundir.Summary(
        run_id=run_dir.name, experiment=exp.name, started_ms=started_ms, ended_ms=time.time() * 1000,
        faults=len(faults), failovers=len(records), acked=check.counts.get("acked", 0),
        consumed=check.counts.get("consumed_live", 0), load_ended_ms=load_ended_ms,
        waits={source: waits.stats((w for w in measured if w.source is source and waits.touched(w)), away[source])
               for source in rundir.Source},
        produce_latency_ms_p50=percentile(latency, 50), produce_latency_ms_p99=percentile(latency, 99),
        malformed_lines={**reader.malformed, **check.malformed_lines}, check=check)
    writer.document(rundir.SUMMARY, summary)
    writer.close()
    write_timeline(run_dir)
    return summary


def _given(reader: RunReader, exp: Experiment) -> dict[str, tuple[str, float]]:
    """Each record the load's group was given: its partition and when a member was first given it."""
    out: dict[str, tuple[str, float]] = {}
    if not exp.load.group_members:
        return out
    for c in reader.lines(CONSUMED, Consumed):
        if c.group == exp.load.group and not c.final:
            at = out.get(c.record_id)
            if at is None or c.ts_ms < at[1]:
                out[c.record_id] = (tp_key(c.topic, c.partition), c.ts_ms)
    return out


def report(run_dir: Path) -> str:
    """What a run did, for people: its failovers phase by phase (the controller's part), what the client
    waited through each fault (recovery and worst wait, the load's and the probes'), and its summary
    with the invariant checks made when it ended (not made again: they read every record)."""
    reader = RunReader(run_dir)
    summary = reader.document(rundir.SUMMARY, rundir.Summary)
    faults = {f.fault_id: f for f in reader.lines(rundir.FAULTS, FaultRecord)}
    lines = [f"{'failover':<24}{'fault':<{FAULT_COLUMN}}{'detect':>8}{'queue':>7}{'zk':>7}{'acked':>8}{'partitions':>11}"]

    def ms(a: float | None, b: float | None) -> str:
        return f"{a - b:.0f}" if a is not None and b is not None else "-"
    for f in reader.lines(rundir.FAILOVERS, rundir.FailoverRecord):
        fault = faults.get(f.fault_id)
        lines.append(f"{f.kind + ' ' + ','.join(map(str, f.brokers)):<24}{fault.label if fault else '(none)':<{FAULT_COLUMN}}"
                     f"{ms(f.detected_ms, f.fault_injected_ms):>8}{ms(f.processing_started_ms, f.detected_ms):>7}"
                     f"{ms(f.zk_written_ms, f.processing_started_ms):>7}{ms(f.requests_acked_ms, f.detected_ms):>8}"
                     f"{f.load.partitions_affected:>11}")
    lines += ["", "What the client waited, per fault: the partitions it touched (led or followed by its broker, or "
              "all for a fault with no broker), and its bystanders' worst wait",
              f"{'fault':<{FAULT_COLUMN}}{'source':<7}{'touched':>8}{'censored':>9}{'recovery p50/p99/max ms':>26}"
              f"{'worst wait p50/p99/max ms':>28}{'others p99/max':>16}"]
    measured = list(reader.lines(rundir.WAITS, rundir.PartitionWait))
    latency_p99 = {source: st.latency_away_ms_p99 for source, st in summary.waits.items()} if summary else {}
    for (fault_id, source), group in waits.by_fault(measured).items():
        fault = faults.get(fault_id)
        mine = waits.stats(w for w in group if waits.touched(w))
        others = waits.stats(w for w in group if not waits.touched(w))
        lines.append(f"{fault.label if fault else fault_id:<{FAULT_COLUMN}}{source.value:<7}{mine.partitions:>8}{mine.censored:>9}"
                     f"{_three(mine.recovery_ms_p50, mine.recovery_ms_p99, mine.recovery_ms_max):>26}"
                     f"{_three(mine.worst_wait_ms_p50, mine.worst_wait_ms_p99, mine.worst_wait_ms_max):>28}"
                     f"{_fmt(others.worst_wait_ms_p99) + ' / ' + _fmt(others.worst_wait_ms_max):>16}")
    lines += ["", "Where the recovery went, per fault: each phase's mean ms over the partitions it touched "
              "(jobs/measures/partition_phases.py), the unexplained rest and its share of the recovery of the partitions "
              "that were unavailable (recovered, slower than the source's p99 latency away from the faults)"]
    short = PHASE_LABELS
    lines.append(f"{'fault':<{FAULT_COLUMN}}{'source':<7}{'recovery':>9}" + "".join(f"{n:>7}" for n in short.values())
                 + f"{'rest':>8}{'share':>7}")
    for (fault_id, source), group in waits.by_fault(measured).items():
        mine = [w for w in group if waits.touched(w)]
        if not mine:
            continue
        fault = faults.get(fault_id)
        share = waits.unexplained_share(mine, latency_p99)
        lines.append(f"{fault.label if fault else fault_id:<{FAULT_COLUMN}}{source.value:<7}"
                     f"{sum(w.recovery_ms for w in mine) / len(mine):>9.0f}"
                     + "".join(f"{sum(w.phases.get(p, 0.0) for w in mine) / len(mine):>7.0f}" for p in short)
                     + f"{sum(w.unexplained_ms or 0.0 for w in mine) / len(mine):>8.0f}"
                     + (f"{share:>7.0%}" if share is not None else f"{'-':>7}"))
    coordinators = list(reader.lines(rundir.GROUP_FAILOVERS, rundir.GroupFailoverRecord))
    if coordinators:
        lines += ["", "The consumer group's coordinator through each fault on its broker, ms after the fault "
                  "(jobs/measures/group_failovers.py): its offsets partition led again, the group loaded, FindCoordinator "
                  "answered, the members rejoined ('-' too when no rebalance was needed), a commit stored, the "
                  "first record sent after the fault consumed, every partition's",
                  f"{'fault':<{FAULT_COLUMN}}{'group':<14}{'coordinator':>12}" + "".join(f"{n:>11}" for n in COORDINATOR_STEPS.values())]
        for g in coordinators:
            fault = faults.get(g.fault_id)
            moved = f"{g.coordinator}->{g.new_coordinator if g.new_coordinator is not None else '?'}"
            lines.append(f"{fault.label if fault else g.fault_id:<{FAULT_COLUMN}}{g.group[:13]:<14}{moved:>12}" + "".join(
                f"{_fmt(None if getattr(g, step) is None else getattr(g, step) - g.fault_injected_ms):>11}"
                for step in COORDINATOR_STEPS))
    back = rejoin.of_run(reader, list(faults.values()), summary.ended_ms if summary else float("inf"))
    if back:
        lines += ["", "Back in the ISRs it left, per fault: from the broker's registration to the last leader's "
                  "expansion taking it back (jobs/measures/rejoin.py)",
                  f"{'fault':<{FAULT_COLUMN}}{'broker':>7}{'left':>7}{'rejoined':>9}{'p50 ms':>8}{'all back ms':>12}"]
        for r in back:
            label = faults[r.fault_id].label
            p50 = percentile(r.rejoined_ms, 50)
            lines.append(f"{label:<{FAULT_COLUMN}}{r.broker_id:>7}{r.out_of_isr:>7}{len(r.rejoined_ms):>9}{_fmt(p50):>8}"
                         f"{_fmt(r.last_ms) if r.all_back else 'not all':>12}")
    if summary is not None:
        lines.append(f"\n{summary.faults} faults, {summary.failovers} failovers, {summary.acked:,} records "
                     f"acknowledged, {summary.consumed:,} consumed live; produce latency p50 "
                     f"{_fmt(summary.produce_latency_ms_p50)} ms, p99 {_fmt(summary.produce_latency_ms_p99)} ms")
        for source, st in summary.waits.items():
            lines.append(f"{source.value}: {st.partitions:,} partition-faults touched, {st.censored} censored; recovery "
                         f"p50/p99/max {_three(st.recovery_ms_p50, st.recovery_ms_p99, st.recovery_ms_max)} ms; "
                         f"worst wait p50/p99/max {_three(st.worst_wait_ms_p50, st.worst_wait_ms_p99, st.worst_wait_ms_max)} ms")
        lines.append(summary.check.render())
    else:
        lines.append(f"\nNo readable {rundir.SUMMARY}: `kray check {run_dir}` checks the invariants")
    lines.append(f"Run directory: {run_dir}")
    if (run_dir / rundir.TIMELINE).exists():
        lines.append(f"Timeline: {run_dir / rundir.TIMELINE} (open it in a browser)")
    return "\n".join(lines)


def _three(*values: float | None) -> str:
    return " / ".join(map(_fmt, values))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
