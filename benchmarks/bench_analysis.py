"""Wall time of the Spark analysis (jobs/analysis.py, RayDP on a local Ray) for 10,000 and 1,000,000
partition rows (waits.jsonl lines: one partition through one fault), Spark's start-up timed
separately, beside the same aggregation in pandas/numpy in the same run (issues 6 and 29).

    .venv/bin/python -m benchmarks.bench_analysis [--rows 10000 1000000] [--runs 10] [--java-options=OPTS]

The rows are fabricated waits.jsonl lines (rundir.PartitionWait's format), 100 partitions per fault,
with a failovers.jsonl line per fault (rundir.FailoverRecord's), spread over `--runs` run directories in
a temporary directory. Both sides compute the same: the per-partition measures, phases and features
(the fault's from its failover), p50/p95/p99 and the mean per (source, detector, load bucket), Pearson
and Spearman correlations of each measure and phase with each feature per source, and an OLS fit per
source and measure. Spark also writes its Parquet tables, charts and report; the pandas side computes
only.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from jobs.measures import rundir
from jobs.analysis import PERCENTILES, analyse
from jobs.measures.phases import FEATURES, MEASURES, PARTITION_PHASES, UNEXPLAINED, bucket_label

PER_FAULT = 100  # partitions per fault
PER_PARTITION = [*MEASURES, *PARTITION_PHASES, UNEXPLAINED]
ROLES = ["leader", "follower", "other", "cluster"]


def fabricate(root: Path, rows: int, runs: int, seed: int = 3) -> int:
    """`rows` partition lines, PER_FAULT per fault, over `runs` run directories; the bytes written."""
    rng = np.random.default_rng(seed)
    faults = max(1, rows // PER_FAULT)
    affected = rng.integers(1, 6000, faults)
    rate = rng.uniform(500, 8000, faults)
    inbox, queue = rng.integers(0, 6, faults), rng.integers(0, 10, faults)
    timeout = rng.choice([2000, 6000], faults)
    detector = rng.integers(0, 2, faults).astype(bool)
    t0 = 1.7e12 + np.arange(faults) * 1000.0
    detected = t0 + np.where(detector, rng.uniform(5, 15, faults), timeout * rng.uniform(0.8, 1, faults))
    written = detected + affected * 0.08 + rate * 0.004 + rng.normal(20, 5, faults)
    acked = written + affected * 0.05 + queue * 4 + rng.normal(30, 8, faults)
    fault_of = np.arange(rows) // PER_FAULT % faults
    role = rng.integers(0, len(ROLES), rows)
    own = rng.uniform(0, 200, rows)
    client, hw = rng.exponential(30, rows) + own * 0.5, rng.exponential(10, rows) + (role == 1) * 200
    size = 0
    for r, part in enumerate(np.array_split(np.arange(faults), runs)):
        d = root / f"run-{r:03d}"
        d.mkdir()
        (d / rundir.EXPERIMENT).write_text("{}")
        with open(d / rundir.FAILOVERS, "w") as f:
            for i in part:
                f.write(json.dumps({
                    "fault_id": int(i), "fault_kind": "kill-broker", "kind": "broker_failure", "controller_id": 1,
                    "controller_epoch": 1, "brokers": [2], "fault_injected_ms": t0[i], "detected_ms": detected[i],
                    "processing_started_ms": detected[i] + inbox[i] * 3, "zk_written_ms": written[i],
                    "requests_sent_ms": written[i] + 1, "requests_acked_ms": acked[i],
                    "load": {"partitions_total": int(affected[i]) + 100, "partitions_affected": int(affected[i]),
                             "produce_rate": rate[i], "inbox_depth": int(inbox[i]),
                             "sender_queue_depths": {"1": int(queue[i])}, "session_timeout_ms": int(timeout[i]),
                             "brokers_alive": 3, "detector": bool(detector[i])}}) + "\n")
            size += f.tell()
        with open(d / rundir.WAITS, "w") as f:
            for j in np.flatnonzero(np.isin(fault_of, part)):
                i = fault_of[j]
                phases = {"detection_ms": detected[i] - t0[i], "election_zk_ms": written[i] - detected[i],
                          "leader_apply_ms": acked[i] - written[i], "first_append_ms": client[j], "hw_ms": hw[j]}
                recovery = sum(phases.values()) + 2.0
                f.write(json.dumps({
                    "fault_id": int(i), "fault_kind": "kill-broker", "partition": f"load-{j % PER_FAULT}",
                    "source": "probe" if j % 2 else "load", "role": ROLES[role[j]], "fault_ms": t0[i],
                    "observed_ms": 30_000.0, "recovery_ms": recovery, "recovery_censored": False,
                    "worst_wait_ms": recovery + own[j], "worst_wait_censored": False, "records": 10,
                    "rate": own[j], "phases": phases, "unexplained_ms": 2.0}) + "\n")
            size += f.tell()
    return size


def pandas_analysis(root: Path) -> dict:
    """The same aggregation with pandas and numpy, in this process."""
    import pandas as pd

    failovers = pd.concat([pd.read_json(p, lines=True).assign(run=p.parent.name)
                           for p in sorted(root.glob(f"*/{rundir.FAILOVERS}"))], ignore_index=True)
    load = pd.json_normalize(failovers["load"].tolist())
    faults = pd.DataFrame({"run": failovers["run"], "fault_id": failovers["fault_id"],
                           "partitions_affected": load["partitions_affected"],
                           "partitions_total": load["partitions_total"], "inbox_depth": load["inbox_depth"],
                           "sender_queue_depth": [max(x["sender_queue_depths"].values(), default=0)
                                                  for x in failovers["load"]],
                           "session_timeout_ms": load["session_timeout_ms"], "detector": load["detector"].astype(int)})
    waits = pd.concat([pd.read_json(p, lines=True).assign(run=p.parent.name)
                       for p in sorted(root.glob(f"*/{rundir.WAITS}"))], ignore_index=True)
    phases = pd.json_normalize(waits["phases"].tolist()).reindex(columns=list(PARTITION_PHASES)).fillna(0.0)
    t = pd.concat([waits.drop(columns=["phases"]), phases], axis=1)
    rate = t[t["source"] == "load"].groupby(["run", "fault_id"])["rate"].sum().rename("produce_rate")
    t = t.merge(faults, on=["run", "fault_id"], how="left").merge(rate, on=["run", "fault_id"], how="left")
    t["partition_rate"], t["led"], t["followed"] = t["rate"], (t["role"] == "leader") * 1, (t["role"] == "follower") * 1
    t = t[t["role"] != "other"]
    t["bucket"] = t["partitions_affected"].map(bucket_label)
    pct = t.groupby(["source", "detector", "bucket"])[PER_PARTITION].quantile(list(PERCENTILES))
    corr, fits = {}, {}
    for source, part in t.groupby("source"):
        for m in ("pearson", "spearman"):
            corr[(source, m)] = part[PER_PARTITION + FEATURES].corr(method=m).loc[PER_PARTITION, FEATURES]
        x = np.column_stack([part[FEATURES].to_numpy(float), np.ones(len(part))])
        fits[source] = {p: np.linalg.lstsq(x, part[p].to_numpy(float), rcond=None)[0] for p in PER_PARTITION}
    return {"rows": len(waits), "percentile_rows": len(pct), "corr": corr, "fits": fits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--java-options", default="", help="more JVM options for Spark (--java-options=-XX:TieredStopAtLevel=1)")
    args = parser.parse_args()
    import ray

    from jobs.reports.spark import SparkSettings, spark_on_ray

    results = []
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        t = time.monotonic()
        with spark_on_ray(SparkSettings(java_options=args.java_options)) as spark:
            startup = time.monotonic() - t
            print(json.dumps({"spark_startup_s": round(startup, 1)}), flush=True)
            for rows in args.rows:
                root = Path(tempfile.mkdtemp(prefix="kray-bench-analysis-"))
                try:
                    size = fabricate(root, rows, args.runs)
                    t = time.monotonic()
                    result = analyse(spark, [root], root / "analysis")
                    spark_s = time.monotonic() - t
                    assert result.partitions == rows
                    t = time.monotonic()
                    reference = pandas_analysis(root)
                    pandas_s = time.monotonic() - t
                    assert reference["rows"] == rows
                    row = {"rows": rows, "megabytes": round(size / 1e6), "spark_s": round(spark_s, 1),
                           "pandas_s": round(pandas_s, 1), "spark_over_pandas": round(spark_s / pandas_s, 2)}
                    print(json.dumps(row), flush=True)
                    results.append(row)
                finally:
                    shutil.rmtree(root, ignore_errors=True)
    finally:
        ray.shutdown()
    print(f"\nMachine: {platform.node()}, {platform.processor() or platform.machine()}, Python {platform.python_version()};"
          f" Spark start-up (RayDP, 1 executor, 1 core, 500 MB): {startup:.1f} s; JVM options: "
          f"{args.java_options or 'none'}\n")
    print("| partition rows | JSON Lines (MB) | Spark analysis (s) | pandas, same aggregation (s) | Spark / pandas |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['rows']:,} | {r['megabytes']:,} | {r['spark_s']} | {r['pandas_s']} | {r['spark_over_pandas']} |")


if __name__ == "__main__":
    main()
