"""jobs.measures.waits: each partition's recovery and worst wait through each fault, on deliveries built in memory."""
from __future__ import annotations

import math

import pytest

from jobs.measures.rundir import FaultKind, FaultRecord, PartitionLeadership, PartitionWait, Role, Source, StateSample
from jobs.measures.waits import Deliveries, by_fault, partition_waits, percentile, source_of, stats, touched

HORIZON = 10_000.0


def fault(fault_id: int, at: float, kind: FaultKind = FaultKind.KILL_BROKER, target: int | None = 1,
          detail: str = "") -> FaultRecord:
    return FaultRecord(fault_id=fault_id, kind=kind, target=target, injected_ms=at, detail=detail)


def state(ts: float, **partitions: tuple[int, list[int]]) -> StateSample:
    return StateSample(ts_ms=ts, live_brokers=[1, 2, 3], partitions={
        tp.replace("_", "-"): PartitionLeadership(leader=leader, leader_epoch=1, isr=isr)
        for tp, (leader, isr) in partitions.items()})


def run(faults, rows, states=(), horizon=HORIZON, load_ended=100_000.0, assignments=None,
        warm: bool = True) -> list[PartitionWait]:
    """(partition, record id, sent, acked[, failed or acked[, offset]]) rows; every partition and producer written before the
    first fault unless the rows say otherwise (a record at 0, long done)."""
    rows = [r if len(r) >= 5 else (*r, r[3]) for r in rows]
    first = min(f.injected_ms for f in faults)
    before = {(tp, rid.rpartition("-")[0]) for tp, rid, sent, *_ in rows if sent < first}
    rows += [(tp, f"{producer}-w", 0, 1, 1) for tp, producer in {(tp, rid.rpartition("-")[0]) for tp, rid, *_ in rows}
             - before] if warm else []
    return partition_waits(faults, Deliveries(rows), list(states), horizon, load_ended, assignments)


def only(waits: list[PartitionWait]) -> PartitionWait:
    assert len(waits) == 1, waits
    return waits[0]


def test_the_record_that_recovered_a_partition_is_known_by_its_offset():
    rows = [("t-0", "p0-1", 900, 950, 950, 10), ("t-0", "p0-2", 1100, 1300, 1300, 12),
            ("t-0", "p0-3", 1050, 1350, 1350, 11)]
    w = only(run([fault(1, 1000)], rows))
    assert (w.recovery_offset, w.recovery_sent_ms) == (12, 1100)  # the first acknowledged, not the first sent


def test_recovery_is_the_first_ack_of_a_record_sent_at_or_after_the_fault():
    rows = [("t-0", "p0-1", 900, 950),  # done before the fault: not counted
            ("t-0", "p0-2", 990, 1010),  # in flight at the fault, its answer on its way: counted, no recovery
            ("t-0", "p0-3", 1000, 1800),  # sent at the fault: the recovery
            ("t-0", "p0-4", 1100, 1805)]
    w = only(run([fault(1, 1000)], rows))
    assert (w.recovery_ms, w.recovery_censored) == (800, False)
    assert (w.worst_wait_ms, w.worst_wait_censored, w.records) == (800, False, 3)


def test_worst_wait_is_the_longest_among_records_in_flight_at_the_fault_or_sent_in_the_horizon():
    rows = [("t-0", "p0-1", 500, 2500),  # in flight at the fault for 2 s
            ("t-0", "p0-2", 1200, 1300),
            ("t-0", "p0-3", 10_900, 14_900),  # sent within the horizon: counted
            ("t-0", "p0-4", 11_100, 19_000)]  # sent after it: another story
    w = only(run([fault(1, 1000)], rows))
    assert w.worst_wait_ms == 4000 and w.records == 3
    assert w.recovery_ms == 300  # p0-2


def test_a_partition_not_recovered_within_the_horizon_is_censored_at_the_horizon():
    rows = [("t-0", "p0-1", 1500, 40_000)]
    w = only(run([fault(1, 1000)], rows))
    assert (w.recovery_ms, w.recovery_censored, w.observed_ms) == (HORIZON, True, HORIZON)
    assert w.worst_wait_ms == 38_500 and not w.worst_wait_censored  # acknowledged before the load ended


