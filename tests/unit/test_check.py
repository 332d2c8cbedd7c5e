"""jobs.measures.check: the invariant checker on fabricated run directories."""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from actors.records import (
    CONSUMED,
    CONTROLLER_EVENTS,
    CONTROLLER_REQUESTS,
    GROUP_COMMITS,
    PRODUCED,
    Ack,
    Consumed,
    ControllerEventRecord,
    ControllerRequestRecord,
    GroupCommit,
    RunWriter,
    tp_key,
)
from jobs.measures import check
from jobs.measures.rundir import (
    COPIES,
    FINAL_STATE,
    LOAD,
    PARTITION_STATES,
    SUMMARY,
    BrokerCache,
    FinalState,
    LoadSample,
    PartitionLeadership,
    RecordCopy,
    StateSample,
    Summary,
)

PARTITIONS = [("orders", 0), ("orders", 1), ("my-events", 0)]  # a topic with a dash, as Kafka allows
RECORDS_PER_PARTITION = 8  # offsets 0..7; leader epoch 1 (broker 0) for 0..3, epoch 2 (broker 1) for 4..7
BROKERS = [0, 1, 2]


@dataclass
class Run:
    acks: list[Ack] = field(default_factory=list)
    consumed: list[Consumed] = field(default_factory=list)
    requests: list[ControllerRequestRecord] = field(default_factory=list)
    events: list[ControllerEventRecord] = field(default_factory=list)
    samples: list[StateSample] = field(default_factory=list)
    commits: list[GroupCommit] = field(default_factory=list)
    load: list[LoadSample] = field(default_factory=list)
    copies: list[RecordCopy] = field(default_factory=list)
    final_state: FinalState | None = None

    def final(self, topic: str, partition: int, offset: int) -> Consumed:
        return next(c for c in self.consumed
                    if c.final and (c.topic, c.partition, c.offset) == (topic, partition, offset))

    def ack(self, topic: str, partition: int, offset: int) -> Ack:
        return next(a for a in self.acks if (a.topic, a.partition, a.offset) == (topic, partition, offset))

    def set_leadership(self, tp: str, p: PartitionLeadership) -> None:
        """Changes a partition in ZooKeeper's final state and in every cache alike."""
        self.final_state.zookeeper[tp] = p
        for cache in self.final_state.caches.values():
            cache.partitions[tp] = p.model_copy()

    def write(self, run_dir: Path) -> Path:
        w = RunWriter(run_dir)
        w.write(PRODUCED, self.acks)
        w.write(CONSUMED, self.consumed)
        w.write(CONTROLLER_REQUESTS, self.requests)
        w.write(CONTROLLER_EVENTS, self.events)
        w.write(PARTITION_STATES, self.samples)
        w.write(GROUP_COMMITS, self.commits)
        w.write(LOAD, self.load)
        w.write(COPIES, self.copies)
        if self.final_state is not None:
            w.document(FINAL_STATE, self.final_state)
        w.close()
        return run_dir


