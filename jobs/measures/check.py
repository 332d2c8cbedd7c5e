"""The invariant checker: reads a chaos run's directory (jobs/measures/rundir.py) and counts violations
of what Kafka promises with acks=all, min.insync.replicas=2 and unclean leader election off.

    lost                       A record the leader acknowledged is in the log for good: every Ack
                               is found, same record_id at the same topic/partition/offset, in the
                               final read-back (consumed/, final=True); an Ack whose offset the
                               client was not told, anywhere in its partition's read-back. Not
                               checkable, and a note says so, when the run has no final read-back.
    duplicated                 A record is written once: no record_id at more than one offset of
                               the final read-back, but one its client sent again under a new
                               producer epoch (each copy's producer, as its leader stored it, in
                               copies.jsonl), which no broker can tell from a new record: those are
                               counted apart (resent_by_client) and named in a note.
    reordered                  A partition keeps one producer's records in send order: a producer's
                               acked sequences have increasing offsets. And a log has no holes: the
                               final read-back of each partition is offsets 0, 1, 2, ... with no gap
                               and no offset read twice.
    multiple_controllers       One controller per controller epoch (the zombie-controller fence):
                               brokers' first requests of an epoch and active controller events
                               name one controller_id per epoch.
    failed_controller_events   No controller event fails: ZooKeeper hiccups are ridden out, so an event
                               that raised is a bug (the controller moves after it, controller.py).
    multiple_leaders           One leader per leader epoch: acks of a partition's leader epoch come
                               from one broker.
    leader_not_live_or_in_isr  A leader is in its ISR (unclean election off), always; and it is a
                               live broker, once the controller has had grace_ms to notice a death.
                               Checked on the periodic ZooKeeper samples (each partition and leader
                               epoch counts once) and on the final ZooKeeper state.
    caches_not_converged       After the faults stop every broker's metadata cache agrees with
                               ZooKeeper (leader, leader epoch, ISR) and knows the live brokers;
                               one violation per broker that differs.
    under_replicated           After the faults stop every partition is fully replicated again: its
                               whole assignment in its ISR (in the final ZooKeeper state).
    admin_actions_not_done     Every admin action of the schedule did what it asked, by the end
                               (actions.jsonl against the final state): a created or grown topic
                               online, each partition led; a deleted one gone from ZooKeeper and from
                               every broker's log dirs; a reassignment complete with its target
                               replicas; an election request taken up; a config in force. A refused
                               action is a violation too: the schedule asked for it.
    group_commits_backwards    A consumer group's committed offset for a partition never goes back: in
                               the group's __consumer_offsets log (read back after the run,
                               group_commits.jsonl) each commit of a partition is at or past the one
                               before; and each commit a member was told was stored is in that log (one
                               lost would send the group back).
    group_not_delivered        Every acknowledged record below the group's final committed offset of its
                               partition was delivered to a member of the group at least once.
    group_delivered_unacked    Nothing was delivered to the group that was never acknowledged: each record
                               a member was given is one a producer was told is at that offset (two
                               records given at one offset: one of them was not).
    acked_unrecorded           Every acknowledgement the load counted (its samples in load.jsonl) is in
                               produced/: a record the run directory never got is one nobody checked.

Memory is linear in the run: the final read-back is indexed by (topic, partition, offset) and
produced/ is streamed against it.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Callable, NamedTuple

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
    RunReader,
    tp_key,
)
from jobs.measures.rundir import (
    ACTIONS,
    COPIES,
    EXPERIMENT,
    FINAL_STATE,
    LOAD,
    PARTITION_STATES,
    ActionKind,
    ActionRecord,
    CheckReport,
    FinalState,
    LoadSample,
    PartitionLeadership,
    RecordCopy,
    Source,
    StateSample,
)
from jobs.measures.waits import source_of

INVARIANTS = ("lost", "duplicated", "reordered", "multiple_controllers", "failed_controller_events", "multiple_leaders",
              "leader_not_live_or_in_isr", "caches_not_converged", "under_replicated", "admin_actions_not_done",
              "group_commits_backwards", "group_not_delivered", "group_delivered_unacked", "acked_unrecorded")
MAX_EXAMPLES = 5

Key = tuple[str, int, int]  # topic, partition, offset


class Violations:
    """A count and the first few examples of one invariant's violations."""

    def __init__(self) -> None:
        self.count = 0
        self.examples: list[str] = []

    def add(self, example: str) -> None:
        self.count += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(example)


