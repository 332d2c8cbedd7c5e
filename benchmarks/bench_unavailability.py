"""Client-visible unavailability after SIGKILL of a leader broker, with and without the Ray-based
failure detector, for ZooKeeper session timeouts of 2 s and 6 s (issue 5).

    .venv/bin/python -m benchmarks.bench_unavailability [--partitions 1000] [--kills 5] [--detector both|on|off]
        [--control-niceness -10 0] [--targets non-controller controller]
        [--faults kill-broker cut-replication] [--cut-s 10]

Each configuration is one chaos experiment (jobs/runner.py): 3 brokers, one topic of P partitions
with replication factor 3, acks=all with min.insync.replicas=2, one producer sending a record to
every partition in each call, back to back; a non-controller broker is SIGKILLed `--kills` times
(down for 3 s, then started anew), each kill once the cluster has recovered from the one before
(the controller has handled the kill, every replica is back in its ISR, leadership is rebalanced:
FaultSpec's after_recovery), so that each measures a failover of a fully replicated cluster. Per affected
partition (led by the victim, or with the victim in its ISR, which stalls acks=all until the
controller removes it): fault -> first acknowledged produce; also over
only the partitions that had a produce in flight at the fault (with a rate-limited load the others
send again only when the rate lets them, which the first figure counts as unavailability). Per
failover: fault -> detected (the controller's inbox has it), detected -> requests_acked (election,
ZooKeeper write, LeaderAndIsr/UpdateMetadata applied by every broker). The baseline, same run: the
acks=all produce latency of the same load away from the faults (records sent from 2 s before a fault
to 10 s after its end left out). With `--targets non-controller controller` the kills alternate between
a broker without the controller and the broker hosting the active controller (whose candidate dies
with it: a controller failover and a broker failure at once), each target's figures on a row of its
own. With `--faults kill-broker cut-replication` the faults alternate between a SIGKILL and a cut
of the same kind of broker off from every other broker for `--cut-s` (ZooKeeper kept; it lives and
leads on, its followers fall behind), and a row per fault kind compares them by one measure for
both: per partition, fault -> first acknowledgement of a record sent after the fault ("new write").
Every run's invariants are checked. Prints a Markdown table for BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from pathlib import Path

from actors.config import ControllerConfig
from actors.records import PRODUCED, Ack, JsonlReader, tp_key
from jobs import rundir
from jobs.experiment import Experiment, FaultSpec
from jobs.failovers import AckIndex, first_write_after, percentile, unavailability_ms
from jobs.local import embedded_zookeeper_and_ray
from jobs.rundir import FaultKind
from jobs.runner import run_experiment


def experiment(partitions: int, kills: int, session_timeout_ms: int, detector: bool, rate: float = 0,
               niceness: int = ControllerConfig().control_plane_niceness,
               targets: tuple[str, ...] = ("non-controller",),
               faults: tuple[FaultKind, ...] = (FaultKind.KILL_BROKER,), cut_s: float = 10.0) -> Experiment:
    spacing = 14.0 + (0 if detector else 2 * session_timeout_ms / 1000)  # down 3 s, back, leaders back
    if FaultKind.CUT_REPLICATION in faults:
        spacing += cut_s
    return Experiment(
        name=f"unavailability-{'ray' if detector else 'zk'}-{session_timeout_ms}", brokers=3,
        session_timeout_ms=session_timeout_ms, detector=detector,
        broker={"min_insync_replicas": 2},
        controller={"leader_imbalance_check_interval_seconds": 3, "control_plane_niceness": niceness},
        topics=[{"name": "load", "partitions": partitions, "replication_factor": 3}],
        load={"producers": 1, "rate": rate, "acks": "all", "consumers": 0},
        schedule=[FaultSpec(at_s=5 + i * spacing, fault=faults[i % len(faults)], target=targets[i % len(targets)],
                            seconds=cut_s if faults[i % len(faults)] is FaultKind.CUT_REPLICATION else 3,
                            after_recovery=True) for i in range(kills)],
        duration_s=5 + kills * spacing, settle_s=60, seed=5)


def measure(run_dir: Path, victims: dict[int, str] | None = None) -> list[dict]:
    """The run's figures, a row per kind of fault and victim (`victims`: fault id -> the target it was
    given)."""
    reader = JsonlReader(run_dir)
    victims = victims or {}
    faults = list(reader.lines(rundir.FAULTS, rundir.FaultRecord))
    kinds = {f.fault_id: f.kind for f in faults}
    records = [f for f in reader.lines(rundir.FAILOVERS, rundir.FailoverRecord) if f.fault_kind in kinds.values()]
    summary = reader.document(rundir.SUMMARY, rundir.Summary)
    acks = list(reader.lines(PRODUCED, Ack))
    index = AckIndex(acks)
    steady = sorted(a.acked_ms - a.sent_ms for a in acks
                    if not any(f.injected_ms - 2_000 <= a.sent_ms < (f.ended_ms or f.injected_ms) + 10_000 for f in faults))
    rows = []
    for kind, victim in sorted({(f.kind, victims.get(f.fault_id, "non-controller")) for f in faults}):
        these = [f for f in faults if f.kind is kind and victims.get(f.fault_id, "non-controller") == victim]
        new_write = sorted(ok - f.injected_ms for f in these
                           for ok in first_write_after(f.injected_ms, index, list(index.points)).values())
        failovers = [f for f in records if f.fault_id in {t.fault_id for t in these}]
        carriers = [f for f in failovers if f.first_produce_ok_ms]  # one per fault: its recoveries
        down = sorted(unavailability_ms(carriers))
        handled = [f for f in failovers if f.kind == "broker_failure"] or failovers
        detect = sorted(f.detected_ms - f.fault_injected_ms for f in handled)
        process = sorted(f.requests_acked_ms - f.detected_ms for f in handled if f.requests_acked_ms)
        rate = [f.load.produce_rate for f in carriers]
        fault_times = [f.fault_injected_ms for f in carriers]
        in_flight = [set() for _ in fault_times]  # per fault, the partitions with a produce in flight
        for ack in acks:
            for i, t in enumerate(fault_times):
                if ack.sent_ms < t <= ack.acked_ms:
                    in_flight[i].add(tp_key(ack.topic, ack.partition))
        busy = sorted(ok - f.fault_injected_ms for f, names in zip(carriers, in_flight)
                      for tp, ok in f.first_produce_ok_ms.items() if tp in names)
        rows.append({
            "fault": kind.value, "faults": len(these), "new_write_p50": percentile(new_write, 50),
            "new_write_p99": percentile(new_write, 99), "new_write_partitions": len(new_write),
            "victim": victim, "steady_p50": percentile(steady, 50), "steady_p99": percentile(steady, 99),
            "in_flight_partitions": len(busy), "in_flight_p50": percentile(busy, 50),
            "in_flight_p99": percentile(busy, 99), "failovers": len(carriers), "partitions": len(down),
            "unavailable_p50": percentile(down, 50), "unavailable_p99": percentile(down, 99),
            "detect_p50": percentile(detect, 50), "detect_max": detect[-1] if detect else None,
            "process_p50": percentile(process, 50), "process_max": process[-1] if process else None,
            "produce_rate": sum(rate) / len(rate) if rate else 0,
            "violations": sum(summary.check.invariants.values()) if summary else None, "run_dir": str(run_dir)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--timeouts", type=int, nargs="+", default=[2000, 6000])
    parser.add_argument("--rate", type=float, default=0, help="records/s; 0 streams as fast as acknowledged")
    parser.add_argument("--detector", choices=["both", "on", "off"], default="both")
    parser.add_argument("--control-niceness", type=int, nargs="+", default=[ControllerConfig().control_plane_niceness],
                        help="control_plane_niceness values to compare (below 0 needs root or CAP_SYS_NICE)")
    parser.add_argument("--targets", nargs="+", default=["non-controller"], choices=["non-controller", "controller"],
                        help="whom the kills hit, in turn: a broker without the controller, or the controller's")
    parser.add_argument("--faults", nargs="+", default=["kill-broker"], choices=["kill-broker", "cut-replication"],
                        help="the faults, in turn: SIGKILL, or a cut from every other broker (ZooKeeper kept)")
    parser.add_argument("--cut-s", type=float, default=10.0, help="how long a cut-replication lasts")
    parser.add_argument("--runs-dir", default=str(Path(tempfile.gettempdir()) / "kray-bench-runs"))
    args = parser.parse_args()
    rows = []
    with embedded_zookeeper_and_ray():  # every run joins this ZooKeeper and this Ray
        for timeout, detector, niceness in itertools.product(
                args.timeouts, {"both": (True, False), "on": (True,), "off": (False,)}[args.detector],
                args.control_niceness):
            exp = experiment(args.partitions, args.kills, timeout, detector, args.rate, niceness, tuple(args.targets),
                             tuple(FaultKind(f) for f in args.faults), args.cut_s)
            run_dir, _ = run_experiment(exp, args.runs_dir, progress=lambda line: None)
            victims = {i: str(f.target) for i, f in enumerate(exp.schedule, 1)}  # fault ids count from 1
            for measured in measure(run_dir, victims):
                row = {"session_timeout_ms": timeout, "detector": detector, "niceness": niceness, **measured}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("\n| session timeout | detector | control plane nice | fault | victim | faults | new write after the fault: "
          "partitions, p50 / p99 ms | failovers | partitions | unavailable p50 / p99 ms"
          " | detection p50 / max ms | detected -> acked p50 / max ms | produce rate at fault (records/s)"
          " | with a produce in flight: partitions, p50 / p99 ms | acks=all latency away from faults p50 / p99 ms"
          " | invariant violations |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        def pair(a: str, b: str) -> str:
            return f"{r[a]:.0f} / {r[b]:.0f}" if r[a] is not None else "-"
        print(f"| {r['session_timeout_ms'] / 1000:g} s | {'Ray' if r['detector'] else 'off (Kafka)'} | "
              f"{r['niceness']} | {r['fault']} | {r['victim']} | {r['faults']} | "
              f"{r['new_write_partitions']}, {pair('new_write_p50', 'new_write_p99')} | {r['failovers']} | {r['partitions']} | {pair('unavailable_p50', 'unavailable_p99')} | "
              f"{pair('detect_p50', 'detect_max')} | {pair('process_p50', 'process_max')} | "
              f"{r['produce_rate']:,.0f} | {r['in_flight_partitions']}, {pair('in_flight_p50', 'in_flight_p99')} | "
              f"{pair('steady_p50', 'steady_p99')} | {r['violations']} |")


if __name__ == "__main__":
    main()