def clean_run() -> Run:
    """Two producers interleaved on three partitions, one leader change per partition, two
    controller epochs (one controller each), healthy samples, converged caches."""
    run = Run()
    t = 1_000_000.0
    for i, (topic, partition) in enumerate(PARTITIONS):
        for offset in range(RECORDS_PER_PARTITION):
            producer = ("p1", "p2")[offset % 2]
            record_id = f"{producer}-{i * 100 + offset // 2}"  # unique, increasing per producer
            epoch, broker = (1, 0) if offset < 4 else (2, 1)
            run.acks.append(Ack(topic=topic, partition=partition, offset=offset, record_id=record_id,
                                broker_id=broker, leader_epoch=epoch, sent_ms=t + offset, acked_ms=t + offset + 5))
            run.consumed.append(Consumed(topic=topic, partition=partition, offset=offset, record_id=record_id,
                                         leader_epoch=epoch, ts_ms=t + offset + 10))
    live = list(run.consumed)
    run.consumed += [c.model_copy(update={"final": True, "ts_ms": c.ts_ms + 60_000}) for c in live]
    # a consumer group given every record (orders-1 from offset 2 twice: a member took it over), committing
    # half-way and at the end; its log (read back) holds both commits of each partition
    run.consumed += [c.model_copy(update={"group": GROUP, "member": "g0", "ts_ms": c.ts_ms + 20}) for c in live]
    run.consumed += [c.model_copy(update={"group": GROUP, "member": "g1", "ts_ms": c.ts_ms + 900}) for c in live
                     if (c.topic, c.partition) == ("orders", 1) and c.offset >= 2]
    for i, (topic, partition) in enumerate(PARTITIONS):
        for n, offset in enumerate((4, RECORDS_PER_PARTITION)):
            told = GroupCommit(group=GROUP, topic=topic, partition=partition, offset=offset, ts_ms=t + 100 * n,
                               member="g0")
            run.commits += [told, told.model_copy(update={"member": None, "stored_offset": 2 * i + n})]
    for epoch, controller in ((1, 0), (2, 1)):
        for broker in BROKERS:
            run.requests.append(ControllerRequestRecord(broker_id=broker, controller_id=controller,
                                                        controller_epoch=epoch, api="UpdateMetadata", ts_ms=t))
        run.events.append(ControllerEventRecord(controller_id=controller, controller_epoch=epoch, active=True,
                                                event="BrokerChange", enqueued_ms=t, started_ms=t, finished_ms=t))
    # the old controller still logs events in epoch 2, but inactive: not acting
    run.events.append(ControllerEventRecord(controller_id=0, controller_epoch=2, active=False, event="Expire",
                                            enqueued_ms=t, started_ms=t, finished_ms=t))
    leadership = {tp_key(*tp): PartitionLeadership(leader=1, leader_epoch=2, isr=[1, 2, 0]) for tp in PARTITIONS}
    for i in range(5):
        partitions = {tp: p.model_copy() for tp, p in leadership.items()}
        if i == 0:  # offline for a moment: leader -1 with an empty ISR is allowed
            partitions[tp_key("orders", 1)] = PartitionLeadership(leader=-1, leader_epoch=1, isr=[])
        run.samples.append(StateSample(ts_ms=t + i * 1000, live_brokers=BROKERS, partitions=partitions))
    run.final_state = FinalState(
        ts_ms=t + 70_000, live_brokers=[2, 0, 1], zookeeper=leadership,
        assignments={tp_key(*tp): [0, 1, 2] for tp in PARTITIONS},
        caches={b: BrokerCache(controller_epoch=2, brokers=[0, 1, 2],
                               partitions={tp: PartitionLeadership(leader=p.leader, leader_epoch=p.leader_epoch,
                                                                   isr=sorted(p.isr))
                                           for tp, p in leadership.items()})
                for b in BROKERS})
    return run


GROUP = "load-group"


def only(name: str) -> dict[str, int]:
    return {n: int(n == name) for n in check.INVARIANTS}


NONE = only("")
ACKED = len(PARTITIONS) * RECORDS_PER_PARTITION


def test_clean_run_has_no_violations(tmp_path, capsys):
    report = check.check_run(clean_run().write(tmp_path))
    assert list(report.invariants) == list(check.INVARIANTS)
    assert report.invariants == NONE
    assert report.examples == {n: [] for n in check.INVARIANTS}
    assert report.notes == [] and report.malformed_lines == {}
    assert report.counts == {"acked": ACKED, "consumed_final": ACKED, "consumed_live": 2 * ACKED + 6,
                             "state_samples": 5, "controller_epochs": 2, "resent_by_client": 0}
    assert report.ok
    assert check.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Invariant                      Violations  Example"
    assert out[1] == "lost                                    0"
    assert out[-1] == "OK"


# each breaks its invariant exactly once
def lose_last_record(run):
    run.consumed.remove(run.final("orders", 1, RECORDS_PER_PARTITION - 1))


def lose_to_overwrite(run):  # the offset was truncated and rewritten by another record
    run.final("orders", 0, 5).record_id = "p3-0"