def _at(key: Key) -> str:
    topic, partition, offset = key
    return f"{tp_key(topic, partition)}@{offset}"


class ReadBack(NamedTuple):
    final: dict[Key, str]  # the final read-back by location
    live: int  # records consumed live
    repeats: list[Key]  # offsets read more than once in the final read-back
    delivered: dict[str, dict[Key, set[str]]]  # group -> location -> the record ids its members were given there


def read_consumed(reader: RunReader) -> ReadBack:
    final: dict[Key, str] = {}
    repeats: list[Key] = []
    delivered: dict[str, dict[Key, set[str]]] = defaultdict(lambda: defaultdict(set))
    live = 0
    for c in reader.lines(CONSUMED, Consumed):
        key = (sys.intern(c.topic), c.partition, c.offset)
        if c.group is not None:
            delivered[c.group][key].add(sys.intern(c.record_id))
        if not c.final:
            live += 1
        elif key in final:
            repeats.append(key)
        else:
            final[key] = c.record_id
    return ReadBack(final, live, repeats, delivered)


def check_duplicated(final: dict[Key, str], copies: dict[Key, RecordCopy]) -> tuple[Violations, Violations]:
    """Records at more than one offset: (duplicated, resent by their clients). A record whose copies, in
    one partition, its producer stored under epochs that rise with their offsets was sent again by its
    client after it bumped its epoch (librdkafka does, after OUT_OF_ORDER_SEQUENCE_NUMBER on any
    partition: its issue #4953), which Kafka's idempotence, per producer epoch, does not cover. Any other
    repeat is a duplicate: copies under one epoch (not deduplicated), an older epoch after a newer one (a
    fenced producer's batch taken), in two partitions, or whose producers are not known."""
    duplicated, resent = Violations(), Violations()
    first_at: dict[str, Key] = {}
    again: dict[str, list[Key]] = defaultdict(list)  # only the repeated records: a list per record is memory
    for key, record_id in final.items():
        if first_at.setdefault(record_id, key) != key:
            again[record_id].append(key)
    for record_id, more in again.items():
        keys = sorted([first_at[record_id], *more])
        stored = [copies.get(key) for key in keys]
        where = ", ".join(_at(key) for key in keys[:-1]) + f" and {_at(keys[-1])}"
        if len({key[:2] for key in keys}) == 1 and all(
                c is not None and c.producer_id >= 0 and c.producer_id == stored[0].producer_id for c in stored) \
                and all(a.producer_epoch < b.producer_epoch for a, b in zip(stored, stored[1:])):
            resent.add(f"record {record_id} at {where}: producer {stored[0].producer_id} epochs "
                       f"{', '.join(f'{c.producer_epoch} sequence {c.sequence}' for c in stored)}")
        else:
            duplicated.add(f"record {record_id} at {where}")
    return duplicated, resent


def check_dense(final: dict[Key, str], repeats: list[Key], v: Violations) -> None:
    """Each partition's final read-back is offsets 0..n-1: a gap or a repeated offset is a violation."""
    for key in repeats:
        v.add(f"offset {_at(key)} read twice in the final read-back")
    offsets: dict[tuple[str, int], list[int]] = defaultdict(list)
    for topic, partition, offset in final:
        offsets[(topic, partition)].append(offset)
    for (topic, partition), found in sorted(offsets.items()):
        expected = 0
        for offset in sorted(found):
            if offset > expected:
                v.add(f"gap in {tp_key(topic, partition)}: offsets {expected}..{offset - 1} missing")
            expected = offset + 1


