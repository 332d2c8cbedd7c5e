"""A replica's log on the broker's local disk, in Kafka's layout: segment files of v2 record batches
exactly as producers sent them (the leader patched only their offsets and epoch), each with a
sparse offset index.

    <log dir>/<topic>-<partition>/00000000000000000000.log     batches from offset 0
                                 /00000000000000000000.index   Kafka's .index: (relative offset, position)
                                 /00000000000000001234.log     the next segment, from 1234 ...
                                 /leader-epoch-checkpoint
                                 /recovery-point-checkpoint    the offset up to which the log was flushed

A log is made on disk at its first write (or when it must start past offset 0): until then a replica
that has no record holds no directory, where Kafka makes the directory and its files with the replica.

How it fails: opening recovers the log by reading every segment a chunk at a time and checking
every batch (length, magic, CRC-32C, offsets following on); it truncates at the first batch that is
cut short or bad, drops later segments, says what it cut in `recovery`, and rewrites the indexes.
Writes reach the operating system at once, so a killed process loses nothing. They are fsync'ed only
when a segment rolls and at a clean shutdown (Kafka's default: log.flush.interval.messages and .ms
never flush, durability is left to replication): a power loss may take everything past the recovery
point, the offset below which the log was flushed. Kafka's LogManager checkpoints every log's
recovery point in one file per log directory every minute; here the log writes its own, in its
directory, each time it flushes (not fsync'ed: a lost one only says less was flushed). Nothing here
reads it but the disk-fault injector (jobs/experiments/disk_faults.py): recovery checks every segment anyway.

A segment is rolled when the next batch would not fit in `segment_bytes`. An index entry is added
each time `index_interval_bytes` were appended since the last one (Kafka's index.interval.bytes),
naming a batch's last offset and where that batch starts; a read looks up the entry at or below
its offset and walks batch headers from there. The active segment also keeps its newest batches
in memory (at most TAIL_BYTES, with where each starts): followers and consumers that keep up read
what was just appended from there, with no system call and no header walked (on the disk path, a
follower's fetch cost two preads and a walk of up to 4 KB of headers per partition, a sixth of a
broker's loop at 2,000 records/s over 1,000 partitions). Reads return whole batches as bytes: no record is
decoded on the produce, replicate or fetch path. Retention deletes whole segments (and with them
the log start offset moves), never the active one.
"""
from __future__ import annotations

import bisect
import logging
import os
import shutil
import struct
from array import array
from pathlib import Path
from typing import Iterator, NamedTuple

from actors.broker.log import batches
from actors.broker.log.batches import BATCH_OVERHEAD, BatchHeader
from actors.broker.log.checkpoints import read_checkpoint, write_checkpoint
from actors.broker.errors import KafkaStorageException, OffsetOutOfRangeException
from actors.broker.log.leader_epochs import LeaderEpochCache
from coordination.errors import KrayError

log = logging.getLogger(__name__)

SEGMENT_SUFFIX, INDEX_SUFFIX = ".log", ".index"
RECOVERY_POINT_CHECKPOINT = "recovery-point-checkpoint"
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
INDEX_INTERVAL_BYTES = 4096  # Kafka's index.interval.bytes
READ_CHUNK_BYTES = 1 << 20  # reading a log through: recovery, producer state, timestamps
_INDEX_ENTRY = struct.Struct(">ii")
TAIL_BYTES = 8192  # at most this much of a segment's newest batches in memory: 80 MB for 10,000 partitions written


class LogAppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    headers: list[BatchHeader]  # as stored (offsets and epochs given)


def segment_name(base_offset: int, suffix: str = SEGMENT_SUFFIX) -> str:
    return f"{base_offset:020d}{suffix}"


def _make_dir(directory: Path) -> None:
    """Make a log's directory (and its parents)."""
    try:
        os.mkdir(directory)
    except FileExistsError:
        pass
    except FileNotFoundError:  # a log directory not made yet
        directory.parent.mkdir(parents=True, exist_ok=True)
        _make_dir(directory)


