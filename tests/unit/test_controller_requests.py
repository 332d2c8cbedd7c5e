"""The broker's controller requests (controller_requests.py, which the ReplicaManager inherits):
LeaderAndIsr and StopReplica with their controller, broker and leader epoch checks, UpdateMetadata's
epoch check, and the logs a LeaderAndIsr creates and a StopReplica keeps or deletes."""
from __future__ import annotations

import pytest

from actors.broker.controller_requests import UNKNOWN_BROKER_EPOCH
from actors.broker.partition import LeaderAndIsrState
from actors.broker.replica_manager import role
from actors.protocol import StopReplicaPartition, UpdateMetadataRequest
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from tests.unit.replica_manager_helpers import BROKER, BROKER_EPOCH, T0, T1, T2, batch, errors, lai, ps, stop
from tests.unit.replica_manager_helpers import rm  # noqa: F401 (the fixture)


def roles(rm):
    return {tp: role(r, rm.broker_id) for tp, r in rm.replicas.items()}


# -- LeaderAndIsr ----------------------------------------------------------------------------------

def test_first_leader_and_isr_applies_roles(rm):
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), ps(T1, leader=2, leader_epoch=0)),
                                        BROKER_EPOCH)
    assert resp.api == "LeaderAndIsr"
    assert resp.broker_id == BROKER
    assert resp.error_code == Errors.NONE
    assert [(e.topic, e.partition, e.error_code) for e in resp.partition_errors] == [
        ("t", 0, Errors.NONE), ("t", 1, Errors.NONE)]
    assert roles(rm) == {T0: "Leader", T1: "Follower"}
    assert rm.replicas[T0] == LeaderAndIsrState(leader=1, leader_epoch=0, isr=(1, 2, 3), replicas=(1, 2, 3), zk_version=0,
                                                controller_epoch=1)
    assert rm.controller_epoch == 1


def test_newer_leader_epoch_replaces_state(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=3)), BROKER_EPOCH)
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=4, isr=(2, 3), zk_version=7)),
                                        BROKER_EPOCH)
    assert errors(resp) == {T0: Errors.NONE}
    assert roles(rm) == {T0: "Follower"}
    assert rm.replicas[T0] == LeaderAndIsrState(2, 4, (2, 3), (1, 2, 3), 7, controller_epoch=1)


@pytest.mark.parametrize("epoch", [5, 4, 0])
def test_equal_or_older_leader_epoch_is_stale(rm, epoch):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=5, zk_version=2)), BROKER_EPOCH)
    before = dict(rm.replicas)
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=epoch, isr=(2,))), BROKER_EPOCH)
    assert resp.error_code == Errors.NONE
    assert errors(resp) == {T0: Errors.STALE_CONTROLLER_EPOCH}
    assert rm.replicas == before
    assert roles(rm) == {T0: "Leader"}


def test_stale_partition_does_not_block_others(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=5)), BROKER_EPOCH)
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=2, leader_epoch=5), ps(T1, leader=1, leader_epoch=0)),
                                        BROKER_EPOCH)
    assert errors(resp) == {T0: Errors.STALE_CONTROLLER_EPOCH, T1: Errors.NONE}
    assert roles(rm) == {T0: "Leader", T1: "Leader"}


def test_partition_not_assigned_to_this_broker(rm):
    resp = rm.become_leader_or_follower(
        lai(ps(T0, leader=2, leader_epoch=0, isr=(2, 3), replicas=(2, 3)), ps(T1, leader=1, leader_epoch=0)),
        BROKER_EPOCH)
    assert errors(resp) == {T0: Errors.UNKNOWN_TOPIC_OR_PARTITION, T1: Errors.NONE}
    assert T0 not in rm.replicas
    assert set(rm.replicas) == {T1}


def test_lower_controller_epoch_refused_whole(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), controller_epoch=7), BROKER_EPOCH)
    before = dict(rm.replicas)
    resp = rm.become_leader_or_follower(
        lai(ps(T0, leader=2, leader_epoch=9), ps(T1, leader=1, leader_epoch=0), controller_epoch=6), BROKER_EPOCH)
    assert resp.error_code == Errors.STALE_CONTROLLER_EPOCH
    assert resp.partition_errors == ()
    assert rm.replicas == before
    assert rm.controller_epoch == 7


def test_equal_and_higher_controller_epoch_accepted(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), controller_epoch=7), BROKER_EPOCH)
    resp = rm.become_leader_or_follower(lai(ps(T1, leader=1, leader_epoch=0), controller_epoch=7), BROKER_EPOCH)
    assert resp.error_code == Errors.NONE
    resp = rm.become_leader_or_follower(lai(ps(T2, leader=2, leader_epoch=0), controller_epoch=8), BROKER_EPOCH)
    assert resp.error_code == Errors.NONE
    assert rm.controller_epoch == 8
    assert roles(rm) == {T0: "Leader", T1: "Leader", T2: "Follower"}


