"""The controller's broker flows (brokers.py): brokers dying, bouncing and coming back, Ray's report
of a broker actor's death, and controlled shutdown."""
from __future__ import annotations

from concurrent.futures import Future

from actors.controller.events import BrokerActorDied, BrokerChange, ControlledShutdown
from actors.controller.state_machines import PartitionStateName as P, ReplicaStateName as R
from actors.protocol import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest
from coordination import zkdata
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from tests.unit.flow_helpers import T0, T1, Cluster, apis, of, partitions


# -- brokers ----------------------------------------------------------------------------------------

def test_a_dead_leader_is_replaced_and_leaves_the_isrs_it_was_in():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [2, 1, 3]}})
    c.zk.remove(zkdata.broker_path(1))
    sent = c.run(BrokerChange())
    assert c.links.removed == [1] and 1 not in c.ctx.live_brokers
    assert (c.state(T0).leader, c.state(T0).isr, c.state(T0).leader_epoch) == (2, [2, 3], 1)
    assert (c.state(T1).leader, c.state(T1).isr) == (2, [2, 3])
    assert set(of(sent, LeaderAndIsrRequest)) == {2, 3} and 1 not in sent
    assert c.ctx.replica_states[(T0, 1)] is R.OfflineReplica
    # the brokers heard who is alive before the elections (the early UpdateMetadata)
    assert [set(r) for r in c.links.sent] == [{2, 3}]


def test_a_bounced_broker_is_failed_then_started_its_leaderships_moved_and_it_is_sent_everything():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [2, 3, 1]}})
    old_epoch = c.ctx.live_broker_epochs[1]
    c.zk.remove(zkdata.broker_path(1))
    c.register(1)  # the same id, a newer session: a newer czxid
    sent = c.run(BrokerChange())
    assert c.links.removed == [1] and c.links.added == [1]
    assert c.ctx.live_broker_epochs[1] > old_epoch
    assert c.state(T0).leader == 2 and 1 not in c.state(T0).isr  # moved away, out of the ISR
    assert c.ctx.replica_states[(T0, 1)] is R.OnlineReplica  # started again: Online, to be caught up
    [*_, startup] = c.links.sent  # the started broker hears of every partition before any LeaderAndIsr
    assert apis(startup)[1][0] == "UpdateMetadata" and "LeaderAndIsr" not in apis(startup)[1]
    assert set(partitions(startup[1][0])) == {T0, T1}
    assert T0 in partitions(of(sent, LeaderAndIsrRequest)[1])


def test_a_bounced_broker_leaves_the_isr_however_many_times_a_leader_moves_the_state_first():
    """Kafka's removeReplicasFromIsr retries a version conflict until done: a restarted broker (which may
    have lost its unflushed log) left in an ISR could be elected before it fetched. A leader writing
    the state before each of the controller's writes, more rounds than the controller's bound on rounds
    without progress, does not keep it in."""
    from actors.controller.zk_state_machines import MAX_ZK_RETRIES

    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    writes = c.zk.begin_update_partition_states
    races = iter(range(MAX_ZK_RETRIES + 3))

    def leader_first(updates, one_per_multi=False):
        if T0 in updates and next(races, None) is not None:
            c.leader_changes_isr(T0, c.state(T0).isr)  # e.g. the leader's own shrink or expansion of another
        return writes(updates, one_per_multi)
    c.zk.begin_update_partition_states = leader_first
    c.zk.remove(zkdata.broker_path(3))
    c.register(3)
    c.run(BrokerChange())
    assert c.state(T0).isr == [1, 2] and next(races, None) is None


def test_a_broker_that_comes_back_elects_the_partitions_it_alone_could_lead():
    c = Cluster([2, 3], {"t": {0: [1]}}, leaders={T0: (1, [1])})
    assert c.ctx.partition_states[T0] is P.OfflinePartition and c.state(T0).leader == -1
    c.register(1)
    sent = c.run(BrokerChange())
    assert (c.state(T0).leader, c.ctx.partition_states[T0]) == (1, P.OnlinePartition)
    assert partitions(of(sent, LeaderAndIsrRequest)[1])[T0].leader == 1


def test_ray_reporting_a_death_removes_only_the_incarnation_the_controller_knows():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    known = c.ctx.live_broker_epochs[1]
    c.zk.remove(zkdata.broker_path(1))
    c.register(1)  # a newer incarnation registered before Ray's report came
    c.run(BrokerActorDied(broker_id=1, state="DEAD"))
    assert zkdata.broker_path(1) in c.zk.nodes  # the new one stays
    assert c.ctx.live_broker_epochs[1] > known  # handled as a bounce
    c2 = Cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    c2.run(BrokerActorDied(broker_id=1, state="DEAD"))
    assert zkdata.broker_path(1) not in c2.zk.nodes and c2.state(T0).leader == 2


def test_controlled_shutdown_moves_leaderships_away_and_stops_what_it_follows():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [2, 1, 3]}, "single": {0: [1]}})
    reply = Future()
    sent = c.run(ControlledShutdown(broker_id=1, broker_epoch=c.ctx.live_broker_epochs[1], reply=reply))
    assert reply.result() == []  # nothing replicated left to lead: it may stop
    assert (c.state(T0).leader, c.state(T0).isr) == (2, [2, 3])  # the next ISR member not shutting down
    assert c.state(T1).leader == 2 and c.state(T1).isr == [2, 3]
    assert c.state(TopicPartition("single", 0)).leader == 1  # one replica: nothing to move it to
    stop = of(sent, StopReplicaRequest)[1]
    assert set(partitions(stop)) == {T1} and not partitions(stop)[T1].delete_partition
    # at the epoch broker 1 already has (before its removal from the ISR): a broker ignores it, as
    # Kafka's does, and follows until it stops
    assert partitions(stop)[T1].leader_epoch == 0 and c.state(T1).leader_epoch == 1
    assert 1 in c.ctx.shutting_down_broker_ids


def test_controlled_shutdown_answers_stale_and_unknown_brokers_and_changes_nothing():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    stale, unknown = Future(), Future()
    c.run(ControlledShutdown(broker_id=1, broker_epoch=c.ctx.live_broker_epochs[1] - 1, reply=stale))
    c.run(ControlledShutdown(broker_id=9, broker_epoch=0, reply=unknown))
    assert stale.result() is Errors.STALE_BROKER_EPOCH and unknown.result() is Errors.BROKER_NOT_AVAILABLE
    assert c.state(T0).leader == 1 and not c.ctx.shutting_down_broker_ids


def test_controlled_shutdown_of_a_broker_that_does_not_know_its_epoch_is_not_refused():
    """-1 is KIP-380's unknown broker epoch: Kafka does not check it (B11)."""
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    reply = Future()
    c.run(ControlledShutdown(broker_id=1, broker_epoch=-1, reply=reply))
    assert reply.result() == [] and c.state(T0).leader == 2


def test_a_starting_broker_is_not_sent_the_topics_being_deleted():
    """Kafka's partitionsWithLeaders (B7): the new broker's full UpdateMetadata leaves them out."""
    c = Cluster([1, 2], {"t": {0: [1, 2]}, "d": {0: [1, 2]}})
    c.ctx.topics_to_be_deleted.add("d")
    c.register(3)
    c.run(BrokerChange())
    assert set(partitions(of(c.links.sent[-1], UpdateMetadataRequest)[3])) == {T0}