def read_recovery_point(directory: Path) -> int:
    """The offset a log's directory says it was flushed up to; 0 (nothing flushed, as Kafka takes a log
    missing from its checkpoint) when the file is absent or unreadable."""
    try:
        entries = read_checkpoint(Path(directory) / RECOVERY_POINT_CHECKPOINT, (int,))
    except KafkaStorageException as e:
        log.warning("%s: %s; taking nothing as flushed", directory, e)
        return 0
    return entries[0][0] if entries else 0


class Segment:
    """One .log file and its sparse index (in memory, mirrored in the .index file)."""

    def __init__(self, directory: Path, base_offset: int):
        self.base_offset = self.next_offset = base_offset
        self.path = directory / segment_name(base_offset)
        self.index_path = directory / segment_name(base_offset, INDEX_SUFFIX)
        self.size = 0
        self.max_timestamp = -1
        self.index_offsets = array("q")  # a batch's last offset ...
        self.index_positions = array("q")  # ... and where that batch starts
        self.unindexed_bytes = 0  # appended since the last index entry
        self._fd: int | None = None  # one descriptor per segment at most, opened when first used
        self._active = False  # opened for appends
        # The newest batches as written: the bytes from file position tail_start to the end, and per batch
        # its base and last offsets and its position in the file (only what this process appended)
        self.tail, self.tail_start = bytearray(), 0
        self.tail_bases, self.tail_lasts, self.tail_positions = array("q"), array("q"), array("q")

    def _descriptor(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND if self._active else os.O_RDONLY)
        return self._fd

    def pread(self, position: int, length: int) -> bytes:
        return os.pread(self._descriptor(), length, position)

    def open_for_append(self) -> None:
        """The active segment: its files exist from now, and one descriptor for appends and reads alike
        is opened when first used. The index is appended by opening it each time (an entry per 4 KB):
        a broker holds at most one descriptor per partition written or read, none for an idle one
        (10,000 partitions with three each ran past the 20,000 descriptors allowed here; 100,000 idle
        partitions on three brokers would have needed 100,000)."""
        self.close()
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))
        self.index_path.touch()
        self._active = True

    def write(self, data, index_entries: bytes, headers: list[BatchHeader]) -> None:
        """Append `data`, exactly the batches of `headers`, which `appended` has accounted for."""
        os.write(self._descriptor(), data)
        if index_entries:
            with open(self.index_path, "ab") as f:
                f.write(index_entries)
        self._keep_tail(data, headers)

    def _keep_tail(self, data, headers: list[BatchHeader]) -> None:
        tail = self.tail
        position = self.size - len(data)  # where the batches start: `appended` has moved the end past them
        if position != self.tail_start + len(tail) or len(data) > TAIL_BYTES // 2:  # not a continuation, or big
            del tail[:], self.tail_bases[:], self.tail_lasts[:], self.tail_positions[:]
            self.tail_start = position
            if len(data) > TAIL_BYTES // 2:
                self.tail_start += len(data)
                return
        tail += data
        for h in headers:
            self.tail_bases.append(h.base_offset)
            self.tail_lasts.append(h.last_offset)
            self.tail_positions.append(position)
            position += h.size
        if len(tail) > TAIL_BYTES:  # the oldest batches go, down to half (not a few bytes at every append)
            drop = bisect.bisect_left(self.tail_positions, self.tail_start + len(tail) - TAIL_BYTES // 2)
            cut = self.tail_positions[drop] - self.tail_start
            del tail[:cut], self.tail_bases[:drop], self.tail_lasts[:drop], self.tail_positions[:drop]
            self.tail_start += cut

    def read_tail(self, offset: int, max_bytes: int, max_offset: int | None) -> bytes | None:
        """`Log.read` from the batches in memory; None when the batch holding `offset` is not among them."""
        bases = self.tail_bases
        if not bases or offset < bases[0] or offset >= self.next_offset:
            return None
        lasts, positions, n = self.tail_lasts, self.tail_positions, len(bases)
        first = bisect.bisect_left(lasts, offset)
        stop = n if max_offset is None else bisect.bisect_left(lasts, max_offset, first)
        if stop <= first:
            return b""
        start = positions[first]
        limit = start + max_bytes
        end = self.size if stop == n else positions[stop]
        if end > limit:  # the whole batches within max_bytes, but always the first (KIP-74)
            fit = bisect.bisect_right(positions, limit, first + 1, stop)
            end = positions[fit - 1] if fit - 1 > first else positions[first + 1] if first + 1 < n else self.size
        return bytes(self.tail[start - self.tail_start:end - self.tail_start])

    def appended(self, header: BatchHeader, position: int, index_interval_bytes: int) -> bytes:
        """Account for a batch written at `position`; the .index entry to write, if one is due."""
        entry = b""
        if self.unindexed_bytes > index_interval_bytes:
            self.index_offsets.append(header.last_offset)
            self.index_positions.append(position)
            self.unindexed_bytes = 0
            entry = _INDEX_ENTRY.pack(header.last_offset - self.base_offset, position)
        self.unindexed_bytes += header.size
        self.size = position + header.size
        self.next_offset = header.last_offset + 1
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        return entry

    def headers(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from byte `start`, reading a chunk at a time."""
        stop = self.size if stop is None else stop
        while start < stop:
            chunk = self.pread(start, min(READ_CHUNK_BYTES, stop - start))
            last = start
            for pos, header in _headers_in(chunk):
                last = start + pos + header.size
                yield start + pos, header
            if last == start:  # a batch larger than a chunk: read its header alone
                header = batches.read_header(self.pread(start, BATCH_OVERHEAD))
                yield start, header
                last = start + header.size
            start = last

    def position_of(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Where the batch holding `offset` starts (the first whose last offset reaches it)."""
        i = bisect.bisect_right(self.index_offsets, offset)
        start = self.index_positions[i - 1] if i else 0
        for pos, header in self.headers(start):
            if header.last_offset >= offset:
                return pos, header
        return None

    def flush(self) -> None:
        """fsync the file (Kafka's FileRecords.flush), with the descriptor held or one opened for it."""
        if self._fd is not None:
            os.fsync(self._fd)
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        self._active = False
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _headers_in(buf: bytes) -> Iterator[tuple[int, BatchHeader]]:
    """Batch headers in a chunk, the last batch possibly cut by the chunk's end."""
    pos, end = 0, len(buf)
    while end - pos >= BATCH_OVERHEAD:
        header = batches.read_header(buf, pos)
        if header.batch_length < BATCH_OVERHEAD - batches.LOG_OVERHEAD:
            return
        yield pos, header
        pos += header.size


class Log:
    def __init__(self, directory: Path, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 index_interval_bytes: int = INDEX_INTERVAL_BYTES):
        self.dir = Path(directory)
        self.on_disk = self.dir.is_dir()  # a new log's directory and files are made at its first write
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.segments: list[Segment] = []
        self.recovery: str | None = None
        checkpoint = self.dir / "leader-epoch-checkpoint"
        if not self.on_disk:  # nothing to read or recover, and nothing made yet
            self.leader_epochs = LeaderEpochCache(checkpoint, read=False)
            self.segments.append(Segment(self.dir, 0))
            self.recovery_point = 0
        else:
            self.leader_epochs = LeaderEpochCache(checkpoint)
            for epoch, offset in self._recover():  # what the checkpoint may have missed
                self.leader_epochs.assign(epoch, offset)
            self.leader_epochs.truncate_from_end(self.log_end_offset)
            self.leader_epochs.truncate_from_start(self.log_start_offset)
            # Kafka after an unclean start: the checkpointed recovery point, never past the log end
            self.recovery_point = max(self.log_start_offset, min(read_recovery_point(self.dir), self.log_end_offset))
        self._open_active()

    # -- offsets -------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- writes --------------------------------------------------------------

    def append_as_leader(self, batch: bytes, leader_epoch: int) -> LogAppendInfo:
        """Append one validated batch at the log end, giving it its offsets and `leader_epoch`."""
        first = self.log_end_offset
        header = batches.read_header(batch)._replace(base_offset=first, partition_leader_epoch=leader_epoch)
        self.leader_epochs.assign(leader_epoch, first)
        self._write(batches.assign_offsets(batch, first, leader_epoch), [header])
        return LogAppendInfo(first, header.last_offset, header.max_timestamp, [header])

    def append_as_follower(self, records) -> LogAppendInfo | None:
        """Append a leader's batches as they are (with their offsets); they must continue the log."""
        headers = batches.validate_fetched(records)
        if not headers:
            return None
        if headers[0].base_offset != self.log_end_offset:
            raise KrayError(f"{self.dir.name}: append at offset {headers[0].base_offset}, log end is "
                            f"{self.log_end_offset}")
        for h in headers:
            if h.partition_leader_epoch > self.leader_epochs.latest_epoch:
                self.leader_epochs.assign(h.partition_leader_epoch, h.base_offset)
        self._write(bytes(records[:sum(h.size for h in headers)]), headers)
        return LogAppendInfo(headers[0].base_offset, headers[-1].last_offset,
                             max(h.max_timestamp for h in headers), headers)

    def _write(self, data, headers: list[BatchHeader]) -> None:
        if not self.on_disk:
            self._make()
        segment = self.segments[-1]
        if segment.size and segment.size + len(data) > self.segment_bytes:
            segment = self._roll()
        position, entries = segment.size, []
        for h in headers:
            entries.append(segment.appended(h, position, self.index_interval_bytes))
            position += h.size
        segment.write(data, b"".join(entries), headers)

    def _roll(self) -> Segment:
        self.flush()  # Kafka flushes a segment when it rolls (in the background) and checkpoints past it
        self._close_active()
        self.segments.append(Segment(self.dir, self.log_end_offset))
        self._open_active()
        return self.segments[-1]

    def truncate_to(self, offset: int) -> bool:
        """Drop every batch whose last offset is at or past `offset` (a follower discarding what its
        leader never had): the log then ends where the first dropped batch started, which is `offset`
        itself when it falls between batches, as truncation points do. Whether anything was dropped.
        At or past the log end the epoch cache is truncated all the same, as Kafka's Log.truncateTo
        does: a replica that became leader, assigned its epoch's start offset and appended nothing
        before another was elected holds an epoch entry at its log end that the new leader never had,
        and its fetches naming that epoch would be answered "diverged" for good."""
        if offset >= self.log_end_offset:
            self.leader_epochs.truncate_from_end(self.log_end_offset)
            return False
        offset = max(offset, self.log_start_offset)
        self._close_active()
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self._delete_segment(self.segments.pop())
        segment = self.segments[-1]
        found = segment.position_of(offset)
        if found is not None:
            keep_bytes = found[0]
            kept = [(pos, h) for pos, h in segment.headers(0, keep_bytes)]
            os.truncate(segment.path, keep_bytes)
            fresh = Segment(self.dir, segment.base_offset)
            segment.close()
            self.segments[-1] = fresh
            self._rewrite_index(fresh, kept)
        self._open_active()
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        if self.recovery_point > self.log_end_offset:
            self._checkpoint_recovery_point(self.log_end_offset)
        log.info("Truncated log %s to offset %d", self.dir.name, self.log_end_offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Kafka's truncateFullyAndStartAt: an empty log from `offset` (a follower whose leader's log
        starts past all of this one)."""
        self._close_active()
        for segment in self.segments:
            self._delete_segment(segment)
        self.segments = [Segment(self.dir, offset)]
        self.leader_epochs.entries, self.leader_epochs.dirty = [], True
        self._make()  # made even with nothing in it: a restart finds the log starting at `offset`
        self._checkpoint_recovery_point(offset)  # nothing below it is left to flush

    # -- retention -----------------------------------------------------------

    def delete_old_segments(self, now_ms: int, retention_ms: int, retention_bytes: int, high_watermark: int) -> int:
        """Kafka's retention: the oldest segments whose newest batch is older than retention.ms, then as
        many more as keep the log over retention.bytes (-1 turns either off); only segments wholly
        below the high watermark, never the active one. How many went."""
        candidates = [s for s in self.segments[:-1] if s.next_offset <= high_watermark]
        doomed = 0
        if retention_ms >= 0:
            while doomed < len(candidates) and candidates[doomed].max_timestamp < now_ms - retention_ms:
                doomed += 1
        if retention_bytes >= 0:
            excess = self.size_in_bytes - retention_bytes - sum(s.size for s in candidates[:doomed])
            while doomed < len(candidates) and excess - candidates[doomed].size >= 0:
                excess -= candidates[doomed].size
                doomed += 1
        if doomed:
            self.delete_segments_below(candidates[doomed - 1].next_offset)
        return doomed

    def delete_segments_below(self, offset: int) -> int:
        """Drop the segments that lie wholly below `offset` (retention here, or the leader's log start
        that a follower follows); the log start offset moves to the first kept segment."""
        doomed = 0
        while doomed < len(self.segments) - 1 and self.segments[doomed].next_offset <= offset:
            doomed += 1
        for segment in self.segments[:doomed]:
            self._delete_segment(segment)
        del self.segments[:doomed]
        if doomed:
            self.leader_epochs.truncate_from_start(self.log_start_offset)
            log.info("Deleted %d segments of log %s: it starts at offset %d", doomed, self.dir.name,
                     self.log_start_offset)
        return doomed

    # -- reads ---------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole batches from the one holding `offset`, within `max_bytes` but always the first (KIP-74),
        and only batches wholly below `max_offset` when given (consumers read below the high
        watermark). Empty at the log end."""
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRangeException(f"offset {offset} is outside {self.dir.name}'s log "
                                            f"[{self.log_start_offset}, {self.log_end_offset}]")
        i = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
        while i < len(self.segments) and offset >= self.segments[i].next_offset:
            i += 1
        if i >= len(self.segments):
            return b""
        segment = self.segments[i]
        if i == len(self.segments) - 1 and (kept := segment.read_tail(offset, max_bytes, max_offset)) is not None:
            return kept
        found = segment.position_of(offset)
        if found is None:
            return b""
        start, first = found
        if max_offset is not None and first.last_offset >= max_offset:
            return b""
        buf = segment.pread(start, max(first.size, min(max_bytes, segment.size - start)))
        end = 0
        for pos, header in _headers_in(buf):
            if pos + header.size > len(buf) or max_offset is not None and header.last_offset >= max_offset:
                break
            end = pos + header.size
        return buf[:end]

    def batch_at(self, offset: int) -> BatchHeader | None:
        """The header of the batch holding `offset`, found through the index; None outside the log."""
        if not self.log_start_offset <= offset < self.log_end_offset:
            return None
        buf = self.read(offset, 1)
        return batches.read_header(buf) if len(buf) >= BATCH_OVERHEAD else None

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
        """The headers of the batches holding offsets in [start, end), a chunk of the file at a time."""
        end = self.log_end_offset if end is None else end
        for segment in self.segments:
            if segment.next_offset <= start or segment.base_offset >= end:
                continue
            for _, header in segment.headers():
                if header.last_offset >= start and header.base_offset < end:
                    yield header

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by time: (offset, timestamp) of the first record at or after `timestamp`."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            for pos, header in segment.headers():
                if header.max_timestamp >= timestamp:
                    for record in batches.decode_records(segment.pread(pos, header.size)):
                        if record.timestamp >= timestamp:
                            return record.offset, record.timestamp
        return None

    # -- life cycle ----------------------------------------------------------

    def flush(self) -> None:
        """Kafka's flush: fsync the segments holding offsets from the recovery point on, which then
        moves to the log end and is checkpointed. (Kafka also flushes every log at a clean shutdown;
        closing here does not: a broker's shutdown does not close its logs.)"""
        if self.recovery_point >= self.log_end_offset:
            return
        for segment in self.segments:
            if segment.next_offset > self.recovery_point and segment.size:
                segment.flush()
        self._checkpoint_recovery_point(self.log_end_offset)

    def _checkpoint_recovery_point(self, offset: int) -> None:
        self.recovery_point = offset
        write_checkpoint(self.dir / RECOVERY_POINT_CHECKPOINT, [(offset,)], fsync=False)

    def close(self) -> None:
        self._close_active()
        for segment in self.segments:
            segment.close()
        self.leader_epochs.flush(self.log_end_offset)

    def delete(self) -> None:
        """Remove the log from disk (StopReplica with delete)."""
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _make(self) -> None:
        """The log's directory and active segment, made when first needed: Kafka makes them as the replica
        is created, and a broker given 75,000 new partitions spent most of a minute making directories and
        files that no record was written to (1-2 ms each on this VM's ext4 while three brokers did it)."""
        _make_dir(self.dir)
        self.on_disk = True
        self._open_active()

    def _open_active(self) -> None:
        if self.on_disk:
            self.segments[-1].open_for_append()

    def _close_active(self) -> None:
        if self.segments:
            self.segments[-1].close()

    def _delete_segment(self, segment: Segment) -> None:
        segment.close()
        segment.path.unlink(missing_ok=True)
        segment.index_path.unlink(missing_ok=True)

    def _rewrite_index(self, segment: Segment, kept: list[tuple[int, BatchHeader]]) -> None:
        entries = [segment.appended(h, pos, self.index_interval_bytes) for pos, h in kept]
        segment.index_path.write_bytes(b"".join(entries))

    def _recover(self) -> list[tuple[int, int]]:
        """Check every segment, cut at the first bad batch; returns where each leader epoch starts."""
        epochs: list[tuple[int, int]] = []
        paths = sorted(self.dir.glob(f"*{SEGMENT_SUFFIX}"))
        expected = int(paths[0].stem) if paths else 0
        for i, path in enumerate(paths):
            base = int(path.stem)
            if base != expected:
                self._cut(paths[i:], f"segment {path.name} starts at {base}, expected {expected}")
                break
            segment = Segment(self.dir, base)
            self.segments.append(segment)
            kept, error = self._check_segment(segment, path.stat().st_size)
            for _, h in kept:
                if not epochs or h.partition_leader_epoch > epochs[-1][0]:
                    epochs.append((h.partition_leader_epoch, h.base_offset))
            self._rewrite_index(segment, kept)
            expected = segment.next_offset
            if error is not None:
                os.truncate(path, segment.size)
                self._cut(paths[i + 1:], f"{path.name}: {error}")
                break
        if not self.segments:
            self.segments.append(Segment(self.dir, expected))
            self.segments[0].path.touch()
        return epochs

    def _check_segment(self, segment: Segment, file_size: int) -> tuple[list[tuple[int, BatchHeader]], str | None]:
        """The good batches of a segment file, and why reading stopped early, if it did."""
        kept: list[tuple[int, BatchHeader]] = []
        position, expected = 0, segment.base_offset
        while position < file_size:
            chunk = segment.pread(position, max(READ_CHUNK_BYTES, BATCH_OVERHEAD))
            if len(chunk) < BATCH_OVERHEAD:
                return kept, f"truncated batch header at byte {position}"
            header = batches.read_header(chunk)
            if header.batch_length < BATCH_OVERHEAD - batches.LOG_OVERHEAD or position + header.size > file_size:
                return kept, f"batch at byte {position} claims {header.batch_length} bytes"
            if header.size > len(chunk):
                chunk = segment.pread(position, header.size)
            for pos, h in batches.iter_batches(chunk):
                try:
                    batches.check(chunk, pos, h)
                except KrayError as e:
                    return kept, str(e)
                if h.base_offset != expected:
                    return kept, f"batch at byte {position + pos} has offset {h.base_offset}, expected {expected}"
                kept.append((position + pos, h))
                segment.size, segment.next_offset = position + pos + h.size, h.last_offset + 1
                expected = h.last_offset + 1
            position = segment.size
        return kept, None

    def _cut(self, later: list[Path], reason: str) -> None:
        for path in later:
            path.unlink()
            path.with_suffix(INDEX_SUFFIX).unlink(missing_ok=True)
        self.recovery = f"truncated at offset {self.segments[-1].next_offset if self.segments else 0}: {reason}"
        log.warning("Recovered log %s: %s", self.dir.name, self.recovery)
