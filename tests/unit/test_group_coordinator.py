"""The group coordinator's flows, against an in-memory double of its log (append with acks=all, read back):
joins and rebalances, assignments, heartbeats and sessions, static members, commits, loading a
partition elsewhere and giving it up. Short timeouts, on a real asyncio loop."""
from __future__ import annotations

import asyncio

import pytest

from actors.broker.log.batches import assign_offsets, decode_records, iter_batches
from actors.broker.events import BrokerEvents
from actors.broker.group.group_coordinator import GroupCoordinator, JoinResult
from actors.broker.group.group_metadata import GroupMetadata, GroupState, IllegalGroupTransition
from actors.broker.group.group_records import GROUP_METADATA_TOPIC, OffsetAndMetadata, partition_for, read_key
from actors.config import BrokerConfig
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

CONFIG = BrokerConfig(group_initial_rebalance_delay_ms=30, group_min_session_timeout_ms=10)
PARTITIONS = 4
G = "group"
T0 = TopicPartition("t", 0)
PROTOCOLS = [("range", b"sub")]


def alike(prefix: str) -> str:
    """Another group whose coordinator is G's (the same offsets partition)."""
    return next(name for i in range(1000) if partition_for(name := f"{prefix}{i}", PARTITIONS) ==
                partition_for(G, PARTITIONS))


class InMemoryLog:
    """The offsets partitions' logs (the coordinator's GroupLog): what appends wrote, read back as whole
    batches."""

    def __init__(self, events: BrokerEvents | None = None):
        self.events = events or BrokerEvents(1)
        self.logs: dict[TopicPartition, bytearray] = {}
        self.ends: dict[TopicPartition, int] = {}
        self.error = Errors.NONE  # what the next appends fail with
        self.gate: asyncio.Event | None = None  # appends wait for it, when there is one

    async def append(self, tp: TopicPartition, batch: bytes, timeout_ms: int) -> Errors:
        if self.gate is not None:
            await self.gate.wait()
        if self.error != Errors.NONE:
            return self.error
        end = self.ends.get(tp, 0)
        stamped = assign_offsets(bytearray(batch), end, 0)
        self.logs.setdefault(tp, bytearray()).extend(stamped)
        self.ends[tp] = end + len(decode_records(stamped))
        return Errors.NONE

    def read(self, tp: TopicPartition, offset: int) -> tuple[bytes, int]:
        data = bytes(self.logs.get(tp, b""))
        start = next((pos for pos, h in iter_batches(data) if h.last_offset >= offset), len(data))
        return data[start:], self.ends.get(tp, 0)

    @staticmethod
    def offsets_partitions() -> int:
        return PARTITIONS

    def keys(self, tp: TopicPartition) -> list:
        return [(read_key(r.key), r.value is None) for r in decode_records(bytes(self.logs.get(tp, b"")))]


def coordinator(log: InMemoryLog, broker_id: int = 1) -> GroupCoordinator:
    return GroupCoordinator(broker_id, CONFIG, log)


async def elected(c: GroupCoordinator, epoch: int = 0, group: str = G) -> None:
    c.on_elected(partition_for(group, PARTITIONS), epoch)
    for _ in range(100):
        if partition_for(group, PARTITIONS) in c.owned:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("not loaded")


async def join(c: GroupCoordinator, member_id: str = "", instance: str | None = None, protocols=PROTOCOLS,
               session_ms: int = 1000) -> JoinResult:
    return await c.join_group(G, member_id, instance, True, "client", "/127.0.0.1", 1000, session_ms,
                              "consumer", protocols)