def test_the_next_fault_ends_the_observation_and_a_wait_past_it_is_censored():
    rows = [("t-0", "p0-1", 1500, 8000), ("t-0", "p0-2", 6000, 6500)]
    first, second = run([fault(1, 1000), fault(2, 5000, target=2)], rows)
    assert (first.fault_id, first.observed_ms, first.recovery_ms, first.recovery_censored) == (1, 4000, 4000, True)
    assert (first.worst_wait_ms, first.worst_wait_censored) == (3500, True)  # cut at the next fault
    assert (second.fault_id, second.recovery_ms, second.worst_wait_ms) == (2, 1500, 6500)  # p0-1 in flight, from its send


def test_a_record_never_acknowledged_waited_until_it_failed_or_the_observation_ended_and_is_censored():
    rows = [("t-0", "p0-1", 1100, 1200), ("t-0", "p0-2", 1300, math.inf, 2300)]
    w = only(run([fault(1, 1000)], rows, load_ended=5000))
    assert (w.recovery_ms, w.recovery_censored) == (200, False)
    assert (w.worst_wait_ms, w.worst_wait_censored, w.observed_ms) == (1000, True, 4000)
    w = only(run([fault(1, 1000)], [("t-0", "p0-1", 1300, math.inf, 9000)], load_ended=5000))
    assert (w.worst_wait_ms, w.worst_wait_censored, w.recovery_censored) == (3700, True, True)


def test_a_record_that_failed_before_the_fault_was_not_in_flight_at_it():
    rows = [("t-0", "p0-1", 100, math.inf, 500), ("t-0", "p0-2", 1100, 1200)]
    w = only(run([fault(1, 1000)], rows))
    assert (w.records, w.worst_wait_ms, w.worst_wait_censored) == (1, 100, False)


def test_a_partition_with_nothing_in_flight_or_sent_in_the_window_is_not_measured():
    rows = [("t-0", "p0-1", 100, 200), ("t-0", "p0-2", 20_000, 20_001)]
    assert run([fault(1, 1000)], rows) == []


def test_a_partition_first_written_after_the_fault_is_not_measured_for_it():
    """A topic created while the cluster recovers: its first records are not a recovery."""
    rows = [("new-0", "p0-1", 6000, 6100), ("t-0", "p0-2", 900, 950), ("t-0", "p0-3", 1100, 1150)]
    assert [w.partition for w in run([fault(1, 1000)], rows, warm=False)] == ["t-0"]


def test_roles_come_from_the_last_sample_before_the_fault():
    rows = [(tp, f"p0-{i}", 1100, 1200) for i, tp in enumerate(["t-0", "t-1", "t-2", "t-3"])]
    states = [state(500, t_0=(1, [1, 2]), t_1=(2, [2, 1]), t_2=(2, [2, 3]), t_3=(3, [3])),
              state(1001, t_0=(2, [2]), t_1=(2, [2]), t_2=(1, [1]), t_3=(1, [1]))]  # after the fault
    got = {w.partition: w.role for w in run([fault(1, 1000)], rows, states)}
    assert got == {"t-0": Role.LEADER, "t-1": Role.FOLLOWER, "t-2": Role.OTHER, "t-3": Role.OTHER}
    # a replica out of the sampled ISR (back from an earlier fault, it may have rejoined since) follows
    assigned = {"t-0": [1, 2], "t-1": [2, 1], "t-2": [2, 3], "t-3": [3, 1]}
    got = {w.partition: w.role for w in run([fault(1, 1000)], rows, states, assignments=assigned)}
    assert got == {"t-0": Role.LEADER, "t-1": Role.FOLLOWER, "t-2": Role.OTHER, "t-3": Role.FOLLOWER}
    assert {w.role for w in run([fault(1, 1000, FaultKind.SPLIT_BROKERS, None)], rows, states)} == {Role.CLUSTER}
    assert {w.role for w in run([fault(1, 1000)], rows, [])} == {Role.OTHER}
    assert {w.role for w in run([fault(1, 1000, FaultKind.ZK_RESTART, None)], rows, [])} == {Role.CLUSTER}
    # a fault on the active controller alone (its target is the controller's broker): every partition
    assert {w.role for w in run([fault(1, 1000, FaultKind.KILL_CONTROLLER, 1)], rows, states)} == {Role.CLUSTER}


