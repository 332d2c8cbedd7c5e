"""The run directory of a chaos experiment: one JSON Lines file per record kind (the per-record kinds:
a directory of Parquet parts), a pydantic model per line, and a summary.

    runs/<run id>/experiment.json          the experiment as run (defaults filled in)
                 /faults.jsonl             every fault injected (FaultRecord)
                 /actions.jsonl            every admin action of the schedule, with what it asked (ActionRecord)
                 /failovers.jsonl          one per failover the controller handled (FailoverRecord)
                 /waits.jsonl              each partition through each fault, as the client saw it (PartitionWait)
                 /group_failovers.jsonl    the consumer group's coordinator through each fault on its broker
                                           (GroupFailoverRecord)
                 /timelines.jsonl          the controllers' own failover timelines, as recorded (TimelineRecord)
                 /load.jsonl               periodic load samples (LoadSample)
                 /produced/                every acknowledged produce, the load's and the probes' (Ack; Parquet parts)
                 /produce_errors.jsonl     every record a producer gave up on (ProduceError)
                 /broker_events.jsonl      the brokers' steps a failover waits on (BrokerEvent)
                 /client_stats.jsonl       each producer's librdkafka statistics, once a second (ClientStats)
                 /consumed/                every record consumed, live, by the group's members and in the final
                                           read-back (Consumed)
                 /group_commits.jsonl      the group's commits: as its members were told, and its log read back
                                           (GroupCommit)
                 /controller_events.jsonl  every controller event: queue wait, processing time (ControllerEventRecord)
                 /controller_requests.jsonl a broker accepting a controller epoch for the first time (ControllerRequestRecord)
                 /partition_states.jsonl   ZooKeeper snapshots, periodic and before each fault on a broker: live
                                           brokers, leader/epoch/ISR (StateSample)
                 /final_state.json         ZooKeeper and every broker's cache after the faults stopped (FinalState)
                 /copies.jsonl             the producer its leader stored with each copy of a record read back at
                                           more than one offset (RecordCopy)
                 /summary.json             what happened, and the invariant checks (Summary)
                 /timeline.html            the run on one page, for people (jobs/reports/timeline_page.py)

The records the actors write (timelines, produced, consumed, controller events and requests), the
record base and the run directory's reader and writer are in actors/records.py, beside the actors; this
module has the ones the experiment's runner writes. Times are wall-clock milliseconds, partitions
keyed "topic-partition", as there.
"""
from __future__ import annotations

from enum import Enum

from pydantic import Field

from actors.records import Record

FAULTS = "faults.jsonl"
ACTIONS = "actions.jsonl"
FAILOVERS = "failovers.jsonl"
GROUP_FAILOVERS = "group_failovers.jsonl"
WAITS = "waits.jsonl"
LOAD = "load.jsonl"
PARTITION_STATES = "partition_states.jsonl"
FINAL_STATE = "final_state.json"
COPIES = "copies.jsonl"
SUMMARY = "summary.json"
TIMELINE = "timeline.html"
EXPERIMENT = "experiment.json"


