"""What a replica knows of idempotent producers (Kafka's ProducerStateManager): each producer's
last runs of appended sequences, so that a retried batch gets its original offsets back and a gap
in sequences is refused, also on a follower turned leader.

Appends keep it current; opening a log reads it all. A truncation (a follower discarding what its
leader never had) replays the log from the latest snapshot at or below the cut: Kafka writes
snapshot files at segment rolls; here one is kept in memory every `snapshot_interval` offsets,
so that a truncation reads a few thousand records instead of the whole log."""
from __future__ import annotations

from actors.broker.log import READ_CHUNK_BYTES, Log

Run = tuple[int, int, int]  # first sequence, last sequence, first offset: records appended back to back
RUNS_KEPT = 5  # Kafka keeps the last five batches of each producer
SNAPSHOT_INTERVAL = 10_000
SNAPSHOTS_KEPT = 4


def add_run(runs: list[Run], first_sequence: int, last_sequence: int, first_offset: int) -> list[Run]:
    """Extend the last run when the new records follow it in both sequence and offset (a new list:
    snapshots share the old one)."""
    if runs and runs[-1][1] + 1 == first_sequence and runs[-1][2] + runs[-1][1] - runs[-1][0] + 1 == first_offset:
        return runs[:-1] + [(runs[-1][0], last_sequence, runs[-1][2])]
    return (runs + [(first_sequence, last_sequence, first_offset)])[-RUNS_KEPT:]


def find_run(runs: list[Run], first_sequence: int, last_sequence: int) -> tuple[int, int] | None:
    """The offsets of sequences already appended (a retried batch), or None."""
    for run_first, run_last, offset in runs:
        if run_first <= first_sequence and last_sequence <= run_last:
            return offset + first_sequence - run_first, offset + last_sequence - run_first
    return None


class ProducerState:
    def __init__(self, log: Log, snapshot_interval: int = SNAPSHOT_INTERVAL):
        self.snapshot_interval = snapshot_interval
        self.runs: dict[int, list[Run]] = {}  # producer id -> its last runs
        self.snapshots: list[tuple[int, dict[int, list[Run]]]] = []  # (offset, the runs of the records below it)
        self._next_snapshot = log.log_start_offset + snapshot_interval
        self.replayed = self._replay(log, log.log_start_offset, log.log_end_offset)

    def get(self, producer_id: int) -> list[Run]:
        return self.runs.get(producer_id, []) if producer_id >= 0 else []

    def append(self, producer_id: int, first_sequence: int, last_sequence: int, first_offset: int) -> None:
        """Records appended at `first_offset` (producer id -1: not idempotent, nothing to remember)."""
        if first_offset >= self._next_snapshot:
            self.snapshots = (self.snapshots + [(first_offset, dict(self.runs))])[-SNAPSHOTS_KEPT:]
            self._next_snapshot = first_offset + self.snapshot_interval
        if producer_id >= 0:
            self.runs[producer_id] = add_run(self.runs.get(producer_id, []), first_sequence, last_sequence,
                                             first_offset)

    def truncate(self, log: Log, offset: int) -> None:
        """The log was cut at `offset`: back to the latest snapshot at or below it, then replay."""
        self.snapshots = [s for s in self.snapshots if s[0] <= offset]
        start, runs = self.snapshots[-1] if self.snapshots else (log.log_start_offset, {})
        self.runs = dict(runs)
        self._next_snapshot = start + self.snapshot_interval
        self.replayed = self._replay(log, start, offset)

    def _replay(self, log: Log, start: int, end: int) -> int:
        """Apply the log's records in [start, end); how many were read."""
        offset = start
        while offset < end:
            chunk = log.read(offset, READ_CHUNK_BYTES, max_offset=end)
            for r in chunk:
                self.append(r.producer_id, r.sequence, r.sequence, r.offset)
            offset += len(chunk)
        return offset - start
