"""The on-disk record format of a replica's log: one CRC-checked entry per record.

    entry := length:int32 crc:uint32 offset:int64 leader_epoch:int32 timestamp_ms:int64
             producer_id:int64 sequence:int32 key_length:int32 key value_length:int32 value

`length` counts the bytes after itself; `crc` is CRC-32 (zlib) of the bytes after
itself (Kafka's v2 batches use CRC-32C, which Python's standard library lacks);
a key length of -1 is a null key. producer_id and sequence (-1 when the producer
is not idempotent) let a leader recognise a retried produce, also after a leader
change, since the new leader rebuilds that state from its log. Decoding stops at the first entry that is cut
short, fails its CRC or breaks the offset sequence, and says why: that is where
recovery truncates.
"""
from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

_LENGTH = struct.Struct(">i")
_HEAD = struct.Struct(">IqiqqiI")  # crc, offset, epoch, timestamp, producer id, sequence, key length (-1 = null)
_BODY = struct.Struct(">qiqqiI")
_INT = struct.Struct(">i")
NULL = 0xFFFFFFFF
HEADER_BYTES = _LENGTH.size + _HEAD.size


class Record(NamedTuple):
    offset: int
    leader_epoch: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    producer_id: int = -1
    sequence: int = -1


def entry_size(record: Record) -> int:
    """The bytes `encode` writes for the record (what message.max.bytes limits)."""
    return HEADER_BYTES + len(record.key or b"") + _INT.size + len(record.value)


def encode(record: Record) -> bytes:
    """The entry for a record (a leader gives it its offset and epoch before)."""
    key = record.key
    body = _BODY.pack(record.offset, record.leader_epoch, record.timestamp_ms,
                      record.producer_id, record.sequence, NULL if key is None else len(key)) \
        + (key or b"") + _INT.pack(len(record.value)) + record.value
    crc = zlib.crc32(body)
    return _LENGTH.pack(len(body) + 4) + struct.pack(">I", crc) + body


class Decoded(NamedTuple):
    records: list[Record]
    positions: list[int]  # byte position of each record in the buffer
    valid_bytes: int  # where the last good entry ends
    error: str | None  # why decoding stopped before the end of the buffer
    cut: bool = False  # the buffer ends inside an entry that more bytes may complete

    @property
    def ends(self) -> list[int]:
        """Where each record ends in the buffer."""
        return self.positions[1:] + [self.valid_bytes]


def claimed_bytes(buffer: bytes) -> int | None:
    """The bytes the entry at the start of the buffer claims (its length field included), if its length
    field is there."""
    return _LENGTH.unpack_from(buffer)[0] + _LENGTH.size if len(buffer) >= _LENGTH.size else None


def decode(buffer: bytes, expected_offset: int | None = None) -> Decoded:
    """Every good entry from the start of the buffer; stops at the first bad one."""
    records, positions, pos, end = [], [], 0, len(buffer)
    while pos < end:
        if end - pos < HEADER_BYTES:
            return Decoded(records, positions, pos, f"truncated entry header at byte {pos}", cut=True)
        (length,) = _LENGTH.unpack_from(buffer, pos)
        body_end = pos + _LENGTH.size + length
        if length < _HEAD.size + _INT.size or body_end > end:
            return Decoded(records, positions, pos, f"entry at byte {pos} claims {length} bytes",
                           cut=length >= _HEAD.size + _INT.size)
        crc, offset, epoch, timestamp, producer_id, sequence, key_length = _HEAD.unpack_from(buffer, pos + _LENGTH.size)
        if zlib.crc32(buffer[pos + 8:body_end]) != crc:
            return Decoded(records, positions, pos, f"CRC mismatch in the entry at byte {pos} (offset {offset})")
        if expected_offset is not None and offset != expected_offset:
            return Decoded(records, positions, pos, f"offset {offset} at byte {pos}, expected {expected_offset}")
        cursor = pos + HEADER_BYTES
        key = None
        if key_length != NULL:
            key = bytes(buffer[cursor:cursor + key_length])
            cursor += key_length
        value_length = _INT.unpack_from(buffer, cursor)[0] if cursor + _INT.size <= body_end else -1
        cursor += _INT.size
        if value_length < 0 or cursor + value_length != body_end:
            return Decoded(records, positions, pos, f"entry at byte {pos} has inconsistent lengths")
        value = bytes(buffer[cursor:body_end])
        records.append(Record(offset, epoch, timestamp, key, value, producer_id, sequence))
        positions.append(pos)
        expected_offset = offset + 1
        pos = body_end
    return Decoded(records, positions, pos, None)
