"""A replica's log on the broker's local disk: segment files of CRC-checked records.

    <log dir>/<topic>-<partition>/00000000000000000000.log   records from offset 0
                                 /00000000000000001234.log   the next segment, from 1234
                                 /leader-epoch-checkpoint

A segment is rolled when it reaches `segment_bytes`. Each segment keeps a sparse
in-memory index, as Kafka's `.index` file: one (offset, byte position) entry each
time `index_interval_bytes` have been appended since the last one, so that memory
does not grow with the number of records; a read or a truncation scans forward
from the entry at or below its offset. Opening recovers the log by reading every
segment a chunk at a time, rebuilding the index, and truncates at the first entry
that is cut short, fails its CRC or breaks the offset sequence (later segments go
too); `recovery` then says what was cut. Writes reach the operating system at once
(flush, no fsync: Kafka's default leaves durability to replication).

The newest records (about TAIL_BYTES) are also kept decoded in memory, where Kafka has the page
cache: followers and consumers read just behind the log end, and decoding the file from the index
entry below each read was most of a leader's work in serving fetches.
"""
from __future__ import annotations

import bisect
import logging
import os
import shutil
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from actors.broker import records
from actors.broker.leader_epochs import LeaderEpochCache
from actors.broker.records import Record
from coordination.errors import KrayError, OffsetOutOfRangeException

log = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".log"
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
INDEX_INTERVAL_BYTES = 4096  # Kafka's index.interval.bytes
READ_CHUNK_BYTES = 1 << 20  # reading a whole log through: recovery, producer state
TAIL_BYTES = 2 * INDEX_INTERVAL_BYTES  # the newest records kept decoded (up to twice this between trims)


@dataclass
class Segment:
    base_offset: int
    path: Path
    next_offset: int
    size: int = 0
    index_offsets: array = field(default_factory=lambda: array("q"))  # sparse index: an offset ...
    index_positions: array = field(default_factory=lambda: array("q"))  # ... and where its record starts
    unindexed_bytes: int = 0  # appended since the last index entry

    def appended(self, length: int, index_interval_bytes: int) -> None:
        """One more record of `length` bytes at the end; indexed when enough bytes passed unindexed."""
        if self.unindexed_bytes >= index_interval_bytes:
            self.index_offsets.append(self.next_offset)
            self.index_positions.append(self.size)
            self.unindexed_bytes = 0
        self.unindexed_bytes += length
        self.size += length
        self.next_offset += 1

    def lookup(self, offset: int) -> tuple[int, int, int]:
        """(an offset at or below `offset`, its position, a position the record at `offset` ends at or
        before: the next entry's, or the segment's size): the bytes to scan for it."""
        i = bisect.bisect_right(self.index_offsets, offset)
        floor = (self.index_offsets[i - 1], self.index_positions[i - 1]) if i else (self.base_offset, 0)
        return *floor, self.index_positions[i] if i < len(self.index_positions) else self.size

    def decode(self, start: int, stop: int, expected_offset: int) -> records.Decoded:
        with open(self.path, "rb") as f:
            f.seek(start)
            return records.decode(f.read(stop - start), expected_offset)

    def truncate(self, offset: int) -> None:
        """Keep the records below `offset` (within this segment)."""
        floor, start, stop = self.lookup(offset)
        decoded = self.decode(start, stop, floor)
        if decoded.error is not None:
            raise KrayError(f"{self.path}: cannot truncate at offset {offset}: {decoded.error}")
        size = start + decoded.positions[offset - floor] if offset - floor < len(decoded.positions) else stop
        os.truncate(self.path, size)
        keep = bisect.bisect_left(self.index_offsets, offset)
        del self.index_offsets[keep:], self.index_positions[keep:]
        self.unindexed_bytes = size - (self.index_positions[-1] if keep else 0)
        self.size, self.next_offset = size, offset


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


