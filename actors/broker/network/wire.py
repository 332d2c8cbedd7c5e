"""The three messages on the replication round, encoded with `struct` at their flexible versions:
ProduceResponse v9, FetchResponse v12 (both answered by every broker for every acks=all produce)
and FetchRequest v12 (sent by every follower each round); and every request's header, read.

kafka-python's message classes encode everything else, and these at every other version. Here they
cost 20-80 microseconds a message (objects built per partition, then walked generically), a
tenth of a broker's CPU at 2,000 records/s over 1,000 partitions; these functions write the same
bytes (tests/unit/test_wire.py compares them with kafka-python's, both ways) in a few. Each returns a
whole frame: the size, the header, the body.
"""
from __future__ import annotations

import struct
from typing import Callable, Iterable, NamedTuple

from actors.data_protocol import FetchedPartition, FetchPartition, ProduceResult

PRODUCE_VERSION, FETCH_VERSION = 9, 12

_I32 = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id's length
_SIZE_AND_ID = struct.Struct(">ii")
_PRODUCE_PARTITION = struct.Struct(">ihqqq")  # index, error, base offset, log append time, log start
_FETCH_HEAD = struct.Struct(">ihi")  # throttle, error, session id
_FETCH_PARTITION = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
_DIVERGING = struct.Struct(">iqB")  # epoch, end offset, no tagged fields
_FETCH_REQUEST_HEAD = struct.Struct(">hhi")  # api key, version, correlation id
_FETCH_REQUEST_BODY = struct.Struct(">iiiibii")  # replica, max wait, min bytes, max bytes, isolation, session, epoch
_FETCH_REQUEST_PARTITION = struct.Struct(">iiqiqi")  # partition, leader epoch, offset, last epoch, start, max bytes
_REPLICA_STATE = struct.Struct(">iqB")  # replica id, replica epoch, no tagged fields
REPLICA_STATE_TAG = 1  # FetchRequest's ReplicaState (KIP-903)
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
        count, pos = _read_uvarint(frame, pos)
        for _ in range(count):
            _, pos = _read_uvarint(frame, pos)  # the tag
            size, pos = _read_uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise ValueError("tagged fields past the frame's end")
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


def replica_epoch(request) -> int:
    """The broker epoch a FetchRequest's ReplicaState carries (v15's tagged field, which kray's followers
    send at v12 too, where kafka-python keeps it among the unknown tags); -1 without one."""
    state = getattr(request, "replica_state", None)
    if state is not None and state.replica_epoch is not None:
        return state.replica_epoch
    raw = (getattr(request, "unknown_tags", None) or {}).get(f"_{REPLICA_STATE_TAG}")
    return _REPLICA_STATE.unpack_from(raw)[1] if raw is not None and len(raw) >= _REPLICA_STATE.size else -1
