"""The controller's flows, one at a time, against an in-memory double of the ZooKeeper they use.

The double serves `ControllerZk` (controller_zk.py), the narrow interface a flow reaches ZooKeeper
through, with ZooKeeper's rules where the flows depend on them: znode versions and conditional
writes, a broker's epoch (its registration's czxid), creation of existing znodes refused, writes
fenced on the controller epoch's version. Everything else is the controller's own code: the
context, the state machines, the request batch, the deletion manager. The real ZooKeeper tests
(tests/integration) run the same flows end to end.
"""
from __future__ import annotations

import itertools
from concurrent.futures import Future
from dataclasses import dataclass
from typing import NamedTuple

import pytest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from actors.config import ControllerConfig
from actors.controller.controller import FLOW_MODULES
from actors.controller.context import ControllerContext, LeaderAndIsr, ReplicaAssignment
from actors.controller.events import (
    ELECTION_EVENTS,
    ApiPartitionReassignment,
    BrokerActorDied,
    BrokerChange,
    ControlledShutdown,
    ControllerEvent,
    IsrChangeNotification,
    ListPartitionReassignments,
    LogDirEventNotification,
    PartitionModifications,
    PartitionReassignment,
    PartitionReassignmentIsrChange,
    ResponseReceived,
    TopicChange,
    TopicDeletion,
)
from actors.controller.failover import on_controller_failover
from actors.controller.log_dirs import on_leader_and_isr_response
from actors.controller.flow import FLOWS, FlowScope
from actors.controller.state_machines import PartitionStateName as P, ReplicaStateName as R
from actors.controller.timeline import Laps
from actors.controller.zk_state_machines import partition_state_znode
from actors.protocol import (
    ControllerResponse,
    LeaderAndIsrRequest,
    PartitionError,
    PartitionErrors,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from coordination import zkdata
from coordination.errors import ControllerMovedException, Errors
from coordination.zkclient import PartitionStateRecord
from coordination.zkdata import TopicPartition

EPOCH, EPOCH_ZK_VERSION = 3, 7


# -- the double -------------------------------------------------------------------------------------

class Stat(NamedTuple):
    version: int
    czxid: int


@dataclass
class Node:
    data: bytes
    version: int
    czxid: int


class InMemoryControllerZk:
    """ControllerZk in a dict. `fence` is the writer's controller epoch zkVersion; a write on another
    than `epoch_zk_version` (ZooKeeper's) fails whole with ControllerMovedException, as a fenced multi does."""

    def __init__(self, ctx: ControllerContext):
        self.nodes: dict[str, Node] = {}
        self.epoch_zk_version = EPOCH_ZK_VERSION
        self._ctx = ctx
        self._zxid = itertools.count(100)

    # test set-up and inspection (what brokers, admins and leaders write)
    def create(self, path: str, data: bytes = b"") -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            self.nodes.setdefault("/" + "/".join(parts[:i]), Node(b"", 0, next(self._zxid)))
        if path in self.nodes:
            raise NodeExistsError(path)
        self.nodes[path] = Node(data, 0, next(self._zxid))

    def set(self, path: str, data: bytes) -> None:
        node = self.nodes[path]
        node.data, node.version = data, node.version + 1

    def remove(self, path: str) -> None:
        for p in [p for p in self.nodes if p == path or p.startswith(path + "/")]:
            del self.nodes[p]

    def model(self, model, path):
        node = self.nodes.get(path)
        return None if node is None else zkdata.decode(model, path, node.data)

    def _fenced(self) -> None:
        if self._ctx.epoch_zk_version != self.epoch_zk_version:
            raise ControllerMovedException(f"controller epoch zkVersion {self._ctx.epoch_zk_version} is stale")

    # ControllerZk: reads
    def get_many(self, paths):
        return {p: (self.nodes[p].data, Stat(self.nodes[p].version, self.nodes[p].czxid)) if p in self.nodes
                else None for p in paths}

    def get_znode(self, model, path):
        return self.model(model, path)

    def children(self, path):
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)})

    def get_all_broker_ids(self):
        return sorted(int(c) for c in self.children(zkdata.BROKER_IDS))

    def get_brokers(self, broker_ids):
        return {b: (self.model(zkdata.BrokerIdZNode, zkdata.broker_path(b)),
                    self.nodes[zkdata.broker_path(b)].czxid)
                for b in broker_ids if zkdata.broker_path(b) in self.nodes}

    def get_all_topics(self):
        return set(self.children(zkdata.TOPICS))

    def get_topic_znodes(self, topics):
        return {t: self.model(zkdata.TopicZNode, zkdata.topic_path(t)) for t in topics
                if zkdata.topic_path(t) in self.nodes}

    def get_partition_states(self, partitions):
        out = {}
        for tp in partitions:
            node = self.nodes.get(zkdata.partition_state_path(tp))
            if node is not None:
                out[tp] = PartitionStateRecord(
                    zkdata.decode(zkdata.PartitionStateZNode, "", node.data), node.version)
        return out

    # ControllerZk: fenced writes
    def create_partition_states(self, states):
        self._fenced()
        out = {}
        for tp, data in states.items():
            try:
                self.create(zkdata.partition_state_path(tp), data if isinstance(data, bytes) else data.encode())
                out[tp] = None
            except NodeExistsError as e:
                out[tp] = e
        return out

    def begin_update_partition_states(self, updates, one_per_multi=False):
        self._fenced()
        out = {}
        for tp, (data, version) in updates.items():
            node = self.nodes.get(zkdata.partition_state_path(tp))
            if node is None:
                out[tp] = NoNodeError()
            elif node.version != version:
                out[tp] = BadVersionError()
            else:
                self.set(zkdata.partition_state_path(tp), data if isinstance(data, bytes) else data.encode())
                out[tp] = node.version
        return lambda: out

    def delete_paths(self, paths):
        self._fenced()
        for p in paths:
            self.nodes.pop(p, None)

    def delete_broker_registration(self, broker_id, broker_epoch):
        self._fenced()
        node = self.nodes.get(zkdata.broker_path(broker_id))
        if node is None or node.czxid != broker_epoch:
            return False
        del self.nodes[zkdata.broker_path(broker_id)]
        return True

    def set_topic_znode(self, topic, znode):
        self._fenced()
        self.set(zkdata.topic_path(topic), znode.encode())

    def set_partition_reassignment(self, znode):
        self._fenced()
        self.set(zkdata.REASSIGN_PARTITIONS, znode.encode())

    def delete_topic(self, topic):
        self._fenced()
        self.remove(zkdata.topic_path(topic))
        self.remove(zkdata.topic_config_path(topic))
        self.remove(zkdata.delete_topic_path(topic))


