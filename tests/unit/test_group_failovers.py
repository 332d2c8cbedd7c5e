"""jobs.measures.group_failovers: the coordinator's failover steps from records built in memory."""
from __future__ import annotations

from actors.records import BrokerEvent, GroupCommit
from jobs.measures.group_failovers import compose
from jobs.measures.rundir import FaultKind, FaultRecord, PartitionLeadership, PartitionWait, Role, Source, StateSample

GROUP, OFFSETS = "load-group", "__consumer_offsets-7"
HORIZON = 10_000.0


def sample(ts: float, leader: int) -> StateSample:
    return StateSample(ts_ms=ts, live_brokers=[1, 2, 3], partitions={
        OFFSETS: PartitionLeadership(leader=leader, leader_epoch=1, isr=[1, 2, 3])})


def event(broker: int, ts: float, kind: str, **fields) -> BrokerEvent:
    return BrokerEvent(broker_id=broker, ts_ms=ts, kind=kind, **fields)


def wait(fault_id: int, partition: str, recovery: float, censored: bool = False,
         source: Source = Source.GROUP) -> PartitionWait:
    return PartitionWait(fault_id=fault_id, fault_kind=FaultKind.KILL_BROKER, partition=partition, source=source,
                         role=Role.OTHER, fault_ms=0, observed_ms=HORIZON, recovery_ms=recovery,
                         recovery_censored=censored, worst_wait_ms=recovery, records=1, rate=0)


EVENTS = [
    event(2, 1_100, "leader_and_isr", leaders={"orders-0": 3}),  # not the offsets partition
    event(2, 1_200, "leader_and_isr", leaders={OFFSETS: 2}, isrs={OFFSETS: [2, 3]}),
    event(3, 1_210, "leader_and_isr", followers={OFFSETS: 2}),
    event(2, 1_250, "group_loaded", partition=OFFSETS, leader_epoch=2, partitions=1),
    event(3, 1_300, "coordinator_found", group=GROUP, replica=2),
    event(2, 1_300, "coordinator_found", group="other-group", replica=2),
    event(2, 4_000, "group_synced", group=GROUP, generation=3),
]
COMMITS = [GroupCommit(group=GROUP, topic="orders", partition=0, offset=9, ts_ms=900, member="g0"),
           GroupCommit(group=GROUP, topic="orders", partition=0, offset=12, ts_ms=4_200, member="g1"),
           GroupCommit(group=GROUP, topic="orders", partition=0, offset=12, ts_ms=1_050, stored_offset=4)]


def test_a_kill_of_the_coordinator_is_followed_step_by_step():
    kill = FaultRecord(fault_id=1, kind=FaultKind.KILL_BROKER, target=1, injected_ms=1_000)
    waits = [wait(1, "orders-0", 3_500), wait(1, "orders-1", 2_900), wait(1, "orders-0", 400, source=Source.LOAD)]
    [g] = compose([kill], [sample(500, 1), sample(1_500, 2)], EVENTS, COMMITS, waits, GROUP, OFFSETS, HORIZON, True)
    assert (g.fault_id, g.coordinator, g.new_coordinator, g.detector) == (1, 1, 2, True)
    assert (g.elected_ms, g.loaded_ms, g.found_ms, g.rejoined_ms) == (1_200, 1_250, 1_300, 4_000)
    assert g.committed_ms == 4_200  # the first commit a member was told of after the fault (not the log's)
    assert (g.consumed_first_ms, g.consumed_all_ms, g.partitions, g.censored) == (3_900, 4_500, 2, 0)


def test_a_partition_not_consumed_within_the_horizon_leaves_every_partition_unconsumed():
    kill = FaultRecord(fault_id=1, kind=FaultKind.KILL_BROKER, target=1, injected_ms=1_000)
    waits = [wait(1, "orders-0", 3_500), wait(1, "orders-1", HORIZON, censored=True)]
    [g] = compose([kill], [sample(500, 1)], EVENTS, [], waits, GROUP, OFFSETS, HORIZON, False)
    assert (g.consumed_first_ms, g.consumed_all_ms, g.censored, g.committed_ms) == (4_500, None, 1, None)


def test_only_faults_on_the_coordinators_broker_count_and_steps_after_the_horizon_are_not_seen():
    faults = [FaultRecord(fault_id=1, kind=FaultKind.KILL_BROKER, target=3, injected_ms=1_000),  # not the coordinator
              FaultRecord(fault_id=2, kind=FaultKind.KILL_CONTROLLER, target=1, injected_ms=1_000),  # the broker stays
              FaultRecord(fault_id=3, kind=FaultKind.ZK_RESTART, injected_ms=1_000),  # no broker
              FaultRecord(fault_id=4, kind=FaultKind.KILL_BROKER, target=1, injected_ms=1_000, detail="failed: x"),
              FaultRecord(fault_id=5, kind=FaultKind.PAUSE_BROKER, target=1, injected_ms=1_000)]
    got = compose(faults, [sample(500, 1)], EVENTS, COMMITS, [], GROUP, OFFSETS, horizon_ms=220, detector=True)
    assert [g.fault_id for g in got] == [5]
    assert (got[0].elected_ms, got[0].loaded_ms, got[0].found_ms, got[0].rejoined_ms) == (1_200, None, None, None)
    assert compose(faults, [], EVENTS, COMMITS, [], GROUP, OFFSETS, HORIZON, True) == []  # no sample: not known


def test_a_leadership_moved_back_since_the_last_sample_is_the_coordinator_its_leader_and_isr_says():
    """The auto leader rebalance gave the offsets partition back to broker 1 (epoch 3) after the last sample
    (leader 3, epoch 2): a kill of broker 1 strikes the coordinator, one of broker 3 does not."""
    moved_back = [event(1, 800, "leader_and_isr", leaders={OFFSETS: 3}), event(3, 300, "leader_and_isr",
                                                                            leaders={OFFSETS: 2}), *EVENTS]
    faults = [FaultRecord(fault_id=1, kind=FaultKind.KILL_BROKER, target=1, injected_ms=1_000),
              FaultRecord(fault_id=2, kind=FaultKind.KILL_BROKER, target=3, injected_ms=1_000)]
    stale = StateSample(ts_ms=500, live_brokers=[1, 2, 3], partitions={
        OFFSETS: PartitionLeadership(leader=3, leader_epoch=2, isr=[1, 2, 3])})
    [g] = compose(faults, [stale], moved_back, COMMITS, [], GROUP, OFFSETS, HORIZON, True)
    assert (g.fault_id, g.coordinator, g.new_coordinator, g.elected_ms) == (1, 1, 2, 1_200)
    # an event older than the sample's epoch does not override it
    assert [g.fault_id for g in compose(faults, [stale], moved_back[1:], COMMITS, [], GROUP, OFFSETS, HORIZON,
                                        True)] == [2]