def duplicate_at_end(run):
    c = run.final("orders", 0, 3)
    run.consumed.append(c.model_copy(update={"offset": RECORDS_PER_PARTITION}))


def duplicate_twice(run):  # one record at three offsets is one duplicated record
    c = run.final("orders", 0, 3)
    run.consumed += [c.model_copy(update={"offset": o}) for o in (RECORDS_PER_PARTITION, RECORDS_PER_PARTITION + 1)]


def duplicate_across_partitions(run):
    c = run.final("orders", 0, 3)
    run.consumed.append(c.model_copy(update={"partition": 1, "offset": RECORDS_PER_PARTITION}))


def swap_producer_order(run):  # p1's first two records of orders-0 at offsets 0 and 2, swapped
    for offset, record_id in ((0, "p1-1"), (2, "p1-0")):
        run.ack("orders", 0, offset).record_id = record_id
        for c in run.consumed:
            if (c.topic, c.partition, c.offset) == ("orders", 0, offset):
                c.record_id = record_id


def gap_in_log(run):
    c = run.final("my-events", 0, 0)
    run.consumed.append(c.model_copy(update={"offset": RECORDS_PER_PARTITION + 1, "record_id": "p9-0"}))


def log_not_from_zero(run):
    for c in run.consumed:
        if (c.topic, c.partition) == ("orders", 1):
            c.offset += 3
    for a in run.acks:
        if (a.topic, a.partition) == ("orders", 1):
            a.offset += 3


def offset_read_twice(run):
    run.consumed.append(run.final("orders", 1, 2).model_copy())


def second_controller_request(run):
    run.requests.append(ControllerRequestRecord(broker_id=2, controller_id=2, controller_epoch=1,
                                                api="LeaderAndIsr", ts_ms=1.0))


def second_controller_event(run):
    run.events.append(ControllerEventRecord(controller_id=0, controller_epoch=2, active=True, event="TopicChange",
                                            enqueued_ms=1.0, started_ms=1.0, finished_ms=1.0))


def failed_event(run):
    run.events.append(ControllerEventRecord(controller_id=1, controller_epoch=2, active=True, event="TopicChange",
                                            enqueued_ms=1.0, started_ms=1.0, finished_ms=1.0,
                                            error="ConnectionLoss: "))


def second_leader(run):
    run.ack("orders", 1, 5).broker_id = 2


def leader_not_in_isr(run):
    for s in run.samples[2:]:  # three samples, one (partition, leader epoch): counted once
        s.partitions[tp_key("orders", 0)] = PartitionLeadership(leader=1, leader_epoch=2, isr=[0, 2])


def final_leader_not_in_isr(run):
    run.set_leadership(tp_key("orders", 0), PartitionLeadership(leader=1, leader_epoch=2, isr=[0, 2]))
    run.final_state.assignments[tp_key("orders", 0)] = [0, 2]  # fully replicated: only the leader is wrong


def final_leader_not_live(run):
    run.set_leadership(tp_key("orders", 0), PartitionLeadership(leader=7, leader_epoch=3, isr=[7, 0]))
    run.final_state.assignments[tp_key("orders", 0)] = [7, 0]


def final_isr_short_of_the_assignment(run):
    run.set_leadership(tp_key("my-events", 0), PartitionLeadership(leader=1, leader_epoch=3, isr=[1, 2]))


def stale_cache_epoch(run):
    run.final_state.caches[2].partitions[tp_key("orders", 1)].leader_epoch = 1


def stale_cache_isr(run):
    run.final_state.caches[0].partitions[tp_key("my-events", 0)].isr = [1, 2]


def cache_missing_partition(run):
    del run.final_state.caches[1].partitions[tp_key("orders", 0)]


def stale_cache_brokers(run):
    run.final_state.caches[1].brokers = [0, 1]


def commit_back(run):  # the group's log: orders-0 committed at 8, then at 6
    run.commits.append(GroupCommit(group=GROUP, topic="orders", partition=0, offset=6, ts_ms=1.0, stored_offset=9))


