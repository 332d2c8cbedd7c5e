"""Kafka's v2 record batch: headers, Produce v3+ validation with Kafka's error codes, follower
validation, offset assignment outside the CRC, and third-party decoding (compressed too)."""
from __future__ import annotations

import struct

import pytest

from actors.broker.log import batches
from actors.broker.log.batches import BATCH_OVERHEAD, build, decode_records, read_header
from coordination.errors import Errors, KrayError

MAX = 1 << 20


def values(n: int, start: int = 0) -> list[bytes]:
    return [f"v{start + i}".encode() for i in range(n)]


def test_the_header_of_a_producers_batch():
    b = build(values(3), producer_id=7, producer_epoch=2, first_sequence=40, timestamp_ms=500)
    h = read_header(b)
    assert (h.magic, h.records_count, h.last_offset_delta, h.producer_id, h.producer_epoch) == (2, 3, 2, 7, 2)
    assert (h.base_sequence, h.last_sequence, h.first_timestamp, h.max_timestamp) == (40, 42, 500, 502)
    assert h.size == len(b) and h.compression == 0 and not h.is_transactional and not h.is_control
    assert read_header(build(values(1))).has_producer_id is False


def test_sequences_wrap_at_int32_max():
    h = read_header(build(values(3), producer_id=1, first_sequence=2 ** 31 - 2))
    assert h.last_sequence == 0


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_a_valid_batch_passes_and_decodes_whatever_its_codec(codec):
    sent = [v * 50 for v in values(20)]  # compressible, or the builder sends them plain
    b = build(sent, codec=codec)
    assert batches.validate_produce(b, MAX).compression == batches.CODECS[codec]
    assert [r.value for r in decode_records(b)] == sent


def corrupt(b: bytes, at: int) -> bytes:
    data = bytearray(b)
    data[at] ^= 0xFF
    return bytes(data)


@pytest.mark.parametrize("name, records, error", [
    ("no batch", b"", Errors.INVALID_RECORD),
    ("two batches", build(values(1)) + build(values(1)), Errors.INVALID_RECORD),
    ("magic 1", build(values(1))[:16] + b"\x01" + build(values(1))[17:], Errors.INVALID_RECORD),
    ("a flipped byte in a record", corrupt(build(values(3)), -2), Errors.CORRUPT_MESSAGE),
    ("a flipped CRC", corrupt(build(values(3)), 18), Errors.CORRUPT_MESSAGE),
    ("cut short", build(values(3))[:-3], Errors.CORRUPT_MESSAGE),
    ("a length past the end", build(values(3))[:8] + struct.pack(">i", 10_000) + build(values(3))[12:],
     Errors.CORRUPT_MESSAGE),
])
def test_produce_validation_refuses_with_kafkas_error(name, records, error):
    with pytest.raises(KrayError) as refused:
        batches.validate_produce(records, MAX)
    assert refused.value.error == error, name


def patched(b: bytes, at: int, fmt: str, value) -> bytes:
    """The batch with a field changed and its CRC made right again: only the field's meaning is wrong."""
    from crc32c import crc32c

    data = bytearray(b)
    struct.pack_into(fmt, data, at, value)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def test_a_count_that_does_not_match_the_offset_deltas_is_invalid():
    with pytest.raises(KrayError) as refused:
        batches.validate_produce(patched(build(values(3)), 57, ">i", 5), MAX)
    assert refused.value.error == Errors.INVALID_RECORD


def test_an_unknown_codec_is_unsupported():
    with pytest.raises(KrayError) as refused:
        batches.validate_produce(patched(build(values(3)), 21, ">h", 6), MAX)
    assert refused.value.error == Errors.UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("attributes", [0x10, 0x20])
def test_transactional_and_control_batches_are_refused(attributes):
    with pytest.raises(KrayError) as refused:
        batches.validate_produce(patched(build(values(1)), 21, ">h", attributes), MAX)
    assert refused.value.error == Errors.INVALID_RECORD


def test_a_batch_with_a_producer_id_needs_a_sequence():
    """Kafka's validateBatch: with no sequence, a retry cannot be told from a new batch."""
    assert batches.validate_produce(build(values(2), producer_id=9, first_sequence=0), MAX).base_sequence == 0
    assert batches.validate_produce(build(values(2)), MAX).base_sequence == -1  # no producer id: no sequence
    with pytest.raises(KrayError) as refused:
        batches.validate_produce(build(values(2), producer_id=9, first_sequence=-1), MAX)
    assert refused.value.error == Errors.INVALID_RECORD and "Invalid sequence number -1" in str(refused.value)


def test_a_batch_over_max_message_bytes_is_too_large():
    b = build(values(10))
    assert batches.validate_produce(b, len(b)).records_count == 10
    with pytest.raises(KrayError) as refused:
        batches.validate_produce(b, len(b) - 1)
    assert refused.value.error == Errors.MESSAGE_TOO_LARGE


def test_offsets_and_epoch_are_patched_outside_the_crc():
    b = build(values(4))
    stamped = batches.assign_offsets(b, 1_000, 9)
    h = read_header(stamped)
    assert (h.base_offset, h.last_offset, h.partition_leader_epoch) == (1_000, 1_003, 9)
    batches.check(stamped, 0, h)  # the CRC still holds
    assert [r.offset for r in decode_records(stamped)] == [1_000, 1_001, 1_002, 1_003]
    assert bytes(stamped[16:]) == b[16:]


def test_fetched_bytes_give_their_whole_batches_and_must_follow_on():
    first = batches.assign_offsets(build(values(2)), 0, 1)
    second = batches.assign_offsets(build(values(3)), 2, 1)
    headers = batches.validate_fetched(first + second + second[:20])  # a partial batch cut by max bytes
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 1), (2, 4)]
    assert batches.validate_fetched(b"") == []
    with pytest.raises(KrayError):
        batches.validate_fetched(first + batches.assign_offsets(build(values(1)), 5, 1))  # a gap
    with pytest.raises(KrayError):
        batches.validate_fetched(first + corrupt(second, -1))


def test_iter_batches_stops_before_a_partial_one():
    b = build(values(2))
    assert [pos for pos, _ in batches.iter_batches(b + b + b[:BATCH_OVERHEAD + 2])] == [0, len(b)]


def test_the_size_bound_holds_for_short_keys():
    for n, size in ((1, 10), (10, 100), (5, 1000)):
        real = len(build([b"x" * size] * n, keys=[b"p0-123456789"] * n))
        assert real <= batches.batch_size_bound(n, size)
