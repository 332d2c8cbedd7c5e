"""The sweep's grid and its validation (pure: no Ray, no ZooKeeper)."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from coordination.errors import KrayError
from jobs.measures.rundir import FaultKind
from jobs.sweep import QUICK, Sweep, load_sweep, main, sweep_of


def test_the_grid_has_one_experiment_per_combination_smallest_load_first():
    sweep = Sweep(partitions=[500, 100], rates=[0, 2000], brokers=[3, 4], detector=[True, False], kills=4)
    experiments = sweep.experiments()
    assert len(experiments) == 2 * 2 * 2 * 2
    assert [e.topics[0].partitions for e in experiments[:4]] == [100, 100, 100, 100]
    assert len({e.name for e in experiments}) == len(experiments)
    for e in experiments:
        assert [f.fault for f in e.schedule] == [FaultKind.KILL_BROKER] * 4
        assert [f.target for f in e.schedule] == ["non-controller", "coordinator-unless-controller"] * 2  # the group's, every second
        assert all(f.seconds == sweep.down_s and f.after_recovery for f in e.schedule)
        assert e.load.group_members == 3
        gaps = {round(b.at_s - a.at_s, 6) for a, b in zip(e.schedule, e.schedule[1:])}
        assert gaps == {sweep.spacing_s + (0 if e.detector else sweep.session_timeout_ms / 1000)}
        assert e.schedule[-1].at_s < e.duration_s


def test_without_a_group_every_kill_is_of_a_non_controller():
    [e] = Sweep(partitions=[100], detector=[True], kills=4, group_members=0).experiments()
    assert e.load.group_members == 0 and {f.target for f in e.schedule} == {"non-controller"}


def test_the_full_sweep_gives_the_analysis_at_least_30_faults():
    assert sum(len(e.schedule) for e in Sweep().experiments()) >= 30


def test_the_quick_sweep_is_one_cluster_per_detector_setting_growing_from_60_to_1000_partitions_at_half_the_knee():
    assert QUICK.knee_counts() == [1000]
    experiments = QUICK.experiments({1000: 3000.0})
    assert [(e.detector, e.name) for e in experiments] == [(True, "sweep-b3-p60.300.1000-f50-ray"),
                                                           (False, "sweep-b3-p60.300.1000-f50-zk")]
    for e in experiments:
        # the rate is the first topic's; the runner keeps it per partition as topics are added: 1,500/s at 1,000
        assert (e.load.rate, e.load.knee_per_s, e.load.knee_fraction) == (0.5 * 3000 * 60 / 1000, 3000.0, 0.5)
        assert [(t.name, t.partitions, t.after_fault) for t in e.topics] == [("load", 60, 0), ("load2", 240, 1),
                                                                           ("load3", 700, 2)]
        assert [f.fault for f in e.schedule] == [FaultKind.KILL_BROKER] * 3  # one at each of 60, 300, 1,000
        assert [f.target for f in e.schedule] == ["non-controller", "coordinator-unless-controller", "non-controller"]
        assert all(f.after_recovery for f in e.schedule)


def test_growing_partitions_tops_each_count_up_with_a_topic_and_keeps_the_other_dimensions():
    sweep = Sweep(partitions=[500, 100, 2000], rates=[0, 2000], brokers=[3, 4], detector=[True, False], kills=3,
                  grow_partitions=True)
    experiments = sweep.experiments()
    assert len(experiments) == 2 * 2 * 2  # one per (brokers, rate, detector)
    for e in experiments:
        assert [t.partitions for t in e.topics] == [100, 400, 1500]
        assert [t.after_fault for t in e.topics] == [0, 3, 6] and len(e.schedule) == 9
        assert e.schedule[-1].at_s < e.duration_s


def test_an_idle_growth_adds_topics_no_one_writes_and_places_its_load_against_the_first_counts_knee():
    sweep = Sweep(partitions=[300, 10_000, 100_000], grow_partitions=True, grown_load="idle", rates=[300],
                  load_fractions=[0.5], detector=[True], group_members=0, kills=1)
    assert sweep.knee_counts() == [300]  # where the whole load is
    by_rate = {e.name.split("-")[3]: e for e in sweep.experiments({300: 2000.0})}
    assert by_rate["r300"].load.rate == 300 and by_rate["f50"].load.rate == 1000  # not scaled by 300 / 100,000
    for e in by_rate.values():
        assert [(t.name, t.partitions, t.after_fault, t.load) for t in e.topics] == [
            ("load", 300, 0, "stream"), ("load2", 9700, 1, "idle"), ("load3", 90_000, 2, "idle")]
        assert len(e.schedule) == 3 and all(f.after_recovery for f in e.schedule)  # a kill at each count


def test_the_100000_partition_sweep_file_is_a_growing_idle_sweep_killing_at_10000_and_100000():
    sweep = load_sweep(Path(__file__).parents[2] / "experiments" / "sweep-100k.yaml")
    (experiment,) = sweep.experiments()
    counts = list(itertools.accumulate(t.partitions for t in experiment.topics))
    assert counts == [300, 10_000, 100_000] and sweep.grown_load == "idle"
    kills_at = [counts[sum(t.after_fault <= i for t in experiment.topics) - 1] for i in range(len(experiment.schedule))]
    assert kills_at == [300, 10_000, 100_000]


def test_no_file_runs_the_quick_sweep_and_full_the_old_grid(tmp_path, capsys):
    assert sweep_of(None, full=False) is QUICK
    full = sweep_of(None, full=True)
    assert full == Sweep() and not full.grow_partitions
    assert [(e.topics[0].partitions, e.detector, len(e.schedule), len(e.topics)) for e in full.experiments()] == [
        (p, d, 6, 1) for p in (60, 300, 1000) for d in (True, False)]
    path = tmp_path / "sweep.yaml"
    path.write_text("partitions: [10]\n")
    assert sweep_of(str(path), full=False).partitions == [10]
    with pytest.raises(SystemExit):
        main(["--full", str(path)])  # a file or the full grid, not both
    assert "not allowed with argument" in capsys.readouterr().err


def test_load_fractions_are_placed_against_each_counts_knee_beside_the_given_rates():
    sweep = Sweep(partitions=[100, 500], rates=[0], load_fractions=[0.5, 0.25], detector=[True], group_members=0)
    assert sweep.knee_counts() == [100, 500]
    loads = [(e.topics[0].partitions, e.name.split("-")[3], e.load.rate, e.load.knee_fraction)
             for e in sweep.experiments({100: 8000.0, 500: 4000.0})]
    assert loads == [(100, "r0", 0, None), (100, "f25", 2000, 0.25), (100, "f50", 4000, 0.5),
                     (500, "r0", 0, None), (500, "f25", 1000, 0.25), (500, "f50", 2000, 0.5)]
    assert Sweep(partitions=[100, 500], rates=[2000]).knee_counts() == []  # no fractions: nothing to measure
    assert Sweep(partitions=[100, 500], load_fractions=[1], rates=[], grow_partitions=True).knee_counts() == [500]


@pytest.mark.parametrize("fields,message", [
    ({"rates": [], "load_fractions": []}, "no load"),
    ({"load_fractions": [0]}, "load_fractions must be above 0"),
    ({"load_fractions": [2.5]}, "at most 2"),
    ({"capacity": {"window_s": 0}}, "greater than 0"),
    ({"capacity": {"colour": 1}}, "Extra inputs are not permitted"),
    ({"capacity": {"start_rate": 1000, "max_rate": 500}}, r"max_rate \(500\) is below start_rate \(1000\)"),
    ({"replication_factor": 4}, "replication factor 4 larger than 3 brokers"),
    ({"spacing_s": 2, "down_s": 3}, "must be longer than down_s"),
    ({"partitions": [0]}, "partitions must be >= 1"),
    ({"partitions": []}, "at least 1 item"),
    ({"colour": "red"}, "Extra inputs are not permitted"),
    ({"grown_load": "idle"}, "grown_load: idle is the load of the topics a growing sweep adds"),
    ({"grown_load": "once", "grow_partitions": True}, "Input should be 'stream' or 'idle'"),
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
