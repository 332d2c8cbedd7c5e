"""The group coordinator's failover (issue 32): a chaos experiment with a consumer group of three beside
a producing load, whose schedule SIGKILLs the broker coordinating the group, again and again (each kill
once the cluster has recovered from the last), the Ray detector on.

    .venv/bin/python -m benchmarks.bench_group_failover [--kills 8] [--partitions 12] [--rate 300]

Everything is the runner's (jobs/experiments/runner.py): the group's steps per kill from group_failovers.jsonl
(offsets partition led again, group loaded, FindCoordinator answered, members rejoined, a commit
stored, first record consumed, every partition consumed), and from waits.jsonl, per partition and
kill, the group's recovery (fault -> the first record sent at or after the fault that the group was
given) next to the producers' (fault -> the first acknowledgement of such a record) in the same run;
the partitions the kill touched (led or followed by the coordinator's broker) and all. Defaults are
Kafka's and librdkafka's: a 50-partition, 3-replica __consumer_offsets, group.initial.rebalance.delay.ms
3000, the members' session.timeout.ms and heartbeat.interval.ms as librdkafka sets them. Every invariant
of the run, the group's among them, is checked too.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile

from jobs.measures import rundir
from jobs.experiments.experiment import Experiment, FaultSpec
from jobs.measures.phases import COORDINATOR_STEPS
from jobs.measures.rundir import FaultKind, Source
from jobs.experiments.runner import run_experiment
from jobs.measures.waits import percentile, touched


def experiment(kills: int, partitions: int, rate: float, spacing_s: float) -> Experiment:
    return Experiment(
        name="group-failover", brokers=3, session_timeout_ms=6000, detector=True,
        controller={"leader_imbalance_check_interval_seconds": max(1, int(spacing_s / 2))},  # the sweep's
        topics=[{"name": "orders", "partitions": partitions, "replication_factor": 3}],
        load={"producers": 1, "rate": rate, "consumers": 0, "group_members": 3},
        schedule=[FaultSpec(at_s=3 + i * spacing_s, fault=FaultKind.KILL_BROKER, target="coordinator", seconds=3,
                            after_recovery=True) for i in range(kills)],
        duration_s=3 + kills * spacing_s, horizon_s=spacing_s, settle_s=30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_group_failover", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--rate", type=float, default=300, help="records/s over all partitions")
    parser.add_argument("--spacing-s", type=float, default=10)
    parser.add_argument("--runs-dir", default=tempfile.mkdtemp(prefix="bench-group-failover-"))
    args = parser.parse_args(argv)
    run_dir, summary = run_experiment(experiment(args.kills, args.partitions, args.rate, args.spacing_s),
                                      args.runs_dir, progress=lambda line: print(line, flush=True))
    moved = [rundir.GroupFailoverRecord.model_validate_json(line)
             for line in (run_dir / rundir.GROUP_FAILOVERS).read_text().splitlines()]
    waits = [rundir.PartitionWait.model_validate_json(line) for line in (run_dir / rundir.WAITS).read_text().splitlines()]
    kills = {g.fault_id for g in moved}

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"
    print(f"\nmachine: {platform.node()}, {os.cpu_count()} cores, python {platform.python_version()}")
    print(f"{args.partitions} partitions, {args.rate:.0f} records/s, a group of 3, 3 brokers, Ray detector on; "
          f"{len(moved)} kills of the coordinator's broker; ms after the SIGKILL")
    print("| kill | coordinator | " + " | ".join(COORDINATOR_STEPS.values()) + " |")
    print("|---|---|" + "---|" * len(COORDINATOR_STEPS))
    for g in moved:
        print(f"| {g.fault_id} | {g.coordinator} -> {ms(g.new_coordinator)} | " + " | ".join(
            ms(None if getattr(g, s) is None else getattr(g, s) - g.fault_injected_ms) for s in COORDINATOR_STEPS) + " |")
    print("\n| partitions | source | n | censored | recovery p50 | p99 | max |")
    print("|---|---|---|---|---|---|---|")
    for label, keep in (("touched", touched), ("all", lambda w: True)):
        for source in (Source.GROUP, Source.LOAD, Source.PROBE):
            mine = sorted(w.recovery_ms for w in waits if w.fault_id in kills and w.source is source and keep(w))
            censored = sum(w.recovery_censored for w in waits if w.fault_id in kills and w.source is source and keep(w))
            print(f"| {label} | {source.value} | {len(mine)} | {censored} | {ms(percentile(mine, 50))} | "
                  f"{ms(percentile(mine, 99))} | {ms(mine[-1] if mine else None)} |")
    broken = {k: v for k, v in summary.check.invariants.items() if v}
    print(f"\ninvariants: {'every one holds' if not broken else json.dumps(broken)}; run directory: {run_dir}")


if __name__ == "__main__":
    main()
