"""The struct-encoded messages of the replication round write exactly the bytes of kafka-python's
messages that the broker serves at every other version (kafka_apis' builders), and kafka-python (as
librdkafka would) decodes them back to the same fields. The struct decoders read every frame as
kafka-python's decode and KafkaApis' (or the fetcher's) reading of its objects would, and refuse
frames cut short or malformed."""
from __future__ import annotations

import random
import struct

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from actors.broker.network import kafka_apis, wire
from actors.data_protocol import (
    FetchedPartition,
    FetchParams,
    FetchPartition,
    FetchResponseData,
    FetchResult,
    ProduceParams,
    ProduceResult,
)
from coordination.zkdata import TopicPartition


def kafka_python_replica_epoch(request) -> int:
    """The broker epoch a kafka-python FetchRequest's ReplicaState carries (v15's tagged field, which kray's
    followers send at v12 too, where kafka-python keeps it among the unknown tags); -1 without one."""
    state = getattr(request, "replica_state", None)
    if state is not None and state.replica_epoch is not None:
        return state.replica_epoch
    raw = (getattr(request, "unknown_tags", None) or {}).get(f"_{wire.REPLICA_STATE_TAG}")
    return struct.unpack_from(">iq", raw)[1] if raw is not None and len(raw) >= 13 else -1


def kafka_python_frame(response, version: int, correlation_id: int) -> bytes:
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    return response.encode(header=True, framed=True)


def produce_results(rng: random.Random) -> list[ProduceResult]:
    return [ProduceResult(rng.choice(["t", "topic-é", "x" * 200]), p, rng.choice([0, 6, 19]),
                          rng.randrange(-1, 1 << 40), rng.randrange(-1, 1 << 20),
                          rng.choice([None, "", "NOT_LEADER_OR_FOLLOWER"])) for p in range(rng.randrange(0, 6))]


def fetched(rng: random.Random) -> list[FetchedPartition]:
    return [FetchedPartition(rng.choice(["t", "u", "y" * 130]), p, rng.choice([0, 1, 74]), rng.randrange(-1, 1 << 40),
                             rng.randrange(-1, 1 << 30), rng.choice([b"", b"\x00" * rng.randrange(1, 300)]),
                             rng.choice([None, (rng.randrange(0, 100), rng.randrange(-1, 1 << 40))]))
            for p in range(rng.randrange(0, 6))]


@pytest.mark.parametrize("seed", range(40))
def test_a_produce_response_is_kafka_pythons(seed):
    rng = random.Random(seed)
    results = produce_results(rng)
    expected = kafka_python_frame(kafka_apis.produce_response(results), 9, seed)
    assert wire.produce_response(seed, results) == expected


@pytest.mark.parametrize("seed", range(40))
def test_a_fetch_response_is_kafka_pythons_and_decodes_back(seed):
    rng = random.Random(seed)
    parts = fetched(rng)
    expected = kafka_python_frame(kafka_apis.fetch_response(FetchResult(0, seed, parts)), 12, seed)
    frame = wire.fetch_response(seed, 0, seed, parts)
    assert frame == expected
    decoded = FetchResponse.decode(frame[4:], version=12, header=True)
    got = [(t.topic, p.partition_index, p.high_watermark, p.records or b"",
            None if p.diverging_epoch is None or p.diverging_epoch.epoch < 0 and p.diverging_epoch.end_offset < 0
            else (p.diverging_epoch.epoch, p.diverging_epoch.end_offset))
           for t in decoded.responses for p in t.partitions]
    assert sorted(got) == sorted((f.topic, f.partition, f.high_watermark, f.records, f.diverging_epoch) for f in parts)