# -- the rest of a term: links to brokers, watches --------------------------------------------------

class Links:
    def __init__(self):
        self.added, self.removed, self.sent = [], [], []

    def add_broker(self, b):
        self.added.append(b)

    def remove_broker(self, b):
        self.removed.append(b)

    def send(self, requests):
        self.sent.append(requests)

    def restart_sender(self, b, sender):
        return None


class Watches:
    def __init__(self):
        self.paths: set[str] = set()

    def watch_data(self, path, event, creation_only=False):
        self.paths.add(path)

    def unwatch(self, path):
        self.paths.discard(path)


class Cluster:
    """A ZooKeeper double holding brokers, topics and partition states, and an active controller's
    scope over it, after its failover (failover.py)."""

    def __init__(self, brokers: list[int], topics: dict[str, dict[int, list[int]]],
                 leaders: dict[TopicPartition, tuple[int, list[int]]] | None = None, **config):
        ctx = ControllerContext(epoch=EPOCH, epoch_zk_version=EPOCH_ZK_VERSION)
        self.zk = InMemoryControllerZk(ctx)
        for b in brokers:
            self.register(b)
        for topic, assignment in topics.items():
            self.zk.create(zkdata.topic_path(topic), zkdata.TopicZNode.from_assignment(assignment, None).encode())
            for p, replicas in assignment.items():
                tp = TopicPartition(topic, p)
                leader, isr = (leaders or {}).get(tp, (replicas[0], replicas))
                self.zk.create(zkdata.partition_state_path(tp), partition_state_znode(
                    LeaderAndIsr(leader, 0, tuple(isr), 0), EPOCH - 1))
        self.watches = Watches()
        self.scope = FlowScope(1, ctx, self.zk, ControllerConfig(**config), self.watches)
        self.scope.links = self.links = Links()
        on_controller_failover(self.scope, Laps())
        self.failover_requests = [*self.links.sent, self.scope.batch.build(ctx)]
        self.links.added.clear()
        self.links.sent.clear()

    @property
    def ctx(self) -> ControllerContext:
        return self.scope.ctx

    def register(self, b: int) -> None:
        self.zk.create(zkdata.broker_path(b), zkdata.BrokerIdZNode.plaintext("localhost", 9000 + b).encode())

    def run(self, event: ControllerEvent) -> dict[int, list]:
        """Process one event as the controller would; the requests it sends, by broker."""
        FLOWS[type(event)](self.scope, event)
        return self.scope.batch.build(self.ctx)

    def state(self, tp: TopicPartition) -> zkdata.PartitionStateZNode:
        return self.zk.model(zkdata.PartitionStateZNode, zkdata.partition_state_path(tp))

    def leader_changes_isr(self, tp: TopicPartition, isr: list[int]) -> None:
        """What a partition leader does: write a new ISR at the same leader epoch."""
        s = self.state(tp)
        self.zk.set(zkdata.partition_state_path(tp), zkdata.PartitionStateZNode(
            leader=s.leader, leader_epoch=s.leader_epoch, controller_epoch=s.controller_epoch, isr=isr).encode())


