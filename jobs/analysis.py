"""How failover latency depends on load: a Spark job (RayDP, on the Ray cluster) over the run
directories of chaos experiments.

    python -m jobs.analysis RUN_DIR_OR_SWEEP_DIR [...] [--out DIR]

It works per partition. Each row of its table is one partition through one fault, as one producer
source saw it (waits.jsonl, jobs/measures/waits.py): the client's two measures (MEASURES: the recovery and
the worst wait), the partition's steps to its recovery (PARTITION_PHASES, the unexplained rest
beside them), its role (led by the fault's broker, followed by it, or neither) and its load at the
fault (FEATURES: the fault's, from its first controller failover in failovers.jsonl, and the
partition's own rate). The controller's phases (CONTROLLER_PHASES: detection, inbox wait, election
and ZooKeeper, propagation) are also kept one row per failover, as they happen once per failover.

Per fault and source, the p50/p99 of each measure over the partitions it touched, beside the load
offered at the fault (the experiment's open-loop rate over the topics loaded by then) and the load's
acknowledged rate, its partitions, the run's knee (a sweep's capacity, in experiment.json) and the load's
latency over the BASELINE_S before the fault, read from the run's produced/ records (Parquet: Spark reads
them as they are, an unreadable part passed over): a load above the knee shows there first.

Then: p50/p95/p99 (and the mean) of each measure and phase per source, detector and load bucket;
Pearson and Spearman correlations of each with each load feature, with 95% confidence intervals
(Fisher's z); a linear regression of each on the features that vary, coefficients with 95%
confidence intervals. Partitions of one fault are not independent (they share its controller and
its client), so the intervals are narrower than a sample of faults would give; the report says so.
The correlations and fits are over the partitions the faults touched (role not "other"). It writes
Parquet tables, PNG charts and report.md into `--out`, and prints a summary table.

Bad input is counted and reported, never silently dropped: a path that is not a run directory or a
directory of them is an error; a run without failovers.jsonl or waits.jsonl is reported as partial;
lines that are not JSON, or do not fit the record's schema, are counted per run with examples;
failovers that no injected fault explains (the first election) are counted and left out.
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

from actors.records import PRODUCED, PROBE_PRODUCER
from coordination.errors import KrayError
from jobs.experiments.experiment import Experiment
from jobs.measures import rundir
from jobs.measures.statistics import fisher_interval, independent, interval, ols, t_quantile
from jobs.measures.phases import (BUCKET_EDGES, CONTROLLER_PHASES, COORDINATOR_STEPS, FEATURES, MEASURES, PARTITION_PHASES,
                         PHASE_SPANS, UNEXPLAINED, Analysis, bucket_label, bucket_order)
from jobs.reports.report import summary_table, write_report
from jobs.reports.spark import add_spark_arguments, runs_on_ray, settings_from, spark_hosts, spark_on_ray

PERCENTILES = (0.5, 0.95, 0.99)
CORRUPT = "_corrupt_record"
# a line without one of these is malformed (counted and reported): the phases and features need them
REQUIRED = ["detected_ms", "processing_started_ms", "load", *(f"load.{f}" for f in (
    "partitions_total", "partitions_affected", "produce_rate", "inbox_depth", "session_timeout_ms", "detector"))]
REQUIRED_WAIT = ["fault_id", "fault_kind", "partition", "source", "role", "fault_ms", "recovery_ms",
                 "recovery_censored", "worst_wait_ms", "rate"]
PER_PARTITION = [*MEASURES, *PARTITION_PHASES, UNEXPLAINED]  # what the per-partition statistics are of
CHART_POINTS = 20_000  # the scatter chart draws a sample of at most this many partitions
BASELINE_S = 5.0  # the load's latency before a fault is over the records sent this long before it
PROBE_PREFIX = f"{PROBE_PRODUCER}-"


# -- input ---------------------------------------------------------------------

class RunInput(NamedTuple):
    run_id: str
    path: Path
    failovers: Path | None  # None: no failovers.jsonl
    waits: Path | None  # None: no waits.jsonl (a run cut short, or one from before the client was measured)
    coordinators: Path | None  # None: no group_failovers.jsonl (a run without a consumer group)
    detector: bool | None  # the experiment's (experiment.json), None when it does not say
    session_timeout_ms: int | None
    knee_per_s: float | None = None  # the capacity its load was set against (a sweep's load_fractions)
    offered: tuple[tuple[int, float], ...] = ()  # (after_fault, records/s): each streamed topic's share of the load
    produced: Path | None = None  # None: no produced/ (a run cut short before its first part)


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
            f, w, g = c / rundir.FAILOVERS, c / rundir.WAITS, c / rundir.GROUP_FAILOVERS
            settings = _settings(c / rundir.EXPERIMENT)
            produced = c / PRODUCED
            runs.append(RunInput(c.name, c, f if f.is_file() else None, w if w.is_file() else None,
                                 g if g.is_file() else None, settings.get("detector"),
                                 settings.get("session_timeout_ms"), settings.get("knee_per_s"), settings.get("offered", ()),
                                 produced if any(produced.glob("part-*.parquet")) else None))
    if len({r.run_id for r in runs}) != len(runs):
        raise KrayError("two run directories have the same name: " + ", ".join(sorted(
            {r.run_id for r in runs if sum(x.run_id == r.run_id for x in runs) > 1})))
    return runs


def _is_run(p: Path) -> bool:
    return (p / rundir.EXPERIMENT).is_file() or (p / rundir.FAILOVERS).is_file()


def offered_at(offered: tuple[tuple[int, float], ...], fault_id: int) -> float | None:
    """The load offered at the schedule's fault `fault_id` (1, 2, ...): the shares of the topics under load
    by then (created before the load, or after fewer faults). None: the run does not say (no
    experiment.json, or a load streamed closed loop)."""
    return sum(rate for after, rate in offered if after < fault_id) if offered else None


def _settings(path: Path) -> dict:
    """The experiment's detector, session timeout, knee (load.knee_per_s) and offered load per topic (its
    open-loop rate, per streamed partition the same), where experiment.json says them with their types."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    load = raw.get("load") if isinstance(raw.get("load"), dict) else {}
    out = {k: raw[k] for k, t in (("detector", bool), ("session_timeout_ms", int)) if isinstance(raw.get(k), t)}
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    if number(load.get("knee_per_s")):
        out["knee_per_s"] = float(load["knee_per_s"])
    try:
        experiment = Experiment.model_validate(raw)
    except ValueError:  # an older or hand-written experiment.json: no offered load
        return out
    streamed = [t for t in experiment.topics if t.load == "stream"]
    first = sum(t.partitions for t in streamed if not t.after_fault)
    if experiment.load.rate > 0 and first:
        out["offered"] = tuple((t.after_fault, experiment.load.rate * t.partitions / first) for t in streamed)
    return out


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
        StructField("load", load), StructField(CORRUPT, StringType())])