def test_stale_broker_epoch_refused_whole(rm):
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), controller_epoch=3,
                                            broker_epoch=BROKER_EPOCH - 1), BROKER_EPOCH)
    assert resp.error_code == Errors.STALE_BROKER_EPOCH
    assert resp.partition_errors == ()
    assert rm.replicas == {}
    assert rm.controller_epoch == 0  # a refused request does not adopt its controller epoch


def test_broker_epoch_checked_before_controller_epoch(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), controller_epoch=5), BROKER_EPOCH)
    resp = rm.become_leader_or_follower(lai(ps(T1, leader=1, leader_epoch=0), controller_epoch=4,
                                            broker_epoch=BROKER_EPOCH - 10), BROKER_EPOCH)
    assert resp.error_code == Errors.STALE_BROKER_EPOCH


def test_unknown_broker_epoch_is_accepted(rm):
    assert UNKNOWN_BROKER_EPOCH == -1
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), broker_epoch=-1), BROKER_EPOCH)
    assert resp.error_code == Errors.NONE
    assert errors(resp) == {T0: Errors.NONE}
    assert roles(rm) == {T0: "Leader"}


def test_newer_broker_epoch_is_accepted(rm):
    # Kafka: the controller may learn a broker's new epoch before the broker itself does
    resp = rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), broker_epoch=BROKER_EPOCH + 1),
                                        BROKER_EPOCH)
    assert resp.error_code == Errors.NONE
    assert T0 in rm.replicas


def test_empty_request_adopts_controller_epoch(rm):
    resp = rm.become_leader_or_follower(lai(controller_epoch=12), BROKER_EPOCH)
    assert resp.error_code == Errors.NONE and resp.partition_errors == ()
    assert rm.controller_epoch == 12


def test_leader_and_isr_in_steps_applies_each_steps_states_and_answers_as_a_whole(rm):
    """The broker applies a large LeaderAndIsr a step at a time (its other requests are served between
    them): each step has applied its states, and the response is the whole request's."""
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=5)), BROKER_EPOCH)
    states = [ps(T0, leader=2, leader_epoch=5)] + [ps(TopicPartition("s", i), leader=1 + i % 2, leader_epoch=0)
                                                   for i in range(6)] + [ps(T1, leader=2, leader_epoch=0,
                                                                            isr=(2, 3), replicas=(2, 3))]
    steps = rm.leader_and_isr_steps(lai(*states, controller_epoch=2), BROKER_EPOCH, 3)
    seen = []
    with pytest.raises(StopIteration) as done:
        while True:
            step_states, results = next(steps)
            assert [(r.topic, r.partition) for r in results] == [(s.topic, s.partition) for s in step_states]
            assert all(TopicPartition(s.topic, s.partition) in rm.replicas
                       for s, r in zip(step_states, results) if r.error_code == Errors.NONE)
            seen.append(len(step_states))
    assert seen == [3, 3, 2]
    response = done.value.value
    assert errors(response) == {T0: Errors.STALE_CONTROLLER_EPOCH, T1: Errors.UNKNOWN_TOPIC_OR_PARTITION} | {
        TopicPartition("s", i): Errors.NONE for i in range(6)}
    assert [(e.topic, e.partition) for e in response.partition_errors] == [(s.topic, s.partition) for s in states]
    assert rm.controller_epoch == 2
    whole = rm.become_leader_or_follower(lai(*states, controller_epoch=2), BROKER_EPOCH)
    assert set(errors(whole).values()) == {Errors.STALE_CONTROLLER_EPOCH, Errors.UNKNOWN_TOPIC_OR_PARTITION}


def test_a_step_of_a_leader_and_isr_ends_when_its_time_is_up(rm):
    """A step also ends once it has run `step_s` (making a partition's files takes up to a millisecond on a
    slow disk: a thousand a step held the event loop for a second): with no time at all, one state a step."""
    states = [ps(TopicPartition("s", i), leader=1 + i % 2, leader_epoch=0) for i in range(4)]
    steps = rm.leader_and_isr_steps(lai(*states, controller_epoch=2), BROKER_EPOCH, 1000, step_s=0)
    seen = []
    with pytest.raises(StopIteration) as done:
        while True:
            step_states, results = next(steps)
            seen.append([(s.topic, s.partition) for s in step_states])
    assert seen == [[("s", i)] for i in range(4)]
    assert set(errors(done.value.value).values()) == {Errors.NONE} and len(rm.replicas) == 4


def test_leader_and_isr_in_steps_refused_whole_takes_no_step(rm):
    rm.become_leader_or_follower(lai(controller_epoch=7), BROKER_EPOCH)
    steps = rm.leader_and_isr_steps(lai(ps(T0, leader=1, leader_epoch=0), controller_epoch=6), BROKER_EPOCH, 1)
    with pytest.raises(StopIteration) as done:
        next(steps)
    assert done.value.value.error_code == Errors.STALE_CONTROLLER_EPOCH
    assert rm.replicas == {}


