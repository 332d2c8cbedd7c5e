"""What a controller flow gets: a FlowScope (the narrow parts of the controller it may touch), and the
registry of flows by event type.

A flow is a function `(scope, event)` registered with `@handles(EventType)`; the controller keeps
election, resignation and dispatch, and calls the flow registered for each event once it is active.
A flow reads as observe -> plan -> apply: it reads ZooKeeper (through the scope, which moves what it
reads into the context in one place), asks a pure function of `changes.py` what to do, and applies
that through the state machines and the request batch. Kafka hands its TopicDeletionManager a small
DeletionClient the same way; the scope's ZooKeeper client is fenced on the controller epoch.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Callable, Protocol, TypeVar

from actors.config import ControllerConfig
from actors.controller.context import ControllerContext, ReplicaAssignment
from actors.controller.controller_zk import ControllerZk
from actors.controller.deletion import TopicDeletionManager
from actors.controller.events import ControllerEvent, PartitionModifications, now_ms
from actors.controller.request_batch import ControllerBrokerRequestBatch
from actors.controller.state_machines import PartitionStateName as P, ReplicaStateName as R
from actors.controller.zk_state_machines import ZkPartitionStateMachine, ZkReplicaStateMachine
from actors.protocol import EndPoint, LiveBroker
from coordination import zkdata
from coordination.zkclient import PartitionStateRecord
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)


class ContextReads(Protocol):
    """Where a failover reads the assignments and states: ZooKeeper, or the warm standby's copy."""

    def get_topic_znodes(self, topics: Iterable[str]) -> dict[str, zkdata.TopicZNode]: ...

    def get_partition_states(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionStateRecord]: ...


class Watches(Protocol):
    """ZooKeeper watches that enqueue an event, for the current controller term."""

    def watch_data(self, path: str, event: Callable[[], ControllerEvent], creation_only: bool = False) -> None: ...

    def unwatch(self, path: str) -> None: ...


class BrokerLinks(Protocol):
    """The controller's channel to the brokers (ControllerChannelManager)."""

    def add_broker(self, broker_id: int) -> None: ...

    def remove_broker(self, broker_id: int) -> None: ...

    def send(self, requests: dict) -> None: ...

    def restart_sender(self, broker_id: int, sender) -> int | None: ...


class LivenessWatch(Protocol):
    """The Ray failure detector of the live brokers' actors, when it is on."""

    def watch(self, broker_ids: set[int], fresh: set[int] = frozenset()) -> None: ...

    def dead_now(self, broker_ids: set[int]) -> set[int]: ...