@pytest.mark.parametrize("kind", list(FaultKind))
def test_every_fault_kind_is_measured(kind):
    w = only(run([fault(1, 1000, kind)], [("t-0", "p0-1", 1100, 1400)]))
    assert (w.fault_kind, w.recovery_ms) == (kind, 400)


def test_a_fault_that_failed_to_inject_is_not_measured_and_does_not_end_another():
    rows = [("t-0", "p0-1", 1100, 9000)]
    w = only(run([fault(1, 1000), fault(2, 2000, detail="failed: RuntimeError: no broker")], rows))
    assert (w.fault_id, w.recovery_ms, w.recovery_censored) == (1, 8000, False)


def test_the_load_and_the_probes_are_measured_apart():
    rows = [("t-0", "p0-1", 900, 3000), ("t-0", "probe-7", 990, 1500), ("t-0", "p1-1", 1200, 3100)]
    got = {w.source: w for w in run([fault(1, 1000)], rows)}
    assert got[Source.LOAD].worst_wait_ms == 2100 and got[Source.LOAD].recovery_ms == 2100
    assert got[Source.PROBE].worst_wait_ms == 510 and got[Source.PROBE].recovery_censored
    assert [source_of(r) for r in ("probe-1", "p0-1", "probe", "probex-1")] == \
        [Source.PROBE, Source.LOAD, Source.LOAD, Source.LOAD]


def test_a_fault_after_the_load_ended_measures_nothing():
    assert run([fault(1, 1000)], [("t-0", "p0-1", 900, 1100)], load_ended=800) == []


def test_the_rate_at_the_fault_is_the_partitions_acks_over_the_second_before():
    rows = [("t-0", f"p0-{i}", at - 5, at) for i, at in enumerate([-10, 200, 400, 999, 1001])]
    rows.append(("t-0", "p0-9", 1100, 1200))
    assert only(run([fault(1, 1000)], rows)).rate == 3  # acks at 200, 400, 999


def test_stats_percentiles_touched_and_grouping():
    def wait(fault_id, role, recovery, worst, source=Source.LOAD, censored=False, at=0.0):
        return PartitionWait(fault_id=fault_id, fault_kind=FaultKind.KILL_BROKER, partition="t-0", source=source,
                             role=role, fault_ms=at, observed_ms=HORIZON, recovery_ms=recovery,
                             recovery_censored=censored, worst_wait_ms=worst, records=1, rate=0.0)
    ws = [wait(1, Role.LEADER, r, r * 2, censored=r == 400) for r in (100, 200, 300, 400)]
    s = stats(ws)
    assert (s.partitions, s.censored, s.recovery_ms_p50, s.recovery_ms_p99, s.recovery_ms_max) == (4, 1, 200, 400, 400)
    assert (s.worst_wait_ms_p50, s.worst_wait_ms_max) == (400, 800)
    assert stats([]).recovery_ms_p50 is None and stats([]).partitions == 0
    assert [touched(wait(1, r, 1, 1)) for r in Role] == [True, True, False, True]
    grouped = by_fault([wait(2, Role.LEADER, 1, 1, at=5), wait(1, Role.OTHER, 1, 1, Source.PROBE, at=1),
                        wait(1, Role.LEADER, 1, 1, at=1)])
    assert list(grouped) == [(1, Source.LOAD), (1, Source.PROBE), (2, Source.LOAD)]
    assert percentile([1, 2, 3], 0) == 1 and percentile([], 50) is None


