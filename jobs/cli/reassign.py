"""`kray reassign`: kafka-reassign-partitions (Kafka 2.8's ReassignPartitionsCommand): an assignment
proposed, a reassignment started through /admin/reassign_partitions, verified, listed, and cancelled
through the controller (KIP-455), with the tool's checks of its options and its messages.
"""
from __future__ import annotations

import sys

from coordination import admin, zkdata
from coordination.errors import AdminCommandFailedException
from jobs.cli.common import NAMESPACE_HELP, ask_controller, flag, read_file, zookeeper

REASSIGN_ACTIONS = ("generate", "execute", "verify", "cancel", "list")
REASSIGN_ARGUMENTS = ("reassignment_json_file", "topics_to_move_json_file", "broker_list", "namespace")
REASSIGN_OPTIONS = {  # action -> (the options it needs, the others it may have), as Kafka's tool checks them
    "generate": (("topics_to_move_json_file", "broker_list"), ()),
    "execute": (("reassignment_json_file",), ()),
    "verify": (("reassignment_json_file",), ()),
    "cancel": (("reassignment_json_file",), ("namespace",)),
    "list": ((), ()),
}


def reassign_action(args) -> str:
    """Kafka's ReassignPartitionsCommand.validateAndParseArgs: exactly one action, the options it needs,
    none that it cannot use."""
    actions = [a for a in REASSIGN_ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise AdminCommandFailedException(
            f"Command must include exactly one action: {', '.join(map(flag, REASSIGN_ACTIONS))}")
    action = actions[0]
    needed, allowed = REASSIGN_OPTIONS[action]
    missing = [o for o in needed if getattr(args, o) is None]
    if missing:
        raise AdminCommandFailedException(f'Missing required argument "{flag(missing[0])}"')
    extra = [o for o in REASSIGN_ARGUMENTS if getattr(args, o) is not None and o not in needed + allowed]
    if extra:
        raise AdminCommandFailedException(f'Option "{flag(extra[0])}" can\'t be used with action "{flag(action)}"')
    return action


def _read_plan(args) -> zkdata.ReassignPartitionsZNode:
    return admin.parse_reassignment(read_file(args.reassignment_json_file, "reassignment"))


def _plural(items) -> str:
    return "" if len(items) == 1 else "s"


def reassign_generate(args) -> None:
    topics = admin.parse_topics_to_move(read_file(args.topics_to_move_json_file, "topics-to-move"))
    brokers = admin.parse_broker_list(args.broker_list)
    with zookeeper(args) as zk:
        current, proposed = admin.generate_assignment(zk, topics, brokers)
    print(f"Current partition replica assignment\n{admin.format_reassignment_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{admin.format_reassignment_json(proposed)}")


def reassign_execute(args) -> None:
    with zookeeper(args) as zk:
        current = admin.reassign_partitions(zk, _read_plan(args))
    print(f"Current partition replica assignment\n\n{admin.format_reassignment_json(current)}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback")
    print(f"Successfully started partition reassignment{_plural(current)} for {','.join(map(str, sorted(current)))}")


def reassign_verify(args) -> None:
    with zookeeper(args) as zk:
        states = admin.verify_reassignment(zk, _read_plan(args))
    print(admin.format_reassignment_states(states))
    if any(s.done and s.current != s.target for s in states.values()):
        sys.exit(1)


def reassign_cancel(args) -> None:
    """KIP-455's cancel: the file's partitions that are being moved go back to their original replicas.
    Kafka 2.8's tool cancels through its AdminClient only (not with --zookeeper): kray asks its controller."""
    partitions = _read_plan(args).topic_partitions()
    with zookeeper(args) as zk:
        moving = sorted(set(partitions) & set(admin.list_reassignments(admin.topic_znodes_of(zk, partitions))))
    if not moving:
        print("None of the specified partition reassignments are active.")
        return
    errors = {tp: e for tp, e in ask_controller(args, "alter_partition_reassignments",
                                                [(tp, None) for tp in moving]).items() if e}
    if errors:
        raise AdminCommandFailedException(f"Error cancelling partition reassignment{_plural(errors)} for: " +
                                          "; ".join(f"{tp}: {e.exception()}" for tp, e in sorted(errors.items())))
    print(f"Successfully cancelled partition reassignment{_plural(moving)} for: {','.join(map(str, moving))}")


def reassign_list(args) -> None:
    with zookeeper(args) as zk:
        print(admin.format_reassignments(admin.list_reassignments(zk.get_topic_znodes(zk.get_all_topics()))))


def reassign(args) -> None:
    {"generate": reassign_generate, "execute": reassign_execute, "verify": reassign_verify,
     "cancel": reassign_cancel, "list": reassign_list}[reassign_action(args)](args)


def add_parsers(sub, zkp) -> None:
    s = sub.add_parser("reassign", parents=[zkp], help="kafka-reassign-partitions")
    for action, text in (("generate", "propose an assignment of the topics over the brokers (writes nothing)"),
                         ("execute", "start the reassignment in the file"),
                         ("verify", "how the reassignment in the file is going"),
                         ("cancel", "move the file's partitions that are being reassigned back (KIP-455)"),
                         ("list", "the partitions being reassigned")):
        s.add_argument(f"--{action}", action="store_true", help=text)
    s.add_argument("--reassignment-json-file", help="Kafka's reassignment JSON")
    s.add_argument("--topics-to-move-json-file", help='{"topics":[{"topic":"t"}],"version":1}, for --generate')
    s.add_argument("--broker-list", help='"1,2,3": the brokers --generate assigns over')
    s.add_argument("--namespace", help=NAMESPACE_HELP)
    s.set_defaults(func=reassign)
