"""A producer for tests and tools: confluent-kafka (librdkafka) with Kafka's defaults for acks=all
(enable.idempotence), made synchronous: `send` returns once every record is acknowledged, or raises
with Kafka's error name. Load generators use confluent-kafka's asynchronous API directly (load.py)."""
from __future__ import annotations

from typing import NamedTuple

import confluent_kafka

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
        self._producer = confluent_kafka.Producer(producer_config(bootstrap_servers, acks, delivery_timeout_ms,
                                                                  **overrides))

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
