"""The Spark analysis job (RayDP on the test run's Ray) against an independent numpy computation, on
fabricated run directories; bad input is counted and reported. The main job's sweep end to end, with its
analysis of real runs, is test_ray_up's (on hosts of this machine, through `ray submit`)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import ray

from jobs.measures import rundir
from jobs.analysis import analyse, find_runs
from jobs.measures.statistics import fisher_interval, t_quantile
from jobs.measures.phases import (BUCKET_EDGES, CONTROLLER_PHASES, COORDINATOR_STEPS, FEATURES, MEASURES, PARTITION_PHASES,
                         UNEXPLAINED, bucket_label)
from coordination.errors import KrayError

RNG_SEED = 11
PER_PARTITION = [*MEASURES, *PARTITION_PHASES, UNEXPLAINED]
ROLES = [rundir.Role.LEADER, rundir.Role.FOLLOWER, rundir.Role.OTHER, rundir.Role.CLUSTER]


def fabricate(rng: np.random.Generator, fault_id: int, detector: bool):
    """A failover whose phases depend on its load, with noise (so correlations and fits are not trivial),
    and its partitions' waits, which depend on the fault's load, their role and their own rate."""
    affected = int(rng.integers(1, 3000))
    rate = float(rng.uniform(500, 8000))
    inbox, queue = int(rng.integers(0, 6)), int(rng.integers(0, 10))
    timeout = int(rng.choice([2000, 6000]))
    t0 = 1.7e12 + fault_id * 60_000 + float(rng.uniform(0, 1))
    detected = t0 + (float(rng.uniform(5, 15)) if detector else timeout * float(rng.uniform(0.8, 1.0)))
    started = detected + inbox * 3 + float(rng.exponential(2))
    written = started + affected * 0.08 + rate * 0.004 + float(rng.normal(20, 5))
    acked = written + affected * 0.05 + queue * 4 + float(rng.normal(30, 8))
    failover = rundir.FailoverRecord(
        fault_id=fault_id, fault_kind=rundir.FaultKind.KILL_BROKER, kind="broker_failure", controller_id=1,
        controller_epoch=1, brokers=[2], fault_injected_ms=t0, detected_ms=detected, processing_started_ms=started,
        zk_written_ms=written, requests_sent_ms=written + 1, requests_acked_ms=acked,
        load=rundir.LoadAtFault(partitions_total=affected + int(rng.integers(0, 2000)), partitions_affected=affected,
                                produce_rate=rate, inbox_depth=inbox, sender_queue_depths={1: queue, 3: queue // 2},
                                session_timeout_ms=timeout, brokers_alive=3, detector=detector))
    waits = []
    for i in range(int(rng.integers(4, 12))):
        role = ROLES[int(rng.integers(0, 4))]
        for source in rundir.Source:
            own = float(rng.uniform(0, 200))
            client = float(rng.exponential(30)) + own * 0.5 * (source is rundir.Source.LOAD)
            hw = float(rng.exponential(10)) + (200 if role is rundir.Role.FOLLOWER else 0)
            phases = {"detection_ms": detected - t0, "election_zk_ms": written - detected,
                      "leader_apply_ms": acked - written + float(rng.uniform(0, 20)), "first_append_ms": client,
                      "hw_ms": hw}
            if i % 3 == 0:
                del phases["hw_ms"]  # a step not seen: 0 in the table
            recovery = sum(phases.values()) + float(rng.uniform(0, 5))
            censored = i == 7
            waits.append(rundir.PartitionWait(
                fault_id=fault_id, fault_kind=rundir.FaultKind.KILL_BROKER, partition=f"t-{i}", source=source,
                role=role, fault_ms=t0, observed_ms=30_000, recovery_ms=recovery, recovery_censored=censored,
                worst_wait_ms=recovery + float(rng.exponential(50)), records=10, rate=own, phases=phases,
                unexplained_ms=None if i % 2 else recovery - sum(phases.values())))
    return failover, waits


def fabricate_coordinator(rng: np.random.Generator, failover: rundir.FailoverRecord) -> rundir.GroupFailoverRecord:
    """The group's coordinator through the same fault: its steps after the controller's, some not seen."""
    t0 = failover.fault_injected_ms
    elected = failover.requests_acked_ms + float(rng.uniform(0, 10))
    steps = {"elected_ms": elected, "loaded_ms": elected + float(rng.uniform(1, 30)),
             "found_ms": elected + float(rng.uniform(100, 900)), "rejoined_ms": None if rng.uniform() < 0.5 else
             elected + float(rng.uniform(500, 3000)), "committed_ms": elected + float(rng.uniform(500, 1500)),
             "consumed_first_ms": elected + float(rng.uniform(10, 200))}
    steps["consumed_all_ms"] = steps["consumed_first_ms"] + float(rng.uniform(0, 500))
    return rundir.GroupFailoverRecord(
        fault_id=failover.fault_id, fault_kind=failover.fault_kind, group="g", coordinator=2, new_coordinator=1,
        offsets_partition="__consumer_offsets-3", fault_injected_ms=t0, detector=failover.load.detector,
        partitions=8, **steps)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three good runs (60 failovers and their waits), one with malformed lines, one partial, one without
    failovers."""
    root = tmp_path_factory.mktemp("sweep")
    rng = np.random.default_rng(RNG_SEED)
    records, all_waits, all_coordinators = [], [], []
    for r in range(3):
        d = root / f"run-{r}"
        d.mkdir()
        (d / rundir.EXPERIMENT).write_text("{}")
        made = [fabricate(rng, r * 100 + i, detector=(i % 2 == 0)) for i in range(20)]
        batch = [f for f, _ in made]
        records += batch
        waits = [w for _, ws in made for w in ws]
        all_waits += [(f"run-{r}", w) for w in waits]
        lines = [b.model_dump_json() for b in batch]
        if r == 0:  # the controller's first election: no fault explains it
            first = batch[0].model_copy(update={"fault_id": None, "fault_kind": None, "fault_injected_ms": None})
            lines.append(first.model_dump_json())
        (d / rundir.FAILOVERS).write_text("\n".join(lines) + "\n")
        (d / rundir.WAITS).write_text("\n".join(w.model_dump_json() for w in waits) + "\n")
        coordinators = [fabricate_coordinator(rng, f) for f in batch[::2]]  # every second fault hit the coordinator
        all_coordinators += [(f, c) for f, c in zip(batch[::2], coordinators)]
        (d / rundir.GROUP_FAILOVERS).write_text("\n".join(c.model_dump_json() for c in coordinators) + "\n")
    bad = root / "run-bad"
    bad.mkdir()
    (bad / rundir.EXPERIMENT).write_text("{}")
    good, good_waits = fabricate(rng, 900, detector=True)
    records.append(good)
    all_waits += [("run-bad", w) for w in good_waits]
    wrong_type = json.loads(good.model_dump_json()) | {"detected_ms": "soon"}
    missing = {k: v for k, v in json.loads(good.model_dump_json()).items() if k != "processing_started_ms"}
    no_rate = json.loads(good.model_dump_json())
    del no_rate["load"]["produce_rate"]
    (bad / rundir.FAILOVERS).write_text("\n".join([good.model_dump_json(), "{not json", json.dumps(wrong_type),
                                                   json.dumps(missing), json.dumps(no_rate),
                                                   '{"kind": "broker_fail']) + "\n")
    no_role = {k: v for k, v in json.loads(good_waits[0].model_dump_json()).items() if k != "role"}
    (bad / rundir.WAITS).write_text("\n".join([*(w.model_dump_json() for w in good_waits), json.dumps(no_role),
                                               '{"fault_id": 3, "partit']) + "\n")
    (bad / rundir.GROUP_FAILOVERS).write_text('{"fault_id": 900, "fault_kind": "kill-br\n')
    partial = root / "run-partial"
    partial.mkdir()
    (partial / rundir.EXPERIMENT).write_text("{}")
    empty = root / "run-empty"
    empty.mkdir()
    (empty / rundir.FAILOVERS).write_text("")
    (empty / rundir.WAITS).write_text("")
    return root, records, all_waits, all_coordinators