def of(requests: dict[int, list], api: type) -> dict[int, object]:
    return {b: r for b, rs in requests.items() for r in rs if isinstance(r, api)}


def partitions(request) -> dict[TopicPartition, object]:
    rows = request.partitions if isinstance(request, StopReplicaRequest) else request.partition_states
    return {TopicPartition(p.topic, p.partition): p for p in rows}


T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


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

def apis(requests: dict[int, list]) -> dict[int, list[str]]:
    return {b: [r.api for r in rs] for b, rs in requests.items()}


def test_a_failover_tells_every_broker_who_is_alive_before_any_leader_and_isr():
    """Kafka's onControllerFailover sends UpdateMetadata in a request of its own first (B8)."""
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3]}}, leaders={T0: (4, [4, 1])})
    first, last = c.failover_requests
    assert apis(first) == {1: ["UpdateMetadata"], 2: ["UpdateMetadata"], 3: ["UpdateMetadata"]}
    assert "LeaderAndIsr" in apis(last)[1]
    assert (c.state(T0).leader, c.state(T0).isr) == (1, [1])  # the dead leader's partition elected


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


# -- topics -----------------------------------------------------------------------------------------

def test_a_new_topic_gets_state_znodes_and_its_replicas_are_told():
    c = Cluster([1, 2, 3], {})
    c.zk.create(zkdata.topic_path("n"), zkdata.TopicZNode.from_assignment({0: [3, 1], 1: [1, 2]}, None).encode())
    sent = c.run(TopicChange())
    assert (c.state(TopicPartition("n", 0)).leader, c.state(TopicPartition("n", 0)).isr) == (3, [3, 1])
    assert partitions(of(sent, LeaderAndIsrRequest)[3])[TopicPartition("n", 0)].is_new
    assert zkdata.topic_path("n") in c.watches.paths


def test_new_partitions_are_added_and_a_changed_assignment_is_put_back():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2]}})
    c.zk.set(zkdata.topic_path("t"), zkdata.TopicZNode.from_assignment({0: [3, 2], 1: [2, 3]}, None).encode())
    c.run(PartitionModifications(topic="t"))
    assert c.state(T1).leader == 2  # partition 1 created
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).assignment() == {0: [1, 2], 1: [2, 3]}


