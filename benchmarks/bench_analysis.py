"""Wall time of the Spark analysis (jobs/analysis.py, RayDP on a local Ray) for 10,000 and
1,000,000 failover timeline rows, Spark's start-up timed separately, beside the same aggregation in
pandas/numpy in the same run (issue 6).

    .venv/bin/python -m benchmarks.bench_analysis [--rows 10000 1000000] [--runs 10]

The rows are fabricated failovers.jsonl lines (rundir.FailoverRecord's format, one affected
partition each) spread over `--runs` run directories in a temporary directory. Both sides compute
the same: the phases and features per failover, p50/p95/p99 per (detector, load bucket), Pearson
and Spearman correlations of each phase with each feature, and an OLS fit per phase. Spark also
writes its Parquet tables, charts and report; the pandas side computes only.
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

from jobs import rundir
from jobs.analysis import PERCENTILES, analyse
from jobs.phases import FEATURES, PHASE_SPANS, PHASES, bucket_label


def fabricate(root: Path, rows: int, runs: int, seed: int = 3) -> int:
    """`rows` failover lines over `runs` run directories; the bytes written."""
    rng = np.random.default_rng(seed)
    affected = rng.integers(1, 6000, rows)
    rate = rng.uniform(500, 8000, rows)
    inbox, queue = rng.integers(0, 6, rows), rng.integers(0, 10, rows)
    timeout = rng.choice([2000, 6000], rows)
    detector = rng.integers(0, 2, rows).astype(bool)
    t0 = 1.7e12 + np.arange(rows) * 1000.0
    detected = t0 + np.where(detector, rng.uniform(5, 15, rows), timeout * rng.uniform(0.8, 1, rows))
    started = detected + inbox * 3 + rng.exponential(2, rows)
    written = started + affected * 0.08 + rate * 0.004 + rng.normal(20, 5, rows)
    acked = written + affected * 0.05 + queue * 4 + rng.normal(30, 8, rows)
    ok = acked + rng.uniform(5, 100, rows)
    size = 0
    for r, part in enumerate(np.array_split(np.arange(rows), runs)):
        d = root / f"run-{r:03d}"
        d.mkdir()
        (d / rundir.EXPERIMENT).write_text("{}")
        with open(d / rundir.FAILOVERS, "w") as f:
            for i in part:
                f.write(json.dumps({
                    "fault_id": int(i), "fault_kind": "kill-broker", "kind": "broker_failure", "controller_id": 1,
                    "controller_epoch": 1, "brokers": [2], "fault_injected_ms": t0[i], "detected_ms": detected[i],
                    "processing_started_ms": started[i], "zk_written_ms": written[i],
                    "requests_sent_ms": written[i] + 1, "requests_acked_ms": acked[i],
                    "first_produce_ok_ms": {"load-0": ok[i]},
                    "load": {"partitions_total": int(affected[i]) + 100, "partitions_affected": int(affected[i]),
                             "produce_rate": rate[i], "inbox_depth": int(inbox[i]),
                             "sender_queue_depths": {"1": int(queue[i])}, "session_timeout_ms": int(timeout[i]),
                             "brokers_alive": 3, "detector": bool(detector[i])}}) + "\n")
            size += f.tell()
    return size


def pandas_analysis(root: Path) -> dict:
    """The same aggregation with pandas and numpy, in this process."""
    import pandas as pd

    frames = [pd.read_json(p, lines=True) for p in sorted(root.glob(f"*/{rundir.FAILOVERS}"))]
    raw = pd.concat(frames, ignore_index=True)
    raw = raw[raw["fault_injected_ms"].notna()]
    load = pd.json_normalize(raw["load"].tolist())
    t = pd.DataFrame({name: raw[end].to_numpy() - raw[start].to_numpy() for name, (start, end) in PHASE_SPANS.items()})
    t["unavailability_ms"] = [max(m.values()) if m else np.nan for m in raw["first_produce_ok_ms"]] \
        - raw["fault_injected_ms"].to_numpy()
    for f in ("partitions_affected", "partitions_total", "produce_rate", "inbox_depth", "session_timeout_ms"):
        t[f] = load[f].to_numpy()
    t["sender_queue_depth"] = [max(d.values()) if d else 0 for d in raw["load"].map(lambda x: x["sender_queue_depths"])]
    t["detector"] = load["detector"].astype(int).to_numpy()
    t["bucket"] = t["partitions_affected"].map(bucket_label)
    pct = t.groupby(["detector", "bucket"])[PHASES].quantile(list(PERCENTILES))
    corr = {m: t[PHASES + FEATURES].corr(method=m).loc[PHASES, FEATURES] for m in ("pearson", "spearman")}
    x = np.column_stack([t[FEATURES].to_numpy(float), np.ones(len(t))])
    fits = {p: np.linalg.lstsq(x, t[p].to_numpy(float), rcond=None)[0] for p in PHASES}
    return {"rows": len(t), "percentile_rows": len(pct), "corr": corr, "fits": fits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    import ray

    from jobs.spark import spark_on_ray

    results = []
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        t = time.monotonic()
        with spark_on_ray() as spark:
            startup = time.monotonic() - t
            print(json.dumps({"spark_startup_s": round(startup, 1)}), flush=True)
            for rows in args.rows:
                root = Path(tempfile.mkdtemp(prefix="kray-bench-analysis-"))
                try:
                    size = fabricate(root, rows, args.runs)
                    t = time.monotonic()
                    result = analyse(spark, [root], root / "analysis")
                    spark_s = time.monotonic() - t
                    assert result.failovers == rows
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
          f" Spark start-up (RayDP, 1 executor, 1 core, 500 MB): {startup:.1f} s\n")
    print("| timeline rows | JSON Lines (MB) | Spark analysis (s) | pandas, same aggregation (s) | Spark / pandas |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['rows']:,} | {r['megabytes']:,} | {r['spark_s']} | {r['pandas_s']} | {r['spark_over_pandas']} |")


if __name__ == "__main__":
    main()
