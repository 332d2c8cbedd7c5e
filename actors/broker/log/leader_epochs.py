"""LeaderEpochFileCache: the offset at which each leader epoch started in a replica's log.

A follower that comes back asks the leader where its own latest epoch ended and
truncates there (KIP-101), instead of trusting its high watermark alone.

Changes are kept in memory and written to the checkpoint by `flush` (the broker does
it periodically and on shutdown; not fsync'ed, see checkpoints.py): one
fsync'ed file per partition per LeaderAndIsr made a 10,000-partition election take seconds. A log rebuilds what a lost checkpoint
missed from its records, which carry their leader epoch. A checkpoint whose every epoch starts at or past the
log's end is not written unless it replaces an older file: loading the log forgets such epochs
(Kafka's truncateFromEnd), so for an empty log it would be a file written for nothing, and at 100,000
idle partitions each creation and each election's epoch bump wrote 100,000 of them a broker (about 1 ms
each on this VM's disk, on the broker's event loop: a fifth of its busy time after a broker failure).
"""
from __future__ import annotations

from pathlib import Path

from actors.broker.log.checkpoints import read_checkpoint, write_checkpoint

UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, path: Path | None = None, read: bool = True):
        """`read`: load the checkpoint at `path` (a new log has none to read)."""
        self.path = path
        self.entries: list[tuple[int, int]] = read_checkpoint(path, (int, int)) if path and read else []
        self.dirty = False
        self.on_disk = bool(path and read and path.exists())  # a file that a flush must replace

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (only a newer epoch is recorded)."""
        if epoch > self.latest_epoch:
            self.entries.append((epoch, start_offset))
            self.dirty = True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's endOffsetFor: (the largest known epoch <= `epoch`, the offset where it ended). The
        latest epoch ends at the log end; an older one where the next began; an epoch older than all
        known ones is answered with the first start offset; an unknown newer one with (-1, -1)."""
        if self.entries and epoch == self.latest_epoch:
            return epoch, log_end_offset
        higher = next((i for i, (e, _) in enumerate(self.entries) if e > epoch), None)
        if epoch < 0 or higher is None:
            return -1, UNDEFINED_EPOCH_OFFSET
        return (self.entries[higher - 1][0] if higher > 0 else epoch), self.entries[higher][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after end_offset (the log was truncated there)."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self.dirty = True

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at start_offset (retention): epochs that ended before it go, and the one
        it falls in starts there (Kafka's truncateFromStart)."""
        below = [i for i, (_, o) in enumerate(self.entries) if o <= start_offset]
        if not below:
            return
        keep = below[-1]
        kept = [(self.entries[keep][0], start_offset)] + self.entries[keep + 1:]
        if kept != self.entries:
            self.entries = kept
            self.dirty = True

    def unwritten(self, log_end_offset: int) -> bool:
        """Changed since the last write, and worth writing: an epoch starts below the log end (one the
        next load keeps), or an older file holds what is no longer so."""
        return self.dirty and self.path is not None and (
            self.on_disk or any(offset < log_end_offset for _, offset in self.entries))

    def flush(self, log_end_offset: int) -> None:
        if self.unwritten(log_end_offset):
            write_checkpoint(self.path, self.entries, fsync=False)
            self.dirty, self.on_disk = False, True
