"""A replica's log in Kafka's layout: v2 batches stored as sent, segments and their .index files,
reads of whole batches, truncation, recovery, retention, leader epochs and checkpoints."""
from __future__ import annotations

import random

import pytest

from actors.broker.log import batches
from actors.broker.log.batches import build, decode_records, read_header
from actors.broker.log.checkpoints import read_checkpoint, write_checkpoint
from actors.broker.errors import KafkaStorageException, OffsetOutOfRangeException
from actors.broker.log.leader_epochs import LeaderEpochCache
from actors.broker.log.log import RECOVERY_POINT_CHECKPOINT, Log, read_recovery_point
from coordination.errors import KrayError


def batch(n: int = 1, size: int = 0, start: int = 0, timestamp_ms: int = 1_000, **kw) -> bytes:
    return build([f"v{start + i}".encode().ljust(size, b".") for i in range(n)], timestamp_ms=timestamp_ms, **kw)


def offsets(records) -> list[int]:
    return [r.offset for r in decode_records(records)]


def fill(log: Log, batches_: int, per_batch: int = 3, size: int = 20, epoch: int = 1) -> None:
    for i in range(batches_):
        log.append_as_leader(batch(per_batch, size, start=log.log_end_offset), leader_epoch=epoch)


def test_leader_appends_assign_offsets_stamp_the_epoch_and_roll_segments_by_kafkas_names(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=400)
    infos = [log.append_as_leader(batch(3, 20), leader_epoch=2) for _ in range(10)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(3 * k, 3 * k + 2) for k in range(10)]
    assert log.log_end_offset == 30 and len(log.segments) > 2
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir())
    assert names[:2] == ["00000000000000000000.index", "00000000000000000000.log"]
    assert all(s.size <= 400 for s in log.segments)
    assert [s.base_offset for s in log.segments] == sorted({s.base_offset for s in log.segments})
    stored = log.read(0, 10**6)
    assert read_header(stored).partition_leader_epoch == 2 and offsets(stored)[:3] == [0, 1, 2]


def test_segment_files_are_read_by_third_party_record_readers(tmp_path):
    """kafka-python's and aiokafka's v2 readers decode kray's segment files with kray's offsets."""
    from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
    from kafka.record.memory_records import MemoryRecords

    log = Log(tmp_path / "t-0", segment_bytes=10**6)
    for codec in ("none", "gzip", "lz4", "snappy", "zstd"):
        log.append_as_leader(build([b"%s-%d" % (codec.encode(), i) * 30 for i in range(10)], codec=codec), 1)
    log.close()
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    for reader in (MemoryRecords(data), AioMemoryRecords(data)):
        got = []
        while (b := reader.next_batch()) is not None:
            got += [(r.offset, bytes(r.value)) for r in b]
        assert [o for o, _ in got] == list(range(50))
        assert got[13][1] == b"gzip-3" * 30 and got[49][1] == b"zstd-9" * 30


def test_reads_give_whole_batches_within_max_bytes_and_below_max_offset(tmp_path):
    log = Log(tmp_path / "t-0")
    fill(log, 10, per_batch=3, size=20)
    one = len(log.read(0, 1))  # KIP-74: at least the first batch, however small max_bytes is
    assert offsets(log.read(0, 1)) == [0, 1, 2]
    assert offsets(log.read(4, 2 * one)) == [3, 4, 5, 6, 7, 8]  # from the batch holding offset 4
    assert offsets(log.read(4, 2 * one - 1)) == [3, 4, 5]
    assert offsets(log.read(0, 10**6, max_offset=7)) == [0, 1, 2, 3, 4, 5]  # the batch reaching 7 is not whole below
    assert log.read(0, 10**6, max_offset=2) == b"" and log.read(30, 100) == b""
    for bad in (-1, 31):
        with pytest.raises(OffsetOutOfRangeException):
            log.read(bad, 100)


