"""The controller's requests to brokers, pure: the per-event request batch, and the rules by which a
RequestSender (actors/controller/channel.py) takes batches in.

During one event the controller adds partitions per broker to a `ControllerBrokerRequestBatch`;
`build` turns them into one LeaderAndIsr and one UpdateMetadata request per broker. Ray does not
keep the order of calls to an actor with several threads, so each batch the controller enqueues
carries its number, and the sender queues it only after the ones before it (`InOrder`); a sender
outlives controller epochs and works for one controller at a time (`takeover`).
"""
from __future__ import annotations

import itertools
import logging
from collections import defaultdict

from actors.controller.context import ControllerContext, LeaderIsrAndControllerEpoch
from actors.protocol import (
    INTER_BROKER_LISTENER,
    LEADER_DURING_DELETE,
    ControllerRequestT,
    LeaderAndIsrRequest,
    PartitionState,
    PartitionStates,
    StopReplicaPartition,
    StopReplicaPartitions,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from coordination.zkdata import TopicPartition, in_partition_order

EPOCH_DURING_DELETE = -2  # StopReplica's leader epoch for a topic being deleted: stops whatever epoch the replica has
NO_EPOCH = -1  # a partition with no leadership yet
ALL = -1  # UpdateMetadata's recipients: every live or shutting-down broker when the batch is built
BEING_DELETED = "being deleted"  # an UpdateMetadata's state of a partition whose topic is queued for deletion

log = logging.getLogger(__name__)


def partition_state(ctx: ControllerContext, tp: TopicPartition, leadership: LeaderIsrAndControllerEpoch,
                    is_new: bool = False, being_deleted: bool = False) -> PartitionState:
    """One partition's state in a request. Offline replicas are those not online, shutting-down brokers'
    included (Kafka's isReplicaOnline); a topic being deleted goes as LeaderAndIsr.duringDelete: leader
    -2, leader epoch and zkVersion 0, the ISR kept."""
    lai = leadership.leader_and_isr
    assignment = ctx.partition_full_assignment(tp)
    leader, leader_epoch, zk_version = (LEADER_DURING_DELETE, 0, 0) if being_deleted else (
        lai.leader, lai.leader_epoch, lai.zk_version)
    return PartitionState(
        tp.topic, tp.partition, leadership.controller_epoch, leader, leader_epoch, lai.isr, zk_version,
        assignment.replicas, assignment.adding, assignment.removing,
        tuple([r for r in assignment.replicas if not ctx.is_replica_online(r, tp)]), is_new,
    )


def stop_replica_epoch(ctx: ControllerContext, tp: TopicPartition) -> int:
    """The leader epoch a StopReplica carries, fixed when it is added (Kafka's addStopReplicaRequestForBrokers):
    EPOCH_DURING_DELETE when the topic is queued for deletion, else the partition's leader epoch of the
    moment. A broker stops a replica only at a newer epoch than its own (or either sentinel)."""
    if ctx.is_topic_queued_for_deletion(tp.topic):
        return EPOCH_DURING_DELETE
    leadership = ctx.partition_leadership.get(tp)
    return leadership.leader_and_isr.leader_epoch if leadership is not None else NO_EPOCH


class ControllerBrokerRequestBatch:
    """Requests collected during one event, sent once per broker at its end."""

    def __init__(self, controller_id: int):
        self.controller_id = controller_id
        self._leader_and_isr: dict[int, dict[TopicPartition, bool]] = defaultdict(dict)  # broker -> tp -> is_new
        # UpdateMetadata: the partitions each broker is sent, and those every live or shutting-down broker
        # is (ALL: the brokers of the moment the batch is built); a broker gets the union of the two
        self._update_metadata: dict[int, set[TopicPartition]] = defaultdict(set)
        # broker -> tp -> (delete, leader epoch)
        self._stop_replica: dict[int, dict[TopicPartition, tuple[bool, int]]] = defaultdict(dict)
        self._correlation_ids = itertools.count()

    def is_empty(self) -> bool:
        return not (self._leader_and_isr or self._update_metadata or self._stop_replica)

    def add_leader_and_isr(self, broker_ids, tp: TopicPartition, is_new: bool = False) -> None:
        """LeaderAndIsr for tp to the given brokers, and UpdateMetadata for tp to every live or
        shutting-down broker (those of the moment the batch is built)."""
        requests = self._leader_and_isr
        for b in broker_ids:
            if b >= 0:
                requests[b][tp] = requests[b].get(tp, False) or is_new
        self._update_metadata[ALL].add(tp)

    def add_stop_replica(self, broker_id: int, tp: TopicPartition, delete: bool, leader_epoch: int) -> None:
        """A StopReplica at `leader_epoch` (`stop_replica_epoch` when the caller decided to stop it); added
        again, it deletes if either did, at the later epoch."""
        if broker_id >= 0:
            already_delete = self._stop_replica[broker_id].get(tp, (False, 0))[0]
            self._stop_replica[broker_id][tp] = (already_delete or delete, leader_epoch)

    def add_update_metadata(self, broker_ids, partitions) -> None:
        """UpdateMetadata with these partitions to these brokers only: a broker that starts is sent every
        partition, the others none (Kafka's onBrokerStartup), not every partition to every broker."""
        for b in broker_ids:
            self._update_metadata[b].update(partitions)

    def build(self, ctx: ControllerContext) -> dict[int, list[ControllerRequestT]]:
        """Per live broker: LeaderAndIsr, then UpdateMetadata, then StopReplica (Kafka's order). Clears the batch."""
        live_brokers = [ctx.live_brokers[b] for b in sorted(ctx.live_brokers)]
        out: dict[int, list[ControllerRequestT]] = defaultdict(list)
        cache: dict[tuple[TopicPartition, bool | str], PartitionState] = {}  # one state object serves every broker
        # one rows object per set of states, whichever requests carry it, so that Ray pickles it once: a
        # broker failure at 100,000 partitions gives both survivors a LeaderAndIsr and an UpdateMetadata of
        # the same 100,000 states (0.3-0.4 s of the controller's CPU each, before they were shared)
        shared: list[tuple[dict[TopicPartition, bool | str], PartitionStates]] = []

        def state(tp: TopicPartition, how: bool | str) -> PartitionState:
            key = (tp, how)
            if key not in cache:
                cache[key] = partition_state(ctx, tp, ctx.partition_leadership[tp], is_new=how is True,
                                             being_deleted=how == BEING_DELETED)
            return cache[key]

        def rows(entries: dict[TopicPartition, bool | str]) -> PartitionStates:
            """The states of `entries` (partition -> is_new, or BEING_DELETED), in partition order."""
            for built, states in shared:
                if len(built) == len(entries) and built == entries:
                    return states
            states = PartitionStates(state(tp, entries[tp]) for tp in in_partition_order(entries))
            shared.append((entries, states))
            return states

        for broker_id, partitions in sorted(self._leader_and_isr.items()):
            if broker_id not in ctx.live_brokers:
                continue
            states = rows({tp: is_new for tp, is_new in partitions.items() if tp in ctx.partition_leadership})
            leaders = {s.leader for s in states}
            nodes = [(b.id, b.node(INTER_BROKER_LISTENER)) for b in live_brokers if b.id in leaders]
            for leader in (b for b, node in nodes if node is None):  # Kafka's BrokerEndPointNotAvailableException
                log.warning("Leader %d has no %s listener: broker %d cannot follow it", leader, INTER_BROKER_LISTENER,
                            broker_id)
            out[broker_id].append(LeaderAndIsrRequest(
                controller_id=self.controller_id, controller_epoch=ctx.epoch,
                correlation_id=next(self._correlation_ids),
                broker_epoch=ctx.live_brokers[broker_id].epoch, partition_states=states,
                live_leaders=[node for _, node in nodes if node is not None],
            ))
        to_all = self._update_metadata.pop(ALL, set())
        recipients = set(self._update_metadata) | (ctx.live_or_shutting_down_broker_ids if to_all else set())
        for broker_id in sorted(recipients & set(ctx.live_brokers)):
            partitions = self._update_metadata.get(broker_id, set()) | to_all
            out[broker_id].append(UpdateMetadataRequest(
                controller_id=self.controller_id, controller_epoch=ctx.epoch,
                correlation_id=next(self._correlation_ids),
                broker_epoch=ctx.live_brokers[broker_id].epoch,
                partition_states=rows({tp: BEING_DELETED if ctx.is_topic_queued_for_deletion(tp.topic) else False
                                       for tp in partitions if tp in ctx.partition_leadership}),
                live_brokers=live_brokers,
            ))
        for broker_id, partitions in sorted(self._stop_replica.items()):
            if broker_id not in ctx.live_brokers:
                continue
            out[broker_id].append(StopReplicaRequest(
                controller_id=self.controller_id, controller_epoch=ctx.epoch,
                correlation_id=next(self._correlation_ids),
                broker_epoch=ctx.live_brokers[broker_id].epoch,
                partitions=StopReplicaPartitions(StopReplicaPartition(
                    topic=tp.topic, partition=tp.partition, delete_partition=delete, leader_epoch=epoch)
                    for tp, (delete, epoch) in sorted(partitions.items())),
            ))
        self._stop_replica.clear()
        self._leader_and_isr.clear()
        self._update_metadata.clear()
        return dict(out)


class InOrder:
    """Releases numbered batches in number order, from 0, whatever order they arrive in."""

    def __init__(self):
        self.next = 0
        self.waiting: dict[int, list] = {}

    def add(self, number: int, items: list) -> list:
        """The items now in order (this batch's and any that waited for it), in order."""
        self.waiting[number] = items
        out = []
        while self.next in self.waiting:
            out += self.waiting.pop(self.next)
            self.next += 1
        return out


Owner = tuple[int, int]  # (controller epoch, the controller's attachment number): who a sender works for


def takeover(current: Owner, incoming: Owner) -> str:
    """What a RequestSender does with a batch from `incoming` while it works for `current`: "refuse" it
    (an older controller, or an attachment the same controller has since replaced), "accept" it, or
    "reset": work for `incoming` from now on, dropping what is queued (a new controller's channel
    starts empty, as Kafka's does)."""
    return "refuse" if incoming < current else "accept" if incoming == current else "reset"
