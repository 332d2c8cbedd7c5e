"""A run's per-record files as columns: `produced/` and `consumed/` are directories of Parquet parts.

A run acknowledges and consumes hundreds of thousands of records. One JSON object per record cost the
load client more CPU than its Kafka client did, and an 80-second run wrote 170 MB. So the actors gather
these records column by column and ship them as Arrow record batches. The RunRecorder writes them out
as Parquet parts (`PartWriter`): a part is written every PART_ROWS rows or PART_AGE_S seconds. Each part
is complete on its own: it is written aside, then renamed. So a run cut short still reads up to its last
part, and Spark, pyarrow or pandas read the directory as one table (`spark.read.parquet(dir)`). The
columns are the records' pydantic models' fields (`schema`), so a reader gets back the same models
(`read_parts`).
"""
from __future__ import annotations

import functools
import time
import types
import typing
from pathlib import Path
from typing import Iterator, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

PART_ROWS = 250_000  # rows buffered before a part is written
PART_AGE_S = 2.0  # nor, checked as batches arrive, longer than this (what a recorder that dies can lose)
_ARROW = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}

R = TypeVar("R", bound=BaseModel)


@functools.cache
def schema(model: type[BaseModel]) -> pa.Schema:
    """The model's fields as Arrow columns, in the model's order; `X | None` is a nullable X (worked out
    once per model: every batch a load client ships asks for it)."""
    fields = []
    for name, info in model.model_fields.items():
        kind, nullable = info.annotation, False
        if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            if len(args) != 1 or len(args) == len(typing.get_args(kind)):
                raise TypeError(f"{model.__name__}.{name}: only X | None has a column type")
            kind, nullable = args[0], True
        if kind not in _ARROW:
            raise TypeError(f"{model.__name__}.{name}: {kind} has no column type")
        fields.append(pa.field(name, _ARROW[kind], nullable=nullable))
    return pa.schema(fields)


def batch(model: type[BaseModel], columns: dict[str, list | pa.Array]) -> pa.RecordBatch:
    """A record batch of `model`'s rows from its columns (a field left out is a column of its default)."""
    out = schema(model)
    n = len(next(iter(columns.values())))
    arrays = []
    for field in out:
        values = columns.get(field.name)
        if values is None:
            values = [model.model_fields[field.name].get_default(call_default_factory=True)] * n
        arrays.append(values if isinstance(values, pa.Array) else pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=out)


def batch_of(model: type[R], rows: list[R]) -> pa.RecordBatch:
    """The rows, already models (a path too cold to build its columns by hand)."""
    return batch(model, {name: [getattr(r, name) for r in rows] for name in model.model_fields})


class PartWriter:
    """Writes one record kind's batches into `directory` as Parquet parts: part-00000.parquet, ..."""

    def __init__(self, directory: Path, clock: typing.Callable[[], float] = time.monotonic):
        self.dir, self.clock = Path(directory), clock
        self.dir.mkdir(parents=True, exist_ok=True)
        self._parts = 1 + max((int(p.stem.split("-")[1]) for p in self.dir.glob("part-*.parquet")), default=-1)  # a
        # writer reopened goes on numbering after the last part there
        self._buffer: list[pa.RecordBatch] = []
        self._rows = 0
        self._oldest = 0.0

    def write(self, batches: list[pa.RecordBatch]) -> None:
        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        if not self._buffer:
            self._oldest = self.clock()
        self._buffer += batches
        self._rows += sum(b.num_rows for b in batches)
        if self._rows >= PART_ROWS or self.clock() - self._oldest >= PART_AGE_S:
            self.flush()

    def flush(self) -> None:
        """What is buffered, as a part of its own."""
        if not self._buffer:
            return
        table = pa.Table.from_batches(self._buffer)
        final = self.dir / f"part-{self._parts:05d}.parquet"
        aside = self.dir / f".{final.name}.tmp"  # Spark and pyarrow skip names that start with a dot
        pq.write_table(table, aside)
        aside.rename(final)
        self._parts += 1
        self._buffer, self._rows = [], 0


def read_parts(directory: Path, model: type[R], malformed: typing.Callable[[str], None]) -> Iterator[R]:
    """The directory's rows as `model`s, part by part in order; a part that cannot be read is passed over,
    named to `malformed` (a run's files are read whatever state a crash left them in)."""
    expected = schema(model)
    for part in sorted(Path(directory).glob("part-*.parquet")):
        try:
            table = pq.read_table(part)
        except (pa.ArrowException, OSError) as e:
            malformed(f"{part.name}: {e}")
            continue
        if not table.schema.equals(expected):
            malformed(f"{part.name}: its columns are not {model.__name__}'s: {table.schema.to_string(show_schema_metadata=False)}")
            continue
        for row in table.to_pylist():
            yield model.model_construct(**row)
