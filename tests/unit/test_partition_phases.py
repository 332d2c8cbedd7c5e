"""jobs.measures.partition_phases: a partition's steps from the fault to its acknowledgement, from the controller's
timeline and the brokers' events, on records built in memory."""
from __future__ import annotations

from actors.records import BrokerEvent
from jobs.measures.partition_phases import BrokerSteps, explain, phases, steps
from jobs.measures.phases import PARTITION_PHASES
from jobs.measures.rundir import FailoverRecord, FaultKind, FaultRecord, LoadAtFault, PartitionWait, Role, Source

T = 1_000.0  # the fault


def wait(recovery: float, tp: str = "t-0", censored: bool = False, fault_id: int = 1,
         offset: int | None = None) -> PartitionWait:
    return PartitionWait(fault_id=fault_id, fault_kind=FaultKind.KILL_BROKER, partition=tp, source=Source.LOAD,
                         role=Role.LEADER, fault_ms=T, observed_ms=30_000, recovery_ms=recovery,
                         recovery_censored=censored, recovery_offset=offset, worst_wait_ms=recovery, records=3,
                         rate=10)


def failover(kind: str = "broker_failure", detected: float = T + 10, **times) -> FailoverRecord:
    return FailoverRecord(fault_id=1, fault_kind=FaultKind.KILL_BROKER, kind=kind, controller_id=1,
                          controller_epoch=2, brokers=[2], fault_injected_ms=T, detected_ms=detected,
                          processing_started_ms=detected + 5, **times,
                          load=LoadAtFault(partitions_total=1, partitions_affected=1, produce_rate=1, inbox_depth=0,
                                           session_timeout_ms=3000, brokers_alive=2, detector=True))


def event(kind: str, at: float, broker: int = 1, tp: str = "t-0", epoch: int = 5, **fields) -> BrokerEvent:
    return BrokerEvent(broker_id=broker, ts_ms=T + at, kind=kind, partition=None if kind == "leader_and_isr" else tp,
                       leader_epoch=None if kind == "leader_and_isr" else epoch, **fields)


KILL = [
    event("leader_and_isr", 40, broker=1, leaders={"t-0": 5, "t-1": 7}, isrs={"t-0": [1, 3], "t-1": [1]}),
    event("leader_and_isr", 45, broker=3, followers={"t-0": 5}),
    event("leader_and_isr", 400, broker=2, followers={"t-0": 5}),  # the victim back, outside the ISR: not waited on
    event("follower_fetch", 410, broker=1, replica=2),
    event("leader_and_isr", 41, broker=3, followers={"t-0": 4}),  # an earlier epoch's: not this one's
    event("follower_fetch", 60, broker=1, replica=3),
    event("client_append", 900, broker=1),
    event("hw_moved", 70, broker=1),  # before the client's first batch: not the move that acknowledges it
    event("hw_moved", 930, broker=1, detail="57"),
    event("hw_moved", 500, broker=1, tp="t-1", epoch=7),
]


def test_a_killed_leaders_partition_steps_from_the_controller_to_the_high_watermark():
    w = wait(940)
    seen = steps(w, failover(zk_written_ms=T + 30, requests_sent_ms=T + 35, requests_acked_ms=T + 50),
                 BrokerSteps(KILL))
    assert seen == {"detection_ms": T + 10, "inbox_wait_ms": T + 15, "election_zk_ms": T + 30, "send_ms": T + 35,
                    "leader_apply_ms": T + 40, "followers_apply_ms": T + 45, "follower_fetch_ms": T + 60,
                    "first_append_ms": T + 900, "hw_ms": T + 930}
    named, rest = phases(w, seen)
    assert named == {"detection_ms": 10, "inbox_wait_ms": 5, "election_zk_ms": 15, "send_ms": 5,
                     "leader_apply_ms": 5, "followers_apply_ms": 5, "follower_fetch_ms": 15, "first_append_ms": 840,
                     "hw_ms": 30}
    assert rest == 10 and sum(named.values()) + rest == w.recovery_ms
    assert list(named) == [p for p in PARTITION_PHASES if p in named]  # here the order they ran in is the table's
    assert list(phases(w, {"hw_ms": T + 5, "detection_ms": T + 9})[0]) == ["hw_ms", "detection_ms"]


