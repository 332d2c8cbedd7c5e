"""The Spark analysis job (RayDP on the test run's Ray) against an independent numpy computation, on
fabricated run directories; bad input is counted and reported."""
from __future__ import annotations

import json

import numpy as np
import pytest
import ray

from jobs import rundir
from jobs.analysis import analyse, find_runs
from jobs.phases import BUCKET_EDGES, FEATURES, PHASES, bucket_label
from coordination.errors import KrayError

RNG_SEED = 11


def fabricate(rng: np.random.Generator, fault_id: int, detector: bool) -> rundir.FailoverRecord:
    """A failover whose phases depend on its load, with noise (so correlations and fits are not trivial)."""
    affected = int(rng.integers(1, 3000))
    rate = float(rng.uniform(500, 8000))
    inbox, queue = int(rng.integers(0, 6)), int(rng.integers(0, 10))
    timeout = int(rng.choice([2000, 6000]))
    t0 = 1.7e12 + fault_id * 60_000 + float(rng.uniform(0, 1))
    detected = t0 + (float(rng.uniform(5, 15)) if detector else timeout * float(rng.uniform(0.8, 1.0)))
    started = detected + inbox * 3 + float(rng.exponential(2))
    written = started + affected * 0.08 + rate * 0.004 + float(rng.normal(20, 5))
    acked = written + affected * 0.05 + queue * 4 + float(rng.normal(30, 8))
    ok = {f"load-{p}": acked + float(rng.uniform(5, 100)) for p in range(int(rng.integers(1, 5)))}
    return rundir.FailoverRecord(
        fault_id=fault_id, fault_kind=rundir.FaultKind.KILL_BROKER, kind="broker_failure", controller_id=1,
        controller_epoch=1, brokers=[2], fault_injected_ms=t0, detected_ms=detected, processing_started_ms=started,
        zk_written_ms=written, requests_sent_ms=written + 1, requests_acked_ms=acked, first_produce_ok_ms=ok,
        load=rundir.LoadAtFault(partitions_total=affected + int(rng.integers(0, 2000)), partitions_affected=affected,
                                produce_rate=rate, inbox_depth=inbox, sender_queue_depths={1: queue, 3: queue // 2},
                                session_timeout_ms=timeout, brokers_alive=3, detector=detector))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three good runs (60 failovers), one with malformed lines, one partial, one without failovers."""
    root = tmp_path_factory.mktemp("sweep")
    rng = np.random.default_rng(RNG_SEED)
    records = []
    for r in range(3):
        d = root / f"run-{r}"
        d.mkdir()
        (d / rundir.EXPERIMENT).write_text("{}")
        batch = [fabricate(rng, r * 100 + i, detector=(i % 2 == 0)) for i in range(20)]
        records += batch
        lines = [b.model_dump_json() for b in batch]
        if r == 0:  # the controller's first election: no fault explains it
            first = batch[0].model_copy(update={"fault_id": None, "fault_kind": None, "fault_injected_ms": None})
            lines.append(first.model_dump_json())
        (d / rundir.FAILOVERS).write_text("\n".join(lines) + "\n")
    bad = root / "run-bad"
    bad.mkdir()
    (bad / rundir.EXPERIMENT).write_text("{}")
    good = fabricate(rng, 900, detector=True)
    records.append(good)
    wrong_type = json.loads(good.model_dump_json()) | {"detected_ms": "soon"}
    missing = {k: v for k, v in json.loads(good.model_dump_json()).items() if k != "processing_started_ms"}
    no_rate = json.loads(good.model_dump_json())
    del no_rate["load"]["produce_rate"]
    (bad / rundir.FAILOVERS).write_text("\n".join([good.model_dump_json(), "{not json", json.dumps(wrong_type),
                                                   json.dumps(missing), json.dumps(no_rate),
                                                   '{"kind": "broker_fail']) + "\n")
    partial = root / "run-partial"
    partial.mkdir()
    (partial / rundir.EXPERIMENT).write_text("{}")
    empty = root / "run-empty"
    empty.mkdir()
    (empty / rundir.FAILOVERS).write_text("")
    return root, records


@pytest.fixture(scope="module")
def spark(ray_session):
    from jobs.spark import spark_on_ray

    with spark_on_ray() as session:
        yield session


@pytest.fixture(scope="module")
def result(spark, runs, tmp_path_factory):
    root, _ = runs
    return analyse(spark, [root], tmp_path_factory.mktemp("analysis"))


def reference(records: list[rundir.FailoverRecord]) -> dict[str, np.ndarray]:
    """The phases and features computed here, independently of the job."""
    cols = {p: [] for p in PHASES + FEATURES}
    for f in records:
        cols["detection_ms"].append(f.detected_ms - f.fault_injected_ms)
        cols["inbox_wait_ms"].append(f.processing_started_ms - f.detected_ms)
        cols["election_zk_ms"].append(f.zk_written_ms - f.processing_started_ms)
        cols["propagation_ms"].append(f.requests_acked_ms - f.zk_written_ms)
        cols["unavailability_ms"].append(max(f.first_produce_ok_ms.values()) - f.fault_injected_ms)
        cols["partitions_affected"].append(f.load.partitions_affected)
        cols["partitions_total"].append(f.load.partitions_total)
        cols["produce_rate"].append(f.load.produce_rate)
        cols["inbox_depth"].append(f.load.inbox_depth)
        cols["sender_queue_depth"].append(max(f.load.sender_queue_depths.values()))
        cols["session_timeout_ms"].append(f.load.session_timeout_ms)
        cols["detector"].append(int(f.load.detector))
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
    _, records = runs
    ref = reference(records)
    buckets = np.array([bucket_label(int(a)) for a in ref["partitions_affected"]])
    got = {(r["detector"], r["bucket"], r["phase"]): r for r in result.percentiles}
    expected_groups = {(bool(d), b) for d, b in zip(ref["detector"], buckets)}
    assert {(d, b) for d, b, _ in got} == expected_groups
    for detector, bucket in expected_groups:
        mask = (ref["detector"] == int(detector)) & (buckets == bucket)
        for phase in PHASES:
            row = got[(detector, bucket, phase)]
            assert row["n"] == mask.sum()
            for q in (50, 95, 99):
                assert row[f"p{q}"] == pytest.approx(np.percentile(ref[phase][mask], q), rel=1e-9)
    assert result.failovers == len(records)


def test_correlations_match_numpy(runs, result):
    _, records = runs
    ref = reference(records)
    got = {(c["method"], c["phase"], c["feature"]): c["value"] for c in result.correlations}
    assert len(got) == 2 * len(PHASES) * len(FEATURES)
    for phase in PHASES:
        for feature in FEATURES:
            pearson = np.corrcoef(ref[phase], ref[feature])[0, 1]
            spearman = np.corrcoef(ranks(ref[phase]), ranks(ref[feature]))[0, 1]
            assert got[("pearson", phase, feature)] == pytest.approx(pearson, abs=1e-9)
            assert got[("spearman", phase, feature)] == pytest.approx(spearman, abs=1e-9)
    # the fabricated load drives the phases it should
    assert got[("pearson", "election_zk_ms", "partitions_affected")] > 0.9
    assert got[("pearson", "detection_ms", "detector")] < -0.5


def test_regressions_match_numpy_least_squares(runs, result):
    _, records = runs
    ref = reference(records)
    x = np.column_stack([ref[f] for f in FEATURES] + [np.ones(len(records))])
    for r in result.regressions:
        assert r["skipped"] is None and list(r["coefficients"]) == FEATURES  # every feature varies here
        y = ref[r["phase"]]
        beta, *_ = np.linalg.lstsq(x, y, rcond=None)
        r2 = 1 - ((y - x @ beta) ** 2).sum() / ((y - y.mean()) ** 2).sum()
        assert r["n"] == len(records)
        assert [r["coefficients"][f] for f in FEATURES] == pytest.approx(list(beta[:-1]), rel=1e-5, abs=1e-7)
        assert r["intercept"] == pytest.approx(beta[-1], rel=1e-5, abs=1e-5)
        assert r["r2"] == pytest.approx(r2, abs=1e-7)
    fit = next(r for r in result.regressions if r["phase"] == "election_zk_ms")
    assert fit["r2"] > 0.9 and fit["coefficients"]["partitions_affected"] == pytest.approx(0.08, rel=0.1)


def test_bad_input_is_counted_and_reported(result):
    inputs = {i["run_id"]: i for i in result.inputs}
    assert inputs["run-bad"]["failovers"] == 1 and inputs["run-bad"]["malformed"] == 5
    assert any("{not json" in e for e in inputs["run-bad"]["examples"])
    assert inputs["run-partial"]["status"] == "partial: no failovers.jsonl"
    assert inputs["run-empty"]["status"] == "no failovers" and inputs["run-empty"]["failovers"] == 0
    assert inputs["run-0"]["unexplained"] == 1 and inputs["run-0"]["failovers"] == 20
    report = (result.out / "report.md").read_text()
    assert "| run-bad | 1 | 5 |" in report and "partial: no failovers.jsonl" in report


def test_outputs_are_parquet_tables_charts_and_a_report(spark, result):
    for name in ("failovers", "percentiles", "correlations", "regressions", "inputs"):
        assert spark.read.parquet(str(result.out / f"{name}.parquet")).count() > 0
    for chart in ("unavailability_vs_partitions.png", "phases_per_bucket.png", "correlations.png"):
        assert (result.out / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({chart})" in (result.out / "report.md").read_text()
    from jobs.report import summary_table
    table = summary_table(result)
    assert "unavailability p50/p99" in table and str(result.out / "report.md") in table


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
