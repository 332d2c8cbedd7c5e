"""A broker's log directories (Kafka's log.dirs, with KIP-112's failure handling): where each replica's
log lives, which directories are offline, and the channel that reports a directory's failure.

    <log dir 0>/<topic>-<partition>/...       each replica's log in one directory, chosen when it is
    <log dir 1>/<topic>-<partition>/...       created: the live directory with the fewest logs (Kafka's
                                              LogManager.nextLogDirs), found again there at the next start
    <log dir i>/replication-offset-checkpoint the high watermarks of that directory's replicas

How it fails: an I/O error (OSError) on a replica's log or on a directory's checkpoint is reported to
the `LogDirFailureChannel` with the directory; the first report marks the directory offline, once,
and hands it to the broker (`on_offline`), which stops serving every replica in it: they answer
KAFKA_STORAGE_ERROR to clients, followers and the controller, and the controller hears of it through
/log_dir_event_notification. The broker halts when no directory is left (Kafka's LogManager does). A
directory that cannot be created or listed at start is offline from the start; a replica that is not
found in a live directory while some directory is offline is not created elsewhere unless the
controller says it is new (Kafka's isNew): its log may be on the offline one.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Callable

from actors.broker.errors import KafkaStorageException
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)


def log_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def parse_log_dir_name(name: str) -> TopicPartition | None:
    """The replica a directory under a log dir holds (`<topic>-<partition>`), or None for anything else."""
    topic, _, partition = name.rpartition("-")
    return TopicPartition(topic, int(partition)) if topic and partition.isdigit() else None


def replicas_in(log_dirs: Iterable[Path]) -> list[TopicPartition]:
    """The replicas whose logs the log dirs hold (an unreadable dir holds none)."""
    found: list[TopicPartition] = []
    for d in log_dirs:
        with contextlib.suppress(OSError):
            found += [tp for e in d.iterdir() if e.is_dir() and (tp := parse_log_dir_name(e.name))]
    return found


def next_log_dir(live: list[Path], counts: Mapping[Path, int]) -> Path:
    """Kafka's nextLogDirs: the live directory holding the fewest logs (the first in log.dirs' order
    among equals). `counts`: how many logs each directory holds."""
    return min(live, key=lambda d: counts.get(d, 0))


class LogDirFailureChannel:
    """Kafka's LogDirFailureChannel: any thread reports an I/O error with its directory; the directory
    is marked offline and handed to `on_offline` once, at its first report."""

    def __init__(self, on_offline: Callable[[Path], None] | None = None):
        self.on_offline = on_offline
        self._offline: set[Path] = set()
        self._lock = threading.Lock()

    def has_offline_log_dir(self, log_dir: Path) -> bool:
        return log_dir in self._offline

    def maybe_add_offline_log_dir(self, log_dir: Path, msg: str, error: OSError) -> None:
        log.error("%s: %s: %s", msg, type(error).__name__, error)
        with self._lock:
            if log_dir in self._offline:
                return
            self._offline.add(log_dir)
        if self.on_offline is not None:
            self.on_offline(log_dir)


class LogDirs:
    """The directories and the replicas placed in them (the part of Kafka's LogManager that knows
    directories). No log is opened here; the ReplicaManager opens them."""

    def __init__(self, dirs: list[Path]):
        if not dirs:
            raise ValueError("a broker needs at least one log directory")
        self.dirs = [Path(d) for d in dirs]
        self.offline: set[Path] = set()
        # the logs found at start (and the empty replicas a checkpoint lists: place_listed) or created since
        self.placed: dict[TopicPartition, Path] = {}
        for d in self.dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
                found = [(tp, d) for e in d.iterdir() if (tp := parse_log_dir_name(e.name)) and e.is_dir()]
            except OSError as e:
                log.error("Failed to create or validate data directory %s: %s: %s", d, type(e).__name__, e)
                self.offline.add(d)
                continue
            self.placed.update(found)
        # logs per directory, kept as logs come and go: counted afresh at each new log, a broker made
        # 75,000 new partitions in minutes (N^2 hashes of paths)
        self.counts: Counter[Path] = Counter(self.placed.values())
        if not self.live:
            raise KafkaStorageException(f"Shutdown broker because all log dirs in {', '.join(map(str, self.dirs))} "
                                        "have failed")

    @property
    def live(self) -> list[Path]:
        return [d for d in self.dirs if d not in self.offline]

    def place_listed(self, log_dir: Path, partitions: Iterable[TopicPartition]) -> None:
        """The replicas a directory's high-watermark checkpoint lists with no log found anywhere: placed in
        it. A log is made on disk at its first record (log.py), so an empty replica is known to be in that
        directory only from there, as Kafka knows it from its directory."""
        for tp in partitions:
            if tp not in self.placed:
                self.placed[tp] = log_dir
                self.counts[log_dir] += 1

    def dir_of(self, tp: TopicPartition) -> Path | None:
        return self.placed.get(tp)

    def assign(self, tp: TopicPartition, is_new: bool) -> Path:
        """The directory of tp's log: where it is, or for a log to create, the live directory with the
        fewest. KafkaStorageException when its directory is offline, or when it is not found while
        some directory is offline and the controller did not say it is new (Kafka's getOrCreateLog)."""
        existing = self.placed.get(tp)
        if existing is not None:
            if existing in self.offline:
                raise KafkaStorageException(f"Partition {tp} is in an offline log directory {existing}")
            return existing
        if self.offline and not is_new:
            raise KafkaStorageException(f"Can not create log for {tp} because log directories "
                                        f"{','.join(map(str, sorted(self.offline)))} are offline")
        chosen = next_log_dir(self.live, self.counts)
        self.placed[tp] = chosen
        self.counts[chosen] += 1
        return chosen

    def forget(self, tp: TopicPartition) -> None:
        """tp's log was deleted."""
        if (d := self.placed.pop(tp, None)) is not None:
            self.counts[d] -= 1

    def mark_offline(self, log_dir: Path) -> list[TopicPartition]:
        """The directory failed: the replicas placed in it."""
        self.offline.add(log_dir)
        return sorted(tp for tp, d in self.placed.items() if d == log_dir)
