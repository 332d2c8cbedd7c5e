"""Recording an experiment: actors send records to one RunRecorder actor, which appends them to
the run directory's files (actors/records.py): JSON lines, or Arrow batches of the per-record kinds.

Brokers, controllers and load generators hold a `RecordSink`: records are buffered and sent
every FLUSH_INTERVAL_S without waiting for an answer, so recording costs the hot paths an
append to a list (the load's actors build their own columns and hand the sink whole batches). An actor that is killed loses at most its last interval of records. A
cluster without a recorder (ClusterConfig.recorder is None) records nothing.
"""
from __future__ import annotations

import logging
import threading
from collections import defaultdict
from pathlib import Path

import ray
from pydantic import BaseModel

from actors.records import RunWriter
from actors.runtime import configure_actor_process

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.2


@ray.remote(num_cpus=0, max_concurrency=4)
class RunRecorder:
    """Appends lines to the files of one run directory (on the node the recorder runs on)."""

    def __init__(self, run_dir: str):
        configure_actor_process()
        self.writer = RunWriter(Path(run_dir))
        self._lock = threading.Lock()
        self.closed = False

    def write(self, name: str, lines: list[str]) -> None:
        with self._lock:
            if not self.closed:  # once the run has ended, what actors say while the cluster stops is not part of it
                self.writer.append(name, lines)

    def write_batches(self, name: str, batches: list) -> None:
        with self._lock:
            if not self.closed:
                self.writer.write_batches(name, batches)

    def close(self) -> None:
        with self._lock:
            self.writer.close()
            self.closed = True


class RecordSink:
    """Buffers records for the named RunRecorder and sends them in the background."""

    def __init__(self, recorder: str | None, namespace: str):
        self.recorder, self.namespace = recorder, namespace
        self._buffer: dict[str, list[str]] = defaultdict(list)
        self._batches: dict[str, list] = defaultdict(list)  # COLUMNAR kinds: Arrow record batches
        self._lock = threading.Lock()
        self._handle = None
        self._stopped = threading.Event()
        if recorder is not None:
            threading.Thread(target=self._run, name="record-sink", daemon=True).start()

    @property
    def enabled(self) -> bool:
        return self.recorder is not None

    def emit(self, name: str, record: BaseModel) -> None:
        if self.recorder is None:
            return
        line = record.model_dump_json()
        with self._lock:
            self._buffer[name].append(line)

    def emit_batch(self, name: str, batch) -> None:
        """An Arrow record batch of a COLUMNAR kind (actors/columns.py)."""
        if self.recorder is None or not batch.num_rows:
            return
        with self._lock:
            self._batches[name].append(batch)

    def flush(self) -> None:
        with self._lock:
            buffer, self._buffer = self._buffer, defaultdict(list)
            batches, self._batches = self._batches, defaultdict(list)
        if not buffer and not batches:
            return
        try:
            if self._handle is None:
                self._handle = ray.get_actor(self.recorder, namespace=self.namespace)
            for name, lines in buffer.items():
                self._handle.write.remote(name, lines)
            for name, kind in batches.items():
                self._handle.write_batches.remote(name, kind)
        except Exception as e:  # the recorder is gone (the run ended): drop the records
            log.debug("Dropping %d records and %d batches: %s", sum(map(len, buffer.values())),
                      sum(map(len, batches.values())), e)

    def close(self) -> None:
        self._stopped.set()
        self.flush()

    def _run(self) -> None:
        while not self._stopped.wait(FLUSH_INTERVAL_S):
            self.flush()