async def two_members(c: GroupCoordinator) -> tuple[JoinResult, JoinResult]:
    """Two members joined (each told its id first) and synced: generation 1, Stable."""
    first, second = await join(c), await join(c)
    assert first.error == second.error == Errors.MEMBER_ID_REQUIRED and first.member_id != second.member_id
    a, b = await asyncio.gather(join(c, first.member_id), join(c, second.member_id))
    leader, other = (a, b) if a.members else (b, a)
    assert (leader.error, leader.generation, leader.leader) == (Errors.NONE, 1, leader.member_id)
    assert sorted(m for m, _, _ in leader.members) == sorted([a.member_id, b.member_id]) and other.members == []
    s1, s2 = await asyncio.gather(
        c.sync_group(G, 1, leader.member_id, None, "consumer", "range",
                     {leader.member_id: b"A", other.member_id: b"B"}),
        c.sync_group(G, 1, other.member_id, None, None, None, {}))
    assert (s1.error, s1.assignment, s2.error, s2.assignment) == (Errors.NONE, b"A", Errors.NONE, b"B")
    return leader, other


def test_two_members_join_after_the_initial_delay_and_get_the_leaders_assignment():
    async def run():
        log = InMemoryLog()
        c = coordinator(log)
        assert (await join(c)).error == Errors.NOT_COORDINATOR  # not led here yet
        await elected(c)
        leader, other = await two_members(c)
        assert c.groups[G].state is GroupState.STABLE
        tp = TopicPartition(GROUP_METADATA_TOPIC, partition_for(G, PARTITIONS))
        assert [k for k, _ in log.keys(tp)] == [read_key(b"\x00\x02\x00\x05group")]  # the group, stored once
        # heartbeats: the current generation is fine, an old one or a stranger is not
        assert c.heartbeat(G, other.member_id, None, 1) == Errors.NONE
        assert c.heartbeat(G, other.member_id, None, 0) == Errors.ILLEGAL_GENERATION
        assert c.heartbeat(G, "stranger", None, 1) == Errors.UNKNOWN_MEMBER_ID
        # a non-leader joining again with the same protocols changes nothing; the leader's join rebalances
        again = await join(c, other.member_id)
        assert (again.error, again.generation, c.groups[G].state) == (Errors.NONE, 1, GroupState.STABLE)
        results = await asyncio.gather(join(c, leader.member_id), join(c, other.member_id))
        assert {r.generation for r in results} == {2} and c.heartbeat(G, other.member_id, None, 1) == \
            Errors.ILLEGAL_GENERATION
    asyncio.run(run())


def test_a_member_whose_session_ends_is_removed_and_the_group_rebalances():
    async def run():
        c = coordinator(InMemoryLog())
        await elected(c)
        first, second = await join(c), await join(c)
        a, b = await asyncio.gather(join(c, first.member_id, session_ms=1000),
                                    join(c, second.member_id, session_ms=100))
        await asyncio.gather(c.sync_group(G, 1, a.member_id, None, None, None, {}),
                             c.sync_group(G, 1, b.member_id, None, None, None, {}))
        for _ in range(4):  # only `a` keeps its session going
            await asyncio.sleep(0.05)
            c.heartbeat(G, a.member_id, None, 1)
        assert b.member_id not in c.groups[G].members
        assert c.heartbeat(G, a.member_id, None, 1) == Errors.REBALANCE_IN_PROGRESS
        rejoined = await join(c, a.member_id)
        assert (rejoined.generation, rejoined.leader, len(rejoined.members)) == (2, a.member_id, 1)
    asyncio.run(run())


def test_a_leave_rebalances_and_the_last_leave_empties_the_group():
    async def run():
        c = coordinator(InMemoryLog())
        await elected(c)
        leader, other = await two_members(c)
        assert c.leave_group(G, [(other.member_id, None), ("stranger", None)]) == (
            Errors.NONE, [Errors.NONE, Errors.UNKNOWN_MEMBER_ID])
        assert c.groups[G].state is GroupState.PREPARING_REBALANCE
        alone = await join(c, leader.member_id)
        assert (alone.generation, [m for m, _, _ in alone.members]) == (2, [leader.member_id])
        c.leave_group(G, [(leader.member_id, None)])
        await asyncio.sleep(0.01)
        assert c.groups[G].state is GroupState.EMPTY and c.groups[G].generation == 3
    asyncio.run(run())


