"""__consumer_offsets' records in Kafka 2.8's formats, and a group's partition as Kafka computes it."""
from __future__ import annotations

import struct

import pytest

from actors.broker.group.group_records import (
    GroupKey,
    GroupMetadataValue,
    MalformedRecord,
    MemberRecord,
    OffsetAndMetadata,
    OffsetKey,
    group_key,
    group_value,
    java_string_hash,
    offset_key,
    offset_value,
    partition_for,
    read_group_value,
    read_key,
    read_offset_value,
)


def test_an_offset_commit_key_and_value_are_kafkas_bytes():
    assert offset_key("g", "t", 3) == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    value = offset_value(OffsetAndMetadata(offset=42, leader_epoch=7, metadata="m", commit_timestamp=1000))
    assert value == struct.pack(">hqih", 3, 42, 7, 1) + b"m" + struct.pack(">q", 1000)
    assert read_key(offset_key("g", "t", 3)) == OffsetKey("g", "t", 3)
    assert read_offset_value(value) == OffsetAndMetadata(offset=42, leader_epoch=7, metadata="m", commit_timestamp=1000)


def test_older_offset_commit_values_are_read():
    v1 = struct.pack(">hqh", 1, 9, 0) + struct.pack(">qq", 5, 6)  # offset, metadata "", commit and expire time
    assert read_offset_value(v1) == OffsetAndMetadata(offset=9, commit_timestamp=5)
    v0 = struct.pack(">hqh", 0, 9, 2) + b"md" + struct.pack(">q", 5)
    assert read_offset_value(v0) == OffsetAndMetadata(offset=9, metadata="md", commit_timestamp=5)


def test_group_metadata_round_trips_with_members_and_static_ids():
    value = GroupMetadataValue(protocol_type="consumer", generation=4, protocol="range", leader="m1",
                               current_state_timestamp=77, members=[
                                   MemberRecord(member_id="m1", group_instance_id="i1", client_id="c", client_host="/h",
                                                rebalance_timeout=300, session_timeout=100, subscription=b"s",
                                                assignment=b"a"),
                                   MemberRecord(member_id="m2", client_id="c2", client_host="/h2", rebalance_timeout=1,
                                                session_timeout=2)])
    assert read_key(group_key("g")) == GroupKey("g")
    assert read_group_value(group_value(value)) == value
    empty = GroupMetadataValue(protocol_type="consumer", generation=5)
    assert read_group_value(group_value(empty)) == empty


def test_a_v0_group_value_has_no_rebalance_timeout_and_no_instance_id():
    member = struct.pack(">h", 2) + b"m1" + struct.pack(">h", 1) + b"c" + struct.pack(">h", 2) + b"/h" + \
        struct.pack(">i", 10) + struct.pack(">i", 1) + b"s" + struct.pack(">i", 1) + b"a"
    v0 = struct.pack(">h", 0) + struct.pack(">h", 8) + b"consumer" + struct.pack(">i", 3) + \
        struct.pack(">h", 5) + b"range" + struct.pack(">h", 2) + b"m1" + struct.pack(">i", 1) + member
    got = read_group_value(v0)
    assert (got.generation, got.protocol, got.leader, got.current_state_timestamp) == (3, "range", "m1", -1)
    assert got.members == [MemberRecord(member_id="m1", client_id="c", client_host="/h", rebalance_timeout=10,
                                        session_timeout=10, subscription=b"s", assignment=b"a")]


@pytest.mark.parametrize("key", [b"", b"\x00", b"\x00\x07\x00\x01g", b"\x00\x01\x00\x05g"])
def test_a_malformed_key_is_refused(key):
    with pytest.raises(MalformedRecord):
        read_key(key)


def test_a_cut_short_value_is_refused():
    with pytest.raises(MalformedRecord):
        read_offset_value(offset_value(OffsetAndMetadata(offset=1))[:-3])
    with pytest.raises(MalformedRecord):
        read_group_value(b"\x00\x09")


def test_javas_string_hash_and_kafkas_partition_for_a_group():
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("\U0001F600") == (31 * 0xD83D + 0xDE00)  # UTF-16 code units, as Java counts
    assert java_string_hash("polygenelubricants") == -2 ** 31
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs of Integer.MIN_VALUE is 0
    assert partition_for("hello", 50) == 99162322 % 50
    negative = "g-python"
    h = java_string_hash(negative)
    assert partition_for(negative, 50) == (h & 0x7FFFFFFF) % 50
