"""jobs.measures.failovers.compose on records built in memory: each controller timeline joined with its fault and
the load at it."""
from __future__ import annotations

from actors.records import TimelineRecord
from jobs.measures.failovers import compose
from jobs.measures.rundir import FailoverRecord, FaultKind, FaultRecord, LoadAtFault, LoadSample


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


def compose_inputs():
    faults = [
        fault(2, FaultKind.KILL_CONTROLLER, 2, 5000.0),
        fault(1, FaultKind.KILL_BROKER, 1, 1000.0, ended_ms=4000.0),
    ]
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
    return timelines, faults, samples


def load(total, affected, rate, inbox, depths, alive, detector=True, timeout=6000) -> LoadAtFault:
    return LoadAtFault(partitions_total=total, partitions_affected=affected, produce_rate=rate, inbox_depth=inbox,
                       sender_queue_depths=depths, session_timeout_ms=timeout, brokers_alive=alive, detector=detector)


def test_compose_joins_timelines_faults_and_load():
    timelines, faults, samples = compose_inputs()
    got = compose(timelines, faults, samples, session_timeout_ms=6000, detector=True)
    assert got == [
        # before any fault: no fault, the load at its detection
        FailoverRecord(fault_id=None, fault_kind=None, kind="controller_failover", controller_id=1, controller_epoch=4,
                       brokers=[], fault_injected_ms=None, detected_ms=500, processing_started_ms=501,
                       load=load(12, 0, 10.0, 0, {1: 0}, 3)),
        # detected at the very moment of fault 1: joined to it
        FailoverRecord(fault_id=1, fault_kind=FaultKind.KILL_BROKER, kind="controller_failover", controller_id=2,
                       controller_epoch=5, brokers=[], fault_injected_ms=1000.0, detected_ms=1000,
                       processing_started_ms=1001,
                       load=load(12, 0, 100.5, 3, {2: 4, 3: 1}, 3)),
        FailoverRecord(fault_id=1, fault_kind=FaultKind.KILL_BROKER, kind="broker_failure", controller_id=2,
                       controller_epoch=5, brokers=[1], fault_injected_ms=1000.0, detected_ms=1200,
                       processing_started_ms=1201, zk_written_ms=1250.0, requests_sent_ms=1260.0,
                       requests_acked_ms=1290.0,
                       load=load(12, 4, 100.5, 7, {2: 4, 3: 1}, 3)),
        # a second broker failure, before fault 2: still fault 1's
        FailoverRecord(fault_id=1, fault_kind=FaultKind.KILL_BROKER, kind="broker_failure", controller_id=2,
                       controller_epoch=5, brokers=[1], fault_injected_ms=1000.0, detected_ms=4000,
                       processing_started_ms=4001,
                       load=load(12, 0, 100.5, 2, {2: 4, 3: 1}, 3)),
        FailoverRecord(fault_id=2, fault_kind=FaultKind.KILL_CONTROLLER, kind="controller_failover", controller_id=3,
                       controller_epoch=6, brokers=[2], fault_injected_ms=5000.0, detected_ms=5100,
                       processing_started_ms=5101, zk_written_ms=5150.0,
                       load=load(12, 0, 80.0, 1, {1: 2}, 3)),
    ]


def test_compose_passes_session_timeout_and_detector_through():
    timelines, faults, samples = compose_inputs()
    got = compose(timelines, faults, samples, session_timeout_ms=18_000, detector=False)
    assert [(r.load.session_timeout_ms, r.load.detector) for r in got] == [(18_000, False)] * 5


def test_compose_without_samples_falls_back_to_the_timeline():
    timelines, faults, _ = compose_inputs()
    got = compose(timelines, faults, [], session_timeout_ms=6000, detector=True)
    assert [(r.detected_ms, r.load) for r in got] == [
        (500, load(12, 0, 0.0, 0, {}, 3)),
        (1000, load(12, 0, 0.0, 3, {}, 3)),
        (1200, load(12, 4, 0.0, 7, {}, 2)),
        (4000, load(12, 0, 0.0, 2, {}, 2)),
        (5100, load(12, 0, 0.0, 1, {}, 3)),
    ]


def test_compose_fault_without_timeline_is_absent_and_nothing_in_nothing_out():
    faults = [fault(1, FaultKind.KILL_BROKER, 1, 1000.0)]
    assert compose([], faults, [], session_timeout_ms=6000, detector=True) == []
    got = compose([timeline("broker_failure", 800)], [], [], session_timeout_ms=6000, detector=True)
    assert [(r.fault_id, r.fault_kind, r.fault_injected_ms) for r in got] == [(None, None, None)]


def test_a_broker_failure_is_joined_with_the_fault_that_hit_its_broker_when_faults_overlap():
    faults = [fault(1, FaultKind.KILL_BROKER, 1, 1000.0), fault(2, FaultKind.PAUSE_BROKER, 3, 2000.0, ended_ms=2500.0)]
    got = compose([timeline("broker_failure", 7000, brokers=(1,)), timeline("controller_failover", 7100, brokers=(2,))],
                  faults, [], session_timeout_ms=6000, detector=False)
    assert [(r.kind, r.fault_id) for r in got] == [("broker_failure", 1), ("controller_failover", 2)]


def test_a_faults_failover_is_its_broker_failure_else_its_first():
    from jobs.measures.failovers import of_faults

    timelines, faults, samples = compose_inputs()
    got = of_faults(compose(timelines, faults, samples, session_timeout_ms=6000, detector=True))
    assert {i: (f.kind, f.detected_ms) for i, f in got.items()} == {
        1: ("broker_failure", 1200), 2: ("controller_failover", 5100)}
