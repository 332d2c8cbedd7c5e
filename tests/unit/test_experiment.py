"""jobs.experiments.experiment (the declarative Experiment, load_experiment) and jobs.experiments.schedule.schedule."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from coordination.errors import KrayError
from coordination.zkdata import TopicPartition
from jobs.experiments.chaos import BROKER_FAULTS, HOST_FAULTS
from jobs.experiments.experiment import Experiment, FaultSpec, LoadSpec, RandomFaults, TopicSpec, load_experiment
from jobs.measures.rundir import FaultKind
from jobs.experiments.schedule import awaited_after_kill, returns_awaited, schedule
from jobs.measures.rundir import PartitionLeadership

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- the repository's smoke experiment ---------------------------------------------------------------


def test_smoke_experiment_loads_with_its_values():
    exp = load_experiment(REPO / "experiments" / "smoke.yaml")
    assert exp.name == "smoke"
    assert exp.brokers == 3
    assert exp.broker_ids == [1, 2, 3]
    assert exp.session_timeout_ms == 3000
    assert exp.detector is True
    assert exp.broker.min_insync_replicas == 2
    assert exp.broker.replica_lag_time_max_ms == 2000
    assert exp.broker.replica_fetch_wait_max_ms == 200
    assert exp.broker.isr_change_propagation_interval_ms == 500
    assert exp.broker.replica_fetch_backoff_ms == 200
    assert exp.topics == [TopicSpec(name="orders", partitions=12, replication_factor=3)]
    assert exp.load == LoadSpec(producers=2, rate=1000, record_size=100, acks="all", consumers=1)
    assert exp.load.acks_code == -1
    assert exp.duration_s == 40
    assert exp.settle_s == 30
    assert exp.seed == 1
    assert exp.random_faults is None
    assert len(exp.schedule) == 6
    assert exp.schedule == [
        FaultSpec(at_s=4, fault=FaultKind.KILL_BROKER, target="non-controller", seconds=4),
        FaultSpec(at_s=12, fault=FaultKind.RESTART_BROKER, target="non-controller", seconds=3.0),
        FaultSpec(at_s=18, fault=FaultKind.KILL_CONTROLLER, target=None, seconds=3.0),
        FaultSpec(at_s=25, fault=FaultKind.PAUSE_BROKER, target="non-controller", seconds=2),
        FaultSpec(at_s=30, fault=FaultKind.EXPIRE_BROKER_SESSION, target="non-controller", seconds=3.0),
        FaultSpec(at_s=35, fault=FaultKind.KILL_REQUEST_SENDER, target="random", seconds=3.0),
    ]


# -- defaults ----------------------------------------------------------------------------------------


def test_only_a_name_is_a_valid_experiment(tmp_path):
    exp = load_experiment(write(tmp_path, "name: minimal\n"))
    assert exp == Experiment(name="minimal")
    assert exp.brokers == 3
    assert exp.session_timeout_ms == 6000
    assert exp.detector is True
    assert exp.broker.min_insync_replicas == 2  # not BrokerConfig's own default of 1
    assert exp.topics == [TopicSpec(name="load", partitions=12, replication_factor=3)]
    assert exp.load.acks == "all"
    assert exp.load.acks_code == -1
    assert exp.load.producers == 1
    assert exp.load.consumers == 1
    assert exp.schedule == []
    assert exp.random_faults is None
    assert exp.duration_s == 30.0
    assert exp.settle_s == 30.0
    assert exp.sample_interval_s == 1.0
    assert exp.seed == 0


@pytest.mark.parametrize("acks, code", [("all", -1), (-1, -1), (1, 1), (0, 0)])
def test_acks_code(acks, code):
    assert LoadSpec(acks=acks).acks_code == code


def test_json_is_yaml_too(tmp_path):
    exp = load_experiment(write(tmp_path, '{"name": "as-json", "brokers": 5, "seed": 9}', "exp.json"))
    assert (exp.name, exp.brokers, exp.seed) == ("as-json", 5, 9)


@pytest.mark.parametrize("acks", [1, 0])
def test_min_insync_larger_than_replication_factor_is_fine_without_acks_all(tmp_path, acks):
    exp = load_experiment(write(tmp_path, f"""
name: x
brokers: 3
broker: {{min_insync_replicas: 3}}
topics: [{{name: a, replication_factor: 2}}]
load: {{acks: {acks}}}
"""))
    assert exp.broker.min_insync_replicas == 3
    assert exp.topics[0].replication_factor == 2
    assert exp.load.acks_code == acks


def test_fault_just_inside_duration_and_edge_broker_ids_are_fine(tmp_path):
    exp = load_experiment(write(tmp_path, """
name: x
brokers: 3
duration_s: 10
schedule:
  - {at_s: 0, fault: kill-broker, target: 1}
  - {at_s: 9.5, fault: pause-broker, target: 3, seconds: 0}
  - {at_s: 5, fault: zk-restart}