def test_a_static_member_back_under_a_new_id_keeps_its_place_and_fences_the_old_id():
    async def run():
        c = coordinator(InMemoryLog())
        await elected(c)
        static = await join(c, instance="host-1")  # a static member needs no MEMBER_ID_REQUIRED round
        assert static.error == Errors.NONE and static.member_id.startswith("host-1-")
        await c.sync_group(G, 1, static.member_id, "host-1", None, None, {static.member_id: b"A"})
        back = await join(c, instance="host-1")
        assert (back.error, back.generation) == (Errors.NONE, 1) and back.member_id != static.member_id
        assert c.groups[G].state is GroupState.STABLE  # no rebalance
        assert c.heartbeat(G, static.member_id, "host-1", 1) == Errors.FENCED_INSTANCE_ID
        synced = await c.sync_group(G, 1, back.member_id, "host-1", None, None, {})
        assert (synced.error, synced.assignment) == (Errors.NONE, b"A")
    asyncio.run(run())


def test_inconsistent_protocols_and_bad_session_timeouts_are_refused():
    async def run():
        c = coordinator(InMemoryLog())
        await elected(c)
        await two_members(c)
        assert (await join(c, protocols=[("roundrobin", b"")])).error == Errors.INCONSISTENT_GROUP_PROTOCOL
        assert (await join(c, session_ms=1)).error == Errors.INVALID_SESSION_TIMEOUT
        assert (await c.join_group("", "", None, True, "c", "/h", 1, 1000, "consumer", PROTOCOLS)).error == \
            Errors.INVALID_GROUP_ID
    asyncio.run(run())


def test_commits_by_members_and_by_clients_that_only_keep_offsets_here():
    async def run():
        log = InMemoryLog()
        c = coordinator(log)
        await elected(c)
        offsets = {T0: OffsetAndMetadata(offset=5, metadata="x")}
        assert await c.commit_offsets(G, "", None, -1, offsets) == {T0: Errors.NONE}  # no group: made, Empty
        assert c.fetch_offsets(G, [T0, TopicPartition("t", 1)]) == (Errors.NONE, {T0: offsets[T0],
                                                                                 TopicPartition("t", 1): None})
        assert await c.commit_offsets(alike("other"), "m", None, 3, offsets) == {T0: Errors.ILLEGAL_GENERATION}
        leader, other = await two_members(c)
        assert await c.commit_offsets(G, other.member_id, None, 0, offsets) == {T0: Errors.ILLEGAL_GENERATION}
        assert await c.commit_offsets(G, "", None, -1, offsets) == {T0: Errors.UNKNOWN_MEMBER_ID}
        big = {T0: OffsetAndMetadata(offset=6, metadata="x" * 5000)}
        assert await c.commit_offsets(G, other.member_id, None, 1, big) == {T0: Errors.OFFSET_METADATA_TOO_LARGE}
        log.error = Errors.NOT_ENOUGH_REPLICAS
        seven = {T0: OffsetAndMetadata(offset=7)}
        assert await c.commit_offsets(G, other.member_id, None, 1, seven) == {T0: Errors.COORDINATOR_NOT_AVAILABLE}
        assert c.fetch_offsets(G, None)[1][T0].offset == 5  # a commit that did not reach the ISR does not count
        log.error = Errors.NONE
        assert await c.commit_offsets(G, other.member_id, None, 1, seven) == {T0: Errors.NONE}
        assert c.fetch_offsets(G, None)[1][T0].offset == 7
    asyncio.run(run())