def test_partitions_added_to_a_topic_being_deleted_are_refused():
    c = Cluster([1, 2], {"t": {0: [1, 2]}})
    c.ctx.topics_to_be_deleted.add("t")
    c.zk.set(zkdata.topic_path("t"), zkdata.TopicZNode.from_assignment({0: [1, 2], 1: [2, 1]}, None).encode())
    c.run(PartitionModifications(topic="t"))
    assert T1 not in c.ctx.partition_leadership and zkdata.partition_state_path(T1) not in c.zk.nodes
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).assignment() == {0: [1, 2]}


# -- deletion ---------------------------------------------------------------------------------------

def stop_replica_answers(c: Cluster, sent: dict, errors: dict[int, Errors] = {}) -> None:
    """Each broker answers its StopReplica: NONE per partition, or the error given for that broker."""
    for b, request in of(sent, StopReplicaRequest).items():
        code = errors.get(b, Errors.NONE)
        c.scope.deletion.on_stop_replica_response(ControllerResponse(
            api="StopReplica", broker_id=b, correlation_id=request.correlation_id,
            partition_errors=PartitionErrors(PartitionError(p.topic, p.partition, int(code))
                                             for p in request.partitions)), request)


def test_a_failed_replica_deletion_halts_the_topic_until_that_broker_starts_again_then_it_is_retried():
    """Kafka's failReplicaDeletion: the replica goes Ineligible then back to Offline, the topic is
    ineligible, and no StopReplica deletes it until the deletion is resumed for it (its broker starts)."""
    c = Cluster([1, 2], {"t": {0: [1, 2]}, "kept": {0: [1, 2]}})
    c.zk.create(zkdata.delete_topic_path("t"))
    sent = c.run(TopicDeletion())
    assert all(partitions(r)[T0].delete_partition for r in of(sent, StopReplicaRequest).values())
    assert partitions(of(sent, UpdateMetadataRequest)[1])[T0].leader == -2  # brokers drop it from their caches
    stop_replica_answers(c, sent, errors={2: Errors.KAFKA_STORAGE_ERROR})
    assert c.ctx.replica_states[(T0, 1)] is R.ReplicaDeletionSuccessful
    assert c.ctx.replica_states[(T0, 2)] is R.OfflineReplica and "t" in c.ctx.topics_ineligible_for_deletion
    offline = of(c.scope.batch.build(c.ctx), StopReplicaRequest)  # OfflineReplica's StopReplica, no deletion
    assert [(p.delete_partition, p.leader_epoch) for p in partitions(offline[2]).values()] == [(False, -2)]
    c.zk.remove(zkdata.broker_path(2))
    c.register(2)  # broker 2 restarts
    again = c.run(BrokerChange())
    assert set(of(again, StopReplicaRequest)) == {2}
    stop_replica_answers(c, again)
    assert "t" not in c.ctx.all_topics and zkdata.topic_path("t") not in c.zk.nodes
    assert zkdata.delete_topic_path("t") not in c.zk.nodes
    assert zkdata.topic_path("kept") in c.zk.nodes and "kept" in c.ctx.all_topics


def test_deletion_waits_for_a_dead_broker_and_resumes_when_it_returns():
    c = Cluster([1, 2], {"t": {0: [1, 2]}})
    c.zk.remove(zkdata.broker_path(2))
    c.run(BrokerChange())
    c.zk.create(zkdata.delete_topic_path("t"))
    sent = c.run(TopicDeletion())
    assert "t" in c.ctx.topics_ineligible_for_deletion
    assert c.ctx.replica_states[(T0, 2)] is R.ReplicaDeletionIneligible
    stop_replica_answers(c, sent)
    assert "t" in c.ctx.all_topics  # broker 2's replica is not deleted yet
    c.register(2)
    sent = c.run(BrokerChange())
    assert set(of(sent, StopReplicaRequest)) == {2} and "t" not in c.ctx.topics_ineligible_for_deletion
    stop_replica_answers(c, sent)
    assert "t" not in c.ctx.all_topics and zkdata.topic_path("t") not in c.zk.nodes