@pytest.mark.parametrize("replica_epoch", [-1, 0, 4_294_967_396])
def test_a_followers_fetch_carries_its_broker_epoch_in_the_replica_state_tag(replica_epoch):
    """KIP-903's ReplicaState (v15's tagged field 1) sent at v12: kafka-python keeps it among the unknown
    tags there and decodes it as the field at v15; the leader reads it either way. None sent: -1."""
    frame = wire.fetch_request(1, "broker-2-fetcher-0", 2, 500, 1, 1 << 20, 0, 0, [], [], replica_epoch=replica_epoch)
    request = FetchRequest.decode(frame[4:], version=12, header=True)
    assert request.replica_id == 2 and kafka_python_replica_epoch(request) == replica_epoch
    assert bool(request.unknown_tags) == (replica_epoch >= 0)
    v15 = FetchRequest(replica_state=FetchRequest.ReplicaState(replica_id=2, replica_epoch=replica_epoch),
                       max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                       session_epoch=0, topics=[], forgotten_topics_data=[], rack_id="")
    assert kafka_python_replica_epoch(FetchRequest.decode(v15.encode(version=15), version=15)) == replica_epoch


@pytest.mark.parametrize("seed", range(40))
def test_a_followers_fetch_request_decodes_as_kafka_pythons(seed):
    rng = random.Random(seed)
    partitions = [FetchPartition(rng.choice(["t", "u"]), p, rng.randrange(0, 1 << 40), rng.randrange(-1, 50),
                                 rng.randrange(1, 1 << 20), rng.randrange(-1, 50), rng.randrange(-1, 1 << 30))
                  for p in range(rng.randrange(0, 6))]
    forgotten = [(rng.choice(["t", "v"]), p) for p in range(rng.randrange(0, 4))]
    frame = wire.fetch_request(seed, "broker-2-fetcher-1", 2, 500, 1, 10 << 20, seed * 7, seed % 5, partitions,
                               forgotten)
    request = FetchRequest.decode(frame[4:], version=12, header=True)
    assert (request.header.correlation_id, request.header.client_id) == (seed, "broker-2-fetcher-1")
    assert (request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes, request.session_id,
            request.session_epoch, request.rack_id) == (2, 500, 1, 10 << 20, seed * 7, seed % 5, "")
    assert sorted(FetchPartition(t.topic, p.partition, p.fetch_offset, p.current_leader_epoch, p.partition_max_bytes,
                                 p.last_fetched_epoch, p.log_start_offset)
                  for t in request.topics for p in t.partitions) == sorted(partitions)
    assert sorted((t.topic, p) for t in request.forgotten_topics_data for p in t.partitions) == sorted(forgotten)
    R = FetchRequest
    by_topic: dict[str, list] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(R.FetchTopic.FetchPartition(
            partition=p.partition, current_leader_epoch=p.current_leader_epoch, fetch_offset=p.fetch_offset,
            last_fetched_epoch=p.last_fetched_epoch, log_start_offset=p.log_start_offset,
            partition_max_bytes=p.partition_max_bytes))
    gone: dict[str, list] = {}
    for t, p in forgotten:
        gone.setdefault(t, []).append(p)
    theirs = R(replica_id=2, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20, isolation_level=0, session_id=seed * 7,
               session_epoch=seed % 5, topics=[R.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
               forgotten_topics_data=[R.ForgottenTopic(topic=t, partitions=ps) for t, ps in gone.items()], rack_id="")
    theirs.with_header(correlation_id=seed, client_id="broker-2-fetcher-1")
    assert frame == theirs.encode(version=12, header=True, framed=True)


REQUESTS = [(MetadataRequest, 1, dict(topics=[MetadataRequest.MetadataRequestTopic(name="t")])),
            (MetadataRequest, 9, dict(topics=None, allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False)),
            (ProduceRequest, 3, dict(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[])),
            (ProduceRequest, 9, dict(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
                ProduceRequest.TopicProduceData(name="t", partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=3, records=b"\x07" * 300)])]))]


