"""Configuration shared by brokers, controllers and tools, with Kafka's names where Kafka has one."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ControllerConfig(BaseModel):
    """The broker settings that steer the controller, with Kafka's names and defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    delete_topic_enable: bool = Field(True, description="delete.topic.enable")
    unclean_leader_election_enable: bool = Field(False, description="unclean.leader.election.enable")
    auto_leader_rebalance_enable: bool = Field(True, description="auto.leader.rebalance.enable")
    leader_imbalance_per_broker_percentage: int = Field(10, ge=0, le=100,
                                                        description="leader.imbalance.per.broker.percentage")
    leader_imbalance_check_interval_seconds: float = Field(300, gt=0,
                                                           description="leader.imbalance.check.interval.seconds")
    controlled_shutdown_max_retries: int = Field(3, ge=0, description="controlled.shutdown.max.retries")
    controlled_shutdown_retry_backoff_ms: int = Field(5000, ge=0,
                                                      description="controlled.shutdown.retry.backoff.ms")


class ClusterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    zk_connect: str = Field(description="zookeeper.connect, optionally with a chroot")
    namespace: str = Field("kray", description="Ray namespace holding the cluster's named actors")
    zk_session_timeout_ms: int = Field(18_000, ge=1000, description="zookeeper.session.timeout.ms")
    host: str = "127.0.0.1"
    base_port: int = Field(9092, description="broker N advertises PLAINTEXT://host:(base_port + N)")
    controller_socket_timeout_ms: int = Field(30_000, ge=100, description="controller.socket.timeout.ms")
    request_retry_backoff_ms: int = Field(100, ge=1, description="RequestSendThread's backoff")
    broker_max_restarts: int = Field(-1, description="Ray restarts of a broker actor (-1: forever)")
    controller: ControllerConfig = Field(default_factory=ControllerConfig)