class FlowScope:
    """The active controller's term as the flows see it. Rebuilt at each resignation: nothing survives."""

    def __init__(self, controller_id: int, ctx: ControllerContext, zk: ControllerZk, config: ControllerConfig,
                 watches: Watches, begin_timeline: Callable[[str, list[int]], None] = lambda kind, brokers: None,
                 on_sent: Callable[[dict], None] = lambda requests: None):
        """`zk` is fenced on `ctx`'s controller epoch; `on_sent` hears of the requests `send_now` sent."""
        self.controller_id = controller_id
        self.ctx = ctx
        self.zk = zk
        self.config = config
        self.batch = ControllerBrokerRequestBatch(controller_id)
        self.psm = ZkPartitionStateMachine(controller_id, self.ctx, zk, self.batch,
                                           config.unclean_leader_election_enable)
        self.rsm = ZkReplicaStateMachine(controller_id, self.ctx, zk, self.batch)
        self.watches = watches
        self.begin_timeline = begin_timeline
        self.on_sent = on_sent
        self.links: BrokerLinks | None = None  # set at failover
        self.detector: LivenessWatch | None = None
        self.warm: Callable[[], ContextReads] | None = None  # the warm standby's copy, caught up (at failover)
        self.deletion = TopicDeletionManager(self)

    @property
    def prefix(self) -> str:
        return f"[Controller id={self.controller_id} epoch={self.ctx.epoch}]"

    # -- ZooKeeper into the context: the one place for each kind of state ------------

    def initialize_live_brokers(self) -> None:
        """The first part of Kafka's initializeControllerContext: the live brokers with their epochs. With
        the Ray detector on, a registered broker Ray has no actor for is dead, its registration removed:
        kray, not Kafka, whose new controller finds it alive until its session expires, then handles its
        death as an event of its own, a second LeaderAndIsr to every broker behind the first (the broker
        that hosted the controller and died with it)."""
        brokers = self.read_brokers(self.zk.get_all_broker_ids())
        for b in sorted(self.detector.dead_now(set(brokers)) if self.detector is not None else ()):
            if self.zk.delete_broker_registration(b, brokers[b][1]):
                log.info("%s Ray has no actor for broker %d, still registered (broker epoch %d): it died, most "
                         "likely with the controller it hosted; its registration removed, its replicas offline "
                         "from this failover on", self.prefix, b, brokers[b][1])
                del brokers[b]
        self.ctx.add_live_brokers(brokers)

    def initialize_context(self) -> None:
        """The rest of Kafka's initializeControllerContext: every topic's assignment, every partition's
        leader and ISR (from the warm standby's copy, caught up now, when there is one)."""
        started = now_ms()
        reads = self.zk if self.warm is None else self.warm()
        self.add_topics(self.zk.get_all_topics(), reads)
        assigned = now_ms()
        self.sync_leaderships(self.ctx.all_partitions(), reads)
        log.info("%s Initialized the context: %d topic assignments in %.0f ms, %d partition states in %.0f ms",
                 self.prefix, len(self.ctx.all_topics), assigned - started, len(self.ctx.partition_leadership),
                 now_ms() - assigned)

    def read_brokers(self, broker_ids: Iterable[int]) -> dict[int, tuple[LiveBroker, int]]:
        """Registrations, with their broker epochs."""
        return {b: (LiveBroker(id=b, endpoints=[EndPoint(name, *address) for name, address in info.listeners().items()],
                               rack=info.rack), epoch)
                for b, (info, epoch) in self.zk.get_brokers(broker_ids).items()}

    def add_topics(self, new_topics: set[str], reads: ContextReads | None = None) -> list[TopicPartition]:
        """Read the topics' assignments into the context and watch each topic znode for new partitions."""
        added = []
        for topic, znode in (reads or self.zk).get_topic_znodes(new_topics).items():
            self.ctx.all_topics.add(topic)
            self.ctx.topic_ids[topic] = znode.topic_id or ""
            for p, a in znode.full_assignment().items():
                tp = TopicPartition(topic, p)
                self.ctx.update_partition_full_assignment(
                    tp, ReplicaAssignment(tuple(a.replicas), tuple(a.adding), tuple(a.removing)))
                added.append(tp)
            self.watches.watch_data(zkdata.topic_path(topic), lambda t=topic: PartitionModifications(topic=t))
        return added

    def sync_leaderships(self, partitions: Iterable[TopicPartition],
                         reads: ContextReads | None = None) -> set[TopicPartition]:
        """Bring the context's leader/ISR of these partitions up to ZooKeeper's (or to `reads`, the warm
        standby's copy at failover); those it has."""
        return self.psm.read_leaderships(list(partitions), reads)

    def write_topic_assignment(self, topic: str) -> None:
        """Write the controller's view of the topic's assignment (RS, AR, RR per partition) to /brokers/topics/T."""
        parts = {tp.partition: self.ctx.partition_full_assignment(tp) for tp in self.ctx.partitions_for_topic(topic)}
        self.zk.set_topic_znode(topic, zkdata.TopicZNode(
            partitions={str(p): list(a.replicas) for p, a in sorted(parts.items())},
            adding_replicas={str(p): list(a.adding) for p, a in sorted(parts.items()) if a.adding},
            removing_replicas={str(p): list(a.removing) for p, a in sorted(parts.items()) if a.removing},
            topic_id=self.ctx.topic_ids.get(topic) or None))

    # -- shared by several flows -------------------------------------------------------

    def send_now(self) -> None:
        """Send what the batch holds at once, ahead of the rest of the event's requests."""
        requests = self.batch.build(self.ctx)
        self.links.send(requests)
        self.on_sent(requests)

    def on_new_partition_creation(self, partitions: list[TopicPartition]) -> None:
        replicas = [(tp, r) for tp in partitions for r in self.ctx.partition_replicas(tp)]
        self.psm.handle_state_changes(partitions, P.NewPartition)
        self.rsm.handle_state_changes(replicas, R.NewReplica)
        self.psm.handle_state_changes(partitions, P.OnlinePartition)
        self.rsm.handle_state_changes(replicas, R.OnlineReplica)


E = TypeVar("E", bound=ControllerEvent)
Flow = Callable[[FlowScope, ControllerEvent], None]
FLOWS: dict[type[ControllerEvent], Flow] = {}  # what an active controller does with each event type


def handles(event_type: type[E]) -> Callable[[Callable[[FlowScope, E], None]], Callable[[FlowScope, E], None]]:
    """Register the decorated function as the flow for `event_type` (one flow per type)."""
    def register(flow):
        if event_type in FLOWS:
            raise TypeError(f"{event_type.__name__} already has a flow: {FLOWS[event_type].__name__}")
        FLOWS[event_type] = flow
        return flow
    return register