def test_deleting_an_unknown_topic_or_with_deletion_disabled_removes_the_request_and_changes_nothing():
    c = Cluster([1, 2], {"t": {0: [1, 2]}}, delete_topic_enable=False)
    c.zk.create(zkdata.delete_topic_path("t"))
    c.zk.create(zkdata.delete_topic_path("nope"))
    c.run(TopicDeletion())
    assert c.zk.children(zkdata.DELETE_TOPICS) == [] and zkdata.topic_path("t") in c.zk.nodes
    assert not c.ctx.topics_to_be_deleted


# -- reassignment (KIP-455's phases) ------------------------------------------------------------------

def reassign(c: Cluster, tp: TopicPartition, replicas: list[int]) -> dict:
    c.zk.create(zkdata.REASSIGN_PARTITIONS, zkdata.ReassignPartitionsZNode(partitions=[
        zkdata.PartitionReplicas(topic=tp.topic, partition=tp.partition, replicas=replicas)]).encode())
    return c.run(PartitionReassignment())


def test_reassignment_phase_a_then_b_when_the_new_replica_joins_the_isr():
    c = Cluster([1, 2, 3, 4], {"t": {0: [1, 2, 3]}})
    sent = reassign(c, T0, [2, 3, 4])
    # phase A: RS = TRS + the rest of ORS, AR and RR persisted; leader epoch + 1 to all of them; AR New
    znode = c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t"))
    assert (znode.partitions["0"], znode.adding_replicas, znode.removing_replicas) == (
        [2, 3, 4, 1], {"0": [4]}, {"0": [1]})
    assert (c.state(T0).leader, c.state(T0).leader_epoch) == (1, 1)
    assert set(of(sent, LeaderAndIsrRequest)) == {1, 2, 3, 4}
    assert partitions(of(sent, LeaderAndIsrRequest)[4])[T0].adding_replicas == (4,)
    assert c.ctx.replica_states[(T0, 4)] is R.NewReplica
    assert zkdata.partition_state_path(T0) in c.watches.paths
    assert c.run(PartitionReassignmentIsrChange(topic_partition=T0)) == {}  # 4 not in the ISR yet: nothing
    # phase B: the leader took 4 into the ISR
    c.leader_changes_isr(T0, [1, 2, 3, 4])
    sent = c.run(PartitionReassignmentIsrChange(topic_partition=T0))
    znode = c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t"))
    assert (znode.partitions["0"], znode.adding_replicas, znode.removing_replicas) == ([2, 3, 4], {}, {})
    assert c.state(T0).leader == 2 and c.state(T0).isr == [2, 3, 4]  # the leader was a removed replica
    removed = partitions(of(sent, StopReplicaRequest)[1])[T0]
    # at the partition's epoch, newer than phase A's that broker 1 has, so its broker deletes it (not -2:
    # the topic is not being deleted)
    assert removed.delete_partition and removed.leader_epoch == c.state(T0).leader_epoch > 1
    assert (T0, 1) not in c.ctx.replica_states and c.ctx.replica_states[(T0, 4)] is R.OnlineReplica
    assert zkdata.REASSIGN_PARTITIONS not in c.zk.nodes
    assert zkdata.partition_state_path(T0) not in c.watches.paths


def test_a_reassignment_already_in_the_isr_completes_in_one_event_keeping_a_leader_in_the_target():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    sent = reassign(c, T0, [1, 2])
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).partitions["0"] == [1, 2]
    assert (c.state(T0).leader, c.state(T0).isr) == (1, [1, 2])
    assert c.state(T0).leader_epoch == 2  # phase A's bump (U3 takes 3 out of the ISR) then B3's
    assert set(of(sent, StopReplicaRequest)) == {3}
    assert zkdata.REASSIGN_PARTITIONS not in c.zk.nodes