def test_steps_after_the_recovery_or_before_the_fault_are_left_out_and_the_rest_is_unexplained():
    w = wait(50)  # recovered before the client's batch in the new epoch was appended
    named, rest = phases(w, steps(w, failover(detected=T - 5), BrokerSteps(KILL)))
    assert named == {"leader_apply_ms": 40, "followers_apply_ms": 5} and rest == 5


def test_a_fault_the_controller_did_not_handle_has_only_the_brokers_steps():
    w = wait(3000)
    events = [event("isr_change", 2100, isr=[1], detail="Shrinking from 1,2"), event("hw_moved", 2105)]
    named, rest = phases(w, steps(w, None, BrokerSteps(events)))
    assert named == {"isr_write_ms": 2100, "hw_ms": 5} and rest == 895
    named, rest = phases(w, steps(w, None, BrokerSteps([])))
    assert named == {} and rest == 3000
    named, rest = phases(w, steps(w, None, BrokerSteps(events), fault_end_ms=T + 2000))  # a cut healed at 2 s
    assert named == {"fault_end_ms": 2000, "isr_write_ms": 100, "hw_ms": 5} and rest == 895
    censored = wait(3000, censored=True)  # never acknowledged: its phases, no unexplained rest
    assert phases(censored, steps(censored, None, BrokerSteps(events))) == ({"isr_write_ms": 2100, "hw_ms": 5}, None)
    w = wait(1520)  # a pause of 1.5 s, within the session
    assert phases(w, steps(w, None, BrokerSteps([]), fault_end_ms=T + 1500)) == ({"fault_end_ms": 1500}, 20)


def test_explain_fills_every_wait_and_takes_the_broker_failure_of_a_fault():
    got = explain([wait(940), wait(600, tp="t-1")], [FaultRecord(fault_id=1, kind=FaultKind.KILL_BROKER, target=2,
                                                                 injected_ms=T, ended_ms=T + 3000)],
                  [failover("controller_failover", detected=T + 2), failover(zk_written_ms=T + 30)], KILL)
    assert got[0].phases["detection_ms"] == 10 and got[0].phases["election_zk_ms"] == 15  # the broker failure's
    assert got[1].phases == {"detection_ms": 10, "inbox_wait_ms": 5, "election_zk_ms": 15,
                             "leader_apply_ms": 10, "hw_ms": 460} and got[1].unexplained_ms == 100


def test_a_record_the_high_watermarks_move_did_not_reach_waited_in_the_clients_queue():
    """The load's first record sent after the fault came after the batches the first move committed
    (offset 57 at or past HW 57): the rest is the client's queue, not unexplained."""
    behind, within = wait(2000, offset=57), wait(2000, offset=56)
    named, rest = phases(behind, steps(behind, None, BrokerSteps(KILL)))
    assert named["hw_ms"] == 30 and named["client_queue_ms"] == 1070 and rest == 0
    named, rest = phases(within, steps(within, None, BrokerSteps(KILL)))
    assert "client_queue_ms" not in named and rest == 1070
    probe = behind.model_copy(update={"source": Source.PROBE})  # one record in flight: no queue to wait in
    named, rest = phases(probe, steps(probe, None, BrokerSteps(KILL)))
    assert "client_queue_ms" not in named and rest == 1070


def test_the_last_refusal_before_the_first_append_is_a_step():
    """A paused leader back: it answers the client's held batch NOT_LEADER_OR_FOLLOWER, then the client's
    retry reaches the new leader."""
    events = [*KILL, event("produce_error", 700, broker=2, detail="NOT_LEADER_OR_FOLLOWER"),
              event("produce_error", 800, broker=2, detail="NOT_LEADER_OR_FOLLOWER"),
              event("produce_error", 950, broker=2, detail="NOT_LEADER_OR_FOLLOWER")]  # after the append: not it
    w = wait(940)
    seen = steps(w, None, BrokerSteps(events))
    assert seen["refused_ms"] == T + 800 and seen["first_append_ms"] == T + 900
    named, _ = phases(w, seen)
    assert named["refused_ms"] == 800 - 60 and named["first_append_ms"] == 100  # from the last follower's fetch


def test_the_send_of_the_record_that_recovered_the_partition_is_a_step():
    """A healthy partition's probe: its next record went 95 ms after the fault (the probe's interval), and
    was acknowledged 8 ms later: the wait is the send, not unexplained."""
    w = wait(103).model_copy(update={"recovery_sent_ms": T + 95})
    assert phases(w, steps(w, None, BrokerSteps([]))) == ({"record_sent_ms": 95}, 8)
