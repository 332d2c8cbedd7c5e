"""ControllerBrokerRequestBatch and partition_state on a hand-built ControllerContext (no Ray runtime)."""
from __future__ import annotations

import pytest

from actors.controller.context import ControllerContext, LeaderAndIsr, LeaderIsrAndControllerEpoch
from actors.controller.request_batch import (
    EPOCH_DURING_DELETE,
    ControllerBrokerRequestBatch,
    InOrder,
    partition_state,
    stop_replica_epoch,
    takeover,
)
from actors.protocol import (
    INTER_BROKER_LISTENER,
    LeaderAndIsrRequest,
    PartitionState,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from coordination.zkdata import TopicPartition
from tests.live_brokers import live_broker

CONTROLLER_ID = 2
EPOCH = 7
BROKER_EPOCHS = {1: 101, 2: 202, 3: 303}
BROKERS = {b: live_broker(b, f"host{b}", 9090 + b) for b in BROKER_EPOCHS}
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


@pytest.fixture
def ctx() -> ControllerContext:
    c = ControllerContext(epoch=EPOCH, epoch_zk_version=6)
    # added out of order on purpose: requests list brokers by id
    c.add_live_brokers({b: (BROKERS[b], BROKER_EPOCHS[b]) for b in (3, 1, 2)})
    c.all_topics = {"t"}
    c.update_partition_replicas(T0, (1, 2, 3))
    c.update_partition_replicas(T1, (2, 3, 4))  # broker 4 is dead
    c.partition_leadership[T0] = LeaderIsrAndControllerEpoch(LeaderAndIsr(1, 3, (1, 2, 3), 5), 6)
    c.partition_leadership[T1] = LeaderIsrAndControllerEpoch(LeaderAndIsr(2, 1, (2, 3), 2), 7)
    return c


def expected_t0(is_new=False) -> PartitionState:
    return PartitionState(topic="t", partition=0, controller_epoch=6, leader=1, leader_epoch=3, isr=(1, 2, 3),
                          zk_version=5, replicas=(1, 2, 3), offline_replicas=(), is_new=is_new)


def expected_t1(is_new=False) -> PartitionState:
    return PartitionState(topic="t", partition=1, controller_epoch=7, leader=2, leader_epoch=1, isr=(2, 3),
                          zk_version=2, replicas=(2, 3, 4), offline_replicas=(4,), is_new=is_new)


ALL_LIVE = [BROKERS[b].model_copy(update={"epoch": BROKER_EPOCHS[b]}) for b in (1, 2, 3)]  # with their epochs


# -- partition_state ------------------------------------------------------------------------------

def uncorrelated(request):
    """The request without its correlation id, to compare with an expected one."""
    return request.model_copy(update={"correlation_id": -1})


def test_partition_state(ctx):
    assert partition_state(ctx, T0, ctx.partition_leadership[T0]) == expected_t0()
    assert partition_state(ctx, T1, ctx.partition_leadership[T1], is_new=True) == expected_t1(is_new=True)


def test_partition_state_uses_leadership_controller_epoch_not_ctx_epoch(ctx):
    st = partition_state(ctx, T0, ctx.partition_leadership[T0])
    assert st.controller_epoch == 6 != ctx.epoch


# -- build ----------------------------------------------------------------------------------------

def test_leader_and_isr_then_update_metadata(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    assert batch.is_empty()
    batch.add_leader_and_isr([1, 2], T0)
    assert not batch.is_empty()
    out = batch.build(ctx)

    assert sorted(out) == [1, 2, 3]
    for b in (1, 2):
        assert [type(r) for r in out[b]] == [LeaderAndIsrRequest, UpdateMetadataRequest]
        lai = out[b][0]
        assert uncorrelated(lai) == LeaderAndIsrRequest(controller_id=CONTROLLER_ID, controller_epoch=EPOCH,
                                          broker_epoch=BROKER_EPOCHS[b], partition_states=[expected_t0()],
                                          live_leaders=[BROKERS[1].node(INTER_BROKER_LISTENER)])
    assert [type(r) for r in out[3]] == [UpdateMetadataRequest]
    for b in (1, 2, 3):
        umr = out[b][-1]
        assert uncorrelated(umr) == UpdateMetadataRequest(controller_id=CONTROLLER_ID, controller_epoch=EPOCH,
                                            broker_epoch=BROKER_EPOCHS[b], partition_states=[expected_t0()],
                                            live_brokers=ALL_LIVE)


def test_each_request_carries_ctx_epoch_and_own_broker_epoch(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_leader_and_isr([1, 2, 3], T0)
    batch.add_leader_and_isr([3], T1)
    out = batch.build(ctx)
    seen = 0
    for b, requests in out.items():
        for r in requests:
            assert r.controller_epoch == EPOCH
            assert r.controller_id == CONTROLLER_ID
            assert r.broker_epoch == BROKER_EPOCHS[b]
            seen += 1
    assert seen == 6


def test_dead_broker_in_target_list_gets_nothing(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_leader_and_isr([1, 4], T1)
    out = batch.build(ctx)
    assert 4 not in out
    assert sorted(out) == [1, 2, 3]
    assert list(out[1][0].partition_states) == [expected_t1()]
    assert [r.api for r in out[2]] == ["UpdateMetadata"]


def test_negative_broker_id_ignored(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_leader_and_isr([LeaderAndIsr.NO_LEADER, 2], T0)
    out = batch.build(ctx)
    assert -1 not in out
    assert [r.api for r in out[2]] == ["LeaderAndIsr", "UpdateMetadata"]
    assert [r.api for r in out[1]] == ["UpdateMetadata"]


def test_build_clears_the_batch(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_leader_and_isr([1], T0)
    first = batch.build(ctx)
    assert first
    assert batch.is_empty()
    assert batch.build(ctx) == {}
    # the partitions of the previous UpdateMetadata are gone too
    batch.add_update_metadata([2], [])
    out = batch.build(ctx)
    assert list(out) == [2]
    assert [r.api for r in out[2]] == ["UpdateMetadata"]
    assert list(out[2][0].partition_states) == []


def test_is_new_preserved_when_added_twice(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_leader_and_isr([1], T0, is_new=True)
    batch.add_leader_and_isr([1], T0, is_new=False)
    batch.add_leader_and_isr([1], T1)
    batch.add_leader_and_isr([1], T1, is_new=True)
    out = batch.build(ctx)
    states = {(s.topic, s.partition): s for s in out[1][0].partition_states}
    assert states[("t", 0)].is_new is True
    assert states[("t", 1)].is_new is True
    # UpdateMetadata never marks partitions new
    assert [s.is_new for s in out[1][1].partition_states] == [False, False]


def test_is_new_per_broker(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_leader_and_isr([1], T0, is_new=True)
    batch.add_leader_and_isr([2], T0, is_new=False)
    out = batch.build(ctx)
    assert list(out[1][0].partition_states) == [expected_t0(is_new=True)]
    assert list(out[2][0].partition_states) == [expected_t0(is_new=False)]


def test_one_leader_and_isr_per_broker_with_all_its_partitions(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_leader_and_isr([3], T0)
    batch.add_leader_and_isr([3], T1)
    out = batch.build(ctx)
    lais = [r for r in out[3] if r.api == "LeaderAndIsr"]
    assert len(lais) == 1
    assert sorted(lais[0].partition_states, key=lambda s: s.partition) == [expected_t0(), expected_t1()]
    assert lais[0].live_leaders == [BROKERS[b].node(INTER_BROKER_LISTENER) for b in (1, 2)]  # replication's
    assert [n.port for n in lais[0].live_leaders] == [10091, 10092]
    ums = [r for r in out[3] if r.api == "UpdateMetadata"]
    assert len(ums) == 1
    assert list(ums[0].partition_states) == [expected_t0(), expected_t1()]


def test_partition_without_leadership_is_left_out(ctx):
    t2 = TopicPartition("t", 2)
    ctx.update_partition_replicas(t2, (1, 2))
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_leader_and_isr([1], t2)
    batch.add_leader_and_isr([1], T0)
    out = batch.build(ctx)
    assert list(out[1][0].partition_states) == [expected_t0()]
    assert list(out[1][1].partition_states) == [expected_t0()]


def test_update_metadata_only(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_update_metadata({2, 3, 9}, [T1])
    assert not batch.is_empty()
    out = batch.build(ctx)
    assert sorted(out) == [2, 3]
    for b in (2, 3):
        assert len(out[b]) == 1
        assert uncorrelated(out[b][0]) == UpdateMetadataRequest(controller_id=CONTROLLER_ID, controller_epoch=EPOCH,
                                                  broker_epoch=BROKER_EPOCHS[b],
                                                  partition_states=[expected_t1()], live_brokers=ALL_LIVE)


def test_update_metadata_with_no_partitions_still_sent(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_update_metadata([1], [])
    out = batch.build(ctx)
    assert {b: [uncorrelated(r) for r in rs] for b, rs in out.items()} == {1: [UpdateMetadataRequest(controller_id=CONTROLLER_ID, controller_epoch=EPOCH,
                                             broker_epoch=101, partition_states=[], live_brokers=ALL_LIVE)]}


def test_a_starting_broker_is_sent_every_partition_and_the_others_only_what_changed(ctx):
    """Kafka's onBrokerStartup: UpdateMetadata with no partitions to the brokers already there, every
    partition to the new one; a LeaderAndIsr's partition goes to all. (Before, one partition set served
    every recipient, so each broker start shipped every partition's state to every broker.)"""
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_update_metadata({1, 2}, [])
    batch.add_update_metadata({3}, [T0, T1])
    batch.add_leader_and_isr([3], T1)
    out = batch.build(ctx)
    um = {b: [r for r in rs if r.api == "UpdateMetadata"] for b, rs in out.items()}
    assert all(len(rs) == 1 for rs in um.values()) and sorted(um) == [1, 2, 3]
    assert [(s.topic, s.partition) for s in um[3][0].partition_states] == [("t", 0), ("t", 1)]
    for b in (1, 2):
        assert [(s.topic, s.partition) for s in um[b][0].partition_states] == [("t", 1)]
    assert um[1][0].partition_states is um[2][0].partition_states  # one object per partition set, encoded once


def test_requests_carrying_the_same_states_share_one_rows_object_encoded_once(ctx):
    """A broker failure gives each survivor a LeaderAndIsr and an UpdateMetadata of the same states: one
    object serves all four, so Ray pickles it once. A new partition's state (is_new) or a topic being
    deleted makes a different set, which is not shared."""
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    for tp in (T1, T0):  # added out of order: every request lists partitions in order
        batch.add_leader_and_isr([1, 2, 3], tp)
    out = batch.build(ctx)
    carried = [r.partition_states for rs in out.values() for r in rs]
    assert len(carried) == 6 and all(states is carried[0] for states in carried)
    assert list(carried[0]) == [expected_t0(), expected_t1()]

    batch.add_leader_and_isr([1], T0, is_new=True)
    batch.add_leader_and_isr([2], T0)
    out = batch.build(ctx)
    lai = {b: out[b][0].partition_states for b in (1, 2)}
    assert list(lai[1]) == [expected_t0(is_new=True)] and list(lai[2]) == [expected_t0()]
    assert out[3][0].partition_states is lai[2]  # the UpdateMetadata: T0 as it is, not new

    ctx.topics_to_be_deleted.add("t")
    batch.add_leader_and_isr([1], T0)
    out = batch.build(ctx)
    assert list(out[1][0].partition_states) == [expected_t0()]
    assert [s.leader for s in out[1][1].partition_states] == [-2]  # LEADER_DURING_DELETE, another object


def test_build_reflects_context_at_build_time(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_leader_and_isr([1, 2, 3], T0)
    ctx.remove_live_brokers({3})
    out = batch.build(ctx)
    assert sorted(out) == [1, 2]
    assert out[1][1].live_brokers == ALL_LIVE[:2]
    assert out[1][0].partition_states[0].offline_replicas == (3,)


def test_build_does_not_mutate_context(ctx):
    import copy
    before = copy.deepcopy(ctx)
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_leader_and_isr([1, 2, 3], T0, is_new=True)
    batch.add_update_metadata([1], [T1])
    batch.build(ctx)
    assert ctx == before


def test_every_request_gets_its_own_correlation_id(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_leader_and_isr([1, 2], T0)
    batch.add_stop_replica(3, T1, delete=True, leader_epoch=stop_replica_epoch(ctx, T1))
    first = [r.correlation_id for rs in batch.build(ctx).values() for r in rs]
    batch.add_update_metadata([1, 2, 3], [T0])
    second = [r.correlation_id for rs in batch.build(ctx).values() for r in rs]
    ids = first + second
    assert len(ids) == 9 and len(set(ids)) == 9 and min(ids) >= 0


def test_numbered_batches_are_released_in_number_order_whatever_order_they_arrive_in():
    """Ray does not keep the order of calls to a RequestSender (it has two threads): an UpdateMetadata
    queued after an older one would leave the broker's cache at the older state."""
    order = InOrder()
    assert order.add(1, ["b1"]) == []  # waits for batch 0
    assert order.add(3, ["d1", "d2"]) == []
    assert order.add(0, ["a1", "a2"]) == ["a1", "a2", "b1"]
    assert order.add(2, ["c1"]) == ["c1", "d1", "d2"]
    assert order.add(4, []) == [] and order.add(5, ["f1"]) == ["f1"]


def test_a_request_sender_works_for_the_newest_controller_and_refuses_older_ones():
    """Senders outlive controllers: a newer epoch (or a newer attachment of the same controller) takes
    a sender over and its queue starts empty; batches from anyone older are refused (a zombie)."""
    assert takeover((-1, -1), (1, 0)) == "reset"  # a fresh sender's first controller
    assert takeover((1, 0), (1, 0)) == "accept"
    assert takeover((1, 0), (1, 1)) == "reset"  # the same controller re-added the broker
    assert takeover((1, 1), (1, 0)) == "refuse"  # its earlier attachment, arriving late
    assert takeover((1, 5), (2, 0)) == "reset"  # a new controller epoch
    assert takeover((2, 0), (1, 7)) == "refuse"  # the zombie of epoch 1


def stop_replica_rows(batch, ctx):
    return {(b, p.topic, p.partition): (p.delete_partition, p.leader_epoch)
            for b, rs in batch.build(ctx).items() for r in rs if isinstance(r, StopReplicaRequest) for p in r.partitions}


def test_a_stop_replica_carries_the_leader_epoch_unless_the_topic_is_being_deleted_whatever_its_delete_flag(ctx):
    """Kafka's addStopReplicaRequestForBrokers: -2 exactly when the topic is queued for deletion, so that a
    replica removed by a reassignment is fenced by its leader epoch like any other (B2)."""
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_stop_replica(1, T0, delete=True, leader_epoch=stop_replica_epoch(ctx, T0))
    batch.add_stop_replica(2, T0, delete=False, leader_epoch=stop_replica_epoch(ctx, T0))
    assert stop_replica_rows(batch, ctx) == {(1, "t", 0): (True, 3), (2, "t", 0): (False, 3)}
    ctx.topics_to_be_deleted.add("t")
    batch.add_stop_replica(2, T0, delete=False, leader_epoch=stop_replica_epoch(ctx, T0))
    assert stop_replica_rows(batch, ctx) == {(2, "t", 0): (False, EPOCH_DURING_DELETE)}
    assert stop_replica_epoch(ControllerContext(), T0) == -1  # no leadership known


def test_a_stop_replica_keeps_the_epoch_of_when_it_was_added_and_a_second_add_deletes_if_either_did(ctx):
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_stop_replica(2, T0, delete=True, leader_epoch=stop_replica_epoch(ctx, T0))
    ctx.partition_leadership[T0] = LeaderIsrAndControllerEpoch(LeaderAndIsr(1, 4, (1, 3), 6), EPOCH)
    assert stop_replica_rows(batch, ctx) == {(2, "t", 0): (True, 3)}  # not the epoch at build time
    batch.add_stop_replica(2, T0, delete=True, leader_epoch=3)
    batch.add_stop_replica(2, T0, delete=False, leader_epoch=stop_replica_epoch(ctx, T0))
    assert stop_replica_rows(batch, ctx) == {(2, "t", 0): (True, 4)}


def test_shutting_down_brokers_replicas_are_offline_in_requests(ctx):
    """Kafka's isReplicaOnline leaves shutting-down brokers out (B6): clients see them offline while they stop."""
    ctx.shutting_down_broker_ids.add(3)
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_update_metadata([1], [T0, T1])
    [um] = batch.build(ctx)[1]
    assert {s.partition: s.offline_replicas for s in um.partition_states} == {0: (3,), 1: (3, 4)}


def test_a_topic_being_deleted_goes_as_kafkas_during_delete_state(ctx):
    """LeaderAndIsr.duringDelete (B7): leader -2, leader epoch and zkVersion 0, the ISR kept."""
    ctx.topics_to_be_deleted.add("t")
    batch = ControllerBrokerRequestBatch(CONTROLLER_ID)
    batch.add_update_metadata([1], [T0])
    [um] = batch.build(ctx)[1]
    [state] = um.partition_states
    assert (state.leader, state.leader_epoch, state.zk_version, state.isr) == (-2, 0, 0, (1, 2, 3))
