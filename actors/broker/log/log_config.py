"""A topic's configs as its replicas apply them (Kafka's LogConfig): the topic's overrides in
`/config/topics/T` over the broker's defaults, with Kafka's names."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from coordination.topic_config import parse_topic_config

if TYPE_CHECKING:  # for the annotation only: actors.config loads kazoo (ClusterConfig's client) and this stays pure
    from actors.config import BrokerConfig


class LogConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    min_insync_replicas: int
    unclean_leader_election_enable: bool
    retention_ms: int
    retention_bytes: int
    segment_bytes: int
    max_message_bytes: int

    @classmethod
    def from_overrides(cls, defaults: BrokerConfig, overrides: dict[str, str],
                       unclean_leader_election_enable: bool = False) -> LogConfig:
        """InvalidConfigurationException when an override is not a valid topic config."""
        parsed = {name.replace(".", "_"): value for name, value in parse_topic_config(overrides).items()
                  if name != "cleanup.policy"}
        return cls(**{"min_insync_replicas": defaults.min_insync_replicas,
                      "unclean_leader_election_enable": unclean_leader_election_enable,
                      "retention_ms": defaults.log_retention_ms, "retention_bytes": defaults.log_retention_bytes,
                      "segment_bytes": defaults.log_segment_bytes, "max_message_bytes": defaults.message_max_bytes,
                      **parsed})
