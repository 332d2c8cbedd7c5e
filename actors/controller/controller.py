"""KafkaController: what the controller does with each event, over context, plans and ZooKeeper.

Everything here runs on the inbox thread. Decisions come from the pure
planners in `changes.py`; `_apply_partition_changes` / `_apply_replica_changes`
are the one place that persists them (ZooKeeper first, fenced by the controller
epoch), then updates ControllerContext, then adds requests to the batch, which
is sent once per broker at the end of the event.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Callable

from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError
from kazoo.recipe.watchers import ChildrenWatch

from actors.controller.changes import (
    PartitionChanges,
    ReplicaChanges,
    plan_partition_state_changes,
    plan_replica_state_changes,
)
from actors.controller.channel import ControllerBrokerRequestBatch
from actors.controller.context import ControllerContext, LeaderAndIsr, LeaderIsrAndControllerEpoch
from actors.controller.events import (
    BrokerChange,
    ControllerChange,
    ControllerEvent,
    Expire,
    Reelect,
    ResponseReceived,
    Startup,
    TopicChange,
)
from actors.controller.state_machines import PartitionStateName as P, ReplicaStateName as R
from actors.protocol import LiveBroker
from coordination import zkdata
from coordination.election import ControllerElection
from coordination.errors import ControllerMovedException, Errors
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("state.change.logger")

MAX_ELECTION_RETRIES = 5


class KafkaController:
    def __init__(self, broker_id: int, zk: KrayZkClient, put: Callable[[ControllerEvent], None],
                 channel_factory: Callable[[], object], unclean_leader_election_enabled: bool = False):
        self.broker_id = broker_id
        self.zk = zk
        self.put = put
        self._channel_factory = channel_factory
        self.unclean_leader_election_enabled = unclean_leader_election_enabled
        self.ctx = ControllerContext()
        self.channel = None
        self.batch = ControllerBrokerRequestBatch(broker_id)
        self.election = ControllerElection(zk, broker_id, notify=lambda: put(ControllerChange()))
        self._watch_generation = 0
        self._session_lost = False
        self.active = False

    @property
    def _prefix(self) -> str:
        return f"[Controller id={self.broker_id} epoch={self.ctx.epoch}]"

    # -- dispatch ------------------------------------------------------------

    def process(self, event: ControllerEvent) -> None:
        try:
            match event:
                case Startup():
                    self.zk.add_state_listener(self._on_session_state)
                    self.election.watch()
                case ControllerChange() | Reelect():
                    self._maybe_resign_then_elect()
                case Expire():
                    if self.active:
                        self._resign("session expired")
                case BrokerChange() if self.active:
                    self._process_broker_change()
                case TopicChange() if self.active:
                    self._process_topic_change()
                case ResponseReceived(response=resp, controller_epoch=epoch) if self.active and resp is not None:
                    self._process_response(resp, epoch)
            self._send_batch()
        except ControllerMovedException as e:
            log.warning("%s Controller moved to another broker: %s", self._prefix, e)
            self._resign("controller moved")

    def _on_session_state(self, state: KazooState) -> None:
        """kazoo's state listener: only enqueue (never block or call ZooKeeper here)."""
        if state == KazooState.LOST:
            self.put(Expire())
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self.put(Reelect())

    def _send_batch(self) -> None:
        if self.active and not self.batch.is_empty():
            self.channel.send(self.batch.build(self.ctx))

    # -- election, failover, resignation -------------------------------------

    def _maybe_resign_then_elect(self) -> None:
        if self.active and not self.election.still_controller():
            self._resign("/controller changed")
        if not self.active:
            won = self.election.elect()
            if won is not None:
                self.ctx.epoch, self.ctx.epoch_zk_version = won
                log.info("%s %d successfully elected as the controller. Epoch incremented to %d and epoch "
                         "zk version is now %d", self._prefix, self.broker_id, won.epoch, won.zk_version)
                self._on_controller_failover()

    def _resign(self, reason: str) -> None:
        """Kafka's onControllerResignation: stop watches and senders, forget the context."""
        log.info("%s Resigning as controller: %s", self._prefix, reason)
        self._watch_generation += 1
        self.active = False
        if self.channel is not None:
            self.channel.shutdown()
            self.channel = None
        self.ctx = ControllerContext()
        self.batch = ControllerBrokerRequestBatch(self.broker_id)

    def _on_controller_failover(self) -> None:
        """Watch, load the context from ZooKeeper, start senders, then tell every broker everything."""
        self.active = True
        generation = self._watch_generation

        def watch(path: str, event_type: type[ControllerEvent]) -> None:
            def fired(_children) -> bool | None:
                if generation != self._watch_generation:
                    return False  # resigned: drop this watch
                self.put(event_type())
                return None
            ChildrenWatch(self.zk.kazoo, path, fired, send_event=False)

        self.zk.ensure_persistent_paths()
        watch(zkdata.BROKER_IDS, BrokerChange)
        watch(zkdata.TOPICS, TopicChange)
        self._initialize_context()
        self.channel = self._channel_factory()
        for broker_id in self.ctx.live_brokers:
            self.channel.add_broker(broker_id)
        self.batch.add_update_metadata(self.ctx.live_or_shutting_down_broker_ids, self.ctx.partition_leadership)
        # replica state machine startup: live replicas Online, which sends each its LeaderAndIsr
        for tp in self.ctx.all_partitions():
            for r in self.ctx.partition_replicas(tp):
                self.ctx.replica_states[(tp, r)] = (R.OnlineReplica if self.ctx.is_replica_online(r)
                                                    else R.ReplicaDeletionIneligible)
        self._apply_replica_changes(plan_replica_state_changes(
            self.ctx, [k for k, s in self.ctx.replica_states.items() if s is R.OnlineReplica], R.OnlineReplica))
        # partition state machine startup
        for tp in self.ctx.all_partitions():
            leadership = self.ctx.partition_leadership.get(tp)
            if leadership is None:
                self.ctx.partition_states[tp] = P.NewPartition
            elif self.ctx.is_replica_online(leadership.leader_and_isr.leader):
                self.ctx.partition_states[tp] = P.OnlinePartition
            else:
                self.ctx.partition_states[tp] = P.OfflinePartition
        self._trigger_online_partition_state_change()
        log.info("%s Controller failover complete: %d live brokers, %d topics, %d partitions",
                 self._prefix, len(self.ctx.live_brokers), len(self.ctx.all_topics), len(self.ctx.all_partitions()))

    def _initialize_context(self) -> None:
        self.ctx.add_live_brokers(self._read_brokers(self.zk.get_all_broker_ids()))
        self._add_topics(self.zk.get_all_topics())
        for tp, record in self.zk.get_partition_states(self.ctx.all_partitions()).items():
            self.ctx.partition_leadership[tp] = _leadership(record)

    def _read_brokers(self, broker_ids: Iterable[int]) -> dict[int, tuple[LiveBroker, int]]:
        return {b: (LiveBroker(id=b, host=info.host, port=info.port, rack=info.rack), epoch)
                for b, (info, epoch) in self.zk.get_brokers(broker_ids).items()}

    def _add_topics(self, topics: set[str]) -> list[TopicPartition]:
        self.ctx.all_topics |= topics
        added = []
        for topic, znode in self.zk.get_topic_znodes(topics).items():
            self.ctx.topic_ids[topic] = znode.topic_id or ""
            for p, replicas in znode.assignment().items():
                tp = TopicPartition(topic, p)
                self.ctx.update_partition_replicas(tp, tuple(replicas))
                added.append(tp)
        return added

    def _trigger_online_partition_state_change(self) -> None:
        self._apply_partition_changes(plan_partition_state_changes(
            self.ctx, self.ctx.partitions_in_state(P.NewPartition, P.OfflinePartition), P.OnlinePartition,
            self.unclean_leader_election_enabled))

    # -- ZooKeeper events ----------------------------------------------------

    def _process_topic_change(self) -> None:
        topics = self.zk.get_all_topics()
        new_topics = topics - self.ctx.all_topics
        if not new_topics:
            return
        new_partitions = self._add_topics(new_topics)
        log.info("%s New topics: [%s], new partition replica assignment %d partitions", self._prefix,
                 ",".join(sorted(new_topics)), len(new_partitions))
        self._on_new_partition_creation(new_partitions)

    def _on_new_partition_creation(self, partitions: list[TopicPartition]) -> None:
        replicas = [(tp, r) for tp in partitions for r in self.ctx.partition_replicas(tp)]
        self._apply_partition_changes(plan_partition_state_changes(self.ctx, partitions, P.NewPartition))
        self._apply_replica_changes(plan_replica_state_changes(self.ctx, replicas, R.NewReplica))
        self._apply_partition_changes(plan_partition_state_changes(
            self.ctx, partitions, P.OnlinePartition, self.unclean_leader_election_enabled))
        self._apply_replica_changes(plan_replica_state_changes(self.ctx, replicas, R.OnlineReplica))

    def _process_broker_change(self) -> None:
        current = self.zk.get_all_broker_ids()
        known = self.ctx.live_broker_epochs
        registrations = self._read_brokers(current)
        new = {b for b in registrations if b not in known}
        bounced = {b for b in registrations if b in known and registrations[b][1] > known[b]}
        dead = set(known) - set(current)
        if not (new or bounced or dead):
            return
        log.info("%s Newly added brokers: %s, deleted brokers: %s, bounced brokers: %s, all live brokers: %s",
                 self._prefix, sorted(new), sorted(dead), sorted(bounced), sorted(current))
        for b in dead | bounced:
            self.channel.remove_broker(b)
        self.ctx.remove_live_brokers(dead | bounced)
        if dead | bounced:
            self._on_broker_failure(dead | bounced)
        self.ctx.add_live_brokers({b: registrations[b] for b in new | bounced})
        for b in new | bounced:
            self.channel.add_broker(b)
        if new | bounced:
            self._on_broker_startup(new | bounced)

    def _on_broker_startup(self, brokers: set[int]) -> None:
        """UpdateMetadata to all; the new brokers' replicas Online; New/Offline partitions elected."""
        self.batch.add_update_metadata(self.ctx.live_or_shutting_down_broker_ids - brokers, [])
        self.batch.add_update_metadata(brokers, self.ctx.partition_leadership)
        replicas = [(tp, b) for b in brokers for tp in self.ctx.partitions_on_broker(b)]
        self._apply_replica_changes(plan_replica_state_changes(self.ctx, replicas, R.OnlineReplica))
        self._trigger_online_partition_state_change()

    def _on_broker_failure(self, brokers: set[int]) -> None:
        """Partitions led by the dead brokers go Offline and are elected again from the live ISR."""
        led = [tp for tp, l in self.ctx.partition_leadership.items() if l.leader_and_isr.leader in brokers]
        self._apply_partition_changes(plan_partition_state_changes(self.ctx, led, P.OfflinePartition))
        self._trigger_online_partition_state_change()
        self.batch.add_update_metadata(self.ctx.live_or_shutting_down_broker_ids, [])

    def _process_response(self, response, epoch: int) -> None:
        if epoch != self.ctx.epoch:
            return
        # a re-sent LeaderAndIsr whose leader epoch the broker already has is answered
        # STALE_CONTROLLER_EPOCH per partition (Kafka's convention): expected after a failover
        errors = [e for e in response.partition_errors
                  if e.error_code not in (Errors.NONE, Errors.STALE_CONTROLLER_EPOCH)]
        if response.error_code != Errors.NONE or errors:
            log.warning("%s %s response from broker %d: error %s, %d partition errors (first: %s)",
                        self._prefix, response.api, response.broker_id, response.error_code.name,
                        len(errors), errors[0] if errors else None)

    # -- applying plans: the one place that persists and propagates -------------

    def _apply_partition_changes(self, plan: PartitionChanges, attempt: int = 0) -> None:
        for tp, current in plan.invalid.items():
            state_change_log.error("%s Controller %d epoch %d failed to change state for partition %s from %s "
                                   "to %s", self._prefix, self.broker_id, self.ctx.epoch, tp, current.name,
                                   plan.target.name)
        for tp, reason in plan.failed.items():
            state_change_log.error("%s Controller %d epoch %d failed to change state for partition %s to %s: %s",
                                   self._prefix, self.broker_id, self.ctx.epoch, tp, plan.target.name, reason)
        written: dict[TopicPartition, tuple[LeaderAndIsr, bool]] = {}
        if plan.created:
            created = self.zk.create_partition_states(
                {tp: _znode(lai, self.ctx.epoch) for tp, lai in plan.created.items()}, self.ctx.epoch_zk_version)
            for tp, error in created.items():
                if error is None:
                    written[tp] = (plan.created[tp], True)
                else:
                    state_change_log.error("%s Failed to create state of new partition %s: %s",
                                           self._prefix, tp, type(error).__name__)
        retry: list[TopicPartition] = []
        if plan.elected:
            updated = self.zk.update_partition_states(
                {tp: (_znode(lai, self.ctx.epoch), lai.zk_version) for tp, lai in plan.elected.items()},
                self.ctx.epoch_zk_version)
            for tp, outcome in updated.items():
                if isinstance(outcome, BadVersionError):
                    retry.append(tp)
                elif isinstance(outcome, Exception):
                    state_change_log.error("%s Failed to update state of partition %s: %r", self._prefix, tp, outcome)
                else:
                    lai = plan.elected[tp]
                    written[tp] = (LeaderAndIsr(lai.leader, lai.leader_epoch, lai.isr, outcome), False)
        for tp, previous in plan.transitions.items():
            if tp in plan.failed or ((tp in plan.created or tp in plan.elected) and tp not in written):
                continue
            self.ctx.partition_states[tp] = plan.target
            if tp in written:
                lai, is_new = written[tp]
                self.ctx.partition_leadership[tp] = LeaderIsrAndControllerEpoch(lai, self.ctx.epoch)
                live = [r for r in self.ctx.partition_replicas(tp) if self.ctx.is_replica_online(r)]
                self.batch.add_leader_and_isr(self.ctx, live, tp, is_new=is_new)
                state_change_log.info("%s Changed partition %s from %s to %s with state %s", self._prefix, tp,
                                      previous.name, plan.target.name, lai)
            else:
                state_change_log.info("%s Changed partition %s state from %s to %s", self._prefix, tp,
                                      previous.name, plan.target.name)
        if retry and attempt < MAX_ELECTION_RETRIES:
            # another writer (a partition leader changing its ISR) moved the znode: re-read and re-plan
            for tp, record in self.zk.get_partition_states(retry).items():
                self.ctx.partition_leadership[tp] = _leadership(record)
            self._apply_partition_changes(plan_partition_state_changes(
                self.ctx, retry, plan.target, self.unclean_leader_election_enabled), attempt + 1)

    def _apply_replica_changes(self, plan: ReplicaChanges) -> None:
        for (tp, r), current in plan.invalid.items():
            state_change_log.error("%s Controller %d epoch %d failed to change state of replica %d for partition "
                                   "%s from %s to %s", self._prefix, self.broker_id, self.ctx.epoch, r, tp,
                                   current.name, plan.target.name)
        for broker_id, tp in plan.leader_and_isr_to:
            self.batch.add_leader_and_isr(self.ctx, [broker_id], tp)
        for key, previous in plan.transitions.items():
            self.ctx.replica_states[key] = plan.target
        if plan.transitions:
            state_change_log.info("%s Changed state of %d replicas to %s", self._prefix, len(plan.transitions),
                                  plan.target.name)

    # -- read-only view for the actor ------------------------------------------

    def status(self) -> dict:
        return {
            "broker_id": self.broker_id,
            "active": self.active,
            "epoch": self.ctx.epoch,
            "epoch_zk_version": self.ctx.epoch_zk_version,
            "live_brokers": sorted(self.ctx.live_brokers),
            "partitions": len(self.ctx.partition_states),
            "online_partitions": len(self.ctx.partitions_in_state(P.OnlinePartition)) if self.active else 0,
        }


def _znode(lai: LeaderAndIsr, controller_epoch: int) -> zkdata.PartitionStateZNode:
    return zkdata.PartitionStateZNode(leader=lai.leader, leader_epoch=lai.leader_epoch,
                                      controller_epoch=controller_epoch, isr=list(lai.isr))


def _leadership(record) -> LeaderIsrAndControllerEpoch:
    s = record.state
    return LeaderIsrAndControllerEpoch(LeaderAndIsr(s.leader, s.leader_epoch, tuple(s.isr), record.zk_version),
                                       s.controller_epoch)

