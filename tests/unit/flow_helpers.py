"""What the tests of the controller's flows share (test_flows*.py): an in-memory double of the ZooKeeper
they use, and a controller's scope over it after its failover. Not a test module: pytest does not collect it.

The double serves `ControllerZk` (controller_zk.py), the narrow interface a flow reaches ZooKeeper
through, with ZooKeeper's rules where the flows depend on them: znode versions and conditional
writes, a broker's epoch (its registration's czxid), creation of existing znodes refused, writes
fenced on the controller epoch's version. Everything else is the controller's own code: the
context, the state machines, the request batch, the deletion manager. The real ZooKeeper tests
(tests/integration) run the same flows end to end.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import NamedTuple

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

import actors.controller.controller  # noqa: F401  (its import registers every event's flow, as the actor's does)
from actors.config import ControllerConfig
from actors.controller.context import ControllerContext, LeaderAndIsr
from actors.controller.events import ControllerEvent
from actors.controller.failover import on_controller_failover
from actors.controller.flow import FLOWS, FlowScope
from actors.controller.timeline import Laps
from actors.controller.zk_state_machines import partition_state_znode
from actors.protocol import ControllerResponse, PartitionError, PartitionErrors, StopReplicaRequest
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


class Liveness:
    """A failure detector's double: the brokers it knows dead, and those it was asked to watch."""

    def __init__(self, dead: set[int]):
        self.dead, self.watched = set(dead), set()

    def watch(self, broker_ids, fresh=frozenset()):
        self.watched = set(broker_ids)

    def dead_now(self, broker_ids):
        return self.dead & set(broker_ids)


class Cluster:
    """A ZooKeeper double holding brokers, topics and partition states, and an active controller's
    scope over it, after its failover (failover.py)."""

    def __init__(self, brokers: list[int], topics: dict[str, dict[int, list[int]]],
                 leaders: dict[TopicPartition, tuple[int, list[int]]] | None = None,
                 dead: set[int] | None = None, **config):
        """`dead`: registered brokers a failure detector (Ray) knows dead at the failover."""
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
        if dead is not None:
            self.scope.detector = Liveness(dead)
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

def apis(requests: dict[int, list]) -> dict[int, list[str]]:
    return {b: [r.api for r in rs] for b, rs in requests.items()}


def stop_replica_answers(c: Cluster, sent: dict, errors: dict[int, Errors] = {}) -> None:
    """Each broker answers its StopReplica: NONE per partition, or the error given for that broker."""
    for b, request in of(sent, StopReplicaRequest).items():
        code = errors.get(b, Errors.NONE)
        c.scope.deletion.on_stop_replica_response(ControllerResponse(
            api="StopReplica", broker_id=b, correlation_id=request.correlation_id,
            partition_errors=PartitionErrors(PartitionError(p.topic, p.partition, int(code))
                                             for p in request.partitions)), request)