"""))
    assert [(f.at_s, f.fault, f.target, f.seconds) for f in exp.schedule] == [
        (0, FaultKind.KILL_BROKER, 1, 3.0), (9.5, FaultKind.PAUSE_BROKER, 3, 0), (5, FaultKind.ZK_RESTART, None, 3.0)]


# -- every problem is a KrayError naming it -----------------------------------------------------------

BAD = [
    ("unknown-top-level", "name: x\nbogus: 1\n", ["bogus: Extra inputs are not permitted"]),
    ("unknown-in-load", "name: x\nload: {producers: 1, bogus: 1}\n", ["load.bogus: Extra inputs are not permitted"]),
    ("unknown-in-schedule", "name: x\nschedule: [{at_s: 1, fault: kill-controller, bogus: 1}]\n",
     ["schedule.0.bogus: Extra inputs are not permitted"]),
    ("unknown-in-broker", "name: x\nbroker: {min_insync_replicas: 2, bogus: 1}\n",
     ["broker.bogus: Extra inputs are not permitted"]),
    ("unknown-in-controller", "name: x\ncontroller: {bogus: 1}\n", ["controller.bogus: Extra inputs are not permitted"]),
    ("unknown-in-topic", "name: x\ntopics: [{name: a, bogus: 1}]\n", ["topics.0.bogus: Extra inputs are not permitted"]),
    ("unknown-in-random-faults", "name: x\nrandom_faults: {bogus: 1}\n",
     ["random_faults.bogus: Extra inputs are not permitted"]),
    ("replication-factor-over-brokers", "name: x\nbrokers: 2\ntopics: [{name: a, replication_factor: 3}]\n",
     ["topic a: replication factor 3 larger than the 2 brokers"]),
    ("min-insync-over-replication-factor-acks-all",
     "name: x\nbrokers: 3\nbroker: {min_insync_replicas: 3}\ntopics: [{name: a, replication_factor: 2}]\n",
     ["topic a: min_insync_replicas 3 larger than its replication factor 2: acks=all could never succeed"]),
    ("min-insync-over-replication-factor-acks-minus-1",
     "name: x\nbroker: {min_insync_replicas: 3}\ntopics: [{name: a, replication_factor: 2}]\nload: {acks: -1}\n",
     ["topic a: min_insync_replicas 3 larger than its replication factor 2"]),
    ("duplicate-topics", "name: x\ntopics: [{name: a}, {name: b}, {name: a}]\n", ["topic names must be unique"]),
    ("topic-name-slash", "name: x\ntopics: [{name: bad/name}]\n",
     ["topics.0.name", 'Topic name "bad/name" is illegal']),
    ("topic-name-dotdot", "name: x\ntopics: [{name: '..'}]\n",
     ["topics.0.name", 'Topic name cannot be "." or ".."']),
    ("topic-name-empty", "name: x\ntopics: [{name: ''}]\n", ["topics.0.name", "it can't be empty"]),
    ("no-topics", "name: x\ntopics: []\n", ["topics: List should have at least 1 item"]),
    ("zero-partitions", "name: x\ntopics: [{name: a, partitions: 0}]\n",
     ["topics.0.partitions: Input should be greater than or equal to 1"]),
    ("fault-at-duration", "name: x\nduration_s: 10\nschedule: [{at_s: 10, fault: kill-controller}]\n",
     ["fault kill-controller at 10.0s is not within duration_s=10.0"]),
    ("fault-after-duration", "name: x\nduration_s: 10\nschedule: [{at_s: 12.5, fault: zk-restart}]\n",
     ["fault zk-restart at 12.5s is not within duration_s=10.0"]),
    ("broker-fault-without-target", "name: x\nschedule: [{at_s: 1, fault: kill-broker}]\n",
     ["schedule.0", "kill-broker needs a target"]),
    ("pause-without-target", "name: x\nschedule: [{at_s: 1, fault: zk-restart}, {at_s: 2, fault: pause-broker}]\n",
     ["schedule.1", "pause-broker needs a target"]),
    ("target-above-brokers", "name: x\nbrokers: 3\nschedule: [{at_s: 1, fault: kill-broker, target: 4}]\n",
     ["fault kill-broker: broker 4 is not one of 1..3"]),
    ("target-zero", "name: x\nbrokers: 3\nschedule: [{at_s: 1, fault: restart-broker, target: 0}]\n",
     ["fault restart-broker: broker 0 is not one of 1..3"]),
    ("controller-fault-with-target", "name: x\nschedule: [{at_s: 1, fault: kill-controller, target: 1}]\n",
     ["schedule.0", "kill-controller takes no target"]),
    ("zk-restart-with-target", "name: x\nschedule: [{at_s: 1, fault: zk-restart, target: random}]\n",
     ["schedule.0", "zk-restart takes no target"]),
    ("negative-seconds", "name: x\nschedule: [{at_s: 1, fault: kill-controller, seconds: -1}]\n",
     ["schedule.0.seconds: Input should be greater than or equal to 0"]),
    ("negative-at", "name: x\nschedule: [{at_s: -1, fault: kill-controller}]\n",
     ["schedule.0.at_s: Input should be greater than or equal to 0"]),
    ("negative-random-seconds", "name: x\nrandom_faults: {seconds: -0.5}\n",
     ["random_faults.seconds: Input should be greater than or equal to 0"]),
    ("unknown-fault-kind", "name: x\nschedule: [{at_s: 1, fault: melt-broker}]\n",
     ["schedule.0.fault: Input should be 'kill-broker'"]),
    ("unknown-random-kind", "name: x\nrandom_faults: {kinds: [kill-broker, melt-broker]}\n",
     ["random_faults.kinds.1: Input should be 'kill-broker'"]),
    ("at-return-with-nothing-before", "name: x\nschedule: [{at_s: 1, fault: kill-broker, target: leader, "
     "at_return: true}, {at_s: 2, fault: kill-broker, target: 1}]\n",
     ["fault kill-broker at 1.0s: at_return needs an earlier fault that takes a broker down"]),
    ("at-return-after-a-pause", "name: x\nschedule: [{at_s: 1, fault: pause-broker, target: 1}, "
     "{at_s: 2, fault: kill-broker, target: leader, at_return: true}]\n",
     ["at_return needs an earlier fault that takes a broker down and brings it back (controlled-shutdown"]),
    ("at-return-and-after-recovery", "name: x\nschedule: [{at_s: 1, fault: kill-broker, target: 1}, {at_s: 2, "
     "fault: kill-broker, target: leader, at_return: true, after_recovery: true}]\n",
     ["schedule.1", "at_return and after_recovery wait for different things"]),
    ("once-during-the-run", "name: x\ntopics: [{name: a}, {name: b, load: once, after_fault: 1}]\n",
     ["topics.1", "a topic loaded once is created before the load"]),
    ("only-idle-topics", "name: x\ntopics: [{name: a, load: once}]\n",
     ["the load needs a topic streamed from the start"]),
    ("unknown-topic-load", "name: x\ntopics: [{name: a, load: sometimes}]\n",
     ["topics.0.load: Input should be 'stream', 'once' or 'idle'"]),
    ("every-min-over-max", "name: x\nrandom_faults: {every_s: [5, 2]}\n",
     ["random_faults", "every_s must be (min, max) with 0 < min <= max"]),
    ("every-min-zero", "name: x\nrandom_faults: {every_s: [0, 2]}\n",
     ["random_faults", "every_s must be (min, max) with 0 < min <= max"]),
    ("every-min-negative", "name: x\nrandom_faults: {every_s: [-1, 2]}\n",
     ["random_faults", "every_s must be (min, max) with 0 < min <= max"]),
    ("empty-kinds", "name: x\nrandom_faults: {kinds: []}\n", ["random_faults", "kinds must name at least one fault"]),
    ("bad-name-spaces", "name: has spaces\n", ["name: String should match pattern"]),
    ("no-name", "brokers: 3\n", ["name: Field required"]),
    ("zero-brokers", "name: x\nbrokers: 0\n", ["brokers: Input should be greater than or equal to 1"]),
    ("zero-duration", "name: x\nduration_s: 0\n", ["duration_s: Input should be greater than 0"]),
    ("bad-acks", "name: x\nload: {acks: 2}\n", ["load.acks"]),
    ("batch-over-message-max-bytes", "name: x\nload: {record_size: 1048576}\n",
     ["over the brokers' message_max_bytes", "MESSAGE_TOO_LARGE"]),
    ("short-session-timeout", "name: x\nsession_timeout_ms: 999\n",
     ["session_timeout_ms: Input should be greater than or equal to 1000"]),
    ("link-fault-on-a-process-fault", "name: x\nschedule: [{at_s: 1, fault: kill-controller, link: {delay_ms: 5}}]\n",
     ["schedule.0", "kill-controller takes no link fault"]),
    ("split-with-target", "name: x\nschedule: [{at_s: 1, fault: split-brokers, target: 1}]\n",
     ["schedule.0", "split-brokers takes no target"]),
    ("cut-replication-without-target", "name: x\nschedule: [{at_s: 1, fault: cut-replication}]\n",
     ["schedule.0", "cut-replication needs a target"]),
    ("impossible-slow-link", "name: x\nschedule: [{at_s: 1, fault: slow-replication, target: 1, link: {loss: 2}}]\n",
     ["schedule.0.link.loss: Input should be less than or equal to 1"]),
    ("first-topic-created-later", "name: x\ntopics: [{name: a, after_fault: 1}]\n"
     "schedule: [{at_s: 1, fault: kill-controller}, {at_s: 2, fault: kill-controller, after_recovery: true}]\n"
     "controller: {leader_imbalance_check_interval_seconds: 5}\n",
     ["topic a: the first topic is created before the load"]),
    ("topic-after-the-last-fault", "name: x\ntopics: [{name: a}, {name: b, after_fault: 1}]\n"
     "schedule: [{at_s: 1, fault: kill-controller}]\n",
     ["topic b: after_fault=1 needs a fault 2 in the schedule that waits for recovery"]),
    ("topic-before-a-fault-that-does-not-wait", "name: x\ntopics: [{name: a}, {name: b, after_fault: 1}]\n"
     "schedule: [{at_s: 1, fault: kill-controller}, {at_s: 2, fault: kill-controller}]\n",
     ["topic b: after_fault=1 needs a fault 2 in the schedule that waits for recovery"]),
    ("topic-after-random-faults", "name: x\ntopics: [{name: a}, {name: b, after_fault: 1}]\nrandom_faults: {}\n"
     "schedule: [{at_s: 1, fault: kill-controller}, {at_s: 2, fault: kill-controller, after_recovery: true}]\n"
     "controller: {leader_imbalance_check_interval_seconds: 5}\n",
     ["topic b: after_fault counts the schedule's faults, which random_faults would interleave"]),
    ("action-on-a-load-topic", "name: x\nactions: [{at_s: 1, action: create-topic, topic: load, partitions: 3}]\n",
     ["action create-topic load at 1s: load is a topic of the load"]),
    ("action-before-its-topic", "name: x\nactions: [{at_s: 1, action: delete-topic, topic: a}, "
     "{at_s: 2, action: create-topic, topic: a, partitions: 1}]\n",
     ["action delete-topic a at 1s: needs an earlier create-topic of a"]),
    ("action-after-its-topics-deletion", "name: x\nactions: [{at_s: 1, action: create-topic, topic: a, partitions: 1}, "
     "{at_s: 2, action: delete-topic, topic: a}, {at_s: 3, action: add-partitions, topic: a, partitions: 2}]\n",
     ["action add-partitions a at 3s: needs an earlier create-topic of a (not deleted since)"]),
    ("topic-created-twice", "name: x\nactions: [{at_s: 1, action: create-topic, topic: a, partitions: 1}, "
     "{at_s: 2, action: create-topic, topic: a, partitions: 1}]\n",
     ["action create-topic a at 2s: the topic exists already"]),
    ("action-after-duration", "name: x\nduration_s: 5\nactions: [{at_s: 5, action: create-topic, topic: a, "
     "partitions: 1}]\n", ["action create-topic a at 5s is not within duration_s=5.0"]),
    ("create-without-partitions", "name: x\nactions: [{at_s: 1, action: create-topic, topic: a}]\n",
     ["actions.0", "create-topic a: needs partitions"]),
    ("alter-config-without-config", "name: x\nactions: [{at_s: 1, action: create-topic, topic: a, partitions: 1}, "
     "{at_s: 2, action: alter-config, topic: a}]\n", ["actions.1", "alter-config a: needs config"]),
    ("delete-with-partitions", "name: x\nactions: [{at_s: 1, action: delete-topic, topic: a, partitions: 3}]\n",
     ["actions.0", "delete-topic a: takes no partitions"]),
    ("replicas-on-an-election", "name: x\nactions: [{at_s: 1, action: preferred-election, topic: a, "
     "replicas: {0: [1]}}]\n", ["actions.0", "preferred-election a: takes no replicas"]),
    ("action-replication-over-brokers", "name: x\nbrokers: 2\ntopics: [{name: l, replication_factor: 2}]\n"
     "actions: [{at_s: 1, action: create-topic, topic: a, partitions: 1, replication_factor: 3}]\n",
     ["action create-topic a at 1s: replication factor 3 larger than the 2 brokers"]),
    ("reassign-to-a-broker-not-there", "name: x\nactions: [{at_s: 1, action: create-topic, topic: a, partitions: 1}, "
     "{at_s: 2, action: reassign-partitions, topic: a, replicas: {0: [1, 4]}}]\n",
     ["partition 0's replicas [1, 4] must be distinct brokers of 1..3"]),
    ("action-topic-name", "name: x\nactions: [{at_s: 1, action: create-topic, topic: 'a b', partitions: 1}]\n",
     ["actions.0.topic", 'Topic name "a b" is illegal']),
    ("unknown-action", "name: x\nactions: [{at_s: 1, action: rename-topic, topic: a}]\n",
     ["actions.0.action: Input should be 'create-topic'"]),
]


@pytest.mark.parametrize("text, expected", [pytest.param(t, e, id=i) for i, t, e in BAD])
def test_invalid_experiment_is_one_line_kray_error_naming_the_problem(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(KrayError) as info:
        load_experiment(path)
    message = str(info.value)
    assert message.startswith(f"KrayError: {path}: ")
    for part in expected:
        assert part in message
    assert "\n" not in message


@pytest.mark.parametrize("make, message", [
    (lambda d: write(d, "- name: x\n- name: y\n"), "{path}: an experiment is a mapping of fields, got list"),
    (lambda d: write(d, ""), "{path}: an experiment is a mapping of fields, got NoneType"),
    (lambda d: d / "nope.yaml", "cannot read experiment file {path}: No such file or directory"),
    (lambda d: d, "cannot read experiment file {path}: Is a directory"),
], ids=["a YAML list", "an empty file", "a missing file", "a directory"])
def test_files_that_are_not_experiments(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(KrayError) as info:
        load_experiment(path)
    assert str(info.value) == "KrayError: " + message.format(path=path)


def test_malformed_yaml_is_a_kray_error(tmp_path):
    path = write(tmp_path, "name: [x\nbrokers: 3\n")
    with pytest.raises(KrayError) as info:
        load_experiment(path)
    assert str(info.value).startswith(f"KrayError: {path} is not valid YAML at line ")


def test_malformed_yaml_error_is_one_line(tmp_path):
    path = write(tmp_path, "name: [x\nbrokers: 3\n")
    with pytest.raises(KrayError) as info:
        load_experiment(path)
    assert "\n" not in str(info.value)


def test_non_utf8_file_is_a_kray_error(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_bytes(b"name: x\xff\xfe\n")
    with pytest.raises(KrayError):
        load_experiment(path)


# -- schedule(experiment, rng) -------------------------------------------------------------------------

BROKER_KINDS = [FaultKind.KILL_BROKER, FaultKind.PAUSE_BROKER, FaultKind.KILL_REQUEST_SENDER]
OTHER_KINDS = [FaultKind.KILL_CONTROLLER, FaultKind.ZK_RESTART, FaultKind.EXPIRE_CONTROLLER_SESSION]


def random_experiment(**overrides) -> Experiment:
    fields = dict(name="r", duration_s=200, random_faults=RandomFaults(every_s=(3.0, 11.0), kinds=BROKER_KINDS + OTHER_KINDS,
                                                                      seconds=1.5))
    fields.update(overrides)
    return Experiment(**fields)


def replay(exp: Experiment, seed: int) -> list[tuple[float, FaultKind]]:
    """The random faults drawn independently: a first gap, then a kind and the next gap, until duration_s."""
    rng = random.Random(seed)
    lo, hi = exp.random_faults.every_s
    out, at = [], rng.uniform(lo, hi)
    while at < exp.duration_s:
        out.append((at, rng.choice(exp.random_faults.kinds)))
        at += rng.uniform(lo, hi)
    return out


def test_no_random_faults_gives_the_declared_ones_sorted():
    exp = Experiment(name="d", duration_s=60, schedule=[
        FaultSpec(at_s=20, fault=FaultKind.ZK_RESTART),
        FaultSpec(at_s=5, fault=FaultKind.KILL_BROKER, target=2, seconds=4),
        FaultSpec(at_s=12, fault=FaultKind.KILL_CONTROLLER)])
    assert schedule(exp, random.Random(1)) == [exp.schedule[1], exp.schedule[2], exp.schedule[0]]


def test_same_seed_same_schedule_and_exact_draws():
    exp = random_experiment()
    first = schedule(exp, random.Random(42))
    assert first == schedule(exp, random.Random(42))
    assert [(f.at_s, f.fault) for f in first] == replay(exp, 42)
    assert len(first) >= 200 // 11


def test_different_seed_different_schedule():
    exp = random_experiment()
    a, b = schedule(exp, random.Random(1)), schedule(exp, random.Random(2))
    assert a != b
    assert [f.at_s for f in a] != [f.at_s for f in b]
    assert [(f.at_s, f.fault) for f in b] == replay(exp, 2)


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_random_fault_times_within_duration_and_gaps_within_every_s(seed):
    exp = random_experiment()
    faults = schedule(exp, random.Random(seed))
    times = [f.at_s for f in faults]
    assert faults
    assert all(0 < t < exp.duration_s for t in times)
    assert 3.0 <= times[0] <= 11.0
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(3.0 <= g <= 11.0 for g in gaps)
    assert exp.duration_s - times[-1] <= 11.0  # no room for another one was left
    assert all(f.seconds == 1.5 for f in faults)


@pytest.mark.parametrize("seed", [0, 3, 99])
def test_broker_kinds_get_target_random_others_none(seed):
    faults = schedule(random_experiment(), random.Random(seed))
    kinds = {f.fault for f in faults}
    assert kinds & set(BROKER_KINDS) and kinds & set(OTHER_KINDS)  # both sorts drawn with these seeds
    for f in faults:
        assert f.target == (None if f.fault not in BROKER_FAULTS else
                            "non-controller" if f.fault is FaultKind.CUT_CONTROLLER_BROKER else "random")


def test_declared_and_random_faults_come_out_sorted():
    declared = [
        FaultSpec(at_s=95, fault=FaultKind.KILL_BROKER, target=1, seconds=4),
        FaultSpec(at_s=0.5, fault=FaultKind.KILL_CONTROLLER),
        FaultSpec(at_s=50, fault=FaultKind.PAUSE_BROKER, target="controller", seconds=2),
    ]
    exp = random_experiment(duration_s=100, schedule=declared)
    faults = schedule(exp, random.Random(5))
    assert [f.at_s for f in faults] == sorted(f.at_s for f in faults)
    assert faults[0] == declared[1]
    assert all(d in faults for d in declared)
    random_ones = [f for f in faults if f not in declared]
    assert [(f.at_s, f.fault) for f in random_ones] == replay(exp, 5)
    assert len(faults) == len(declared) + len(random_ones)
    assert exp.schedule == declared  # the experiment's own list is left alone


def test_every_s_beyond_duration_draws_nothing():
    exp = random_experiment(duration_s=20, random_faults=RandomFaults(every_s=(25, 30)),
                            schedule=[FaultSpec(at_s=3, fault=FaultKind.ZK_RESTART)])
    assert schedule(exp, random.Random(0)) == [FaultSpec(at_s=3, fault=FaultKind.ZK_RESTART)]


def test_single_kind_fixed_interval():
    exp = random_experiment(duration_s=10, random_faults=RandomFaults(every_s=(2.5, 2.5), kinds=[FaultKind.ZK_RESTART],
                                                                      seconds=0))
    assert schedule(exp, random.Random(0)) == [
        FaultSpec(at_s=2.5, fault=FaultKind.ZK_RESTART, target=None, seconds=0),
        FaultSpec(at_s=5.0, fault=FaultKind.ZK_RESTART, target=None, seconds=0),
        FaultSpec(at_s=7.5, fault=FaultKind.ZK_RESTART, target=None, seconds=0),
    ]


# -- waiting for a recovered cluster before a fault ---------------------------------------------------

def test_recovered_needs_every_replica_up_and_in_sync_and_leaders_balanced_as_kafka_leaves_them():
    from jobs.measures.rundir import PartitionLeadership as L
    from jobs.experiments.settling import recovered

    assignment = {TopicPartition("t", p): [1 + p % 3, 1 + (p + 1) % 3, 1 + (p + 2) % 3] for p in range(30)}
    healthy = {f"t-{p}": L(leader=r[0], leader_epoch=2, isr=sorted(r)) for p, r in
               ((tp.partition, r) for tp, r in assignment.items())}
    assert recovered(assignment, healthy, {1, 2, 3}, 10, {})
    assert not recovered(assignment, healthy, {1, 2}, 10, {})  # a broker is down
    assert not recovered(assignment, {**healthy, "t-1": L(leader=2, leader_epoch=3, isr=[2, 3])}, {1, 2, 3}, 10, {})
    assert not recovered(assignment, {k: v for k, v in healthy.items() if k != "t-4"}, {1, 2, 3}, 10, {})
    one_moved = {**healthy, "t-0": L(leader=2, leader_epoch=3, isr=[1, 2, 3])}  # 1 of broker 1's 10: 10%
    assert recovered(assignment, one_moved, {1, 2, 3}, 10, {})  # the auto leader rebalance leaves it so too
    two_moved = {**one_moved, "t-3": L(leader=3, leader_epoch=3, isr=[1, 2, 3])}  # 20%
    assert not recovered(assignment, two_moved, {1, 2, 3}, 10, {})
    assert recovered(assignment, two_moved, {1, 2, 3}, 20, {})
    assert recovered(assignment, two_moved, {1, 2, 3}, None, {})  # no auto leader rebalance: not waited for
    # the last kill's partitions must have moved past the epochs they had (the controller handled it)
    assert not recovered(assignment, healthy, {1, 2, 3}, 10, {"t-0": 2, "t-1": 1})
    assert recovered(assignment, healthy, {1, 2, 3}, 10, {"t-0": 1, "t-1": 1})
    assert recovered({}, {}, set(), 10, {})


def test_the_records_read_back_at_more_than_one_offset_are_found_for_their_leaders_to_name_who_stored_them():
    from actors.clients.load import consumed_batch
    from actors.clients.consumer import ConsumedRecord
    from jobs.experiments.settling import repeated_records

    def row(topic: str, partition: int, offset: int, producer: str, seq: int):
        return TopicPartition(topic, partition), ConsumedRecord(offset, f"{producer}-{seq}".encode(), b"v", 1, 0)

    a, b = TopicPartition("a", 0), TopicPartition("b", 1)
    rows = [row("a", 0, 0, "p1", 0), row("a", 0, 1, "p1", 1), row("a", 0, 2, "p1", 0), row("b", 1, 0, "p2", 0),
            row("b", 1, 1, "p1", 1), row("b", 1, 2, "p2", 1), row("a", 0, 2, "p1", 0)]  # a@2 read twice: once
    read = consumed_batch(rows, 1.0, final=True)
    assert repeated_records(read) == {a: [(0, "p1-0"), (1, "p1-1"), (2, "p1-0")], b: [(1, "p1-1")]}
    assert repeated_records(consumed_batch(rows[3:4], 1.0, final=True)) == {}
    assert repeated_records(consumed_batch(rows[-1:] * 2, 1.0, final=True)) == {a: [(2, "p1-0")]}
    assert repeated_records(consumed_batch([], 1.0, final=True)) == {}


def test_after_recovery_is_off_by_default_and_a_fault_may_ask_for_it():
    assert not FaultSpec(at_s=1, fault=FaultKind.KILL_CONTROLLER).after_recovery
    spec = FaultSpec(at_s=1, fault=FaultKind.KILL_BROKER, target="non-controller", after_recovery=True,
                     recovery_timeout_s=30)
    assert spec.after_recovery and spec.recovery_timeout_s == 30
    with pytest.raises(ValueError):
        FaultSpec(at_s=1, fault=FaultKind.KILL_CONTROLLER, recovery_timeout_s=0)


def test_a_fault_cannot_wait_for_a_rebalance_slower_than_its_recovery_timeout():
    fault = {"at_s": 1, "fault": "kill-controller", "after_recovery": True, "recovery_timeout_s": 60}
    with pytest.raises(ValueError, match="leader_imbalance_check_interval_seconds"):
        Experiment(name="x", schedule=[fault])  # the default check runs every 300 s
    Experiment(name="x", schedule=[fault], controller={"leader_imbalance_check_interval_seconds": 5})
    Experiment(name="x", schedule=[fault], controller={"auto_leader_rebalance_enable": False})


def test_a_topic_may_be_created_during_the_run_before_a_fault_that_waits_for_recovery():
    kill = {"fault": "kill-broker", "target": "non-controller", "after_recovery": True}
    exp = Experiment(name="x", topics=[{"name": "a"}, {"name": "b", "partitions": 30, "after_fault": 2}],
                     schedule=[{"at_s": at, **kill} for at in (9, 3, 6)],  # counted in time order
                     controller={"leader_imbalance_check_interval_seconds": 5})
    assert [t.after_fault for t in exp.topics] == [0, 2]


def test_admin_actions_load_in_order_with_their_fields_and_flaky_zookeeper_turns_the_proxies_on(tmp_path):
    exp = load_experiment(write(tmp_path, """
