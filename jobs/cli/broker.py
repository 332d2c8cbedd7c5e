"""`kray broker` and `kray controller`: one broker of the running cluster shut down in a controlled way
(its leaderships moved first, as kafka-server-stop's SIGTERM does), and the active controller's own
account of itself.
"""
from __future__ import annotations

import sys

from coordination.errors import KrayError
from jobs.cli.common import (
    NAMESPACE_HELP,
    ask_controller,
    ray_connect,
    ray_leave,
    started_cluster,
)


def broker_shutdown(args) -> None:
    from actors.cluster import LocalCluster

    config = started_cluster()
    joined = ray_connect()
    with config.zk_client().start() as zk:
        if args.broker_id not in zk.get_all_broker_ids():
            raise KrayError(f"broker {args.broker_id} is not registered")
        result = LocalCluster.attach(config).controlled_shutdown(args.broker_id)
    ray_leave(joined)
    if result["succeeded"]:
        print(f"Broker {args.broker_id} shut down after moving its leaderships ({result['attempts']} attempt(s))")
    else:
        print(f"Broker {args.broker_id} shut down uncleanly: still leading {result['remaining']}")
        sys.exit(1)


def controller_status(args) -> None:
    for key, value in ask_controller(args, "status").items():
        print(f"{key}: {value}")


def add_parsers(sub, zkp) -> None:
    br = sub.add_parser("broker", help="brokers").add_subparsers(dest="action", required=True)
    s = br.add_parser("shutdown", help="controlled shutdown")
    s.add_argument("broker_id", type=int)
    s.set_defaults(func=broker_shutdown)

    ct = sub.add_parser("controller", help="the active controller").add_subparsers(dest="action", required=True)
    s = ct.add_parser("status", parents=[zkp])
    s.add_argument("--namespace", help=NAMESPACE_HELP)
    s.set_defaults(func=controller_status)