class FaultKind(str, Enum):
    KILL_BROKER = "kill-broker"  # SIGKILL, the actor ends for good; the runner starts a new one later
    RESTART_BROKER = "restart-broker"  # SIGKILL, Ray restarts the actor
    KILL_CONTROLLER = "kill-controller"  # SIGKILL of the active controller's actor (its broker starts another)
    PAUSE_BROKER = "pause-broker"  # SIGSTOP for N seconds, then SIGCONT (a GC-pause zombie)
    PAUSE_CONTROLLER = "pause-controller"
    EXPIRE_BROKER_SESSION = "expire-broker-session"
    EXPIRE_CONTROLLER_SESSION = "expire-controller-session"
    KILL_REQUEST_SENDER = "kill-request-sender"
    ZK_RESTART = "zk-restart"  # one server of an ensemble
    CONTROLLED_SHUTDOWN = "controlled-shutdown"
    # disk faults: SIGKILL broker N for good, damage its logs with its process gone, start it again
    # after the fault's seconds (jobs/experiments/disk_faults.py)
    CORRUPT_LOG_TAIL = "corrupt-log-tail"  # a byte of each log's last batch flipped
    TRUNCATE_LOG_TAIL = "truncate-log-tail"  # each log's last batch cut in half
    LOSE_UNFLUSHED_TAIL = "lose-unflushed-tail"  # a power loss: every log cut back to its recovery point
    # KIP-112: broker N's last log dir fails under the running broker (replaced by a file, found by its next
    # I/O): its replicas there go offline and their leaderships move while the broker serves from its other
    # dirs (BrokerConfig.log_dirs_per_broker; with one dir it halts). After the fault's seconds the disk is
    # replaced with its data: the broker is killed, the dir put back, and it starts again
    FAIL_LOG_DIR = "fail-log-dir"
    # link faults (link_faults_enable), healed after the fault's seconds: actors/links/shapes.py
    CUT_REPLICATION = "cut-replication"  # broker N from every other broker; ZooKeeper kept
    CUT_BROKER_ZOOKEEPER = "cut-broker-zookeeper"  # broker N's ZooKeeper session only
    CUT_CONTROLLER_ZOOKEEPER = "cut-controller-zookeeper"  # the active controller's ZooKeeper session only
    ISOLATE_BROKER = "isolate-broker"  # broker N (and its candidate) from every broker and from ZooKeeper
    SPLIT_BROKERS = "split-brokers"  # two halves of the brokers
    BRIDGE_BROKERS = "bridge-brokers"  # two halves and a broker between them that reaches both
    SLOW_REPLICATION = "slow-replication"  # broker N's links to every other broker slowed (FaultSpec.link)
    CUT_CONTROLLER_BROKER = "cut-controller-broker"  # the active controller's requests to broker N (RequestSender)
    CUT_CLIENTS = "cut-clients"  # every client's connections to broker N; replication and ZooKeeper kept
    SLOW_CLIENTS = "slow-clients"  # the clients' connections to broker N slowed (FaultSpec.link)
    DROP_BROKER_ZOOKEEPER = "drop-broker-zookeeper"  # broker N's ZooKeeper connections closed and refused
    DROP_CONTROLLER_ZOOKEEPER = "drop-controller-zookeeper"  # the active controller's, closed and refused
    FLAKY_ZOOKEEPER = "flaky-zookeeper"  # short drops of random ZooKeeper links, the controller's and the brokers'
    # host faults, made by the kernel on a cluster across `kray hosts` (jobs/hosts), healed after the fault's seconds
    HOST_POWER_LOSS = "host-power-loss"  # every process of broker N's host killed at once, its link down; the host
    # back after the fault's seconds (its broker's logs as FaultSpec.logs says)
    ISOLATE_HOST = "isolate-host"  # broker N's host cut from every other host, both ways
    ISOLATE_HOST_ONE_WAY = "isolate-host-one-way"  # the connections the other hosts open to broker N's host cut
    CUT_HOSTS = "cut-hosts"  # broker N's host and FaultSpec.peer's cut from each other
    PARTITION_HOSTS_HALVES = "partition-hosts-halves"  # the brokers' hosts in two halves
    PARTITION_HOSTS_BRIDGE = "partition-hosts-bridge"  # two halves, a host between them that reaches both
    PARTITION_HOSTS_RING = "partition-hosts-majorities-ring"  # each broker's host sees a majority, no two the same


# faults on the active controller alone (their target is its broker, whose data plane goes on)
CONTROLLER_FAULTS = {FaultKind.KILL_CONTROLLER, FaultKind.PAUSE_CONTROLLER, FaultKind.EXPIRE_CONTROLLER_SESSION,
                     FaultKind.CUT_CONTROLLER_ZOOKEEPER, FaultKind.DROP_CONTROLLER_ZOOKEEPER}


# faults that leave every process running and every leader in place, and slow the replication or the
# clients' requests while they last: a partition acknowledged meanwhile waited on the fault itself
DEGRADING_FAULTS = {FaultKind.SLOW_REPLICATION, FaultKind.SLOW_CLIENTS, FaultKind.CUT_CLIENTS}


class ActionKind(str, Enum):
    """Admin actions an experiment schedules beside its faults (jobs/experiments/admin_actions.py)."""

    CREATE_TOPIC = "create-topic"
    DELETE_TOPIC = "delete-topic"
    ADD_PARTITIONS = "add-partitions"
    REASSIGN_PARTITIONS = "reassign-partitions"  # a plan given, or a generated move
    PREFERRED_ELECTION = "preferred-election"  # /admin/preferred_replica_election for the topic's partitions
    UNCLEAN_ELECTION = "unclean-election"  # unclean.leader.election.enable=true on the topic (Kafka 2.8's way)
    ALTER_CONFIG = "alter-config"


class ActionRecord(Record):
    """An admin action as done, and what it asked for: what `kray check` finds at the end."""

    action_id: int
    kind: ActionKind
    topic: str
    started_ms: float
    done_ms: float
    error: str | None = None  # it was refused or failed: nothing is expected of it
    partitions: int | None = None  # create-topic, add-partitions: the topic's partition count after it
    replicas: dict[int, list[int]] | None = None  # reassign-partitions: the target replicas per partition
    config: dict[str, str] | None = None  # create-topic, alter-config, unclean-election: configs it set


