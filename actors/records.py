"""The records actors write into a run directory, and the files they go to: JSON Lines, but for the
per-record kinds (COLUMNAR: `produced/`, `consumed/`), which are Parquet parts (actors/columns.py).

Brokers, controllers and load generators send these through their record sink (actors/recording.py)
to the RunRecorder, so they live with the actors rather than with the jobs that read them back
(jobs/measures/rundir.py has the rest of the run directory and its layout). Times are wall-clock
milliseconds since the epoch, on the clock of the machine that wrote them (one machine for a local
run). Partitions are keyed "topic-partition" in JSON objects, as Kafka prints them (`tp_key`).

Readers count malformed lines (and unreadable parts) instead of failing on them (`RunReader`), so
that a run cut short by a crash still reads.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from actors import columns

TIMELINES = "timelines.jsonl"
PRODUCED = "produced"  # Parquet parts (actors/columns.py), as CONSUMED
CONSUMED = "consumed"
CONTROLLER_EVENTS = "controller_events.jsonl"
CONTROLLER_REQUESTS = "controller_requests.jsonl"
PRODUCE_ERRORS = "produce_errors.jsonl"
CLIENT_STATS = "client_stats.jsonl"
BROKER_EVENTS = "broker_events.jsonl"
GROUP_COMMITS = "group_commits.jsonl"
PROBE_PRODUCER = "probe"  # the probe producer's name: its record ids are "probe-<sequence>"


class Record(BaseModel):
    """A line of a run directory's files: a field nobody declared is an error, not ignored."""

    model_config = ConfigDict(extra="forbid")


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
    steps_ms: dict[str, float] = Field(default_factory=dict)  # a controller failover's steps, as its log line has them


class Ack(Record):
    """An acknowledged record: where the leader said it is, and which leader said so."""

    topic: str
    partition: int
    # None: delivered, but the client was not told where (a retried batch the broker answered
    # DUPLICATE_SEQUENCE_NUMBER: already appended, its offsets no longer kept; librdkafka reports success)
    offset: int | None
    record_id: str  # "<producer>-<sequence>": unique, increasing per producer in send order
    broker_id: int  # -1 when the producer did not know (Kafka's produce response does not say)
    leader_epoch: int  # -1 likewise
    sent_ms: float
    acked_ms: float  # when the acknowledgement reached the producer


class BrokerEvent(Record):
    """A step a broker took that a partition's failover waits on (actors/broker/events.py)."""

    broker_id: int
    ts_ms: float
    kind: str  # BrokerEvents' kinds: registered, leader_and_isr, update_metadata, isr_change, truncation,
    # follower_fetch, client_append, hw_moved, produce_error, group_loaded, group_stabilized, group_synced,
    # coordinator_found
    partition: str | None = None
    leader_epoch: int | None = None
    replica: int | None = None  # follower_fetch: the follower; coordinator_found: the coordinator named
    isr: list[int] | None = None  # isr_change: the ISR written
    detail: str = ""  # registered: the broker epoch; isr_change: Shrinking/Expanding from what; truncation: from and
    # to; produce_error: the error
    leaders: dict[str, int] = Field(default_factory=dict)  # leader_and_isr: partitions led now -> leader epoch
    isrs: dict[str, list[int]] = Field(default_factory=dict)  # leader_and_isr: partitions led now -> their ISR
    followers: dict[str, int] = Field(default_factory=dict)  # leader_and_isr: partitions followed now -> epoch
    partitions: int = 0  # update_metadata: partition states in it; group_loaded: groups; group_stabilized: members
    controller_epoch: int | None = None
    group: str | None = None  # group_stabilized, group_synced, coordinator_found
    generation: int | None = None  # group_stabilized, group_synced


class ProduceError(Record):
    """A record the client gave up on (delivery.timeout.ms ran out, or a non-retriable error): what the
    application saw; librdkafka's own retries show in ClientStats."""

    topic: str
    partition: int
    record_id: str
    sent_ms: float
    failed_ms: float
    error: str  # Kafka's error name and librdkafka's text


class BrokerClientStats(Record):
    """librdkafka's view of one broker connection (its statistics: times in ms, counters cumulative)."""

    state: str
    rtt_ms_avg: float  # request round trip, over the last statistics interval
    rtt_ms_p99: float
    int_latency_ms_avg: float  # a record's wait in the client's queue before it is sent
    int_latency_ms_p99: float
    outbuf: int  # requests waiting to be sent
    waitresp: int  # requests sent, waiting for their response
    txerrs: int
    txretries: int
    req_timeouts: int


