"""Chaos experiments end to end (real ZooKeeper, real Ray): faults under acks=all load, every
invariant checked on the run directory. The short one runs by default; the others are marked slow (`-m slow`),
some saying which tests of the default run show their parts."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from jobs.measures import rundir
from jobs.measures.check import INVARIANTS, main as check_main
from jobs.experiments.experiment import Experiment, FaultSpec, RandomFaults, load_experiment
from jobs.measures.rundir import FaultKind, FaultRecord
from jobs.experiments.runner import run_experiment
from jobs.experiments.summary import report
from tests.chromium import open_in_chromium

REPO = Path(__file__).resolve().parents[2]
FAST_BROKERS = {"min_insync_replicas": 2, "replica_lag_time_max_ms": 2000, "replica_fetch_wait_max_ms": 200,
                "isr_change_propagation_interval_ms": 500, "replica_fetch_backoff_ms": 200}


@pytest.fixture
def environment(zk_connect, ray_session, monkeypatch):
    """The run joins this test run's ZooKeeper and Ray instead of starting its own."""
    monkeypatch.setenv("KRAY_ZK_CONNECT", zk_connect)


def run(experiment: Experiment, tmp_path):
    run_dir, summary = run_experiment(experiment, tmp_path, progress=lambda line: None)
    print(report(run_dir))
    return run_dir, summary


def test_short_chaos_experiment_keeps_every_invariant(environment, tmp_path):
    """With a consumer group of three beside the load, its coordinator killed last."""
    experiment = Experiment(
        name="short", brokers=3, session_timeout_ms=3000, broker={**FAST_BROKERS, "offsets_topic_num_partitions": 10,
                                                         "group_initial_rebalance_delay_ms": 0},
        topics=[{"name": "orders", "partitions": 12, "replication_factor": 3},
                {"name": "dormant", "partitions": 6, "replication_factor": 3, "load": "idle"}],
        load={"producers": 2, "rate": 600, "acks": "all", "group_members": 3},
        schedule=[FaultSpec(at_s=3, fault=FaultKind.KILL_BROKER, target="non-controller", seconds=3),
                  FaultSpec(at_s=9, fault=FaultKind.RESTART_BROKER, target="non-controller"),
                  FaultSpec(at_s=14, fault=FaultKind.KILL_CONTROLLER),
                  FaultSpec(at_s=20, fault=FaultKind.PAUSE_BROKER, target="random", seconds=1.5),
                  FaultSpec(at_s=24, fault=FaultKind.EXPIRE_BROKER_SESSION, target="non-controller"),
                  FaultSpec(at_s=28, fault=FaultKind.KILL_REQUEST_SENDER, target="random"),
                  FaultSpec(at_s=32, fault=FaultKind.KILL_BROKER, target="coordinator", seconds=2)],
        duration_s=36, settle_s=30, horizon_s=6, seed=3)
    run_dir, summary = run(experiment, tmp_path)
    invariants = summary.check.invariants
    assert invariants == {name: 0 for name in invariants} and len(invariants) == len(INVARIANTS)
    faults = [json.loads(line) for line in (run_dir / rundir.FAULTS).read_text().splitlines()]
    assert [f["kind"] for f in sorted(faults, key=lambda f: f["fault_id"])] == [s.fault.value for s in experiment.schedule]
    assert not [f for f in faults if f["detail"].startswith("failed")]
    failovers = [rundir.FailoverRecord.model_validate_json(line)
                 for line in (run_dir / rundir.FAILOVERS).read_text().splitlines()]
    by_fault = {f.fault_kind for f in failovers if f.fault_id is not None}
    assert {FaultKind.KILL_BROKER, FaultKind.RESTART_BROKER, FaultKind.KILL_CONTROLLER,
            FaultKind.EXPIRE_BROKER_SESSION} <= by_fault  # each handled as a failover
    killed = next(f for f in failovers if f.fault_kind is FaultKind.KILL_BROKER and f.kind == "broker_failure")
    assert killed.requests_acked_ms is not None
    waits = [rundir.PartitionWait.model_validate_json(line) for line in (run_dir / rundir.WAITS).read_text().splitlines()]
    # every fault measured, whatever its kind, by the load and the probes; the killed broker's partitions
    # came back within the horizon
    assert {(w.fault_kind, w.source) for w in waits} == {(s.fault, source) for s in experiment.schedule
                                                         for source in rundir.Source}
    led = [w for w in waits if w.fault_id == killed.fault_id and w.role is rundir.Role.LEADER]
    assert led and not any(w.recovery_censored for w in led)
    assert summary.acked > 1000 and summary.waits[rundir.Source.LOAD].recovery_ms_p99 is not None
    assert summary.waits[rundir.Source.PROBE].partitions > 0
    assert 0 < summary.produce_latency_ms_p50 <= summary.produce_latency_ms_p99
    assert check_main([str(run_dir)]) == 0
    # the group: given every record, its commits in its log; its coordinator's failover step by step
    assert summary.check.counts["consumed_live"] > summary.acked and summary.waits[rundir.Source.GROUP].partitions
    commits = [json.loads(line) for line in (run_dir / "group_commits.jsonl").read_text().splitlines()]
    assert any(c["stored_offset"] is None for c in commits) and any(c["stored_offset"] is not None for c in commits)
    [moved] = [rundir.GroupFailoverRecord.model_validate_json(line)
               for line in (run_dir / rundir.GROUP_FAILOVERS).read_text().splitlines() if '"fault_id":7' in line]
    assert moved.new_coordinator not in (None, moved.coordinator) and moved.partitions == 12
    assert moved.fault_injected_ms < moved.elected_ms <= moved.loaded_ms and moved.found_ms is not None
    assert moved.consumed_all_ms is not None and moved.committed_ms is not None
    assert "The consumer group's coordinator through each fault on its broker" in report(run_dir)
    # the idle topic: in the final state, fully replicated; never written, never sampled while the run went on
    final = json.loads((run_dir / rundir.FINAL_STATE).read_text())
    assert {f"dormant-{p}" for p in range(6)} <= final["zookeeper"].keys()
    samples = [json.loads(line) for line in (run_dir / rundir.PARTITION_STATES).read_text().splitlines()]
    assert samples and not any(key.startswith("dormant-") for sample in samples for key in sample["partitions"])