def lose_told_commit(run):  # a member was told 6 was stored; the log has no such commit
    run.commits.append(GroupCommit(group=GROUP, topic="my-events", partition=0, offset=6, ts_ms=1.0, member="g1"))


def group_skips_record(run):  # orders-0@2, below the final commit 8, never given to the group
    run.consumed.remove(next(c for c in run.consumed if c.group and (c.topic, c.partition, c.offset) == ("orders", 0, 2)))


def group_given_unacked(run):  # a record given at orders-1@3 besides the one acknowledged there
    given = next(c for c in run.consumed if c.group and (c.topic, c.partition, c.offset) == ("orders", 1, 3))
    run.consumed.append(given.model_copy(update={"record_id": "p9-0"}))


def unrecorded_acks(run: Run) -> None:
    """The load counted more acknowledgements than reached the run directory."""
    run.load.append(LoadSample(ts_ms=2_000_000.0, acked_total=len(run.acks) + 1, produce_rate=10.0, consumed_total=0,
                               inbox_depth=0, sender_queue_depths={}, brokers_alive=3, controller_id=0,
                               controller_epoch=2))


BREAKS = [
    ("lost", lose_last_record, "p2-103 acked at orders-1@7"),
    ("lost", lose_to_overwrite, "holds p3-0"),
    ("duplicated", duplicate_at_end, "record p2-1 at orders-0@3 and orders-0@8"),
    ("duplicated", duplicate_twice, "record p2-1 at orders-0@3, orders-0@8 and orders-0@9"),
    ("duplicated", duplicate_across_partitions, "record p2-1 at orders-0@3 and orders-1@8"),
    ("reordered", swap_producer_order, "orders-0: p1-0 at offset 2 but p1-1 at offset 0"),
    ("reordered", gap_in_log, "gap in my-events-0: offsets 8..8 missing"),
    ("reordered", log_not_from_zero, "gap in orders-1: offsets 0..2 missing"),
    ("reordered", offset_read_twice, "offset orders-1@2 read twice"),
    ("multiple_controllers", second_controller_request, "controller epoch 1 acted on by controllers [0, 2]"),
    ("multiple_controllers", second_controller_event, "controller epoch 2 acted on by controllers [0, 1]"),
    ("failed_controller_events", failed_event, "TopicChange failed on controller 1 epoch 2: ConnectionLoss"),
    ("multiple_leaders", second_leader, "orders-1 leader epoch 2 acked by brokers [1, 2]"),
    ("leader_not_live_or_in_isr", leader_not_in_isr, "orders-0 leader 1 not in ISR [0, 2]"),
    ("leader_not_live_or_in_isr", final_leader_not_in_isr, "final state: orders-0 leader 1 with ISR [0, 2]"),
    ("leader_not_live_or_in_isr", final_leader_not_live, "final state: orders-0 leader 7"),
    ("caches_not_converged", stale_cache_epoch, "broker 2 caches orders-1 as leader 1 epoch 1 ISR [0, 1, 2], ZooKeeper has leader 1 epoch 2 ISR [0, 1, 2] (1 of 3"),
    ("caches_not_converged", stale_cache_isr, "broker 0 caches my-events-0 as leader 1 epoch 2 ISR [1, 2], ZooKeeper has leader 1 epoch 2 ISR [0, 1, 2]"),
    ("caches_not_converged", cache_missing_partition, "broker 1 caches orders-0 as absent"),
    ("caches_not_converged", stale_cache_brokers, "broker 1 caches brokers [0, 1], live brokers are [0, 1, 2]"),
    ("under_replicated", final_isr_short_of_the_assignment, "my-events-0: ISR [1, 2], replicas [0, 1, 2]"),
    ("group_commits_backwards", commit_back, "group load-group orders-0: commit 6 (log offset 9) after 8 (log offset 1)"),
    ("group_commits_backwards", lose_told_commit, "group load-group my-events-0: commit 6 acknowledged to member g1"),
    ("group_not_delivered", group_skips_record, "group load-group: record p1-1 acked at orders-0@2, below the "
                                                "group's final commit 8, never given to it"),
    ("group_delivered_unacked", group_given_unacked, "group load-group: given record p9-0 at orders-1@3"),
    ("acked_unrecorded", unrecorded_acks, "the load counted 25 acknowledgements by its last sample; produced/ holds 24 of the load's"),
]


