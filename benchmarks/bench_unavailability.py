"""What a client waits through each kind of broker failure, per partition, with the controller's part and
each broker-side phase beside it (issues 5 and 29).

    .venv/bin/python -m benchmarks.bench_unavailability [--partitions 1000] [--kills 3] [--detector on|off|both]
        [--timeouts 2000] [--rate 0] [--brokers 3] [--kinds kill-broker controller-host restart-broker expire-broker-session
        pause-broker] [--control-niceness 0]

Each configuration is one chaos experiment (jobs/experiments/runner.py): `--brokers` brokers (3), one topic of P partitions with
replication factor 3, acks=all with min.insync.replicas=2, one producer streaming records to every
partition (`--rate 0`: back to back) and a probe producer beside it (one record in flight on each of 60
partitions). The fault kinds take turns, `--kills` of each, every fault once the cluster has recovered
from the one before (FaultSpec's after_recovery), each on a broker without the controller except
`controller-host`, which kills the broker hosting the active controller (its candidate dies with it: a
controller failover and a broker failure at once). A kill keeps the broker down 3 s; a pause lasts the
session timeout and 2 s more, so that the session expires (a SIGSTOP is seen only then).

Per fault kind and source (the load's records, the probes'), over the partitions the fault's broker led
or followed (jobs/measures/waits.py): the recovery (fault -> first acknowledgement of a record sent at or after
it) and the worst wait (the longest any record waited among those in flight at the fault or sent within
the horizon), p50 / p99, censored partitions counted; the worst wait after detection (less the fault ->
detected time of its failover: a pause is seen only when its session expires) p99 and its ratio to
kill-broker's in the same run (the target: at most 2); the recovery p50 role for role (the partitions the fault's
broker led, and those it followed) and its ratio to kill-broker's (issue 43's target for controller-host: at most
2); the controller's part per failover (fault ->
detected, detected -> requests acknowledged); each partition phase's mean (jobs/measures/phases.py:
PARTITION_PHASES) and the unexplained share of the recovery of the partitions slower than the source's
p99 latency away from the faults; for each fault whose broker comes back, how
long after it registered it was back in every ISR it left (jobs/measures/rejoin.py). The baseline, same run: the acks=all
produce latency away from the faults (records sent from 2 s before a fault to 10 s after its end left
out). Every run's invariants are checked. Prints a Markdown table for BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from pathlib import Path

from actors.config import ControllerConfig
from actors.records import PRODUCED, Ack, RunReader
from jobs.measures import rejoin, rundir
from jobs.experiments.experiment import Experiment, FaultSpec
from jobs.measures.failovers import of_faults
from jobs.experiments.local import embedded_zookeeper_and_ray
from jobs.measures.phases import PARTITION_PHASES
from jobs.measures.rundir import FaultKind, PartitionWait, Role, Source
from jobs.experiments.runner import run_experiment
from jobs.measures.waits import latency_away, percentile, source_of, touched, unexplained_share

KINDS = {  # label -> (fault, target)
    "kill-broker": (FaultKind.KILL_BROKER, "non-controller"),
    "controller-host": (FaultKind.KILL_BROKER, "controller"),
    "restart-broker": (FaultKind.RESTART_BROKER, "non-controller"),
    "expire-broker-session": (FaultKind.EXPIRE_BROKER_SESSION, "non-controller"),
    "pause-broker": (FaultKind.PAUSE_BROKER, "non-controller"),
    "cut-replication": (FaultKind.CUT_REPLICATION, "non-controller"),
}
BASELINE = "kill-broker"


def scan_phase(i: int) -> float:
    """A fault's offset within a second, spread evenly over the run's faults (the golden ratio's steps): a
    client that waits for librdkafka's once-a-second topic scan waits as long as the fault's place in that
    second says, and faults exactly 14 s apart all fell at the same place (every controller-host kill's led
    probes at ~1,000 ms, or ~2,000 when a second scan was needed)."""
    return (i * 0.618034) % 1


def experiment(partitions: int, kills: int, session_timeout_ms: int, detector: bool, kinds: list[str],
               rate: float = 0, niceness: int = ControllerConfig().control_plane_niceness, brokers: int = 3
               ) -> Experiment:
    pause_s = session_timeout_ms / 1000 + 2
    spacing = 14.0 + (0 if detector else 2 * session_timeout_ms / 1000) + (pause_s if "pause-broker" in kinds else 0)
    faults = [kinds[i % len(kinds)] for i in range(kills * len(kinds))]
    return Experiment(
        name=f"unavailability-{'ray' if detector else 'zk'}-{session_timeout_ms}", brokers=brokers,
        session_timeout_ms=session_timeout_ms, detector=detector,
        broker={"min_insync_replicas": 2},
        controller={"leader_imbalance_check_interval_seconds": 3, "control_plane_niceness": niceness},
        topics=[{"name": "load", "partitions": partitions, "replication_factor": 3}],
        load={"producers": 1, "rate": rate, "acks": "all", "consumers": 0},
        schedule=[FaultSpec(at_s=5 + i * spacing + scan_phase(i), fault=KINDS[k][0], target=KINDS[k][1],
                            seconds=pause_s if k == "pause-broker" else 10 if k == "cut-replication" else 3,
                            after_recovery=True) for i, k in enumerate(faults)],
        duration_s=5 + len(faults) * spacing, settle_s=60, horizon_s=30, seed=5)


def measure(run_dir: Path, labels: dict[int, str]) -> list[dict]:
    """The run's figures, a row per fault kind (`labels`: fault id -> its KINDS label) and source."""
    reader = RunReader(run_dir)
    faults = {f.fault_id: f for f in reader.lines(rundir.FAULTS, rundir.FaultRecord)
              if not f.detail.startswith("failed")}
    handled = {i: f for i, f in of_faults(reader.lines(rundir.FAILOVERS, rundir.FailoverRecord)).items()
               if i in faults}
    detection = {i: f.detected_ms - f.fault_injected_ms for i, f in handled.items()}
    waits = [w for w in reader.lines(rundir.WAITS, PartitionWait) if touched(w) and w.fault_id in faults]
    summary = reader.document(rundir.SUMMARY, rundir.Summary)
    back = {r.fault_id: r for r in rejoin.of_run(reader, list(faults.values()),
                                                 summary.ended_ms if summary else float("inf"))}
    away = latency_away(((source_of(a.record_id), a.sent_ms, a.acked_ms - a.sent_ms)
                         for a in reader.lines(PRODUCED, Ack)), list(faults.values()))
    steady = away[Source.LOAD]
    latency_p99 = {s: percentile(v, 99) for s, v in away.items()}
    rows = []
    for label, source in itertools.product(dict.fromkeys(labels[i] for i in sorted(faults)), Source):
        ids = {i for i in faults if labels[i] == label}
        mine = [w for w in waits if w.fault_id in ids and w.source is source]
        recovery = sorted(w.recovery_ms for w in mine)
        by_role = {role.value: percentile(sorted(w.recovery_ms for w in mine if w.role is role), 50)
                   for role in (Role.LEADER, Role.FOLLOWER)}
        worst = sorted(w.worst_wait_ms for w in mine)
        after = sorted(w.worst_wait_ms - detection.get(w.fault_id, 0.0) for w in mine)
        these = [handled[i] for i in ids if i in handled]
        detect = sorted(detection[f.fault_id] for f in these)
        process = sorted(f.requests_acked_ms - f.detected_ms for f in these if f.requests_acked_ms)
        rows.append({
            "fault": label, "source": source.value, "faults": len(ids), "partitions": len(mine),
            "censored": sum(w.recovery_censored for w in mine),
            "recovery_p50": percentile(recovery, 50), "recovery_p99": percentile(recovery, 99),
            "recovery_p50_by_role": by_role,
            "worst_p50": percentile(worst, 50), "worst_p99": percentile(worst, 99), "worst_max": worst[-1] if worst else None,
            "worst_after_detection_p99": percentile(after, 99),
            "detect_p50": percentile(detect, 50), "detect_max": detect[-1] if detect else None,
            "process_p50": percentile(process, 50), "process_max": process[-1] if process else None,
            "phases": {p: sum(w.phases.get(p, 0.0) for w in mine) / len(mine) if mine else None
                       for p in PARTITION_PHASES},
            "unexplained_share": unexplained_share(mine, latency_p99),
            "rejoined": [back[i].last_ms for i in sorted(ids) if i in back],  # None: not back in every ISR
            "steady_p50": percentile(steady, 50), "steady_p99": percentile(steady, 99),
            "violations": sum(summary.check.invariants.values()) if summary else None, "run_dir": str(run_dir)})
    for r in rows:  # the targets: each kind's p99 worst wait after detection, and its recovery p50 role for role
        base = next((b for b in rows if b["fault"] == BASELINE and b["source"] == r["source"]), None)  # at most 2x a kill's
        r["recovery_p50_ratio_by_role"] = {
            role: (p50 / base["recovery_p50_by_role"][role] if base and p50 is not None
                   and base["recovery_p50_by_role"][role] else None) for role, p50 in r["recovery_p50_by_role"].items()}
        r["ratio_to_kill"] = (r["worst_after_detection_p99"] / base["worst_after_detection_p99"]
                              if base and base["worst_after_detection_p99"] and r["worst_after_detection_p99"] is not None
                              else None)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=3, help="faults of each kind")
    parser.add_argument("--timeouts", type=int, nargs="+", default=[2000])
    parser.add_argument("--rate", type=float, default=0, help="records/s; 0 streams as fast as acknowledged")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--detector", choices=["both", "on", "off"], default="on")
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS),
                        default=["kill-broker", "controller-host", "restart-broker", "expire-broker-session",
                                 "pause-broker"])
    parser.add_argument("--control-niceness", type=int, nargs="+", default=[ControllerConfig().control_plane_niceness],
                        help="control_plane_niceness values to compare (below 0 needs root or CAP_SYS_NICE)")
    parser.add_argument("--runs-dir", default=str(Path(tempfile.gettempdir()) / "kray-bench-runs"))
    args = parser.parse_args()
    rows = []
    with embedded_zookeeper_and_ray():  # every run joins this ZooKeeper and this Ray
        for timeout, detector, niceness in itertools.product(
                args.timeouts, {"both": (True, False), "on": (True,), "off": (False,)}[args.detector],
                args.control_niceness):
            exp = experiment(args.partitions, args.kills, timeout, detector, args.kinds, args.rate, niceness,
                             args.brokers)
            run_dir, _ = run_experiment(exp, args.runs_dir, progress=lambda line: None)
            labels = {i: args.kinds[(i - 1) % len(args.kinds)] for i in range(1, len(exp.schedule) + 1)}
            for measured in measure(run_dir, labels):
                row = {"session_timeout_ms": timeout, "detector": detector, "niceness": niceness, **measured}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print_table(rows)


