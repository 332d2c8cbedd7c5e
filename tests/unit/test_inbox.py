"""The controller's inbox (Kafka's ControllerEventManager): one thread, FIFO, and, as a controller
resigns or its session expires, callers of queued events answered at once instead of timing out."""
from __future__ import annotations

import threading
from concurrent.futures import Future

from actors.controller.events import (
    BrokerChange,
    ControlledShutdown,
    ControllerChange,
    ControllerEventManager,
    DescribeController,
    Expire,
    ReplicaLeaderElection,
    ResponseReceived,
    TopicChange,
)
from coordination.errors import Errors


class BlockedInbox:
    """An inbox whose thread is held inside its first event until `release`, so that what is queued
    behind it can be looked at."""

    def __init__(self):
        self.seen: list[str] = []
        self.inside, self.go = threading.Event(), threading.Event()
        self.manager = ControllerEventManager("test-inbox", self._process)
        self.manager.start()
        self.manager.put(TopicChange())
        assert self.inside.wait(5)

    def _process(self, event) -> None:
        self.seen.append(type(event).__name__)
        self.inside.set()
        self.go.wait(5)
        reply = getattr(event, "reply", None)
        if reply is not None and not reply.done():
            reply.set_result("processed")

    def release(self) -> list[str]:
        self.go.set()
        self.manager.close()
        return self.seen


def test_events_are_processed_one_at_a_time_in_arrival_order():
    inbox = BlockedInbox()
    for event in (BrokerChange(), ControllerChange(), ResponseReceived()):
        inbox.manager.put(event)
    assert inbox.manager.depth() == 3
    assert inbox.release() == ["TopicChange", "BrokerChange", "ControllerChange", "ResponseReceived"]


def test_a_resigning_controller_answers_queued_callers_not_controller_and_keeps_the_election_events():
    inbox = BlockedInbox()
    shutdown, election, status = Future(), Future(), Future()
    for event in (BrokerChange(), ControlledShutdown(broker_id=2, broker_epoch=5, reply=shutdown),
                  ControllerChange(), ReplicaLeaderElection(reply=election), DescribeController(reply=status),
                  ResponseReceived()):
        inbox.manager.put(event)
    assert inbox.manager.preempt_queued() == 4
    # answered now, while the inbox is still busy: nobody waits for it or for a timeout
    assert shutdown.result(timeout=0) == Errors.NOT_CONTROLLER
    assert election.result(timeout=0) == Errors.NOT_CONTROLLER
    assert not status.done()  # a read of the candidate's state is still answered, in order
    assert inbox.release() == ["TopicChange", "ControllerChange", "DescribeController"]
    assert status.result(timeout=0) == "processed"


def test_an_expired_session_puts_expire_first_and_preempts_what_an_active_controller_would_do():
    """Kafka's clearAndPut(Expire): the resignation is not queued behind thousands of responses."""
    inbox = BlockedInbox()
    shutdown = Future()
    for _ in range(1000):
        inbox.manager.put(ResponseReceived())
    inbox.manager.put(ControllerChange())
    inbox.manager.put(ControlledShutdown(broker_id=1, reply=shutdown))
    assert inbox.manager.clear_and_put(Expire()) == 1001
    assert shutdown.result(timeout=0) == Errors.NOT_CONTROLLER
    assert inbox.release() == ["TopicChange", "Expire", "ControllerChange"]


def test_a_caller_answered_before_its_event_is_preempted_keeps_its_answer():
    inbox = BlockedInbox()
    reply = Future()
    reply.set_result([])
    inbox.manager.put(ControlledShutdown(broker_id=1, reply=reply))
    assert inbox.manager.preempt_queued() == 1
    assert reply.result(timeout=0) == []
    inbox.release()


def test_each_event_is_timed_under_the_controller_state_kafka_gives_its_event():
    from actors.controller.events import (
        CONTROLLER_STATES, AutoPreferredReplicaLeaderElection, BrokerActorDied, PartitionReassignmentIsrChange,
        controller_state, rate_and_time_metric)
    from actors.protocol import ControllerResponse

    def response(api):
        return ResponseReceived(response=ControllerResponse(api=api, broker_id=1, correlation_id=1,
                                                            error_code=Errors.NONE, partition_errors=[]))
    assert controller_state(BrokerChange()) == controller_state(BrokerActorDied()) == "BrokerChange"
    assert controller_state(Expire()) == controller_state(ControllerChange()) == "ControllerChange"
    assert controller_state(PartitionReassignmentIsrChange()) == "AlterPartitionReassignment"
    assert controller_state(AutoPreferredReplicaLeaderElection()) == "AutoLeaderBalance"
    assert controller_state(ReplicaLeaderElection()) == "ManualLeaderBalance"
    assert controller_state(response("LeaderAndIsr")) == "LeaderAndIsrResponseReceived"
    assert controller_state(response("UpdateMetadata")) == "UpdateMetadataResponseReceived"
    assert controller_state(response("StopReplica")) == "TopicDeletion"
    assert controller_state(DescribeController()) == "Idle"
    assert all(controller_state(e) in CONTROLLER_STATES for e in (TopicChange(), ControlledShutdown()))
    # Kafka kept the name its broker-change timer had before ControllerState existed
    assert rate_and_time_metric("BrokerChange") == "LeaderElectionRateAndTimeMs"
    assert rate_and_time_metric("AlterPartitionReassignment") == "PartitionReassignmentRateAndTimeMs"
    assert rate_and_time_metric("IsrChange") == "IsrChangeRateAndTimeMs" and rate_and_time_metric("Idle") is None


def test_the_auto_rebalance_check_is_scheduled_again_only_after_it_was_processed():
    """Kafka reschedules the check after each run, so a slow inbox holds at most one (B12)."""
    import time

    from actors.controller.events import AutoPreferredReplicaLeaderElection, ScheduledEvent

    queued = []
    task = ScheduledEvent(queued.append, lambda t: AutoPreferredReplicaLeaderElection(task=t), interval_s=0.02)
    task.schedule(0.0)
    time.sleep(0.2)  # ten intervals with nothing processed
    assert len(queued) == 1
    task.processed(queued[0])
    deadline = time.monotonic() + 10
    while len(queued) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(queued) == 2
    older = ScheduledEvent(queued.append, lambda t: AutoPreferredReplicaLeaderElection(task=t), interval_s=0.02)
    older.processed(queued[1])  # another term's event schedules nothing for this one
    task.cancel()
    task.processed(queued[1])
    time.sleep(0.2)
    assert len(queued) == 2
