"""The messages on the replication round, with `struct`. Written, at their flexible versions:
ProduceResponse v9, FetchResponse v12 (both answered by every broker for every acks=all produce) and
FetchRequest v12 (sent by every follower each round). Read: every request's header, ProduceRequest
v3-v9 and FetchRequest v4-v12 (every version the broker takes, clients' as well as followers'), and
the FetchResponse v12 a follower gets back.

kafka-python's message classes encode everything else, and these responses at every other version.
Here they cost 20-80 microseconds a message (objects built per partition, then walked generically), a
tenth of a broker's CPU at 2,000 records/s over 1,000 partitions; these functions write the same
bytes (tests/unit/test_wire.py compares them with kafka-python's, both ways) in a few. Each encoder
returns a whole frame: the size, the header, the body.

kafka-python's decode, likewise, builds an object per topic and partition (3-9 microseconds for a
produce or a follower's fetch of a few partitions, with the copy into KafkaApis' rows; 40 for a
response of 50 partitions), on every request of the round. The decoders read a frame straight into the rows the
broker and the fetcher work with (ProduceParams, FetchParams, FetchResponseData), in a half to a
quarter of that; the tests hold them to what kafka-python's decode gives, at every version.
"""
from __future__ import annotations

import struct
from typing import Callable, Iterable, NamedTuple

from actors.data_protocol import (
    FetchedPartition,
    FetchParams,
    FetchPartition,
    FetchResponseData,
    ProduceParams,
    ProduceResult,
)
from coordination.zkdata import TopicPartition