@pytest.mark.parametrize("client_id", [None, "", "rdkafka", "prodüçer-" + "x" * 300])
@pytest.mark.parametrize("cls, version, fields", REQUESTS, ids=lambda r: getattr(r, "__name__", None))
def test_a_request_header_reads_as_kafka_pythons(cls, version, fields, client_id):
    request = cls(**fields)
    request.with_header(correlation_id=4242, client_id=client_id)
    frame = request.encode(version=version, header=True)
    expected = cls.decode(frame, version=version, header=True)
    header = wire.read_request_header(frame, cls.flexible_version_q(version))
    assert (header.correlation_id, header.client_id) == (expected.header.correlation_id, expected.header.client_id)
    assert cls.decode(memoryview(frame)[header.body:], version=version) == expected


def test_a_flexible_request_headers_tagged_fields_are_passed_over():
    body = MetadataRequest(topics=None, allow_auto_topic_creation=True,
                           include_topic_authorized_operations=False).encode(version=9)
    tags = bytes([2, 0, 3]) + b"abc" + bytes([200, 1, 1]) + b"z"  # two fields, the second's tag a 2-byte varint
    frame = struct.pack(">hhih", 3, 9, 7, 2) + b"id" + tags + body
    header = wire.read_request_header(frame, flexible=True)
    assert (header.correlation_id, header.client_id, frame[header.body:]) == (7, "id", body)


@pytest.mark.parametrize("frame", [struct.pack(">hhih", 3, 9, 7, 5) + b"id",  # client id past the end
                                   struct.pack(">hhih", 3, 9, 7, -1) + bytes([1, 0, 9]) + b"ab",  # a tag past it
                                   struct.pack(">hhi", 3, 9, 7)])  # cut short
def test_a_request_header_that_does_not_fit_its_frame_is_refused(frame):
    with pytest.raises((ValueError, IndexError, struct.error)):
        wire.read_request_header(frame, flexible=True)


# -- the decoders --------------------------------------------------------------------------------------

TOPICS = ["t", "topic-é", "日本語", "z" * 249]
MALFORMED = (ValueError, IndexError, struct.error)


def request_frame(request, version: int, correlation_id: int, client_id: str | None) -> bytes:
    """kafka-python's request frame as the broker reads it: without its size."""
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return request.encode(version=version, header=True, framed=True)[4:]


def body_of(frame: bytes, cls, version: int) -> int:
    return wire.read_request_header(frame, cls.flexible_version_q(version)).body


def client_id(rng: random.Random) -> str | None:
    return rng.choice([None, "", "rdkafka", "prodüçer-" + "x" * 300])


def random_records(rng: random.Random) -> bytes | None:
    return rng.choice([None, b"", rng.randbytes(rng.randrange(1, 300))])


def produce_request(rng: random.Random) -> ProduceRequest:
    P = ProduceRequest.TopicProduceData
    return ProduceRequest(
        transactional_id=rng.choice([None, "", "tx-é"]), acks=rng.choice([-1, 0, 1]),
        timeout_ms=rng.randrange(0, 1 << 31),
        topic_data=[P(name=name, partition_data=[P.PartitionProduceData(index=rng.randrange(0, 1 << 31),
                                                                        records=random_records(rng))
                                                 for _ in range(rng.randrange(0, 4))])
                    for name in rng.sample(TOPICS, rng.randrange(0, 4))])


def produce_params(request) -> ProduceParams:
    """What KafkaApis.produce takes from kafka-python's decoded request."""
    return ProduceParams(request.transactional_id, request.acks, request.timeout_ms,
                         [(TopicPartition(t.name, p.index), p.records or b"")
                          for t in request.topic_data for p in t.partition_data])