def check_acks(reader: RunReader, final: dict[Key, str], judge_lost: bool, notes: list[str],
               on_ack: Callable[[Ack], None] = lambda a: None) -> tuple[Violations, Violations, Violations, int]:
    """Streams produced/ once: lost, per-producer order, and one leader per leader epoch; each Ack
    handed to `on_ack` too (the groups' checks).

    Returns (lost, reordered, multiple_leaders, acks read)."""
    lost, reordered, leaders = Violations(), Violations(), Violations()
    sent: dict[tuple[str, int, str], list[tuple[int, int]]] = defaultdict(list)  # tp, producer -> (seq, offset)
    epoch_brokers: dict[tuple[str, int, int], set[int]] = defaultdict(set)
    held: dict[tuple[str, int], set[str]] | None = None  # record ids per partition, built when first needed
    acked = unparsed = unplaced = 0
    for a in reader.lines(PRODUCED, Ack):
        acked += 1
        on_ack(a)
        topic = sys.intern(a.topic)
        if a.offset is None:  # delivered as a duplicate of an earlier send: only its partition is known
            unplaced += 1
            if judge_lost:
                if held is None:
                    held = defaultdict(set)
                    for (t, p, _), record_id in final.items():
                        held[(t, p)].add(record_id)
                if a.record_id not in held[(topic, a.partition)]:
                    lost.add(f"record {a.record_id} acked (offset not told) by a leader of "
                             f"{tp_key(topic, a.partition)}; the final read-back of it does not hold it")
            continue
        key = (topic, a.partition, a.offset)
        if judge_lost and final.get(key) != a.record_id:
            found = final.get(key)
            where = f"holds {found}" if found is not None else "is missing"
            lost.add(f"record {a.record_id} acked at {_at(key)} by broker {a.broker_id} "
                     f"(leader epoch {a.leader_epoch}); the final read-back {where}")
        producer, _, seq = a.record_id.rpartition("-")
        if producer and seq.isdigit():
            sent[(topic, a.partition, producer)].append((int(seq), a.offset))
        else:
            unparsed += 1
        if a.broker_id >= 0 and a.leader_epoch >= 0:  # known only where the producer knew them
            epoch_brokers[(topic, a.partition, a.leader_epoch)].add(a.broker_id)
    if unparsed:
        notes.append(f"{unparsed} acks have a record_id not of the form <producer>-<sequence>; "
                     "their order was not checked")
    if unplaced:
        notes.append(f"{unplaced} acks came without an offset (retries answered as duplicates): found by "
                     "record id in their partition, their order not checked")
    for (topic, partition, producer), pairs in sorted(sent.items()):
        pairs.sort()
        for (s1, o1), (s2, o2) in zip(pairs, pairs[1:]):
            if s1 != s2 and o2 <= o1:
                reordered.add(f"{tp_key(topic, partition)}: {producer}-{s1} at offset {o1} "
                              f"but {producer}-{s2} at offset {o2}")
    for (topic, partition, epoch), brokers in sorted(epoch_brokers.items()):
        if len(brokers) > 1:
            leaders.add(f"{tp_key(topic, partition)} leader epoch {epoch} acked by brokers {sorted(brokers)}")
    return lost, reordered, leaders, acked


