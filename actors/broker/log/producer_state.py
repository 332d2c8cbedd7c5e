"""What a replica knows of idempotent producers (Kafka 2.8's ProducerStateManager, without
transactions): per producer id its epoch and its last five batches, so that a retried batch gets
its original offsets back and a gap in sequences is refused, also on a follower turned leader.

The rules of a leader's append (ProducerAppendInfo.checkProducerEpoch / checkSequence,
Log.analyzeAndValidateProducerState):
- a batch from an older epoch than the producer's: INVALID_PRODUCER_EPOCH;
- a duplicate of one of the cached batches (same epoch, same first and last sequence) is answered
  with that batch's offsets and not appended again;
- a new epoch starts at sequence 0, unless the producer is unknown here (its state was lost with
  retention, or it is new): then any sequence is taken;
- otherwise the batch must follow the last sequence (wrapping at Int32.MaxValue):
  OUT_OF_ORDER_SEQUENCE_NUMBER — except a batch whose whole range lies before the cached batches
  (appended long ago, its metadata no longer kept): DUPLICATE_SEQUENCE_NUMBER, as Kafka 0.11-1.x
  answered it and as clients still take it: already delivered.

Appends keep it current (leader and follower alike, from batch headers only); opening a log reads
every header. A truncation replays from the latest in-memory snapshot at or below the cut (one every
`snapshot_interval` offsets; Kafka writes snapshot files at segment rolls).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from actors.broker.log.batches import BatchHeader
from actors.broker.errors import (
    DuplicateSequenceException,
    InvalidProducerEpochException,
    OutOfOrderSequenceException,
)
from actors.broker.log.log import Log

BATCHES_KEPT = 5  # Kafka's ProducerStateEntry.NumBatchesToRetain
SNAPSHOT_INTERVAL = 10_000
SNAPSHOTS_KEPT = 4
_INT32_MAX = 2 ** 31 - 1


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True)
class ProducerStateEntry:
    epoch: int
    batches: tuple[BatchMetadata, ...] = field(default=())

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


class ProducerStateManager:
    def __init__(self, log: Log, snapshot_interval: int = SNAPSHOT_INTERVAL):
        self.snapshot_interval = snapshot_interval
        self.producers: dict[int, ProducerStateEntry] = {}
        self.snapshots: list[tuple[int, dict[int, ProducerStateEntry]]] = []  # (offset, state below it)
        self._next_snapshot = log.log_start_offset + snapshot_interval
        self.replayed = self._replay(log, log.log_start_offset, log.log_end_offset)

    def check(self, h: BatchHeader) -> BatchMetadata | None:
        """A leader's check of a producer's batch before it is appended: the duplicate's metadata (answer
        with it, append nothing), None to append, or the error."""
        if not h.has_producer_id:
            return None
        entry = self.producers.get(h.producer_id)
        if entry is None:
            return None
        if h.producer_epoch < entry.epoch:
            raise InvalidProducerEpochException(f"producer {h.producer_id}: epoch {h.producer_epoch} is older than "
                                                f"{entry.epoch}")
        if h.producer_epoch > entry.epoch:
            if h.base_sequence != 0:
                raise OutOfOrderSequenceException(f"producer {h.producer_id}: a new epoch {h.producer_epoch} must "
                                                  f"start at sequence 0, not {h.base_sequence}")
            return None
        for b in entry.batches:
            if (b.first_seq, b.last_seq) == (h.base_sequence, h.last_sequence):
                return b
        if not in_sequence(entry.last_seq, h.base_sequence):
            if entry.batches and 0 <= h.base_sequence <= h.last_sequence < entry.batches[0].first_seq:
                raise DuplicateSequenceException(f"producer {h.producer_id}: sequences {h.base_sequence}.."
                                                 f"{h.last_sequence} were appended already")
            raise OutOfOrderSequenceException(f"producer {h.producer_id}: sequence {h.base_sequence} after "
                                              f"{entry.last_seq}")
        return None

    def update(self, h: BatchHeader) -> None:
        """A batch was appended (its header carries its offsets)."""
        if h.base_offset >= self._next_snapshot:
            self.snapshots = (self.snapshots + [(h.base_offset, dict(self.producers))])[-SNAPSHOTS_KEPT:]
            self._next_snapshot = h.base_offset + self.snapshot_interval
        if not h.has_producer_id:
            return
        entry = self.producers.get(h.producer_id)
        kept = entry.batches if entry is not None and entry.epoch == h.producer_epoch else ()
        self.producers[h.producer_id] = ProducerStateEntry(h.producer_epoch, (kept + (BatchMetadata(
            h.base_sequence, h.last_sequence, h.base_offset, h.last_offset),))[-BATCHES_KEPT:])

    def truncate(self, log: Log, offset: int) -> None:
        """The log was cut at `offset`: back to the latest snapshot at or below it, then replay."""
        self.snapshots = [s for s in self.snapshots if s[0] <= offset]
        start, producers = self.snapshots[-1] if self.snapshots else (log.log_start_offset, {})
        self.producers = dict(producers)
        self._next_snapshot = start + self.snapshot_interval
        self.replayed = self._replay(log, start, offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The whole log was deleted and starts again at `offset` (Kafka's truncateFullyAndStartAt): its
        producers and snapshots go with it. Kept, a replica that later leads would hold a producer
        to a sequence from the deleted log and refuse its valid next batch as out of order."""
        self.producers, self.snapshots = {}, []
        self._next_snapshot = offset + self.snapshot_interval
        self.replayed = 0

    def truncate_head(self, log_start_offset: int) -> None:
        """Retention moved the log start: producers whose last batch is gone are forgotten (Kafka's
        truncateHead), and so are snapshots below it."""
        self.producers = {pid: e for pid, e in self.producers.items()
                          if e.batches and e.batches[-1].last_offset >= log_start_offset}
        self.snapshots = [s for s in self.snapshots if s[0] >= log_start_offset]

    def _replay(self, log: Log, start: int, end: int) -> int:
        """Apply the headers of the batches in [start, end); how many batches were read."""
        count = 0
        for header in log.batches(start, end):
            self.update(header)
            count += 1
        return count
