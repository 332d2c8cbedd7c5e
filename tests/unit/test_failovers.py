"""jobs.failovers: AckIndex, recovery, compose and unavailability_ms on records built in memory."""
from __future__ import annotations

import pytest

from actors.records import Ack, TimelineRecord
from jobs.failovers import AckIndex, AckPoint, compose, first_write_after, recovery, unavailability_ms
from jobs.rundir import FailoverRecord, FaultKind, FaultRecord, LoadAtFault, LoadSample

_seq = iter(range(1_000_000))


def ack(tp: str, broker: int, epoch: int, acked_ms: float) -> Ack:
    topic, partition = tp.rsplit("-", 1)
    n = next(_seq)
    return Ack(topic=topic, partition=int(partition), offset=n, record_id=f"p0-{n}", broker_id=broker,
               leader_epoch=epoch, sent_ms=acked_ms - 5, acked_ms=acked_ms)


def fault(fault_id: int, kind: FaultKind, target: int | None, injected_ms: float,
          ended_ms: float | None = None) -> FaultRecord:
    return FaultRecord(fault_id=fault_id, kind=kind, target=target, injected_ms=injected_ms, ended_ms=ended_ms)


def timeline(kind: str, detected_ms: float, *, controller_id: int = 2, epoch: int = 5, brokers=(1,),
             inbox_depth: int = 0, partitions_total: int = 0, partitions_affected: int = 0,
             live_brokers: int = 0, **times) -> TimelineRecord:
    return TimelineRecord(kind=kind, controller_id=controller_id, epoch=epoch, brokers=list(brokers),
                          detected_ms=detected_ms, processing_started_ms=detected_ms + 1, inbox_depth=inbox_depth,
                          partitions_total=partitions_total, partitions_affected=partitions_affected,
                          live_brokers=live_brokers, **times)


def sample(ts_ms: float, rate: float, depths: dict[int, int], alive: int) -> LoadSample:
    return LoadSample(ts_ms=ts_ms, acked_total=int(ts_ms), produce_rate=rate, consumed_total=0, inbox_depth=0,
                      sender_queue_depths=depths, brokers_alive=alive, controller_id=2, controller_epoch=5)


# -- AckIndex ------------------------------------------------------------------------------------------


def test_ack_index_sorts_and_looks_up_strictly_around_a_moment():
    index = AckIndex([ack("t-0", 2, 1, 300), ack("t-0", 1, 1, 100), ack("t-0", 1, 1, 200), ack("my-events-3", 3, 7, 50)])
    assert index.points == {
        "t-0": [AckPoint(100, 1, 1, 95), AckPoint(200, 1, 1, 195), AckPoint(300, 2, 1, 295)],
        "my-events-3": [AckPoint(50, 3, 7, 45)],
    }
    assert index.times["t-0"] == [100, 200, 300]
    assert index.last_before("t-0", 200) == AckPoint(100, 1, 1, 95)  # strictly before
    assert index.last_before("t-0", 201) == AckPoint(200, 1, 1, 195)
    assert index.last_before("t-0", 100) is None
    never = lambda p: False  # noqa: E731
    assert index.first_after("t-0", 200, never) == AckPoint(300, 2, 1, 295)  # strictly after
    assert index.first_after("t-0", 199, never) == AckPoint(200, 1, 1, 195)
    assert index.first_after("t-0", 150, lambda p: p.broker_id == 1) == AckPoint(300, 2, 1, 295)
    assert index.first_after("t-0", 300, never) is None
    assert index.first_after("t-0", 0, lambda p: True) is None


def test_a_partition_takes_new_writes_again_at_the_first_ack_of_a_record_sent_after_the_fault():
    def sent(tp: str, sent_ms: float, acked_ms: float) -> Ack:
        return ack(tp, -1, -1, acked_ms).model_copy(update={"sent_ms": sent_ms})
    index = AckIndex([sent("t-0", 90, 105), sent("t-0", 95, 400), sent("t-0", 120, 410),  # held, then sent after
                      sent("t-1", 130, 140), sent("u-0", 10, 20)])
    assert first_write_after(100, index, ["t-0", "t-1", "u-0", "never-0"]) == {"t-0": 410, "t-1": 140}
    assert first_write_after(500, index, ["t-0"]) == {}