@pytest.mark.parametrize("name, breaker, example", BREAKS, ids=[b[1].__name__ for b in BREAKS])
def test_each_invariant_broken_once(tmp_path, capsys, name, breaker, example):
    run = clean_run()
    breaker(run)
    report = check.check_run(run.write(tmp_path))
    assert report.invariants == only(name)
    assert len(report.examples[name]) == 1 and example in report.examples[name][0]
    assert not report.ok
    assert check.main([str(tmp_path)]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(name + " "))
    assert row.split()[1] == "1" and example in row


def stored(c: Consumed, producer_id: int, epoch: int, sequence: int) -> RecordCopy:
    return RecordCopy(topic=c.topic, partition=c.partition, offset=c.offset, record_id=c.record_id,
                      producer_id=producer_id, producer_epoch=epoch, sequence=sequence)


RESENT = "record p2-1 at orders-0@3 and orders-0@8: producer 7 epochs 1 sequence 41, 2 sequence 0"


@pytest.mark.parametrize("second, third, duplicated", [
    ((7, 2, 0), None, False),  # the client bumped its epoch and sent the record again: no broker can tell
    ((7, 1, 41), None, True),  # one producer epoch twice: the broker failed to deduplicate
    ((7, 1, 42), None, True),  # one epoch, another sequence: not an epoch bump
    ((7, 0, 0), None, True),  # an older epoch after a newer one: the broker took a fenced producer's batch
    ((8, 2, 0), None, True),  # another producer
    (None, None, True),  # the second copy's producer not known (its leader did not answer)
    ((7, 2, 0), (7, 2, 1), True),  # three copies, two under one epoch
    ((7, 2, 0), (7, 3, 0), False),  # bumped twice
])
def test_a_record_resent_by_its_client_under_a_new_epoch_is_not_a_duplicate(tmp_path, second, third, duplicated):
    """Kafka's idempotence holds per producer epoch: a record stored under two epochs of its producer, the
    newer after the older, was sent twice by its client (librdkafka's epoch bump, its issue #4953), and is
    counted apart."""
    run = clean_run()
    first = run.final("orders", 0, 3)
    copies = [first.model_copy(update={"offset": RECORDS_PER_PARTITION + i}) for i in range(1 + (third is not None))]
    run.consumed += copies
    run.copies.append(stored(first, 7, 1, 41))
    run.copies += [stored(c, *by) for c, by in zip(copies, (second, third)) if by is not None]
    report = check.check_run(run.write(tmp_path))
    assert report.invariants == (only("duplicated") if duplicated else NONE)
    assert report.counts["resent_by_client"] == (not duplicated)
    resent_notes = [n for n in report.notes if "sent again by their clients" in n]
    assert len(resent_notes) == (not duplicated)
    if third is None and not duplicated:
        assert RESENT in resent_notes[0]


def test_copies_of_a_record_in_two_partitions_are_a_duplicate_whatever_their_epochs(tmp_path):
    run = clean_run()
    duplicate_across_partitions(run)
    first, second = run.final("orders", 0, 3), run.final("orders", 1, RECORDS_PER_PARTITION)
    run.copies += [stored(first, 7, 1, 41), stored(second, 7, 2, 0)]
    report = check.check_run(run.write(tmp_path))
    assert report.invariants == only("duplicated") and report.counts["resent_by_client"] == 0


