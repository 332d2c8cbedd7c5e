"""What DescribeConfigs answers (Kafka's ConfigHelper): every topic config with its value in force and
where it comes from (the topic's override, the broker's setting, Kafka's default), and the broker's
settings. Pure: the overrides and the broker's configuration come in, entries go out.

kray has no dynamic broker configs: every broker setting is read-only, as a static one is in Kafka.
"""
from __future__ import annotations

import re
from enum import IntEnum
from typing import NamedTuple

from pydantic import BaseModel

from actors.config import BrokerConfig, ControllerConfig


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(IntEnum):
    """Kafka's ConfigDef.Type, as DescribeConfigs v3 names it."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class Synonym(NamedTuple):
    name: str
    value: str | None
    source: ConfigSource


class ConfigEntry(NamedTuple):
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    type: ConfigType
    synonyms: list[Synonym]  # the value's sources in order of precedence, the one in force first


LONG_MAX = str(2 ** 63 - 1)
# Kafka 2.8's topic configs (LogConfig): type, Kafka's default, the broker setting that stands for it, and
# kray's field for that setting where kray has one (its value then is the broker's)
TOPIC_CONFIGS: dict[str, tuple[ConfigType, str, str, tuple[str, str] | None]] = {
    "cleanup.policy": (ConfigType.LIST, "delete", "log.cleanup.policy", None),
    "compression.type": (ConfigType.STRING, "producer", "compression.type", None),
    "delete.retention.ms": (ConfigType.LONG, "86400000", "log.cleaner.delete.retention.ms", None),
    "file.delete.delay.ms": (ConfigType.LONG, "60000", "log.segment.delete.delay.ms", None),
    "flush.messages": (ConfigType.LONG, LONG_MAX, "log.flush.interval.messages", None),
    "flush.ms": (ConfigType.LONG, LONG_MAX, "log.flush.interval.ms", None),
    "follower.replication.throttled.replicas": (ConfigType.LIST, "", "follower.replication.throttled.replicas",
                                                None),
    "index.interval.bytes": (ConfigType.INT, "4096", "log.index.interval.bytes", None),
    "leader.replication.throttled.replicas": (ConfigType.LIST, "", "leader.replication.throttled.replicas", None),
    "max.compaction.lag.ms": (ConfigType.LONG, LONG_MAX, "log.cleaner.max.compaction.lag.ms", None),
    "max.message.bytes": (ConfigType.INT, "1048588", "message.max.bytes", ("broker", "message_max_bytes")),
    "message.downconversion.enable": (ConfigType.BOOLEAN, "true", "log.message.downconversion.enable", None),
    "message.format.version": (ConfigType.STRING, "2.8-IV1", "log.message.format.version", None),
    "message.timestamp.difference.max.ms": (ConfigType.LONG, LONG_MAX, "log.message.timestamp.difference.max.ms",
                                            None),
    "message.timestamp.type": (ConfigType.STRING, "CreateTime", "log.message.timestamp.type", None),
    "min.cleanable.dirty.ratio": (ConfigType.DOUBLE, "0.5", "log.cleaner.min.cleanable.ratio", None),
    "min.compaction.lag.ms": (ConfigType.LONG, "0", "log.cleaner.min.compaction.lag.ms", None),
    "min.insync.replicas": (ConfigType.INT, "1", "min.insync.replicas", ("broker", "min_insync_replicas")),
    "preallocate": (ConfigType.BOOLEAN, "false", "log.preallocate", None),
    "retention.bytes": (ConfigType.LONG, "-1", "log.retention.bytes", ("broker", "log_retention_bytes")),
    "retention.ms": (ConfigType.LONG, "604800000", "log.retention.ms", ("broker", "log_retention_ms")),
    "segment.bytes": (ConfigType.INT, "1073741824", "log.segment.bytes", ("broker", "log_segment_bytes")),
    "segment.index.bytes": (ConfigType.INT, "10485760", "log.index.size.max.bytes", None),
    "segment.jitter.ms": (ConfigType.LONG, "0", "log.roll.jitter.ms", None),
    "segment.ms": (ConfigType.LONG, "604800000", "log.roll.ms", None),
    "unclean.leader.election.enable": (ConfigType.BOOLEAN, "false", "unclean.leader.election.enable",
                                       ("controller", "unclean_leader_election_enable")),
}
LIST_CONFIGS = {name for name, (kind, *_) in TOPIC_CONFIGS.items() if kind is ConfigType.LIST}
_KAFKA_NAME = re.compile(r"[a-z]+(?:\.[a-z]+)+")
_TYPES = {bool: ConfigType.BOOLEAN, int: ConfigType.LONG, float: ConfigType.DOUBLE, str: ConfigType.STRING}


def _text(value) -> str | None:
    return None if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _broker_setting(model: BaseModel, field: str) -> Synonym:
    """A broker setting as a synonym: static when the broker's configuration sets it, else Kafka's default."""
    source = ConfigSource.STATIC_BROKER_CONFIG if field in model.model_fields_set else ConfigSource.DEFAULT_CONFIG
    return Synonym(kafka_name(model, field), _text(getattr(model, field)), source)


def kafka_name(model: BaseModel, field: str) -> str:
    """The Kafka name a setting's description opens with ("log.retention.ms", ...)."""
    match = _KAFKA_NAME.match(type(model).model_fields[field].description or "")
    return match.group(0) if match else field


def describe_topic_config(overrides: dict[str, str], broker: BrokerConfig,
                          controller: ControllerConfig) -> list[ConfigEntry]:
    """Every topic config: the topic's override, else the broker's setting (kray's, where kray has it),
    else Kafka's default; the synonyms list them in that order."""
    models = {"broker": broker, "controller": controller}
    entries = []
    for name, (kind, default, broker_name, field) in TOPIC_CONFIGS.items():
        synonyms = [Synonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG)] if name in overrides else []
        if field is not None:  # kray's default stands for Kafka's
            model = models[field[0]]
            setting = _broker_setting(model, field[1])
            if setting.source is ConfigSource.STATIC_BROKER_CONFIG:
                synonyms.append(setting)
            default = _text(type(model).model_fields[field[1]].default)
        synonyms.append(Synonym(broker_name, default, ConfigSource.DEFAULT_CONFIG))
        entries.append(ConfigEntry(name, synonyms[0].value, synonyms[0].source, False, kind, synonyms))
    return entries


def describe_broker_config(broker: BrokerConfig, controller: ControllerConfig) -> list[ConfigEntry]:
    """The broker's settings that have a Kafka name, read-only (none is dynamic in kray)."""
    entries = []
    for model in (broker, controller):
        for field, info in type(model).model_fields.items():
            if not _KAFKA_NAME.fullmatch(kafka_name(model, field)):
                continue
            setting = _broker_setting(model, field)
            kind = _TYPES.get(info.annotation if isinstance(info.annotation, type) else str, ConfigType.STRING)
            entries.append(ConfigEntry(setting.name, setting.value, setting.source, True, kind, [setting]))
    return sorted(entries)