def test_a_new_coordinator_loads_the_groups_and_offsets_from_the_log_and_the_old_one_gives_them_up():
    async def run():
        log = InMemoryLog()
        old = coordinator(log, broker_id=1)
        await elected(old)
        leader, other = await two_members(old)
        await old.commit_offsets(G, other.member_id, None, 1, {T0: OffsetAndMetadata(offset=9)})
        old.on_resigned(partition_for(G, PARTITIONS), 1)
        assert old.heartbeat(G, other.member_id, None, 1) == Errors.NOT_COORDINATOR and G not in old.groups
        new = coordinator(log, broker_id=2)
        await elected(new, epoch=1)
        group = new.groups[G]
        assert (group.state, group.generation, group.leader) == (GroupState.STABLE, 1, leader.member_id)
        assert new.heartbeat(G, other.member_id, None, 1) == Errors.NONE  # no rejoin needed
        assert new.fetch_offsets(G, [T0])[1][T0].offset == 9
        synced = await new.sync_group(G, 1, other.member_id, None, None, None, {})
        assert synced.assignment == b"B"
        # a late election at an older epoch changes nothing
        new.on_elected(partition_for(G, PARTITIONS), 0)
        assert partition_for(G, PARTITIONS) in new.owned
    asyncio.run(run())


def test_a_deleted_group_is_gone_from_the_log_too():
    async def run():
        log = InMemoryLog()
        c = coordinator(log)
        await elected(c)
        await c.commit_offsets(G, "", None, -1, {T0: OffsetAndMetadata(offset=1)})
        leader, other = await two_members(c)
        unknown = alike("unknown")
        assert await c.delete_groups([G, unknown]) == {G: Errors.NON_EMPTY_GROUP, unknown: Errors.GROUP_ID_NOT_FOUND}
        c.leave_group(G, [(leader.member_id, None), (other.member_id, None)])
        await asyncio.sleep(0.01)
        assert await c.delete_groups([G]) == {G: Errors.NONE}
        assert c.list_groups() == (Errors.NONE, [])
        again = coordinator(log, broker_id=2)
        await elected(again, epoch=1)
        assert G not in again.groups and again.fetch_offsets(G, None) == (Errors.NONE, {})
    asyncio.run(run())


def test_the_group_states_allow_only_kafkas_moves():
    group = GroupMetadata(G)
    with pytest.raises(IllegalGroupTransition):
        group.transition(GroupState.STABLE, 0)
    for state in (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE, GroupState.STABLE,
                  GroupState.PREPARING_REBALANCE, GroupState.EMPTY, GroupState.DEAD):
        group.transition(state, 0)
    with pytest.raises(IllegalGroupTransition):
        group.transition(GroupState.EMPTY, 0)


def test_loads_rebalances_and_syncs_are_recorded_for_the_run_directory():
    class Sink:
        enabled = True

        def __init__(self):
            self.records = []

        def emit(self, name, record):
            self.records.append(record)

    async def run():
        sink = Sink()
        c = GroupCoordinator(1, CONFIG, InMemoryLog(BrokerEvents(1, sink)))
        await elected(c)
        await two_members(c)
        return [(r.kind, r.group, r.generation, r.partitions) for r in sink.records]
    assert asyncio.run(run()) == [("group_loaded", None, None, 0), ("group_stabilized", G, 1, 2),
                                  ("group_synced", G, 1, 0)]


def test_a_new_epoch_of_the_same_leadership_keeps_the_groups_and_their_waiting_members():
    async def run():
        c = coordinator(InMemoryLog())
        await elected(c)
        first = await join(c)
        waiting = asyncio.ensure_future(join(c, first.member_id))  # in the rebalance's initial delay
        await asyncio.sleep(0)
        c.on_elected(partition_for(G, PARTITIONS), 1)  # the leader epoch moved (an ISR change, a reassignment)
        assert (await waiting).generation == 1 and c.groups[G].members
        c.on_resigned(partition_for(G, PARTITIONS), 0)  # an older request: ignored
        assert partition_for(G, PARTITIONS) in c.owned
    asyncio.run(run())


