"""A broker's log directories (KIP-112): placement on the one with the fewest logs, a directory failing
under a running ReplicaManager through a real I/O error, and what its replicas answer afterwards."""
from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path

import pytest

from actors.broker.errors import KafkaStorageException
from actors.broker.log.log_dirs import LogDirFailureChannel, LogDirs, next_log_dir, parse_log_dir_name
from actors.broker.replica_manager import HW_CHECKPOINT, ReplicaManager
from actors.config import BrokerConfig, ClusterConfig
from actors.data_protocol import FetchParams, FetchPartition
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from tests.unit.replica_manager_helpers import BROKER, BROKER_EPOCH, CONFIG_FOR, batch, errors, lai, ps, stop
from actors.protocol import StopReplicaPartition

T = [TopicPartition("t", p) for p in range(4)]


def fail(log_dir: Path) -> None:
    """What chaos does (BrokerActor.fail_log_dir): the directory is put aside and a file takes its place."""
    os.rename(log_dir, log_dir.with_name(log_dir.name + ".failed"))
    log_dir.write_text("failed\n")


def test_next_log_dir_is_the_live_one_with_fewest_logs_first_in_order_among_equals():
    a, b, c = Path("/a"), Path("/b"), Path("/c")
    assert next_log_dir([a, b, c], Counter()) == a
    assert next_log_dir([a, b, c], Counter([a, b])) == c
    assert next_log_dir([a, b, c], Counter([a, a, b, c])) == b
    assert next_log_dir([b, c], Counter([a, a, a, b])) == c  # a failed: not a choice


def test_logs_go_to_the_dir_with_fewest_as_logs_are_created_found_and_deleted(tmp_path):
    """The count of logs per directory follows every log made, found at start and deleted: a deleted
    one's directory gets the next new log."""
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "t-0").mkdir(parents=True)
    (a / "t-1").mkdir()
    dirs = LogDirs([a, b])
    made = [dirs.assign(TopicPartition("u", i), is_new=True) for i in range(4)]
    assert made == [b, b, a, b]  # b to two like a, then a (first among equals), then b
    dirs.forget(TopicPartition("t", 0))
    dirs.forget(TopicPartition("t", 1))
    dirs.forget(TopicPartition("t", 1))  # twice: counted once
    assert dirs.assign(TopicPartition("u", 9), is_new=True) == a
    assert dirs.counts == Counter({a: 2, b: 3})


@pytest.mark.parametrize("name, tp", [("t-0", TopicPartition("t", 0)), ("my-topic-12", TopicPartition("my-topic", 12)),
                                      ("listeners.json", None), ("t-x", None), ("-3", None)])
def test_a_replica_directory_names_its_partition(name, tp):
    assert parse_log_dir_name(name) == tp


def test_the_config_gives_one_dir_as_before_or_several_under_the_brokers_own():
    one = ClusterConfig(zk_connect="z", broker=BrokerConfig(log_dirs="/l"))
    assert one.log_dirs_of(2) == [Path("/l/broker-2")]
    two = ClusterConfig(zk_connect="z", broker=BrokerConfig(log_dirs="/l", log_dirs_per_broker=2))
    assert two.log_dirs_of(2) == [Path("/l/broker-2/log-dir-0"), Path("/l/broker-2/log-dir-1")]


def test_logs_are_found_again_where_they_are_and_a_failed_dir_is_offline_from_the_start(tmp_path):
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    (d1 / "t-3").mkdir(parents=True)
    dirs = LogDirs([d0, d1])
    assert dirs.assign(T[3], is_new=False) == d1 and dirs.assign(T[0], is_new=True) == d0
    fail(d1)
    again = LogDirs([d0, d1])
    assert again.live == [d0] and again.offline == {d1}
    with pytest.raises(KafkaStorageException, match="are offline"):
        again.assign(T[3], is_new=False)  # its log may be on the failed dir: not created elsewhere
    assert again.assign(T[1], is_new=True) == d0  # a new one goes to a live dir
    fail(d0)
    with pytest.raises(KafkaStorageException, match="all log dirs"):
        LogDirs([d0, d1])


def test_the_failure_channel_hands_a_dir_on_once():
    handed = []
    channel = LogDirFailureChannel(handed.append)
    for _ in range(3):
        channel.maybe_add_offline_log_dir(Path("/d"), "Error while writing", OSError("EIO"))
    assert handed == [Path("/d")] and channel.has_offline_log_dir(Path("/d"))


