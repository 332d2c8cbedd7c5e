"""A consumer group as its coordinator holds it (Kafka's GroupMetadata and MemberMetadata): its state,
members, generation, chosen protocol, leader, static members and committed offsets. Pure: the
coordinator (group_coordinator.py) drives it and keeps the waiting requests and timers; here is
what a group is and which moves it may make.

States and the states each may follow (Kafka's GroupState.validPreviousStates):

    Empty                <- PreparingRebalance          no members; may hold offsets
    PreparingRebalance   <- Stable, CompletingRebalance, Empty
    CompletingRebalance  <- PreparingRebalance          joined; waiting for the leader's assignment
    Stable               <- CompletingRebalance
    Dead                 <- every state                 removed (deleted, or its partition moved away)
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from actors.broker.group.group_records import GroupMetadataValue, MemberRecord, OffsetAndMetadata
from coordination.zkdata import TopicPartition


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.DEAD: frozenset(GroupState),
}


class IllegalGroupTransition(RuntimeError):
    """A move the state machine does not allow: a coordinator bug, never a client's doing."""


@dataclass
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's order of preference
    assignment: bytes = b""
    awaiting_join: object | None = None  # the coordinator's: the JoinGroup waiting for the rebalance
    awaiting_sync: object | None = None  # the SyncGroup waiting for the leader's assignment
    is_new: bool = False
    heartbeat_satisfied: bool = False
    deadline_ms: float = 0.0  # when its session ends without a heartbeat

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        return next(m for name, m in self.protocols if name == protocol)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return protocols == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """Its most preferred protocol among the ones every member supports."""
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol: str | None = None
    generation: int = 0
    leader: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)  # told MEMBER_ID_REQUIRED, not joined yet
    static_members: dict[str, str] = field(default_factory=dict)  # group instance id -> member id
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    state_timestamp_ms: int = -1
    new_member_added: bool = False  # since the initial rebalance delay last started

    def transition(self, to: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[to]:
            raise IllegalGroupTransition(f"Group {self.group_id} should be in one of "
                                         f"{sorted(s.value for s in VALID_PREVIOUS[to])} before moving to "
                                         f"{to.value}, not {self.state.value}")
        self.state, self.state_timestamp_ms = to, now_ms

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    # -- members -------------------------------------------------------------

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.is_static:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.is_static and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> MemberMetadata:
        """A static member came back under a new member id (KIP-345): the same member, the old id fenced."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader == old_id:
            self.leader = new_id
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A static member's request under an id its instance no longer has (FENCED_INSTANCE_ID)."""
        known = self.static_member_id(instance_id)
        return known is not None and known != member_id

    def awaiting_join_count(self) -> int:
        return sum(m.awaiting_join is not None for m in self.members.values())

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.awaiting_join_count() and not self.pending_members

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def elect_joined_leader(self) -> bool:
        """Kafka's maybeElectNewJoinedLeader: a leader that has not rejoined gives way to one that has;
        False when no member has rejoined."""
        if self.leader is not None and self.members[self.leader].awaiting_join is not None:
            return True
        joined = next((m.member_id for m in self.members.values() if m.awaiting_join is not None), None)
        if joined is None:
            return False
        self.leader = joined
        return True

    # -- protocols -----------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        names = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*names) if names else set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join: an empty group takes any (non-empty) list; a
        group with members needs the same protocol type and a protocol in common."""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & {n for n, _ in protocols})

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; the most votes win (the first named on a tie)."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        order = [name for name, _ in next(iter(self.members.values())).protocols if name in candidates]
        return max(order, key=lambda name: votes[name])

    def init_next_generation(self, now_ms: int) -> None:
        """The joined members become generation + 1: CompletingRebalance with a protocol, or Empty with none."""
        self.generation += 1
        if self.members:
            self.protocol = self.select_protocol()
            self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol = None
            self.transition(GroupState.EMPTY, now_ms)
        for m in self.members.values():
            m.is_new = False

    def reset_assignments(self) -> None:
        for m in self.members.values():
            m.assignment = b""

    # -- what the log keeps --------------------------------------------------

    def record(self, now_ms: int) -> GroupMetadataValue:
        """The group as its coordinator writes it to __consumer_offsets."""
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "", generation=self.generation, protocol=self.protocol,
            leader=self.leader, current_state_timestamp=now_ms if self.state_timestamp_ms < 0 else self.state_timestamp_ms,
            members=[MemberRecord(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                                  client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                                  session_timeout=m.session_timeout_ms,
                                  subscription=m.metadata(self.protocol) if self.protocol else b"",
                                  assignment=m.assignment) for m in self.members.values()])

    @classmethod
    def loaded(cls, group_id: str, value: GroupMetadataValue | None,
               offsets: dict[TopicPartition, OffsetAndMetadata], now_ms: int) -> GroupMetadata:
        """Kafka's GroupMetadata.loadGroup: as the log left it, Stable with its members or Empty."""
        group = cls(group_id, offsets=dict(offsets))
        if value is not None:
            group.protocol_type = value.protocol_type or None
            group.generation, group.protocol, group.leader = value.generation, value.protocol, value.leader
            for m in value.members:
                group.members[m.member_id] = MemberMetadata(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                    m.session_timeout, value.protocol_type, [(value.protocol or "", m.subscription)], m.assignment)
                if m.group_instance_id is not None:
                    group.static_members[m.group_instance_id] = m.member_id
            group.state = GroupState.STABLE if group.members else GroupState.EMPTY
            group.state_timestamp_ms = value.current_state_timestamp if value.current_state_timestamp >= 0 else now_ms
        return group