class Log:
    def __init__(self, directory: Path, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 index_interval_bytes: int = INDEX_INTERVAL_BYTES):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.segments: list[Segment] = []
        self.recovery: str | None = None
        self.leader_epochs = LeaderEpochCache(self.dir / "leader-epoch-checkpoint")
        for epoch, offset in self._recover():  # what the checkpoint may have missed
            self.leader_epochs.assign(epoch, offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self._file = open(self.segments[-1].path, "ab")
        self._tail: list[Record] = []  # the records just below the log end, oldest first
        self._tail_sizes: list[int] = []  # each one's entry size
        self._tail_bytes = 0

    # -- offsets -------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    # -- writes --------------------------------------------------------------

    def append_as_leader(self, batch: list[Record], leader_epoch: int) -> tuple[int, int]:
        """Append records at the log end under `leader_epoch`, giving them their offsets (whatever
        offset and epoch they carried); the offsets of the first and last record."""
        first = self.log_end_offset
        self.leader_epochs.assign(leader_epoch, first)
        self._write([r._replace(offset=first + i, leader_epoch=leader_epoch) for i, r in enumerate(batch)])
        return first, first + len(batch) - 1

    def append(self, batch: list[Record]) -> None:
        """Append records that carry their offsets (a follower copying its leader); they must
        continue the log without a gap."""
        if not batch:
            return
        if batch[0].offset != self.log_end_offset:
            raise KrayError(f"{self.dir.name}: append at offset {batch[0].offset}, log end is {self.log_end_offset}")
        epochs = self.leader_epochs
        for r in batch:
            if r.leader_epoch > epochs.latest_epoch:
                epochs.assign(r.leader_epoch, r.offset)
        self._write(batch)

    def _write(self, batch: list[Record]) -> None:
        """Append records at the log end: one write per segment they reach, indexed as they go, and
        kept in the tail."""
        entries = [records.encode(r) for r in batch]
        start = 0
        while start < len(entries):
            segment = self.segments[-1]
            if segment.size >= self.segment_bytes:
                segment = self._roll()
            end = start
            while end < len(entries) and segment.size < self.segment_bytes:
                segment.appended(len(entries[end]), self.index_interval_bytes)
                end += 1
            self._file.write(b"".join(entries[start:end]))
            start = end
        self._file.flush()
        sizes = [len(e) for e in entries]
        self._tail += batch
        self._tail_sizes += sizes
        self._tail_bytes += sum(sizes)
        if self._tail_bytes > 2 * TAIL_BYTES:  # trimmed now and then, not on every append
            drop = 0
            while self._tail_bytes > TAIL_BYTES:
                self._tail_bytes -= self._tail_sizes[drop]
                drop += 1
            del self._tail[:drop], self._tail_sizes[:drop]

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or after `offset` (a follower discarding what its leader never had)."""
        if offset >= self.log_end_offset:
            return
        offset = max(offset, self.log_start_offset)
        keep = max(0, len(self._tail) - (self.log_end_offset - offset))
        self._tail_bytes -= sum(self._tail_sizes[keep:])
        del self._tail[keep:], self._tail_sizes[keep:]
        self._file.close()
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().path.unlink()
        self.segments[-1].truncate(offset)
        self._file = open(self.segments[-1].path, "ab")
        self.leader_epochs.truncate_from_end(offset)
        log.info("Truncated log %s to offset %d", self.dir.name, offset)

    def _roll(self) -> Segment:
        self._file.close()
        segment = Segment(self.log_end_offset, self.dir / segment_name(self.log_end_offset), self.log_end_offset)
        segment.path.touch()
        self.segments.append(segment)
        self._file = open(segment.path, "ab")
        return segment

    # -- reads ---------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> list[Record]:
        """Records from `offset`: whole records within `max_bytes` (always the first one, as Kafka's
        KIP-74), and only below `max_offset` when given (a consumer reads below the high watermark)."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeException(f"offset {offset} is outside {self.dir.name}'s log "
                                        f"[{self.log_start_offset}, {self.log_end_offset}]")
        limit = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        out: list[Record] = []
        budget = max_bytes
        first_in_tail = offset - (self.log_end_offset - len(self._tail))
        if first_in_tail >= 0:  # no file to read
            for i in range(first_in_tail, len(self._tail)):
                r, size = self._tail[i], self._tail_sizes[i]
                if r.offset >= limit or out and size > budget:
                    break
                out.append(r)
                budget -= size
            return out
        index = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
        while offset < limit and (budget > 0 or not out):
            segment = self.segments[index]
            if offset >= segment.next_offset:
                index += 1
                continue
            floor, start, before = segment.lookup(offset)  # the record at `offset` ends by `before`
            stop = min(segment.size, before + max(budget, 0))
            if limit < segment.next_offset:  # records below the limit end by where the record at it may start
                stop = min(stop, max(before, segment.lookup(limit)[2]))
            decoded = segment.decode(start, stop, floor)
            skip = offset - floor
            if len(decoded.records) <= skip:
                raise KrayError(f"{segment.path}: unreadable record at offset {offset}")
            ends = decoded.ends[skip:]
            first = decoded.positions[skip]
            got = [r for r, end in zip(decoded.records[skip:], ends)
                   if r.offset < limit and (end - first <= budget or r.offset == offset and not out)]
            if not got:  # the next record does not fit
                break
            out += got
            offset += len(got)
            budget -= ends[len(got) - 1] - first
            if offset < min(limit, segment.next_offset):  # the budget ended inside this segment
                break
        return out

    # -- life cycle ----------------------------------------------------------

    def close(self) -> None:
        self._file.close()
        self.leader_epochs.flush()

    def delete(self) -> None:
        """Remove the log from disk (StopReplica with delete)."""
        self._file.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _recover(self) -> list[tuple[int, int]]:
        """Read every segment, cut at the first bad entry; returns where each leader epoch starts."""
        epochs: list[tuple[int, int]] = []
        paths = sorted(self.dir.glob(f"*{SEGMENT_SUFFIX}"))
        expected = int(paths[0].stem) if paths else 0
        for i, path in enumerate(paths):
            base = int(path.stem)
            if base != expected:
                self._cut(paths[i:], f"segment {path.name} starts at {base}, expected {expected}")
                break
            segment = Segment(base, path, base)
            self.segments.append(segment)
            error = self._reindex(segment, epochs)
            expected = segment.next_offset
            if error is not None:
                os.truncate(path, segment.size)
                self._cut(paths[i + 1:], f"{path.name}: {error}")
                break
        if not self.segments:
            self.segments.append(Segment(expected, self.dir / segment_name(expected), expected))
            self.segments[0].path.touch()
        return epochs

    def _reindex(self, segment: Segment, epochs: list[tuple[int, int]]) -> str | None:
        """Index a segment's good entries a chunk at a time (an entry cut by a chunk's end is read
        again with the next), noting where leader epochs start; why it stopped early, if it did."""
        with open(segment.path, "rb") as f:
            file_size, pending = os.fstat(f.fileno()).st_size, b""
            while True:
                chunk = f.read(READ_CHUNK_BYTES)
                buffer = pending + chunk
                decoded = records.decode(buffer, segment.next_offset)
                for r, start, end in zip(decoded.records, decoded.positions, decoded.ends):
                    if not epochs or r.leader_epoch > epochs[-1][0]:
                        epochs.append((r.leader_epoch, r.offset))
                    segment.appended(end - start, self.index_interval_bytes)
                pending = buffer[decoded.valid_bytes:]
                if decoded.error is None and not chunk:
                    return None
                claimed = records.claimed_bytes(pending) if decoded.cut else None
                if decoded.error is not None and not (decoded.cut and chunk) \
                        or claimed is not None and segment.size + claimed > file_size:  # a corrupted length
                    return decoded.error

    def _cut(self, later: list[Path], reason: str) -> None:
        for path in later:
            path.unlink()
        self.recovery = f"truncated at offset {self.segments[-1].next_offset if self.segments else 0}: {reason}"
        log.warning("Recovered log %s: %s", self.dir.name, self.recovery)
