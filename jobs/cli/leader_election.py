"""`kray leader-election`: kafka-leader-election (Kafka 2.8's LeaderElectionCommand): preferred or
unclean leaders elected by the active controller, for a partition, a file's or all of them.
"""
from __future__ import annotations

from coordination import admin
from coordination.errors import AdminCommandFailedException
from coordination.zkdata import TopicPartition
from jobs.cli.common import NAMESPACE_HELP, ask_controller, read_file, zookeeper


def election_partitions(args) -> list[TopicPartition] | None:
    """The partitions kafka-leader-election was asked to elect (None: all), its options checked as Kafka's
    LeaderElectionCommand.validate does."""
    if [args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None].count(True) != 1:
        raise AdminCommandFailedException("One and only one of the following options is required: "
                                          "topic, all-topic-partitions, path-to-json-file")
    if (args.topic is None) != (args.partition is None):
        raise AdminCommandFailedException("Missing required option(s): partition" if args.partition is None
                                          else "Option partition is only allowed if topic is used")
    if args.path_to_json_file is not None:
        return admin.parse_election_partitions(read_file(args.path_to_json_file, "replica election"))
    return None if args.all_topic_partitions else [TopicPartition(args.topic, args.partition)]


def leader_election(args) -> None:
    """An ElectLeaders request to the controller (Kafka's kafka-leader-election talks to no ZooKeeper);
    the partitions a file or --topic names must exist, or nothing is elected."""
    from actors.controller.changes import ElectionType

    partitions = election_partitions(args)
    if partitions is not None:
        with zookeeper(args) as zk:
            admin.topic_znodes_of(zk, partitions)
    report, failed = admin.format_election_results(args.election_type, ask_controller(
        args, "elect_leaders", partitions, ElectionType[args.election_type]))
    if report:
        print(report)
    if failed:
        raise AdminCommandFailedException(f"{failed} replica(s) could not be elected")


def add_parsers(sub, zkp) -> None:
    s = sub.add_parser("leader-election", parents=[zkp], help="kafka-leader-election")
    s.add_argument("--election-type", required=True, type=str.upper, choices=("PREFERRED", "UNCLEAN"))
    s.add_argument("--topic")
    s.add_argument("--partition", type=int)
    s.add_argument("--all-topic-partitions", action="store_true")
    s.add_argument("--path-to-json-file", help='{"partitions":[{"topic":"t","partition":0}]}')
    s.add_argument("--namespace", help=NAMESPACE_HELP)
    s.set_defaults(func=leader_election)
