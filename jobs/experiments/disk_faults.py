"""Disk faults on a stopped broker's log directory: what a crash or a bad disk leaves of the tail of
its replicas' logs (actors/broker/log/log.py has the layout).

    corrupt-log-tail     one byte of each log's last batch flipped (its CRC-32C no longer matches)
    truncate-log-tail    each log's last segment cut in the middle of its last batch (a torn write)
    lose-unflushed-tail  every segment cut back to the log's recovery point: what a power loss
                         takes when nothing was flushed since (Kafka flushes a segment when it rolls)

How it fails: only ever on files no process writes. The injector (jobs/experiments/chaos.py) kills the broker,
waits until its process is gone, then plans and applies here; the broker's next incarnation recovers
each log, cutting it at the first bad batch, and fetches the rest again from the leaders. A plan
only reads the files (`plan`); `apply` changes them. A log whose last segments hold no whole batch
has no tail to corrupt or tear and is left alone; a log already at its recovery point loses nothing.
Index and checkpoint files are left as they are (recovery rebuilds the indexes and the epochs).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator, NamedTuple

from actors.broker.log import batches
from actors.broker.log.batches import BATCH_OVERHEAD, BatchHeader
from actors.broker.log.log import SEGMENT_SUFFIX, read_recovery_point
from jobs.hosts.layout import POWER_LOSS_LOGS
from jobs.measures.rundir import FaultKind

DISK_FAULTS = (FaultKind.CORRUPT_LOG_TAIL, FaultKind.TRUNCATE_LOG_TAIL, FaultKind.LOSE_UNFLUSHED_TAIL)


class Damage(NamedTuple):
    """One change to one segment file."""

    segment: Path
    file_bytes: int  # its size before
    at: int  # the size it is cut to, or the byte flipped
    flip: bool  # flip the byte at `at` instead of cutting there
    lost_from: int  # where recovery will cut it: the first batch the damage reaches
    offsets: tuple[int, int]  # [first, end) of the batches from lost_from on

    @property
    def partition(self) -> str:
        return self.segment.parent.name

    @property
    def lost_bytes(self) -> int:
        return self.file_bytes - self.lost_from


def whole_batches(segment: Path) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch of a segment file that its header says is all there; not
    checked otherwise (a garbled length ends the walk wherever it points)."""
    size = segment.stat().st_size
    with open(segment, "rb") as f:
        position = 0
        while size - position >= BATCH_OVERHEAD:
            header = batches.read_header(os.pread(f.fileno(), BATCH_OVERHEAD, position))
            if header.batch_length < BATCH_OVERHEAD - batches.LOG_OVERHEAD or position + header.size > size:
                return
            yield position, header
            position += header.size


def segments(partition_dir: Path) -> list[Path]:
    """A log's segment files, oldest first."""
    return sorted(partition_dir.glob(f"*{SEGMENT_SUFFIX}"))


def partition_dirs(log_dir: Path) -> list[Path]:
    """The replicas' logs in a broker's log directory."""
    return sorted(d for d in Path(log_dir).iterdir() if d.is_dir() and segments(d)) if Path(log_dir).is_dir() else []


def _last_batch(partition_dir: Path) -> tuple[Path, int, BatchHeader] | None:
    """The last whole batch of a log: (its segment, position, header), from the newest segment holding one."""
    for segment in reversed(segments(partition_dir)):
        found = None
        for found in whole_batches(segment):
            pass
        if found is not None:
            return segment, *found
    return None


def corrupt_tail(partition_dir: Path) -> list[Damage]:
    """Flip the last byte of the log's last batch (inside what its CRC-32C covers)."""
    last = _last_batch(partition_dir)
    if last is None:
        return []
    segment, position, header = last
    return [Damage(segment, segment.stat().st_size, position + header.size - 1, True, position,
                   (header.base_offset, header.last_offset + 1))]