@pytest.fixture(scope="module")
def spark(ray_session):
    from jobs.reports.spark import QUICK_JVM, SparkSettings, spark_on_ray

    with spark_on_ray(SparkSettings(java_options=QUICK_JVM)) as session:  # the tests' analyses are small
        yield session


@pytest.fixture(scope="module")
def result(spark, runs, tmp_path_factory):
    root, *_ = runs
    return analyse(spark, [root], tmp_path_factory.mktemp("analysis"))


def controller_reference(records: list[rundir.FailoverRecord]) -> dict[str, np.ndarray]:
    """The controller's phases per failover, computed here, independently of the job."""
    cols = {p: [] for p in [*CONTROLLER_PHASES, "partitions_affected", "detector"]}
    for f in records:
        cols["detection_ms"].append(f.detected_ms - f.fault_injected_ms)
        cols["inbox_wait_ms"].append(f.processing_started_ms - f.detected_ms)
        cols["election_zk_ms"].append(f.zk_written_ms - f.processing_started_ms)
        cols["propagation_ms"].append(f.requests_acked_ms - f.zk_written_ms)
        cols["partitions_affected"].append(f.load.partitions_affected)
        cols["detector"].append(int(f.load.detector))
    return {k: np.asarray(v, dtype=float) for k, v in cols.items()}


