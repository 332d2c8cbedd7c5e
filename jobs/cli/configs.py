"""`kray configs`: kafka-configs for topics, in ZooKeeper mode: a topic's overrides described, added
or deleted in /config/topics, where the brokers pick them up.
"""
from __future__ import annotations

from coordination import admin
from coordination.errors import KrayError
from jobs.cli.common import parse_configs, zookeeper


def configs(args) -> None:
    if args.entity_type != "topics":
        raise KrayError(f"kray configs handles --entity-type topics only, not {args.entity_type}")
    with zookeeper(args) as zk:
        if args.alter:
            added = parse_configs([c for c in args.add_config.split(",") if c]) if args.add_config else {}
            deleted = [c for c in (args.delete_config or "").split(",") if c]
            if not added and not deleted:
                raise KrayError("--alter needs --add-config or --delete-config")
            admin.alter_topic_config(zk, args.entity_name, added, deleted)
            print(f"Completed updating config for topic {args.entity_name}.")
        else:
            config = admin.describe_topics(zk, [args.entity_name])[0].config
            print(f"Configs for topic '{args.entity_name}' are {','.join(f'{k}={v}' for k, v in sorted(config.items()))}")


def add_parsers(sub, zkp) -> None:
    s = sub.add_parser("configs", parents=[zkp], help="kafka-configs (topics)")
    s.add_argument("--entity-type", required=True)
    s.add_argument("--entity-name", required=True)
    mode = s.add_mutually_exclusive_group(required=True)
    mode.add_argument("--alter", action="store_true")
    mode.add_argument("--describe", action="store_true")
    s.add_argument("--add-config", metavar="K=V[,K=V...]")
    s.add_argument("--delete-config", metavar="K[,K...]")
    s.set_defaults(func=configs)
