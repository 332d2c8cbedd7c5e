"""The replica log on disk: record format, segments, reads, truncation, recovery, checkpoints."""
from __future__ import annotations

import random

import pytest

from actors.broker import records
from actors.broker.checkpoints import read_checkpoint, write_checkpoint
from actors.broker.leader_epochs import LeaderEpochCache
from actors.broker.log import TAIL_BYTES, Log, segment_name
from actors.broker.records import Record
from coordination.errors import KafkaStorageException, OffsetOutOfRangeException


def entries(n: int, size: int = 10, start: int = 0) -> list[Record]:
    return [Record(-1, -1, 1_000 + i, None if i % 3 == 0 else f"k{i}".encode(), bytes([i % 256]) * size, 7, i)
            for i in range(start, start + n)]


# -- record format --------------------------------------------------------------------------------

def test_records_round_trip_with_null_and_empty_keys_and_values():
    rs = [Record(5, 2, 123, None, b"v"), Record(6, 2, 124, b"", b""), Record(7, 3, 125, b"key", b"x" * 1000)]
    buffer = b"".join(records.encode(r) for r in rs)
    decoded = records.decode(buffer, 5)
    assert decoded.records == rs and decoded.error is None and decoded.valid_bytes == len(buffer)


@pytest.mark.parametrize("damage, reason", [
    (lambda b: b[:-3], "claims"),  # cut short inside the last entry
    (lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), "CRC mismatch"),  # a flipped bit in the last value
    (lambda b: b + b"\x00\x00", "truncated entry header"),  # a torn write of the next header
])
def test_decode_stops_at_the_first_bad_entry(damage, reason):
    rs = [Record(i, 0, 0, None, b"abc") for i in range(3)]
    good = b"".join(records.encode(r) for r in rs)
    decoded = records.decode(damage(good), 0)
    assert reason in decoded.error
    assert decoded.records == rs[:2] or decoded.records == rs  # the torn header keeps all three
    assert decoded.valid_bytes == sum(len(records.encode(r)) for r in decoded.records)


def test_decode_refuses_an_offset_gap():
    buffer = records.encode(Record(0, 0, 0, None, b"a")) + records.encode(Record(2, 0, 0, None, b"b"))
    decoded = records.decode(buffer, 0)
    assert [r.offset for r in decoded.records] == [0] and "expected 1" in decoded.error


# -- the log --------------------------------------------------------------------------------------

def test_leader_appends_assign_offsets_and_rolls_segments(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=500)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.append_as_leader(entries(30), leader_epoch=1) == (0, 29)
    assert log.append_as_leader(entries(5, start=30), leader_epoch=2) == (30, 34)
    assert log.log_end_offset == 35 and len(log.segments) > 2
    assert [p.name for p in sorted((tmp_path / "t-0").glob("*.log"))] == [segment_name(s.base_offset)
                                                                            for s in log.segments]
    got = log.read(0, max_bytes=10**6)
    assert [r.offset for r in got] == list(range(35))
    assert [(r.key, r.value, r.timestamp_ms, r.producer_id, r.sequence) for r in got] == [
        (e.key, e.value, e.timestamp_ms, 7, e.sequence) for e in entries(35)]
    assert {r.leader_epoch for r in got[:30]} == {1} and {r.leader_epoch for r in got[30:]} == {2}
    assert log.leader_epochs.entries == [(1, 0), (2, 30)]


def test_reads_respect_max_offset_max_bytes_and_range(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=300)
    log.append_as_leader(entries(20, size=20), leader_epoch=0)
    assert [r.offset for r in log.read(3, 10**6, max_offset=7)] == [3, 4, 5, 6]
    assert log.read(7, 10**6, max_offset=7) == []  # between HW and LEO: nothing, no error
    assert log.read(20, 10**6) == []  # at the log end: nothing yet
    one = log.read(5, max_bytes=1)
    assert [r.offset for r in one] == [5]  # always at least one record
    some = log.read(0, max_bytes=200)
    assert 1 < len(some) < 20 and [r.offset for r in some] == list(range(len(some)))
    with pytest.raises(OffsetOutOfRangeException):
        log.read(21, 100)


def test_follower_append_must_continue_the_log(tmp_path):
    log = Log(tmp_path / "t-0")
    log.append([Record(0, 4, 1, None, b"a"), Record(1, 5, 1, None, b"b")])
    assert log.leader_epochs.entries == [(4, 0), (5, 1)]
    with pytest.raises(Exception, match="log end is 2"):
        log.append([Record(3, 5, 1, None, b"c")])
    assert log.log_end_offset == 2


