"""The controller's flows: the registry of one flow per event (flow.py), a failover's first requests
(failover.py), a deposed controller's writes fenced, and the failover timeline's acknowledgements.

Each flow runs alone against flow_helpers.py's in-memory double of ZooKeeper; the real ZooKeeper tests
(tests/integration) run the same flows end to end. The flows of each event group have their own file:
test_flows_brokers.py, test_flows_topics.py, test_flows_reassignment.py, test_flows_log_dirs.py.
"""
from __future__ import annotations

import pytest

from actors.controller.controller import FLOW_MODULES
from actors.controller.events import ELECTION_EVENTS, BrokerChange, ControllerEvent, ResponseReceived
from actors.controller.flow import FLOWS
from coordination import zkdata
from coordination.errors import ControllerMovedException
from coordination.zkdata import TopicPartition
from tests.unit.flow_helpers import T0, Cluster, apis


# -- the registry -----------------------------------------------------------------------------------

def test_every_event_is_an_election_event_or_has_one_flow_from_the_flow_modules():
    events = set(ControllerEvent.__subclasses__())
    assert not set(ELECTION_EVENTS) & set(FLOWS)
    assert events - set(ELECTION_EVENTS) - set(FLOWS) == {ResponseReceived}  # answers to the controller's requests
    assert {flow.__module__ for flow in FLOWS.values()} == {m.__name__ for m in FLOW_MODULES}


def test_a_second_flow_for_an_event_type_is_refused():
    from actors.controller.flow import handles
    with pytest.raises(TypeError, match="already has a flow"):
        handles(BrokerChange)(lambda s, e: None)


# -- failover ---------------------------------------------------------------------------------------

def test_a_failover_tells_every_broker_who_is_alive_before_any_leader_and_isr():
    """Kafka's onControllerFailover sends UpdateMetadata in a request of its own first (B8)."""
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3]}}, leaders={T0: (4, [4, 1])})
    first, last = c.failover_requests
    assert apis(first) == {1: ["UpdateMetadata"], 2: ["UpdateMetadata"], 3: ["UpdateMetadata"]}
    assert "LeaderAndIsr" in apis(last)[1]
    assert (c.state(T0).leader, c.state(T0).isr) == (1, [1])  # the dead leader's partition elected


def test_a_failover_handles_the_death_it_inherits_from_the_controllers_host_in_its_own_requests():
    """The broker that hosted the controller died with it; its registration outlives it until its
    session expires. A failure detector that knows it dead has the failover remove the registration and
    treat the broker as dead from the start: its leaderships elected and its ISR memberships ended in
    the failover's own requests, none sent to it, no broker failure left to handle after."""
    c = Cluster([1, 2, 3], {"t": {0: [3, 1, 2], 1: [1, 2, 3]}}, dead={3})
    assert zkdata.broker_path(3) not in c.zk.nodes and set(c.ctx.live_brokers) == {1, 2}
    assert c.scope.detector.watched == {1, 2}
    first, last = c.failover_requests
    assert set(first) == set(last) == {1, 2}  # the dead broker is sent nothing
    assert (c.state(T0).leader, c.state(T0).isr) == (1, [1, 2])  # it led: elected, out of the ISR
    assert c.state(TopicPartition("t", 1)).isr == [1, 2]  # it followed: out of the ISR
    assert not c.run(BrokerChange())  # the registration's removal fired the watch: nothing is left to do
    alive = Cluster([1, 2, 3], {"t": {0: [3, 1, 2]}}, dead=set())
    assert set(alive.ctx.live_brokers) == {1, 2, 3} and alive.state(T0).leader == 3


# -- fencing ----------------------------------------------------------------------------------------

def test_a_deposed_controllers_flow_writes_nothing():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    c.zk.epoch_zk_version += 1  # another controller was elected
    c.zk.remove(zkdata.broker_path(1))
    before = c.zk.nodes[zkdata.partition_state_path(T0)].data
    with pytest.raises(ControllerMovedException):
        c.run(BrokerChange())
    assert c.zk.nodes[zkdata.partition_state_path(T0)].data == before


# -- the failover timeline ------------------------------------------------------------------------------

def test_a_timeline_waits_for_the_requests_sent_ahead_as_well_as_the_last_ones():
    """A broker failure's UpdateMetadata, or a bounce's elections, leave before the event's last requests
    (FlowScope.send_now): the timeline is acknowledged only when every one of them is answered."""
    from actors.controller.timeline import FailoverTimeline

    t = FailoverTimeline(kind="broker_failure", controller_id=1, epoch=1, brokers=[2], detected_ms=0,
                         processing_started_ms=1, inbox_depth=0)
    t.sent([1, 2], 5, final=False)
    assert not t.acked(1, 6)  # an early answer, before the last requests left
    t.sent([3], 10)
    assert (t.requests_sent_ms, t.requests) == (10, 3)
    assert not t.acked(3, 12) and t.acked(2, 15) and t.requests_acked_ms == 15
    early_only = FailoverTimeline(kind="controller_failover", controller_id=1, epoch=1, brokers=[1], detected_ms=0,
                                  processing_started_ms=1, inbox_depth=0)
    early_only.sent([7], 2, final=False)
    early_only.sent([], 3)
    assert early_only.requests_acked_ms is None and early_only.acked(7, 4) and early_only.requests_acked_ms == 4
    nothing = FailoverTimeline(kind="broker_failure", controller_id=1, epoch=1, brokers=[2], detected_ms=0,
                               processing_started_ms=1, inbox_depth=0)
    nothing.sent([], 3)
    assert nothing.requests_acked_ms == 3


def test_an_api_election_answers_each_elected_partitions_new_leader_and_each_other_its_error():
    """Kafka's onReplicaElection answers Either[ApiError, Int]: the broker that asked waits until its cache
    shows that leader (a newer leader epoch alone may be another change's, such as a reassignment's end)."""
    from concurrent.futures import Future

    from actors.controller.changes import ElectionType
    from actors.controller.events import ReplicaLeaderElection
    from coordination.errors import ApiError, Errors
    from coordination.zkdata import TopicPartition

    moved, kept = TopicPartition("t", 0), TopicPartition("t", 1)
    cluster = Cluster([1, 2, 3], {"t": {0: [2, 1, 3], 1: [1, 2, 3]}}, leaders={moved: (1, [1, 2, 3])})
    reply = Future()
    cluster.run(ReplicaLeaderElection(partitions=None, election_type=ElectionType.PREFERRED, reply=reply))
    answer = reply.result()
    assert answer[moved] == 2 and cluster.state(moved).leader == 2
    assert isinstance(answer[kept], ApiError) and answer[kept].error == Errors.ELECTION_NOT_NEEDED