def test_a_dir_failing_under_a_running_replica_manager_takes_its_replicas_offline_only(tmp_path):
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    rm = ReplicaManager(BROKER, [d0, d1], CONFIG_FOR)
    failed: list[Path] = []
    rm.failure_channel.on_offline = failed.append
    response = rm.become_leader_or_follower(lai(*(ps(tp, leader=1, leader_epoch=0) for tp in T)), BROKER_EPOCH)
    assert set(errors(response).values()) == {Errors.NONE}
    placed = {tp: rm.log_dirs.dir_of(tp) for tp in T}
    assert sorted(placed.values()).count(d0) == 2 and sorted(placed.values()).count(d1) == 2  # fewest first
    on_d1 = sorted(tp for tp, d in placed.items() if d == d1)
    on_d0 = sorted(tp for tp, d in placed.items() if d == d0)

    fail(d1)
    rm.write_high_watermark_checkpoints(rm.high_watermarks_by_dir())  # the scheduler's checkpoint: a real I/O error
    assert failed == [d1] and (d0 / HW_CHECKPOINT).exists()
    assert rm.handle_log_dir_failure(d1) == on_d1 and rm.handle_log_dir_failure(d1) == []
    assert set(rm.partitions) == set(on_d0) and rm.log_dirs.live == [d0]

    results = {TopicPartition(r.topic, r.partition): r.error_code
               for r in asyncio.run(rm.append_records(1, 1000, [(tp, batch(1)) for tp in T]))}
    assert results == {tp: Errors.KAFKA_STORAGE_ERROR if tp in on_d1 else Errors.NONE for tp in T}
    fetched = asyncio.run(rm.fetch(FetchParams(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                                               session_id=0, session_epoch=-1, partitions=[
            FetchPartition(tp.topic, tp.partition, 0, -1, 1 << 20, -1, -1) for tp in T], forgotten=[])))
    assert {TopicPartition(f.topic, f.partition): f.error_code for f in fetched.partitions} == results
    # the controller's LeaderAndIsr finds them offline (what it learns them from), StopReplica cannot delete them
    again = rm.become_leader_or_follower(lai(*(ps(tp, leader=1, leader_epoch=1) for tp in T), controller_epoch=2),
                                         BROKER_EPOCH)
    assert errors(again) == results
    stopped = rm.stop_replicas(stop(*(StopReplicaPartition(tp.topic, tp.partition, -2, True) for tp in on_d1),
                                    controller_epoch=2), BROKER_EPOCH)
    assert set(errors(stopped).values()) == {Errors.KAFKA_STORAGE_ERROR}


def test_an_empty_replica_is_found_again_in_the_dir_whose_checkpoint_lists_it_while_another_is_offline(tmp_path):
    """A log is made on disk at its first record: a replica with none has no directory. Restarted with a
    failed directory, the broker still knows the empty replicas of the live one from its high-watermark
    checkpoint (Kafka finds their directories), and applies their LeaderAndIsr; one it cannot place may be
    on the failed directory and stays offline."""
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    rm = ReplicaManager(BROKER, [d0, d1], CONFIG_FOR)
    rm.become_leader_or_follower(lai(*(ps(tp, leader=1, leader_epoch=0) for tp in T[:2])), BROKER_EPOCH)
    placed = {tp: rm.log_dirs.dir_of(tp) for tp in T[:2]}
    assert sorted(placed.values()) == [d0, d1] and not any((d / f"t-{tp.partition}").exists()
                                                              for tp, d in placed.items())
    rm.checkpoint_high_watermarks()
    on_d0 = next(tp for tp, d in placed.items() if d == d0)
    on_d1 = next(tp for tp, d in placed.items() if d == d1)
    fail(d1)
    again = ReplicaManager(BROKER, [d0, d1], CONFIG_FOR)
    response = again.become_leader_or_follower(lai(*(ps(tp, leader=1, leader_epoch=1) for tp in T[:2])), BROKER_EPOCH)
    assert errors(response) == {on_d0: Errors.NONE, on_d1: Errors.KAFKA_STORAGE_ERROR}
    assert again.log_dirs.dir_of(on_d0) == d0


def test_an_io_error_on_a_replicas_log_goes_to_the_channel_and_answers_a_storage_error(tmp_path):
    rm = ReplicaManager(BROKER, [tmp_path / "d0", tmp_path / "d1"], CONFIG_FOR)
    failed: list[Path] = []
    rm.failure_channel.on_offline = failed.append
    rm.become_leader_or_follower(lai(ps(T[0], leader=1, leader_epoch=0)), BROKER_EPOCH)
    partition = rm.partitions[T[0]]

    def broken(*args):
        raise OSError(5, "Input/output error")
    partition.log.append_as_leader = broken
    [result] = asyncio.run(rm.append_records(1, 1000, [(T[0], batch(1))]))
    assert result.error_code == Errors.KAFKA_STORAGE_ERROR and failed == [tmp_path / "d0"]