class TopicFinal(Record):
    """A topic in ZooKeeper at the end of a run."""

    partitions: int
    config: dict[str, str] = Field(default_factory=dict)
    marked_for_deletion: bool = False


class FaultRecord(Record):
    fault_id: int
    kind: FaultKind
    target: int | None = None  # broker id (the controller's broker for controller faults)
    injected_ms: float
    ended_ms: float | None = None  # a pause's SIGCONT, a broker's return
    detail: str = ""

    @property
    def label(self) -> str:
        """How reports and the timeline page name it: "kill-broker 2", "split-brokers"."""
        return self.kind.value + (f" {self.target}" if self.target is not None else "")


class LoadAtFault(Record):
    partitions_total: int
    partitions_affected: int
    produce_rate: float  # acknowledged records/s over the last load sample
    inbox_depth: int
    sender_queue_depths: dict[int, int] = Field(default_factory=dict)  # target broker -> requests queued
    session_timeout_ms: int
    brokers_alive: int
    detector: bool  # the Ray-based failure detector was on


class FailoverRecord(Record):
    """The failover timeline (docs/ARCHITECTURE.md), joined with the fault that caused it."""

    fault_id: int | None  # None: no fault of the schedule explains it
    fault_kind: FaultKind | None = None
    kind: str  # broker_failure | controller_failover
    controller_id: int
    controller_epoch: int
    brokers: list[int]
    fault_injected_ms: float | None
    detected_ms: float
    processing_started_ms: float
    zk_written_ms: float | None = None
    requests_sent_ms: float | None = None
    requests_acked_ms: float | None = None
    load: LoadAtFault


class GroupFailoverRecord(Record):
    """The consumer group's coordinator through a fault on its broker (jobs/measures/group_failovers.py): each step,
    in wall-clock ms (None: not seen within the horizon)."""

    fault_id: int
    fault_kind: FaultKind
    group: str
    coordinator: int  # the broker that coordinated the group when the fault struck it
    offsets_partition: str  # the group's partition of __consumer_offsets
    fault_injected_ms: float
    detector: bool
    new_coordinator: int | None = None
    elected_ms: float | None = None  # the offsets partition's new leader applied its LeaderAndIsr
    loaded_ms: float | None = None  # the new coordinator loaded the group from that partition
    found_ms: float | None = None  # a broker answered the group's FindCoordinator with the new coordinator
    rejoined_ms: float | None = None  # the members rejoined and synced (None too: the move needed no rebalance)
    committed_ms: float | None = None  # a member was first told a commit was stored
    consumed_first_ms: float | None = None  # the first record sent at or after the fault that the group was given
    consumed_all_ms: float | None = None  # every partition the group reads had given it such a record
    partitions: int = 0  # the group's partitions measured through the fault
    censored: int = 0  # of them, those not given such a record within the horizon


class Source(str, Enum):
    LOAD = "load"  # the load generators' records: the client's queue included
    PROBE = "probe"  # one record in flight per partition (actors/clients/load.py: Prober)
    GROUP = "group"  # every acknowledged record, delivered when a member of the consumer group is given it


class Role(str, Enum):
    LEADER = "leader"  # the fault's broker led the partition
    FOLLOWER = "follower"  # it is one of the partition's replicas, not its leader
    OTHER = "other"  # neither
    CLUSTER = "cluster"  # a fault with no broker (a split, a ZooKeeper restart) or on the controller alone


class PartitionWait(Record):
    """One partition through one fault, as one producer source saw it."""

    fault_id: int
    fault_kind: FaultKind
    partition: str
    source: Source
    role: Role
    fault_ms: float
    observed_ms: float  # how long after the fault it was observed (the horizon, the next fault or the load's end)
    recovery_ms: float  # fault -> first acknowledgement of a record sent at or after it
    recovery_censored: bool = False  # not recovered within observed_ms: recovery_ms is that, at least
    recovery_offset: int | None = None  # where the record that recovered it was appended
    recovery_sent_ms: float | None = None  # when that record was handed to the producer
    worst_wait_ms: float
    worst_wait_censored: bool = False  # a record still unacknowledged when the observation ended
    records: int  # records in flight at the fault or sent within the horizon
    rate: float  # the partition's acknowledged records/s over the second before the fault
    # where the recovery went (jobs/measures/partition_phases.py): each named step's ms since the step before, in
    # the order they ran
    phases: dict[str, float] = Field(default_factory=dict)
    unexplained_ms: float | None = None  # the recovery less its named phases (None: not recovered, censored)


