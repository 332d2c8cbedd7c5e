"""Kafka's v2 record batch (magic 2), as producers send it and as logs store it.

    baseOffset:int64 batchLength:int32 partitionLeaderEpoch:int32 magic:int8 crc:uint32
    attributes:int16 lastOffsetDelta:int32 firstTimestamp:int64 maxTimestamp:int64
    producerId:int64 producerEpoch:int16 baseSequence:int32 recordsCount:int32 records...

The CRC (CRC-32C) covers everything from `attributes` to the end, so a leader gives a batch its
offsets and its epoch by patching `baseOffset` and `partitionLeaderEpoch` without touching the
records or the CRC: brokers read headers only, never records (which may be compressed). A bad
batch is refused with Kafka's error: CORRUPT_MESSAGE for a CRC or a length that does not add up,
INVALID_RECORD for what Produce v3+ forbids. `decode_records` (kafka-python's reader, which also
decompresses) is for tests and tools, never a hot path.
"""
from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from crc32c import crc32c

from actors.broker.errors import (
    CorruptRecordException,
    InvalidRecordException,
    RecordTooLargeException,
    UnsupportedCompressionTypeException,
)

_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_OVERHEAD = _HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset and batchLength: the bytes batchLength does not count
CRC_START = 21  # attributes: where the CRC starts
MAGIC = 2
COMPRESSION_MASK, TRANSACTIONAL, CONTROL = 0x07, 0x10, 0x20
MAX_CODEC = 4  # none, gzip, snappy, lz4, zstd
_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_INT32_MAX = 2 ** 31 - 1


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequences wrap at Int32.MaxValue to 0 (Kafka's DefaultRecordBatch.incrementSequence)."""
        return self.sequence_at(self.last_offset)

    def sequence_at(self, offset: int) -> int:
        """The sequence its producer gave the record at `offset` (-1 without one)."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + offset - self.base_offset) % (_INT32_MAX + 1)


def read_header(buf, pos: int = 0) -> BatchHeader:
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


def iter_batches(buf, pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each complete batch from `pos`; stops before a partial one."""
    end = len(buf)
    while end - pos >= BATCH_OVERHEAD:
        header = read_header(buf, pos)
        if header.batch_length < BATCH_OVERHEAD - LOG_OVERHEAD or pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def check(buf, pos: int, header: BatchHeader) -> None:
    """A batch whose length, magic and CRC hold (CORRUPT_MESSAGE otherwise)."""
    if header.magic != MAGIC:
        raise CorruptRecordException(f"record batch at byte {pos} has magic {header.magic}, expected {MAGIC}")
    stop = pos + header.size
    if crc32c(memoryview(buf)[pos + CRC_START:stop]) != header.crc:
        raise CorruptRecordException(f"record batch at byte {pos} (offset {header.base_offset}) fails its CRC")


def validate_produce(records, max_message_bytes: int) -> BatchHeader:
    """A producer's records for one partition, as Kafka 2.8 checks Produce v3+ (ProduceRequest
    .validateRecords, LogValidator): exactly one v2 batch, whole, with a good CRC, a record count that
    matches its offset deltas, a known codec, not larger than max.message.bytes, neither a
    control nor a transactional batch (kray has no transaction coordinator; Kafka would refuse
    those without one too, with INVALID_RECORD), and a sequence with its producer id (Kafka's
    validateBatch: a batch with a producer id and no sequence cannot be told from its retry)."""
    size = len(records)
    if size < BATCH_OVERHEAD:
        raise InvalidRecordException(f"Produce requests must have exactly one record batch ({size} bytes given)")
    header = read_header(records)
    if header.magic != MAGIC:
        raise InvalidRecordException(f"Produce requests with version 3 and above must have magic 2, not "
                                     f"{header.magic}")
    if header.batch_length < BATCH_OVERHEAD - LOG_OVERHEAD or header.size > size:
        raise CorruptRecordException(f"record batch claims {header.batch_length} bytes, {size - LOG_OVERHEAD} given")
    if header.size < size:
        raise InvalidRecordException("Produce requests must have exactly one record batch")
    if header.size > max_message_bytes:
        raise RecordTooLargeException(f"The record batch is {header.size} bytes, larger than max.message.bytes="
                                      f"{max_message_bytes}")
    check(records, 0, header)
    if header.records_count != header.last_offset_delta + 1 or header.records_count < 1:
        raise InvalidRecordException(f"record batch has {header.records_count} records but a last offset delta "
                                     f"of {header.last_offset_delta}")
    if header.compression > MAX_CODEC:
        raise UnsupportedCompressionTypeException(f"unknown compression codec {header.compression}")
    if header.is_control or header.is_transactional:
        raise InvalidRecordException("kray has no transactions: control and transactional batches are refused")
    if header.has_producer_id and header.base_sequence < 0:
        raise InvalidRecordException(f"Invalid sequence number {header.base_sequence} in record batch with "
                                     f"producerId {header.producer_id}")
    return header


def validate_fetched(records) -> list[BatchHeader]:
    """A follower's fetched bytes: the whole batches (a trailing partial one, cut by the fetch's size
    limit, is left out as Kafka does), each checked, with contiguous offsets."""
    out: list[BatchHeader] = []
    for pos, header in iter_batches(records):
        check(records, pos, header)
        if out and header.base_offset != out[-1].last_offset + 1:
            raise CorruptRecordException(f"fetched batch at offset {header.base_offset} does not follow "
                                         f"{out[-1].last_offset}")
        out.append(header)
    return out


def assign_offsets(batch, base_offset: int, leader_epoch: int) -> bytearray:
    """The batch with its offsets from `base_offset` and this leader's epoch (outside the CRC)."""
    out = bytearray(batch)
    _OFFSET.pack_into(out, 0, base_offset)
    _EPOCH.pack_into(out, 12, leader_epoch)
    return out


CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def build(values: list[bytes], keys: list[bytes | None] | None = None, producer_id: int = -1, producer_epoch: int = 0,
          first_sequence: int = 0, timestamp_ms: int = 1_000, codec: str = "none") -> bytes:
    """A batch as a producer builds it (kafka-python's builder), for tests and the benchmarks' floor;
    idempotent when it has a producer id. Record i has timestamp timestamp_ms + i."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    idempotent = producer_id >= 0
    builder = DefaultRecordBatchBuilder(magic=MAGIC, compression_type=CODECS[codec], is_transactional=False,
                                        producer_id=producer_id, producer_epoch=producer_epoch if idempotent else -1,
                                        base_sequence=first_sequence if idempotent else -1, batch_size=1 << 30)
    for i, (key, value) in enumerate(zip(keys or [None] * len(values), values)):
        builder.append(i, timestamp=timestamp_ms + i, key=key, value=value, headers=[])
    return bytes(builder.build())


RECORD_OVERHEAD_BOUND = 40  # a record's length, attributes, deltas and key length as varints, a short key


def batch_size_bound(records: int, value_bytes: int) -> int:
    """At most how large a batch of `records` values of `value_bytes` (with short keys) is, uncompressed."""
    return BATCH_OVERHEAD + records * (value_bytes + RECORD_OVERHEAD_BOUND)


def decode_records(buf) -> list:
    """Every record of every whole batch (kafka-python's reader: offset, timestamp, key, value,
    headers), for tests, read-back and tools."""
    from kafka.record.memory_records import MemoryRecords

    records, reader = [], MemoryRecords(bytes(buf))
    while (batch := reader.next_batch()) is not None:
        records.extend(batch)
    return records
