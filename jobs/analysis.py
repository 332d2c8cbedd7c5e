"""How failover latency depends on load: a Spark job (RayDP, on the Ray cluster) over the run
directories of chaos experiments.

    python -m jobs.analysis RUN_DIR_OR_SWEEP_DIR [...] [--out DIR]

Per failover (failovers.jsonl, the timeline of docs/ARCHITECTURE.md) it computes the phases

    detection_ms       fault_injected -> detected (the controller's inbox has it)
    inbox_wait_ms      detected -> processing_started
    election_zk_ms     processing_started -> zk_written (elections, ISR changes persisted)
    propagation_ms     zk_written -> requests_acked (LeaderAndIsr/UpdateMetadata applied by every broker)
    unavailability_ms  fault_injected -> the last affected partition's first acknowledged produce

and the load at the fault (FEATURES). Then: p50/p95/p99 of each phase per load bucket (detector
on/off x partitions affected); Pearson and Spearman correlations of each phase with each load
feature (Spark ML's Correlation); a linear regression of each phase on the load features
(coefficients, intercept, R squared). It writes Parquet tables, PNG charts and report.md into
`--out`, and prints a summary table.

Bad input is counted and reported, never silently dropped: a path that is not a run directory or a
directory of them is an error; a run without failovers.jsonl is reported as partial; lines that
are not JSON, or do not fit the record's schema, are counted per run with examples; failovers that
no injected fault explains (the first election) are counted and left out.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from functools import reduce
from operator import or_
from pathlib import Path
from typing import Callable, NamedTuple

from coordination.errors import KrayError
from jobs import rundir
from jobs.phases import BUCKET_EDGES, FEATURES, PHASE_SPANS, PHASES, Analysis, bucket_label, bucket_order
from jobs.report import summary_table, write_report
from jobs.spark import add_spark_arguments, runs_on_ray, settings_from, spark_hosts, spark_on_ray

PERCENTILES = (0.5, 0.95, 0.99)
CORRUPT = "_corrupt_record"
# a line without one of these is malformed (counted and reported): the phases and features need them
REQUIRED = ["detected_ms", "processing_started_ms", "load", *(f"load.{f}" for f in (
    "partitions_total", "partitions_affected", "produce_rate", "inbox_depth", "session_timeout_ms", "detector"))]
CHART_POINTS = 20_000  # the scatter chart draws a sample of at most this many failovers


# -- input ---------------------------------------------------------------------

class RunInput(NamedTuple):
    run_id: str
    path: Path
    failovers: Path | None  # None: a partial run (no failovers.jsonl)


def find_runs(paths: list[str | Path]) -> list[RunInput]:
    """Each path is a run directory (it has experiment.json or failovers.jsonl) or a directory of
    them (a sweep); anything else is a KrayError naming it."""
    runs: list[RunInput] = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise KrayError(f"{p}: no such run directory")
        candidates = [p] if _is_run(p) else sorted(c for c in p.iterdir() if c.is_dir() and _is_run(c))
        if not candidates:
            raise KrayError(f"{p}: neither a run directory nor a directory of run directories "
                            f"(no {rundir.EXPERIMENT} or {rundir.FAILOVERS} found)")
        for c in candidates:
            f = c / rundir.FAILOVERS
            runs.append(RunInput(c.name, c, f if f.is_file() else None))
    if len({r.run_id for r in runs}) != len(runs):
        raise KrayError("two run directories have the same name: " + ", ".join(sorted(
            {r.run_id for r in runs if sum(x.run_id == r.run_id for x in runs) > 1})))
    return runs


def _is_run(p: Path) -> bool:
    return (p / rundir.EXPERIMENT).is_file() or (p / rundir.FAILOVERS).is_file()


def failover_schema():
    """failovers.jsonl as Spark reads it (rundir.FailoverRecord), plus the corrupt-record column."""
    from pyspark.sql.types import (BooleanType, DoubleType, IntegerType, LongType, MapType, StringType,
                                   StructField, StructType)
    load = StructType([StructField("partitions_total", LongType()), StructField("partitions_affected", LongType()),
                       StructField("produce_rate", DoubleType()), StructField("inbox_depth", LongType()),
                       StructField("sender_queue_depths", MapType(StringType(), LongType())),
                       StructField("session_timeout_ms", LongType()), StructField("brokers_alive", LongType()),
                       StructField("detector", BooleanType())])
    return StructType([
        StructField("fault_id", LongType()), StructField("fault_kind", StringType()), StructField("kind", StringType()),
        StructField("controller_id", IntegerType()), StructField("controller_epoch", IntegerType()),
        *(StructField(c, DoubleType()) for c in ("fault_injected_ms", "detected_ms", "processing_started_ms",
                                                 "zk_written_ms", "requests_sent_ms", "requests_acked_ms")),
        StructField("first_produce_ok_ms", MapType(StringType(), DoubleType())),
        StructField("load", load), StructField(CORRUPT, StringType())])


# -- the job -------------------------------------------------------------------

def failover_table(spark, runs: list[RunInput]):
    """(one row per failover with a fault: run_id, kind, fault_kind, PHASES, FEATURES, bucket; all
    parsed rows, cached, for the input report)."""
    from pyspark.sql import functions as F

    files = [str(r.failovers) for r in runs if r.failovers is not None]
    raw = (spark.read.schema(failover_schema()).option("mode", "PERMISSIVE")
           .option("columnNameOfCorruptRecord", CORRUPT).json(files)
           .withColumn("run_id", F.element_at(F.split(F.input_file_name(), "/"), -2))
           .withColumn(CORRUPT, F.when(reduce(or_, [F.col(c).isNull() for c in REQUIRED], F.col(CORRUPT).isNotNull()),
                                       F.coalesce(F.col(CORRUPT), F.to_json(F.struct("*")))))
           .cache())
    good = raw.where(F.col(CORRUPT).isNull() & F.col("fault_injected_ms").isNotNull())
    ok_times = F.map_values("first_produce_ok_ms")
    phases = {name: F.col(end) - F.col(start) for name, (start, end) in PHASE_SPANS.items()}
    phases["unavailability_ms"] = F.when(F.size(ok_times) > 0, F.array_max(ok_times) - F.col("fault_injected_ms"))
    depths = F.map_values("load.sender_queue_depths")
    features = {"partitions_affected": F.col("load.partitions_affected"),
                "partitions_total": F.col("load.partitions_total"),
                "produce_rate": F.col("load.produce_rate"), "inbox_depth": F.col("load.inbox_depth"),
                "sender_queue_depth": F.coalesce(F.array_max(depths), F.lit(0)),
                "session_timeout_ms": F.col("load.session_timeout_ms"),
                "detector": F.col("load.detector").cast("int")}
    bucket = F.lit(f"{BUCKET_EDGES[-1]}+")
    for label, high in reversed([(bucket_label(e - 1), e) for e in BUCKET_EDGES]):
        bucket = F.when(F.col("partitions_affected") < high, F.lit(label)).otherwise(bucket)
    table = good.select("run_id", "kind", "fault_kind", *(c.cast("double").alias(n) for n, c in phases.items()),
                        *(c.cast("double").alias(n) for n, c in features.items()))
    return table.withColumn("bucket", bucket), raw


def input_report(raw, runs: list[RunInput], examples: int = 3) -> list[dict]:
    from pyspark.sql import functions as F

    counts = {r["run_id"]: r for r in raw.groupBy("run_id").agg(
        F.count(F.lit(1)).alias("lines"), F.count(CORRUPT).alias("malformed"),
        F.sum(F.when(F.col(CORRUPT).isNull() & F.col("fault_injected_ms").isNull(), 1).otherwise(0))
        .alias("unexplained")).collect()}
    bad = {}
    for row in raw.where(F.col(CORRUPT).isNotNull()).select("run_id", CORRUPT).limit(1000).collect():
        bad.setdefault(row["run_id"], []).append(row[CORRUPT][:200])
    out = []
    for r in runs:
        c = counts.get(r.run_id)
        lines, malformed, unexplained = (c["lines"], c["malformed"], c["unexplained"]) if c else (0, 0, 0)
        failovers = lines - malformed - unexplained
        status = ("partial: no failovers.jsonl" if r.failovers is None else
                  "no failovers" if failovers == 0 else "ok")
        out.append({"run_id": r.run_id, "failovers": failovers, "malformed": malformed, "unexplained": unexplained,
                    "status": status, "examples": bad.get(r.run_id, [])[:examples]})
    return out


def percentiles(table) -> list[dict]:
    from pyspark.sql import functions as F

    aggs = []
    for p in PHASES:
        aggs += [F.count(p).alias(f"{p}__n"), F.percentile(p, list(PERCENTILES)).alias(f"{p}__q")]
    rows = table.groupBy("detector", "bucket").agg(*aggs).collect()
    out = []
    for row in rows:
        for p in PHASES:
            q = row[f"{p}__q"] or [None] * len(PERCENTILES)
            out.append({"detector": bool(row["detector"]), "bucket": row["bucket"], "phase": p, "n": row[f"{p}__n"],
                        **{f"p{round(x * 100)}": v for x, v in zip(PERCENTILES, q)}})
    return sorted(out, key=lambda r: (r["detector"], bucket_order(r["bucket"]), PHASES.index(r["phase"])))


def correlations(table) -> list[dict]:
    """Pearson and Spearman between each phase and each feature, over the failovers that have the
    phase; None where a column is constant there (no correlation is defined)."""
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.stat import Correlation

    out = []
    for phase in PHASES:
        rows = table.where(table[phase].isNotNull()).select(phase, *FEATURES)
        if rows.limit(2).count() < 2:
            continue
        vectors = VectorAssembler(inputCols=[phase, *FEATURES], outputCol="v").transform(rows).select("v").cache()
        for method in ("pearson", "spearman"):
            matrix = Correlation.corr(vectors, "v", method).head()[0].toArray()
            out += [{"method": method, "phase": phase, "feature": f,
                     "value": None if math.isnan(matrix[0][i + 1]) else float(matrix[0][i + 1])}
                    for i, f in enumerate(FEATURES)]
        vectors.unpersist()
    return out


def regressions(table) -> list[dict]:
    """Ordinary least squares of each phase on the features that vary among its failovers."""
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.regression import LinearRegression
    from pyspark.sql import functions as F

    def fit(phase: str, rows) -> dict:
        spread = rows.agg(F.count(F.lit(1)).alias("n"), *(F.countDistinct(f).alias(f) for f in FEATURES)).head()
        varying = [f for f in FEATURES if spread[f] > 1]
        n = spread["n"]
        if not varying or n < len(varying) + 2:
            return {"phase": phase, "n": n, "intercept": None, "r2": None, "coefficients": {},
                    "skipped": f"{n} failovers for {len(varying)} varying features"}
        data = VectorAssembler(inputCols=varying, outputCol="x").transform(rows)
        model = LinearRegression(featuresCol="x", labelCol=phase, regParam=0.0, elasticNetParam=0.0,
                                 solver="auto").fit(data)
        return {"phase": phase, "n": n, "intercept": float(model.intercept), "r2": float(model.summary.r2),
                "coefficients": dict(zip(varying, map(float, model.coefficients))), "skipped": None}

    out = []
    for phase in PHASES:
        rows = table.where(table[phase].isNotNull()).select(phase, *FEATURES).cache()
        try:
            out.append(fit(phase, rows))
        finally:
            rows.unpersist()
    return out


def analyse(spark, paths: list[str | Path], out: str | Path,
            progress: Callable[[str], None] = lambda line: None) -> Analysis:
    """The whole job on a running SparkSession."""
    runs = find_runs(paths)
    driver = spark.sparkContext.getConf().get("spark.driver.host")
    elsewhere = spark_hosts(spark) - {driver}
    if elsewhere:  # Spark reads the run directories and writes its tables through local paths
        raise KrayError(f"Spark executors run on {sorted(elsewhere)}, not on this node ({driver}), so they cannot "
                        f"read the run directories here: keep the runs on storage every node reads, or run the "
                        f"analysis where its executors can be placed on this node")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    progress(f"Reading {len(runs)} run directories")
    table, raw = failover_table(spark, runs)
    table = table.cache()
    inputs = input_report(raw, runs)
    n = table.count()
    progress(f"{n} failovers; {sum(i['malformed'] for i in inputs)} malformed lines; computing percentiles")
    pct = percentiles(table)
    progress("Correlations (Pearson, Spearman)")
    corr = correlations(table) if n >= 2 else []
    progress("Linear regressions")
    reg = regressions(table) if n >= 2 else []
    progress(f"Writing Parquet tables and the report to {out}")
    table.write.mode("overwrite").parquet(str(out / "failovers.parquet"))
    for name, rows in (("percentiles", pct), ("correlations", corr), ("inputs", inputs), ("regressions", reg)):
        _write_rows(rows, out / f"{name}.parquet")
    points = table.select("partitions_affected", "produce_rate", "unavailability_ms", "detector") \
        .where("unavailability_ms IS NOT NULL")
    sample = points.sample(fraction=min(1.0, CHART_POINTS / max(n, 1)), seed=1).collect()
    result = Analysis(n, inputs, pct, corr, reg, out, runs_on_ray(spark))
    write_report(result, [r.asDict() for r in sample])
    raw.unpersist()
    table.unpersist()
    return result


def _write_rows(rows: list[dict], path: Path) -> None:
    """A small result table as one Parquet file (an empty one still gets its file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()} for r in rows]
    pq.write_table(pa.Table.from_pylist(rows) if rows else pa.table({"empty": pa.array([], pa.int8())}), path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kray analyse", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="run directories, or directories of them (a sweep)")
    parser.add_argument("--out", default=None, help="where the tables and the report go (default: PATH/analysis)")
    add_spark_arguments(parser)
    args = parser.parse_args(argv)
    import ray

    out = args.out or str(Path(args.paths[0]) / "analysis")
    settings = settings_from(args)
    try:
        find_runs(args.paths)  # bad paths fail before Spark starts
        started = not ray.is_initialized()
        if started:
            ray.init(address=None, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            t0 = time.monotonic()
            print("Starting Spark on Ray (RayDP)", flush=True)
            with spark_on_ray(settings) as spark:
                print(f"Spark up in {time.monotonic() - t0:.0f} s", flush=True)
                result = analyse(spark, args.paths, out, progress=lambda line: print(line, flush=True))
        finally:
            if started:
                ray.shutdown()
    except KrayError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    print(summary_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