def test_an_ack_without_an_offset_is_found_by_record_id_in_its_partition(tmp_path):
    """librdkafka reports a retried batch the broker answered DUPLICATE_SEQUENCE_NUMBER as delivered, with
    no offset: it is lost only if its partition's read-back does not hold it anywhere."""
    run = clean_run()
    placed = run.acks[3]
    run.acks[3] = placed.model_copy(update={"offset": None})
    report = check.check_run(run.write(tmp_path / "held"))
    assert report.invariants == NONE and report.counts["acked"] == ACKED
    assert any("1 acks came without an offset" in n for n in report.notes)
    run.consumed.remove(run.final(placed.topic, placed.partition, placed.offset))
    report = check.check_run(run.write(tmp_path / "lost"))
    assert report.invariants["lost"] == 1 and f"record {placed.record_id} acked (offset not told)" in \
        report.examples["lost"][0]


def test_examples_are_capped_but_counts_are_not(tmp_path):
    run = clean_run()
    for c in [c for c in run.consumed if c.final and c.topic == "orders"]:
        run.consumed.remove(c)
    report = check.check_run(run.write(tmp_path))
    assert report.invariants == {**NONE, "lost": 2 * RECORDS_PER_PARTITION}
    assert len(report.examples["lost"]) == check.MAX_EXAMPLES


def dead_leader_run(durations_ms: list[float]) -> Run:
    """Leader 2 of orders-0 outside the live brokers for each duration in turn, live in between."""
    run = clean_run()
    run.samples, t = [], 2_000_000.0
    for duration in durations_ms:
        for ts, live in ((t, [0, 1, 2]), (t + 1, [0, 1]), (t + 1 + duration, [0, 1])):
            run.samples.append(StateSample(ts_ms=ts, live_brokers=live, partitions={
                tp_key("orders", 0): PartitionLeadership(leader=2, leader_epoch=4, isr=[2, 0])}))
        t += duration + 1000
    run.samples.reverse()  # the checker orders samples by time itself
    return run


@pytest.mark.parametrize("durations, grace_ms, violations", [
    ([4999], 5000, 0),
    ([5000], 5000, 1),
    ([4000, 4000], 5000, 0),  # the leader came back in between: two short outages, not one long one
    ([7000, 7000], 5000, 1),  # one (partition, leader epoch), counted once
    ([2000], 1000, 1),
])
def test_dead_leader_grace_period(tmp_path, durations, grace_ms, violations):
    report = check.check_run(dead_leader_run(durations).write(tmp_path), grace_ms=grace_ms)
    assert report.invariants == {**NONE, "leader_not_live_or_in_isr": violations}
    assert len(report.examples["leader_not_live_or_in_isr"]) == violations
    assert check.main([str(tmp_path), "--grace-ms", str(grace_ms)]) == int(violations > 0)


def test_new_leader_epoch_restarts_the_grace_period(tmp_path):
    run = clean_run()
    run.samples = [StateSample(ts_ms=ts, live_brokers=[0, 1], partitions={
        tp_key("orders", 0): PartitionLeadership(leader=2, leader_epoch=epoch, isr=[2])})
        for ts, epoch in ((0, 4), (3000, 4), (3001, 5), (6000, 5))]
    assert check.check_run(run.write(tmp_path)).invariants == NONE