@pytest.mark.slow  # about 65 s; tests/integration/test_links.py covers each link fault in the default run
def test_link_faults_in_a_short_experiment_keep_every_invariant(environment, tmp_path):
    """Every link-fault shape once, each healed after its seconds, under acks=all load."""
    experiment = Experiment(
        name="short-links", brokers=3, session_timeout_ms=3000, broker=FAST_BROKERS,
        topics=[{"name": "orders", "partitions": 12, "replication_factor": 3}],
        load={"producers": 1, "rate": 300, "acks": "all"},
        schedule=[FaultSpec(at_s=2, fault=FaultKind.CUT_REPLICATION, target="leader", seconds=4),
                  FaultSpec(at_s=8, fault=FaultKind.CUT_CONTROLLER_ZOOKEEPER, seconds=5),
                  FaultSpec(at_s=15, fault=FaultKind.ISOLATE_BROKER, target="non-controller", seconds=5),
                  FaultSpec(at_s=22, fault=FaultKind.SPLIT_BROKERS, seconds=3),
                  FaultSpec(at_s=27, fault=FaultKind.BRIDGE_BROKERS, seconds=3),
                  FaultSpec(at_s=32, fault=FaultKind.SLOW_REPLICATION, target="random", seconds=3),
                  FaultSpec(at_s=36, fault=FaultKind.CUT_BROKER_ZOOKEEPER, target="non-controller", seconds=4),
                  FaultSpec(at_s=42, fault=FaultKind.CUT_CLIENTS, target="leader", seconds=3),
                  FaultSpec(at_s=46, fault=FaultKind.CUT_CONTROLLER_BROKER, target="non-controller", seconds=3)],
        duration_s=51, settle_s=40, horizon_s=5, seed=5)
    run_dir, summary = run(experiment, tmp_path)
    invariants = summary.check.invariants
    assert invariants == {name: 0 for name in invariants} and len(invariants) == len(INVARIANTS)
    faults = sorted((json.loads(line) for line in (run_dir / rundir.FAULTS).read_text().splitlines()),
                    key=lambda f: f["fault_id"])
    assert [f["kind"] for f in faults] == [s.fault.value for s in experiment.schedule]
    assert not [f for f in faults if f["detail"].startswith("failed")]
    for fault, spec in zip(faults, experiment.schedule):  # each lasted its seconds, then healed
        assert fault["ended_ms"] - fault["injected_ms"] >= spec.seconds * 1000
    failovers = [rundir.FailoverRecord.model_validate_json(line)
                 for line in (run_dir / rundir.FAILOVERS).read_text().splitlines()]
    assert {FaultKind.CUT_CONTROLLER_ZOOKEEPER, FaultKind.ISOLATE_BROKER} <= {f.fault_kind for f in failovers}
    waits = [rundir.PartitionWait.model_validate_json(line) for line in (run_dir / rundir.WAITS).read_text().splitlines()]
    # the client's wait under every link fault, those that lead to no failover too
    assert {w.fault_kind for w in waits if w.source is rundir.Source.PROBE} == {s.fault for s in experiment.schedule}
    cut = [w for w in waits if w.fault_kind is FaultKind.ISOLATE_BROKER and w.role is rundir.Role.LEADER]
    assert cut and all(w.worst_wait_ms > 0 for w in cut)
    assert summary.acked > 1000
    assert check_main([str(run_dir)]) == 0
    page = run_dir / rundir.TIMELINE  # its timeline page, which the report points to, shows every fault
    assert f"Timeline: {page}" in report(run_dir)
    shown = open_in_chromium(page)
    assert shown.console == [] and shown.script_errors == ""
    labels = [f"{f['fault_id']}: {FaultRecord.model_validate(f).label}" for f in faults]
    assert [label for label in labels if f">{label}</text>" not in shown.dom] == []


