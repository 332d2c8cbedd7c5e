"""The group coordinator (Kafka's GroupCoordinator): consumer groups' joins, rebalances,
assignments, heartbeats and sessions, and the requests for their offsets, for the groups of the
`__consumer_offsets` partitions this broker leads. Where the groups are kept and how they are
written to and loaded from the log is group_metadata_manager.py's (Kafka's GroupMetadataManager).

It follows the controller's decisions. A LeaderAndIsr that makes this broker leader of an offsets
partition starts loading it: its groups and offsets are read back from the log (requests for them get
COORDINATOR_LOAD_IN_PROGRESS meanwhile, but for Kafka's answers to a heartbeat, NONE, and to a SyncGroup,
REBALANCE_IN_PROGRESS), and loaded members must heartbeat within their session. On
becoming follower, or on StopReplica, the partition's groups are given up: their waiting requests get
NOT_COORDINATOR, and the members find the new coordinator.

Everything a group does that must survive this broker, its metadata after each rebalance and each
commit, is appended to its offsets partition with acks=all semantics (the ISR has it before the client
hears of it). Runs on the broker's event loop: joins and syncs wait as futures, sessions and rebalance
delays as the loop's timers. Pure: no Ray, no ZooKeeper.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from actors.broker.group.group_metadata import GroupMetadata, GroupState, MemberMetadata
from actors.broker.group.group_metadata_manager import GroupLog, GroupMetadataManager, now_ms
from actors.broker.group.group_records import GROUP_METADATA_TOPIC, OffsetAndMetadata
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

if TYPE_CHECKING:  # for the annotation only: actors.config loads kazoo (ClusterConfig's client) and this stays pure
    from actors.config import BrokerConfig

log = logging.getLogger(__name__)

S = GroupState
UNKNOWN_MEMBER = ""
NO_GENERATION = -1
# Kafka's isValidGroupId: these APIs take the empty group id (old clients keep offsets under it, and any group
# may be described and deleted); the group membership APIs need a name
EMPTY_GROUP_ID_APIS = frozenset({"OffsetCommit", "OffsetFetch", "DescribeGroups", "DeleteGroups"})


@dataclass
class JoinResult:
    """Kafka's JoinGroupResult: the members (with their metadata) only for the leader."""

    error: Errors
    member_id: str = UNKNOWN_MEMBER
    generation: int = NO_GENERATION
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class SyncResult:
    error: Errors
    protocol_type: str | None = None
    protocol: str | None = None
    assignment: bytes = b""


@dataclass
class GroupSummary:
    """DescribeGroups' answer: members' metadata and assignments only while the group is Stable."""

    state: str
    protocol_type: str
    protocol: str
    members: list[tuple[str, str | None, str, str, bytes, bytes]]  # id, instance, client id, host, metadata, assignment