def test_malformed_lines_are_counted_and_the_rest_checked(tmp_path, capsys):
    run = clean_run()
    lose_last_record(run)
    run.write(tmp_path)
    torn = (tmp_path / PRODUCED / "part-00000.parquet").read_bytes()
    (tmp_path / PRODUCED / "part-00001.parquet").write_bytes(torn[:len(torn) // 2])  # cut short by a crash
    pq.write_table(pa.table({"topic": ["orders"]}), tmp_path / PRODUCED / "part-00002.parquet")  # not an Ack's
    with open(tmp_path / PARTITION_STATES, "a") as f:
        f.write("not json\n")
    report = check.check_run(tmp_path)
    assert report.malformed_lines == {PRODUCED: 2, PARTITION_STATES: 1}
    assert report.malformed_examples[PRODUCED].startswith("part-00001.parquet: ")
    assert report.invariants == only("lost")
    assert report.counts["acked"] == ACKED and report.counts["state_samples"] == 5
    assert check.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"Malformed lines: {PRODUCED}: 2 (part-00001.parquet: " in out
    assert f"{PARTITION_STATES}: 1 (line 6: " in out


def test_malformed_final_state_is_a_note(tmp_path):
    run = clean_run()
    stale_cache_epoch(run)
    run.write(tmp_path)
    (tmp_path / FINAL_STATE).write_text('{"ts_ms": 1}')
    report = check.check_run(tmp_path)
    assert report.malformed_lines == {FINAL_STATE: 1}
    assert report.invariants == NONE
    assert len(report.notes) == 1 and FINAL_STATE in report.notes[0]


@pytest.mark.parametrize("drop_file", [False, True])
def test_missing_final_read_back_is_a_note(tmp_path, drop_file):
    run = clean_run()
    run.consumed = [c for c in run.consumed if not c.final]
    run.write(tmp_path)
    if drop_file:
        shutil.rmtree(tmp_path / CONSUMED)
    report = check.check_run(tmp_path)
    assert report.invariants == NONE
    assert len(report.notes) == 1 and "no final read-back" in report.notes[0]
    assert report.counts["consumed_final"] == 0
    assert report.counts["consumed_live"] == (0 if drop_file else 2 * ACKED + 6)
    assert check.main([str(tmp_path)]) == 0


def test_missing_final_state_is_a_note(tmp_path, capsys):
    run = clean_run()
    run.final_state = None
    report = check.check_run(run.write(tmp_path))
    assert report.invariants == NONE
    assert len(report.notes) == 1 and FINAL_STATE in report.notes[0]
    assert check.main([str(tmp_path)]) == 0
    assert f"Note: no readable {FINAL_STATE}" in capsys.readouterr().out


def test_silent_broker_is_a_note_not_a_violation(tmp_path):
    run = clean_run()
    del run.final_state.caches[2]
    report = check.check_run(run.write(tmp_path))
    assert report.invariants == NONE
    assert report.notes == ["live brokers [2] did not report their metadata cache"]


def test_empty_run_dir_checks_nothing(tmp_path):
    report = check.check_run(tmp_path)
    assert report.invariants == NONE and report.ok
    assert report.counts == dict.fromkeys(["acked", "consumed_final", "consumed_live", "state_samples",
                                           "controller_epochs", "resent_by_client"], 0)
    assert len(report.notes) == 2


@pytest.mark.parametrize("make_file", [False, True])
def test_missing_run_dir_returns_2(tmp_path, capsys, make_file):
    path = tmp_path / "runs" / "nope"
    if make_file:
        path.parent.mkdir()
        path.write_text("")
    assert check.main([str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("Error: ") and captured.err.count("\n") == 1


def test_a_runs_report_prints_the_checks_its_summary_kept(tmp_path, monkeypatch):
    """The run's report prints the checks made once as the run ended (summary.json keeps them), rather than
    reading every record again."""
    from jobs.experiments import summary

    run_dir = clean_run().write(tmp_path)
    kept = check.check_run(run_dir)
    writer = RunWriter(run_dir)
    writer.document(SUMMARY, Summary(run_id=run_dir.name, experiment="clean", started_ms=0, ended_ms=1, faults=0,
                                     failovers=0, acked=ACKED, consumed=ACKED, check=kept))
    writer.close()
    monkeypatch.setattr(summary, "check_run", lambda *args: pytest.fail("the run's report checked the run again"))
    assert kept.render() in summary.report(run_dir)


def test_a_group_whose_log_was_not_read_back_is_judged_by_the_commits_its_members_were_told(tmp_path):
    run = clean_run()
    run.commits = [c for c in run.commits if c.stored_offset is None]
    report = check.check_run(run.write(tmp_path / "told"))
    assert report.invariants == NONE
    assert len(report.notes) == 1 and "no commits read back from __consumer_offsets" in report.notes[0]
    group_skips_record(run)
    report = check.check_run(run.write(tmp_path / "skipped"))
    assert report.invariants == only("group_not_delivered")