def fetch_request(rng: random.Random) -> FetchRequest:
    R = FetchRequest
    return R(replica_id=rng.choice([-1, 1, 1 << 30]), max_wait_ms=rng.randrange(0, 1 << 31),
             min_bytes=rng.randrange(0, 1 << 31), max_bytes=rng.randrange(0, 1 << 31),
             isolation_level=rng.choice([0, 1]), session_id=rng.randrange(0, 1 << 31),
             session_epoch=rng.randrange(-1, 1 << 31),
             topics=[R.FetchTopic(topic=name, partitions=[R.FetchTopic.FetchPartition(
                 partition=rng.randrange(0, 1 << 31), current_leader_epoch=rng.randrange(-1, 1 << 31),
                 fetch_offset=rng.randrange(-1, 1 << 63), last_fetched_epoch=rng.randrange(-1, 1 << 31),
                 log_start_offset=rng.randrange(-1, 1 << 63), partition_max_bytes=rng.randrange(0, 1 << 31))
                 for _ in range(rng.randrange(0, 4))]) for name in rng.sample(TOPICS, rng.randrange(0, 4))],
             forgotten_topics_data=[R.ForgottenTopic(topic=name, partitions=[
                 rng.randrange(0, 1 << 31) for _ in range(rng.randrange(0, 4))])
                 for name in rng.sample(TOPICS, rng.randrange(0, 3))],
             rack_id=rng.choice(["", "rack-é", "r" * 300]))


def fetch_params(request) -> FetchParams:
    """What KafkaApis.fetch takes from kafka-python's decoded request."""
    return FetchParams(
        replica_id=request.replica_id, max_wait_ms=request.max_wait_ms, min_bytes=request.min_bytes,
        max_bytes=request.max_bytes, session_id=request.session_id, session_epoch=request.session_epoch,
        partitions=[FetchPartition(t.topic, p.partition, p.fetch_offset, p.current_leader_epoch,
                                   p.partition_max_bytes, p.last_fetched_epoch, p.log_start_offset)
                    for t in request.topics for p in t.partitions],
        forgotten=[(t.topic, p) for t in request.forgotten_topics_data for p in t.partitions],
        replica_epoch=kafka_python_replica_epoch(request))


def diverging_of(p) -> tuple[int, int] | None:
    d = p.diverging_epoch
    return None if d is None or (d.epoch, d.end_offset) == (-1, -1) else (d.epoch, d.end_offset)


def fetch_response_data(response) -> FetchResponseData:
    """What the follower takes from kafka-python's decoded FetchResponse."""
    return FetchResponseData(response.header.correlation_id, response.error_code, response.session_id, [
        FetchedPartition(t.topic, p.partition_index, p.error_code, p.high_watermark, p.log_start_offset,
                         p.records or b"", diverging_of(p))
        for t in response.responses for p in t.partitions])


def assert_copied(records) -> None:
    """Records are bytes of their own, not views that would keep the whole frame alive."""
    assert all(type(r) is bytes for r in records)


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("version", range(3, 10))
def test_a_produce_request_reads_as_kafka_pythons(version, seed):
    rng = random.Random(seed * 100 + version)
    frame = request_frame(produce_request(rng), version, seed, client_id(rng))
    body = body_of(frame, ProduceRequest, version)
    expected = produce_params(ProduceRequest.decode(memoryview(frame)[body:], version=version))
    for buf in (frame, memoryview(frame), bytearray(frame)):
        params = wire.read_produce_request(buf, body, version)
        assert params == expected
        assert_copied(records for _, records in params.entries)


def replica_state_tags(rng: random.Random) -> bytes:
    """FetchRequest v12's tagged fields, in place of kafka-python's none: the cluster id (tag 0), kray's
    ReplicaState (tag 1; now and then too short to be one), a tag nobody knows; any of them."""
    fields = {}
    if rng.random() < 0.5:
        fields[0] = compact(rng.choice([b"", "clüster".encode()]))
    if rng.random() < 0.5:
        fields[1] = rng.choice([struct.pack(">iqB", 2, rng.randrange(-1, 1 << 63), 0), b"\x00" * 5])
    if rng.random() < 0.5:
        fields[rng.choice([7, 200, 20_000])] = rng.randbytes(rng.randrange(0, 20))
    return tagged(fields)


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("version", range(4, 13))
def test_a_fetch_request_reads_as_kafka_pythons(version, seed):
    rng = random.Random(seed * 100 + version)
    frame = request_frame(fetch_request(rng), version, seed, client_id(rng))
    if version == 12:
        assert frame[-1] == 0  # no tagged fields: some are put in their place
        frame = frame[:-1] + replica_state_tags(rng)
    body = body_of(frame, FetchRequest, version)
    expected = fetch_params(FetchRequest.decode(memoryview(frame)[body:], version=version))
    assert wire.read_fetch_request(frame, body, version) == expected
    assert wire.read_fetch_request(memoryview(frame), body, version) == expected


