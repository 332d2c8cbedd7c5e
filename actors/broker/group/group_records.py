"""The records of `__consumer_offsets`, in Kafka 2.8's formats (GroupMetadataManager's schemas), so
that Kafka's own tools and third-party readers of that topic read kray's as Kafka's.

    offset commit     key v1: group:string topic:string partition:int32
                      value v3: offset:int64 leader_epoch:int32 metadata:string commit_timestamp:int64
    group metadata    key v2: group:string
                      value v3: protocol_type:string generation:int32 protocol:nullable_string
                                leader:nullable_string current_state_timestamp:int64
                                members:[member_id:string group_instance_id:nullable_string client_id:string
                                         client_host:string rebalance_timeout:int32 session_timeout:int32
                                         subscription:bytes assignment:bytes]

Every key and value opens with its int16 version; a null value (a tombstone) deletes what its key
names. Older value versions are read too (offset commit v0-v2, group metadata v0-v2), as a log written
by an older Kafka has them. Pure: bytes in, models out.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

GROUP_METADATA_TOPIC = "__consumer_offsets"
OFFSET_KEY_VERSION, GROUP_KEY_VERSION = 1, 2
OFFSET_VALUE_VERSION, GROUP_VALUE_VERSION = 3, 3
NO_PARTITION_LEADER_EPOCH = -1

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class OffsetKey(NamedTuple):
    group: str
    topic: str
    partition: int


class GroupKey(NamedTuple):
    group: str


class OffsetAndMetadata(BaseModel):
    """A committed offset (Kafka's OffsetAndMetadata)."""

    model_config = ConfigDict(frozen=True)
    offset: int
    leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp: int = -1


class MemberRecord(BaseModel):
    model_config = ConfigDict(frozen=True)
    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout: int = -1
    session_timeout: int = -1
    subscription: bytes = b""
    assignment: bytes = b""


class GroupMetadataValue(BaseModel):
    """A group as its coordinator stores it: its generation, protocol, leader and members."""

    model_config = ConfigDict(frozen=True)
    protocol_type: str
    generation: int
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp: int = -1
    members: list[MemberRecord] = []


class MalformedRecord(ValueError):
    """A key or value that is not one of the formats above: its partition cannot be loaded as written."""


class _Writer:
    def __init__(self):
        self.parts: list[bytes] = []

    def i16(self, v: int) -> _Writer:
        self.parts.append(_I16.pack(v))
        return self

    def i32(self, v: int) -> _Writer:
        self.parts.append(_I32.pack(v))
        return self

    def i64(self, v: int) -> _Writer:
        self.parts.append(_I64.pack(v))
        return self

    def string(self, s: str | None) -> _Writer:
        if s is None:
            return self.i16(-1)
        b = s.encode()
        self.parts.append(_I16.pack(len(b)) + b)
        return self

    def bytes_(self, b: bytes) -> _Writer:
        self.parts.append(_I32.pack(len(b)) + b)
        return self

    def done(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def _take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.buf):
            raise MalformedRecord(f"a record cut short at byte {self.pos}")
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        if self.pos + n > len(self.buf):
            raise MalformedRecord(f"a string past the record's end at byte {self.pos}")
        s = self.buf[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def bytes_(self) -> bytes:
        n = self.i32()
        if n < 0:
            return b""
        if self.pos + n > len(self.buf):
            raise MalformedRecord(f"bytes past the record's end at byte {self.pos}")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(b)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _Writer().i16(OFFSET_KEY_VERSION).string(group).string(topic).i32(partition).done()


def group_key(group: str) -> bytes:
    return _Writer().i16(GROUP_KEY_VERSION).string(group).done()


def offset_value(o: OffsetAndMetadata) -> bytes:
    return (_Writer().i16(OFFSET_VALUE_VERSION).i64(o.offset).i32(o.leader_epoch).string(o.metadata)
            .i64(o.commit_timestamp).done())


def group_value(g: GroupMetadataValue) -> bytes:
    w = (_Writer().i16(GROUP_VALUE_VERSION).string(g.protocol_type).i32(g.generation).string(g.protocol)
         .string(g.leader).i64(g.current_state_timestamp).i32(len(g.members)))
    for m in g.members:
        (w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
         .i32(m.rebalance_timeout).i32(m.session_timeout).bytes_(m.subscription).bytes_(m.assignment))
    return w.done()


def read_key(key: bytes) -> OffsetKey | GroupKey:
    """The key's group (and partition, for an offset commit); MalformedRecord for any other."""
    if not key:
        raise MalformedRecord("a record without a key")
    r = _Reader(key)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.i32())
    if version == 2:
        return GroupKey(r.string() or "")
    raise MalformedRecord(f"unknown key version {version}")


def read_offset_value(value: bytes) -> OffsetAndMetadata:
    r = _Reader(value)
    version = r.i16()
    if version not in (0, 1, 2, 3):
        raise MalformedRecord(f"unknown offset commit value version {version}")
    offset = r.i64()
    epoch = r.i32() if version >= 3 else NO_PARTITION_LEADER_EPOCH
    metadata = r.string() or ""
    timestamp = r.i64()
    if version == 1:
        r.i64()  # the expire timestamp, which Kafka 2.1 on no longer writes
    return OffsetAndMetadata(offset=offset, leader_epoch=epoch, metadata=metadata, commit_timestamp=timestamp)


def read_group_value(value: bytes) -> GroupMetadataValue:
    r = _Reader(value)
    version = r.i16()
    if version not in (0, 1, 2, 3):
        raise MalformedRecord(f"unknown group metadata value version {version}")
    protocol_type, generation, protocol, leader = r.string() or "", r.i32(), r.string(), r.string()
    timestamp = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id, client_host = r.string() or "", r.string() or ""
        rebalance = r.i32() if version >= 1 else -1
        session = r.i32()
        if version == 0:
            rebalance = session
        members.append(MemberRecord(member_id=member_id, group_instance_id=instance, client_id=client_id,
                                    client_host=client_host, rebalance_timeout=rebalance, session_timeout=session,
                                    subscription=r.bytes_(), assignment=r.bytes_()))
    return GroupMetadataValue(protocol_type=protocol_type, generation=generation, protocol=protocol, leader=leader,
                              current_state_timestamp=timestamp, members=members)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, in 32-bit signed arithmetic."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group: str, partitions: int) -> int:
    """Kafka's GroupMetadataManager.partitionFor: Utils.abs(groupId.hashCode) % partitions (Utils.abs
    clears the sign bit, so Integer.MIN_VALUE maps to 0)."""
    return (java_string_hash(group) & 0x7FFFFFFF) % partitions