def test_while_its_partition_loads_a_heartbeat_is_answered_none_and_a_sync_rebalance_in_progress():
    async def run():
        c = coordinator(InMemoryLog())
        c.on_elected(partition_for(G, PARTITIONS), 0)  # loading until the loop runs the load
        assert c.heartbeat(G, "m", None, 1) == Errors.NONE  # the Java consumer's poll() would throw on the error
        assert (await c.sync_group(G, 1, "m", None, None, None, {})).error == Errors.REBALANCE_IN_PROGRESS
        assert (await join(c, "m")).error == Errors.COORDINATOR_LOAD_IN_PROGRESS
        assert await c.commit_offsets(G, "m", None, 1, {T0: OffsetAndMetadata(offset=1)}) == {
            T0: Errors.COORDINATOR_LOAD_IN_PROGRESS}
        assert c.leave_group(G, [("m", None)]) == (Errors.COORDINATOR_LOAD_IN_PROGRESS, [])
        assert c.heartbeat("", "m", None, 1) == Errors.INVALID_GROUP_ID
    asyncio.run(run())


async def static_leader(c: GroupCoordinator) -> JoinResult:
    """A static member alone in generation 1, Stable, with its assignment."""
    static = await join(c, instance="host-1")
    assert (static.error, static.leader) == (Errors.NONE, static.member_id)
    assert (await c.sync_group(G, 1, static.member_id, "host-1", None, None, {static.member_id: b"A"})).error == \
        Errors.NONE
    return static


def test_a_static_leader_back_in_a_stable_group_is_not_told_to_assign_and_rebalances_only_for_a_new_protocol():
    async def run():
        c = coordinator(InMemoryLog())
        await elected(c)
        static = await static_leader(c)
        back = await join(c, instance="host-1")
        assert (back.error, back.generation, back.leader, back.members) == (Errors.NONE, 1, static.member_id, [])
        group = c.groups[G]
        assert group.state is GroupState.STABLE and group.leader == back.member_id != static.member_id
        new_metadata = [("range", b"other topics")]  # the selected protocol stays range: no rebalance
        again = await join(c, instance="host-1", protocols=new_metadata)
        assert (again.error, again.generation, again.protocol, again.leader) == (Errors.NONE, 1, "range",
                                                                                 back.member_id)
        assert group.state is GroupState.STABLE and group.members[again.member_id].protocols == new_metadata
        assert c.describe_group(G)[1].members[0][4] == b"other topics"
        third = await join(c, instance="host-1", protocols=[("roundrobin", b""), ("range", b"")])
        assert (third.error, third.generation, third.protocol, third.leader) == (Errors.NONE, 2, "roundrobin",
                                                                                 third.member_id)
    asyncio.run(run())


def test_a_static_members_new_id_that_cannot_be_stored_is_taken_back():
    async def run():
        log = InMemoryLog()
        c = coordinator(log)
        await elected(c)
        static = await static_leader(c)
        log.error = Errors.NOT_ENOUGH_REPLICAS
        back = await join(c, instance="host-1", protocols=[("range", b"other topics")])
        assert (back.error, back.member_id, back.generation, back.leader) == (Errors.COORDINATOR_NOT_AVAILABLE, "", 1,
                                                                              static.member_id)
        group = c.groups[G]
        assert list(group.members) == [static.member_id] and group.static_members == {"host-1": static.member_id}
        assert group.leader == static.member_id and group.members[static.member_id].awaiting_join is None
        # as Kafka 2.8.2 does (it reads the "old" protocols after updating them), the member keeps those it sent
        assert group.members[static.member_id].protocols == [("range", b"other topics")]
        assert c.heartbeat(G, static.member_id, "host-1", 1) == Errors.NONE
        log.error = Errors.NONE
        stored = await join(c, instance="host-1")
        assert (stored.error, stored.generation) == (Errors.NONE, 1) and list(group.members) == [stored.member_id]
    asyncio.run(run())


def test_a_commit_while_completing_a_rebalance_checks_the_member_and_generation_first():
    async def run():
        c = coordinator(InMemoryLog())
        await elected(c)
        first = await join(c)
        joined = await join(c, first.member_id)
        assert c.groups[G].state is GroupState.COMPLETING_REBALANCE
        offsets = {T0: OffsetAndMetadata(offset=1)}
        assert await c.commit_offsets(G, "stranger", None, 1, offsets) == {T0: Errors.UNKNOWN_MEMBER_ID}
        assert await c.commit_offsets(G, joined.member_id, None, 0, offsets) == {T0: Errors.ILLEGAL_GENERATION}
        assert await c.commit_offsets(G, joined.member_id, None, 1, offsets) == {T0: Errors.REBALANCE_IN_PROGRESS}
    asyncio.run(run())


