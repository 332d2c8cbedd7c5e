"""The struct-encoded messages of the replication round write exactly the bytes of kafka-python's
messages that the broker serves at every other version (kafka_apis' builders), and kafka-python (as
librdkafka would) decodes them back to the same fields."""
from __future__ import annotations

import random
import struct

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from actors.broker.network import kafka_apis, wire
from actors.data_protocol import FetchedPartition, FetchPartition, FetchResult, ProduceResult


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
    assert request.replica_id == 2 and wire.replica_epoch(request) == replica_epoch
    assert bool(request.unknown_tags) == (replica_epoch >= 0)
    v15 = FetchRequest(replica_state=FetchRequest.ReplicaState(replica_id=2, replica_epoch=replica_epoch),
                       max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                       session_epoch=0, topics=[], forgotten_topics_data=[], rack_id="")
    assert wire.replica_epoch(FetchRequest.decode(v15.encode(version=15), version=15)) == replica_epoch


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
