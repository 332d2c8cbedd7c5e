"""actors.clients.producer.client_stats: librdkafka's statistics JSON (its STATISTICS.md) as a ClientStats,
decoding only the brokers, the partitions where records wait and the idempotence state."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from actors.clients.producer import client_stats
from actors.records import tp_key

# what librdkafka 2.16 wrote for an idempotent producer with four records queued and no broker reachable
REAL = (Path(__file__).parent / "data" / "librdkafka_statistics.json").read_text()


def window(avg_us: int, p99_us: int) -> dict:
    return {"min": 1, "max": 9 * p99_us, "avg": avg_us, "p50": avg_us, "p99": p99_us, "cnt": 10}


def broker(nodeid: int, state: str = "UP", **counts) -> dict:
    return {"name": f"localhost:9{nodeid}/{nodeid}", "nodeid": nodeid, "state": state, "rtt": window(4_000, 20_000),
            "int_latency": window(150_000, 900_000), "outbuf_cnt": counts.get("outbuf", 0),
            "waitresp_cnt": counts.get("waitresp", 0), "txerrs": counts.get("txerrs", 0), "txretries": 2,
            "req_timeouts": 0, "toppars": {"orders-0": {"topic": "orders", "partition": 0}}}


def partition(index: int, leader: int, queued: int, sending: int, in_flight: int) -> dict:
    """A partition's object as librdkafka writes it: its index first, counts among many other fields."""
    return {"partition": index, "broker": leader, "leader": leader, "desired": False, "unknown": False,
            "msgq_cnt": queued, "msgq_bytes": 100 * queued, "xmit_msgq_cnt": sending, "xmit_msgq_bytes": 0,
            "fetchq_cnt": 0, "fetch_state": "none", "next_offset": 0, "txmsgs": 7, "msgs_inflight": in_flight,
            "next_ack_seq": 0, "acked_msgid": 0}


def topic(name: str, partitions: list[dict]) -> dict:
    return {"topic": name, "age": 1502, "batchsize": window(0, 0), "batchcnt": window(0, 0),
            "partitions": {str(p["partition"]): p for p in partitions}}


STATS = {
    "name": "rdkafka#producer-1", "time": 1_800_000_000, "msg_cnt": 19,
    "brokers": {"a": broker(1, waitresp=5, outbuf=1), "b": broker(2, "DOWN", txerrs=3),
                "bootstrap": {**broker(-1), "nodeid": -1}},
    "topics": {"orders": topic("orders", [partition(0, 1, 12, 0, 0),
                                          partition(1, 2, 0, 0, 0),  # nothing waits: left out
                                          partition(2, -1, 0, 3, 4),
                                          partition(-1, -1, 5, 0, 0)])},  # the unassigned queue: left out
    "eos": {"idemp_state": "DrainBump", "idemp_stateage": 3, "producer_id": 7, "producer_epoch": 2},
    "tx": 40, "txmsgs": 39,
}


@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":"), (", ", ":")], ids=["spaced", "tight", "librdkafka"])
def test_brokers_by_id_in_ms_and_only_the_partitions_where_records_wait(separators):
    got = client_stats("p0", json.dumps(STATS, separators=separators), 123.0)
    assert (got.producer, got.ts_ms, got.idempotence, got.producer_epoch) == ("p0", 123.0, "DrainBump", 2)
    assert sorted(got.brokers) == [1, 2]  # the bootstrap entry (-1) is not a broker
    one = got.brokers[1]
    assert (one.state, one.rtt_ms_avg, one.rtt_ms_p99, one.int_latency_ms_avg, one.int_latency_ms_p99) == \
        ("UP", 4.0, 20.0, 150.0, 900.0)
    assert (one.outbuf, one.waitresp, got.brokers[2].state, got.brokers[2].txerrs) == (1, 5, "DOWN", 3)
    assert {tp: (p.leader, p.queued, p.sending, p.in_flight) for tp, p in got.partitions.items()} == {
        "orders-0": (1, 12, 0, 0), "orders-2": (-1, 0, 3, 4)}


def test_statistics_before_the_first_metadata_are_empty():
    got = client_stats("probe", json.dumps({"name": "rdkafka#producer-2"}), 1.0)
    assert (got.brokers, got.partitions, got.idempotence) == ({}, {}, None)