class GroupChecks:
    """The consumer groups' three invariants, over what their members were given (ReadBack.delivered) and
    the commits (group_commits.jsonl: those the members were told were stored, and the groups' logs read
    back), with every Ack streamed through `on_ack`."""

    def __init__(self, delivered: dict[str, dict[Key, set[str]]], commits: list[GroupCommit], notes: list[str]):
        self.delivered = delivered
        self.backwards, self.undelivered, self.unacked = Violations(), Violations(), Violations()
        stored: dict[tuple[str, str, int], list[GroupCommit]] = defaultdict(list)
        told: list[GroupCommit] = []
        for c in commits:
            (told if c.stored_offset is None else stored[(c.group, c.topic, c.partition)]).append(c)
        self.committed: dict[str, dict[tuple[str, int], int]] = defaultdict(dict)  # group -> partition -> final
        for (group, topic, partition), log in sorted(stored.items()):
            log.sort(key=lambda c: c.stored_offset)
            for before, after in zip(log, log[1:]):
                if after.offset < before.offset:
                    self.backwards.add(f"group {group} {tp_key(topic, partition)}: commit {after.offset} (log offset "
                                       f"{after.stored_offset}) after {before.offset} (log offset {before.stored_offset})")
            self.committed[group][(sys.intern(topic), partition)] = log[-1].offset
        logged = {(c.group, c.topic, c.partition, c.offset) for log in stored.values() for c in log}
        unread = sorted({c.group for c in told} - {group for group, _, _ in stored})
        if unread:
            notes.append(f"groups {unread}: no commits read back from __consumer_offsets: the final committed "
                         "offsets are the last the members were told, stored commits not checked")
        for c in sorted(told, key=lambda c: c.ts_ms):
            if c.group in unread:
                final = self.committed[c.group]
                final[(sys.intern(c.topic), c.partition)] = max(c.offset, final.get((c.topic, c.partition), 0))
            elif (c.group, c.topic, c.partition, c.offset) not in logged:
                self.backwards.add(f"group {c.group} {tp_key(c.topic, c.partition)}: commit {c.offset} acknowledged "
                                   f"to member {c.member} at {c.ts_ms:.0f} is not in the group's log")
        self.matched: dict[tuple[str, Key], str] = {}  # (group, location) -> the record given there acked there
        self.placeless: dict[tuple[str, int], set[str]] = defaultdict(set)  # offset-less acks' ids per partition

    def on_ack(self, a: Ack) -> None:
        """An acknowledged record: given to each group where it is, or owed to it below its final commit (an
        ack without its offset only vouches for its record, wherever the group was given it)."""
        if a.offset is None:
            self.placeless[(a.topic, a.partition)].add(a.record_id)
            return
        key = (a.topic, a.partition, a.offset)
        for group, given in self.delivered.items():
            if a.record_id in given.get(key, ()):
                self.matched[(group, key)] = a.record_id
            elif a.offset < (final := self.committed[group].get((a.topic, a.partition), 0)):
                self.undelivered.add(f"group {group}: record {a.record_id} acked at {_at(key)}, below the group's "
                                     f"final commit {final}, never given to it")

    def finish(self) -> tuple[Violations, Violations, Violations]:
        """(commits backwards, not delivered, delivered unacknowledged), once every Ack went through on_ack."""
        for group, given in sorted(self.delivered.items()):
            for key, ids in sorted(given.items()):
                vouched = self.placeless.get(key[:2], set()) | {self.matched.get((group, key))}
                for record_id in sorted(ids - vouched):
                    self.unacked.add(f"group {group}: given record {record_id} at {_at(key)}, which no producer "
                                     "was told is there")
        return self.backwards, self.undelivered, self.unacked


def check_controllers(reader: RunReader) -> tuple[Violations, Violations, int]:
    """(multiple controllers, failed events, controller epochs seen)."""
    v, failed = Violations(), Violations()
    by_epoch: dict[int, set[int]] = defaultdict(set)
    for r in reader.lines(CONTROLLER_REQUESTS, ControllerRequestRecord):
        by_epoch[r.controller_epoch].add(r.controller_id)
    for e in reader.lines(CONTROLLER_EVENTS, ControllerEventRecord):
        if e.active:
            by_epoch[e.controller_epoch].add(e.controller_id)
        if e.error is not None:
            failed.add(f"{e.event} failed on controller {e.controller_id} epoch {e.controller_epoch}: {e.error}")
    for epoch, controllers in sorted(by_epoch.items()):
        if len(controllers) > 1:
            v.add(f"controller epoch {epoch} acted on by controllers {sorted(controllers)}")
    return v, failed, len(by_epoch)