@pytest.mark.slow  # about 100 s
def test_jepsens_kafka_loss_is_reproduced_with_unclean_election_and_caught_by_the_checker(environment, tmp_path,
                                                                                       capsys):
    """experiments/jepsen-unclean.yaml: acknowledged records lost, and `kray check` says so with examples."""
    run_dir, summary = run(load_experiment(REPO / "experiments" / "jepsen-unclean.yaml"), tmp_path)
    lost = summary.check.invariants["lost"]
    assert lost > 0 and summary.check.invariants["multiple_leaders"] == 0
    capsys.readouterr()
    assert check_main([str(run_dir)]) == 1
    table = capsys.readouterr().out
    line = next(line for line in table.splitlines() if line.startswith("lost "))
    assert line.split()[1] == str(lost) and "orders-0" in line  # the count, and an example record


@pytest.mark.slow  # about 29 s; in the default run test_replication.py and test_kafka_clients.py (writes refused below
# min.insync.replicas), test_controller_flows.py (a partition offline while its last ISR member is dead),
# test_detector.py (a restarted broker registered again) and tests/unit/test_network.py (no answer before the first
# UpdateMetadata) show its parts
def test_jepsens_schedule_with_kafkas_safe_settings_loses_nothing(environment, tmp_path):
    """Writes are refused while the leader is alone in its ISR and the partition is offline while it is
    dead; it returns where it was (its listeners' ports), answers clients only once the controller has
    told it the metadata (else librdkafka, given no brokers, drops them all), and the load goes on."""
    unclean = load_experiment(REPO / "experiments" / "jepsen-unclean.yaml")
    safe = load_experiment(REPO / "experiments" / "jepsen-safe.yaml")
    assert safe.schedule == unclean.schedule and safe.load == unclean.load
    assert not safe.controller.unclean_leader_election_enable and safe.broker.min_insync_replicas == 2
    run_dir, summary = run(safe.model_copy(update={"horizon_s": 8}), tmp_path)
    invariants = summary.check.invariants
    assert invariants == {name: 0 for name in invariants}
    assert summary.acked > 1500  # 200/s over 20 s, less the refused and offline seconds
    assert check_main([str(run_dir)]) == 0


