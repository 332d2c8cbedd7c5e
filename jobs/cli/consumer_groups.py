"""`kray consumer-groups`: Kafka 2.8's kafka-consumer-groups (ConsumerGroupCommand) over the group API,
through kafka-python's admin client: groups listed, described (offsets and lag, members, state), their
offsets reset, deleted. The tables are printed as Kafka's tool prints them; the plans and the tables
are pure (this module's first part), the client calls thin (its second), the command checks its
options as Kafka's tool does (its last).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from coordination.errors import AdminCommandFailedException, KrayError
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition
from jobs.cli.common import zookeeper

MISSING = "-"
RESET_SPECS = ("to_earliest", "to_latest", "to_offset", "shift_by")


@dataclass(frozen=True)
class PartitionRow:
    """One line of --describe (offsets): a partition, where the group is, where the log ends, who reads it."""

    group: str
    tp: TopicPartition
    current: int | None
    log_end: int | None
    consumer_id: str = MISSING
    host: str = MISSING
    client_id: str = MISSING

    @property
    def lag(self) -> int | None:
        return None if self.current is None or self.log_end is None else self.log_end - self.current


@dataclass(frozen=True)
class MemberRow:
    group: str
    consumer_id: str
    host: str
    client_id: str
    partitions: list[TopicPartition]


def _text(value) -> str:
    return MISSING if value is None else str(value)


def _table(header: list[str], rows: Iterable[list[str]]) -> str:
    """Kafka's columns: each as wide as its widest cell plus one space, left-aligned."""
    rows = [header, *rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join(" ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows)


def format_offsets(group: str, rows: list[PartitionRow], state: str) -> str:
    """--describe (--offsets): Kafka's note for a group without members, then a line per partition."""
    lines = []
    if state in ("Empty", "Dead"):
        lines.append(f"\nConsumer group '{group}' has no active members.")
    lines.append("\n" + _table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"],
                               [[r.group, r.tp.topic, str(r.tp.partition), _text(r.current), _text(r.log_end),
                                 _text(r.lag), r.consumer_id, r.host, r.client_id]
                                for r in sorted(rows, key=lambda r: (r.tp, r.consumer_id))]))
    return "\n".join(lines)


def format_members(group: str, members: list[MemberRow], state: str) -> str:
    if state in ("Empty", "Dead"):
        return f"\nConsumer group '{group}' has no active members."
    return "\n" + _table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
                         [[m.group, m.consumer_id, m.host, m.client_id, str(len(m.partitions))] for m in members])


def format_state(group: str, coordinator: str, strategy: str, state: str, members: int) -> str:
    return "\n" + _table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                         [[group, coordinator, strategy, state, str(members)]])


def format_reset(group: str, plan: Mapping[TopicPartition, int]) -> str:
    return "\n" + _table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                         [[group, tp.topic, str(tp.partition), str(offset)] for tp, offset in sorted(plan.items())])