@pytest.mark.parametrize("seed", range(12))
def test_reads_of_the_newest_batches_from_memory_are_the_files_reads(tmp_path, seed):
    """The active segment's tail in memory answers exactly what the same log read from its files does
    (a reopened log holds no tail), across appends of every size, rolls, truncations and follower appends."""
    rng = random.Random(seed)
    log = Log(tmp_path / "t-0", segment_bytes=rng.choice([3_000, 40_000, 10**6]))
    from_memory = 0
    for step in range(60):
        action = rng.random()
        if action < 0.05 and log.log_end_offset > log.log_start_offset:
            log.truncate_to(rng.randrange(log.log_start_offset, log.log_end_offset + 1))
        else:  # mostly small batches, some past the tail's size, as a leader or as its follower would append
            size = rng.choice([0, 10, 100, 1_000, 5_000, 9_000])
            records = batch(rng.randrange(1, 8), size, start=log.log_end_offset)
            if action < 0.3:
                records = batches.assign_offsets(records, log.log_end_offset, 1)
                log.append_as_follower(records)
            else:
                log.append_as_leader(records, leader_epoch=1)
        if step % 10 == 9 or step == 59:
            disk = Log(tmp_path / "t-0", segment_bytes=log.segment_bytes)
            assert disk.segments[-1].tail_bases == type(disk.segments[-1].tail_bases)("q")
            for _ in range(40):
                offset = rng.randrange(log.log_start_offset, log.log_end_offset + 1)
                max_bytes = rng.choice([0, 1, 60, 500, 4_000, 10**6])
                max_offset = rng.choice([None, rng.randrange(log.log_start_offset, log.log_end_offset + 2)])
                assert log.read(offset, max_bytes, max_offset) == disk.read(offset, max_bytes, max_offset)
                from_memory += log.segments[-1].read_tail(offset, max_bytes, max_offset) is not None
            disk.close()
    assert from_memory  # the newest batches were read from memory


def test_the_sparse_index_finds_every_offset_and_matches_its_file(tmp_path):
    rng = random.Random(3)
    log = Log(tmp_path / "t-0", index_interval_bytes=256)
    for _ in range(300):
        log.append_as_leader(batch(rng.randint(1, 5), rng.randint(1, 80), start=log.log_end_offset), 1)
    segment = log.segments[0]
    assert 10 < len(segment.index_offsets) < 200  # sparse: far fewer entries than batches
    raw = segment.index_path.read_bytes()
    entries = [(int.from_bytes(raw[i:i + 4], "big"), int.from_bytes(raw[i + 4:i + 8], "big"))
               for i in range(0, len(raw), 8)]
    assert entries == [(o - segment.base_offset, p) for o, p in zip(segment.index_offsets, segment.index_positions)]
    for offset in rng.sample(range(log.log_end_offset), 100):
        got = offsets(log.read(offset, 1))
        assert got[0] <= offset <= got[-1]


def test_follower_appends_carry_their_offsets_and_must_continue_the_log(tmp_path):
    leader, follower = Log(tmp_path / "l"), Log(tmp_path / "f")
    leader.append_as_leader(batch(2), 3)
    leader.append_as_leader(batch(3), 5)
    fetched = leader.read(0, 10**6)
    info = follower.append_as_follower(fetched + fetched[:30])  # a partial batch at the end is left out
    assert (info.first_offset, info.last_offset, follower.log_end_offset) == (0, 4, 5)
    assert follower.read(0, 10**6) == fetched
    assert follower.leader_epochs.entries == [(3, 0), (5, 2)]  # learnt from the batches
    assert follower.append_as_follower(b"") is None
    with pytest.raises(KrayError):
        follower.append_as_follower(fetched)  # offsets 0.. again