def _leader_ok(p: PartitionLeadership, live: list[int]) -> bool:
    return p.leader == -1 or (p.leader in live and p.leader in p.isr)


def check_leaders(reader: RunReader, final_state: FinalState | None,
                  grace_ms: float) -> tuple[Violations, int]:
    """A leader outside its ISR at once; outside the live brokers for at least grace_ms."""
    v = Violations()
    samples = sorted(reader.lines(PARTITION_STATES, StateSample), key=lambda s: s.ts_ms)
    reported: set[tuple[str, int]] = set()
    dead_since: dict[str, tuple[int, int, float]] = {}  # partition -> (leader, epoch, first ts seen dead)
    for s in samples:
        live = set(s.live_brokers)
        for tp, p in s.partitions.items():
            if p.leader == -1:
                dead_since.pop(tp, None)
                continue
            if p.leader not in p.isr and (tp, p.leader_epoch) not in reported:
                reported.add((tp, p.leader_epoch))
                v.add(f"{tp} leader {p.leader} not in ISR {p.isr} (leader epoch {p.leader_epoch}, "
                      f"at {s.ts_ms:.0f})")
            if p.leader in live:
                dead_since.pop(tp, None)
                continue
            leader, epoch, since = dead_since.get(tp, (None, None, s.ts_ms))
            if (leader, epoch) != (p.leader, p.leader_epoch):
                since = s.ts_ms
                dead_since[tp] = (p.leader, p.leader_epoch, since)
            if s.ts_ms - since >= grace_ms and (tp, p.leader_epoch) not in reported:
                reported.add((tp, p.leader_epoch))
                v.add(f"{tp} leader {p.leader} not live for {s.ts_ms - since:.0f} ms "
                      f"(leader epoch {p.leader_epoch})")
    if final_state is not None:
        for tp, p in sorted(final_state.zookeeper.items()):
            if not _leader_ok(p, final_state.live_brokers):
                v.add(f"final state: {tp} leader {p.leader} with ISR {p.isr}, "
                      f"live brokers {sorted(final_state.live_brokers)}")
    return v, len(samples)


def _leadership(p: PartitionLeadership) -> tuple[int, int, list[int]]:
    return p.leader, p.leader_epoch, sorted(p.isr)


def _show(leadership: tuple[int, int, list[int]] | None) -> str:
    if leadership is None:
        return "absent"
    leader, epoch, isr = leadership
    return f"leader {leader} epoch {epoch} ISR {isr}"


def check_caches(final_state: FinalState) -> Violations:
    v = Violations()
    expected = {tp: _leadership(p) for tp, p in final_state.zookeeper.items()}
    live = sorted(final_state.live_brokers)
    for broker, cache in sorted(final_state.caches.items()):
        cached = {tp: _leadership(p) for tp, p in cache.partitions.items()}
        differing = sorted(tp for tp in expected.keys() | cached.keys() if expected.get(tp) != cached.get(tp))
        if differing:
            tp = differing[0]
            v.add(f"broker {broker} caches {tp} as {_show(cached.get(tp))}, ZooKeeper has "
                  f"{_show(expected.get(tp))} ({len(differing)} of {len(expected)} partitions differ)")
        elif sorted(cache.brokers) != live:
            v.add(f"broker {broker} caches brokers {sorted(cache.brokers)}, live brokers are {live}")
    return v


def check_replication(final_state: FinalState) -> Violations:
    """After the faults every partition is fully replicated again: its whole assignment in its ISR."""
    v = Violations()
    for tp, p in sorted(final_state.zookeeper.items()):
        replicas = (final_state.assignments or {}).get(tp)
        if replicas is not None and sorted(p.isr) != sorted(replicas):
            v.add(f"{tp}: ISR {sorted(p.isr)}, replicas {replicas}")
    return v


