"""actors.clients.producer.client_stats: librdkafka's statistics JSON (its STATISTICS.md) as a ClientStats."""
from __future__ import annotations

from actors.clients.producer import client_stats


def window(avg_us: int, p99_us: int) -> dict:
    return {"min": 1, "max": 9 * p99_us, "avg": avg_us, "p50": avg_us, "p99": p99_us, "cnt": 10}


def broker(nodeid: int, state: str = "UP", **counts) -> dict:
    return {"name": f"localhost:9{nodeid}/{nodeid}", "nodeid": nodeid, "state": state, "rtt": window(4_000, 20_000),
            "int_latency": window(150_000, 900_000), "outbuf_cnt": counts.get("outbuf", 0),
            "waitresp_cnt": counts.get("waitresp", 0), "txerrs": counts.get("txerrs", 0), "txretries": 2,
            "req_timeouts": 0}


STATS = {
    "name": "rdkafka#producer-1", "time": 1_800_000_000,
    "brokers": {"a": broker(1, waitresp=5, outbuf=1), "b": broker(2, "DOWN", txerrs=3),
                "bootstrap": {**broker(-1), "nodeid": -1}},
    "topics": {"orders": {"partitions": {
        "0": {"leader": 1, "msgq_cnt": 12, "xmit_msgq_cnt": 0, "msgs_inflight": 0},
        "1": {"leader": 2, "msgq_cnt": 0, "xmit_msgq_cnt": 0, "msgs_inflight": 0},  # nothing waits: left out
        "2": {"leader": -1, "msgq_cnt": 0, "xmit_msgq_cnt": 3, "msgs_inflight": 4},
        "-1": {"leader": -1, "msgq_cnt": 5, "xmit_msgq_cnt": 0, "msgs_inflight": 0}}}},  # the unassigned queue
    "eos": {"idemp_state": "DrainBump", "producer_id": 7, "producer_epoch": 2},
}


def test_brokers_by_id_in_ms_and_only_the_partitions_where_records_wait():
    got = client_stats("p0", STATS, 123.0)
    assert (got.producer, got.ts_ms, got.idempotence, got.producer_epoch) == ("p0", 123.0, "DrainBump", 2)
    assert sorted(got.brokers) == [1, 2]  # the bootstrap entry (-1) is not a broker
    one = got.brokers[1]
    assert (one.state, one.rtt_ms_avg, one.rtt_ms_p99, one.int_latency_ms_avg, one.int_latency_ms_p99) == \
        ("UP", 4.0, 20.0, 150.0, 900.0)
    assert (one.outbuf, one.waitresp, got.brokers[2].state, got.brokers[2].txerrs) == (1, 5, "DOWN", 3)
    assert {tp: (p.leader, p.queued, p.sending, p.in_flight) for tp, p in got.partitions.items()} == {
        "orders-0": (1, 12, 0, 0), "orders-2": (-1, 0, 3, 4)}


def test_statistics_before_the_first_metadata_are_empty():
    got = client_stats("probe", {"name": "rdkafka#producer-2"}, 1.0)
    assert (got.brokers, got.partitions, got.idempotence) == ({}, {}, None)
