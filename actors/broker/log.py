"""A replica's log on the broker's local disk: segment files of CRC-checked records.

    <log dir>/<topic>-<partition>/00000000000000000000.log   records from offset 0
                                 /00000000000000001234.log   the next segment, from 1234
                                 /leader-epoch-checkpoint

A segment is rolled when it reaches `segment_bytes`. Each segment keeps an
in-memory index of record positions, rebuilt when the log is opened: opening
recovers the log by reading every segment, and truncates at the first entry that
is cut short, fails its CRC or breaks the offset sequence (later segments go too);
`recovery` then says what was cut. Writes reach the operating system at once
(flush, no fsync: Kafka's default leaves durability to replication).
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


@dataclass
class Segment:
    base_offset: int
    path: Path
    positions: array = field(default_factory=lambda: array("q"))  # byte position of each record
    size: int = 0

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.positions)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


class Log:
    def __init__(self, directory: Path, segment_bytes: int = DEFAULT_SEGMENT_BYTES):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.segments: list[Segment] = []
        self.recovery: str | None = None
        self.leader_epochs = LeaderEpochCache(self.dir / "leader-epoch-checkpoint")
        for epoch, offset in self._recover():  # what the checkpoint may have missed
            self.leader_epochs.assign(epoch, offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self._file = open(self.segments[-1].path, "ab")

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
        self._write([records.encode(r, first + i, leader_epoch) for i, r in enumerate(batch)])
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
        self._write([records.encode(r) for r in batch])

    def _write(self, entries: list[bytes]) -> None:
        """Append encoded entries: one write per segment they reach, positions indexed."""
        start = 0
        while start < len(entries):
            segment = self.segments[-1]
            if segment.size >= self.segment_bytes:
                segment = self._roll()
            size, positions, end = segment.size, segment.positions, start
            while end < len(entries) and size < self.segment_bytes:
                positions.append(size)
                size += len(entries[end])
                end += 1
            self._file.write(b"".join(entries[start:end]))
            segment.size = size
            start = end
        self._file.flush()

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or after `offset` (a follower discarding what its leader never had)."""
        if offset >= self.log_end_offset:
            return
        offset = max(offset, self.log_start_offset)
        self._file.close()
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().path.unlink()
        segment = self.segments[-1]
        keep = offset - segment.base_offset
        size = segment.positions[keep] if keep < len(segment.positions) else segment.size
        os.truncate(segment.path, size)
        del segment.positions[keep:]
        segment.size = size
        self._file = open(segment.path, "ab")
        self.leader_epochs.truncate_from_end(offset)
        log.info("Truncated log %s to offset %d", self.dir.name, offset)

    def _roll(self) -> Segment:
        self._file.close()
        segment = Segment(self.log_end_offset, self.dir / segment_name(self.log_end_offset))
        segment.path.touch()
        self.segments.append(segment)
        self._file = open(segment.path, "ab")
        return segment

    # -- reads ---------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> list[Record]:
        """Records from `offset`: those that start within `max_bytes` (always the first one), and only
        below `max_offset` when given (a consumer reads below the high watermark)."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeException(f"offset {offset} is outside {self.dir.name}'s log "
                                        f"[{self.log_start_offset}, {self.log_end_offset}]")
        limit = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        out: list[Record] = []
        budget = max_bytes
        index = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
        while offset < limit and (budget > 0 or not out):
            segment = self.segments[index]
            if offset >= segment.next_offset:
                index += 1
                continue
            first = offset - segment.base_offset
            last = min(limit, segment.next_offset) - segment.base_offset
            start = segment.positions[first]
            stop = max(first + 1, bisect.bisect_left(segment.positions, start + budget, first + 1, last))
            end = segment.positions[stop] if stop < len(segment.positions) else segment.size
            with open(segment.path, "rb") as f:
                f.seek(start)
                got = records.decode(f.read(end - start), offset).records
            if not got:
                raise KrayError(f"{segment.path}: unreadable record at offset {offset}")
            out += got
            offset += len(got)
            budget -= end - start
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
            data = path.read_bytes()
            decoded = records.decode(data, base)
            for r in decoded.records:
                if not epochs or r.leader_epoch > epochs[-1][0]:
                    epochs.append((r.leader_epoch, r.offset))
            segment = Segment(base, path, array("q", decoded.positions), decoded.valid_bytes)
            self.segments.append(segment)
            expected = segment.next_offset
            if decoded.error is not None:
                os.truncate(path, decoded.valid_bytes)
                self._cut(paths[i + 1:], f"{path.name}: {decoded.error}")
                break
        if not self.segments:
            self.segments.append(Segment(expected, self.dir / segment_name(expected)))
            self.segments[0].path.touch()
        return epochs

    def _cut(self, later: list[Path], reason: str) -> None:
        for path in later:
            path.unlink()
        self.recovery = f"truncated at offset {self.segments[-1].next_offset if self.segments else 0}: {reason}"
        log.warning("Recovered log %s: %s", self.dir.name, self.recovery)