def test_truncate_to_drops_batches_segments_and_epochs(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=300)
    fill(log, 3, per_batch=3, epoch=1)
    log.append_as_leader(batch(3), leader_epoch=3)
    fill(log, 4, per_batch=3, epoch=3)
    segments = len(log.segments)
    log.truncate_to(9)
    assert log.log_end_offset == 9 and len(log.segments) < segments
    assert log.leader_epochs.entries == [(1, 0)]
    assert offsets(log.read(6, 10**6)) == [6, 7, 8]
    log.truncate_to(100)  # beyond the end: nothing
    assert log.log_end_offset == 9
    log.append_as_leader(batch(2), leader_epoch=4)
    reopened_end = log.log_end_offset
    log.close()
    reopened = Log(tmp_path / "t-0", segment_bytes=300)
    assert reopened.recovery is None and reopened.log_end_offset == reopened_end == 11
    assert reopened.leader_epochs.entries == [(1, 0), (4, 9)]


def test_truncation_at_the_log_end_forgets_an_epoch_that_appended_nothing(tmp_path):
    """Kafka's Log.truncateTo always truncates the epoch cache: a replica that led epoch 5 without appending,
    then follows a leader that never had epoch 5, must not name it in its fetches (they would be answered
    "diverged" for good, and the high watermark stuck until the ISR shrank)."""
    log = Log(tmp_path / "t-0", segment_bytes=1 << 20)
    fill(log, 2, per_batch=3, epoch=1)
    log.leader_epochs.assign(5, log.log_end_offset)  # made leader, nothing appended
    assert log.leader_epochs.latest_epoch == 5
    assert log.truncate_to(log.log_end_offset) is False and log.log_end_offset == 6
    assert log.leader_epochs.entries == [(1, 0)]
    assert log.truncate_to(3) is True and log.log_end_offset == 3


def test_truncation_keeps_the_index_as_recovery_would_build_it(tmp_path):
    log = Log(tmp_path / "t-0", index_interval_bytes=200)
    fill(log, 60, per_batch=2, size=30)
    log.truncate_to(71)  # inside a batch: the whole batch goes
    assert log.log_end_offset == 70
    truncated = (list(log.segments[-1].index_offsets), list(log.segments[-1].index_positions),
                 log.segments[-1].index_path.read_bytes())
    log.close()
    reopened = Log(tmp_path / "t-0", index_interval_bytes=200)
    assert truncated == (list(reopened.segments[-1].index_offsets), list(reopened.segments[-1].index_positions),
                         reopened.segments[-1].index_path.read_bytes())


def test_truncate_fully_and_start_at_leaves_an_empty_log_there(tmp_path):
    log = Log(tmp_path / "t-0")
    fill(log, 3)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.leader_epochs.entries) == (500, 500, [])
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == ["00000000000000000500.log"]
    info = log.append_as_follower(batches.assign_offsets(batch(2), 500, 7))
    assert info.last_offset == 501


def test_recovery_truncates_at_a_corrupted_batch_and_reports_it(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=400)
    fill(log, 20, per_batch=2, size=20)
    log.close()
    second = sorted((tmp_path / "t-0").glob("*.log"))[1]
    data = bytearray(second.read_bytes())
    first_size = read_header(data).size
    data[first_size + 70] ^= 0xFF  # in the records of the second batch of the second segment
    second.write_bytes(bytes(data))
    recovered = Log(tmp_path / "t-0", segment_bytes=400)
    base = int(second.stem)
    assert recovered.log_end_offset == base + 2
    assert "CRC" in recovered.recovery and f"truncated at offset {base + 2}" in recovered.recovery
    assert len(sorted((tmp_path / "t-0").glob("*.log"))) == 2 and len(sorted((tmp_path / "t-0").glob("*.index"))) == 2
    assert offsets(recovered.read(0, 10**6))[0] == 0
    recovered.append_as_leader(batch(1), leader_epoch=2)  # and it goes on from there
    assert recovered.log_end_offset == base + 3