def test_the_epoch_bump_of_a_reassignment_reads_again_a_state_a_leader_changed():
    c = Cluster([1, 2, 3, 4], {"t": {0: [1, 2, 3]}})
    c.leader_changes_isr(T0, [1, 2])  # the context still has [1, 2, 3] at zkVersion 0
    reassign(c, T0, [1, 2, 4])
    assert (c.state(T0).leader_epoch, c.state(T0).isr) == (1, [1, 2])


def test_a_cancelled_reassignment_goes_back_to_the_original_replicas_and_leaves_the_znode():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2]}})
    reassign(c, T0, [3, 2])
    phase_a_epoch = c.state(T0).leader_epoch
    reply = Future()
    sent = c.run(ApiPartitionReassignment(reassignments=((("t", 0), None),), reply=reply))
    assert reply.result() == {T0: None}
    # Kafka's originReplicas: RS without AR, in RS's order (TRS first), so the preferred replica may
    # change; the leader stays
    znode = c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t"))
    assert (znode.partitions["0"], znode.adding_replicas, znode.removing_replicas) == ([2, 1], {}, {})
    assert c.state(T0).leader == 1
    assert zkdata.REASSIGN_PARTITIONS not in c.zk.nodes and (T0, 3) not in c.ctx.replica_states
    # the adding replica's StopReplica carries the epoch it was given in phase A: Kafka 2.8's broker
    # ignores it (FENCED_LEADER_EPOCH) and keeps the replica, as kray's does (docs/KAFKA_DIFFERENCES.md, B2)
    stop = partitions(of(sent, StopReplicaRequest)[3])[T0]
    assert stop.delete_partition and stop.leader_epoch == phase_a_epoch
    again = Future()
    c.run(ApiPartitionReassignment(reassignments=((("t", 0), None), (("t", 7), None)), reply=again))
    assert {tp: e.error for tp, e in again.result().items()} == {
        T0: Errors.NO_REASSIGNMENT_IN_PROGRESS, TopicPartition("t", 7): Errors.UNKNOWN_TOPIC_OR_PARTITION}


