"""A chaos experiment, declared: cluster, topics, load, a schedule of faults, duration, seed.

Loaded from YAML (`kray experiment run FILE`); unknown fields and impossible values are
errors that name the field. Example:

    name: broker-kills
    brokers: 3
    session_timeout_ms: 6000
    detector: true                 # the Ray-based failure detector (false: Kafka's behaviour)
    topics: [{name: orders, partitions: 30, replication_factor: 3}]
    load: {producers: 2, rate: 2000, record_size: 100, acks: all, group_members: 3}
    schedule:
      - {at_s: 5, fault: kill-broker, target: non-controller, seconds: 5}
      - {at_s: 15, fault: pause-broker, target: random, seconds: 2}
      - {at_s: 25, fault: kill-controller}
      - {at_s: 28, fault: kill-broker, target: coordinator}             # the consumer group's coordinator
      - {at_s: 30, fault: cut-replication, target: leader, seconds: 5}   # a link fault: the cluster
    actions:                                                             # routes links through proxies
      - {at_s: 8, action: create-topic, topic: audit, partitions: 6, replication_factor: 3}
      - {at_s: 20, action: reassign-partitions, topic: audit}            # a generated move
      - {at_s: 28, action: delete-topic, topic: audit}
    duration_s: 40
    seed: 7
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from actors.broker.log.batches import batch_size_bound
from actors.config import BrokerConfig, ControllerConfig
from coordination.admin import validate_topic_name
from coordination.errors import KrayError
from jobs.measures.rundir import ActionKind, FaultKind
from actors.links.faults import LinkFault
from jobs.experiments.chaos import (
    BROKER_FAULTS,
    HOST_FAULTS,
    HOST_PARTITIONS,
    LINK_FAULTS,
    RETURNING_FAULTS,
    SLOW_LINKS,
)
from jobs.hosts.shapes import TARGETED as TARGETED_SHAPES
from jobs.hosts.shapes import grudge
from jobs.hosts.layout import POWER_LOSS_LOGS

# leader: of the first topic's partition 0; coordinator: the load's consumer group's coordinator (the leader of its
# __consumer_offsets partition); coordinator-unless-controller: it, or a non-controller when it is the controller's
# broker (a kill that moves the group without moving the controller)
Target = int | Literal["random", "controller", "non-controller", "leader", "coordinator", "coordinator-unless-controller"]


def _topic_name(name: str) -> str:
    try:
        validate_topic_name(name)
    except KrayError as e:
        raise ValueError(str(e)) from None
    return name


TopicName = Annotated[str, AfterValidator(_topic_name)]  # Kafka's topic name rules, as a pydantic error


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TopicSpec(Spec):
    name: TopicName = "load"
    partitions: int = Field(12, ge=1, le=100_000)
    replication_factor: int = Field(3, ge=1)
    after_fault: int = Field(0, ge=0, description="0: created before the load. N: created during the run, once "
                             "the schedule's first N faults are done and every broker is back, and put under the "
                             "same load per partition; fault N + 1 (which must wait for recovery) comes after it")
    load: Literal["stream", "once", "idle"] = Field(
        "stream", description="stream: under the load all along. once: records_per_partition records to each "
        "partition as the load starts, then idle (idle partitions among busy ones). idle: never written, and "
        "its leaderships read at the end only, not every sample: partitions that only count (a cluster grown "
        "to 100,000 partitions while the load stays on a few hundred)")

    @model_validator(mode="after")
    def _once_from_the_start(self) -> "TopicSpec":
        if self.load == "once" and self.after_fault:
            raise ValueError(f"topic {self.name}: a topic loaded once is created before the load (after_fault 0)")
        return self


class LoadSpec(Spec):
    producers: int = Field(1, ge=0, description="load generator actors; the partitions are split among them")
    rate: float = Field(0, ge=0, description="records/s over all producers; 0 is as fast as they go")
    record_size: int = Field(100, ge=16, le=1024 * 1024, description="bytes per record value")
    acks: Literal["all", 0, 1, -1] = "all"
    records_per_partition: int = Field(1, ge=1, description="records to each partition in each producer call")
    consumers: int = Field(1, ge=0, description="consumer actors reading every partition as it is written")
    group_members: int = Field(0, ge=0, description="members of a consumer group (real clients with group.id, "
                               "subscribed to the streamed topics, committing every commit_interval_ms); "
                               "`kray check` checks the group's invariants, the run records the coordinator's "
                               "failovers")
    group: str = Field("load-group", min_length=1, max_length=249, description="the consumer group's id")
    commit_interval_ms: int = Field(1000, ge=10, description="the group members' auto.commit.interval.ms")
    probe_partitions: int = Field(60, ge=0, description="partitions a probe producer writes beside the load, one "
                                  "record in flight each (spread evenly over the streamed partitions; 0: no probes)")
    probe_interval_ms: float = Field(100, gt=0, description="a probed partition's next record goes this long after "
                                     "its last was sent, or at its acknowledgement if later")
    knee_per_s: float | None = Field(None, gt=0, description="the cluster's capacity this load was set against "
                                     "(a sweep's load_fractions): the highest rate it served with p99 <= 50 ms, "
                                     "measured at the sweep's start at the largest partition count")
    knee_fraction: float | None = Field(None, gt=0, description="the load as a fraction of knee_per_s, at that count")

    @property
    def acks_code(self) -> int:
        return -1 if self.acks == "all" else int(self.acks)


class FaultSpec(Spec):
    at_s: float = Field(ge=0, description="seconds after the load started")
    fault: FaultKind
    target: Target | None = Field(None, description="a broker id, or how to pick one when the fault is injected")
    seconds: float = Field(3.0, ge=0, description="how long a pause lasts; how long a killed or shut-down "
                                                  "broker, or a ZooKeeper server, stays down")
    after_recovery: bool = Field(False, description="before injecting, wait (up to recovery_timeout_s) until the "
                                                    "controller has handled the last such fault's kill, every "
                                                    "broker is up, every replica is in its ISR and no broker is "
                                                    "over the leader imbalance ratio: a fault on a cluster still "
                                                    "recovering from the last one measures both")
    recovery_timeout_s: float = Field(120.0, gt=0, description="with after_recovery or at_return: how long to "
                                                               "wait at most")
    link: LinkFault | None = Field(None, description="slow-replication, slow-clients: how the links are slowed "
                                                     "(default 200 +/- 50 ms each way)")
    peer: Target | None = Field(None, description="cut-hosts: the broker whose host the target's is cut from "
                                "(default: the controller's)")
    logs: Literal[POWER_LOSS_LOGS] | None = Field(None, description="host-power-loss: what the broker's logs are "
                                                  "when its host returns: kept, unflushed (cut back to their "
                                                  "recovery points, the default: Kafka does not fsync) or lost")
    at_return: bool = Field(False, description="inject the moment the broker that the last fault before this one "
                                               "in the run (random faults included) took down (kill-broker, "
                                               "restart-broker, controlled-shutdown, expire-broker-session, a disk "
                                               "fault, fail-log-dir, host-power-loss) registers again, at_s being "
                                               "the earliest (waits up to recovery_timeout_s once that fault "
                                               "struck): a fault "
                                               "timed at a victim's return, before it has fetched anything")

    @property
    def slow(self) -> LinkFault | None:
        """What slow-replication or slow-clients does to the links."""
        if self.fault not in SLOW_LINKS:
            return None
        return self.link or LinkFault(delay_ms=200, jitter_ms=50)

    @property
    def peer_target(self) -> Target | None:
        return (self.peer or "controller") if self.fault is FaultKind.CUT_HOSTS else None

    @property
    def power_loss_logs(self) -> str:
        return self.logs or "unflushed"

    @model_validator(mode="after")
    def _target_fits_the_fault(self) -> "FaultSpec":
        if self.peer is not None and self.fault is not FaultKind.CUT_HOSTS:
            raise ValueError(f"{self.fault.value} takes no peer (only cut-hosts does)")
        if self.logs is not None and self.fault is not FaultKind.HOST_POWER_LOSS:
            raise ValueError(f"{self.fault.value} takes no logs (only host-power-loss does)")
        if self.link is not None and self.fault not in SLOW_LINKS:
            raise ValueError(f"{self.fault.value} takes no link fault (only slow-replication and slow-clients do)")
        if self.fault in BROKER_FAULTS and self.target is None:
            raise ValueError(f"{self.fault.value} needs a target (a broker id, random, controller or non-controller)")
        if self.fault not in BROKER_FAULTS and self.target is not None:
            raise ValueError(f"{self.fault.value} takes no target")
        if self.at_return and self.after_recovery:
            raise ValueError(f"{self.fault.value}: at_return and after_recovery wait for different things; "
                             "choose one")
        return self


class ActionSpec(Spec):
    """An admin action at its time, beside the faults: the controller's flows under faults are the point.
    Its topic is one of the actions' own (the load's topics are left alone), made by an earlier
    create-topic; `kray check` verifies at the end that each action did what it asked."""

    at_s: float = Field(ge=0, description="seconds after the load started")
    action: ActionKind
    topic: TopicName
    partitions: int | None = Field(None, ge=1, le=100_000, description="create-topic: how many; add-partitions: "
                                   "the topic's new total")
    replication_factor: int = Field(3, ge=1, description="create-topic")
    config: dict[str, str] = Field(default_factory=dict, description="create-topic, alter-config: topic configs")
    replicas: dict[int, list[int]] | None = Field(None, description="reassign-partitions: partition -> its new "
                                                  "replicas (default: every partition moved as "
                                                  "kafka-reassign-partitions --generate proposes)")

    @model_validator(mode="after")
    def _fields_fit_the_action(self) -> "ActionSpec":
        kind = self.action
        if kind in (ActionKind.CREATE_TOPIC, ActionKind.ADD_PARTITIONS) and self.partitions is None:
            raise ValueError(f"{kind.value} {self.topic}: needs partitions")
        if kind not in (ActionKind.CREATE_TOPIC, ActionKind.ADD_PARTITIONS) and self.partitions is not None:
            raise ValueError(f"{kind.value} {self.topic}: takes no partitions")
        if kind is ActionKind.ALTER_CONFIG and not self.config:
            raise ValueError(f"alter-config {self.topic}: needs config")
        if kind not in (ActionKind.CREATE_TOPIC, ActionKind.ALTER_CONFIG) and self.config:
            raise ValueError(f"{kind.value} {self.topic}: takes no config")
        if kind is not ActionKind.REASSIGN_PARTITIONS and self.replicas is not None:
            raise ValueError(f"{kind.value} {self.topic}: takes no replicas (only reassign-partitions does)")
        return self


class RandomFaults(Spec):
    """Faults drawn at random (with the experiment's seed), one every `every_s` seconds."""

    every_s: tuple[float, float] = Field((10.0, 30.0), description="min and max seconds between faults")
    kinds: list[FaultKind] = Field(default_factory=lambda: [k for k in FaultKind if k not in LINK_FAULTS
                                                            and k not in HOST_FAULTS
                                                            and k is not FaultKind.FLAKY_ZOOKEEPER],
                                   description="default: every process fault (link and host faults are named)")
    seconds: float = Field(3.0, ge=0)
    kill_at_return: float = Field(0.5, ge=0, le=1, description="the chance that a disk fault drawn is followed by "
                                  "a kill-broker of the leader (of the first topic's partition 0) the moment its "
                                  "victim registers again: a power loss, then a leader's death before the victim "
                                  "fetched")

    @model_validator(mode="after")
    def _sane(self) -> "RandomFaults":
        if not 0 < self.every_s[0] <= self.every_s[1]:
            raise ValueError("every_s must be (min, max) with 0 < min <= max")
        if not self.kinds:
            raise ValueError("kinds must name at least one fault")
        return self


class Experiment(Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")
    brokers: int = Field(3, ge=1, le=64)
    session_timeout_ms: int = Field(6000, ge=1000, description="zookeeper.session.timeout.ms")
    detector: bool = Field(True, description="the Ray-based failure detector (off: Kafka's behaviour)")
    broker: BrokerConfig = Field(default_factory=lambda: BrokerConfig(min_insync_replicas=2))
    controller: ControllerConfig = Field(default_factory=ControllerConfig)
    topics: list[TopicSpec] = Field(default_factory=lambda: [TopicSpec()], min_length=1)
    load: LoadSpec = Field(default_factory=LoadSpec)
    schedule: list[FaultSpec] = Field(default_factory=list)
    actions: list[ActionSpec] = Field(default_factory=list, description="admin actions beside the faults")
    random_faults: RandomFaults | None = None
    duration_s: float = Field(30.0, gt=0, le=7 * 24 * 3600, description="seconds of load, faults "
                             "included (faults that wait for recovery may run later: the load then goes on "
                             "after the last one as long as the schedule planned)")
    settle_s: float = Field(30.0, ge=0, description="after the load: how long the cluster may take to converge")
    horizon_s: float = Field(30.0, gt=0, description="how long after each fault the client's waits are observed "
                             "(the load runs at least this long after the last fault); a partition not "
                             "recovered by then is counted as censored")
    sample_interval_s: float = Field(1.0, gt=0)
    seed: int = 0

    @model_validator(mode="after")
    def _possible(self) -> "Experiment":
        for t in self.topics:
            if t.replication_factor > self.brokers:
                raise ValueError(f"topic {t.name}: replication factor {t.replication_factor} larger than "
                                 f"the {self.brokers} brokers")
            if self.load.acks_code == -1 and self.broker.min_insync_replicas > t.replication_factor:
                raise ValueError(f"topic {t.name}: min_insync_replicas {self.broker.min_insync_replicas} larger "
                                 f"than its replication factor {t.replication_factor}: acks=all could never succeed")
        batch = batch_size_bound(self.load.records_per_partition, self.load.record_size)
        if batch > self.broker.message_max_bytes:
            raise ValueError(f"load: {self.load.records_per_partition} records of {self.load.record_size} bytes make "
                             f"{batch}-byte batches, over the brokers' message_max_bytes "
                             f"({self.broker.message_max_bytes}): every produce would fail with MESSAGE_TOO_LARGE")
        if len({t.name for t in self.topics}) != len(self.topics):
            raise ValueError("topic names must be unique")
        if self.topics[0].after_fault:
            raise ValueError(f"topic {self.topics[0].name}: the first topic is created before the load")
        if not any(t.load == "stream" and not t.after_fault for t in self.topics):
            raise ValueError("topics: the load needs a topic streamed from the start (load: stream, after_fault: 0)")
        ordered = sorted(self.schedule, key=lambda f: f.at_s)
        for i, f in enumerate(ordered):
            if f.at_return and not any(g.fault in RETURNING_FAULTS for g in ordered[:i]):
                raise ValueError(f"fault {f.fault.value} at {f.at_s}s: at_return needs an earlier fault that takes a "
                                 f"broker down and brings it back ({', '.join(sorted(k.value for k in RETURNING_FAULTS))})")
        self._host_faults_possible(ordered)
        for t in self.topics:
            if not t.after_fault:
                continue
            if self.random_faults is not None:
                raise ValueError(f"topic {t.name}: after_fault counts the schedule's faults, which random_faults "
                                 f"would interleave")
            if t.after_fault >= len(ordered) or not ordered[t.after_fault].after_recovery:
                raise ValueError(f"topic {t.name}: after_fault={t.after_fault} needs a fault {t.after_fault + 1} "
                                 f"in the schedule that waits for recovery (after_recovery: true)")
        self._actions_possible()
        for f in self.schedule:
            if isinstance(f.target, str) and f.target.startswith("coordinator") and not self.load.group_members:
                raise ValueError(f"fault {f.fault.value} at {f.at_s}s: target {f.target} needs a consumer group "
                                 f"(load.group_members)")
            if f.at_s >= self.duration_s:
                raise ValueError(f"fault {f.fault.value} at {f.at_s}s is not within duration_s={self.duration_s}")
            for broker in (f.target, f.peer):
                if isinstance(broker, int) and not 1 <= broker <= self.brokers:
                    raise ValueError(f"fault {f.fault.value}: broker {broker} is not one of 1..{self.brokers}")
            if f.after_recovery and self.controller.auto_leader_rebalance_enable \
                    and self.controller.leader_imbalance_check_interval_seconds >= f.recovery_timeout_s:
                raise ValueError(f"fault {f.fault.value} at {f.at_s}s waits for the auto leader rebalance, which "
                                 f"runs every {self.controller.leader_imbalance_check_interval_seconds:g}s: set "
                                 f"controller.leader_imbalance_check_interval_seconds below recovery_timeout_s "
                                 f"({f.recovery_timeout_s:g})")
        return self

    def _host_faults_possible(self, ordered: list[FaultSpec]) -> None:
        """Host partitions that can be made among the brokers' hosts, a cut between two of them, and one
        partition at a time (a new one replaces the last: two overlap only when both wait for recovery,
        which puts the second after the first)."""
        for f in ordered:
            if f.fault in HOST_PARTITIONS and HOST_PARTITIONS[f.fault] not in TARGETED_SHAPES:
                try:
                    grudge(HOST_PARTITIONS[f.fault], [f"host-{b}" for b in self.broker_ids])
                except ValueError as e:
                    raise ValueError(f"fault {f.fault.value} at {f.at_s}s among {self.brokers} brokers' hosts: "
                                     f"{e}") from None
            if f.fault is FaultKind.CUT_HOSTS and f.target == "controller" and f.peer is None:
                raise ValueError(f"fault cut-hosts at {f.at_s}s: the target is the controller's broker, and so is "
                                 "the default peer: name a peer")
        partitions = [f for f in ordered if f.fault in HOST_PARTITIONS]
        for a, b in zip(partitions, partitions[1:]):
            if b.at_s < a.at_s + a.seconds and not (a.after_recovery and b.after_recovery):
                raise ValueError(f"fault {b.fault.value} at {b.at_s}s would replace {a.fault.value} at {a.at_s}s "
                                 f"before its {a.seconds:g} s are over (one host partition at a time)")

    def _actions_possible(self) -> None:
        """Each action on a topic the actions made (created earlier, not deleted since), within the run,
        with replicas on brokers that exist."""
        load_topics = {t.name for t in self.topics}
        alive: set[str] = set()
        for a in sorted(self.actions, key=lambda a: a.at_s):
            where = f"action {a.action.value} {a.topic} at {a.at_s:g}s"
            if a.at_s >= self.duration_s:
                raise ValueError(f"{where} is not within duration_s={self.duration_s}")
            if a.topic in load_topics:
                raise ValueError(f"{where}: {a.topic} is a topic of the load; actions act on topics of their own")
            if a.action is ActionKind.CREATE_TOPIC:
                if a.topic in alive:
                    raise ValueError(f"{where}: the topic exists already (created earlier, not deleted)")
                if a.replication_factor > self.brokers:
                    raise ValueError(f"{where}: replication factor {a.replication_factor} larger than the "
                                     f"{self.brokers} brokers")
                alive.add(a.topic)
                continue
            if a.topic not in alive:
                raise ValueError(f"{where}: needs an earlier create-topic of {a.topic} (not deleted since)")
            if a.action is ActionKind.DELETE_TOPIC:
                alive.discard(a.topic)
            for p, replicas in (a.replicas or {}).items():
                if not replicas or len(set(replicas)) != len(replicas) or \
                        not all(1 <= b <= self.brokers for b in replicas):
                    raise ValueError(f"{where}: partition {p}'s replicas {replicas} must be distinct brokers "
                                     f"of 1..{self.brokers}")

    @property
    def broker_ids(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    @property
    def link_faults(self) -> bool:
        """Whether a fault of the run acts on links: the cluster then routes them through proxies."""
        kinds = {f.fault for f in self.schedule} | set(self.random_faults.kinds if self.random_faults else [])
        return bool(kinds & (set(LINK_FAULTS) | {FaultKind.FLAKY_ZOOKEEPER}))


def load_experiment(path: str | Path) -> Experiment:
    """The experiment in a YAML (or JSON) file; KrayError naming the problem otherwise."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise KrayError(f"cannot read experiment file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise KrayError(f"{path} is not UTF-8 text (byte {e.start})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise KrayError(f"{path} is not valid YAML{where}: {getattr(e, 'problem', None) or type(e).__name__}") from None
    if not isinstance(data, dict):
        raise KrayError(f"{path}: an experiment is a mapping of fields, got {type(data).__name__}")
    try:
        return Experiment.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "experiment"
        raise KrayError(f"{path}: {where}: {first['msg']} ({e.error_count()} error(s))") from None