def truncate_tail(partition_dir: Path) -> list[Damage]:
    """Cut the log's last batch in half (and whatever follows it in its segment)."""
    last = _last_batch(partition_dir)
    if last is None:
        return []
    segment, position, header = last
    return [Damage(segment, segment.stat().st_size, position + header.size // 2, False, position,
                   (header.base_offset, header.last_offset + 1))]


def unflushed_tail(partition_dir: Path) -> list[Damage]:
    """Cut every segment back to the log's recovery point: to just past its last whole batch below it
    (recovery points fall between batches), to nothing when it starts at or past it."""
    recovery_point = read_recovery_point(partition_dir)
    damages = []
    for segment in segments(partition_dir):
        size, keep, kept_end, lost = segment.stat().st_size, 0, int(segment.stem), []
        for position, header in whole_batches(segment):
            if header.last_offset < recovery_point:
                keep, kept_end = position + header.size, header.last_offset + 1
            else:
                lost.append(header)
        if keep < size:
            offsets = (lost[0].base_offset, lost[-1].last_offset + 1) if lost else (kept_end, kept_end)
            damages.append(Damage(segment, size, keep, False, keep, offsets))
    return damages


PLANS = {FaultKind.CORRUPT_LOG_TAIL: corrupt_tail, FaultKind.TRUNCATE_LOG_TAIL: truncate_tail,
         FaultKind.LOSE_UNFLUSHED_TAIL: unflushed_tail}


def plan(kind: FaultKind, log_dir: Path) -> list[Damage]:
    """What the fault `kind` does to every log in a broker's log directory; reads, changes nothing."""
    return [d for partition_dir in partition_dirs(log_dir) for d in PLANS[kind](partition_dir)]


def apply(damages: list[Damage]) -> None:
    for d in damages:
        if d.flip:
            with open(d.segment, "r+b") as f:
                f.seek(d.at)
                byte = f.read(1)
                f.seek(d.at)
                f.write(bytes([byte[0] ^ 0xFF]))
        else:
            os.truncate(d.segment, d.at)


def describe(damages: list[Damage], examples: int = 3) -> str:
    """One line for a fault record: how many logs, bytes and offsets, and the first few logs."""
    logs = sorted({d.partition for d in damages})
    lost = sum(d.lost_bytes for d in damages)
    offsets = sum(d.offsets[1] - d.offsets[0] for d in damages)
    shown = "; ".join(f"{d.partition} segment {int(d.segment.stem)} {'flipped byte' if d.flip else 'cut at byte'} "
                      f"{d.at} of {d.file_bytes} (offsets {d.offsets[0]}-{d.offsets[1] - 1})"
                      for d in damages[:examples])
    return f"{len(logs)} logs, {lost} bytes, {offsets} offsets" + (f": {shown}" if shown else "") + \
        (" ..." if len(damages) > examples else "")


def after_power_loss(logs: str, log_dirs: list[str]) -> str:
    """What a host's power loss leaves of its broker's logs, made on the host before the broker starts:
    kept whole (its disk wrote everything: an orderly machine), unflushed (every log cut back to its
    recovery point: the page cache is lost, and Kafka does not fsync), or lost (the disk replaced: the
    broker starts empty and fetches everything again). A line for the fault's record."""
    if logs not in POWER_LOSS_LOGS:
        raise ValueError(f"logs after a power loss are one of {', '.join(POWER_LOSS_LOGS)}, not {logs!r}")
    if logs == "kept":
        return "logs kept"
    if logs == "lost":
        for log_dir in log_dirs:
            shutil.rmtree(log_dir, ignore_errors=True)
        return f"log dirs {', '.join(log_dirs)} lost"
    damages = [d for log_dir in log_dirs for d in plan(FaultKind.LOSE_UNFLUSHED_TAIL, Path(log_dir))]
    apply(damages)
    return f"unflushed tails lost: {describe(damages)}"