def reset_plan(spec: str, value: int | None, partitions: Iterable[TopicPartition],
               committed: Mapping[TopicPartition, int], earliest: Mapping[TopicPartition, int],
               latest: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Kafka's prepareOffsetsToReset: each partition's new offset, within [earliest, latest] as Kafka
    clamps it (a shift from no committed offset starts at the earliest)."""
    plan = {}
    for tp in partitions:
        low, high = earliest[tp], latest[tp]
        target = {"to_earliest": low, "to_latest": high, "to_offset": value,
                  "shift_by": committed.get(tp, low) + (value or 0)}[spec]
        plan[tp] = min(max(target, low), high)
    return plan


def parse_topic_partitions(specs: list[str], known: Mapping[str, int]) -> list[TopicPartition]:
    """--topic T (all its partitions) or --topic T:0,2 (those), as Kafka's tool reads them."""
    out = []
    for spec in specs:
        topic, _, parts = spec.partition(":")
        if topic not in known:
            raise AdminCommandFailedException(f"Topic '{topic}' does not exist")
        try:
            chosen = [int(p) for p in parts.split(",")] if parts else list(range(known[topic]))
        except ValueError:
            raise AdminCommandFailedException(f"--topic takes TOPIC or TOPIC:PARTITION[,PARTITION...], not {spec!r}") \
                from None
        bad = [p for p in chosen if not 0 <= p < known[topic]]
        if bad:
            raise AdminCommandFailedException(f"Topic '{topic}' has no partition {bad[0]}")
        out += [TopicPartition(topic, p) for p in chosen]
    return out


def assigned_partitions(assignment) -> list[TopicPartition]:
    """A member's partitions from the admin client's decoded ConsumerProtocolAssignment (as an object or
    as the dict its to_dict makes of it); none for a member of a group that is not Stable."""
    if not assignment:
        return []
    items = assignment.get("assigned_partitions") if isinstance(assignment, dict) else \
        getattr(assignment, "assigned_partitions", None)
    out = []
    for item in items or []:
        topic, parts = (item.get("topic"), item.get("partitions")) if isinstance(item, dict) else item
        out += [TopicPartition(topic, p) for p in parts]
    return sorted(out)


# -- the client ---------------------------------------------------------------------------------------


def bootstrap_servers(zk: KrayZkClient) -> str:
    """The brokers' PLAINTEXT listeners, as registered: what --bootstrap-server would name."""
    brokers = zk.get_brokers(zk.get_all_broker_ids())
    servers = [f"{h}:{p}" for znode, _ in brokers.values() if (hp := znode.listeners().get("PLAINTEXT"))
               for h, p in [hp]]
    if not servers:
        raise KrayError("no broker is registered (kray cluster up)")
    return ",".join(servers)


class GroupsClient:
    """The admin client's calls the tool makes (kafka-python's KafkaAdminClient)."""

    def __init__(self, servers: str):
        from kafka import KafkaAdminClient

        self.admin = KafkaAdminClient(bootstrap_servers=servers, client_id="kray-consumer-groups",
                                      request_timeout_ms=30_000)

    def close(self) -> None:
        self.admin.close()

    def list(self) -> list[str]:
        return sorted(g["group_id"] for g in self.admin.list_groups())

    def describe(self, group: str) -> dict:
        return self.admin.describe_groups([group])[group]

    def committed(self, group: str) -> dict[TopicPartition, int]:
        offsets = self.admin.list_group_offsets(group)[group]
        return {TopicPartition(tp.topic, tp.partition): o.offset for tp, o in offsets.items() if o.offset >= 0}

    def offsets(self, partitions: list[TopicPartition], spec) -> dict[TopicPartition, int]:
        from kafka import TopicPartition as KTopicPartition

        if not partitions:
            return {}
        found = self.admin.list_partition_offsets({KTopicPartition(tp.topic, tp.partition): spec for tp in partitions})
        return {TopicPartition(tp.topic, tp.partition): o.offset for tp, o in found.items()}

    def commit(self, group: str, plan: Mapping[TopicPartition, int]) -> dict[TopicPartition, str]:
        """The plan committed (the group must be empty); the partitions that failed, with their errors."""
        from kafka import TopicPartition as KTopicPartition
        from kafka.structs import OffsetAndMetadata

        result = self.admin.alter_group_offsets(group, {KTopicPartition(tp.topic, tp.partition):
                                                        OffsetAndMetadata(offset, "", -1) for tp, offset in plan.items()})
        return {TopicPartition(tp.topic, tp.partition): e.__name__ for tp, e in result.items()
                if getattr(e, "errno", 0) != 0}

    def delete(self, groups: list[str]) -> dict[str, str | None]:
        """Each group's error's name, None where it was deleted."""
        return {g: None if r == "OK" else r for g, r in self.admin.delete_groups(groups).items()}


# -- the command --------------------------------------------------------------------------------------


def consumer_groups(args) -> None:
    groups = args.group
    if args.list and groups:
        raise AdminCommandFailedException("Option --list does not take --group")
    if (args.describe or args.reset_offsets or args.delete) and not groups and not args.all_groups:
        raise AdminCommandFailedException("Option --describe, --reset-offsets and --delete need --group or "
                                          "--all-groups")
    spec = next((s for s in RESET_SPECS if getattr(args, s) not in (None, False)), None)
    if args.reset_offsets:
        if spec is None:
            raise AdminCommandFailedException("Option --reset-offsets needs one of --to-earliest, --to-latest, "
                                              "--to-offset, --shift-by")
        if not args.topic and not args.all_topics:
            raise AdminCommandFailedException("Option --reset-offsets needs --topic or --all-topics")
    with zookeeper(args) as zk:
        servers = args.bootstrap_server or bootstrap_servers(zk)
        known = {t: len(z.assignment()) for t, z in zk.get_topic_znodes(zk.get_all_topics()).items()}
    client = GroupsClient(servers)
    try:
        if args.all_groups:
            groups = client.list()
        if args.list:
            for group in client.list():
                print(group)
        elif args.describe:
            _describe_groups(client, groups, args)
        elif args.reset_offsets:
            _reset_offsets(client, groups, spec, args, known)
        elif args.delete:
            failed = {g: e for g, e in client.delete(groups).items() if e}
            if failed:
                raise AdminCommandFailedException("Deletion of some consumer groups failed:\n" + "\n".join(
                    f"* Group '{g}' could not be deleted due to: {e}" for g, e in sorted(failed.items())))
            print("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in groups) +
                  ") was successful.")
    finally:
        client.close()


def _describe_groups(client: GroupsClient, groups: list[str], args) -> None:
    from kafka.admin import OffsetSpec

    for group in groups:
        desc = client.describe(group)
        state = desc.get("group_state") or "Dead"
        if state == "Dead" and not desc.get("members"):
            raise AdminCommandFailedException(f"Consumer group '{group}' does not exist.")
        members = [MemberRow(group, m["member_id"], m["client_host"], m["client_id"],
                             assigned_partitions(m.get("member_assignment"))) for m in desc["members"]]
        if args.state:
            print(format_state(group, f"{desc.get('coordinator', '')}", desc.get("protocol_data") or "", state,
                               len(members)))
        elif args.members:
            print(format_members(group, members, state))
        else:
            committed = client.committed(group)
            owner = {tp: m for m in members for tp in m.partitions}
            partitions = sorted(set(committed) | set(owner))
            latest = client.offsets(partitions, OffsetSpec.LATEST)
            print(format_offsets(group, [
                PartitionRow(group, tp, committed.get(tp), latest.get(tp),
                             *((owner[tp].consumer_id, owner[tp].host, owner[tp].client_id) if tp in owner else ()))
                for tp in partitions], state))


def _reset_offsets(client: GroupsClient, groups: list[str], spec: str, args, known: dict[str, int]) -> None:
    from kafka.admin import OffsetSpec

    for group in groups:
        state = client.describe(group).get("group_state") or "Dead"
        if state not in ("Empty", "Dead"):
            raise AdminCommandFailedException(f"Assignments can only be reset if the group '{group}' is inactive, "
                                              f"but the current state is {state}.")
        committed = client.committed(group)
        partitions = parse_topic_partitions(args.topic, known) if args.topic else sorted(committed)
        plan = reset_plan(spec, getattr(args, spec) if spec in ("to_offset", "shift_by") else None, partitions,
                          committed, client.offsets(partitions, OffsetSpec.EARLIEST),
                          client.offsets(partitions, OffsetSpec.LATEST))
        if args.execute:
            failed = client.commit(group, plan)
            if failed:
                raise AdminCommandFailedException(f"Error: resetting the offsets of group '{group}' failed: " +
                                                  ", ".join(f"{tp}: {e}" for tp, e in sorted(failed.items())))
        else:
            print("WARN: No action will be performed as the --execute option is missing. In a future major release, "
                  "the default behavior of this command will be to prompt the user before executing the reset "
                  "rather than doing a dry run. You should add the --dry-run option explicitly if you are "
                  "scripting this command and want to keep the current default behavior without prompting.")
        print(format_reset(group, plan))


def add_parsers(sub, zkp) -> None:
    s = sub.add_parser("consumer-groups", parents=[zkp], help="kafka-consumer-groups")
    s.add_argument("--bootstrap-server", help="the brokers to ask (default: those registered in ZooKeeper)")
    mode = s.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="every group")
    mode.add_argument("--describe", action="store_true", help="offsets and lag (or --members, --state)")
    mode.add_argument("--reset-offsets", action="store_true", help="of an inactive group (--dry-run by default)")
    mode.add_argument("--delete", action="store_true", help="empty groups, their offsets too")
    s.add_argument("--group", action="append", default=[])
    s.add_argument("--all-groups", action="store_true")
    view = s.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="(default) each partition's offset, log end and lag")
    view.add_argument("--members", action="store_true")
    view.add_argument("--state", action="store_true")
    s.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]")
    s.add_argument("--all-topics", action="store_true")
    to = s.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument("--shift-by", type=int)
    run = s.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true")
    run.add_argument("--dry-run", action="store_true")
    s.set_defaults(func=consumer_groups)
