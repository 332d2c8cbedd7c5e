"""The warm standby's copy: what a round reads, what it keeps, what it drops (no I/O)."""
from __future__ import annotations

from actors.controller.standby import StandbyCopy
from coordination import zkdata
from coordination.zkclient import PartitionStateRecord
from coordination.zkdata import TopicPartition as TP


def topic(partitions: int) -> zkdata.TopicZNode:
    return zkdata.TopicZNode.from_assignment({p: [1, 2] for p in range(partitions)}, None)


def state(leader: int, version: int = 0) -> PartitionStateRecord:
    return PartitionStateRecord(zkdata.PartitionStateZNode(controller_epoch=1, leader=leader, leader_epoch=0,
                                                           isr=[1, 2]), version)


def held(partitions_a: int = 2) -> StandbyCopy:
    copy = StandbyCopy()
    copy.set_topics({"a", "b"}, {"a": topic(partitions_a), "b": topic(1)})
    copy.set_states(copy.partitions(), {tp: state(1) for tp in copy.partitions()})
    copy.as_of = 100
    return copy


def test_an_empty_copy_reads_every_topic_and_then_every_state():
    copy = StandbyCopy()
    assert copy.as_of is None and copy.held_paths() == []
    assert copy.topics_to_read({"b", "a"}, set()) == ["a", "b"]
    copy.set_topics({"a", "b"}, {"a": topic(2), "b": topic(1)})
    assert copy.states_to_read(copy.partitions(), set()) == [TP("a", 0), TP("a", 1), TP("b", 0)]


def test_a_warm_copy_reads_only_what_changed():
    copy = held()
    assert copy.topics_to_read({"a", "b"}, set()) == []
    assert copy.states_to_read(copy.partitions(), set()) == []
    changed = {zkdata.partition_state_path(TP("a", 1))}
    assert copy.topics_to_read({"a", "b"}, changed) == []
    assert copy.states_to_read(copy.partitions(), changed) == [TP("a", 1)]
    assert sorted(copy.held_paths()) == sorted([zkdata.topic_path("a"), zkdata.topic_path("b")]
                                              + [zkdata.partition_state_path(tp) for tp in copy.partitions()])


def test_a_topic_that_changed_is_read_and_its_new_partitions_states_with_it():
    copy = held()
    assert copy.topics_to_read({"a", "b"}, {zkdata.topic_path("a")}) == ["a"]
    copy.set_topics({"a", "b"}, {"a": topic(4)})
    assert copy.states_to_read(copy.partitions(), set()) == [TP("a", 2), TP("a", 3)]


def test_a_new_topic_is_read_and_a_gone_topic_dropped_with_its_states():
    copy = held()
    assert copy.topics_to_read({"a", "c"}, set()) == ["c"]
    copy.set_topics({"a", "c"}, {"c": topic(1)})
    assert set(copy.topics) == {"a", "c"}
    copy.set_states(copy.partitions(), {TP("c", 0): state(2)})
    assert set(copy.states) == {TP("a", 0), TP("a", 1), TP("c", 0)}  # b's state gone with b


def test_a_state_that_vanished_or_is_malformed_is_held_as_none_and_read_again_when_it_changes():
    copy = held()
    copy.set_states(copy.partitions(), {TP("a", 0): None})
    assert copy.states[TP("a", 0)] is None and copy.states_to_read(copy.partitions(), set()) == []
    assert copy.states_to_read(copy.partitions(), {zkdata.partition_state_path(TP("a", 0))}) == [TP("a", 0)]


def test_a_malformed_topic_holds_no_partitions():
    copy = held()
    copy.set_topics({"a", "b"}, {"a": None})
    assert copy.partitions() == {TP("b", 0)}
    copy.set_states(copy.partitions(), {})
    assert set(copy.states) == {TP("b", 0)}
