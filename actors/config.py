"""Configuration shared by brokers, controllers and tools, with Kafka's names where Kafka has one."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from actors.placement import Placement
from coordination.zkclient import KrayZkClient, credential_from_env

if TYPE_CHECKING:
    from actors.links.proxy import LinkTable


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
    ray_failure_detector_enable: bool = Field(
        True, description="kray only: learn of broker deaths from Ray at once and remove the dead broker's "
                          "registration; off gives Kafka's behaviour (deaths found when the ZooKeeper session expires)")
    candidate_restart_backoff_ms: int = Field(
        5000, ge=0, description="kray only: how long a broker waits before it starts a new controller candidate "
                                "in place of one that died. A new candidate is a new process, seconds of CPU; "
                                "started at once, it competed for the cores with the failover its death had just "
                                "started (a 10,000-partition failover under load took twice as long)")
    warm_standby_enable: bool = Field(
        False, description="kray only: a candidate that is not the controller keeps a copy of every topic's "
                           "assignment and every partition's state, current from ZooKeeper by zxid, and a "
                           "winner reads only what changed since (actors/controller/standby.py). Off (Kafka's "
                           "failover, which reads them all) by default: on one 2-core host at 100,000 "
                           "partitions its rounds cost the brokers more than it saves the new controller "
                           "(BENCHMARKS.md, \"The warm standby, the collector paused, and the controller-host kill\")")
    warm_standby_refresh_ms: int = Field(
        5000, ge=10, description="kray only: how often a standby brings its copy up to date (a round reads only "
                                 "what changed; the winner runs one more after its election, whatever this is)")
    control_plane_niceness: int = Field(
        0, ge=-20, le=19, description="kray only: the nice value of the controller candidates and RequestSenders. "
                                      "The brokers and load clients run at 15 (Ray's default for its workers); at "
                                      "0 the control plane gets the CPU ahead of the data plane on a shared host "
                                      "(KIP-291's aim). Below 0 needs root or CAP_SYS_NICE (else it stays at 0)")


class BrokerConfig(BaseModel):
    """The broker's data-plane settings, with Kafka's names and defaults (shorter where a laptop wants it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    log_dirs: str | None = Field(None, description="log.dirs; broker N keeps its replicas under <log_dirs>/broker-N "
                                                   "(default: <temp dir>/kray-logs/<namespace>)")
    log_dirs_per_broker: int = Field(1, ge=1, description="how many log directories each broker has (Kafka's "
                                                          "log.dirs lists them): 1 keeps its replicas in "
                                                          "<log_dirs>/broker-N itself; more in "
                                                          "<log_dirs>/broker-N/log-dir-I, a new replica in the one "
                                                          "with the fewest. One may fail while the broker serves "
                                                          "from the others (KIP-112); the last one failing stops it")
    log_segment_bytes: int = Field(64 * 1024 * 1024, ge=1024, description="log.segment.bytes")
    log_retention_ms: int = Field(7 * 24 * 3600 * 1000, ge=-1, description="log.retention.ms (-1: forever)")
    log_retention_bytes: int = Field(-1, ge=-1, description="log.retention.bytes per partition (-1: no limit)")
    log_retention_check_interval_ms: int = Field(300_000, ge=10, description="log.retention.check.interval.ms")
    min_insync_replicas: int = Field(1, ge=1, description="min.insync.replicas")
    message_max_bytes: int = Field(1_048_588, ge=64, description="message.max.bytes: the largest record batch "
                                                                 "a produce may append to a partition")
    socket_request_max_bytes: int = Field(104_857_600, ge=1024, description="socket.request.max.bytes: a larger "
                                                                            "request frame closes the connection")
    replica_lag_time_max_ms: int = Field(30_000, ge=10, description="replica.lag.time.max.ms")
    replica_fetch_wait_max_ms: int = Field(500, ge=0, description="replica.fetch.wait.max.ms")
    replica_fetch_max_bytes: int = Field(1024 * 1024, ge=1, description="replica.fetch.max.bytes")
    replica_fetch_backoff_ms: int = Field(1000, ge=0, description="replica.fetch.backoff.ms")
    replica_high_watermark_checkpoint_interval_ms: int = Field(
        5000, ge=10, description="replica.high.watermark.checkpoint.interval.ms")
    isr_change_propagation_interval_ms: int = Field(2500, ge=10, description="how often ISR changes are "
                                                                             "announced under /isr_change_notification")
    num_partitions: int = Field(1, ge=1, description="num.partitions: a topic's partitions when CreateTopics "
                                                     "asks for the default (-1)")
    default_replication_factor: int = Field(1, ge=1, description="default.replication.factor: a topic's "
                                                                 "replication factor when CreateTopics asks for the "
                                                                 "default (-1)")
    offsets_topic_num_partitions: int = Field(50, ge=1, description="offsets.topic.num.partitions: the "
                                                                    "partitions of __consumer_offsets, made by the "
                                                                    "first FindCoordinator")
    offsets_topic_replication_factor: int = Field(3, ge=1, description="offsets.topic.replication.factor: "
                                                                       "__consumer_offsets is not made while fewer "
                                                                       "brokers are alive (COORDINATOR_NOT_AVAILABLE)")
    offsets_commit_timeout_ms: int = Field(5000, ge=1, description="offsets.commit.timeout.ms: how long a commit "
                                                                   "(or a group's metadata) waits for the ISR")
    offset_metadata_max_bytes: int = Field(4096, ge=0, description="offset.metadata.max.bytes")
    group_initial_rebalance_delay_ms: int = Field(3000, ge=0, description="group.initial.rebalance.delay.ms: an "
                                                                          "empty group's first rebalance waits this "
                                                                          "long for more members (and again while "
                                                                          "they come, up to the rebalance timeout)")
    group_min_session_timeout_ms: int = Field(6000, ge=0, description="group.min.session.timeout.ms")
    group_max_session_timeout_ms: int = Field(1_800_000, ge=0, description="group.max.session.timeout.ms")
    group_max_size: int = Field(2 ** 31 - 1, ge=1, description="group.max.size: members a group may have")


class ClusterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    zk_connect: str = Field(description="zookeeper.connect, optionally with a chroot")
    zk_credential: SecretStr | None = Field(
        default_factory=credential_from_env, validate_default=True,
        description="user:password of kray's digest identity: znodes are created writable by it alone and "
                    "readable by all (zookeeper.set.acl); default $KRAY_ZK_CREDENTIAL, none: open znodes")
    namespace: str = Field("kray", description="Ray namespace holding the cluster's named actors")
    zk_session_timeout_ms: int = Field(18_000, ge=1000, description="zookeeper.session.timeout.ms")
    host: str | None = Field("127.0.0.1", description="the listeners' host (Kafka's listeners / advertised.listeners: "
                                                     "broker N listens on PLAINTEXT://host:(base_port + N) for "
                                                     "clients and on REPLICATION://host:(a port of its own) for "
                                                     "followers); None binds every interface and advertises the "
                                                     "Ray node's address (multi-node clusters)")
    base_port: int = Field(0, ge=0, description="broker N's PLAINTEXT listener is on base_port + N (`kray cluster "
                                                "up` uses 9092); 0 picks a free port at a broker's first start and "
                                                "keeps it for its later incarnations (in its log dir), as "
                                                "REPLICATION's always is; the registration in /brokers/ids/N "
                                                "carries both to clients and followers")
    controller_socket_timeout_ms: int = Field(30_000, ge=100, description="controller.socket.timeout.ms")
    request_retry_backoff_ms: int = Field(100, ge=1, description="RequestSendThread's backoff")
    broker_max_restarts: int = Field(-1, description="Ray restarts of a broker actor (-1: forever)")
    placement: Placement = Field("spread", description="where brokers run: 'spread' (one per node when there "
                                                         "are enough nodes, workers first), 'any' (Ray's choice), or "
                                                         "{broker id: node IP or node id}")
    recorder: str | None = Field(None, description="the RunRecorder actor (in `namespace`) that experiment "
                                                   "records go to; None records nothing")
    link_faults_enable: bool = Field(False, description="kray only: each broker's and controller candidate's "
                                                        "ZooKeeper session, each follower's fetches, the clients' "
                                                        "connections to each broker and the controller's requests "
                                                        "go through links of their own that chaos can cut, slow or "
                                                        "throttle while the process lives (a loopback proxy: one "
                                                        "more hop per message)")
    controller: ControllerConfig = Field(default_factory=ControllerConfig)
    broker: BrokerConfig = Field(default_factory=BrokerConfig)

    def zk_client(self, session_timeout_ms: int | None = None, links: LinkTable | None = None) -> KrayZkClient:
        """A (not yet started) ZooKeeper client for this cluster, with its credential; its session's
        link goes through `links` (link `zookeeper`) when given."""
        connect = links.route_zookeeper(self.zk_connect) if links is not None else self.zk_connect
        return KrayZkClient(connect, session_timeout_ms or self.zk_session_timeout_ms,
                            credential=self.zk_credential.get_secret_value() if self.zk_credential else None)

    @property
    def bind_host(self) -> str:
        return self.host or "0.0.0.0"

    def listener_port(self, broker_id: int) -> int:
        return self.base_port + broker_id if self.base_port else 0

    def advertised_host(self) -> str:
        """The host clients and followers connect to (called on the broker's node)."""
        if self.host:
            return self.host
        import ray

        return ray.util.get_node_ip_address()

    def log_dir(self, broker_id: int) -> Path:
        """Broker N's own directory: its only log dir, or the home of its log dirs (log_dirs_of)."""
        base = Path(self.broker.log_dirs) if self.broker.log_dirs else \
            Path(tempfile.gettempdir()) / "kray-logs" / self.namespace
        return base / f"broker-{broker_id}"

    def log_dirs_of(self, broker_id: int) -> list[Path]:
        """Broker N's log directories, in order (Kafka's log.dirs)."""
        home = self.log_dir(broker_id)
        count = self.broker.log_dirs_per_broker
        return [home] if count == 1 else [home / f"log-dir-{i}" for i in range(count)]
