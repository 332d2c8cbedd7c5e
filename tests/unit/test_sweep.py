"""The sweep's grid and its validation (pure: no Ray, no ZooKeeper)."""
from __future__ import annotations

import pytest

from coordination.errors import KrayError
from jobs.rundir import FaultKind
from jobs.sweep import Sweep, load_sweep


def test_the_grid_has_one_experiment_per_combination_smallest_load_first():
    sweep = Sweep(partitions=[500, 100], rates=[0, 2000], brokers=[3, 4], detector=[True, False], kills=4)
    experiments = sweep.experiments()
    assert len(experiments) == 2 * 2 * 2 * 2
    assert [e.topics[0].partitions for e in experiments[:4]] == [100, 100, 100, 100]
    assert len({e.name for e in experiments}) == len(experiments)
    for e in experiments:
        assert [f.fault for f in e.schedule] == [FaultKind.KILL_BROKER] * 4
        assert all(f.target == "non-controller" and f.seconds == sweep.down_s and f.after_recovery for f in e.schedule)
        gaps = {round(b.at_s - a.at_s, 6) for a, b in zip(e.schedule, e.schedule[1:])}
        assert gaps == {sweep.spacing_s + (0 if e.detector else sweep.session_timeout_ms / 1000)}
        assert e.schedule[-1].at_s < e.duration_s


def test_the_default_sweep_gives_the_analysis_at_least_30_faults():
    assert sum(len(e.schedule) for e in Sweep().experiments()) >= 30


@pytest.mark.parametrize("fields,message", [
    ({"replication_factor": 4}, "replication factor 4 larger than 3 brokers"),
    ({"spacing_s": 2, "down_s": 3}, "must be longer than down_s"),
    ({"partitions": [0]}, "partitions must be >= 1"),
    ({"partitions": []}, "at least 1 item"),
    ({"colour": "red"}, "Extra inputs are not permitted"),
    ({"brokers": [100]}, "an experiment of this grid is impossible: brokers"),
    ({"kills": 200000}, "an experiment of this grid is impossible: duration_s"),
])
def test_impossible_sweeps_are_refused(fields, message, tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("\n".join(f"{k}: {v}" for k, v in fields.items()))
    with pytest.raises(KrayError, match=message):
        load_sweep(path)


def test_unreadable_sweep_files_are_one_line_errors(tmp_path):
    with pytest.raises(KrayError, match="cannot read sweep file"):
        load_sweep(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("partitions: [1, 2\n")
    with pytest.raises(KrayError, match="is not valid YAML"):
        load_sweep(tmp_path / "bad.yaml")


def test_kray_sweep_and_analyse_take_their_options_in_any_order(tmp_path, capsys):
    from jobs.cli import main

    assert main(["sweep", "--runs-dir", str(tmp_path), str(tmp_path / "missing.yaml")]) == 1
    assert main(["analyse", "--out", str(tmp_path / "out"), str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert "cannot read sweep file" in err and "no such run directory" in err


def test_rates_name_experiments_without_exponents():
    names = [e.name for e in Sweep(rates=[1_000_000], partitions=[10], detector=[True]).experiments()]
    assert names == ["sweep-b3-p10-r1000000-ray"]