def test_the_latency_away_from_the_faults_and_the_share_left_unexplained_of_the_unavailable():
    from jobs.measures.waits import latency_away, unexplained_share

    faults = [FaultRecord(fault_id=1, kind=FaultKind.PAUSE_BROKER, target=1, injected_ms=10_000, ended_ms=12_000),
              FaultRecord(fault_id=2, kind=FaultKind.KILL_BROKER, target=2, injected_ms=14_000)]
    samples = [(Source.LOAD, 7_900, 5.0), (Source.LOAD, 8_000, 900.0), (Source.LOAD, 21_999, 800.0),  # in
               (Source.LOAD, 22_000, 7.0), (Source.LOAD, 23_999, 700.0),  # 2 s before fault 2: excluded too
               (Source.LOAD, 24_000, 9.0), (Source.PROBE, 30_000, 3.0), (Source.GROUP, 30_000, 40.0)]
    assert latency_away(samples, faults) == {Source.LOAD: [5.0, 9.0], Source.PROBE: [3.0], Source.GROUP: [40.0]}

    def wait(recovery, unexplained, source=Source.LOAD, censored=False):
        return PartitionWait(fault_id=1, fault_kind=FaultKind.KILL_BROKER, partition="t-0", source=source,
                             role=Role.LEADER, fault_ms=0, observed_ms=HORIZON, recovery_ms=recovery,
                             recovery_censored=censored, worst_wait_ms=recovery, records=1, rate=0,
                             unexplained_ms=None if censored else unexplained)
    ws = [wait(1000, 100), wait(30, 30), wait(5000, 0, censored=True), wait(200, 200, Source.PROBE)]
    assert unexplained_share(ws) == 330 / 1230
    assert unexplained_share(ws, {Source.LOAD: 50.0, Source.PROBE: 50.0}) == 300 / 1200  # 30 ms is no outage
    assert unexplained_share([wait(30, 30)], {Source.LOAD: 50.0}) is None


def test_a_consumer_group_is_measured_as_a_third_source_from_its_members_deliveries():
    """Each acknowledged record of a partition the group reads is the group's too, delivered when a member
    was first given it: its recovery is the first record sent at or after the fault that the group got;
    a record it was never given waited to the end of the observation (censored)."""
    from actors.records import Ack
    from jobs.measures.waits import deliveries_of

    def ack(tp: str, n: int, sent: float, acked: float) -> Ack:
        topic, _, partition = tp.rpartition("-")
        return Ack(topic=topic, partition=int(partition), offset=n, record_id=f"p0-{n}", broker_id=-1,
                   leader_epoch=-1, sent_ms=sent, acked_ms=acked)
    acks = [ack("t-0", 0, 0, 5), ack("t-0", 1, 900, 950), ack("t-0", 2, 1000, 1300), ack("t-0", 3, 1100, 1350),
            ack("u-0", 0, 0, 5), ack("u-0", 1, 1000, 1010)]
    given = {"p0-0": ("t-0", 20), "p0-1": ("t-0", 960), "p0-2": ("t-0", 4000), "p0-3": ("t-0", 4000)}
    got = {(w.source, w.partition): w for w in partition_waits(
        [fault(1, 1000)], deliveries_of(acks, [], given), [], HORIZON, 100_000.0)}
    assert set(got) == {(Source.LOAD, "t-0"), (Source.LOAD, "u-0"), (Source.GROUP, "t-0")}  # u-0: not the group's
    group = got[(Source.GROUP, "t-0")]
    assert (group.recovery_ms, group.recovery_offset, group.worst_wait_ms) == (3000, 2, 3000)
    assert got[(Source.LOAD, "t-0")].recovery_ms == 300
    given.pop("p0-3")  # never given: waited past the horizon
    group = only([w for w in partition_waits([fault(1, 1000)], deliveries_of(acks, [], given), [], HORIZON,
                                             100_000.0) if w.source is Source.GROUP])
    assert (group.recovery_ms, group.worst_wait_censored) == (3000, True)
