"""What kray's Kafka tools (kray topics / reassign / leader-election) accept and print, against Kafka 2.8's
TopicCommand, ReassignPartitionsCommand and LeaderElectionCommand, without ZooKeeper."""
from __future__ import annotations

import json
import random

import pytest

from coordination import admin, zkdata
from coordination.admin import PartitionDescription, PartitionReassignment, ReassignmentState, TopicDescription
from coordination.errors import AdminCommandFailedException, ApiError, Errors, InvalidReplicaAssignmentException
from coordination.zkdata import TopicPartition
from jobs.cli import build_parser
from jobs.cli.leader_election import election_partitions
from jobs.cli.reassign import reassign_action
from jobs.cli.topics import describe_report

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


def args(*argv):
    return build_parser().parse_args(list(argv))


# -- kray topics describe -----------------------------------------------------------------------

def described(config=None) -> list[TopicDescription]:
    return [TopicDescription("t", "id", [
        PartitionDescription(0, 1, [1, 2, 3], [1, 2, 3]),
        PartitionDescription(1, 2, [3, 2, 4], [2], adding=[3], removing=[4]),  # being reassigned
        PartitionDescription(2, -1, [4, 1, 2], [4]),  # offline
        PartitionDescription(3, 4, [4, 1, 2], [4, 1]),  # led by a broker that is gone
    ], config or {})]


def test_describe_prints_the_topic_then_every_partition_with_its_reassignment():
    assert admin.format_describe(described({"min.insync.replicas": "2"})).splitlines() == [
        "Topic: t\tTopicId: id\tPartitionCount: 4\tReplicationFactor: 3\tConfigs: min.insync.replicas=2",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3",
        "\tTopic: t\tPartition: 1\tLeader: 2\tReplicas: 3,2,4\tIsr: 2\tAdding Replicas: 3\tRemoving Replicas: 4",
        "\tTopic: t\tPartition: 2\tLeader: none\tReplicas: 4,1,2\tIsr: 4",
        "\tTopic: t\tPartition: 3\tLeader: 4\tReplicas: 4,1,2\tIsr: 4,1",
    ]


def test_a_reassignment_s_adding_replicas_do_not_count_in_the_replication_factor():
    moving = PartitionDescription(0, 1, [3, 4, 1, 2], [1, 2], adding=[3, 4], removing=[1, 2])
    assert moving.replication_factor == 2
    assert TopicDescription("t", None, [moving], {}).replication_factor == 2
    assert admin.format_describe([TopicDescription("t", None, [moving], {})], "under_replicated_partitions") == ""


@pytest.mark.parametrize("report,min_isr,partitions", [
    ("under_replicated_partitions", None, [1, 2, 3]),
    ("unavailable_partitions", None, [2, 3]),  # no leader, or one that is not live
    ("under_min_isr_partitions", None, [2]),  # the brokers' default, 1: only the leaderless one
    ("under_min_isr_partitions", "2", [1, 2]),  # the topic's min.insync.replicas
])
def test_a_report_prints_only_its_partitions_and_no_topic_line(report, min_isr, partitions):
    config = {"min.insync.replicas": min_isr} if min_isr else {}
    lines = admin.format_describe(described(config), report, live_brokers={1, 2, 3}, default_min_isr=1).splitlines()
    assert [int(line.split("Partition: ")[1].split("\t")[0]) for line in lines] == partitions
    assert all(line.startswith("\tTopic: t\tPartition: ") for line in lines)


def test_describe_takes_one_report_at_most():
    assert describe_report(args("topics", "describe", "--unavailable-partitions")) == "unavailable_partitions"
    assert describe_report(args("topics", "describe")) is None
    with pytest.raises(AdminCommandFailedException, match='"--under-replicated-partitions" can\'t be used with '
                                                          'option "--unavailable-partitions"'):
        describe_report(args("topics", "describe", "--under-replicated-partitions", "--unavailable-partitions"))


# -- --zookeeper and option mistakes ----------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ("topics", "list"), ("topics", "describe"), ("topics", "create", "--topic", "t"),
    ("topics", "delete", "--topic", "t"), ("topics", "alter", "--topic", "t", "--partitions", "2"),
    ("reassign", "--list"), ("leader-election", "--election-type", "preferred", "--all-topic-partitions"),
    ("configs", "--entity-type", "topics", "--entity-name", "t", "--describe"), ("cluster", "status"),
    ("cluster", "up"), ("zk", "status"), ("controller", "status"),
])
def test_zookeeper_goes_before_or_after_the_command(argv):
    assert args(*argv, "--zookeeper", "h:2181/k").zookeeper == "h:2181/k"
    assert args("--zookeeper", "h:2181/k", *argv).zookeeper == "h:2181/k"
    assert args("--zookeeper", "a:1", *argv, "--zookeeper", "b:2").zookeeper == "b:2"
    assert args(*argv).zookeeper is None


