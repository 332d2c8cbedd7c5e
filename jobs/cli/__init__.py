"""The `kray` command: ZooKeeper, the local cluster, topics, and the main job.

Its top-level parser and dispatch; each command group's options and handlers are in a module of
this package (shared helpers in `common`). User mistakes print one line and exit 1; no tracebacks.
"""
from __future__ import annotations

import argparse
import sys
from importlib import import_module

from coordination.errors import KrayError
from jobs.cli import (
    broker,
    chaos,
    cluster,
    configs,
    consumer_groups,
    hosts,
    leader_election,
    reassign,
    runs,
    topics,
    zk,
)

COMMAND_GROUPS = (zk, cluster, configs, topics, consumer_groups, reassign, leader_election, broker, chaos, runs,
                  hosts)
PASSED_ON = {"sweep": "jobs.sweep", "analyse": "jobs.analysis"}  # commands with parsers of their own
ZOOKEEPER_HELP = "ZooKeeper connect string (default: $KRAY_ZK_CONNECT or `kray zk start`'s)"


class _Parser(argparse.ArgumentParser):
    """Mistaken options print one line and exit 1, as every other mistake does."""

    def error(self, message: str):
        self.exit(1, f"Error: {self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kray", description="Kafka's ZooKeeper-mode controller on Ray")
    p.add_argument("--zookeeper", help=ZOOKEEPER_HELP)
    # the commands that read ZooKeeper take --zookeeper after their name too, as Kafka's tools do
    zkp = argparse.ArgumentParser(add_help=False)
    zkp.add_argument("--zookeeper", default=argparse.SUPPRESS, help=ZOOKEEPER_HELP)
    sub = p.add_subparsers(dest="command", required=True)
    for group in COMMAND_GROUPS:  # in the order the help lists them
        group.add_parsers(sub, zkp)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in PASSED_ON:  # every option theirs, in any order
        return import_module(PASSED_ON[argv[0]]).main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except KrayError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    return 0