@pytest.mark.slow
def test_long_chaos_experiment_with_random_faults(environment, tmp_path):
    experiment = Experiment(
        name="long", brokers=4, session_timeout_ms=3000, broker=FAST_BROKERS,
        topics=[{"name": "orders", "partitions": 40, "replication_factor": 3}],
        load={"producers": 2, "rate": 2000, "acks": "all", "consumers": 2},
        random_faults=RandomFaults(every_s=(6, 12), kinds=[k for k in FaultKind if k is not FaultKind.ZK_RESTART]),
        duration_s=300, settle_s=60, seed=11)
    run_dir, summary = run(experiment, tmp_path)
    assert summary.check.invariants == {name: 0 for name in summary.check.invariants}
    assert summary.faults >= 20 and summary.failovers >= 10


@pytest.mark.slow  # about 35 s; tests/integration/test_power_loss.py covers the returning victim in the default run
def test_power_losses_with_leaders_killed_at_the_victims_return_lose_nothing(environment, tmp_path):
    """experiments/power-loss.yaml in its short form (its first two pairs): a follower's power loss, then
    a leader's torn write, each followed by a leader's kill the moment the victim registers again, under
    acks=all load with idle partitions among busy ones. Nothing lost, duplicated or reordered; every
    partition fully replicated at the end."""
    full = load_experiment(REPO / "experiments" / "power-loss.yaml")
    assert [f.fault for f in full.schedule[1::2]] == [FaultKind.KILL_BROKER] * 4 and all(
        f.at_return for f in full.schedule[1::2]) and {f.fault for f in full.schedule[::2]} == \
        {FaultKind.LOSE_UNFLUSHED_TAIL, FaultKind.TRUNCATE_LOG_TAIL}
    assert {t.load for t in full.topics} == {"stream", "once"} and full.broker.min_insync_replicas == 2
    short = full.model_copy(update={"schedule": full.schedule[:4], "duration_s": 10, "horizon_s": 6})
    run_dir, summary = run(Experiment.model_validate(short.model_dump()), tmp_path)
    invariants = summary.check.invariants
    assert invariants == {name: 0 for name in invariants} and len(invariants) == len(INVARIANTS)
    faults = sorted((rundir.FaultRecord.model_validate_json(line)
                     for line in (run_dir / rundir.FAULTS).read_text().splitlines()), key=lambda f: f.fault_id)
    assert [f.kind for f in faults] == [s.fault for s in short.schedule]
    for victim, kill in zip(faults[::2], faults[1::2]):
        print(victim.kind.value, victim.target, victim.detail, "|", kill.target, kill.detail)
        assert re.match(r"\d+ logs, \d+ bytes", victim.detail) and kill.target != victim.target
        assert kill.detail.startswith(f"at broker {victim.target}'s return (fault {victim.fault_id}), ")
    assert summary.acked > 1000