def test_the_empty_group_id_is_valid_for_offsets_and_for_describing_and_deleting_groups():
    async def run():
        c = coordinator(InMemoryLog())
        await elected(c, group="")
        offsets = {T0: OffsetAndMetadata(offset=3)}
        assert await c.commit_offsets("", "", None, -1, offsets) == {T0: Errors.NONE}
        assert c.fetch_offsets("", [T0]) == (Errors.NONE, offsets)
        assert c.describe_group("")[0] == Errors.NONE and c.describe_group("")[1].state == "Empty"
        assert await c.delete_groups([""]) == {"": Errors.NONE}
        assert c.heartbeat("", "m", None, 1) == Errors.INVALID_GROUP_ID
        assert (await c.sync_group("", 1, "m", None, None, None, {})).error == Errors.INVALID_GROUP_ID
        assert c.leave_group("", [("m", None)]) == (Errors.INVALID_GROUP_ID, [])
    asyncio.run(run())


def test_a_rejoin_changes_only_the_members_protocols():
    async def run():
        c = coordinator(InMemoryLog())
        await elected(c)
        first = await join(c)
        joined = await join(c, first.member_id, session_ms=1000)
        await c.sync_group(G, 1, joined.member_id, None, None, None, {})
        new_protocols = [("range", b"other topics")]
        again = await c.join_group(G, joined.member_id, None, True, "other client", "/10.0.0.1", 5000, 50, "consumer",
                                   new_protocols)
        assert again.generation == 2
        member = c.groups[G].members[joined.member_id]
        assert (member.session_timeout_ms, member.rebalance_timeout_ms, member.client_id, member.protocols) == (
            1000, 1000, "client", new_protocols)
    asyncio.run(run())


def test_a_deleted_group_is_dead_at_once_and_its_tombstones_failing_do_not_fail_the_delete():
    async def run():
        log = InMemoryLog()
        c = coordinator(log)
        await elected(c)
        offsets = {T0: OffsetAndMetadata(offset=1)}
        await c.commit_offsets(G, "", None, -1, offsets)
        log.gate = asyncio.Event()
        deleting = asyncio.ensure_future(c.delete_groups([G, G]))
        await asyncio.sleep(0)  # its tombstones are on their way to the ISR
        assert G not in c.groups and c.describe_group(G)[1].state == "Dead"
        assert c.fetch_offsets(G, [T0]) == (Errors.NONE, {T0: None})
        log.gate.set()
        assert await deleting == {G: Errors.NONE}
        other = alike("other")
        await c.commit_offsets(other, "", None, -1, offsets)
        log.error = Errors.NOT_ENOUGH_REPLICAS
        assert await c.delete_groups([other]) == {other: Errors.NONE} and other not in c.groups
    asyncio.run(run())


def test_a_leave_from_a_dead_group_is_coordinator_not_available():
    async def run():
        c = coordinator(InMemoryLog())
        await elected(c)
        leader, other = await two_members(c)
        c.groups[G].transition(GroupState.DEAD, 0)  # as a group is while it is unloaded or deleted
        assert c.leave_group(G, [(other.member_id, None)]) == (Errors.COORDINATOR_NOT_AVAILABLE, [])
        assert c.leave_group(alike("unknown"), [(other.member_id, None)]) == (Errors.NONE, [Errors.UNKNOWN_MEMBER_ID])
    asyncio.run(run())


def test_a_known_member_joining_with_an_unknown_instance_id_is_an_unknown_member():
    async def run():
        c = coordinator(InMemoryLog())
        await elected(c)
        leader, other = await two_members(c)
        assert (await join(c, other.member_id, instance="host-9")).error == Errors.UNKNOWN_MEMBER_ID
        assert c.groups[G].state is GroupState.STABLE
    asyncio.run(run())