def reference(records, waits, source: rundir.Source, censored: bool = True) -> dict[str, np.ndarray]:
    """The touched partitions of one source (without the censored ones unless `censored`), their measures,
    phases and features, computed here; a censored partition has no unexplained rest (NaN)."""
    failover = {f.fault_id: f for f in records}
    load_rate: dict[tuple, float] = {}
    for run, w in waits:
        if w.source is rundir.Source.LOAD:
            load_rate[(run, w.fault_id)] = load_rate.get((run, w.fault_id), 0.0) + w.rate
    cols = {c: [] for c in [*PER_PARTITION, *FEATURES]}
    for run, w in waits:
        if w.source is not source or w.role is rundir.Role.OTHER or (w.recovery_censored and not censored):
            continue
        f = failover[w.fault_id]
        phases = [w.phases.get(p, 0.0) for p in PARTITION_PHASES]
        for m, v in zip([*MEASURES, *PARTITION_PHASES], [w.recovery_ms, w.worst_wait_ms, *phases]):
            cols[m].append(v)
        cols[UNEXPLAINED].append(np.nan if w.recovery_censored else w.unexplained_ms if w.unexplained_ms is not None
                                 else w.recovery_ms - sum(phases))
        for name, v in (("partitions_affected", f.load.partitions_affected),
                        ("partitions_total", f.load.partitions_total), ("produce_rate", load_rate[(run, w.fault_id)]),
                        ("inbox_depth", f.load.inbox_depth),
                        ("sender_queue_depth", max(f.load.sender_queue_depths.values())),
                        ("session_timeout_ms", f.load.session_timeout_ms), ("detector", int(f.load.detector)),
                        ("partition_rate", w.rate), ("led", int(w.role is rundir.Role.LEADER)),
                        ("followed", int(w.role is rundir.Role.FOLLOWER))):
            cols[name].append(v)
    return {k: np.asarray(v, dtype=float) for k, v in cols.items()}


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged, as Spearman's coefficient needs."""
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    r[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        r[x == v] = r[x == v].mean()
    return r


def test_spark_ran_on_ray_through_raydp(spark, result):
    assert result.on_ray
    assert spark.sparkContext.master.startswith("ray://")
    named = set(ray.util.list_named_actors())
    app = spark.sparkContext.appName
    assert app.startswith("kray-analysis-")
    assert {f"{app}_SPARK_MASTER", "RAY_APP_MASTER", "raydp-executor-0"} <= named  # Ray actors, all
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # less the driver
    assert executors == 1


def test_percentiles_per_bucket_match_numpy(runs, result):
    _, records, waits, _ = runs
    got = {(r["source"], r["detector"], r["bucket"], r["measure"]): r for r in result.percentiles}
    ref = controller_reference(records)
    buckets = np.array([bucket_label(int(a)) for a in ref["partitions_affected"]])
    for detector, bucket in {(bool(d), b) for d, b in zip(ref["detector"], buckets)}:
        mask = (ref["detector"] == int(detector)) & (buckets == bucket)
        for phase in CONTROLLER_PHASES:
            row = got[("controller", detector, bucket, phase)]
            assert row["n"] == mask.sum()
            for q in (50, 95, 99):
                assert row[f"p{q}"] == pytest.approx(np.percentile(ref[phase][mask], q), rel=1e-9)
    for source in rundir.Source:
        ref = reference(records, waits, source)
        buckets = np.array([bucket_label(int(a)) for a in ref["partitions_affected"]])
        groups = {(bool(d), b) for d, b in zip(ref["detector"], buckets)}
        assert {(d, b) for s, d, b, _ in got if s == source.value} == groups
        for detector, bucket in groups:
            mask = (ref["detector"] == int(detector)) & (buckets == bucket)
            for measure in PER_PARTITION:
                row = got[(source.value, detector, bucket, measure)]
                values = ref[measure][mask & ~np.isnan(ref[measure])]
                assert row["n"] == len(values)
                if not len(values):
                    continue
                assert row["mean"] == pytest.approx(values.mean(), rel=1e-9)
                for q in (50, 95, 99):
                    assert row[f"p{q}"] == pytest.approx(np.percentile(values, q), rel=1e-9, abs=1e-9)
    coordinators = runs[3]
    for detector, bucket in {(f.load.detector, bucket_label(f.load.partitions_affected)) for f, _ in coordinators}:
        mine = [(f, c) for f, c in coordinators
                if (f.load.detector, bucket_label(f.load.partitions_affected)) == (detector, bucket)]
        for step in COORDINATOR_STEPS:
            values = np.array([getattr(c, step) - c.fault_injected_ms for _, c in mine if getattr(c, step) is not None])
            row = got[("coordinator", detector, bucket, step)]
            assert row["n"] == len(values)
            if len(values):
                assert row["p50"] == pytest.approx(np.percentile(values, 50), rel=1e-9)
                assert row["p99"] == pytest.approx(np.percentile(values, 99), rel=1e-9)
    censored = sum(w.recovery_censored for _, w in waits if w.role is not rundir.Role.OTHER
                   and w.source is rundir.Source.LOAD)
    assert censored and sum(r["censored"] for r in result.percentiles
                            if r["source"] == "load" and r["measure"] == "recovery_ms") == censored
    assert result.failovers == len(records)
    assert result.partitions == len(waits)


def test_correlations_with_intervals_match_numpy(runs, result):
    _, records, waits, _ = runs
    got = {(c["source"], c["method"], c["measure"], c["feature"]): c for c in result.correlations}
    assert len(got) == len(rundir.Source) * 2 * len(PER_PARTITION) * len(FEATURES)
    for source in rundir.Source:
        ref = reference(records, waits, source, censored=False)
        n = len(ref["recovery_ms"])
        for measure in PER_PARTITION:
            for feature in FEATURES:
                if ref[measure].std() == 0 or ref[feature].std() == 0:
                    assert got[(source.value, "pearson", measure, feature)]["value"] is None
                    continue
                for method, value in (("pearson", np.corrcoef(ref[measure], ref[feature])[0, 1]),
                                      ("spearman", np.corrcoef(ranks(ref[measure]), ranks(ref[feature]))[0, 1])):
                    c = got[(source.value, method, measure, feature)]
                    assert c["n"] == n and c["value"] == pytest.approx(value, abs=1e-9)
                    z, se = np.arctanh(value), np.sqrt((1.06 if method == "spearman" else 1) / (n - 3))
                    assert (c["ci_low"], c["ci_high"]) == pytest.approx((np.tanh(z - 1.959964 * se),
                                                                         np.tanh(z + 1.959964 * se)), abs=1e-6)
                    assert c["ci_low"] < c["value"] < c["ci_high"]
    # the fabricated load drives what it should
    assert got[("load", "pearson", "election_zk_ms", "partitions_affected")]["ci_low"] > 0.8
    assert got[("load", "pearson", "hw_ms", "followed")]["ci_low"] > 0.4  # 0 where the step was not seen
    assert got[("load", "pearson", "first_append_ms", "partition_rate")]["value"] > 0.5
    assert abs(got[("probe", "pearson", "first_append_ms", "partition_rate")]["value"]) < 0.3
    assert fisher_interval(0.5, 3, "pearson") == (None, None)


def test_regressions_with_intervals_match_numpy_least_squares(runs, result):
    _, records, waits, _ = runs
    for source in rundir.Source:
        ref = reference(records, waits, source, censored=False)
        n = len(ref["recovery_ms"])
        x = np.column_stack([ref[f] for f in FEATURES] + [np.ones(n)])
        for r in (r for r in result.regressions if r["source"] == source.value):
            y = ref[r["measure"]]
            if y.std() == 0:  # a phase the fabricated runs never saw
                assert r["skipped"].endswith(f"a constant {r['measure']}") and not r["coefficients"]
                continue
            assert r["skipped"] is None and list(r["coefficients"]) == FEATURES and r["dropped"] == []  # all vary
            beta, *_ = np.linalg.lstsq(x, y, rcond=None)
            residuals = y - x @ beta
            r2 = 1 - (residuals ** 2).sum() / ((y - y.mean()) ** 2).sum()
            se = np.sqrt(np.diag((residuals ** 2).sum() / (n - x.shape[1]) * np.linalg.inv(x.T @ x)))
            assert r["n"] == n
            assert [r["coefficients"][f][0] for f in FEATURES] == pytest.approx(list(beta[:-1]), rel=1e-5, abs=1e-6)
            assert [r["coefficients"][f][2] - r["coefficients"][f][0] for f in FEATURES] == \
                pytest.approx(list(t_quantile(n - x.shape[1]) * se[:-1]), rel=1e-4, abs=1e-6)
            assert r["intercept"] == pytest.approx(beta[-1], rel=1e-5, abs=1e-4)
            assert r["r2"] == pytest.approx(r2, abs=1e-7)
    fit = next(r for r in result.regressions if r["source"] == "load" and r["measure"] == "hw_ms")
    value, low, high = fit["coefficients"]["followed"]
    # the fabricated 200 ms a follower's partition waits for its HW, seen in about 2 of 3 partitions
    assert 80 < low < value < high < 170


def test_bad_input_is_counted_and_reported(result):
    inputs = {i["run_id"]: i for i in result.inputs}
    assert inputs["run-bad"]["failovers"] == 1 and inputs["run-bad"]["malformed"] == 8  # one coordinator line
    assert inputs["run-0"]["coordinators"] == 10 and inputs["run-bad"]["coordinators"] == 0
    assert any("{not json" in e for e in inputs["run-bad"]["examples"])
    assert inputs["run-partial"]["status"] == "partial: no failovers.jsonl or waits.jsonl"
    assert inputs["run-empty"]["status"] == "no failovers" and inputs["run-empty"]["failovers"] == 0
    assert inputs["run-0"]["unexplained"] == 1 and inputs["run-0"]["failovers"] == 20
    assert inputs["run-0"]["waits"] > 20 * 8
    report = (result.out / "report.md").read_text()
    assert "| run-bad | 1 |" in report and "partial: no failovers.jsonl or waits.jsonl" in report


def test_outputs_are_parquet_tables_charts_and_a_report(spark, result):
    for name in ("failovers", "waits", "coordinators", "percentiles", "correlations", "regressions", "inputs"):
        assert spark.read.parquet(str(result.out / f"{name}.parquet")).count() > 0
    for chart in ("waits_vs_partitions.png", "phases_per_bucket.png", "correlations.png"):
        assert (result.out / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({chart})" in (result.out / "report.md").read_text()
    from jobs.reports.report import summary_table
    table = summary_table(result)
    assert "recovery p50/p99" in table and "worst wait p50/p99" in table and str(result.out / "report.md") in table


def test_a_feature_that_is_a_linear_combination_of_the_intercept_and_those_before_is_left_out():
    """Six faults give at most six independent fault-level features; every partition led or followed makes
    `followed` one minus `led`: such columns have no coefficient of their own."""
    from jobs.analysis import independent

    rng = np.random.default_rng(3)
    led = rng.integers(0, 2, 200).astype(float)
    affected = rng.choice([60.0, 300.0, 1000.0], 200)
    x = np.column_stack([np.ones(200), affected, affected + 0.0, rng.normal(size=200), led, 1 - led,
                         np.full(200, 7.0)])
    names = ["partitions_affected", "partitions_total", "produce_rate", "led", "followed", "constant"]
    assert independent(names, x.T @ x) == ["partitions_affected", "produce_rate", "led"]


def test_least_squares_from_the_gram_matrix_match_numpy_whatever_the_features_units():
    """Features in the thousands beside 0/1 ones, a measure in ms: the fit from the cross-products alone is
    numpy's least squares, its standard errors and R² too."""
    from jobs.analysis import ols

    rng = np.random.default_rng(5)
    n = 400
    x = np.column_stack([rng.integers(1, 3000, n), rng.uniform(500, 8000, n), rng.choice([2000.0, 6000.0], n),
                         rng.integers(0, 2, n)]).astype(float)
    y = x @ np.array([0.08, 0.004, 0.3, 200.0]) + rng.normal(20, 5, n)
    design = np.column_stack([np.ones(n), x, y])
    intercept, coefficients, errors, r2 = ols(design.T @ design, [1, 2, 3, 4], 5)
    a = np.column_stack([x, np.ones(n)])
    beta, *_ = np.linalg.lstsq(a, y, rcond=None)
    residuals = y - a @ beta
    se = np.sqrt(np.diag((residuals ** 2).sum() / (n - 5) * np.linalg.inv(a.T @ a)))
    assert coefficients == pytest.approx(list(beta[:-1]), rel=1e-9) and intercept == pytest.approx(beta[-1], rel=1e-9)
    assert errors == pytest.approx(list(se[:-1]), rel=1e-9)
    assert r2 == pytest.approx(1 - (residuals ** 2).sum() / ((y - y.mean()) ** 2).sum(), rel=1e-12)


@pytest.mark.parametrize("df,quantile", [(3, 3.182446), (5, 2.570582), (10, 2.228139), (30, 2.042272),
                                         (300, 1.967903)])
def test_students_t_quantile_for_the_regression_intervals(df, quantile):
    assert t_quantile(df) == pytest.approx(quantile, abs=4e-3 if df == 3 else 3e-4)


def test_paths_that_are_not_runs_are_refused(tmp_path):
    with pytest.raises(KrayError, match="no such run directory"):
        find_runs([tmp_path / "missing"])
    (tmp_path / "junk").mkdir()
    with pytest.raises(KrayError, match="neither a run directory nor a directory of run directories"):
        find_runs([tmp_path / "junk"])


@pytest.mark.parametrize("affected,label", [(0, "0"), (1, "1-99"), (99, "1-99"), (100, "100-499"),
                                            (999, "500-999"), (4999, "1000-4999"), (5000, "5000+")])
def test_bucket_labels(affected, label):
    assert BUCKET_EDGES == (1, 100, 500, 1000, 5000)
    assert bucket_label(affected) == label
