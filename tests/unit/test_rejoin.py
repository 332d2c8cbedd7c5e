"""jobs.measures.rejoin: how long a broker back from a fault takes to rejoin the ISRs it left."""
from __future__ import annotations

from actors.records import BrokerEvent
from jobs.measures.rejoin import rejoins
from jobs.measures.rundir import FaultKind, FaultRecord, PartitionLeadership, StateSample

ASSIGNED = {"t-0": [1, 2, 3], "t-1": [2, 3, 1], "t-2": [1, 2], "t-3": [3, 1, 2]}


def fault(fault_id: int, at: float, target: int = 3, detail: str = "") -> FaultRecord:
    return FaultRecord(fault_id=fault_id, kind=FaultKind.KILL_BROKER, target=target, injected_ms=at, detail=detail)


def sample(at: float, isrs: dict[str, list[int]]) -> StateSample:
    return StateSample(ts_ms=at, live_brokers=[1, 2], partitions={
        tp: PartitionLeadership(leader=isr[0], leader_epoch=1, isr=isr) for tp, isr in isrs.items()})


def expanded(at: float, tp: str, isr: list[int], leader: int = 1) -> BrokerEvent:
    return BrokerEvent(broker_id=leader, ts_ms=at, kind="isr_change", partition=tp, leader_epoch=1, isr=isr,
                       detail="Expanding from 1,2")


def registered(at: float, broker: int = 3) -> BrokerEvent:
    return BrokerEvent(broker_id=broker, ts_ms=at, kind="registered", detail="123")


def test_back_in_every_isr_it_left_counted_from_its_registration():
    events = [registered(3000), expanded(3400, "t-0", [1, 2, 3]), expanded(3900, "t-3", [1, 2, 3], leader=2),
              expanded(3500, "t-1", [2, 1]),  # not its own expansion
              expanded(3600, "t-1", [2, 1, 3], leader=2), expanded(5000, "t-0", [1, 2, 3])]  # the second: no matter
    states = [sample(1000, {"t-0": [1, 2, 3], "t-1": [2, 3, 1], "t-2": [1, 2], "t-3": [3, 1, 2]}),
              sample(2500, {"t-0": [1, 2], "t-1": [2, 1], "t-2": [1, 2], "t-3": [1, 2]})]
    [r] = rejoins([fault(1, 1500)], events, states, ASSIGNED, until_ms=20_000)
    assert (r.fault_id, r.broker_id, r.registered_ms, r.out_of_isr) == (1, 3, 3000, 3)  # t-2 is not its
    assert r.rejoined_ms == [400, 600, 900] and r.all_back and r.last_ms == 900


def test_a_broker_registered_again_at_once_counts_the_isrs_it_left_after():
    """A session expiry: the broker registers again at once; the controller takes it out of its ISRs after."""
    events = [registered(1510), expanded(2400, "t-0", [1, 2, 3]), expanded(2500, "t-1", [2, 1, 3], leader=2),
              BrokerEvent(broker_id=1, ts_ms=1600, kind="isr_change", partition="t-0", leader_epoch=1, isr=[1, 3],
                          detail="Shrinking from 1,2,3")]  # broker 3 still in, before it left: no rejoin
    states = [sample(1000, {"t-0": [1, 2, 3], "t-1": [2, 3, 1], "t-2": [1, 2], "t-3": [3, 1, 2]}),
              sample(2000, {"t-0": [1, 2], "t-1": [2, 1], "t-2": [1, 2], "t-3": [3, 1, 2]}),
              sample(3000, {"t-0": [1, 2, 3], "t-1": [2, 1, 3], "t-2": [1, 2], "t-3": [3, 1, 2]})]
    [r] = rejoins([fault(1, 1500)], events, states, ASSIGNED, until_ms=20_000)
    assert (r.out_of_isr, r.rejoined_ms, r.last_ms) == (2, [890, 990], 990)


def test_not_back_in_all_before_the_next_fault_and_no_registration_no_rejoin():
    events = [registered(3000), expanded(3400, "t-0", [1, 2, 3]), expanded(9000, "t-1", [2, 1, 3])]
    states = [sample(2500, {"t-0": [1, 2], "t-1": [2, 1], "t-2": [1, 2], "t-3": [1, 2, 3]})]
    got = rejoins([fault(1, 1500), fault(2, 8000, target=1), fault(3, 8500, target=2, detail="failed: no")],
                  events, states, ASSIGNED, until_ms=20_000)
    assert [(r.fault_id, r.out_of_isr, r.rejoined_ms, r.last_ms) for r in got] == [(1, 2, [400], None)]
    assert rejoins([fault(1, 1500)], [registered(1000)], states, ASSIGNED, 20_000) == []  # before the fault