class WaitStats(Record):
    """The two measures over many partition-fault pairs, nearest-rank percentiles."""

    partitions: int  # partition-fault pairs
    censored: int  # pairs whose recovery was censored
    recovery_ms_p50: float | None = None
    recovery_ms_p99: float | None = None
    # the source's acknowledgement latency away from the faults (records sent from 2 s before a fault to
    # 10 s after its end left out), p99: a recovery within it is no unavailability, nothing to explain
    latency_away_ms_p99: float | None = None
    recovery_ms_max: float | None = None
    worst_wait_ms_p50: float | None = None
    worst_wait_ms_p99: float | None = None
    worst_wait_ms_max: float | None = None


class LoadSample(Record):
    ts_ms: float
    acked_total: int
    produce_rate: float
    consumed_total: int
    inbox_depth: int
    sender_queue_depths: dict[int, int] = Field(default_factory=dict)
    brokers_alive: int
    controller_id: int | None
    controller_epoch: int | None
    rss_mb: dict[str, float] = Field(default_factory=dict)  # resident memory per actor (broker-N, controller-N, p0, c0)


class PartitionLeadership(Record):
    leader: int
    leader_epoch: int
    isr: list[int]


class StateSample(Record):
    ts_ms: float
    live_brokers: list[int]
    partitions: dict[str, PartitionLeadership]


class BrokerCache(Record):
    controller_epoch: int
    brokers: list[int]
    partitions: dict[str, PartitionLeadership]


class FinalState(Record):
    ts_ms: float
    live_brokers: list[int]
    zookeeper: dict[str, PartitionLeadership]
    caches: dict[int, BrokerCache]  # broker id -> its metadata cache; brokers that did not answer are absent
    assignments: dict[str, list[int]] | None = None  # partition -> its replicas (None: a run before they were kept)
    topics: dict[str, TopicFinal] | None = None  # every topic in ZooKeeper (None: a run before they were kept)
    reassigning: list[str] = Field(default_factory=list)  # partitions /admin/reassign_partitions still names
    preferred_election_pending: bool = False  # /admin/preferred_replica_election not yet taken up
    on_disk: dict[int, list[str]] = Field(default_factory=dict)  # broker -> the partitions it has a log for


class RecordCopy(Record):
    """A copy of a record the final read-back found at more than one offset, with the producer its
    batch was stored under (`stored_producers` of the partition's leader): copies under one epoch of an
    idempotent producer are a broker's failure to deduplicate; under a newer epoch after an older one,
    the client sent the record again after bumping its epoch, which no broker can tell from a new
    record (check.py: check_duplicated)."""

    topic: str
    partition: int
    offset: int
    record_id: str
    producer_id: int
    producer_epoch: int
    sequence: int  # -1: its batch had no producer id


class CheckReport(Record):
    """A run's invariant checks (jobs/measures/check.py makes them), kept in its summary and printed for people."""

    run_dir: str
    invariants: dict[str, int]
    examples: dict[str, list[str]]
    notes: list[str] = Field(default_factory=list)
    malformed_lines: dict[str, int] = Field(default_factory=dict)
    malformed_examples: dict[str, str] = Field(default_factory=dict)  # file -> its first bad line's error
    counts: dict[str, int] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.invariants.values())

    def render(self) -> str:
        lines = [f"{'Invariant':<30} {'Violations':>10}  Example"]
        for name, count in self.invariants.items():
            example = self.examples.get(name) or [""]
            lines.append(f"{name:<30} {count:>10}  {example[0]}".rstrip())
        lines.append("Counts: " + ", ".join(f"{k} {v}" for k, v in self.counts.items()))
        lines += [f"Note: {note}" for note in self.notes]
        if self.malformed_lines:
            lines.append("Malformed lines: " + "; ".join(
                f"{name}: {n} ({self.malformed_examples.get(name, '')})"
                for name, n in self.malformed_lines.items()))
        lines.append("OK" if self.ok else "FAILED")
        return "\n".join(lines)


class Summary(Record):
    run_id: str
    experiment: str
    started_ms: float
    ended_ms: float
    faults: int
    failovers: int
    acked: int
    consumed: int
    load_ended_ms: float | None = None  # when the load stopped: the end of every fault's observation
    waits: dict[Source, WaitStats] = Field(default_factory=dict)  # over the partitions the faults touched
    produce_latency_ms_p50: float | None = None  # send -> acknowledgement, every acknowledged record
    produce_latency_ms_p99: float | None = None
    malformed_lines: dict[str, int] = Field(default_factory=dict)
    check: CheckReport