def test_truncate_to_drops_records_segments_and_epochs(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=300)
    log.append_as_leader(entries(10, size=20), leader_epoch=1)
    log.append_as_leader(entries(10, size=20, start=10), leader_epoch=2)
    segments_before = len(log.segments)
    log.truncate_to(7)
    assert log.log_end_offset == 7 and len(log.segments) < segments_before
    assert log.leader_epochs.entries == [(1, 0)]
    log.append_as_leader(entries(2, start=50), leader_epoch=3)
    assert [r.offset for r in log.read(0, 10**6)] == list(range(9))
    reopened = Log(tmp_path / "t-0", segment_bytes=300)
    assert reopened.recovery is None and reopened.log_end_offset == 9
    assert reopened.leader_epochs.entries == [(1, 0), (3, 7)]


def test_recovery_truncates_at_a_corrupted_record_and_reports_it(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=400)
    log.append_as_leader(entries(30, size=20), leader_epoch=1)
    log.close()
    second = sorted((tmp_path / "t-0").glob("*.log"))[1]
    data = bytearray(second.read_bytes())
    data[records.decode(bytes(data)).positions[1] + 45] ^= 0xFF  # in the value of the second record of the second segment
    second.write_bytes(bytes(data))
    recovered = Log(tmp_path / "t-0", segment_bytes=400)
    base = int(second.stem)
    assert recovered.log_end_offset == base + 1
    assert "CRC mismatch" in recovered.recovery and f"truncated at offset {base + 1}" in recovered.recovery
    assert len(recovered.segments) == 2 and len(sorted((tmp_path / "t-0").glob("*.log"))) == 2
    assert [r.offset for r in recovered.read(0, 10**6)] == list(range(base + 1))
    recovered.append_as_leader(entries(1), leader_epoch=2)  # and it goes on from there
    assert recovered.log_end_offset == base + 2


def test_recovery_of_a_torn_tail_and_a_clean_reopen(tmp_path):
    log = Log(tmp_path / "t-0")
    log.append_as_leader(entries(5), leader_epoch=0)
    log.close()
    path = next((tmp_path / "t-0").glob("*.log"))
    path.write_bytes(path.read_bytes()[:-4])
    assert Log(tmp_path / "t-0").log_end_offset == 4
    assert Log(tmp_path / "t-0").recovery is None  # the first recovery fixed the file


def reference_read(sizes: list[int], offset: int, max_bytes: int, limit: int) -> list[int]:
    """The offsets a read must give: whole records within max_bytes, at least the first."""
    out, used = [], 0
    for o in range(offset, limit):
        if out and used + sizes[o] > max_bytes:
            break
        out.append(o)
        used += sizes[o]
    return out