# -- recovery: faults that take leaders down ---------------------------------------------------------


def kill_scenario_acks() -> list[Ack]:
    """Broker 1 killed at 1000."""
    acks = [
        # t-0: led by 1 (epoch 3); an in-flight response from 1 after the fault; then 2 takes over at 1500
        ack("t-0", 1, 3, 900), ack("t-0", 1, 3, 1010), ack("t-0", 2, 4, 1500), ack("t-0", 2, 4, 1600),
        # t-1: led by 1 (epoch 5); broker 1 leads again with epoch 6 at 1300
        ack("t-1", 1, 5, 950), ack("t-1", 1, 6, 1300), ack("t-1", 3, 7, 1400),
        # t-2: led by 2 throughout: not affected
        ack("t-2", 2, 1, 990), ack("t-2", 2, 1, 1100),
        # t-3: led by 1, only stale acks from the old leadership afterwards, never recovers
        ack("t-3", 1, 2, 800), ack("t-3", 1, 2, 1050),
        # t-4: no ack before the fault at all
        ack("t-4", 1, 1, 1200),
        # t-5: was led by 1 earlier, but by 3 just before the fault
        ack("t-5", 1, 1, 500), ack("t-5", 3, 2, 900), ack("t-5", 3, 2, 1200),
        # my-events-0 (a topic with a dash): led by 1, recovered by 3 at 2000
        ack("my-events-0", 1, 9, 999), ack("my-events-0", 3, 10, 2000),
    ]
    return list(reversed(acks))  # the index sorts


@pytest.mark.parametrize("kind", [FaultKind.KILL_BROKER, FaultKind.RESTART_BROKER, FaultKind.EXPIRE_BROKER_SESSION,
                                  FaultKind.CONTROLLED_SHUTDOWN])
def test_recovery_after_a_broker_leaves(kind):
    got = recovery(fault(1, kind, 1, 1000.0), AckIndex(kill_scenario_acks()))
    assert got == {"t-0": 1500, "t-1": 1300, "my-events-0": 2000}


def test_recovery_of_a_kill_ignores_ended_ms():
    """A killed broker's return does not make its old-epoch acks count: only a pause's ended_ms does."""
    got = recovery(fault(1, FaultKind.KILL_BROKER, 1, 1000.0, ended_ms=1005.0), AckIndex(kill_scenario_acks()))
    assert got == {"t-0": 1500, "t-1": 1300, "my-events-0": 2000}


def test_recovery_of_another_victim():
    """Broker 3 killed instead: only t-5 was led by it, and its one later ack is from the old leadership."""
    acks = kill_scenario_acks() + [ack("t-5", 3, 3, 1250), ack("t-5", 1, 4, 1240)]
    assert recovery(fault(1, FaultKind.KILL_BROKER, 3, 1000.0), AckIndex(acks)) == {"t-5": 1240}


def test_same_broker_same_epoch_after_a_kill_is_stale_forever():
    acks = AckIndex([ack("t-2", 2, 1, 990), ack("t-2", 2, 1, 1100), ack("t-2", 2, 1, 50_000)])
    assert recovery(fault(1, FaultKind.KILL_BROKER, 2, 1000.0), acks) == {}


def test_no_target_no_recovery():
    assert recovery(fault(1, FaultKind.KILL_BROKER, None, 1000.0), AckIndex(kill_scenario_acks())) == {}


def test_no_acks_no_recovery():
    assert recovery(fault(1, FaultKind.KILL_BROKER, 1, 1000.0), AckIndex([])) == {}


# -- recovery: pauses ----------------------------------------------------------------------------------