@pytest.mark.parametrize("argv,message", [
    (("topics", "create", "--topic", "t", "--partitions", "x"),
     "Error: kray topics create: argument --partitions: invalid int value: 'x'"),
    (("leader-election", "--election-type", "dirty", "--all-topic-partitions"),
     "Error: kray leader-election: argument --election-type: invalid choice: 'DIRTY' "
     "(choose from 'PREFERRED', 'UNCLEAN')"),
])
def test_mistaken_options_print_one_line_and_exit_1(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        args(*argv)
    assert e.value.code == 1
    assert capsys.readouterr().err.splitlines() == [message]


# -- kray reassign --------------------------------------------------------------------------------

@pytest.mark.parametrize("argv,message", [
    ((), "Command must include exactly one action: --generate, --execute, --verify, --cancel, --list"),
    (("--execute", "--verify", "--reassignment-json-file", "f"), "Command must include exactly one action"),
    (("--execute",), 'Missing required argument "--reassignment-json-file"'),
    (("--cancel",), 'Missing required argument "--reassignment-json-file"'),
    (("--generate", "--broker-list", "1,2"), 'Missing required argument "--topics-to-move-json-file"'),
    (("--generate", "--topics-to-move-json-file", "f"), 'Missing required argument "--broker-list"'),
    (("--execute", "--reassignment-json-file", "f", "--broker-list", "1"),
     'Option "--broker-list" can\'t be used with action "--execute"'),
    (("--list", "--reassignment-json-file", "f"), 'Option "--reassignment-json-file" can\'t be used with action'),
    (("--verify", "--reassignment-json-file", "f", "--namespace", "n"), 'Option "--namespace" can\'t be used'),
])
def test_reassign_takes_one_action_and_its_options(argv, message):
    with pytest.raises(AdminCommandFailedException, match=message):
        reassign_action(args("reassign", *argv))


@pytest.mark.parametrize("argv,action", [
    (("--generate", "--topics-to-move-json-file", "f", "--broker-list", "1,2"), "generate"),
    (("--execute", "--reassignment-json-file", "f"), "execute"),
    (("--verify", "--reassignment-json-file", "f"), "verify"),
    (("--cancel", "--reassignment-json-file", "f", "--namespace", "n"), "cancel"),
    (("--list",), "list"),
])
def test_reassign_actions(argv, action):
    assert reassign_action(args("reassign", *argv)) == action


def test_reassignment_json_as_kafka_formats_it():
    assert admin.format_reassignment_json({T1: [2, 3], TopicPartition("a", 0): [1]}) == (
        '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1],"log_dirs":["any"]},'
        '{"topic":"t","partition":1,"replicas":[2,3],"log_dirs":["any","any"]}]}')
    # what --generate and --execute print reads back as a reassignment file
    plan = admin.parse_reassignment(admin.format_reassignment_json({T0: [1, 2]}))
    assert plan.partitions == [zkdata.PartitionReplicas(topic="t", partition=0, replicas=[1, 2])]


def test_list_names_the_partitions_being_reassigned_from_the_topic_znodes():
    znode = zkdata.TopicZNode(partitions={"0": [1, 2], "1": [3, 1, 2], "2": [2, 3]},
                              adding_replicas={"1": [3]}, removing_replicas={"1": [2], "2": []})
    moving = admin.list_reassignments({"t": znode})
    assert moving == {T1: PartitionReassignment([3, 1, 2], [3], [2])}
    assert admin.format_reassignments(moving | {T2: PartitionReassignment([2, 3], [], [4])}) == (
        "Current partition reassignments:\n"
        "t-1: replicas: 3,1,2. adding: 3. removing: 2.\n"
        "t-2: replicas: 2,3. removing: 4.")
    assert admin.format_reassignments({}) == "No partition reassignments found."


def test_verify_states_as_kafka_words_them():
    assert admin.format_reassignment_states({
        T2: ReassignmentState([1, 2], [2, 3], done=False),
        T0: ReassignmentState([2, 1], [2, 1], done=True),
        T1: ReassignmentState([1, 2], [2, 3], done=True),
    }).splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is complete.",
        "There is no active reassignment of partition t-1, but replica set is 1,2 rather than 2,3.",
        "Reassignment of partition t-2 is still in progress.",
    ]


@pytest.mark.parametrize("text,message", [
    ('{"topics":[{"topic":"a"}', "Malformed topics-to-move JSON at document"),
    ('{"version":2,"topics":[{"topic":"a"}]}', "Malformed topics-to-move JSON at version"),
    ('{"topics":[{"name":"a"}]}', "Malformed topics-to-move JSON at topics.0.topic"),
    ('{"topics":[{"topic":"a"},{"topic":"a"}]}', "List of topics to reassign contains duplicate entries: a"),
])
def test_bad_topics_to_move_files(text, message):
    with pytest.raises(AdminCommandFailedException, match=message):
        admin.parse_topics_to_move(text)