def test_librdkafkas_own_statistics_read_with_partitions_where_records_wait():
    """The JSON librdkafka wrote (its spacing, its field order, a bootstrap broker, the unassigned queue),
    with two partitions made from its unassigned queue's object."""
    real = json.loads(REAL)
    unassigned = real["topics"]["orders"]["partitions"]["-1"]
    assert client_stats("p", REAL, 0).partitions == {}  # four records queued, none yet in a partition
    text = REAL.replace('"partitions":{ "-1": {', '"partitions":{ "3": { "partition":3, "broker":2, "leader":2, '
                        '"desired":false, "unknown":false, "msgq_cnt":0, "msgq_bytes":0, "xmit_msgq_cnt":0, '
                        '"xmit_msgq_bytes":0, "msgs_inflight":6}, "4": { "partition":4, "broker":-1, "leader":-1, '
                        '"desired":true, "unknown":true, "msgq_cnt":1, "msgq_bytes":1, "xmit_msgq_cnt":0, '
                        '"xmit_msgq_bytes":0, "msgs_inflight":0}, "-1": {', 1)
    got = client_stats("p", text, 0)
    assert {tp: (p.leader, p.queued, p.sending, p.in_flight) for tp, p in got.partitions.items()} == {
        "orders-3": (2, 0, 0, 6), "orders-4": (-1, 1, 0, 0)}
    assert (got.idempotence, got.producer_epoch, got.brokers) == ("WaitTransport", -1, {})  # bootstrap only
    assert unassigned["msgq_cnt"] == 4


def test_names_that_are_keys_elsewhere_are_read_as_names():
    """Topics named eos, brokers, topic or partition, and a client id of brokers: each a value where the
    reading looks for a key of that name."""
    stats = {"name": "x", "client_id": "brokers", "type": "producer", "brokers": {"a": broker(3)}, "topics": {
        "eos": topic("eos", [partition(0, 1, 2, 0, 0)]),
        "brokers": topic("brokers", [partition(5, 3, 0, 1, 0), partition(6, 3, 0, 0, 0)]),
        "topic": topic("topic", [partition(1, 2, 0, 0, 9)]),
        "partition": topic("partition", [partition(2, 2, 4, 0, 0)])}}
    for separators in ((", ", ": "), (",", ":")):
        got = client_stats("p", json.dumps(stats, separators=separators), 0)
        assert (got.idempotence, sorted(got.brokers)) == (None, [3])
        assert sorted(got.partitions) == ["brokers-5", "eos-0", "partition-2", "topic-1"]


def full_decode(producer: str, s: dict, ts_ms: float) -> dict:
    """The oracle: every partition decoded and looked at."""
    return {"brokers": sorted(b["nodeid"] for b in s.get("brokers", {}).values() if b["nodeid"] >= 0),
            "partitions": {tp_key(t, int(p)): (v["leader"], v["msgq_cnt"], v["xmit_msgq_cnt"], v["msgs_inflight"])
                           for t, topic_ in s.get("topics", {}).items() for p, v in topic_["partitions"].items()
                           if p != "-1" and v["msgq_cnt"] + v["xmit_msgq_cnt"] + v["msgs_inflight"] > 0},
            "idempotence": s.get("eos", {}).get("idemp_state")}


@pytest.mark.parametrize("seed", range(20))
def test_what_is_read_is_what_decoding_everything_gives(seed):
    rng = random.Random(seed)
    names = rng.sample(["t0", "t1", "topic", "eos", "brokers", "partition", "msgq_cnt"], rng.randint(0, 4))
    stats = {"name": "x", "client_id": rng.choice(["rdkafka", "brokers", "eos", "topic"]),
             "brokers": {str(b): broker(b) for b in range(-1, rng.randint(0, 4))},
             "topics": {n: topic(n, [partition(i, rng.randint(-1, 3), rng.choice([0, 0, 0, 1, 12]),
                                               rng.choice([0, 0, 3]), rng.choice([0, 0, 0, 1, 250]))
                                     for i in range(-1, rng.randint(0, 60))]) for n in names}}
    if rng.random() < 0.7:
        stats["eos"] = {"idemp_state": rng.choice(["Assigned", "DrainBump"]), "producer_epoch": 0}
    got = client_stats("p", json.dumps(stats, separators=rng.choice([(", ", ": "), (",", ":")])), 0)
    assert {"brokers": sorted(got.brokers), "idempotence": got.idempotence,
            "partitions": {tp: (p.leader, p.queued, p.sending, p.in_flight) for tp, p in got.partitions.items()}} \
        == full_decode("p", stats, 0)