@pytest.mark.slow  # about 31 s; in the default run test_replication.py (a corrupted segment recovered and refilled
# from the leader) and test_power_loss.py (a follower that lost its log) show the recovery, tests/unit/test_disk_faults.py
# the damage each fault does
def test_disk_faults_lose_no_acknowledged_record(environment, tmp_path):
    """A follower's log tail corrupted, torn, and cut back to its recovery point (a power loss), each
    while the broker is down: it recovers by truncating and fetches the rest again from the leaders."""
    segments_roll = {**FAST_BROKERS, "log_segment_bytes": 32 * 1024}  # a roll every few seconds: a recovery point
    experiment = Experiment(
        name="disk-faults", brokers=3, session_timeout_ms=3000, broker=segments_roll,
        topics=[{"name": "orders", "partitions": 12, "replication_factor": 3}],
        load={"producers": 1, "rate": 600, "acks": "all"},
        schedule=[FaultSpec(at_s=3, fault=FaultKind.CORRUPT_LOG_TAIL, target="non-controller", seconds=2),
                  FaultSpec(at_s=9, fault=FaultKind.TRUNCATE_LOG_TAIL, target="non-controller", seconds=2),
                  FaultSpec(at_s=15, fault=FaultKind.LOSE_UNFLUSHED_TAIL, target="non-controller", seconds=2)],
        duration_s=23, settle_s=30, horizon_s=6, seed=4)  # the last broker back ~6 s before the load ends
    run_dir, summary = run(experiment, tmp_path)
    invariants = summary.check.invariants
    assert invariants == {name: 0 for name in invariants} and len(invariants) == len(INVARIANTS)
    faults = sorted((rundir.FaultRecord.model_validate_json(line)
                     for line in (run_dir / rundir.FAULTS).read_text().splitlines()), key=lambda f: f.fault_id)
    assert [f.kind for f in faults] == [s.fault for s in experiment.schedule]
    for fault in faults:  # each really damaged the logs of its broker, down for its seconds
        print(fault.kind.value, fault.target, fault.detail)
        logs, lost_bytes, offsets = map(int, re.match(r"(\d+) logs, (\d+) bytes, (\d+) offsets", fault.detail).groups())
        assert logs == 12 and lost_bytes > 0 and offsets >= logs, fault.detail
        assert fault.ended_ms - fault.injected_ms >= 2000
    assert "flipped byte" in faults[0].detail and "cut at byte" in faults[1].detail
    cuts = re.findall(r"segment (\d+) cut at byte (\d+) of (\d+)", faults[2].detail)
    assert cuts and any(int(base) > 0 for base, _, _ in cuts)  # the flushed segments were kept
    failovers = [rundir.FailoverRecord.model_validate_json(line)
                 for line in (run_dir / rundir.FAILOVERS).read_text().splitlines()]
    assert {f.kind for f in faults} <= {f.fault_kind for f in failovers}  # each kill handled as a failover
    samples = [rundir.StateSample.model_validate_json(line)
               for line in (run_dir / rundir.PARTITION_STATES).read_text().splitlines()]
    for fault in faults:  # back, recovered and caught up: in every ISR again
        assert any(s.ts_ms > fault.ended_ms and all(fault.target in p.isr for p in s.partitions.values())
                   for s in samples), f"broker {fault.target} did not rejoin every ISR after {fault.kind.value}"
    assert summary.acked > 5000
    assert check_main([str(run_dir)]) == 0


def flaky_zookeeper_keeps_every_invariant_and_every_session(experiment: Experiment, tmp_path) -> None:
    """The flaky-zookeeper run: every invariant (no record lost, no controller event failed, every admin
    action done), no session expired (one controller epoch, each broker registered once), the drops
    made, every action recorded without an error."""
    run_dir, summary = run(experiment, tmp_path)
    invariants = summary.check.invariants
    assert invariants == {name: 0 for name in invariants} and len(invariants) == len(INVARIANTS)
    assert summary.check.counts["controller_epochs"] == 1
    [fault] = [rundir.FaultRecord.model_validate_json(line) for line in (run_dir / rundir.FAULTS).read_text().splitlines()]
    assert int(fault.detail.split()[0]) >= experiment.schedule[0].seconds / 5  # a round every 2-4.5 s
    registered = [e for e in (json.loads(line) for line in (run_dir / "broker_events.jsonl").read_text().splitlines())
                  if e["kind"] == "registered"]
    assert sorted(e["broker_id"] for e in registered) == experiment.broker_ids
    actions = [rundir.ActionRecord.model_validate_json(line)
               for line in (run_dir / rundir.ACTIONS).read_text().splitlines()]
    assert sorted(a.kind for a in actions) == sorted(a.action for a in experiment.actions)
    assert [a.error for a in actions if a.error] == []
    final = rundir.FinalState.model_validate_json((run_dir / rundir.FINAL_STATE).read_text())
    assert "scratch" in final.topics and final.topics["audit"].partitions == max(
        a.partitions for a in experiment.actions if a.topic == "audit" and a.partitions)
    assert summary.acked > 1000 and check_main([str(run_dir)]) == 0