def check_actions(actions: list[ActionRecord], final: FinalState, asked: int | None = None) -> Violations:
    """Each action's outcome in the final state (`asked`: how many the schedule had; an action with no
    record is a violation too). A topic's last create or delete says whether it should exist; its
    configs merge in order, and its last reassignment since its creation says its replicas."""
    v = Violations()
    topics = final.topics or {}
    exists: dict[str, bool] = {}
    partitions: dict[str, int] = {}
    configs: dict[str, dict[str, str]] = {}
    targets: dict[str, dict[int, list[int]]] = {}
    if asked is not None and len(actions) < asked:
        recorded = {a.action_id for a in actions}
        v.add(f"actions {[i for i in range(1, asked + 1) if i not in recorded]} of the schedule have no record")
    for a in sorted(actions, key=lambda a: a.started_ms):
        if a.error is not None:
            v.add(f"{a.kind.value} {a.topic}: refused: {a.error}")
            continue
        if a.kind in (ActionKind.CREATE_TOPIC, ActionKind.DELETE_TOPIC):
            exists[a.topic] = a.kind is ActionKind.CREATE_TOPIC
            configs[a.topic], targets[a.topic] = {}, {}
        if a.partitions is not None:
            partitions[a.topic] = a.partitions
        configs.setdefault(a.topic, {}).update(a.config or {})
        targets.setdefault(a.topic, {}).update(a.replicas or {})
        if a.kind is ActionKind.PREFERRED_ELECTION and final.preferred_election_pending:
            v.add(f"preferred-election {a.topic}: /admin/preferred_replica_election was not taken up")
    for topic, should in sorted(exists.items()):
        found = topics.get(topic)
        if not should:
            left = sorted(b for b, tps in final.on_disk.items() if any(t.rpartition("-")[0] == topic for t in tps))
            if found is not None:
                marked = " (marked for deletion)" if found.marked_for_deletion else ""
                v.add(f"delete-topic {topic}: still in ZooKeeper{marked}")
            elif left:
                v.add(f"delete-topic {topic}: logs left on brokers {left}")
            continue
        if found is None:
            v.add(f"create-topic {topic}: not in ZooKeeper")
            continue
        if found.partitions != partitions[topic]:
            v.add(f"{topic}: {found.partitions} partitions, not {partitions[topic]}")
        leaderless = [p for p in range(found.partitions)
                      if (s := final.zookeeper.get(tp_key(topic, p))) is None or s.leader < 0]
        if leaderless:
            v.add(f"{topic}: partitions {leaderless} without a leader")
        wrong = {k: found.config.get(k) for k, value in configs[topic].items() if found.config.get(k) != value}
        if wrong:
            v.add(f"{topic}: configs {wrong}, not {{{', '.join(f'{k}: {configs[topic][k]}' for k in wrong)}}}")
        for p, target in sorted(targets[topic].items()):
            key = tp_key(topic, p)
            replicas = (final.assignments or {}).get(key)
            if key in final.reassigning:
                v.add(f"reassign-partitions {topic}: {key} still reassigning (replicas {replicas}, target {target})")
            elif replicas != target:
                v.add(f"reassign-partitions {topic}: {key} has replicas {replicas}, not {target}")
    return v


def check_recorded(reader: RunReader, acked: int) -> Violations:
    """The load's own count of acknowledgements (its samples in load.jsonl) against those recorded in
    produced/: an acknowledgement the run directory never got is a record nobody checked, not a pass
    (a recorder on another node of a cluster wrote them to that node's disk, and every check held over
    nothing)."""
    counted = max((s.acked_total for s in reader.lines(LOAD, LoadSample)), default=0)
    found = Violations()
    if counted > acked:  # `acked`: the load's rows alone
        found.add(f"the load counted {counted:,} acknowledgements by its last sample; produced/ holds {acked:,} "
                  "of the load's")
    return found


