"""What kray's Kafka tools (kray topics / reassign / leader-election) accept and print, against Kafka 2.8's
TopicCommand, ReassignPartitionsCommand and LeaderElectionCommand, without ZooKeeper."""
from __future__ import annotations

import pytest

from coordination import admin
from coordination.admin import PartitionDescription, TopicDescription
from coordination.errors import AdminCommandFailedException
from jobs.cli import build_parser, describe_report


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
    ("reassign", "--verify", "f"), ("leader-election", "--preferred"),
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
])
def test_mistaken_options_print_one_line_and_exit_1(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        args(*argv)
    assert e.value.code == 1
    assert capsys.readouterr().err.splitlines() == [message]