def test_a_reassignment_through_the_api_is_validated_as_kafkas_then_moves_as_one_through_zookeeper():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2], 1: [2, 3]}})  # broker 4 is not alive
    reply = Future()
    c.run(ApiPartitionReassignment(reassignments=(
        (("t", 0), (3, 2)), (("t", 1), ()), (("t", 1), (3, 3)), (("t", 1), (-1, 2)), (("t", 1), (4, 2)),
        (("u", 0), (1, 2))), reply=reply))
    errors = {tp: e.error if e else None for tp, e in reply.result().items()}
    # one answer per partition: the last request for t-1 (a dead broker added) is the one answered
    assert errors == {T0: None, TopicPartition("t", 1): Errors.INVALID_REPLICA_ASSIGNMENT,
                      TopicPartition("u", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    znode = c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t"))
    assert (znode.partitions["0"], znode.adding_replicas, znode.removing_replicas) == ([3, 2, 1], {"0": [3]},
                                                                                       {"0": [1]})
    assert zkdata.REASSIGN_PARTITIONS not in c.zk.nodes  # nothing written there: the API's moves live in the context
    listed = Future()
    c.run(ListPartitionReassignments(reply=listed))
    assert {tp: (a.replicas, a.adding, a.removing) for tp, a in listed.result().items()} == {T0: ((3, 2, 1), (3,), (1,))}
    c.leader_changes_isr(T0, [1, 2, 3])
    c.run(PartitionReassignmentIsrChange(topic_partition=T0))
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).partitions["0"] == [3, 2]
    none = Future()
    c.run(ListPartitionReassignments(partitions=(("t", 0), ("t", 1)), reply=none))
    assert none.result() == {}


def test_an_api_reassignment_replaces_a_move_written_to_zookeeper_for_its_partition():
    c = Cluster([1, 2, 3, 4], {"t": {0: [1, 2], 1: [2, 3]}})
    c.zk.create(zkdata.REASSIGN_PARTITIONS, zkdata.ReassignPartitionsZNode(partitions=[
        zkdata.PartitionReplicas(topic="t", partition=0, replicas=[3, 4]),
        zkdata.PartitionReplicas(topic="t", partition=1, replicas=[1, 4])]).encode())
    c.run(PartitionReassignment())
    reply = Future()
    c.run(ApiPartitionReassignment(reassignments=((("t", 0), (4, 2)),), reply=reply))
    assert reply.result() == {T0: None}
    # the API's target starts from the original replicas; t-1's move through ZooKeeper goes on
    assert c.ctx.partition_full_assignment(T0) == ReplicaAssignment((4, 2, 1), (4,), (1,))
    remaining = c.zk.model(zkdata.ReassignPartitionsZNode, zkdata.REASSIGN_PARTITIONS)
    assert remaining.topic_partitions() == [TopicPartition("t", 1)]


def test_a_topic_deleted_during_its_reassignment_waits_for_the_reassignment_then_is_deleted():
    """kray, not Kafka (B3): Kafka 2.8 starts deleting at once."""
    c = Cluster([1, 2, 3], {"t": {0: [1, 2]}})
    reassign(c, T0, [1, 3])
    c.zk.create(zkdata.delete_topic_path("t"))
    sent = c.run(TopicDeletion())
    assert "t" in c.ctx.topics_ineligible_for_deletion
    assert not [p for r in of(sent, StopReplicaRequest).values() for p in r.partitions if p.delete_partition]
    c.leader_changes_isr(T0, [1, 2, 3])
    sent = c.run(PartitionReassignmentIsrChange(topic_partition=T0))
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).partitions["0"] == [1, 3]
    assert {b for b, r in of(sent, StopReplicaRequest).items() for p in r.partitions if p.delete_partition} == {1, 2, 3}
    stop_replica_answers(c, sent)
    assert zkdata.topic_path("t") not in c.zk.nodes


def test_an_invalid_reassignment_is_removed_from_the_znode_and_changes_nothing():
    c = Cluster([1, 2, 3], {"t": {0: [1, 2]}})
    c.zk.create(zkdata.REASSIGN_PARTITIONS, zkdata.ReassignPartitionsZNode(partitions=[
        zkdata.PartitionReplicas(topic="t", partition=0, replicas=[2, 2]),
        zkdata.PartitionReplicas(topic="t", partition=5, replicas=[1])]).encode())
    assert c.run(PartitionReassignment()) == {}
    assert zkdata.REASSIGN_PARTITIONS not in c.zk.nodes
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).assignment() == {0: [1, 2]}


def test_an_isr_change_notification_refreshes_the_partitions_and_completes_a_waiting_reassignment():
    c = Cluster([1, 2, 3, 4], {"t": {0: [1, 2, 3], 1: [1, 2]}})
    reassign(c, T0, [2, 3, 4])
    c.leader_changes_isr(T0, [1, 2, 3, 4])
    c.leader_changes_isr(T1, [1])
    c.zk.create(f"{zkdata.ISR_CHANGE_NOTIFICATION}/{zkdata.ISR_CHANGE_PREFIX}0000000001",
                zkdata.IsrChangeNotificationZNode(partitions=[
                    zkdata.PartitionRef(topic="t", partition=0), zkdata.PartitionRef(topic="t", partition=1)]).encode())
    sent = c.run(IsrChangeNotification())
    assert c.ctx.partition_leadership[T1].leader_and_isr.isr == (1,)
    assert c.zk.model(zkdata.TopicZNode, zkdata.topic_path("t")).partitions["0"] == [2, 3, 4]
    assert partitions(of(sent, UpdateMetadataRequest)[2])[T1].isr == (1,)
    assert c.zk.children(zkdata.ISR_CHANGE_NOTIFICATION) == []


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