def pause_acks() -> list[Ack]:
    """Broker 2 paused from 2000 to 3000."""
    return [
        # t-0: same broker and epoch throughout: stale before ended_ms, counts at ended_ms
        ack("t-0", 2, 7, 1900), ack("t-0", 2, 7, 2500), ack("t-0", 2, 7, 2999.9), ack("t-0", 2, 7, 3000),
        ack("t-0", 2, 7, 3100),
        # t-1: another broker took over during the pause
        ack("t-1", 2, 7, 1950), ack("t-1", 3, 8, 2600), ack("t-1", 2, 7, 2700),
        # t-2: stale acks, then the first one after ended_ms
        ack("t-2", 2, 4, 1990), ack("t-2", 2, 4, 2100), ack("t-2", 2, 4, 3001),
        # t-3: led by 1: not affected
        ack("t-3", 1, 1, 1999), ack("t-3", 1, 1, 2001),
    ]


def test_pause_recovers_at_the_first_ack_once_the_process_runs_again():
    got = recovery(fault(4, FaultKind.PAUSE_BROKER, 2, 2000.0, ended_ms=3000.0), AckIndex(pause_acks()))
    assert got == {"t-0": 3000, "t-1": 2600, "t-2": 3001}


def test_pause_without_ended_ms_treats_old_leadership_as_stale_forever():
    got = recovery(fault(4, FaultKind.PAUSE_BROKER, 2, 2000.0), AckIndex(pause_acks()))
    assert got == {"t-1": 2600}


# -- recovery: faults that take no leader down -------------------------------------------------------


@pytest.mark.parametrize("kind, target", [
    (FaultKind.KILL_CONTROLLER, 1),  # the controller's broker, which does lead partitions
    (FaultKind.PAUSE_CONTROLLER, 1),
    (FaultKind.EXPIRE_CONTROLLER_SESSION, 1),
    (FaultKind.KILL_REQUEST_SENDER, 1),
    (FaultKind.ZK_RESTART, None),
])
def test_non_leader_faults_have_no_recovery(kind, target):
    assert recovery(fault(1, kind, target, 1000.0, ended_ms=1500.0), AckIndex(kill_scenario_acks())) == {}


# -- compose -------------------------------------------------------------------------------------------


def compose_inputs():
    faults = [
        fault(2, FaultKind.KILL_CONTROLLER, 2, 5000.0),
        fault(1, FaultKind.KILL_BROKER, 1, 1000.0, ended_ms=4000.0),
    ]
    acks = AckIndex([
        ack("orders-0", 1, 3, 950), ack("orders-0", 2, 4, 1400),
        ack("orders-1", 2, 3, 960), ack("orders-1", 2, 3, 1300),  # led by 2: not affected
        ack("orders-2", 1, 3, 970), ack("orders-2", 1, 3, 1100), ack("orders-2", 3, 4, 1700),
        ack("orders-3", 2, 5, 4990), ack("orders-3", 3, 6, 5200),  # led by 2 at fault 2, but that is no leader fault
    ])
    samples = [
        sample(4900, 80.0, {1: 2}, 3),
        sample(900, 100.5, {2: 4, 3: 1}, 3),
        sample(400, 10.0, {1: 0}, 3),
        sample(1100, 5.0, {2: 9}, 2),  # after fault 1: not its load
        sample(5050, 1.0, {}, 3),  # after fault 2
    ]
    timelines = [
        timeline("controller_failover", 5100, controller_id=3, epoch=6, brokers=[2], inbox_depth=1,
                 partitions_total=12, partitions_affected=0, live_brokers=3, zk_written_ms=5150.0),
        timeline("broker_failure", 4000, controller_id=2, epoch=5, brokers=[1], inbox_depth=2, partitions_total=12,
                 partitions_affected=0, live_brokers=2),
        timeline("broker_failure", 1200, controller_id=2, epoch=5, brokers=[1], inbox_depth=7, partitions_total=12,
                 partitions_affected=4, live_brokers=2, zk_written_ms=1250.0, requests_sent_ms=1260.0,
                 requests_acked_ms=1290.0),
        timeline("controller_failover", 1000, controller_id=2, epoch=5, brokers=[], inbox_depth=3, partitions_total=12,
                 live_brokers=3),
        timeline("controller_failover", 500, controller_id=1, epoch=4, brokers=[], inbox_depth=0, partitions_total=12,
                 live_brokers=3),
    ]
    return timelines, faults, acks, samples