PRODUCE_VERSION, FETCH_VERSION = 9, 12

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_REQUEST_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id's length
_SIZE_AND_ID = struct.Struct(">ii")
_PRODUCE_PARTITION = struct.Struct(">ihqqq")  # index, error, base offset, log append time, log start
_FETCH_HEAD = struct.Struct(">ihi")  # throttle, error, session id
_FETCH_PARTITION = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
_DIVERGING = struct.Struct(">iqB")  # epoch, end offset, no tagged fields
_EPOCH_AND_OFFSET = struct.Struct(">iq")  # a diverging epoch as read, its tagged fields left
DIVERGING_EPOCH_TAG = 0  # FetchResponse's, per partition
_FETCH_REQUEST_HEAD = struct.Struct(">hhi")  # api key, version, correlation id
_FETCH_REQUEST_BODY = struct.Struct(">iiiibii")  # replica, max wait, min bytes, max bytes, isolation, session, epoch
_FETCH_REQUEST_PARTITION = struct.Struct(">iiqiqi")  # partition, leader epoch, offset, last epoch, start, max bytes
_FETCH_REQUEST_BODY_V4 = struct.Struct(">iiiib")  # v4-v6: no session yet
_FETCH_REQUEST_PARTITION_V4 = struct.Struct(">iqi")  # partition, offset, max bytes
_FETCH_REQUEST_PARTITION_V5 = struct.Struct(">iqqi")  # partition, offset, log start, max bytes
_FETCH_REQUEST_PARTITION_V9 = struct.Struct(">iiqqi")  # partition, leader epoch, offset, log start, max bytes
_PRODUCE_REQUEST_HEAD = struct.Struct(">hi")  # acks, timeout
_REPLICA_STATE = struct.Struct(">iqB")  # replica id, replica epoch, no tagged fields
REPLICA_STATE_TAG = 1  # FetchRequest's ReplicaState (KIP-903)
# A NamedTuple built without its Python-level __new__ (so with every field given): a tenth of a
# microsecond less a row, which the decoders build one of per partition.
_new = tuple.__new__
_NO_TAGS = b"\x00"
_NULL_PREFERRED_READ_REPLICA = _I32.pack(-1)
FETCH_API_KEY = 1


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_uvarint(buf, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            return n, pos
        shift += 7
        if shift > 28:
            raise ValueError("a varint longer than 5 bytes")


def _tagged(buf, pos: int, wanted: int):
    """Tagged fields: the bytes of the one tagged `wanted` (the last, if repeated; None without one)
    and where the fields end."""
    count = buf[pos]
    if count < 0x80:
        pos += 1
    else:
        count, pos = _read_uvarint(buf, pos)
    field = None
    for _ in range(count):
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_uvarint(buf, pos)
        size = buf[pos]
        if size < 0x80:
            pos += 1
        else:
            size, pos = _read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise ValueError("a tagged field past the frame's end")
        if tag == wanted:
            field = buf[pos:end]
        pos = end
    return field, pos


def _read_count(buf, pos: int) -> tuple[int, int]:
    """A non-nullable array's length: int32."""
    (n,) = _I32.unpack_from(buf, pos)
    if n < 0:
        raise ValueError("a null where the schema has none")
    return n, pos + 4


def _read_compact_count(buf, pos: int) -> tuple[int, int]:
    """A non-nullable compact array's (or string's) length: an unsigned varint, one more than it."""
    n = buf[pos]
    if n >= 0x80:
        n, pos = _read_uvarint(buf, pos)
    else:
        pos += 1
    if n == 0:
        raise ValueError("a null where the schema has none")
    return n - 1, pos


def _read_topic(buf, pos: int) -> tuple[str, int, int]:
    """A topic's name (a non-nullable string: int16 length, UTF-8) and its partitions' count (int32)."""
    (n,) = _I16.unpack_from(buf, pos)
    start = pos + 2
    end = start + n
    if n < 0 or end > len(buf):
        raise ValueError("a null topic name or one past the frame's end")
    count, pos = _read_count(buf, end)
    return str(buf[start:end], "utf-8"), count, pos


def _read_compact_records(frame, pos: int, view: bool) -> tuple[bytes, int]:
    """Compact nullable bytes (records): a copy (b"" for null, or empty), and where they end. `view`: the
    frame is a memoryview or bytearray, whose slices are not copies."""
    n = frame[pos]
    if n >= 0x80:
        n, pos = _read_uvarint(frame, pos)
    else:
        pos += 1
    if not n:
        return b"", pos
    end = pos + n - 1
    if end > len(frame):
        raise ValueError("records past the frame's end")
    return (bytes(frame[pos:end]) if view else frame[pos:end]), end


def _read_compact_topic(buf, pos: int) -> tuple[str, int, int]:
    """A topic's name (a non-nullable compact string: an unsigned varint one more than its length, UTF-8)
    and its partitions' count (a non-nullable compact array's)."""
    n = buf[pos]
    if n >= 0x80:
        n, pos = _read_uvarint(buf, pos)
    else:
        pos += 1
    end = pos + n - 1
    if n == 0 or end > len(buf):
        raise ValueError("a null topic name or one past the frame's end")
    count, after = _read_compact_count(buf, end)
    return str(buf[pos:end], "utf-8"), count, after


class RequestHeader(NamedTuple):
    correlation_id: int
    client_id: str | None
    body: int  # where the request's body starts in the frame


def read_request_header(frame, flexible: bool) -> RequestHeader:
    """Request header v1, or v2 at a flexible version (tagged fields after the client id, which stays a
    nullable string of int16 length). kafka-python's reader copies the whole frame, records included,
    to read these few bytes generically: a twentieth of a broker's CPU under a stream of produces."""
    _, _, correlation_id, n = _REQUEST_HEADER.unpack_from(frame)
    pos = _REQUEST_HEADER.size
    client_id = None
    if n >= 0:
        if pos + n > len(frame):
            raise ValueError("a client id past the frame's end")
        client_id = bytes(frame[pos:pos + n]).decode()
        pos += n
    if flexible:
        pos = _tagged(frame, pos, -1)[1]
    return RequestHeader(correlation_id, client_id, pos)


def _compact_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return _uvarint(len(b) + 1) + b


def _compact_bytes(b: bytes | None) -> bytes:
    return b"\x00" if b is None else _uvarint(len(b) + 1) + b


def _frame(correlation_id: int, parts: list[bytes]) -> bytes:
    """Size, response header v1 (correlation id, no tagged fields), body."""
    body = b"".join(parts)
    return _SIZE_AND_ID.pack(len(body) + 5, correlation_id) + _NO_TAGS + body


def _topic_array(parts: list[bytes], items: Iterable[tuple], partition: Callable[[list[bytes], tuple], None]) -> None:
    """A compact array of topics (each item's first field), each with the compact array of its items,
    which `partition` writes one at a time."""
    topics: dict[str, list] = {}
    for item in items:
        topics.setdefault(item[0], []).append(item)
    parts.append(_uvarint(len(topics) + 1))
    for topic, ps in topics.items():
        parts.append(_compact_string(topic))
        parts.append(_uvarint(len(ps) + 1))
        for p in ps:
            partition(parts, p)
        parts.append(_NO_TAGS)


def _produced(parts: list[bytes], r: ProduceResult) -> None:
    parts.append(_PRODUCE_PARTITION.pack(r.partition, r.error_code, r.base_offset, -1, r.log_start_offset))
    parts.append(b"\x01")  # no record errors
    parts.append(_compact_string(r.error_message))
    parts.append(_NO_TAGS)


def produce_response(correlation_id: int, results: list[ProduceResult]) -> bytes:
    parts: list[bytes] = []
    _topic_array(parts, results, _produced)
    parts.append(_I32.pack(0))  # throttle time
    parts.append(_NO_TAGS)
    return _frame(correlation_id, parts)


def _fetched(parts: list[bytes], f: FetchedPartition) -> None:
    parts.append(_FETCH_PARTITION.pack(f.partition, f.error_code, f.high_watermark, f.high_watermark,
                                       f.log_start_offset))
    parts.append(b"\x00")  # no aborted transactions (null)
    parts.append(_NULL_PREFERRED_READ_REPLICA)
    parts.append(_compact_bytes(f.records))
    if f.diverging_epoch is None:
        parts.append(_NO_TAGS)
    else:  # tagged field 0: the diverging epoch (KIP-320)
        parts.append(b"\x01\x00" + _uvarint(_DIVERGING.size) + _DIVERGING.pack(*f.diverging_epoch, 0))


def fetch_response(correlation_id: int, error_code: int, session_id: int,
                   partitions: list[FetchedPartition]) -> bytes:
    parts = [_FETCH_HEAD.pack(0, error_code, session_id)]
    _topic_array(parts, partitions, _fetched)
    parts.append(_NO_TAGS)
    return _frame(correlation_id, parts)


def _to_fetch(parts: list[bytes], p: FetchPartition) -> None:
    parts.append(_FETCH_REQUEST_PARTITION.pack(p.partition, p.current_leader_epoch, p.fetch_offset,
                                               p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes))
    parts.append(_NO_TAGS)


def _forgotten(parts: list[bytes], tp: tuple[str, int]) -> None:
    parts.append(_I32.pack(tp[1]))  # a plain int32: no tagged fields per partition


def fetch_request(correlation_id: int, client_id: str, replica_id: int, max_wait_ms: int, min_bytes: int,
                  max_bytes: int, session_id: int, session_epoch: int, partitions: list[FetchPartition],
                  forgotten: list[tuple[str, int]], replica_epoch: int = -1) -> bytes:
    """A follower's FetchRequest v12 (request header v2: its client id is a plain nullable string).
    With `replica_epoch`, its body's tagged field 1 is the ReplicaState that Fetch v15 defines (KIP-903:
    which incarnation of the follower fetches); a leader that does not know the tag skips it."""
    client = client_id.encode()
    parts = [_FETCH_REQUEST_HEAD.pack(FETCH_API_KEY, FETCH_VERSION, correlation_id),
             struct.pack(">h", len(client)), client, _NO_TAGS,
             _FETCH_REQUEST_BODY.pack(replica_id, max_wait_ms, min_bytes, max_bytes, 0, session_id, session_epoch)]
    _topic_array(parts, partitions, _to_fetch)
    _topic_array(parts, forgotten, _forgotten)
    parts.append(_compact_string(""))  # rack id
    if replica_epoch < 0:
        parts.append(_NO_TAGS)
    else:
        parts.append(b"\x01" + _uvarint(REPLICA_STATE_TAG) + _uvarint(_REPLICA_STATE.size)
                     + _REPLICA_STATE.pack(replica_id, replica_epoch, 0))
    body = b"".join(parts)
    return _I32.pack(len(body)) + body


# -- decoders ------------------------------------------------------------------------------------------
# Each reads a message straight into the rows KafkaApis and the fetcher work with. Lengths are checked
# against the frame, null arrays and strings where the schema has none refused, bytes skipped over
# without a check are those before a read that would fail past the end: a frame cut short or malformed
# raises ValueError, IndexError or struct.error. Bytes after the message are ignored, as kafka-python does.


def read_produce_request(frame, pos: int, version: int) -> ProduceParams:
    """ProduceRequest v3-v9 from `pos` (its body's start) in `frame` (no size), records copied out."""
    if not 3 <= version <= PRODUCE_VERSION:
        raise ValueError(f"ProduceRequest v{version}")
    size = len(frame)
    flexible = version == PRODUCE_VERSION
    if flexible:
        n = frame[pos]
        if n >= 0x80:
            n, pos = _read_uvarint(frame, pos)
        else:
            pos += 1
        n -= 1  # -1: null
    else:
        (n,) = _I16.unpack_from(frame, pos)
        pos += 2
    transactional_id = None
    if n >= 0:
        if pos + n > size:
            raise ValueError("a transactional id past the frame's end")
        transactional_id = str(frame[pos:pos + n], "utf-8")
        pos += n
    acks, timeout_ms = _PRODUCE_REQUEST_HEAD.unpack_from(frame, pos)
    pos += _PRODUCE_REQUEST_HEAD.size
    entries = []
    view = type(frame) is not bytes  # a memoryview, whose slices are no copies
    if flexible:
        topics, pos = _read_compact_count(frame, pos)
        for _ in range(topics):
            topic, count, pos = _read_compact_topic(frame, pos)
            for _ in range(count):
                (index,) = _I32.unpack_from(frame, pos)
                pos += 4
                records, pos = _read_compact_records(frame, pos, view)
                entries.append((_new(TopicPartition, (topic, index)), records))
                pos = _tagged(frame, pos, -1)[1] if frame[pos] else pos + 1
            pos = _tagged(frame, pos, -1)[1] if frame[pos] else pos + 1
        if frame[pos]:
            _tagged(frame, pos, -1)
    else:
        topics, pos = _read_count(frame, pos)
        for _ in range(topics):
            topic, count, pos = _read_topic(frame, pos)
            for _ in range(count):
                index, n = _SIZE_AND_ID.unpack_from(frame, pos)  # partition index, records' size
                pos += 8
                records = b""
                if n >= 0:  # < 0: null
                    end = pos + n
                    if end > size:
                        raise ValueError("records past the frame's end")
                    records = bytes(frame[pos:end]) if view else frame[pos:end]
                    pos = end
                entries.append((_new(TopicPartition, (topic, index)), records))
    return _new(ProduceParams, (transactional_id, acks, timeout_ms, entries))


def read_fetch_request(frame, pos: int, version: int) -> FetchParams:
    """FetchRequest v4-v12 from `pos` (its body's start) in `frame` (no size), with the defaults
    kafka-python gives the fields a version lacks; isolation level and rack id passed over. At v12 the
    ReplicaState of a kray follower (tagged field 1, see `fetch_request`) gives the replica epoch."""
    if not 4 <= version <= FETCH_VERSION:
        raise ValueError(f"FetchRequest v{version}")
    partitions = []
    forgotten = []
    replica_epoch = -1
    if version == FETCH_VERSION:
        replica_id, max_wait_ms, min_bytes, max_bytes, _, session_id, session_epoch = \
            _FETCH_REQUEST_BODY.unpack_from(frame, pos)
        topics, pos = _read_compact_count(frame, pos + _FETCH_REQUEST_BODY.size)
        for _ in range(topics):
            topic, count, pos = _read_compact_topic(frame, pos)
            for _ in range(count):
                partition, leader_epoch, offset, last_epoch, start, limit = \
                    _FETCH_REQUEST_PARTITION.unpack_from(frame, pos)
                pos += _FETCH_REQUEST_PARTITION.size
                partitions.append(_new(FetchPartition,
                                       (topic, partition, offset, leader_epoch, limit, last_epoch, start)))
                pos = _tagged(frame, pos, -1)[1] if frame[pos] else pos + 1
            pos = _tagged(frame, pos, -1)[1] if frame[pos] else pos + 1
        topics, pos = _read_compact_count(frame, pos)
        for _ in range(topics):
            topic, count, pos = _read_compact_topic(frame, pos)
            for _ in range(count):
                forgotten.append((topic, _I32.unpack_from(frame, pos)[0]))
                pos += 4
            pos = _tagged(frame, pos, -1)[1] if frame[pos] else pos + 1
        n, pos = _read_compact_count(frame, pos)  # rack id
        pos += n
        if frame[pos]:
            state, _ = _tagged(frame, pos, REPLICA_STATE_TAG)
            if state is not None and len(state) >= _REPLICA_STATE.size:  # a shorter one carries no epoch
                replica_epoch = _I64.unpack_from(state, 4)[0]
    else:
        if version >= 7:
            replica_id, max_wait_ms, min_bytes, max_bytes, _, session_id, session_epoch = \
                _FETCH_REQUEST_BODY.unpack_from(frame, pos)
            pos += _FETCH_REQUEST_BODY.size
        else:
            replica_id, max_wait_ms, min_bytes, max_bytes, _ = _FETCH_REQUEST_BODY_V4.unpack_from(frame, pos)
            session_id, session_epoch = 0, -1
            pos += _FETCH_REQUEST_BODY_V4.size
        topics, pos = _read_count(frame, pos)
        for _ in range(topics):
            topic, count, pos = _read_topic(frame, pos)
            for _ in range(count):
                if version >= 9:
                    partition, leader_epoch, offset, start, limit = \
                        _FETCH_REQUEST_PARTITION_V9.unpack_from(frame, pos)
                    pos += _FETCH_REQUEST_PARTITION_V9.size
                elif version >= 5:
                    partition, offset, start, limit = _FETCH_REQUEST_PARTITION_V5.unpack_from(frame, pos)
                    leader_epoch = -1
                    pos += _FETCH_REQUEST_PARTITION_V5.size
                else:
                    partition, offset, limit = _FETCH_REQUEST_PARTITION_V4.unpack_from(frame, pos)
                    leader_epoch = start = -1
                    pos += _FETCH_REQUEST_PARTITION_V4.size
                partitions.append(_new(FetchPartition, (topic, partition, offset, leader_epoch, limit, -1, start)))
        if version >= 7:
            topics, pos = _read_count(frame, pos)
            for _ in range(topics):
                topic, count, pos = _read_topic(frame, pos)
                for _ in range(count):
                    forgotten.append((topic, _I32.unpack_from(frame, pos)[0]))
                    pos += 4
        if version >= 11:
            (n,) = _I16.unpack_from(frame, pos)  # rack id
            if n < 0 or pos + 2 + n > len(frame):
                raise ValueError("a null rack id or one past the frame's end")
    return _new(FetchParams, (replica_id, max_wait_ms, min_bytes, max_bytes, partitions, session_id, session_epoch,
                              forgotten, replica_epoch))


def _skip_aborted(frame, pos: int) -> int:
    """A FetchResponse v12 partition's aborted transactions (non-null): producer id, first offset, tags."""
    count, pos = _read_uvarint(frame, pos)
    for _ in range(count - 1):
        pos += 16
        pos = _tagged(frame, pos, -1)[1] if frame[pos] else pos + 1
    return pos


def read_fetch_response(frame) -> FetchResponseData:
    """FetchResponse v12 from its header (v1: correlation id, tagged fields) in `frame` (no size), records
    copied out; a diverging epoch of (-1, -1), the schema's default, is none."""
    (correlation_id,) = _I32.unpack_from(frame)
    pos = _tagged(frame, 4, -1)[1] if frame[4] else 5
    _, error_code, session_id = _FETCH_HEAD.unpack_from(frame, pos)
    topics, pos = _read_compact_count(frame, pos + _FETCH_HEAD.size)
    partitions = []
    view = type(frame) is not bytes  # a memoryview, whose slices are no copies
    for _ in range(topics):
        topic, count, pos = _read_compact_topic(frame, pos)
        for _ in range(count):
            partition, error, high_watermark, _, log_start_offset = _FETCH_PARTITION.unpack_from(frame, pos)
            pos += _FETCH_PARTITION.size
            pos = _skip_aborted(frame, pos) if frame[pos] else pos + 1
            pos += 4  # preferred read replica
            records, pos = _read_compact_records(frame, pos, view)
            diverging = None
            if frame[pos]:
                field, pos = _tagged(frame, pos, DIVERGING_EPOCH_TAG)
                if field is not None:
                    diverging = _EPOCH_AND_OFFSET.unpack_from(field)
                    if diverging == (-1, -1):
                        diverging = None
            else:
                pos += 1
            partitions.append(_new(FetchedPartition, (topic, partition, error, high_watermark, log_start_offset,
                                                      records, diverging, -1)))
        pos = _tagged(frame, pos, -1)[1] if frame[pos] else pos + 1
    if frame[pos]:
        _tagged(frame, pos, -1)
    return _new(FetchResponseData, (correlation_id, error_code, session_id, partitions))