def test_check_request_for_update_metadata(rm):
    um = UpdateMetadataRequest(controller_id=9, controller_epoch=4, broker_epoch=BROKER_EPOCH,
                               partition_states=[], live_brokers=[])
    assert rm.check_request(um, BROKER_EPOCH) == Errors.NONE
    assert rm.controller_epoch == 4
    old = um.model_copy(update={"controller_epoch": 3})
    assert rm.check_request(old, BROKER_EPOCH) == Errors.STALE_CONTROLLER_EPOCH
    assert rm.check_request(um, BROKER_EPOCH + 1) == Errors.STALE_BROKER_EPOCH
    assert rm.controller_epoch == 4


# -- StopReplica ----------------------------------------------------------------------------------

def _with_partitions(rm, epoch=3):
    rm.become_leader_or_follower(
        lai(ps(T0, leader=1, leader_epoch=epoch), ps(T1, leader=2, leader_epoch=epoch),
            ps(T2, leader=3, leader_epoch=epoch)), BROKER_EPOCH)
    assert set(rm.replicas) == {T0, T1, T2}


def test_stop_replicas_removes_partitions(rm):
    _with_partitions(rm)
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0),
                                 StopReplicaPartition(topic="t", partition=2, delete_partition=True)), BROKER_EPOCH)
    assert resp.api == "StopReplica"
    assert resp.error_code == Errors.NONE
    assert errors(resp) == {T0: Errors.NONE, T2: Errors.NONE}
    assert set(rm.replicas) == {T1}


def test_stop_replicas_with_newer_leader_epoch_and_sentinels(rm):
    _with_partitions(rm, epoch=3)
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0, leader_epoch=4),
                                 StopReplicaPartition(topic="t", partition=1, leader_epoch=-1),
                                 StopReplicaPartition(topic="t", partition=2, leader_epoch=-2)), BROKER_EPOCH)
    assert errors(resp) == {T0: Errors.NONE, T1: Errors.NONE, T2: Errors.NONE}
    assert rm.replicas == {}


def test_stop_replicas_unknown_partition_is_fine(rm):
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="nope", partition=5)), BROKER_EPOCH)
    assert errors(resp) == {TopicPartition("nope", 5): Errors.NONE}


def test_stop_replicas_older_leader_epoch_fenced(rm):
    _with_partitions(rm, epoch=3)
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0, leader_epoch=2)), BROKER_EPOCH)
    assert errors(resp) == {T0: Errors.FENCED_LEADER_EPOCH}
    assert T0 in rm.replicas


def test_stop_replicas_equal_leader_epoch_fenced_as_in_kafka(rm):
    _with_partitions(rm, epoch=3)
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0, leader_epoch=3)), BROKER_EPOCH)
    assert errors(resp) == {T0: Errors.FENCED_LEADER_EPOCH}
    assert T0 in rm.replicas


def test_stop_replicas_stale_controller_epoch(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), controller_epoch=5), BROKER_EPOCH)
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0), controller_epoch=4), BROKER_EPOCH)
    assert resp.error_code == Errors.STALE_CONTROLLER_EPOCH
    assert resp.partition_errors == ()
    assert T0 in rm.replicas


def test_stop_replicas_stale_broker_epoch(rm):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0)), BROKER_EPOCH)
    resp = rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0), broker_epoch=1), BROKER_EPOCH)
    assert resp.error_code == Errors.STALE_BROKER_EPOCH
    assert T0 in rm.replicas


def test_local_replica_role():
    r = LeaderAndIsrState(leader=3, leader_epoch=0, isr=(3,), replicas=(3, 4), zk_version=0)
    assert role(r, 3) == "Leader"
    assert role(r, 4) == "Follower"


def test_replicas_get_logs_that_stop_replica_keeps_or_deletes(rm, tmp_path):
    rm.become_leader_or_follower(lai(ps(T0, leader=1, leader_epoch=0), ps(T1, leader=2, leader_epoch=0)),
                                 BROKER_EPOCH)
    assert not (tmp_path / "t-0").exists() and not (tmp_path / "t-1").exists()  # made at their first records
    assert rm.partition(T0).is_leader and not rm.partition(T1).is_leader
    for tp in (T0, T1):
        rm.partition(tp).log.append_as_leader(batch(1), 0)
    assert (tmp_path / "t-0").is_dir() and (tmp_path / "t-1").is_dir()
    rm.stop_replicas(stop(StopReplicaPartition(topic="t", partition=0, delete_partition=True),
                          StopReplicaPartition(topic="t", partition=1)), BROKER_EPOCH)
    assert not (tmp_path / "t-0").exists()  # deleted with the topic
    assert (tmp_path / "t-1").is_dir()  # only stopped: the log stays for when the replica returns
