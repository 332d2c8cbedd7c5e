"""What a client waits through each fault the kernel makes between hosts, against the same fault made in a
process or by the user-space links, in the same run (issue 44).

    .venv/bin/python -m benchmarks.bench_hosts [--runs 1] [--keep]     (as root)

Brings up five hosts of their own with a cluster across them (`kray hosts up 5 --cluster`, under a prefix
and subnet of its own, krb on 10.82.0.0/24, in a KRAY_HOME of its own), runs experiments/hosts.yaml on h1
`--runs` times, and takes each run's figures as bench_unavailability does (`measure`: per fault kind and
source, the recovery and worst wait over the partitions the fault touched, the detection, each partition
phase's mean, the invariants), a fault kind's label naming the controller when it was the target. Each
host fault with a twin (a host's power loss and a process kill of the same broker, a host isolated and a
broker isolated by its links, Jepsen's halves and bridge over the hosts and over the links) is printed
beside it with the ratio of their recovery p50s. Prints a JSON line per row, then a Markdown table for
BENCHMARKS.md; the hosts go down at the end unless --keep.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from benchmarks.bench_unavailability import measure
from jobs.experiments.experiment import load_experiment
from jobs.measures.phases import PARTITION_PHASES

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = REPO / "experiments" / "hosts.yaml"
TWINS = {"host-power-loss": "kill-broker", "host-power-loss (controller)": "kill-broker (controller)",
         "isolate-host": "isolate-broker", "partition-hosts-halves": "split-brokers",
         "partition-hosts-bridge": "bridge-brokers"}


def labels() -> dict[int, str]:
    """Fault id -> its kind, and whether it struck the controller's broker (the schedule's order is its ids')."""
    schedule = sorted(load_experiment(EXPERIMENT).schedule, key=lambda f: f.at_s)
    return {i: f.fault.value + (" (controller)" if f.target == "controller" else "") for i, f in enumerate(schedule, 1)}


def run(runs: int, keep: bool) -> list[dict]:
    from jobs.hosts.cluster import start_cluster
    from jobs.hosts.layout import HostsLayout
    from jobs.hosts.netns import Hosts

    os.environ["KRAY_HOME"] = home = tempfile.mkdtemp(prefix="kray-bench-hosts-")
    hosts = Hosts(HostsLayout(count=5, prefix="krb", subnet="10.82.0.0/24", directory=Path(home) / "hosts"))
    rows = []
    try:
        hosts.up()
        start_cluster(hosts)
        h1 = hosts.layout.hosts[0]
        runs_dir = hosts.layout.home(h1) / "runs"
        for i in range(runs):
            before = set(runs_dir.iterdir()) if runs_dir.exists() else set()
            done = hosts.run(h1, ["kray", "experiment", "run", str(EXPERIMENT), "--runs-dir", "/root/runs"],
                             capture_output=True, text=True, timeout=3600)
            made = sorted(set(runs_dir.iterdir()) - before) if runs_dir.exists() else []
            if len(made) != 1:
                print(f"run {i + 1} exited {done.returncode} and made {len(made)} run directories: "
                      f"{done.stdout[-2000:]}{done.stderr[-2000:]}", flush=True)
                continue
            if done.returncode != 0:  # its invariants broken, say: measured all the same, the row says which
                print(f"run {i + 1} exited {done.returncode}: {done.stdout[-3000:]}", flush=True)
            for row in measure(made[0], labels()):
                row["run"] = i + 1
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        if not keep:
            hosts.down()
    return rows


def print_table(rows: list[dict]) -> None:
    def ms(v) -> str:
        return "-" if v is None else f"{v:,.0f}"

    order = [label for host, twin in TWINS.items() for label in (host, twin)]
    order += [r["fault"] for r in rows if r["fault"] not in order]
    short = {p: p[:-3].replace("_", " ") for p in PARTITION_PHASES}
    print("\n| run | fault | source | partitions (censored) | recovery p50 / p99 ms | x its twin's p50 | worst wait p99 "
          "ms | detection p50 / max ms | mean phases ms: " + ", ".join(short.values()) + " | violations |")
    print("|---" * 10 + "|")
    for r in sorted((r for r in rows if r["partitions"]), key=lambda r: (r["run"], order.index(r["fault"]),
                                                                      r["source"])):  # (no group here)
        twin = next((t for t in rows if t["run"] == r["run"] and t["source"] == r["source"]
                     and t["fault"] == TWINS.get(r["fault"])), None)
        ratio = f"{r['recovery_p50'] / twin['recovery_p50']:.2f}x" if twin and r["recovery_p50"] and \
            twin["recovery_p50"] else "-"
        phases = ", ".join(ms(v) for v in r["phases"].values())
        print(f"| {r['run']} | {r['fault']} | {r['source']} | {r['partitions']} ({r['censored']}) | "
              f"{ms(r['recovery_p50'])} / {ms(r['recovery_p99'])} | {ratio} | {ms(r['worst_p99'])} | "
              f"{ms(r['detect_p50'])} / {ms(r['detect_max'])} | {phases} | {r['violations']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="leave the hosts up (kray hosts down removes them)")
    args = parser.parse_args()
    print_table(run(args.runs, args.keep))


if __name__ == "__main__":
    main()