def check_run(run_dir: Path, grace_ms: float = 5000) -> CheckReport:
    reader = RunReader(Path(run_dir))
    notes: list[str] = []
    results: dict[str, Violations] = {}

    final, consumed_live, repeats, delivered = read_consumed(reader)
    if not final:
        notes.append("no final read-back in consumed/: lost, duplicated and log density not checked")
    groups = GroupChecks(delivered, list(reader.lines(GROUP_COMMITS, GroupCommit)), notes)
    load_acks = 0

    def on_ack(a: Ack) -> None:
        nonlocal load_acks
        load_acks += source_of(a.record_id) is Source.LOAD  # the samples do not count the probes
        groups.on_ack(a)

    lost, reordered, leaders, acked = check_acks(reader, final, bool(final), notes, on_ack)
    results["group_commits_backwards"], results["group_not_delivered"], results["group_delivered_unacked"] = \
        groups.finish()
    check_dense(final, repeats, reordered)
    results["lost"] = lost
    results["acked_unrecorded"] = check_recorded(reader, load_acks)
    copies = {(c.topic, c.partition, c.offset): c for c in reader.lines(COPIES, RecordCopy)}
    results["duplicated"], resent = check_duplicated(final, copies)
    if resent.count:
        notes.append(f"{resent.count} records sent again by their clients, each copy stored under a newer "
                     f"producer epoch (not a broker's duplicate): {resent.examples[0]}")
    results["reordered"] = reordered
    results["multiple_controllers"], results["failed_controller_events"], controller_epochs = \
        check_controllers(reader)
    results["multiple_leaders"] = leaders

    final_state = reader.document(FINAL_STATE, FinalState)
    if final_state is None:
        notes.append(f"no readable {FINAL_STATE}: final leaders and cache convergence not checked")
    results["leader_not_live_or_in_isr"], state_samples = check_leaders(reader, final_state, grace_ms)
    results["caches_not_converged"] = check_caches(final_state) if final_state else Violations()
    results["under_replicated"] = check_replication(final_state) if final_state else Violations()
    actions = list(reader.lines(ACTIONS, ActionRecord))
    experiment = Path(run_dir) / EXPERIMENT
    asked = len(json.loads(experiment.read_text()).get("actions", [])) if experiment.exists() else None
    results["admin_actions_not_done"] = check_actions(actions, final_state, asked) if final_state else Violations()
    if actions and final_state and final_state.topics is None:
        notes.append(f"no topics in {FINAL_STATE}: the admin actions' outcomes not checked")
    if final_state and final_state.assignments is None:
        notes.append(f"no assignments in {FINAL_STATE} (an older run): full replication not checked")
    if final_state:
        silent = sorted(set(final_state.live_brokers) - set(final_state.caches))
        if silent:
            notes.append(f"live brokers {silent} did not report their metadata cache")

    return CheckReport(
        run_dir=str(run_dir),
        invariants={name: results[name].count for name in INVARIANTS},
        examples={name: results[name].examples for name in INVARIANTS},
        notes=notes,
        malformed_lines=dict(reader.malformed),
        malformed_examples=dict(reader.examples),
        counts={"acked": acked, "consumed_final": len(final) + len(repeats), "consumed_live": consumed_live,
                "state_samples": state_samples, "controller_epochs": controller_epochs,
                "resent_by_client": resent.count},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kray check", description="Check a chaos run's invariants.")
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path)
    parser.add_argument("--grace-ms", type=float, default=5000,
                        help="how long a dead leader is tolerated before the controller must have moved it")
    args = parser.parse_args(argv)
    if not args.run_dir.is_dir():
        print(f"Error: {args.run_dir} is not a run directory", file=sys.stderr)
        return 2
    report = check_run(args.run_dir, args.grace_ms)
    print(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