def test_recovery_of_a_torn_tail_and_a_clean_reopen(tmp_path):
    log = Log(tmp_path / "t-0")
    fill(log, 5, per_batch=1)
    log.close()
    path = next((tmp_path / "t-0").glob("*.log"))
    path.write_bytes(path.read_bytes()[:-4])
    assert Log(tmp_path / "t-0").log_end_offset == 4
    assert Log(tmp_path / "t-0").recovery is None  # the first recovery fixed the file


def test_recovery_reads_a_segment_larger_than_its_chunk_and_stops_at_a_lying_length(tmp_path):
    log = Log(tmp_path / "t-0")
    fill(log, 1_000, per_batch=3, size=800)  # 2.5 MB: batches cross the 1 MB chunks
    size = log.segments[0].size
    log.close()
    reopened = Log(tmp_path / "t-0")
    assert reopened.recovery is None and reopened.log_end_offset == 3_000 and reopened.segments[0].size == size
    assert offsets(reopened.read(2_990, 10**6)) == list(range(2_988, 3_000))
    path = reopened.segments[0].path
    reopened.close()
    data = bytearray(path.read_bytes())
    at = 500 * read_header(data).size  # the 501st batch
    data[at + 8:at + 12] = (2**31 - 1).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    recovered = Log(tmp_path / "t-0")
    assert recovered.log_end_offset == 1_500 and "claims" in recovered.recovery
    assert path.stat().st_size == at