class PartitionClientStats(Record):
    leader: int  # the leader the client knows (-1: none)
    queued: int  # records in the partition's queue (msgq_cnt)
    sending: int  # records in the broker's transmit queue (xmit_msgq_cnt)
    in_flight: int  # records sent, not yet acknowledged (msgs_inflight)


class ClientStats(Record):
    """A producer's statistics at one moment; partitions only where records wait."""

    producer: str
    ts_ms: float
    brokers: dict[int, BrokerClientStats]
    partitions: dict[str, PartitionClientStats]
    idempotence: str | None = None  # the idempotent producer's state (Assigned; DrainBump, WaitPID...: not sending)
    producer_epoch: int | None = None


class Consumed(Record):
    topic: str
    partition: int
    offset: int
    record_id: str
    leader_epoch: int
    ts_ms: float
    final: bool = False  # read back from the start after the run, rather than by the live consumer
    group: str | None = None  # delivered to a member of this consumer group (subscribe), not to an assign() reader
    member: str | None = None  # the group member's client id


class GroupCommit(Record):
    """A consumer group's committed offset for one partition: one a member was told the coordinator stored
    (stored_offset None), or one read back from the group's __consumer_offsets partition after the run (in
    log order: stored_offset is the commit record's offset in that log)."""

    group: str
    topic: str
    partition: int
    offset: int  # the next record the group will read
    ts_ms: float  # when the member heard; for one read back, the commit's timestamp in the record
    member: str | None = None
    stored_offset: int | None = None


class ControllerEventRecord(Record):
    controller_id: int
    controller_epoch: int
    active: bool
    event: str
    enqueued_ms: float
    started_ms: float
    finished_ms: float
    error: str | None = None  # the event failed (the controller then moved): what it raised


class ControllerRequestRecord(Record):
    broker_id: int
    controller_id: int
    controller_epoch: int
    api: str
    ts_ms: float


COLUMNAR: dict[str, type[Record]] = {PRODUCED: Ack, CONSUMED: Consumed}


def tp_key(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


R = TypeVar("R", bound=BaseModel)


class RunReader:
    """Reads a run directory's files, counting malformed lines (or parts) per file instead of stopping."""

    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir)
        self.malformed: dict[str, int] = {}
        self.examples: dict[str, str] = {}  # file -> the first malformed line's error

    def lines(self, name: str, model: type[R]) -> Iterator[R]:
        """The file's records in the order written (a COLUMNAR kind's rows, part by part)."""
        path = self.dir / name
        if name in COLUMNAR:
            yield from columns.read_parts(path, model, lambda error: self._malformed(name, error))
            return
        if not path.exists():
            return
        with open(path, errors="replace") as f:  # a torn write must not stop the reading
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield model.model_validate_json(line)
                except ValidationError as e:
                    self._malformed(name, f"line {number}: {e.errors()[0]['msg']}")

    def document(self, name: str, model: type[R]) -> R | None:
        path = self.dir / name
        if not path.exists():
            return None
        try:
            return model.model_validate_json(path.read_text())
        except ValidationError as e:
            self._malformed(name, e.errors()[0]["msg"])
            return None

    def _malformed(self, name: str, error: str) -> None:
        self.malformed[name] = self.malformed.get(name, 0) + 1
        self.examples.setdefault(name, error)


class RunWriter:
    """Appends records to a run directory's files: JSON lines (one open file per kind, flushed per
    batch), or a COLUMNAR kind's batches (its Parquet parts, the last written at `close`)."""

    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, object] = {}
        self._parts: dict[str, columns.PartWriter] = {}

    def write(self, name: str, records: list[BaseModel]) -> None:
        if name in COLUMNAR:
            if records:
                self.write_batches(name, [columns.batch_of(COLUMNAR[name], records)])
            return
        self.append(name, [r.model_dump_json() for r in records])

    def write_batches(self, name: str, batches: list) -> None:
        """A COLUMNAR kind's Arrow record batches (what the RunRecorder receives from the load's actors)."""
        parts = self._parts.get(name)
        if parts is None:
            parts = self._parts[name] = columns.PartWriter(self.dir / name)
        parts.write(batches)

    def append(self, name: str, lines: list[str]) -> None:
        """Lines already serialised (what the RunRecorder receives from the actors)."""
        if name in COLUMNAR:
            raise ValueError(f"{name} is a directory of Parquet parts, not JSON lines")
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
        for parts in self._parts.values():
            parts.flush()
        self._parts.clear()