def print_table(rows: list[dict]) -> None:
    def pair(r: dict, a: str, b: str) -> str:
        return f"{r[a]:,.0f} / {r[b]:,.0f}" if r[a] is not None else "-"

    short = {p: p[:-3].replace("_", " ") for p in PARTITION_PHASES}
    print("\n| session timeout | detector | control plane nice | fault | source | faults | partitions (censored) | recovery p50 / p99 ms "
          "| worst wait p50 / p99 / max ms | worst wait after detection p99 ms (x kill-broker's) | detection p50 / "
          "max ms | detected -> acked p50 / max ms | mean phases ms: " + ", ".join(short.values()) +
          " | unexplained | recovery p50 led / followed ms (x kill-broker's) | back in every ISR it left, ms after registering | acks=all latency away from faults p50 / "
          "p99 ms | invariant violations |")
    print("|---" * 17 + "|")
    for r in rows:
        ratio = f" ({r['ratio_to_kill']:.2f}x)" if r["ratio_to_kill"] is not None else ""
        phases = ", ".join("-" if v is None else f"{v:,.0f}" for v in r["phases"].values())
        worst = f"{pair(r, 'worst_p50', 'worst_p99')} / {r['worst_max']:,.0f}" if r["worst_max"] is not None else "-"
        after = f"{r['worst_after_detection_p99']:,.0f}{ratio}" if r["worst_after_detection_p99"] is not None else "-"
        share = f"{r['unexplained_share']:.0%}" if r["unexplained_share"] is not None else "-"
        roles = " / ".join("-" if p50 is None else f"{p50:,.0f}" + (f" ({x:.2f}x)" if x is not None else "")
                           for p50, x in zip(r["recovery_p50_by_role"].values(),
                                             r["recovery_p50_ratio_by_role"].values()))
        print(f"| {r['session_timeout_ms'] / 1000:g} s | {'Ray' if r['detector'] else 'off (Kafka)'} | {r['niceness']} | "
              f"{r['fault']} | "
              f"{r['source']} | {r['faults']} | {r['partitions']} ({r['censored']}) | "
              f"{pair(r, 'recovery_p50', 'recovery_p99')} | {worst} | {after} | {pair(r, 'detect_p50', 'detect_max')} | "
              f"{pair(r, 'process_p50', 'process_max')} | {phases} | {share} | {roles} | "
              f"{', '.join('not all' if ms is None else f'{ms:,.0f}' for ms in r['rejoined']) or '-'} | "
              f"{pair(r, 'steady_p50', 'steady_p99')} | {r['violations']} |")


if __name__ == "__main__":
    main()
