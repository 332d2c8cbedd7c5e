"""Topic-level configs as Kafka 2.8 names, types and checks them (LogConfig's definitions), for the
admin that writes `/config/topics/T` and the brokers that apply it.

kray applies min.insync.replicas, unclean.leader.election.enable, retention.ms, retention.bytes,
segment.bytes and max.message.bytes. The other topic configs Kafka knows are accepted and stored
(so Kafka's tools can round-trip them) but change nothing here. A name Kafka does not know, or a
value of the wrong type or range, is refused whole with Kafka's InvalidConfigurationException.
"""
from __future__ import annotations

from typing import Callable

from coordination.errors import InvalidConfigurationException

INT_MAX = 2 ** 31 - 1


def _int(low: int, high: int = INT_MAX) -> Callable[[str], int]:
    def parse(value: str) -> int:
        number = int(value.strip())
        if not low <= number <= high:
            raise ValueError(f"Value must be at least {low}" if number < low else f"Value must be no more than {high}")
        return number
    return parse


def _long(low: int) -> Callable[[str], int]:
    return _int(low, 2 ** 63 - 1)


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("Expected value to be either true or false")
    return lowered == "true"


def _delete_policy(value: str) -> str:
    if value.strip() != "delete":
        raise ValueError("kray deletes old segments only: log compaction ('compact') is not supported")
    return "delete"


APPLIED: dict[str, Callable[[str], object]] = {
    "min.insync.replicas": _int(1),
    "unclean.leader.election.enable": _bool,
    "retention.ms": _long(-1),
    "retention.bytes": _long(-1),
    "segment.bytes": _int(14),
    "max.message.bytes": _int(0),
    "cleanup.policy": _delete_policy,
}
STORED_ONLY = {  # Kafka 2.8 topic configs that kray keeps but does not act on
    "compression.type", "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes", "leader.replication.throttled.replicas",
    "max.compaction.lag.ms", "message.downconversion.enable", "message.format.version",
    "message.timestamp.difference.max.ms", "message.timestamp.type", "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms", "preallocate", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
}


def parse_topic_config(overrides: dict[str, str]) -> dict[str, object]:
    """The applied configs among `overrides`, typed; InvalidConfigurationException for any bad one."""
    out = {}
    for name, value in overrides.items():
        if name in STORED_ONLY:
            continue
        parse = APPLIED.get(name)
        if parse is None:
            raise InvalidConfigurationException(f"Unknown topic config name: {name}")
        try:
            out[name] = parse(str(value))
        except ValueError as e:
            reason = "Not a number of type INT" if "invalid literal" in str(e) else str(e)
            raise InvalidConfigurationException(f"Invalid value {value} for configuration {name}: {reason}") from None
    return out