name: x
schedule: [{at_s: 1, fault: flaky-zookeeper, seconds: 5}]
actions:
  - {at_s: 2, action: create-topic, topic: a, partitions: 4, config: {retention.ms: "1000"}}
  - {at_s: 3, action: reassign-partitions, topic: a, replicas: {0: [3, 2, 1]}}
  - {at_s: 4, action: add-partitions, topic: a, partitions: 6}
  - {at_s: 5, action: unclean-election, topic: a}
  - {at_s: 6, action: delete-topic, topic: a}
  - {at_s: 7, action: create-topic, topic: a, partitions: 1}
"""))
    assert [a.action.value for a in exp.actions] == ["create-topic", "reassign-partitions", "add-partitions",
                                                     "unclean-election", "delete-topic", "create-topic"]
    assert exp.actions[0].config == {"retention.ms": "1000"} and exp.actions[1].replicas == {0: [3, 2, 1]}
    assert exp.link_faults


def test_link_faults_turn_the_proxies_on_and_slow_replication_has_a_default_slowness(tmp_path):
    plain = load_experiment(write(tmp_path, "name: x\nschedule: [{at_s: 1, fault: kill-controller}]\n"))
    assert not plain.link_faults
    assert not Experiment(name="x", random_faults=RandomFaults()).link_faults  # process faults by default
    linked = load_experiment(write(tmp_path, "name: x\nschedule: [{at_s: 1, fault: slow-replication, "
                                             "target: leader}, {at_s: 2, fault: cut-replication, target: 2, "
                                             "seconds: 4}]\n"))
    assert linked.link_faults
    assert linked.schedule[0].slow.delay_ms == 200 and linked.schedule[1].slow is None
    assert Experiment(name="x", random_faults=RandomFaults(kinds=["split-brokers"])).link_faults


def test_a_disk_fault_drawn_is_followed_by_chance_by_the_leaders_kill_at_its_victims_return():
    """Issue 28's pair in random schedules: a power loss or torn write, then a leader's death the moment the
    victim registers again, so that long runs and the soak draw it too."""
    disk = [FaultKind.LOSE_UNFLUSHED_TAIL, FaultKind.TRUNCATE_LOG_TAIL]
    always = schedule(random_experiment(random_faults=RandomFaults(every_s=(5, 9), kinds=disk, kill_at_return=1)),
                      random.Random(3))
    assert [f.fault for f in always[1::2]] == [FaultKind.KILL_BROKER] * (len(always) // 2)
    for victim, kill in zip(always[::2], always[1::2]):
        assert victim.fault in disk and (kill.at_s, kill.target, kill.at_return) == (victim.at_s, "leader", True)
    assert returns_awaited(always) == {i: i - 1 for i in range(2, len(always) + 1, 2)}
    never = schedule(random_experiment(random_faults=RandomFaults(every_s=(5, 9), kinds=disk, kill_at_return=0)),
                     random.Random(3))
    assert never and all(f.fault in disk for f in never)
    half = schedule(random_experiment(random_faults=RandomFaults(every_s=(5, 9), kinds=disk)), random.Random(3))
    assert 0 < sum(f.at_return for f in half) < sum(f.fault in disk for f in half)


def test_a_fault_at_return_waits_for_the_last_fault_before_it_that_brought_a_broker_back():
    kill = FaultSpec(at_s=1, fault=FaultKind.KILL_BROKER, target=1)
    pause = FaultSpec(at_s=2, fault=FaultKind.PAUSE_BROKER, target=2)
    disk = FaultSpec(at_s=3, fault=FaultKind.LOSE_UNFLUSHED_TAIL, target=2)
    at_return = FaultSpec(at_s=3, fault=FaultKind.KILL_BROKER, target="leader", at_return=True)
    assert returns_awaited([kill, pause, at_return, disk, at_return]) == {3: 1, 5: 4}
    assert returns_awaited([at_return]) == {1: None}


def test_after_a_kill_the_next_fault_waits_for_new_epochs_where_the_controller_gives_them():
    states = {"t-0": PartitionLeadership(leader=1, leader_epoch=4, isr=[1, 2, 3]),
              "t-1": PartitionLeadership(leader=2, leader_epoch=7, isr=[2, 3]),
              "t-2": PartitionLeadership(leader=3, leader_epoch=1, isr=[1, 3])}
    assert awaited_after_kill(states, 1, controller=2) == {"t-0": 4, "t-2": 1}  # out of every ISR it is in
    assert awaited_after_kill(states, 1, controller=1) == {"t-0": 4}  # the controller's: only where it led
    assert awaited_after_kill(states, 4, controller=2) == {}


def test_the_hosts_experiment_makes_every_host_fault_and_a_controllers_host_loss_on_five_hosts():
    exp = load_experiment(REPO / "experiments" / "hosts.yaml")
    kinds = [f.fault for f in exp.schedule]
    assert set(kinds) >= HOST_FAULTS  # every one, and after each that has a twin made in a process or its links:
    twins = {FaultKind.HOST_POWER_LOSS: FaultKind.KILL_BROKER, FaultKind.ISOLATE_HOST: FaultKind.ISOLATE_BROKER,
             FaultKind.PARTITION_HOSTS_HALVES: FaultKind.SPLIT_BROKERS,
             FaultKind.PARTITION_HOSTS_BRIDGE: FaultKind.BRIDGE_BROKERS}
    for host_fault, twin in zip(exp.schedule, exp.schedule[1:]):
        if host_fault.fault in twins:
            assert (twin.fault, twin.target) == (twins[host_fault.fault], host_fault.target)
    assert any(f.fault is FaultKind.HOST_POWER_LOSS and f.target == "controller" for f in exp.schedule)
    assert {f.power_loss_logs for f in exp.schedule if f.fault is FaultKind.HOST_POWER_LOSS} == {"unflushed", "lost"}
    assert exp.brokers == 4 and exp.load.acks == "all" and exp.broker.min_insync_replicas == 2  # h1 drives


@pytest.mark.parametrize("spec, message", [
    (dict(fault="isolate-host", target=1, peer=2), "isolate-host takes no peer"),
    (dict(fault="kill-broker", target=1, logs="lost"), "kill-broker takes no logs"),
    (dict(fault="host-power-loss", target=1, logs="gone"), "Input should be 'kept', 'unflushed' or 'lost'"),
    (dict(fault="partition-hosts-halves", target=1), "takes no target"),
    (dict(fault="cut-hosts"), "needs a target"),
])
def test_a_host_fault_takes_what_it_needs_and_nothing_else(spec, message):
    with pytest.raises(ValueError, match=message):
        FaultSpec(at_s=1, **spec)
    assert FaultSpec(at_s=1, fault="cut-hosts", target=1).peer_target == "controller"


@pytest.mark.parametrize("brokers, schedule, message", [
    (3, [dict(at_s=1, fault="partition-hosts-majorities-ring")], "among 3 brokers' hosts: majorities-ring needs 4"),
    (2, [dict(at_s=1, fault="partition-hosts-bridge")], "bridge needs 3 hosts or more"),
    (3, [dict(at_s=1, fault="cut-hosts", target="controller")], "the target is the controller's broker, and so is"),
    (4, [dict(at_s=1, fault="isolate-host", target=1, seconds=8), dict(at_s=5, fault="partition-hosts-halves")],
     "partition-hosts-halves at 5.0s would replace isolate-host at 1.0s before its 8 s are over"),
])
def test_host_faults_that_cannot_be_made_or_would_undo_each_other_are_refused(brokers, schedule, message):
    fields = dict(name="h", brokers=brokers, duration_s=30, topics=[TopicSpec(replication_factor=2)],
                  controller={"leader_imbalance_check_interval_seconds": 5})
    with pytest.raises(ValueError, match=message):
        Experiment(**fields, schedule=schedule)
    one_after_the_other = [dict(f, after_recovery=True) for f in schedule]
    if len(schedule) > 1:  # both waiting for recovery, the second comes after the first
        Experiment(**fields, schedule=one_after_the_other)


def test_the_power_loss_experiment_pairs_each_disk_fault_with_a_kill_at_its_victims_return():
    exp = load_experiment(REPO / "experiments" / "power-loss.yaml")
    faults = schedule(exp, random.Random(exp.seed))
    assert returns_awaited(faults) == {2: 1, 4: 3, 6: 5, 8: 7}
    assert {f.fault for f in faults[::2]} == {FaultKind.LOSE_UNFLUSHED_TAIL, FaultKind.TRUNCATE_LOG_TAIL}
    assert {f.target for f in faults[::2]} == {"leader", "non-controller"}  # leaders and followers
    assert [t.load for t in exp.topics] == ["stream", "once"] and not exp.controller.unclean_leader_election_enable
