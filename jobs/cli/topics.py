"""`kray topics`: kafka-topics in ZooKeeper mode (Kafka 2.8's TopicCommand with --zookeeper): topics
created, listed, described, deleted and given partitions through their znodes, as Kafka's tool writes
them.
"""
from __future__ import annotations

from coordination import admin
from coordination.errors import AdminCommandFailedException, TopicExistsException
from coordination.zkclient import KrayZkClient
from jobs.cli.common import flag, parse_configs, zookeeper


def topics_create(args) -> None:
    with zookeeper(args) as zk:
        try:
            admin.create_topic(zk, args.topic, args.partitions, args.replication_factor, parse_configs(args.config))
        except TopicExistsException:
            if args.if_not_exists:  # Kafka's --if-not-exists: nothing to do, nothing printed
                return
            raise
    print(f"Created topic {args.topic}.")


def topics_list(args) -> None:
    with zookeeper(args) as zk:
        for topic in sorted(zk.get_all_topics()):
            print(topic)


def describe_report(args) -> str | None:
    """The partition report kafka-topics --describe was asked for (one at most, as Kafka allows)."""
    reports = [r for r in admin.DESCRIBE_REPORTS if getattr(args, r)]
    if len(reports) > 1:
        raise AdminCommandFailedException(f'Option "{flag(reports[0])}" can\'t be used with option '
                                          f'"{flag(reports[1])}"')
    return reports[0] if reports else None


def topics_describe(args) -> None:
    from actors.config import BrokerConfig

    report = describe_report(args)
    with zookeeper(args) as zk:
        text = admin.format_describe(admin.describe_topics(zk, [args.topic] if args.topic else None), report,
                                     zk.get_all_broker_ids(), BrokerConfig().min_insync_replicas)
    if text:
        print(text)


def _topic_missing(zk: KrayZkClient, args) -> bool:
    """--if-exists: a topic that does not exist is left alone, silently (Kafka's ensureTopicExists)."""
    return args.if_exists and args.topic not in zk.get_all_topics()


def topics_delete(args) -> None:
    with zookeeper(args) as zk:
        if _topic_missing(zk, args):
            return
        admin.delete_topic(zk, args.topic)
    print(f"Topic {args.topic} is marked for deletion.")


def topics_alter(args) -> None:
    with zookeeper(args) as zk:
        if _topic_missing(zk, args):
            return
        added = admin.add_partitions(zk, args.topic, args.partitions)
    print(f"Adding partitions succeeded: {len(added)} new partitions of {args.topic} "
          f"({', '.join(f'{p}:{r}' for p, r in sorted(added.items()))})")


def add_parsers(sub, zkp) -> None:
    tp = sub.add_parser("topics", help="kafka-topics").add_subparsers(dest="action", required=True)
    s = tp.add_parser("create", parents=[zkp])
    s.add_argument("--topic", required=True)
    s.add_argument("--partitions", type=int, default=1)
    s.add_argument("--replication-factor", type=int, default=1)
    s.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("--if-not-exists", action="store_true", help="nothing to do if the topic exists")
    s.set_defaults(func=topics_create)
    tp.add_parser("list", parents=[zkp]).set_defaults(func=topics_list)
    s = tp.add_parser("describe", parents=[zkp])
    s.add_argument("--topic")
    s.add_argument("--under-replicated-partitions", action="store_true",
                   help="only the partitions with fewer in-sync replicas than replicas")
    s.add_argument("--unavailable-partitions", action="store_true",
                   help="only the partitions whose leader is not available")
    s.add_argument("--under-min-isr-partitions", action="store_true",
                   help="only the partitions with fewer in-sync replicas than min.insync.replicas")
    s.set_defaults(func=topics_describe)
    s = tp.add_parser("delete", parents=[zkp])
    s.add_argument("--topic", required=True)
    s.add_argument("--if-exists", action="store_true", help="nothing to do if the topic does not exist")
    s.set_defaults(func=topics_delete)
    s = tp.add_parser("alter", parents=[zkp])
    s.add_argument("--topic", required=True)
    s.add_argument("--partitions", type=int, required=True)
    s.add_argument("--if-exists", action="store_true", help="nothing to do if the topic does not exist")
    s.set_defaults(func=topics_alter)
