"""The per-record files as Parquet parts: the columns are the models' fields, a part is whole or
passed over, and what is read back is what was written, in order."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import BaseModel

from actors import columns
from actors.records import COLUMNAR, CONSUMED, PRODUCED, Ack, Consumed, RunReader, RunWriter


def acks(n: int, start: int = 0) -> list[Ack]:
    return [Ack(topic=f"t{i % 3}", partition=i % 7, offset=None if i % 5 == 0 else i, record_id=f"p0-{i}",
                broker_id=-1, leader_epoch=-1, sent_ms=1000.0 + i, acked_ms=1000.5 + i) for i in range(start, start + n)]


def test_the_columns_are_the_models_fields_and_only_optional_ones_are_nullable():
    ack = columns.schema(Ack)
    assert ack.names == list(Ack.model_fields)
    assert {f.name for f in ack if f.nullable} == {"offset"}
    assert ack.field("partition").type == pa.int64() and ack.field("sent_ms").type == pa.float64()
    consumed = columns.schema(Consumed)
    assert {f.name for f in consumed if f.nullable} == {"group", "member"}
    assert consumed.field("final").type == pa.bool_()

    class Nested(BaseModel):
        values: list[int]

    class Either(BaseModel):
        value: int | str

    for model in (Nested, Either):
        with pytest.raises(TypeError, match="has no column type|only X | None"):
            columns.schema(model)


def test_a_field_left_out_of_a_batch_is_its_default():
    batch = columns.batch(Consumed, {"topic": ["a", "b"], "partition": [0, 1], "offset": [5, 6],
                                     "record_id": ["p0-1", "p0-2"], "leader_epoch": [0, 0], "ts_ms": [1.0, 2.0]})
    assert batch.column("final").to_pylist() == [False, False]
    assert batch.column("group").to_pylist() == [None, None]


def test_what_is_written_is_read_back_in_order_as_the_models(tmp_path):
    written = acks(1000)
    writer = RunWriter(tmp_path)
    for start in range(0, 1000, 100):
        writer.write(PRODUCED, written[start:start + 100])
    writer.close()
    reader = RunReader(tmp_path)
    assert list(reader.lines(PRODUCED, Ack)) == written
    assert reader.malformed == {}
    assert pq.read_table(tmp_path / PRODUCED).num_rows == 1000  # a directory of parts reads as one table


def test_a_part_is_written_once_enough_rows_or_enough_time_have_gathered(tmp_path, monkeypatch):
    monkeypatch.setattr(columns, "PART_ROWS", 250)
    clock = [0.0]
    parts = columns.PartWriter(tmp_path / "p", clock=lambda: clock[0])
    batch = columns.batch_of(Ack, acks(100))
    parts.write([batch, batch])
    assert not list((tmp_path / "p").iterdir())  # 200 rows, no time passed: still buffered
    parts.write([batch])
    assert [p.name for p in sorted((tmp_path / "p").iterdir())] == ["part-00000.parquet"]
    clock[0] = columns.PART_AGE_S - 0.1
    parts.write([batch])
    clock[0] = columns.PART_AGE_S + 0.1  # the oldest buffered row came at PART_AGE_S - 0.1
    parts.write([batch.slice(0, 0)])  # an empty batch changes nothing
    assert len(list((tmp_path / "p").iterdir())) == 1
    clock[0] = 2 * columns.PART_AGE_S
    parts.write([batch])
    assert [pq.read_table(p).num_rows for p in sorted((tmp_path / "p").iterdir())] == [300, 200]
    parts.flush()
    parts.flush()  # nothing buffered: no empty part
    assert len(list((tmp_path / "p").iterdir())) == 2
    (tmp_path / "p" / "part-00000.parquet").unlink()  # a gap: the next part must not take the last one's name
    again = columns.PartWriter(tmp_path / "p")  # reopened (a recorder restarted): the numbering goes on
    again.write([batch])
    again.flush()
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["part-00001.parquet", "part-00002.parquet"]
    assert pq.read_table(tmp_path / "p" / "part-00001.parquet").num_rows == 200


def test_a_torn_part_or_a_part_of_other_columns_is_counted_and_the_rest_read(tmp_path):
    writer = RunWriter(tmp_path)
    writer.write(PRODUCED, acks(10))
    writer.close()
    whole = (tmp_path / PRODUCED / "part-00000.parquet").read_bytes()
    (tmp_path / PRODUCED / "part-00001.parquet").write_bytes(whole[:-20])
    pq.write_table(pa.table({"topic": ["t"], "partition": [0]}), tmp_path / PRODUCED / "part-00002.parquet")
    writer = RunWriter(tmp_path)
    writer.write(PRODUCED, acks(5, start=10))
    writer.close()
    (tmp_path / PRODUCED / ".part-00004.parquet.tmp").write_bytes(b"being written")  # not a part yet
    reader = RunReader(tmp_path)
    assert [a.record_id for a in reader.lines(PRODUCED, Ack)] == [f"p0-{i}" for i in range(15)]
    assert reader.malformed == {PRODUCED: 2}
    assert reader.examples[PRODUCED].startswith("part-00001.parquet: ")


def test_a_columnar_kind_is_never_written_as_json_lines(tmp_path):
    writer = RunWriter(tmp_path)
    for name in COLUMNAR:
        with pytest.raises(ValueError, match="Parquet parts"):
            writer.append(name, ['{"topic": "t"}'])
    assert list(tmp_path.iterdir()) == []
    assert list(RunReader(tmp_path).lines(CONSUMED, Consumed)) == []  # a run without the kind reads empty