def load(total, affected, rate, inbox, depths, alive, detector=True, timeout=6000) -> LoadAtFault:
    return LoadAtFault(partitions_total=total, partitions_affected=affected, produce_rate=rate, inbox_depth=inbox,
                       sender_queue_depths=depths, session_timeout_ms=timeout, brokers_alive=alive, detector=detector)


def test_compose_joins_timelines_faults_recoveries_and_load():
    timelines, faults, acks, samples = compose_inputs()
    got = compose(timelines, faults, acks, samples, session_timeout_ms=6000, detector=True)
    assert got == [
        # before any fault: no fault, the load at its detection
        FailoverRecord(fault_id=None, fault_kind=None, kind="controller_failover", controller_id=1, controller_epoch=4,
                       brokers=[], fault_injected_ms=None, detected_ms=500, processing_started_ms=501,
                       first_produce_ok_ms={}, load=load(12, 0, 10.0, 0, {1: 0}, 3)),
        # detected at the very moment of fault 1: joined to it; the broker failure carries the recoveries
        FailoverRecord(fault_id=1, fault_kind=FaultKind.KILL_BROKER, kind="controller_failover", controller_id=2,
                       controller_epoch=5, brokers=[], fault_injected_ms=1000.0, detected_ms=1000,
                       processing_started_ms=1001, first_produce_ok_ms={},
                       load=load(12, 0, 100.5, 3, {2: 4, 3: 1}, 3)),
        FailoverRecord(fault_id=1, fault_kind=FaultKind.KILL_BROKER, kind="broker_failure", controller_id=2,
                       controller_epoch=5, brokers=[1], fault_injected_ms=1000.0, detected_ms=1200,
                       processing_started_ms=1201, zk_written_ms=1250.0, requests_sent_ms=1260.0,
                       requests_acked_ms=1290.0, first_produce_ok_ms={"orders-0": 1400, "orders-2": 1700},
                       load=load(12, 4, 100.5, 7, {2: 4, 3: 1}, 3)),
        # a second broker failure, before fault 2: still fault 1's, but the recoveries are not counted twice
        FailoverRecord(fault_id=1, fault_kind=FaultKind.KILL_BROKER, kind="broker_failure", controller_id=2,
                       controller_epoch=5, brokers=[1], fault_injected_ms=1000.0, detected_ms=4000,
                       processing_started_ms=4001, first_produce_ok_ms={},
                       load=load(12, 0, 100.5, 2, {2: 4, 3: 1}, 3)),
        # fault 2 takes no leader down: no recoveries
        FailoverRecord(fault_id=2, fault_kind=FaultKind.KILL_CONTROLLER, kind="controller_failover", controller_id=3,
                       controller_epoch=6, brokers=[2], fault_injected_ms=5000.0, detected_ms=5100,
                       processing_started_ms=5101, zk_written_ms=5150.0, first_produce_ok_ms={},
                       load=load(12, 0, 80.0, 1, {1: 2}, 3)),
    ]


def test_compose_passes_session_timeout_and_detector_through():
    timelines, faults, acks, samples = compose_inputs()
    got = compose(timelines, faults, acks, samples, session_timeout_ms=18_000, detector=False)
    assert [(r.load.session_timeout_ms, r.load.detector) for r in got] == [(18_000, False)] * 5


def test_compose_without_samples_falls_back_to_the_timeline():
    timelines, faults, acks, _ = compose_inputs()
    got = compose(timelines, faults, acks, [], session_timeout_ms=6000, detector=True)
    assert [(r.detected_ms, r.load) for r in got] == [
        (500, load(12, 0, 0.0, 0, {}, 3)),
        (1000, load(12, 0, 0.0, 3, {}, 3)),
        (1200, load(12, 4, 0.0, 7, {}, 2)),
        (4000, load(12, 0, 0.0, 2, {}, 2)),
        (5100, load(12, 0, 0.0, 1, {}, 3)),
    ]