@pytest.mark.slow  # about 31 s; in the default run test_connection_loss.py (a lost connection, an expired session),
# test_admin_api.py and test_controller_flows.py (each admin action) show its parts
def test_flaky_zookeeper_with_admin_actions_loses_no_event_and_no_session(environment, tmp_path):
    """experiments/flaky-zookeeper.yaml's shape, shortened to 20 s of drops with every kind of admin
    action among them (the file itself: the slow test below)."""
    full = load_experiment(REPO / "experiments" / "flaky-zookeeper.yaml")
    actions = [{"at_s": 2, "action": "create-topic", "topic": "audit", "partitions": 200},
               {"at_s": 4, "action": "create-topic", "topic": "scratch", "partitions": 60, "replication_factor": 2},
               {"at_s": 6, "action": "add-partitions", "topic": "audit", "partitions": 240},
               {"at_s": 8, "action": "reassign-partitions", "topic": "audit"},
               {"at_s": 11, "action": "alter-config", "topic": "audit", "config": {"retention.ms": "3600000"}},
               {"at_s": 13, "action": "delete-topic", "topic": "scratch"},
               {"at_s": 15, "action": "preferred-election", "topic": "audit"},
               {"at_s": 17, "action": "create-topic", "topic": "scratch", "partitions": 30},
               {"at_s": 19, "action": "unclean-election", "topic": "scratch"}]
    short = Experiment.model_validate(full.model_dump() | {
        "name": "flaky-zookeeper-short", "schedule": [{"at_s": 1, "fault": "flaky-zookeeper", "seconds": 20}],
        "actions": actions, "load": full.load.model_dump() | {"rate": 600}, "duration_s": 22, "settle_s": 40,
        "horizon_s": 5})
    flaky_zookeeper_keeps_every_invariant_and_every_session(short, tmp_path)


@pytest.mark.slow  # about two minutes
def test_the_flaky_zookeeper_experiment_loses_no_event_and_no_session(environment, tmp_path):
    flaky_zookeeper_keeps_every_invariant_and_every_session(
        load_experiment(REPO / "experiments" / "flaky-zookeeper.yaml"), tmp_path)


@pytest.mark.slow  # about 10 minutes: 100,000 partitions made, and a broker killed among them, on one host
def test_the_sweep_to_100000_partitions_keeps_every_invariant_and_charts_the_controllers_phases(environment, tmp_path):
    """experiments/sweep-100k.yaml: one cluster grown from 300 to 10,000 to 100,000 partitions (the growth
    idle, the load on the first 300), a broker killed at each count; every invariant holds at every count
    and the Spark report has the controller's phases at each."""
    from jobs.sweep import load_sweep, run_sweep

    lines: list[str] = []
    _, result = run_sweep(load_sweep(REPO / "experiments" / "sweep-100k.yaml"), tmp_path, progress=lines.append)
    print("\n".join(lines))
    assert any("every invariant holds" in line for line in lines) and not any("BROKEN" in line for line in lines)
    assert any("90,000 partitions more, 100,000 in all, 300 written" in line for line in lines)
    by_count = {r["partitions_total"]: r for r in result.by_count if r["kind"] == "broker_failure"}
    assert sorted(by_count) == [300, 10_000, 100_000]
    for count, row in by_count.items():  # RF 3 on 3 brokers: a kill affects every partition at the controller
        assert row["n"] == 1 and row["partitions_affected"] == count
        assert all(row[f"{phase}_p50"] is not None for phase in ("election_zk_ms", "propagation_ms"))
    assert (result.out / "controller_phases_vs_partitions.png").stat().st_size > 10_000
    assert "| broker_failure | on | 100,000 | 1 | 100,000 |" in (result.out / "report.md").read_text()