def wait_schema():
    """waits.jsonl as Spark reads it (rundir.PartitionWait), plus the corrupt-record column."""
    from pyspark.sql.types import BooleanType, DoubleType, LongType, MapType, StringType, StructField, StructType
    return StructType([
        StructField("fault_id", LongType()), StructField("fault_kind", StringType()),
        StructField("partition", StringType()), StructField("source", StringType()), StructField("role", StringType()),
        *(StructField(c, DoubleType()) for c in ("fault_ms", "observed_ms", "recovery_ms")),
        StructField("recovery_censored", BooleanType()), StructField("worst_wait_ms", DoubleType()),
        StructField("worst_wait_censored", BooleanType()), StructField("records", LongType()),
        StructField("rate", DoubleType()), StructField("phases", MapType(StringType(), DoubleType())),
        StructField("unexplained_ms", DoubleType()), StructField(CORRUPT, StringType())])


def coordinator_schema():
    """group_failovers.jsonl as Spark reads it (rundir.GroupFailoverRecord), plus the corrupt-record column."""
    from pyspark.sql.types import BooleanType, DoubleType, IntegerType, LongType, StringType, StructField, StructType
    return StructType([
        StructField("fault_id", LongType()), StructField("fault_kind", StringType()), StructField("group", StringType()),
        StructField("coordinator", IntegerType()), StructField("offsets_partition", StringType()),
        StructField("fault_injected_ms", DoubleType()), StructField("detector", BooleanType()),
        StructField("new_coordinator", IntegerType()),
        *(StructField(step, DoubleType()) for step in COORDINATOR_STEPS),
        StructField("partitions", LongType()), StructField("censored", LongType()), StructField(CORRUPT, StringType())])