@pytest.mark.parametrize("replica_epoch", [-1, 0, 4_294_967_396])
def test_a_followers_fetch_request_reads_back(replica_epoch):
    partitions = [FetchPartition("t", 0, 10, 3, 1 << 20, 2, 0), FetchPartition("u", 4, 1 << 40, -1, 1, -1, -1),
                  FetchPartition("t", 1, 0)]
    frame = wire.fetch_request(9, "broker-2-fetcher-0", 2, 500, 1, 10 << 20, 77, 3, partitions, [("v", 5)],
                               replica_epoch=replica_epoch)[4:]
    params = wire.read_fetch_request(frame, wire.read_request_header(frame, True).body, wire.FETCH_VERSION)
    assert params == FetchParams(2, 500, 1, 10 << 20, [partitions[0], partitions[2], partitions[1]], 77, 3, [("v", 5)],
                                 replica_epoch)


# The flexible messages with tagged fields (unknown to both) at every level, written here by hand since
# kafka-python writes only those it knows; it reads them, and is the reference.

uvarint = wire._uvarint


def compact(b: bytes | None) -> bytes:
    return b"\x00" if b is None else uvarint(len(b) + 1) + b


def tagged(fields: dict[int, bytes]) -> bytes:
    return uvarint(len(fields)) + b"".join(uvarint(t) + uvarint(len(v)) + v for t, v in sorted(fields.items()))


def unknown_tags(rng: random.Random) -> bytes:
    """None, or one or two tagged fields no one knows, their tags of 1 to 3 bytes."""
    return tagged({t: rng.randbytes(rng.randrange(0, 20))
                   for t in rng.sample([5, 9, 200, 20_000], rng.randrange(0, 3))})


