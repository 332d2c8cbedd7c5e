"""The run directory of a chaos experiment: one JSON Lines file per record kind, a pydantic
model per line, and a summary.

    runs/<run id>/experiment.json          the experiment as run (defaults filled in)
                 /faults.jsonl             every fault injected (FaultRecord)
                 /failovers.jsonl          one per failover the controller handled (FailoverRecord)
                 /timelines.jsonl          the controllers' own failover timelines, as recorded (TimelineRecord)
                 /load.jsonl               periodic load samples (LoadSample)
                 /produced.jsonl           every acknowledged produce (Ack)
                 /consumed.jsonl           every record consumed, live and in the final read-back (Consumed)
                 /controller_events.jsonl  every controller event: queue wait, processing time (ControllerEventRecord)
                 /controller_requests.jsonl a broker accepting a controller epoch for the first time (ControllerRequestRecord)
                 /partition_states.jsonl   periodic ZooKeeper snapshots: live brokers, leader/epoch/ISR (StateSample)
                 /final_state.json         ZooKeeper and every broker's cache after the faults stopped (FinalState)
                 /summary.json             what happened, and the invariant checks (Summary)

Times are wall-clock milliseconds since the epoch, on the clock of the machine that
wrote them (one machine for a local run). Partitions are keyed "topic-partition" in
JSON objects, as Kafka prints them.

Readers count malformed lines instead of failing on them (`read_jsonl`), so that a
run cut short by a crash still reads.
"""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Iterator, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

FAULTS = "faults.jsonl"
FAILOVERS = "failovers.jsonl"
TIMELINES = "timelines.jsonl"
LOAD = "load.jsonl"
PRODUCED = "produced.jsonl"
CONSUMED = "consumed.jsonl"
CONTROLLER_EVENTS = "controller_events.jsonl"
CONTROLLER_REQUESTS = "controller_requests.jsonl"
PARTITION_STATES = "partition_states.jsonl"
FINAL_STATE = "final_state.json"
SUMMARY = "summary.json"
EXPERIMENT = "experiment.json"


class FaultKind(str, Enum):
    KILL_BROKER = "kill-broker"  # SIGKILL, the actor ends for good; the runner starts a new one later
    RESTART_BROKER = "restart-broker"  # SIGKILL, Ray restarts the actor
    KILL_CONTROLLER = "kill-controller"  # SIGKILL of the active controller's actor (Ray restarts it)
    PAUSE_BROKER = "pause-broker"  # SIGSTOP for N seconds, then SIGCONT (a GC-pause zombie)
    PAUSE_CONTROLLER = "pause-controller"
    EXPIRE_BROKER_SESSION = "expire-broker-session"
    EXPIRE_CONTROLLER_SESSION = "expire-controller-session"
    KILL_REQUEST_SENDER = "kill-request-sender"
    ZK_RESTART = "zk-restart"  # one server of an ensemble
    CONTROLLED_SHUTDOWN = "controlled-shutdown"


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FaultRecord(Record):
    fault_id: int
    kind: FaultKind
    target: int | None = None  # broker id (the controller's broker for controller faults)
    injected_ms: float
    ended_ms: float | None = None  # a pause's SIGCONT, a broker's return
    detail: str = ""


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
    first_produce_ok_ms: dict[str, float] = Field(default_factory=dict)  # affected partition -> first ack after
    load: LoadAtFault


class TimelineRecord(Record):
    """A controller's failover timeline (actors/controller/timeline.py keeps it while answers come in)."""

    kind: str
    controller_id: int
    epoch: int
    brokers: list[int]
    detected_ms: float
    processing_started_ms: float
    inbox_depth: int
    partitions_total: int = 0
    partitions_affected: int = 0
    partitions: list[str] = Field(default_factory=list)  # topic-partition of each leader/ISR it wrote
    live_brokers: int = 0
    zk_written_ms: float | None = None
    requests_sent_ms: float | None = None
    requests_acked_ms: float | None = None
    requests: int = 0


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


class Ack(Record):
    """An acknowledged record: where the leader said it is, and which leader said so."""

    topic: str
    partition: int
    offset: int
    record_id: str  # "<producer>-<sequence>": unique, increasing per producer in send order
    broker_id: int  # -1 when the load generator did not know (Kafka's produce response does not say)
    leader_epoch: int  # -1 likewise; both are filled in from the final read-back (failovers.attribute)
    sent_ms: float
    acked_ms: float  # when the acknowledgement reached the producer


class Consumed(Record):
    topic: str
    partition: int
    offset: int
    record_id: str
    leader_epoch: int
    ts_ms: float
    final: bool = False  # read back from the start after the run, rather than by the live consumer


class ControllerEventRecord(Record):
    controller_id: int
    controller_epoch: int
    active: bool
    event: str
    enqueued_ms: float
    started_ms: float
    finished_ms: float


class ControllerRequestRecord(Record):
    broker_id: int
    controller_id: int
    controller_epoch: int
    api: str
    ts_ms: float


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


class Summary(Record):
    run_id: str
    experiment: str
    started_ms: float
    ended_ms: float
    faults: int
    failovers: int
    acked: int
    consumed: int
    unavailability_ms_p50: float | None = None
    unavailability_ms_p99: float | None = None
    produce_latency_ms_p50: float | None = None  # send -> acknowledgement, every acknowledged record
    produce_latency_ms_p99: float | None = None
    malformed_lines: dict[str, int] = Field(default_factory=dict)
    invariants: dict[str, int] = Field(default_factory=dict)  # invariant -> violations


def tp_key(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


R = TypeVar("R", bound=BaseModel)


class JsonlReader:
    """Reads a run directory's files, counting malformed lines per file instead of stopping."""

    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir)
        self.malformed: dict[str, int] = {}
        self.examples: dict[str, str] = {}  # file -> the first malformed line's error

    def lines(self, name: str, model: type[R]) -> Iterator[R]:
        path = self.dir / name
        if not path.exists():
            return
        with open(path, errors="replace") as f:  # a torn write must not stop the reading
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield model.model_validate_json(line)
                except ValidationError as e:
                    self.malformed[name] = self.malformed.get(name, 0) + 1
                    self.examples.setdefault(name, f"line {number}: {e.errors()[0]['msg']}")

    def document(self, name: str, model: type[R]) -> R | None:
        path = self.dir / name
        if not path.exists():
            return None
        try:
            return model.model_validate_json(path.read_text())
        except ValidationError as e:
            self.malformed[name] = self.malformed.get(name, 0) + 1
            self.examples.setdefault(name, e.errors()[0]["msg"])
            return None


class JsonlWriter:
    """Appends records to a run directory's files (one open file per kind, flushed per batch)."""

    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, object] = {}

    def write(self, name: str, records: list[BaseModel]) -> None:
        self.append(name, [r.model_dump_json() for r in records])

    def append(self, name: str, lines: list[str]) -> None:
        """Lines already serialised (what the RunRecorder receives from the actors)."""
        if not lines:
            return
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = open(self.dir / name, "a")
        f.write("".join(line + "\n" for line in lines))
        f.flush()

    def document(self, name: str, record: BaseModel) -> None:
        (self.dir / name).write_text(record.model_dump_json(indent=2))

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