def _read(spark, schema, files: list[str], required: list[str]):
    """JSON Lines read permissively: a line that is not JSON or lacks a required field keeps its text in
    CORRUPT; run_id from the file's directory. Cached (read twice: the table and the input report)."""
    from pyspark.sql import functions as F

    if not files:
        return spark.createDataFrame([], schema).withColumn("run_id", F.lit(None).cast("string"))
    return (spark.read.schema(schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
            .json(files)
            .withColumn("run_id", F.element_at(F.split(F.input_file_name(), "/"), -2))
            .withColumn(CORRUPT, F.when(reduce(or_, [F.col(c).isNull() for c in required], F.col(CORRUPT).isNotNull()),
                                        F.coalesce(F.col(CORRUPT), F.to_json(F.struct("*")))))
            .cache())


def _bucket(column: str):
    from pyspark.sql import functions as F

    bucket = F.lit(f"{BUCKET_EDGES[-1]}+")
    for label, high in reversed([(bucket_label(e - 1), e) for e in BUCKET_EDGES]):
        bucket = F.when(F.col(column) < high, F.lit(label)).otherwise(bucket)
    return bucket


# -- the job -------------------------------------------------------------------

def failover_table(spark, runs: list[RunInput]):
    """(one row per failover with a fault: run_id, fault_id, detected_ms, kind, fault_kind,
    CONTROLLER_PHASES, the fault's load, bucket; all parsed rows, for the input report)."""
    from pyspark.sql import functions as F

    raw = _read(spark, failover_schema(), [str(r.failovers) for r in runs if r.failovers is not None], REQUIRED)
    good = raw.where(F.col(CORRUPT).isNull() & F.col("fault_injected_ms").isNotNull())
    phases = {name: F.col(end) - F.col(start) for name, (start, end) in PHASE_SPANS.items()}
    features = {"partitions_affected": F.col("load.partitions_affected"),
                "partitions_total": F.col("load.partitions_total"),
                "produce_rate": F.col("load.produce_rate"), "inbox_depth": F.col("load.inbox_depth"),
                "sender_queue_depth": F.coalesce(F.array_max(F.map_values("load.sender_queue_depths")), F.lit(0)),
                "session_timeout_ms": F.col("load.session_timeout_ms"),
                "detector": F.col("load.detector").cast("int")}
    table = good.select("run_id", "fault_id", "detected_ms", "kind", "fault_kind",
                        *(c.cast("double").alias(n) for n, c in phases.items()),
                        *(c.cast("double").alias(n) for n, c in features.items()))
    return table.withColumn("bucket", _bucket("partitions_affected")), raw


def wait_table(spark, runs: list[RunInput], failovers):
    """(one row per partition, fault and source: its measures, phases (0 where a step was not seen: its
    time is in the next step's), role and FEATURES; all parsed rows, for the input report). A fault's
    load comes from its failover (its broker failure, else its first); a fault no failover followed (a cut healed in time) affected
    no partition at the controller; its produce rate is the sum of its partitions' rates."""
    from pyspark.sql import functions as F

    raw = _read(spark, wait_schema(), [str(r.waits) for r in runs if r.waits is not None], REQUIRED_WAIT)
    good = raw.where(F.col(CORRUPT).isNull())
    first = _of_faults(failovers, ["partitions_affected", "partitions_total", "inbox_depth", "sender_queue_depth",
                                   "session_timeout_ms", "detector"])
    per_fault = good.groupBy("run_id", "fault_id").agg(
        F.sum(F.when(F.col("source") == "load", F.col("rate")).otherwise(0.0)).alias("_rate"),
        F.countDistinct("partition").alias("_partitions"))
    settings = spark.createDataFrame(
        [(r.run_id, None if r.detector is None else int(r.detector), r.session_timeout_ms) for r in runs],
        "run_id string, _s_detector int, _s_session_timeout_ms long")
    joined = (good.join(first, ["run_id", "fault_id"], "left").join(per_fault, ["run_id", "fault_id"], "left")
              .join(settings, "run_id", "left"))
    phases = {p: F.coalesce(F.col("phases").getItem(p), F.lit(0.0)) for p in PARTITION_PHASES}
    features = {"partitions_affected": F.coalesce(F.col("_f_partitions_affected"), F.lit(0)),
                "partitions_total": F.coalesce(F.col("_f_partitions_total"), F.col("_partitions")),
                "produce_rate": F.col("_rate"), "inbox_depth": F.coalesce(F.col("_f_inbox_depth"), F.lit(0)),
                "sender_queue_depth": F.coalesce(F.col("_f_sender_queue_depth"), F.lit(0)),
                "session_timeout_ms": F.coalesce(F.col("_s_session_timeout_ms"), F.col("_f_session_timeout_ms")),
                "detector": F.coalesce(F.col("_s_detector"), F.col("_f_detector")),
                "partition_rate": F.col("rate"), "led": (F.col("role") == "leader").cast("int"),
                "followed": (F.col("role") == "follower").cast("int")}
    unexplained = F.when(~F.col("recovery_censored"), F.coalesce(  # a censored partition has none
        F.col(UNEXPLAINED), F.col("recovery_ms") - reduce(lambda a, b: a + b, phases.values())))
    table = joined.select(
        "run_id", "fault_id", "fault_kind", "fault_ms", "partition", "source", "role", "recovery_censored",
        "worst_wait_censored",
        (F.col("role") != "other").alias("touched"), *(F.col(m).cast("double").alias(m) for m in MEASURES),
        *(c.cast("double").alias(n) for n, c in phases.items()), unexplained.cast("double").alias(UNEXPLAINED),
        *(c.cast("double").alias(n) for n, c in features.items()))
    return table.withColumn("bucket", _bucket("partitions_affected")), raw


def fault_table(spark, runs: list[RunInput], waits):
    """One row per fault and source: the p50/p99 of each measure over the partitions it touched (with the
    censored counted), the load's acknowledged rate at the fault (produce_rate), its partitions and
    detector, the run's knee, and the load's latency (send to acknowledgement, p50/p99) of the records
    sent in the BASELINE_S before the fault, read by Spark from the run's produced/ Parquet parts. The
    load offered at the fault and its fraction of the knee are added from the experiment (`analyse`)."""
    from pyspark.sql import functions as F

    touched = waits.where("touched")
    stats = [F.count(F.lit(1)).alias("partitions"), F.sum(F.col("recovery_censored").cast("int")).alias("censored")]
    for m in MEASURES:
        stats += [F.percentile(m, 0.5).alias(f"{m}_p50"), F.percentile(m, 0.99).alias(f"{m}_p99")]
    keys = ["run_id", "fault_id", "source", "detector", "produce_rate", "partitions_total", "partitions_affected"]
    table = touched.groupBy(*keys).agg(*stats, F.min("fault_ms").alias("fault_ms"))
    knees = spark.createDataFrame([(r.run_id, r.knee_per_s) for r in runs], "run_id string, knee_per_s double")
    table = table.join(knees, "run_id", "left")
    produced = [str(r.produced) for r in runs if r.produced is not None]
    if not produced:
        return table.withColumn("baseline_latency_ms_p50", F.lit(None).cast("double")) \
                    .withColumn("baseline_latency_ms_p99", F.lit(None).cast("double"))
    acks = (spark.read.option("ignoreCorruptFiles", "true").parquet(*produced).where(~F.col("record_id").startswith(PROBE_PREFIX))
            .select(F.element_at(F.split(F.input_file_name(), "/"), -3).alias("run_id"), "sent_ms",
                    (F.col("acked_ms") - F.col("sent_ms")).alias("latency_ms")))
    faults = table.select("run_id", "fault_id", "fault_ms").distinct()
    baseline = (acks.join(faults, "run_id")
                .where((F.col("sent_ms") >= F.col("fault_ms") - BASELINE_S * 1000) & (F.col("sent_ms") < F.col("fault_ms")))
                .groupBy("run_id", "fault_id").agg(F.percentile("latency_ms", 0.5).alias("baseline_latency_ms_p50"),
                                                   F.percentile("latency_ms", 0.99).alias("baseline_latency_ms_p99")))
    return table.join(baseline, ["run_id", "fault_id"], "left")


def _of_faults(failovers, columns: list[str]):
    """Each fault's failover (its broker failure, else its first: jobs/measures/failovers.py's of_faults), its
    `columns` named _f_<column>."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    return (failovers.withColumn("_n", F.row_number().over(
        Window.partitionBy("run_id", "fault_id").orderBy(F.col("kind") != "broker_failure", "detected_ms")))
        .where("_n = 1").select("run_id", "fault_id", *(F.col(c).alias(f"_f_{c}") for c in columns)))


def coordinator_table(spark, runs: list[RunInput], failovers):
    """One row per fault on the consumer group's coordinator: each step's ms after the fault
    (COORDINATOR_STEPS), the detector, and the fault's load bucket (from its failover)."""
    from pyspark.sql import functions as F

    raw = _read(spark, coordinator_schema(), [str(r.coordinators) for r in runs if r.coordinators is not None],
                ["fault_id", "fault_injected_ms", "detector"])
    table = (raw.where(F.col(CORRUPT).isNull()).join(_of_faults(failovers, ["partitions_affected"]),
                                                     ["run_id", "fault_id"], "left")
             .select("run_id", "fault_id", "fault_kind", "coordinator", "new_coordinator",
                     F.col("detector").cast("int").alias("detector"),
                     *((F.col(step) - F.col("fault_injected_ms")).alias(step) for step in COORDINATOR_STEPS),
                     F.coalesce(F.col("_f_partitions_affected"), F.lit(0)).alias("partitions_affected")))
    return table.withColumn("bucket", _bucket("partitions_affected")), raw


def input_report(failovers_raw, waits_raw, runs: list[RunInput], coordinators_raw=None,
                 examples: int = 3) -> list[dict]:
    """Per run: its failovers, partition-fault rows and coordinator failovers read, its malformed lines
    (of the three files) with examples, its failovers without a fault, its status."""
    from pyspark.sql import functions as F

    counts = {r["run_id"]: r for r in failovers_raw.groupBy("run_id").agg(
        F.count(F.lit(1)).alias("lines"), F.count(CORRUPT).alias("malformed"),
        F.sum(F.when(F.col(CORRUPT).isNull() & F.col("fault_injected_ms").isNull(), 1).otherwise(0))
        .alias("unexplained")).collect()}
    wait_counts, coordinator_counts = ({r["run_id"]: r for r in raw.groupBy("run_id").agg(
        F.count(F.lit(1)).alias("lines"), F.count(CORRUPT).alias("malformed")).collect()} if raw is not None else {}
        for raw in (waits_raw, coordinators_raw))
    bad: dict[str, list[str]] = {}
    for raw in (failovers_raw, waits_raw, *([coordinators_raw] if coordinators_raw is not None else [])):
        for row in raw.where(F.col(CORRUPT).isNotNull()).select("run_id", CORRUPT).limit(1000).collect():
            bad.setdefault(row["run_id"], []).append(row[CORRUPT][:200])
    out = []
    for r in runs:
        c, w, g = counts.get(r.run_id), wait_counts.get(r.run_id), coordinator_counts.get(r.run_id)
        lines, malformed, unexplained = (c["lines"], c["malformed"], c["unexplained"]) if c else (0, 0, 0)
        wait_lines, wait_malformed = (w["lines"], w["malformed"]) if w else (0, 0)
        group_lines, group_malformed = (g["lines"], g["malformed"]) if g else (0, 0)
        failovers = lines - malformed - unexplained
        missing = [name for name, path in ((rundir.FAILOVERS, r.failovers), (rundir.WAITS, r.waits)) if path is None]
        status = (f"partial: no {' or '.join(missing)}" if missing else
                  "no failovers" if failovers == 0 and wait_lines == wait_malformed else "ok")
        out.append({"run_id": r.run_id, "failovers": failovers, "waits": wait_lines - wait_malformed,
                    "coordinators": group_lines - group_malformed, "malformed": malformed + wait_malformed + group_malformed,
                    "unexplained": unexplained, "status": status,
                    "examples": bad.get(r.run_id, [])[:examples]})
    return out


def percentiles(failovers, waits, coordinators=None) -> list[dict]:
    """The controller's phases per failover (source "controller"), the consumer group's coordinator's steps
    per fault on its broker (source "coordinator"), the per-partition measures and phases per source over
    the partitions the faults touched; each per detector and load bucket."""
    from pyspark.sql import functions as F

    def rows(table, keys: list[str], columns: list[str], fixed: dict) -> list[dict]:
        censored = {"recovery_ms": "recovery_censored", "worst_wait_ms": "worst_wait_censored"}
        aggs = [F.sum(F.col(c).cast("int")).alias(f"__{c}") for c in censored.values() if c in table.columns]
        for c in columns:
            aggs += [F.count(c).alias(f"{c}__n"), F.percentile(c, list(PERCENTILES)).alias(f"{c}__q"),
                     F.avg(c).alias(f"{c}__mean")]
        out = []
        for row in table.groupBy(*keys).agg(*aggs).collect():
            for c in columns:
                q = row[f"{c}__q"] or [None] * len(PERCENTILES)
                out.append({**fixed, **{k: row[k] for k in keys}, "detector": None if row["detector"] is None else
                            bool(row["detector"]), "measure": c, "n": row[f"{c}__n"],
                            "censored": row[f"__{censored[c]}"] if c in censored and f"__{censored[c]}" in row
                            else 0, "mean": row[f"{c}__mean"],
                            **{f"p{round(x * 100)}": v for x, v in zip(PERCENTILES, q)}})
        return out

    out = rows(failovers, ["detector", "bucket"], CONTROLLER_PHASES, {"source": "controller"})
    if coordinators is not None:
        out += rows(coordinators, ["detector", "bucket"], list(COORDINATOR_STEPS), {"source": "coordinator"})
    out += rows(waits.where("touched"), ["source", "detector", "bucket"], PER_PARTITION, {})
    order = ["controller", "coordinator", "load", "probe", "group"]
    return sorted(out, key=lambda r: (order.index(r["source"]) if r["source"] in order else 9, r["detector"] or False,
                                      bucket_order(r["bucket"]), r["measure"]))


def controller_by_count(failovers) -> list[dict]:
    """The controller's phases against the cluster's size: per failover kind, detector and partition count
    (the cluster's, at the failover), the failovers, the partitions they affected (mean) and each phase's
    and their sum's p50 and mean. A growing sweep kills at each count: its chart of phases against the count."""
    from pyspark.sql import functions as F

    columns = [*CONTROLLER_PHASES, "total_ms"]
    aggs = [F.count(F.lit(1)).alias("n"), F.avg("partitions_affected").alias("partitions_affected")]
    for c in columns:
        aggs += [F.percentile(c, 0.5).alias(f"{c}__p50"), F.avg(c).alias(f"{c}__mean")]
    table = failovers.withColumn("total_ms", reduce(lambda a, b: a + b, [F.col(c) for c in CONTROLLER_PHASES]))
    rows = table.groupBy("kind", "detector", "partitions_total").agg(*aggs).orderBy("kind", "detector",
                                                                                    "partitions_total")
    return [{"kind": r["kind"], "detector": None if r["detector"] is None else bool(r["detector"]),
             "partitions_total": int(r["partitions_total"]), "n": r["n"],
             "partitions_affected": r["partitions_affected"],
             **{f"{c}_{stat}": r[f"{c}__{stat}"] for c in columns for stat in ("p50", "mean")}}
            for r in rows.collect() if r["partitions_total"] is not None]


def correlations(waits) -> list[dict]:
    """Pearson and Spearman between each per-partition measure or phase and each feature, per source, over
    the touched partitions recovered within their horizon (a censored value is only a lower bound) with
    every feature known; None where a column is constant (no correlation is defined)."""
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.stat import Correlation

    columns = [*PER_PARTITION, *FEATURES]
    out = []
    for source in [r["source"] for r in waits.select("source").distinct().collect()]:
        rows = waits.where(waits.touched & (waits.source == source) & ~waits.recovery_censored).dropna(
            subset=columns).select(*columns)
        n = rows.count()
        if n < 2:
            continue
        vectors = VectorAssembler(inputCols=columns, outputCol="v").transform(rows).select("v").cache()
        for method in ("pearson", "spearman"):
            matrix = Correlation.corr(vectors, "v", method).head()[0].toArray()
            for i, measure in enumerate(PER_PARTITION):
                for j, feature in enumerate(FEATURES):
                    value = matrix[i][len(PER_PARTITION) + j]
                    value = None if math.isnan(value) else float(value)
                    low, high = fisher_interval(value, n, method)
                    out.append({"source": source, "method": method, "measure": measure, "feature": feature, "n": n,
                                "value": value, "ci_low": low, "ci_high": high})
        vectors.unpersist()
    return out


def regressions(waits) -> list[dict]:
    """Ordinary least squares of each per-partition measure and phase on the features that vary among the
    touched partitions recovered within their horizon, per source, each feature kept only if it is not a
    linear combination of the intercept and the features kept before it (a fault's features are the
    same for all its partitions: six faults give at most six independent ones, and a singular design
    has no unique fit); coefficients with 95% intervals (the normal equations' standard errors,
    Student's t). Spark makes one pass over every source for the cross-products of the features and the
    measures and their ranges (`moments`); every fit is solved from them (`ols`)."""
    import numpy as np

    columns = [*FEATURES, *PER_PARTITION]
    found = moments(waits.where(waits.touched & ~waits.recovery_censored).dropna(subset=columns), columns)
    out = []
    for source in [r["source"] for r in waits.select("source").distinct().collect()]:
        n, varies, g = found.get(source, (0, dict.fromkeys(columns, False), None))
        varying = [f for f in FEATURES if varies[f]]
        at = [0, *(1 + columns.index(f) for f in varying)]
        features = independent(varying, g[np.ix_(at, at)]) if varying else []
        for measure in PER_PARTITION:
            base = {"source": source, "measure": measure, "n": n,
                    "dropped": [f for f in varying if f not in features]}
            if not features or n < len(features) + 2 or not varies[measure]:
                out.append({**base, "intercept": None, "r2": None, "coefficients": {},
                            "skipped": f"{n} partitions, {len(features)} independent features, "
                                       f"{'a varying' if varies[measure] else 'a constant'} {measure}"})
                continue
            intercept, coefficients, errors, r2 = ols(g, [1 + columns.index(f) for f in features],
                                                      1 + columns.index(measure))
            t = t_quantile(n - len(features) - 1)
            out.append({**base, "intercept": intercept, "r2": r2, "skipped": None, "coefficients": {
                f: interval(c, e, t) for f, c, e in zip(features, coefficients, errors)}})
    return out


def moments(rows, columns: list[str]) -> dict:
    """Per source, in one pass over `rows`: (their count, whether each column varies among them, their
    Gram matrix with an intercept column first, then `columns`)."""
    import numpy as np
    from pyspark.sql import functions as F

    cols = [F.lit(1.0), *(F.col(c).cast("double") for c in columns)]
    k = len(cols)
    aggs = [F.count(F.lit(1)).alias("n"), *(F.min(c).alias(f"lo_{c}") for c in columns),
            *(F.max(c).alias(f"hi_{c}") for c in columns),
            *(F.sum(cols[i] * cols[j]).alias(f"g{i}_{j}") for i in range(k) for j in range(i, k))]
    found = {}
    for row in rows.groupBy("source").agg(*aggs).collect():
        g = np.zeros((k, k))
        for i in range(k):
            for j in range(i, k):
                g[i, j] = g[j, i] = row[f"g{i}_{j}"]
        found[row["source"]] = (row["n"], {c: row[f"hi_{c}"] > row[f"lo_{c}"] for c in columns}, g)
    return found


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
    failovers, failovers_raw = failover_table(spark, runs)
    failovers = failovers.cache()
    waits, waits_raw = wait_table(spark, runs, failovers)
    waits = waits.cache()
    coordinators, coordinators_raw = coordinator_table(spark, runs, failovers)
    inputs = input_report(failovers_raw, waits_raw, runs, coordinators_raw)
    n, partitions = failovers.count(), waits.count()
    progress(f"{n} failovers, {partitions} partition-fault rows; {sum(i['malformed'] for i in inputs)} malformed "
             f"lines; computing percentiles")
    pct = percentiles(failovers, waits, coordinators)
    by_count = controller_by_count(failovers)
    progress("Correlations (Pearson, Spearman) with confidence intervals")
    corr = correlations(waits)
    progress("Linear regressions")
    reg = regressions(waits)
    progress(f"Per fault: the measures against the offered load and the knee, the load's latency before each "
             f"fault (from the runs' {PRODUCED}/ Parquet)")
    offered = {r.run_id: r.offered for r in runs}
    faults = [{**row, "offered_per_s": (o := offered_at(offered[row["run_id"]], row["fault_id"])),
               "knee_fraction": o / row["knee_per_s"] if o is not None and row["knee_per_s"] else None}
              for row in (r.asDict() for r in fault_table(spark, runs, waits).orderBy("run_id", "fault_id", "source")
                          .collect())]
    progress(f"Writing Parquet tables and the report to {out}")
    failovers.write.mode("overwrite").parquet(str(out / "failovers.parquet"))
    waits.write.mode("overwrite").parquet(str(out / "waits.parquet"))
    coordinators.write.mode("overwrite").parquet(str(out / "coordinators.parquet"))
    for name, rows in (("percentiles", pct), ("correlations", corr), ("inputs", inputs), ("regressions", reg),
                       ("faults", faults), ("controller_by_count", by_count)):
        _write_rows(rows, out / f"{name}.parquet")
    points = waits.where("touched").select("partitions_affected", "worst_wait_ms", "recovery_ms", "role", "source",
                                           "detector")
    sample = points.sample(fraction=min(1.0, CHART_POINTS / max(partitions, 1)), seed=1).collect()
    result = Analysis(n, partitions, inputs, pct, corr, reg, out, runs_on_ray(spark), faults, by_count)
    write_report(result, [r.asDict() for r in sample])
    for frame in (failovers_raw, waits_raw, coordinators_raw, failovers, waits):
        frame.unpersist()
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
