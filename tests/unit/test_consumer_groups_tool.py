"""kray consumer-groups' pure half: the tables as kafka-consumer-groups prints them, the offsets a reset
plans, the --topic specs it reads."""
from __future__ import annotations

import pytest

from coordination.errors import AdminCommandFailedException
from coordination.zkdata import TopicPartition
from jobs.cli.consumer_groups import (
    MemberRow,
    PartitionRow,
    assigned_partitions,
    format_members,
    format_offsets,
    format_reset,
    format_state,
    parse_topic_partitions,
    reset_plan,
)

T0, T1, T2 = (TopicPartition("orders", p) for p in range(3))


def test_describe_prints_each_partitions_offsets_lag_and_reader_in_kafkas_columns():
    text = format_offsets("g1", [PartitionRow("g1", T1, 40, 50, "c1-abc", "/127.0.0.1", "c1"),
                                 PartitionRow("g1", T0, None, 7)], "Stable")
    assert text.splitlines() == [
        "",
        "GROUP TOPIC  PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST       CLIENT-ID",
        "g1    orders 0         -              7              -   -           -          -",
        "g1    orders 1         40             50             10  c1-abc      /127.0.0.1 c1",
    ]
    assert format_offsets("g1", [], "Empty").splitlines()[1] == "Consumer group 'g1' has no active members."


def test_members_and_state_views():
    members = [MemberRow("g1", "c1-abc", "/127.0.0.1", "c1", [T0, T1])]
    assert format_members("g1", members, "Stable").splitlines()[1:] == [
        "GROUP CONSUMER-ID HOST       CLIENT-ID #PARTITIONS", "g1    c1-abc      /127.0.0.1 c1        2"]
    assert "has no active members" in format_members("g1", [], "Empty")
    assert format_state("g1", "127.0.0.1:9093 (1)", "range", "Stable", 3).splitlines()[2] == \
        "g1    127.0.0.1:9093 (1) range               Stable 3"


@pytest.mark.parametrize("spec, value, expected", [
    ("to_earliest", None, {T0: 2, T1: 0}),
    ("to_latest", None, {T0: 10, T1: 5}),
    ("to_offset", 4, {T0: 4, T1: 4}),
    ("to_offset", 99, {T0: 10, T1: 5}),  # past the log end: clamped to it, as Kafka's tool does
    ("shift_by", -3, {T0: 4, T1: 0}),   # T1 has no committed offset: a shift starts at the earliest
    ("shift_by", 100, {T0: 10, T1: 5}),
])
def test_reset_plans_within_each_partitions_log(spec, value, expected):
    assert reset_plan(spec, value, [T0, T1], {T0: 7}, {T0: 2, T1: 0}, {T0: 10, T1: 5}) == expected


def test_reset_prints_the_new_offsets():
    assert format_reset("g1", {T1: 5, T0: 3}).splitlines()[1:] == [
        "GROUP TOPIC  PARTITION NEW-OFFSET", "g1    orders 0         3", "g1    orders 1         5"]


def test_topic_specs_name_topics_or_their_partitions():
    assert parse_topic_partitions(["orders"], {"orders": 3}) == [T0, T1, T2]
    assert parse_topic_partitions(["orders:0,2"], {"orders": 3}) == [T0, T2]
    for bad, message in [(["nope"], "does not exist"), (["orders:7"], "no partition 7"), (["orders:x"], "--topic")]:
        with pytest.raises(AdminCommandFailedException, match=message):
            parse_topic_partitions(bad, {"orders": 3})


def test_a_members_assignment_as_the_admin_client_decodes_it():
    class Decoded:
        assigned_partitions = [("orders", [1, 0])]
    assert assigned_partitions(Decoded()) == [T0, T1]
    assert assigned_partitions({"assigned_partitions": [{"topic": "orders", "partitions": [2]}]}) == [T2]
    assert assigned_partitions(b"") == [] and assigned_partitions(None) == []