def test_the_sparse_index_finds_every_offset_and_stays_small(tmp_path):
    rng = random.Random(7)
    log = Log(tmp_path / "t-0", segment_bytes=2_000, index_interval_bytes=200)
    batches = [[Record(-1, -1, 0, None, bytes(rng.randrange(1, 40))) for _ in range(rng.randrange(1, 6))]
               for _ in range(150)]
    for epoch, batch in enumerate(batches):
        log.append_as_leader(batch, leader_epoch=epoch // 10)
    sizes = [records.entry_size(r) for batch in batches for r in batch]
    end = log.log_end_offset
    assert end == len(sizes) and len(log.segments) > 5
    for segment in log.segments:  # an entry per 200 bytes or so, not per record
        assert len(segment.index_offsets) <= segment.size // 200 < (segment.next_offset - segment.base_offset) / 2
    for _ in range(400):
        offset = rng.randrange(end + 1)
        max_bytes, limit = rng.choice([1, 50, 300, 5_000, 10**6]), rng.randrange(offset, end + 1)
        got = log.read(offset, max_bytes, max_offset=limit)
        assert [r.offset for r in got] == reference_read(sizes, offset, max_bytes, limit)
        assert [len(r.value) for r in got] == [s - records.entry_size(Record(0, 0, 0, None, b"")) for s in
                                               sizes[offset:offset + len(got)]]


def test_truncation_keeps_the_index_as_recovery_would_build_it(tmp_path):
    rng = random.Random(11)
    log = Log(tmp_path / "t-0", segment_bytes=1_500, index_interval_bytes=64)
    for i in range(60):
        log.append_as_leader([Record(-1, -1, 0, None, bytes(rng.randrange(1, 80))) for _ in range(3)], i // 20)
    indexed = log.segments[-2].index_offsets[1]  # a cut at an indexed record drops its entry too
    for cut in sorted({indexed, 170, 121, 120, 64, 3, 0}, reverse=True):
        log.truncate_to(cut)
        log.append_as_leader(entries(2), leader_epoch=9)
        reopened = Log(tmp_path / "t-0", segment_bytes=1_500, index_interval_bytes=64)
        assert reopened.recovery is None
        assert [(s.base_offset, s.next_offset, s.size, list(s.index_offsets), list(s.index_positions),
                 s.unindexed_bytes) for s in reopened.segments] == \
               [(s.base_offset, s.next_offset, s.size, list(s.index_offsets), list(s.index_positions),
                 s.unindexed_bytes) for s in log.segments]
        assert [r.offset for r in log.read(0, 10**6)] == list(range(cut + 2))
        reopened.close()


def test_reads_from_the_decoded_tail_give_what_the_file_gives(tmp_path):
    """The newest records are served from memory; the same reads on a reopened log (whose tail is
    empty: every read goes to the file) give equal records, through leader and follower appends,
    truncations and segment rolls, and the tail stays bounded."""
    rng = random.Random(5)
    log = Log(tmp_path / "t-0", segment_bytes=3_000, index_interval_bytes=100)
    epoch, from_tail = 0, 0
    for step in range(400):
        end = log.log_end_offset
        if rng.random() < 0.05 and end:
            log.truncate_to(rng.randrange(end))
            epoch += 1
        elif rng.random() < 0.5:  # a follower copying records that carry their offsets and epochs
            log.append([Record(end + i, epoch, step, None, bytes(rng.randrange(1, 300)), 3, i)
                        for i in range(rng.randrange(1, 4))])
        else:
            log.append_as_leader(entries(rng.randrange(1, 4), size=rng.randrange(1, 300)), leader_epoch=epoch)
        assert log._tail_bytes <= 2 * TAIL_BYTES + 1_000
        assert [r.offset for r in log._tail] == list(range(log.log_end_offset - len(log._tail), log.log_end_offset))
        if step % 40 == 39:
            reopened = Log(tmp_path / "t-0", segment_bytes=3_000, index_interval_bytes=100)
            end = log.log_end_offset
            for _ in range(100):
                offset = rng.choice([end, end - 1, end - 5, rng.randrange(end + 1)])
                offset = max(offset, 0)
                max_bytes, limit = rng.choice([1, 200, 2_000, 10**6]), rng.randrange(offset, end + 1)
                from_tail += offset >= end - len(log._tail)
                assert log.read(offset, max_bytes, limit) == reopened.read(offset, max_bytes, limit)
            reopened.close()
    assert len(log.segments) > 5 and from_tail > 200


def test_recovery_reads_a_segment_larger_than_its_chunk(tmp_path):
    log = Log(tmp_path / "t-0")
    log.append_as_leader(entries(3_000, size=777), leader_epoch=1)  # 2.4 MB: entries cross chunk ends
    size = log.segments[0].size
    log.close()
    reopened = Log(tmp_path / "t-0")
    assert reopened.recovery is None and reopened.log_end_offset == 3_000 and reopened.segments[0].size == size
    assert [r.offset for r in reopened.read(2_990, 10**6)] == list(range(2_990, 3_000))
    path = reopened.segments[0].path
    reopened.close()
    path.write_bytes(path.read_bytes()[:-100])  # a torn last entry past the first chunks
    assert Log(tmp_path / "t-0").log_end_offset == 2_999


def test_delete_removes_the_directory(tmp_path):
    log = Log(tmp_path / "t-0")
    log.append_as_leader(entries(3), leader_epoch=0)
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


def test_leader_epochs_are_checkpointed_on_close_and_rebuilt_from_records_without_it(tmp_path):
    log = Log(tmp_path / "t-0")
    log.append_as_leader(entries(3), leader_epoch=1)
    log.append_as_leader(entries(2, start=3), leader_epoch=4)
    log.leader_epochs.assign(6, log.log_end_offset)  # a leader that has appended nothing yet
    assert not (tmp_path / "t-0" / "leader-epoch-checkpoint").exists()  # kept in memory until flushed
    log.close()
    assert read_checkpoint(tmp_path / "t-0" / "leader-epoch-checkpoint", (int, int)) == [(1, 0), (4, 3), (6, 5)]
    # reopening forgets the epoch that starts at the log end (Kafka's truncateFromEnd at recovery)
    assert Log(tmp_path / "t-0").leader_epochs.entries == [(1, 0), (4, 3)]
    (tmp_path / "t-0" / "leader-epoch-checkpoint").unlink()  # lost (a crash before the flush)
    assert Log(tmp_path / "t-0").leader_epochs.entries == [(1, 0), (4, 3)]  # what the records tell


def test_recovery_stops_at_a_length_field_claiming_more_than_the_file(tmp_path):
    """A corrupted length in the middle of a 2.4 MB segment, read in 1 MB chunks: the log is cut there."""
    log = Log(tmp_path / "t-0")
    log.append_as_leader(entries(3_000, size=777), leader_epoch=1)
    log.close()
    path = log.segments[0].path
    data = bytearray(path.read_bytes())
    at = records.decode(bytes(data[:1_000_000])).positions[500]  # the 501st entry, inside the first chunk
    data[at:at + 4] = (2**31 - 1).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    recovered = Log(tmp_path / "t-0")
    assert recovered.log_end_offset == 500 and "claims" in recovered.recovery
    assert path.stat().st_size == at