def test_compose_gives_recoveries_to_the_first_timeline_when_no_broker_failure():
    """A fault with only controller failovers (the victim was the controller): the first one carries them."""
    faults = [fault(1, FaultKind.KILL_BROKER, 1, 1000.0)]
    acks = AckIndex([ack("orders-0", 1, 3, 950), ack("orders-0", 2, 4, 1400)])
    timelines = [timeline("controller_failover", 1300, controller_id=3, epoch=7),
                 timeline("controller_failover", 1100, controller_id=2, epoch=6)]
    got = compose(timelines, faults, acks, [], session_timeout_ms=6000, detector=True)
    assert [(r.detected_ms, r.controller_id, r.first_produce_ok_ms) for r in got] == [
        (1100, 2, {"orders-0": 1400}), (1300, 3, {})]


def test_compose_fault_without_timeline_is_absent_and_nothing_in_nothing_out():
    faults = [fault(1, FaultKind.KILL_BROKER, 1, 1000.0)]
    acks = AckIndex([ack("orders-0", 1, 3, 950), ack("orders-0", 2, 4, 1400)])
    assert compose([], faults, acks, [], session_timeout_ms=6000, detector=True) == []
    got = compose([timeline("broker_failure", 800)], [], acks, [], session_timeout_ms=6000, detector=True)
    assert [(r.fault_id, r.fault_kind, r.fault_injected_ms, r.first_produce_ok_ms) for r in got] == [
        (None, None, None, {})]


# -- unavailability_ms ---------------------------------------------------------------------------------


def failover(fault_injected_ms: float | None, ok: dict[str, float], detected_ms: float = 0.0) -> FailoverRecord:
    return FailoverRecord(fault_id=1 if fault_injected_ms is not None else None, kind="broker_failure",
                          controller_id=1, controller_epoch=1, brokers=[1], fault_injected_ms=fault_injected_ms,
                          detected_ms=detected_ms, processing_started_ms=detected_ms, first_produce_ok_ms=ok,
                          load=load(1, 1, 0.0, 0, {}, 1))


def test_unavailability_is_first_ok_minus_fault_for_every_recovered_partition():
    records = [
        failover(1000.0, {"a-0": 1400.0, "a-1": 1700.5}),
        failover(None, {"b-0": 50.0}),  # no fault: skipped
        failover(5000.0, {}),
        failover(8000.0, {"c-0": 8000.25}),
    ]
    assert unavailability_ms(records) == [400.0, 700.5, 0.25]


def test_unavailability_of_composed_records():
    timelines, faults, acks, samples = compose_inputs()
    assert unavailability_ms(compose(timelines, faults, acks, samples, 6000, True)) == [400.0, 700.0]


def test_unavailability_of_nothing():
    assert unavailability_ms([]) == []


def test_with_acks_all_partitions_following_on_the_victim_count_until_their_isr_shrinks():
    """Broker 1 (a follower of t-7 and t-8) dies at 1000: a leader acknowledges nothing more with acks=all
    until the controller removes the dead follower (a new leader epoch); t-9 did not have 1 in its ISR."""
    acks = AckIndex([
        ack("t-7", 3, 4, 990), ack("t-7", 3, 4, 1100).model_copy(update={"sent_ms": 900}),  # in flight at the fault
        ack("t-7", 3, 5, 1250),  # then the shrink
        ack("t-8", 2, 1, 995), ack("t-8", 2, 2, 1300),
        ack("t-9", 2, 8, 980), ack("t-9", 2, 8, 1010),
    ])
    changed = {"t-7", "t-8"}  # the controller took 1 out of these ISRs; t-9 did not have it
    assert recovery(fault(1, FaultKind.KILL_BROKER, 1, 1000.0), acks, changed) == {"t-7": 1250, "t-8": 1300}
    assert recovery(fault(1, FaultKind.KILL_BROKER, 1, 1000.0), acks) == {}  # acks=1: followers do not count