def test_retention_by_time_and_by_size_deletes_whole_old_segments_below_the_high_watermark(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=300)
    for i in range(12):
        log.append_as_leader(batch(2, 20, timestamp_ms=1_000 * (i + 1)), leader_epoch=1 + i // 6)
    segments = [(s.base_offset, s.max_timestamp, s.size) for s in log.segments]
    assert len(segments) >= 4
    assert log.delete_old_segments(now_ms=10**9, retention_ms=-1, retention_bytes=-1, high_watermark=24) == 0
    # by time: segments whose newest batch is older than now - retention.ms, but only below the HW
    cutoff = segments[2][1] + 1
    deleted = log.delete_old_segments(now_ms=cutoff + 100, retention_ms=100, retention_bytes=-1,
                                      high_watermark=segments[1][0])
    assert deleted == 1 and log.log_start_offset == segments[1][0]
    deleted = log.delete_old_segments(now_ms=cutoff + 100, retention_ms=100, retention_bytes=-1, high_watermark=24)
    assert deleted == 2 and log.log_start_offset == segments[3][0]
    with pytest.raises(OffsetOutOfRangeException):
        log.read(0, 100)
    # by size: as many oldest segments as keep the log over retention.bytes; never the active one
    deleted = log.delete_old_segments(now_ms=0, retention_ms=-1, retention_bytes=0, high_watermark=24)
    assert len(log.segments) == 1 and deleted == len(segments) - 4
    assert log.leader_epochs.entries[0][1] == log.log_start_offset
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    log.close()
    assert Log(tmp_path / "t-0", segment_bytes=300).log_start_offset == log.log_start_offset


def test_offset_for_timestamp_finds_the_first_record_at_or_after_it(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=300)
    for i in range(6):
        log.append_as_leader(batch(3, 20, timestamp_ms=100 * i), 1)  # records at 100i, 100i + 1, 100i + 2
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(201) == (7, 201)
    assert log.offset_for_timestamp(203) == (9, 300)
    assert log.offset_for_timestamp(503) is None


def test_batches_iterates_headers_over_segments(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=300)
    fill(log, 8, per_batch=2)
    assert [(h.base_offset, h.last_offset) for h in log.batches(3, 9)] == [(2, 3), (4, 5), (6, 7), (8, 9)]


def test_delete_removes_the_directory(tmp_path):
    log = Log(tmp_path / "t-0")
    fill(log, 3)
    log.delete()
    assert not (tmp_path / "t-0").exists()


# -- checkpoints and leader epochs ----------------------------------------------------------------

def test_checkpoint_round_trip_and_corruption(tmp_path):
    path = tmp_path / "replication-offset-checkpoint"
    assert read_checkpoint(path, (str, int, int)) == []
    write_checkpoint(path, [("t", 0, 42), ("u", 3, 7)])
    assert path.read_text() == "0\n2\nt 0 42\nu 3 7\n"
    assert read_checkpoint(path, (str, int, int)) == [("t", 0, 42), ("u", 3, 7)]
    for bad in ("0\n3\nt 0 42\n", "1\n0\n", "0\n1\nt zero 42\n", "0\n1\nt 0\n", ""):
        path.write_text(bad)
        with pytest.raises(KafkaStorageException):
            read_checkpoint(path, (str, int, int))


def test_leader_epoch_end_offsets_follow_kafka():
    cache = LeaderEpochCache()
    for epoch, start in ((1, 0), (3, 10), (4, 25)):
        cache.assign(epoch, start)
    cache.assign(2, 30)  # an older epoch is never recorded after a newer one
    assert cache.entries == [(1, 0), (3, 10), (4, 25)]
    assert cache.end_offset_for(4, log_end_offset=40) == (4, 40)  # the latest: the log end
    assert cache.end_offset_for(3, 40) == (3, 25)
    assert cache.end_offset_for(2, 40) == (1, 10)  # unknown epoch: the largest below it
    assert cache.end_offset_for(0, 40) == (0, 0)  # older than all: the first start offset
    assert cache.end_offset_for(5, 40) == (-1, -1)  # newer than all known
    cache.truncate_from_end(12)
    assert cache.entries == [(1, 0), (3, 10)]
    cache.truncate_from_start(11)  # retention: the epoch the new start falls in starts there
    assert cache.entries == [(3, 11)]


def test_leader_epochs_are_checkpointed_on_close_and_rebuilt_from_batches_without_it(tmp_path):
    log = Log(tmp_path / "t-0")
    log.append_as_leader(batch(3), leader_epoch=1)
    log.append_as_leader(batch(2), leader_epoch=4)
    log.leader_epochs.assign(6, log.log_end_offset)  # a leader that has appended nothing yet
    assert not (tmp_path / "t-0" / "leader-epoch-checkpoint").exists()  # kept in memory until flushed
    log.close()
    assert read_checkpoint(tmp_path / "t-0" / "leader-epoch-checkpoint", (int, int)) == [(1, 0), (4, 3), (6, 5)]
    # reopening forgets the epoch that starts at the log end (Kafka's truncateFromEnd at recovery)
    assert Log(tmp_path / "t-0").leader_epochs.entries == [(1, 0), (4, 3)]
    (tmp_path / "t-0" / "leader-epoch-checkpoint").unlink()  # lost (a crash before the flush)
    assert Log(tmp_path / "t-0").leader_epochs.entries == [(1, 0), (4, 3)]  # what the batches tell


def test_an_empty_logs_leader_epochs_are_not_written_until_it_has_records_or_replaces_a_file(tmp_path):
    """A load forgets every epoch that starts at the log end, so an empty log's checkpoint would be a file
    written for nothing (100,000 a broker after each election at 100,000 idle partitions). Once the log has
    records it is written; and a file written before is replaced even when what replaces it is empty."""
    path = tmp_path / "t-0" / "leader-epoch-checkpoint"
    log = Log(tmp_path / "t-0")
    log.leader_epochs.assign(3, 0)
    log.leader_epochs.assign(5, 0)
    assert not log.leader_epochs.unwritten(log.log_end_offset)
    log.close()
    assert not path.exists() and Log(tmp_path / "t-0").leader_epochs.entries == []  # as if it had been written
    log = Log(tmp_path / "t-0")
    log.leader_epochs.assign(5, 0)
    log.append_as_leader(batch(2), leader_epoch=5)
    log.close()
    assert read_checkpoint(path, (int, int)) == [(5, 0)]
    log = Log(tmp_path / "t-0")
    log.truncate_fully_and_start_at(0)  # empty again: the old file must not survive it
    log.close()
    assert read_checkpoint(path, (int, int)) == []


def test_an_idle_log_holds_no_file_descriptor_and_a_written_one_holds_one(tmp_path):
    """A broker's descriptors are limited (20,000 here): idle partitions must not each keep one open. A log
    with no record has no directory either: a broker makes 75,000 new replicas at once."""
    import os

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = descriptors()
    logs = [Log(tmp_path / f"t-{i}") for i in range(50)]
    assert descriptors() == before
    assert not any(log.dir.exists() for log in logs)
    fill(logs[0], 2)
    assert descriptors() == before + 1
    assert (logs[0].dir / "00000000000000000000.log").exists() and not logs[1].dir.exists()
    assert offsets(logs[0].read(0, 10**6)) == list(range(6))
    for log in logs:
        log.close()
    assert descriptors() == before


def test_a_log_is_made_on_disk_at_its_first_write_or_when_it_must_start_past_zero(tmp_path):
    """Reads, truncations, flushes, epochs and closing leave an empty log in memory; its first record, or a
    start past offset 0 (a follower whose leader's log starts there), makes it, and a reopening finds it."""
    empty = Log(tmp_path / "t-0")
    empty.leader_epochs.assign(3, 0)
    assert empty.read(0, 100) == b"" and not empty.truncate_to(0)
    empty.flush()
    empty.close()
    assert not (tmp_path / "t-0").exists() and Log(tmp_path / "t-0").log_end_offset == 0

    started = Log(tmp_path / "t-1")
    started.truncate_fully_and_start_at(5)
    assert (tmp_path / "t-1" / "00000000000000000005.log").exists()
    assert Log(tmp_path / "t-1").log_start_offset == 5

    written = Log(tmp_path / "t-2")
    fill(written, 2)
    written.close()
    again = Log(tmp_path / "t-2")
    assert again.log_end_offset == 6 and offsets(again.read(0, 10**6)) == list(range(6))


def test_the_recovery_point_moves_when_a_segment_rolls_and_is_checkpointed_beside_the_log(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=300)
    assert log.recovery_point == 0 and read_recovery_point(tmp_path / "t-0") == 0  # nothing flushed yet
    fill(log, 1)
    assert log.recovery_point == 0  # appends are not flushed (log.flush.interval.* never)
    fill(log, 6)
    assert len(log.segments) > 1
    assert log.recovery_point == log.segments[-1].base_offset == read_recovery_point(tmp_path / "t-0")
    assert log.recovery_point < log.log_end_offset  # the active segment's batches are not flushed
    log.flush()
    assert log.recovery_point == log.log_end_offset == read_recovery_point(tmp_path / "t-0")
    log.close()
    assert Log(tmp_path / "t-0", segment_bytes=300).recovery_point == log.log_end_offset


def test_the_recovery_point_follows_truncation_and_never_passes_the_log_end(tmp_path):
    log = Log(tmp_path / "t-0")
    fill(log, 5)
    log.flush()
    log.truncate_to(6)  # below the recovery point: it comes down with the log
    assert log.recovery_point == 6 == read_recovery_point(tmp_path / "t-0")
    fill(log, 2)
    log.truncate_to(9)  # above it: it stays
    assert log.recovery_point == 6
    log.truncate_fully_and_start_at(40)
    assert log.recovery_point == 40 == read_recovery_point(tmp_path / "t-0")
    log.close()
    write_checkpoint(tmp_path / "t-0" / RECOVERY_POINT_CHECKPOINT, [(90,)])  # says more than the log holds
    assert Log(tmp_path / "t-0").recovery_point == 40
    (tmp_path / "t-0" / RECOVERY_POINT_CHECKPOINT).write_text("0\n1\nx\n")
    assert read_recovery_point(tmp_path / "t-0") == 0  # unreadable: nothing taken as flushed
    assert Log(tmp_path / "t-0").recovery_point == 40  # not below the log start
