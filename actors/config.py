"""Configuration shared by brokers, controllers and tools, with Kafka's names where Kafka has one."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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