def test_with_acks_all_compose_counts_the_partitions_the_timelines_changed_or_the_sample_shows():
    """The victim (1) was in three ISRs. t-7: the controller's broker failure wrote it, though the last
    sample predates 1's return to its ISR (a restarted broker killed again). t-8: the sample shows 1,
    but its leader shrank the ISR itself before the controller acted, so the controller did not write
    it. t-9: neither, so not counted."""
    from jobs.rundir import PartitionLeadership, StateSample

    acks = AckIndex([ack("t-7", 3, 4, 990), ack("t-7", 3, 5, 1250), ack("t-8", 3, 2, 995),
                     ack("t-8", 3, 2, 1400).model_copy(update={"sent_ms": 1398}),  # sent after the shrink
                     ack("t-9", 3, 2, 995), ack("t-9", 3, 2, 1010)])
    sample = StateSample(ts_ms=500, live_brokers=[1, 2, 3], partitions={
        "t-7": PartitionLeadership(leader=3, leader_epoch=4, isr=[3]),
        "t-8": PartitionLeadership(leader=3, leader_epoch=2, isr=[3, 1]),
        "t-9": PartitionLeadership(leader=3, leader_epoch=2, isr=[3, 2])})
    failure = timeline("broker_failure", 1010, partitions=["t-7"], partitions_affected=1)
    kill = fault(1, FaultKind.KILL_BROKER, 1, 1000.0)
    got = compose([failure], [kill], acks, [], session_timeout_ms=6000, detector=True, states=[sample])
    assert got[0].first_produce_ok_ms == {"t-7": 1250, "t-8": 1400}
    assert compose([failure], [kill], acks, [], session_timeout_ms=6000, detector=True)[0].first_produce_ok_ms == {}


def test_a_follower_death_ends_at_the_first_acknowledgement_of_a_record_sent_after_the_fault():
    """The leader (3) stays; a record sent after the dead follower (1) left is acknowledged in the old epoch
    once the controller shrank the ISR: that answer (sent at 1240, after the fault) is the recovery. One that
    was sent before the fault and arrived after is not (Kafka's response does not say when its leader
    decided)."""
    def decided(tp, broker, epoch, acked_ms, sent_ms):
        return ack(tp, broker, epoch, acked_ms).model_copy(update={"sent_ms": sent_ms})
    acks = AckIndex([decided("t-7", 3, 4, 990, 989), decided("t-7", 3, 4, 1003, 998),
                     decided("t-7", 3, 4, 1242, 1240), decided("t-7", 3, 5, 1300, 1299)])
    assert recovery(fault(1, FaultKind.KILL_BROKER, 1, 1000.0), acks, {"t-7"}) == {"t-7": 1242}


def test_acks_are_attributed_the_epoch_of_their_batch_and_that_epochs_leader():
    """Kafka's produce response names neither: the read-back gives each offset's leader epoch, the
    ZooKeeper samples each epoch's leader; what neither tells stays -1."""
    from jobs.failovers import attribute, epoch_leaders
    from jobs.rundir import PartitionLeadership, StateSample

    acks = [ack("t-0", -1, -1, 100).model_copy(update={"offset": o}) for o in (0, 1, 2)]
    samples = [StateSample(ts_ms=1, live_brokers=[1, 2], partitions={"t-0": PartitionLeadership(
        leader=1, leader_epoch=3, isr=[1, 2])}), StateSample(ts_ms=2, live_brokers=[2], partitions={
            "t-0": PartitionLeadership(leader=2, leader_epoch=4, isr=[2])})]
    got = list(attribute(acks, {("t-0", 0): 3, ("t-0", 1): 4, ("t-0", 2): 5}, epoch_leaders(samples)))
    assert [(a.leader_epoch, a.broker_id) for a in got] == [(3, 1), (4, 2), (5, -1)]


def test_a_broker_failure_is_joined_with_the_fault_that_hit_its_broker_when_faults_overlap():
    faults = [fault(1, FaultKind.KILL_BROKER, 1, 1000.0), fault(2, FaultKind.PAUSE_BROKER, 3, 2000.0, ended_ms=2500.0)]
    got = compose([timeline("broker_failure", 7000, brokers=(1,)), timeline("controller_failover", 7100, brokers=(2,))],
                  faults, AckIndex([]), [], session_timeout_ms=6000, detector=False)
    assert [(r.kind, r.fault_id) for r in got] == [("broker_failure", 1), ("controller_failover", 2)]
