"""A producer for tests and tools: confluent-kafka (librdkafka) with Kafka's defaults for acks=all
(enable.idempotence), made synchronous: `send` returns once every record is acknowledged, or raises
with Kafka's error name. Load generators use confluent-kafka's asynchronous API directly (load.py)."""
from __future__ import annotations

import json
import re
from typing import NamedTuple

import confluent_kafka

from actors.records import BrokerClientStats, ClientStats, PartitionClientStats, tp_key
from coordination.errors import KrayError


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int  # -1 with acks=0


class ProducerError(KrayError):
    """A record could not be delivered: a non-retriable error, or delivery.timeout.ms ran out."""


def producer_config(bootstrap_servers: str, acks: int, delivery_timeout_ms: int = 120_000, **overrides) -> dict:
    """librdkafka settings: idempotent with acks=all (Kafka's enable.idempotence default), else plain."""
    return {"bootstrap.servers": bootstrap_servers, "acks": "all" if acks == -1 else str(acks),
            "enable.idempotence": acks == -1, "message.timeout.ms": delivery_timeout_ms, "linger.ms": 2,
            "log_level": 3, **overrides}


class Producer:
    def __init__(self, bootstrap_servers: str, acks: int = -1, delivery_timeout_ms: int = 120_000, **overrides):
        self.acks = acks
        self._stats = "{}"  # librdkafka's latest statistics JSON, decoded when asked for
        self._producer = confluent_kafka.Producer(producer_config(
            bootstrap_servers, acks, delivery_timeout_ms, **{"statistics.interval.ms": 1000, **overrides},
            stats_cb=self._on_stats))

    def _on_stats(self, raw: str) -> None:
        self._stats = raw

    def in_flight(self) -> int:
        """Records not yet acknowledged (queued or sent)."""
        return len(self._producer)

    def stuck(self) -> dict:
        """Where unacknowledged records wait, from librdkafka's latest statistics (once a second): each
        such partition with the leader librdkafka knows, each broker's state, the idempotence state."""
        stats = client_stats("producer", self._stats, 0.0)
        return {"partitions": {tp: p.model_dump() for tp, p in stats.partitions.items()},
                "idempotence": stats.idempotence, "brokers": {b: s.state for b, s in stats.brokers.items()}}

    def send(self, topic: str, values: list[bytes], keys: list[bytes | None] | None = None,
             partition: int | None = None) -> list[RecordMetadata]:
        """Deliver the records (to `partition`, or by key); their metadata in the order given."""
        keys = keys or [None] * len(values)
        done: list[RecordMetadata | None] = [None] * len(values)
        errors: list[str] = []

        def delivered(i: int):
            def report(err, msg) -> None:
                if err is not None:
                    errors.append(f"{err.name()}: {err.str()}")
                else:
                    done[i] = RecordMetadata(msg.topic(), msg.partition(), msg.offset() if self.acks else -1)
            return report

        for i, (key, value) in enumerate(zip(keys, values)):
            self._producer.produce(topic, value, key, partition=-1 if partition is None else partition,
                                   on_delivery=delivered(i))
            self._producer.poll(0)
        left = self._producer.flush(300)
        if errors or left:
            raise ProducerError(errors[0] if errors else f"{left} records not delivered")
        return done


_DECODE = json.JSONDecoder().raw_decode
_SPACE = re.compile(r"\s*")
_BROKERS = re.compile(r'"brokers"\s*:')
_WAITING = re.compile(r'"(?:msgq_cnt|xmit_msgq_cnt|msgs_inflight)"\s*:\s*[1-9]')  # a partition where records wait


def _value(raw: str, key_at: int):
    """The JSON value of the key whose quoted name starts at `key_at`."""
    return _DECODE(raw, _SPACE.match(raw, raw.index(":", key_at) + 1).end())[0]


def _key_before(raw: str, name: str, end: int) -> int:
    """Where the last key `name` before `end` starts (a quoted string followed by a colon: not a value
    such as a topic's own name), -1 without one."""
    quoted = f'"{name}"'
    at = raw.rfind(quoted, 0, end)
    while at >= 0 and raw[_SPACE.match(raw, at + len(quoted)).end()] != ":":
        at = raw.rfind(quoted, 0, at)
    return at


def client_stats(producer: str, raw: str, ts_ms: float) -> ClientStats:
    """librdkafka's statistics JSON (its STATISTICS.md; times in microseconds there) as a ClientStats:
    every broker it knows by id, the partitions where records wait. Only those parts are decoded: the
    whole JSON (about 1 KB a partition) cost the load client 9 µs a record at 1,000 records/s over 1,000
    partitions (bench_load_cost), and would take most of a second's CPU at 100,000. librdkafka writes the
    brokers first and "eos" after the topics; each partition's object starts with its "partition" and
    sits in its topic's object, which starts with its "topic"."""
    def ms(window: dict, key: str) -> float:
        return window.get(key, 0) / 1000

    found = _BROKERS.search(raw)  # the first key "brokers" (a client id could be the string "brokers")
    at = found.start() if found else -1
    brokers = {b["nodeid"]: BrokerClientStats(
        state=b["state"], rtt_ms_avg=ms(b["rtt"], "avg"), rtt_ms_p99=ms(b["rtt"], "p99"),
        int_latency_ms_avg=ms(b["int_latency"], "avg"), int_latency_ms_p99=ms(b["int_latency"], "p99"),
        outbuf=b["outbuf_cnt"], waitresp=b["waitresp_cnt"], txerrs=b["txerrs"], txretries=b["txretries"],
        req_timeouts=b["req_timeouts"]) for b in (_value(raw, at) if at >= 0 else {}).values() if b["nodeid"] >= 0}
    partitions, read = {}, set()
    for waiting in _WAITING.finditer(raw):
        start = raw.rfind("{", 0, raw.rfind('"partition"', 0, waiting.start()))
        if start in read:  # another of its counts
            continue
        read.add(start)
        v = _DECODE(raw, start)[0]
        if v["partition"] >= 0:  # not the queue of records waiting for a partition (-1)
            partitions[tp_key(_value(raw, _key_before(raw, "topic", start)), v["partition"])] = PartitionClientStats(
                leader=v["leader"], queued=v["msgq_cnt"], sending=v["xmit_msgq_cnt"],
                in_flight=v.get("msgs_inflight", 0))
    at = _key_before(raw, "eos", len(raw))
    eos = _value(raw, at) if at >= 0 else {}
    if not isinstance(eos, dict) or "idemp_state" not in eos:  # a topic named eos, and no idempotence
        eos = {}
    return ClientStats(producer=producer, ts_ms=ts_ms, brokers=brokers, partitions=partitions,
                       idempotence=eos.get("idemp_state"), producer_epoch=eos.get("producer_epoch"))