def test_topics_to_move_and_broker_list():
    assert admin.parse_topics_to_move('{"topics":[{"topic":"a"},{"topic":"b"}],"version":1}') == ["a", "b"]
    assert admin.parse_broker_list("3,1,2") == [3, 1, 2]
    with pytest.raises(AdminCommandFailedException, match="broker ids separated by commas"):
        admin.parse_broker_list("1,two")
    with pytest.raises(AdminCommandFailedException, match="Broker list contains duplicate entries: 2"):
        admin.parse_broker_list("1,2,2")
    with pytest.raises(InvalidReplicaAssignmentException, match="Malformed reassignment JSON at partitions.0"):
        admin.parse_reassignment('{"version":1,"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}')


def test_generate_keeps_each_topic_s_replication_factor_over_the_listed_brokers():
    class ZooKeeper:  # the two reads generate_assignment makes
        def get_topic_znodes(self, topics):
            return {"t": zkdata.TopicZNode.from_assignment({0: [1, 2], 1: [2, 3], 2: [3, 1]}, None)}

        def get_all_broker_ids(self):
            return [1, 2, 3, 4]

    current, proposed = admin.generate_assignment(ZooKeeper(), ["t"], [4, 2], rng=random.Random(0))
    assert current == {T0: [1, 2], T1: [2, 3], T2: [3, 1]}
    assert sorted(proposed) == [T0, T1, T2]
    assert all(sorted(r) == [2, 4] for r in proposed.values())
    with pytest.raises(InvalidReplicaAssignmentException, match=r"Unknown broker ids \[7\] in --broker-list"):
        admin.generate_assignment(ZooKeeper(), ["t"], [7, 2])
    with pytest.raises(Exception, match="Replication factor: 2 larger than available brokers: 1"):
        admin.generate_assignment(ZooKeeper(), ["t"], [2])


# -- kray leader-election --------------------------------------------------------------------------

@pytest.mark.parametrize("argv,message", [
    ((), "One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file"),
    (("--all-topic-partitions", "--topic", "t", "--partition", "0"), "One and only one"),
    (("--all-topic-partitions", "--path-to-json-file", "f"), "One and only one"),
    (("--topic", "t"), r"Missing required option\(s\): partition"),
    (("--all-topic-partitions", "--partition", "0"), "Option partition is only allowed if topic is used"),
])
def test_leader_election_takes_exactly_one_scope(argv, message):
    with pytest.raises(AdminCommandFailedException, match=message):
        election_partitions(args("leader-election", "--election-type", "preferred", *argv))


def test_leader_election_scopes(tmp_path):
    assert election_partitions(args("leader-election", "--election-type", "unclean", "--all-topic-partitions")) is None
    assert election_partitions(args("leader-election", "--election-type", "Unclean", "--topic", "t", "--partition",
                                    "1")) == [T1]
    path = tmp_path / "election.json"
    path.write_text('{"partitions":[{"topic":"t","partition":2},{"topic":"t","partition":0}]}')
    assert election_partitions(args("leader-election", "--election-type", "preferred", "--path-to-json-file",
                                    str(path))) == [T2, T0]


@pytest.mark.parametrize("text,message", [
    ('{"partitions":[{"topic":"t","partition":0}', "Malformed replica election JSON at document"),
    ('{"partition":[]}', "Malformed replica election JSON at partitions: Field required"),
    ('{"partitions":[]}', "Replica election data names no partitions"),
    ('{"partitions":[{"topic":"t","partition":0},{"topic":"t","partition":0}]}',
     "Replica election data contains duplicate partitions: t-0"),
])
def test_bad_election_files(text, message):
    with pytest.raises(AdminCommandFailedException, match=message):
        admin.parse_election_partitions(text)


def test_election_results_as_kafka_prints_them():
    report, failed = admin.format_election_results("UNCLEAN", {
        T2: None, T0: None,
        T1: ApiError(Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        TopicPartition("u", 0): ApiError(Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE, "No replica is alive"),
    })
    assert report.splitlines() == [
        "Successfully completed leader election (UNCLEAN) for partitions t-0, t-2",
        "Valid replica already elected for partitions t-1",
        "Error completing leader election (UNCLEAN) for partition: u-0: "
        "EligibleLeadersNotAvailableException: No replica is alive",
    ]
    assert failed == 1
    assert admin.format_election_results("PREFERRED", {T0: ApiError(Errors.ELECTION_NOT_NEEDED, "")}) == (
        "Valid replica already elected for partitions t-0", 0)


def test_api_errors_read_as_kafka_s_exceptions():
    assert str(ApiError(Errors.PREFERRED_LEADER_NOT_AVAILABLE, "m").exception()) == \
        "PreferredLeaderNotAvailableException: m"
    assert str(ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, "m").exception()) == "UnknownTopicOrPartitionException: m"
    assert str(ApiError(Errors.NO_REASSIGNMENT_IN_PROGRESS, "m").exception()) == \
        "NoReassignmentInProgressException: m"
    assert json.loads(json.dumps(list(ApiError(Errors.ELECTION_NOT_NEEDED, "m")))) == [84, "m"]