class GroupCoordinator:
    def __init__(self, broker_id: int, config: BrokerConfig, group_log: GroupLog):
        """`group_log`: the replica server as the coordinator reaches it, its groups kept by the
        GroupMetadataManager built on it."""
        self.config = config
        self.group_manager = GroupMetadataManager(broker_id, config, group_log)
        self.events = group_log.events
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}  # (group, member) -> its session's end
        self._join_timers: dict[str, asyncio.TimerHandle] = {}  # group -> its rebalance's end
        self._initial: set[str] = set()  # groups whose rebalance is in its initial delay
        self.prefix = f"[GroupCoordinator {broker_id}]:"

    @property
    def groups(self) -> dict[str, GroupMetadata]:
        return self.group_manager.groups

    @property
    def owned(self) -> set[int]:
        return self.group_manager.owned

    # -- ownership -----------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        return self.group_manager.partition_of(group_id)

    def check(self, group_id: str, api: str) -> Errors | None:
        """Kafka's validateGroupStatus: whether this coordinator may answer `api` (its name) for the group."""
        if not group_id and api not in EMPTY_GROUP_ID_APIS:
            return Errors.INVALID_GROUP_ID
        p = self.partition_of(group_id)
        if p in self.group_manager.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned:
            return Errors.NOT_COORDINATOR
        return None

    def on_elected(self, partition: int, epoch: int) -> None:
        """Kafka's onElection: this broker leads offsets partition `partition` at leader epoch `epoch`; its
        groups load, and each loaded member's session starts."""
        self.group_manager.schedule_load(partition, epoch, self._on_group_loaded)

    def on_resigned(self, partition: int, epoch: int | None = None) -> None:
        """Kafka's onResignation: this broker no longer leads `partition` (as of `epoch`, when the request
        gave one): its groups go, their waiting requests answered NOT_COORDINATOR."""
        self.group_manager.remove_groups_for_partition(partition, epoch, self._on_group_unloaded)

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        for member in group.members.values():
            self._heartbeat(group, member)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        for member in list(group.members.values()):
            self._answer_join(member, JoinResult(Errors.NOT_COORDINATOR, member.member_id))
            self._answer_sync(member, SyncResult(Errors.NOT_COORDINATOR))
            self._cancel_timer(group, member.member_id)
        if (timer := self._join_timers.pop(group.group_id, None)) is not None:
            timer.cancel()
        self._initial.discard(group.group_id)
        group.transition(S.DEAD, now_ms())

    # -- JoinGroup -----------------------------------------------------------

    async def join_group(self, group_id: str, member_id: str, instance_id: str | None, require_known_member_id: bool,
                         client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                         protocol_type: str, protocols: list[tuple[str, bytes]]) -> JoinResult:
        """Kafka's handleJoinGroup: a new member gets its id (at v4+ first told MEMBER_ID_REQUIRED, to
        join again with it), then every member waits until the rebalance completes."""
        if (error := self.check(group_id, "JoinGroup")) is not None:
            return JoinResult(error, member_id)
        if not self.config.group_min_session_timeout_ms <= session_timeout_ms <= self.config.group_max_session_timeout_ms:
            return JoinResult(Errors.INVALID_SESSION_TIMEOUT, member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id != UNKNOWN_MEMBER:
                return JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id)
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.is_(S.DEAD):  # removed while this request waited: the client finds the coordinator again
            return JoinResult(Errors.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports(protocol_type, protocols):
            return JoinResult(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id == UNKNOWN_MEMBER:
            return await self._join_unknown_member(group, instance_id, require_known_member_id, client_id,
                                                   client_host, rebalance_timeout_ms, session_timeout_ms,
                                                   protocol_type, protocols)
        return await self._join_known_member(group, member_id, instance_id, client_id, client_host,
                                             rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)

    async def _join_unknown_member(self, group: GroupMetadata, instance_id, require_known_member_id, client_id,
                                   client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                   protocols) -> JoinResult:
        if len(group.members) + len(group.pending_members) >= self.config.group_max_size:
            return JoinResult(Errors.GROUP_MAX_SIZE_REACHED)
        new_id = f"{instance_id or client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                return await self._update_static_member_and_rebalance(group, instance_id, old_id, new_id, protocols)
        elif require_known_member_id:
            group.pending_members.add(new_id)
            self._schedule(group, new_id, session_timeout_ms)
            return JoinResult(Errors.MEMBER_ID_REQUIRED, new_id)
        return await self._add_member_and_rebalance(group, new_id, instance_id, client_id, client_host,
                                                    rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)

    async def _join_known_member(self, group: GroupMetadata, member_id, instance_id, client_id, client_host,
                                 rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols) -> JoinResult:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._cancel_timer(group, member_id)
            return await self._add_member_and_rebalance(group, member_id, instance_id, client_id, client_host,
                                                        rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                                        protocols)
        if group.is_fenced(member_id, instance_id):
            return JoinResult(Errors.FENCED_INSTANCE_ID, member_id)
        member = group.members.get(member_id)
        if member is None or instance_id is not None and group.static_member_id(instance_id) is None:
            return JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id)  # to join again without its id
        if group.is_(S.PREPARING_REBALANCE):
            return await self._update_member_and_rebalance(group, member, protocols, f"member {member_id} joined")
        if group.is_(S.COMPLETING_REBALANCE):
            if member.matches(protocols):  # its JoinGroup response was lost: answer it again
                return self._join_result(group, member)
            return await self._update_member_and_rebalance(group, member, protocols, f"member {member_id} joined "
                                                           "with new metadata")
        if group.is_(S.STABLE):
            if member_id == group.leader or not member.matches(protocols):  # the leader may want a new assignment
                return await self._update_member_and_rebalance(group, member, protocols, f"member {member_id} joined")
            return JoinResult(Errors.NONE, member_id, group.generation, group.protocol_type, group.protocol,
                              group.leader or "")
        return JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id)  # Empty or Dead: it was removed

    async def _add_member_and_rebalance(self, group: GroupMetadata, member_id, instance_id, client_id, client_host,
                                        rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                        protocols) -> JoinResult:
        member = MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                                session_timeout_ms, protocol_type, list(protocols), is_new=True)
        waiter = member.awaiting_join = asyncio.get_running_loop().create_future()
        group.add(member)
        if group.is_(S.PREPARING_REBALANCE) and group.generation == 0:
            group.new_member_added = True  # the initial delay waits a while more
        self._heartbeat(group, member)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")
        self._try_complete_join(group)
        return await waiter

    async def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata, protocols,
                                           reason: str) -> JoinResult:
        """Kafka's updateMemberAndRebalance: a member joining again changes its protocols only (its timeouts
        and client are those it first joined with)."""
        member.protocols = list(protocols)
        self._answer_join(member, JoinResult(Errors.REBALANCE_IN_PROGRESS, member.member_id))  # a duplicate join
        waiter = member.awaiting_join = asyncio.get_running_loop().create_future()
        self._heartbeat(group, member)
        self._maybe_prepare_rebalance(group, reason)
        self._try_complete_join(group)
        return await waiter

    async def _update_static_member_and_rebalance(self, group: GroupMetadata, instance_id: str, old_id: str,
                                                  new_id: str, protocols) -> JoinResult:
        """Kafka's updateStaticMemberAndRebalance (KIP-345): a static member back under a new id takes its
        old place, the old id fenced. In a Stable group whose selected protocol stays, the new id is only
        stored, and the member is told the leader as it was, so that it does not assign (a Stable group
        would not hand an assignment out); a failed store puts the old id back and is answered. Kafka
        2.8.2 reads the protocols to restore after updating them, so the member keeps those it sent."""
        log.info("%s Static member %s of group %s with unknown member id rejoins, assigning new member id %s, "
                 "while old member id %s will be removed.", self.prefix, instance_id, group.group_id, new_id, old_id)
        leader = group.leader or ""
        member = group.replace_static_member(instance_id, old_id, new_id)
        self._cancel_timer(group, old_id)
        self._answer_join(member, JoinResult(Errors.FENCED_INSTANCE_ID, old_id))
        self._answer_sync(member, SyncResult(Errors.FENCED_INSTANCE_ID))
        member.protocols = list(protocols)
        if not group.is_(S.STABLE) or group.select_protocol() != group.protocol:
            return await self._update_member_and_rebalance(group, member, protocols, f"static member {instance_id} "
                                                           f"joined again as {new_id}")
        waiter = member.awaiting_join = asyncio.get_running_loop().create_future()
        self._heartbeat(group, member)
        error = await self.group_manager.store_group(group)
        if error != Errors.NONE:
            log.warning("%s Failed to persist metadata for group %s: %s", self.prefix, group.group_id, error.name)
            if member.awaiting_join is waiter:
                member.awaiting_join = None
            if group.members.get(new_id) is member:
                group.replace_static_member(instance_id, new_id, old_id)
                self._cancel_timer(group, new_id)
                self._heartbeat(group, member)
            return JoinResult(error, UNKNOWN_MEMBER, group.generation, group.protocol_type, group.protocol, leader)
        self._answer_join(member, JoinResult(Errors.NONE, new_id, group.generation, group.protocol_type,
                                             group.protocol, leader))
        return await waiter

    def _join_result(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        leader = member.member_id == group.leader
        return JoinResult(Errors.NONE, member.member_id, group.generation, group.protocol_type, group.protocol,
                          group.leader or "",
                          [(m.member_id, m.group_instance_id, m.metadata(group.protocol))
                           for m in group.members.values()] if leader else [])

    # -- rebalances ----------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        """Kafka's prepareRebalance: waiting syncs told REBALANCE_IN_PROGRESS; the join completes when
        every member has rejoined, or at the rebalance timeout (an empty group's first one after
        group.initial.rebalance.delay.ms, longer while members keep coming)."""
        if group.is_(S.COMPLETING_REBALANCE):
            group.reset_assignments()
            for member in group.members.values():
                self._answer_sync(member, SyncResult(Errors.REBALANCE_IN_PROGRESS))
        initial = group.is_(S.EMPTY)
        group.transition(S.PREPARING_REBALANCE, now_ms())
        log.info("%s Preparing to rebalance group %s in state PreparingRebalance with old generation %d "
                 "(%s-%d) (reason: %s)", self.prefix, group.group_id, group.generation, GROUP_METADATA_TOPIC,
                 self.partition_of(group.group_id), reason)
        loop = asyncio.get_running_loop()
        if (timer := self._join_timers.pop(group.group_id, None)) is not None:
            timer.cancel()
        if initial:
            delay = self.config.group_initial_rebalance_delay_ms
            group.new_member_added = False
            remaining = max(group.max_rebalance_timeout_ms() - delay, 0)
            self._initial.add(group.group_id)
            self._join_timers[group.group_id] = loop.call_later(delay / 1000, self._initial_delay_over, group,
                                                                delay, remaining)
        else:
            self._initial.discard(group.group_id)
            self._join_timers[group.group_id] = loop.call_later(group.max_rebalance_timeout_ms() / 1000,
                                                                self._complete_join, group)

    def _initial_delay_over(self, group: GroupMetadata, delay: int, remaining: int) -> None:
        """Kafka's InitialDelayedJoin: while new members keep joining, wait again (within the rebalance
        timeout)."""
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            wait = min(delay, remaining)
            self._join_timers[group.group_id] = asyncio.get_running_loop().call_later(
                wait / 1000, self._initial_delay_over, group, delay, remaining - wait)
        else:
            self._complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        """Kafka's DelayedJoin.tryComplete: a rebalance completes as soon as every member has rejoined
        (one in its initial delay waits the delay out)."""
        if (group.is_(S.PREPARING_REBALANCE) and group.group_id in self._join_timers
                and group.group_id not in self._initial and group.has_all_members_joined()):
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        """Kafka's onCompleteJoin: dynamic members that did not rejoin are removed, the rest become the next
        generation and hear of it; the leader gets everyone's metadata, to assign. With only static
        members that have not rejoined, it waits another rebalance timeout for their sessions to end."""
        if not group.is_(S.PREPARING_REBALANCE) or self.groups.get(group.group_id) is not group:
            return
        if (timer := self._join_timers.pop(group.group_id, None)) is not None:
            timer.cancel()
        self._initial.discard(group.group_id)
        for member in [m for m in group.not_yet_rejoined() if not m.is_static]:
            group.remove(member.member_id)
            self._cancel_timer(group, member.member_id)
        if not group.elect_joined_leader() and group.members:
            log.error("%s Group %s could not complete rebalance because no members rejoined", self.prefix,
                      group.group_id)
            self._join_timers[group.group_id] = asyncio.get_running_loop().call_later(
                group.max_rebalance_timeout_ms() / 1000, self._complete_join, group)
            return
        group.init_next_generation(now_ms())
        if group.is_(S.EMPTY):
            log.info("%s Group %s with generation %d is now empty (%s-%d)", self.prefix, group.group_id,
                     group.generation, GROUP_METADATA_TOPIC, self.partition_of(group.group_id))
            asyncio.get_running_loop().create_task(self.group_manager.store_group(group))
            return
        log.info("%s Stabilized group %s generation %d (%s-%d) with %d members", self.prefix, group.group_id,
                 group.generation, GROUP_METADATA_TOPIC, self.partition_of(group.group_id), len(group.members))
        self.events.group_stabilized(group.group_id, group.generation, len(group.members))
        for member in group.members.values():
            self._answer_join(member, self._join_result(group, member))
            self._heartbeat(group, member)

    # -- SyncGroup -----------------------------------------------------------

    async def sync_group(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                         protocol_type: str | None, protocol: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
        """Kafka's handleSyncGroup: members wait for the leader's assignment, which is stored with the
        group (acks=all) before any of them hears of it. While the group loads, its rebalance is lost: the
        member is told REBALANCE_IN_PROGRESS, to join again (older clients do not expect
        COORDINATOR_LOAD_IN_PROGRESS here)."""
        if (error := self.check(group_id, "SyncGroup")) is not None:
            return SyncResult(Errors.REBALANCE_IN_PROGRESS if error == Errors.COORDINATOR_LOAD_IN_PROGRESS else error)
        group = self.groups.get(group_id)
        if group is None or group.is_(S.DEAD):
            return SyncResult(Errors.UNKNOWN_MEMBER_ID if group is None else Errors.COORDINATOR_NOT_AVAILABLE)
        if group.is_fenced(member_id, instance_id):
            return SyncResult(Errors.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(Errors.UNKNOWN_MEMBER_ID)
        if generation != group.generation:
            return SyncResult(Errors.ILLEGAL_GENERATION)
        if protocol_type is not None and protocol_type != group.protocol_type or \
                protocol is not None and protocol != group.protocol:
            return SyncResult(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(S.PREPARING_REBALANCE, S.EMPTY):
            return SyncResult(Errors.REBALANCE_IN_PROGRESS if group.is_(S.PREPARING_REBALANCE)
                              else Errors.UNKNOWN_MEMBER_ID)
        self._heartbeat(group, member)
        if group.is_(S.STABLE):
            return SyncResult(Errors.NONE, group.protocol_type, group.protocol, member.assignment)
        waiter = member.awaiting_sync = asyncio.get_running_loop().create_future()
        if member_id == group.leader:
            log.info("%s Assignment received from leader for group %s for generation %d", self.prefix, group_id,
                     group.generation)
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            error = await self.group_manager.store_group(group)
            if group.is_(S.COMPLETING_REBALANCE) and generation == group.generation:
                if error != Errors.NONE:
                    group.reset_assignments()
                    for m in group.members.values():
                        self._answer_sync(m, SyncResult(error))
                    self._maybe_prepare_rebalance(group, f"error {error.name} when storing group assignment")
                else:
                    group.transition(S.STABLE, now_ms())
                    self.events.group_synced(group_id, group.generation)
                    for m in group.members.values():
                        self._answer_sync(m, SyncResult(Errors.NONE, group.protocol_type, group.protocol, m.assignment))
        return await waiter

    # -- Heartbeat and LeaveGroup --------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> Errors:
        """Kafka's handleHeartbeat: answered NONE while the group loads (the Java consumer's poll() throws on
        COORDINATOR_LOAD_IN_PROGRESS from a heartbeat)."""
        if (error := self.check(group_id, "Heartbeat")) is not None:
            return Errors.NONE if error == Errors.COORDINATOR_LOAD_IN_PROGRESS else error
        group = self.groups.get(group_id)
        if group is None or group.is_(S.EMPTY, S.DEAD):
            return Errors.UNKNOWN_MEMBER_ID if group is None or group.is_(S.EMPTY) else Errors.COORDINATOR_NOT_AVAILABLE
        if group.is_fenced(member_id, instance_id):
            return Errors.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return Errors.ILLEGAL_GENERATION
        self._heartbeat(group, member)
        return Errors.REBALANCE_IN_PROGRESS if group.is_(S.PREPARING_REBALANCE) else Errors.NONE

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[Errors, list[Errors]]:
        """Kafka's handleLeaveGroup (batched since v3): each member removed, the group rebalancing."""
        if (error := self.check(group_id, "LeaveGroup")) is not None:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return Errors.NONE, [Errors.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.is_(S.DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE, []
        errors = []
        for member_id, instance_id in leaving:
            if instance_id is not None and member_id == UNKNOWN_MEMBER:
                member_id = group.static_member_id(instance_id) or UNKNOWN_MEMBER
            if group.is_fenced(member_id, instance_id):
                errors.append(Errors.FENCED_INSTANCE_ID)
            elif member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._cancel_timer(group, member_id)
                self._try_complete_join(group)
                errors.append(Errors.NONE)
            elif member_id not in group.members:
                errors.append(Errors.UNKNOWN_MEMBER_ID)
            else:
                self._remove_member(group, group.members[member_id], "leaving the group")
                errors.append(Errors.NONE)
        return Errors.NONE, errors

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        """Kafka's removeMemberAndUpdateGroup."""
        self._answer_join(member, JoinResult(Errors.UNKNOWN_MEMBER_ID, member.member_id))
        self._answer_sync(member, SyncResult(Errors.UNKNOWN_MEMBER_ID))
        self._cancel_timer(group, member.member_id)
        group.remove(member.member_id)
        log.info("%s Member %s in group %s has left (%s)", self.prefix, member.member_id, group.group_id, reason)
        if group.is_(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"removing member {member.member_id} on {reason}")
        elif group.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # -- sessions ------------------------------------------------------------

    def _heartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None:
        """A sign of life: the member's session starts again."""
        self._schedule(group, member.member_id, member.session_timeout_ms)

    def _schedule(self, group: GroupMetadata, member_id: str, session_timeout_ms: int) -> None:
        self._cancel_timer(group, member_id)
        self._timers[(group.group_id, member_id)] = asyncio.get_running_loop().call_later(
            session_timeout_ms / 1000, self._session_ended, group, member_id)

    def _cancel_timer(self, group: GroupMetadata, member_id: str) -> None:
        if (timer := self._timers.pop((group.group_id, member_id), None)) is not None:
            timer.cancel()

    def _session_ended(self, group: GroupMetadata, member_id: str) -> None:
        """Kafka's onExpireHeartbeat: a member waiting on a rebalance (its join or its assignment) stays,
        since the rebalance's own timeout bounds that wait; any other goes."""
        self._timers.pop((group.group_id, member_id), None)
        if self.groups.get(group.group_id) is not group:
            return
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._try_complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None:
            return
        if member.awaiting_join is not None or member.awaiting_sync is not None:
            self._heartbeat(group, member)
            return
        log.info("%s Member %s in group %s has failed, removing it from the group", self.prefix, member_id,
                 group.group_id)
        self._remove_member(group, member, "expiration of its session")

    # -- offsets -------------------------------------------------------------

    async def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation: int,
                             offsets: dict[TopicPartition, OffsetAndMetadata]) -> dict[TopicPartition, Errors]:
        """Kafka's handleCommitOffsets: by a member of the current generation, or (generation -1) by a client
        that only keeps its offsets here; stored with acks=all before they count."""
        def every(error: Errors) -> dict[TopicPartition, Errors]:
            return dict.fromkeys(offsets, error)
        if (error := self.check(group_id, "OffsetCommit")) is not None:
            return every(error)
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                return every(Errors.ILLEGAL_GENERATION)
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.is_(S.DEAD):
            return every(Errors.COORDINATOR_NOT_AVAILABLE)
        if group.is_fenced(member_id, instance_id):
            return every(Errors.FENCED_INSTANCE_ID)
        if not (generation < 0 and group.is_(S.EMPTY)):
            if member_id not in group.members:
                return every(Errors.UNKNOWN_MEMBER_ID)
            if generation != group.generation:
                return every(Errors.ILLEGAL_GENERATION)
            if group.is_(S.COMPLETING_REBALANCE):  # a member of this generation that has not synced yet
                return every(Errors.REBALANCE_IN_PROGRESS)
            self._heartbeat(group, group.members[member_id])
        return await self.group_manager.store_offsets(group, offsets)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None
                      ) -> tuple[Errors, dict[TopicPartition, OffsetAndMetadata | None]]:
        if (error := self.check(group_id, "OffsetFetch")) is not None:
            return error, {}
        return Errors.NONE, self.group_manager.get_offsets(group_id, partitions)

    # -- the groups, listed, described and deleted ---------------------------

    def list_groups(self) -> tuple[Errors, list[tuple[str, str, str]]]:
        """(group, protocol type, state) of every group here; COORDINATOR_LOAD_IN_PROGRESS while loading."""
        if self.group_manager.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS, []
        return Errors.NONE, [(g.group_id, g.protocol_type or "", g.state.value) for g in self.groups.values()
                             if self.partition_of(g.group_id) in self.owned]

    def describe_group(self, group_id: str) -> tuple[Errors, GroupSummary]:
        if (error := self.check(group_id, "DescribeGroups")) is not None:
            return error, GroupSummary("", "", "", [])
        group = self.groups.get(group_id)
        if group is None:
            return Errors.NONE, GroupSummary(S.DEAD.value, "", "", [])
        stable = group.is_(S.STABLE)
        return Errors.NONE, GroupSummary(
            group.state.value, group.protocol_type or "", group.protocol or "" if stable else "",
            [(m.member_id, m.group_instance_id, m.client_id, m.client_host,
              m.metadata(group.protocol) if stable else b"", m.assignment if stable else b"")
             for m in group.members.values()])

    async def delete_groups(self, group_ids: list[str]) -> dict[str, Errors]:
        """Kafka's handleDeleteGroups: an empty group is Dead and gone at once, then its offsets and metadata
        are deleted with tombstones."""
        out, deleted = {}, []
        for group_id in dict.fromkeys(group_ids):
            if (error := self.check(group_id, "DeleteGroups")) is not None:
                out[group_id] = error
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(S.DEAD):
                out[group_id] = Errors.GROUP_ID_NOT_FOUND
            elif not group.is_(S.EMPTY):
                out[group_id] = Errors.NON_EMPTY_GROUP
            else:
                group.transition(S.DEAD, now_ms())
                del self.groups[group_id]
                deleted.append(group)
                out[group_id] = Errors.NONE
        await self.group_manager.cleanup_group_metadata(deleted)
        return out

    # -- answering waiting requests ------------------------------------------

    @staticmethod
    def _answer_join(member: MemberMetadata, result: JoinResult) -> None:
        waiter, member.awaiting_join = member.awaiting_join, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    @staticmethod
    def _answer_sync(member: MemberMetadata, result: SyncResult) -> None:
        waiter, member.awaiting_sync = member.awaiting_sync, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)
