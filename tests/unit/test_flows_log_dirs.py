"""The controller's flows for failed log directories (log_dirs.py, KIP-112): the brokers' event
notifications, their LeaderAndIsr answers, a restart and a failover."""
from __future__ import annotations

from actors.controller.events import BrokerChange, LogDirEventNotification
from actors.controller.failover import on_controller_failover
from actors.controller.log_dirs import on_leader_and_isr_response
from actors.controller.state_machines import ReplicaStateName as R
from actors.controller.timeline import Laps
from actors.protocol import (
    ControllerResponse,
    LeaderAndIsrRequest,
    PartitionError,
    PartitionErrors,
    UpdateMetadataRequest,
)
from coordination import zkdata
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from tests.unit.flow_helpers import T0, T1, Cluster, of, partitions


# -- failed log directories (KIP-112) ---------------------------------------------------------------

def log_dir_failed(c: Cluster, broker_id: int, seq: int = 1) -> None:
    """What a broker whose log directory failed writes (Kafka's propagateLogDirEvent)."""
    c.zk.create(f"{zkdata.LOG_DIR_EVENT_NOTIFICATION}/{zkdata.LOG_DIR_EVENT_PREFIX}{seq:010d}",
                zkdata.LogDirEventNotificationZNode(broker=broker_id).encode())


def leader_and_isr_answers(c: Cluster, broker_id: int, request, offline: set[TopicPartition]) -> None:
    """The broker answers its LeaderAndIsr: KAFKA_STORAGE_ERROR for the partitions on its failed directory."""
    on_leader_and_isr_response(c.scope, ControllerResponse(
        api="LeaderAndIsr", broker_id=broker_id, correlation_id=request.correlation_id,
        partition_errors=PartitionErrors(PartitionError(tp.topic, tp.partition, int(
            Errors.KAFKA_STORAGE_ERROR if tp in offline else Errors.NONE)) for tp in partitions(request))))


def test_a_failed_log_dir_moves_the_leaderships_of_its_replicas_only_and_takes_them_out_of_the_isrs():
    """Kafka's onBrokerLogDirFailure, then processLeaderAndIsrResponseReceived: the broker is asked about
    all its replicas, and those it answers KAFKA_STORAGE_ERROR go offline while it lives."""
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [1, 2, 3], 2: [2, 1, 3]}})
    T2 = TopicPartition("t", 2)
    log_dir_failed(c, 1)
    sent = c.run(LogDirEventNotification())
    assert c.zk.children(zkdata.LOG_DIR_EVENT_NOTIFICATION) == []  # read and deleted
    asked = of(sent, LeaderAndIsrRequest)
    assert set(asked) == {1} and set(partitions(asked[1])) == {T0, T1, T2}
    leader_and_isr_answers(c, 1, asked[1], offline={T0, T2})
    after = c.scope.batch.build(c.ctx)
    assert c.ctx.replicas_on_offline_dirs == {1: {T0, T2}}
    assert (c.state(T0).leader, c.state(T0).isr) == (2, [2, 3])  # led from the failed dir: elected again
    assert (c.state(T2).leader, c.state(T2).isr) == (2, [2, 3])  # followed from it: out of the ISR
    assert (c.state(T1).leader, c.state(T1).isr, c.state(T1).leader_epoch) == (1, [1, 2, 3], 0)  # untouched
    assert c.ctx.replica_states[(T0, 1)] is R.OfflineReplica and c.ctx.replica_states[(T1, 1)] is R.OnlineReplica
    assert 1 in c.ctx.live_brokers
    assert partitions(of(after, UpdateMetadataRequest)[3])[T0].offline_replicas == (1,)
    # the same answer again changes nothing; broker 2 dying later elects 3 for T0, never 1
    leader_and_isr_answers(c, 1, asked[1], offline={T0, T2})
    c.zk.remove(zkdata.broker_path(2))
    c.run(BrokerChange())
    assert (c.state(T0).leader, c.state(T0).isr) == (3, [3])


def test_a_broker_that_starts_again_is_asked_afresh_and_its_replicas_are_online_again():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    log_dir_failed(c, 1)
    request = of(c.run(LogDirEventNotification()), LeaderAndIsrRequest)[1]
    leader_and_isr_answers(c, 1, request, offline={T0})
    assert c.state(T0).leader == 2 and not c.ctx.is_replica_online(1, T0)
    c.zk.remove(zkdata.broker_path(1))
    c.register(1)  # restarted with its directory repaired
    sent = c.run(BrokerChange())
    assert c.ctx.replicas_on_offline_dirs == {} and c.ctx.is_replica_online(1, T0)
    assert T0 in partitions(of(sent, LeaderAndIsrRequest)[1])


def test_log_dir_events_of_unknown_brokers_or_malformed_are_deleted_and_change_nothing():
    c = Cluster([1, 2], {"t": {0: [1, 2]}})
    log_dir_failed(c, 9, seq=1)
    c.zk.create(f"{zkdata.LOG_DIR_EVENT_NOTIFICATION}/{zkdata.LOG_DIR_EVENT_PREFIX}0000000002", b"{not json")
    assert c.run(LogDirEventNotification()) == {}
    assert c.zk.children(zkdata.LOG_DIR_EVENT_NOTIFICATION) == []


def test_a_failover_deletes_log_dir_events_and_learns_offline_replicas_from_its_leader_and_isr_answers():
    c = Cluster([1, 2], {"t": {0: [1, 2]}})
    leader_and_isr_answers(c, 1, of(c.failover_requests[-1], LeaderAndIsrRequest)[1], offline={T0})
    assert (c.state(T0).leader, c.state(T0).isr) == (2, [2])
    log_dir_failed(c, 1)  # written while no controller was active
    on_controller_failover(c.scope, Laps())
    assert c.zk.children(zkdata.LOG_DIR_EVENT_NOTIFICATION) == []