def array(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def request_header(rng: random.Random, api_key: int, version: int, correlation_id: int) -> bytes:
    client = rng.choice([b"", b"rdkafka", "prodüçer-".encode() + b"x" * 300])
    return struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client + unknown_tags(rng)


def tagged_produce_request(rng: random.Random, correlation_id: int) -> bytes:
    return (request_header(rng, 0, 9, correlation_id) + compact(rng.choice([None, b"tx"]))
            + struct.pack(">hi", -1, 30_000) + array([
                compact(name.encode()) + array([
                    struct.pack(">i", p) + compact(random_records(rng)) + unknown_tags(rng)
                    for p in range(rng.randrange(0, 4))]) + unknown_tags(rng)
                for name in rng.sample(TOPICS, rng.randrange(0, 4))]) + unknown_tags(rng))


def tagged_fetch_request(rng: random.Random, correlation_id: int) -> bytes:
    return (request_header(rng, 1, 12, correlation_id)
            + struct.pack(">iiiibii", 2, 500, 1, 1 << 20, 0, correlation_id, 4) + array([
                compact(name.encode()) + array([
                    struct.pack(">iiqiqi", p, 5, rng.randrange(0, 1 << 40), 4, 0, 1 << 20) + unknown_tags(rng)
                    for p in range(rng.randrange(0, 4))]) + unknown_tags(rng)
                for name in rng.sample(TOPICS, rng.randrange(0, 4))]) + array([
                compact(name.encode()) + array([struct.pack(">i", p) for p in range(rng.randrange(0, 3))])
                + unknown_tags(rng) for name in rng.sample(TOPICS, rng.randrange(0, 3))])
            + compact(rng.choice([b"", b"rack"])) + replica_state_tags(rng))


def tagged_fetch_response(rng: random.Random, correlation_id: int) -> bytes:
    def partition(p: int) -> bytes:
        tags = {t: rng.randbytes(rng.randrange(0, 20)) for t in rng.sample([5, 200], rng.randrange(0, 2))}
        if rng.random() < 0.5:
            tags[0] = struct.pack(">iqB", rng.choice([-1, 3]), rng.choice([-1, 1 << 40]), 0)  # diverging epoch
        if rng.random() < 0.5:
            tags[1] = struct.pack(">iiB", 3, 7, 0)  # current leader
        if rng.random() < 0.5:
            tags[2] = struct.pack(">qiB", 90, 6, 0)  # snapshot id
        aborted = rng.choice([None, [], [struct.pack(">qq", 7, 8) + unknown_tags(rng) for _ in range(2)]])
        return (struct.pack(">ihqqq", p, rng.choice([0, 1]), 100, 90, 0)
                + (b"\x00" if aborted is None else array(aborted))
                + struct.pack(">i", rng.choice([-1, 3])) + compact(random_records(rng)) + tagged(tags))
    body = struct.pack(">ihi", 0, 0, correlation_id) + array([
        compact(name.encode()) + array([partition(p) for p in range(rng.randrange(0, 4))]) + unknown_tags(rng)
        for name in rng.sample(TOPICS, rng.randrange(0, 4))]) + unknown_tags(rng)
    return struct.pack(">i", correlation_id) + unknown_tags(rng) + body


@pytest.mark.parametrize("seed", range(40))
def test_tagged_fields_at_every_level_are_passed_over_as_kafka_python_does(seed):
    rng = random.Random(seed)
    frame = tagged_produce_request(rng, seed)
    body = wire.read_request_header(frame, True).body
    assert wire.read_produce_request(frame, body, 9) == produce_params(ProduceRequest.decode(frame[body:], version=9))
    frame = tagged_fetch_request(rng, seed)
    body = wire.read_request_header(frame, True).body
    assert wire.read_fetch_request(frame, body, 12) == fetch_params(FetchRequest.decode(frame[body:], version=12))
    frame = tagged_fetch_response(rng, seed)
    expected = fetch_response_data(FetchResponse.decode(frame, version=12, header=True))
    assert wire.read_fetch_response(frame) == wire.read_fetch_response(memoryview(frame)) == expected


@pytest.mark.parametrize("seed", range(40))
def test_a_fetch_response_reads_back(seed):
    rng = random.Random(seed)
    parts = fetched(rng)
    response = wire.read_fetch_response(memoryview(wire.fetch_response(seed, 74 * (seed % 2), seed * 3, parts))[4:])
    assert response[:3] == (seed, 74 * (seed % 2), seed * 3)
    assert sorted(response.partitions) == sorted(parts)  # grouped by topic on the wire
    assert_copied(p.records for p in response.partitions)


@pytest.mark.parametrize("seed", range(40))
def test_a_kafka_python_fetch_response_reads_as_kafka_pythons(seed):
    """With what the broker's own never carries: aborted transactions, a preferred read replica, a last
    stable offset, the current leader and snapshot id (tags 1 and 2), a diverging epoch of (-1, -1)."""
    rng = random.Random(seed)
    R = FetchResponse
    P = R.FetchableTopicResponse.PartitionData
    topics = []
    for name in rng.sample(TOPICS, rng.randrange(0, 4)):
        partitions = []
        for p in range(rng.randrange(0, 4)):
            data = P(partition_index=p, error_code=rng.choice([0, 1, 74]), high_watermark=rng.randrange(-1, 1 << 40),
                     last_stable_offset=rng.randrange(-1, 1 << 40), log_start_offset=rng.randrange(-1, 1 << 40),
                     aborted_transactions=rng.choice([None, [], [P.AbortedTransaction(producer_id=7, first_offset=3)]]),
                     preferred_read_replica=rng.choice([-1, 2]), records=random_records(rng))
            if rng.random() < 0.5:
                data.diverging_epoch = P.EpochEndOffset(epoch=rng.choice([-1, 5]), end_offset=rng.choice([-1, 1 << 40]))
            if rng.random() < 0.3:
                data.current_leader = P.LeaderIdAndEpoch(leader_id=3, leader_epoch=4)
            if rng.random() < 0.3:
                data.snapshot_id = P.SnapshotId(end_offset=9, epoch=2)
            partitions.append(data)
        topics.append(R.FetchableTopicResponse(topic=name, partitions=partitions))
    response = R(throttle_time_ms=rng.randrange(0, 100), error_code=rng.choice([0, 70]), session_id=seed,
                 responses=topics)
    frame = kafka_python_frame(response, 12, seed)[4:]
    assert wire.read_fetch_response(frame) == fetch_response_data(R.decode(frame, version=12, header=True))


def valid_frames(seed: int) -> list[tuple[str, bytes, int, int]]:
    """(kind, frame, body start, version): each decoder's frames, at several versions."""
    rng = random.Random(seed)
    out = []
    for version in (3, 7, 9):
        frame = request_frame(produce_request(rng), version, seed, client_id(rng))
        out.append(("produce", frame, body_of(frame, ProduceRequest, version), version))
    for version in (4, 6, 10, 11, 12):
        frame = request_frame(fetch_request(rng), version, seed, client_id(rng))
        out.append(("fetch", frame, body_of(frame, FetchRequest, version), version))
    for kind, frame, version in (("produce", tagged_produce_request(rng, seed), 9),
                                 ("fetch", tagged_fetch_request(rng, seed), 12)):
        out.append((kind, frame, wire.read_request_header(frame, True).body, version))
    out.append(("response", tagged_fetch_response(rng, seed), 0, 12))
    out.append(("response", wire.fetch_response(seed, 0, seed, fetched(rng))[4:], 0, 12))
    return out


def decode(kind: str, frame, body: int, version: int):
    if kind == "produce":
        return wire.read_produce_request(frame, body, version)
    if kind == "fetch":
        return wire.read_fetch_request(frame, body, version)
    return wire.read_fetch_response(frame)


@pytest.mark.parametrize("seed", range(6))
def test_every_proper_prefix_of_a_frame_is_refused(seed):
    for kind, frame, body, version in valid_frames(seed):
        decode(kind, frame, body, version)
        for end in range(len(frame)):
            with pytest.raises(MALFORMED):
                decode(kind, frame[:end], body, version)


PRODUCE_V3_HEAD = struct.pack(">hhi", -1, 1, 100)  # no transactional id, acks, timeout
PRODUCE_V9_HEAD = b"\x00" + struct.pack(">hi", 1, 100)
PRODUCE_V9_TOPIC = b"\x02\x02t\x02" + struct.pack(">i", 0)  # a topic "t", a partition 0, then its records
FETCH_V7_HEAD = struct.pack(">iiiibii", 2, 500, 1, 1, 0, 0, -1)
FETCH_V12_HEAD = struct.pack(">iiiibii", 2, 500, 1, 1 << 20, 0, 0, -1)
FETCH_V12_TOPIC = compact(b"t") + array([struct.pack(">iiqiqi", 0, 1, 2, 3, 4, 5) + b"\x00"]) + b"\x00"
FETCHED_V12 = (struct.pack(">i", 1) + b"\x00" + struct.pack(">ihi", 0, 0, 0) + b"\x02\x02t\x02"
               + struct.pack(">ihqqq", 0, 0, 1, 1, 0) + b"\x00" + struct.pack(">i", -1))  # a partition, to its records


@pytest.mark.parametrize("kind, frame, version", [
    pytest.param("produce", PRODUCE_V3_HEAD + struct.pack(">i", -1), 3, id="v3 null topics"),
    pytest.param("produce", PRODUCE_V3_HEAD + struct.pack(">ih", 1, -1), 3, id="v3 null topic name"),
    pytest.param("produce", PRODUCE_V3_HEAD + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">i", -1), 3,
                 id="v3 null partitions"),
    pytest.param("produce", PRODUCE_V3_HEAD + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 1, 0, 5) + b"abc",
                 3, id="v3 records past the end"),
    pytest.param("produce", struct.pack(">h", 10) + b"tx", 3, id="v3 transactional id past the end"),
    pytest.param("produce", struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">hii", 1, 100, 0), 3,
                 id="v3 transactional id not UTF-8"),
    pytest.param("produce", PRODUCE_V9_HEAD + b"\x00\x00", 9, id="v9 null topics"),
    pytest.param("produce", PRODUCE_V9_HEAD + b"\x02\x00", 9, id="v9 null topic name"),
    pytest.param("produce", PRODUCE_V9_HEAD + PRODUCE_V9_TOPIC + b"\xff\xff\xff\xff\xff\x01", 9,
                 id="v9 6-byte varint"),
    pytest.param("produce", PRODUCE_V9_HEAD + PRODUCE_V9_TOPIC + b"\x10abc", 9, id="v9 records past the end"),
    pytest.param("produce", PRODUCE_V9_HEAD + b"\x01\x01\x01\x09abc", 9, id="v9 tagged field past the end"),
    pytest.param("produce", PRODUCE_V9_HEAD + b"\x01\x00", 10, id="v10"),
    pytest.param("produce", PRODUCE_V3_HEAD + struct.pack(">i", 0), 2, id="v2"),
    pytest.param("fetch", FETCH_V12_HEAD + array([FETCH_V12_TOPIC]) + b"\x00", 12, id="v12 null forgotten topics"),
    pytest.param("fetch", FETCH_V12_HEAD + b"\x01\x01\x00\x00", 12, id="v12 null rack id"),
    pytest.param("fetch", FETCH_V12_HEAD + b"\x01\x01\x05ab\x00", 12, id="v12 rack id past the end"),
    pytest.param("fetch", FETCH_V12_HEAD + b"\x01\x01\x01\x01\x01\x0dab", 12, id="v12 replica state past the end"),
    pytest.param("fetch", FETCH_V12_HEAD + b"\x02\x80\x80\x80\x80\x80\x01", 12, id="v12 6-byte varint"),
    pytest.param("fetch", FETCH_V7_HEAD + struct.pack(">i", -1), 7, id="v7 null topics"),
    pytest.param("fetch", FETCH_V7_HEAD + struct.pack(">ii", 0, -1), 7, id="v7 null forgotten topics"),
    pytest.param("fetch", FETCH_V7_HEAD + struct.pack(">iih", 0, 0, -1), 11, id="v11 null rack id"),
    pytest.param("fetch", FETCH_V7_HEAD + struct.pack(">iih", 0, 0, 3) + b"r", 11, id="v11 rack id past the end"),
    pytest.param("fetch", struct.pack(">iiiib", 2, 500, 1, 1, 0) + struct.pack(">i", 0), 3, id="v3"),
    pytest.param("response", struct.pack(">i", 1) + b"\x00" + struct.pack(">ihi", 0, 0, 0) + b"\x00\x00", 12,
                 id="null topics"),
    pytest.param("response", FETCHED_V12 + b"\x09abc", 12, id="records past the end"),
    pytest.param("response", FETCHED_V12 + b"\x00\x01\x00\x03abc\x00\x00", 12, id="diverging epoch too short"),
])
def test_a_malformed_frame_is_refused(kind, frame, version):
    with pytest.raises(MALFORMED):
        decode(kind, frame, 0, version)
