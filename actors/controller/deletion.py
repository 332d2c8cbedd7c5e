"""TopicDeletionManager: walks a topic's replicas through the deletion states (Kafka's design).

A topic queued in /admin/delete_topics has its partitions taken Offline then
NonExistent, brokers are told (UpdateMetadata with leader -2), and each live
replica goes OfflineReplica -> ReplicaDeletionStarted (StopReplica with delete).
A successful StopReplica response moves it to ReplicaDeletionSuccessful; when
every replica is there the topic's znodes are removed. A replica on a dead
broker makes the topic ineligible (ReplicaDeletionIneligible) until that
broker returns, and deletion resumes from where it stopped.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from actors.controller.state_machines import PartitionStateName as P, ReplicaStateName as R
from actors.protocol import ControllerResponse, StopReplicaRequest
from coordination import zkdata
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

if TYPE_CHECKING:
    from actors.config import ControllerConfig
    from actors.controller.context import ControllerContext
    from actors.controller.controller_zk import ControllerZk
    from actors.controller.request_batch import ControllerBrokerRequestBatch
    from actors.controller.zk_state_machines import ZkPartitionStateMachine, ZkReplicaStateMachine

log = logging.getLogger(__name__)


class DeletionClient(Protocol):
    """What the deletion manager uses of the controller's term (Kafka hands its TopicDeletionManager a
    narrow DeletionClient, not the controller): the context, the fenced ZooKeeper writes, the state
    machines it walks replicas and partitions through, and the batch they fill. `FlowScope` is one."""

    config: ControllerConfig
    ctx: ControllerContext
    zk: ControllerZk
    batch: ControllerBrokerRequestBatch
    psm: ZkPartitionStateMachine
    rsm: ZkReplicaStateMachine

    @property
    def prefix(self) -> str: ...


class TopicDeletionManager:
    def __init__(self, scope: DeletionClient):
        self.scope = scope

    @property
    def enabled(self) -> bool:
        return self.scope.config.delete_topic_enable

    def init(self) -> None:
        """On failover: topics already queued are resumed; those with replicas on dead brokers
        or in reassignment wait."""
        s, ctx = self.scope, self.scope.ctx
        queued = set(s.zk.children(zkdata.DELETE_TOPICS)) & ctx.all_topics
        if not queued:
            return
        if not self.enabled:
            log.info("%s Removing %s since delete topic is disabled", s.prefix, sorted(queued))
            s.zk.delete_paths([zkdata.delete_topic_path(t) for t in sorted(queued)])
            return
        ctx.topics_to_be_deleted |= queued
        with_offline = {t for t in queued
                        if any(not ctx.is_replica_online(r, tp) for tp, r in ctx.replicas_for_topic(t))}
        reassigning = {tp.topic for tp in ctx.partitions_being_reassigned}
        ctx.topics_ineligible_for_deletion |= (with_offline | reassigning) & queued

    def enqueue_topics_for_deletion(self, topics: set[str], ineligible: set[str] = frozenset(),
                                    reason: str = "") -> None:
        """Queue, then mark the ineligible ones (kray, not Kafka: Kafka 2.8 marks first, which marks
        nothing since only queued topics can be marked, so a topic deleted during a reassignment starts
        deleting at once; here its deletion waits for the reassignment, as Kafka's comment intends)."""
        if self.enabled:
            self.scope.ctx.topics_to_be_deleted |= topics
            self.mark_topic_ineligible_for_deletion(set(ineligible), reason)
            self.resume_deletions()

    def mark_topic_ineligible_for_deletion(self, topics: set[str], reason: str) -> None:
        ctx = self.scope.ctx
        halted = topics & ctx.topics_to_be_deleted
        if halted:
            ctx.topics_ineligible_for_deletion |= halted
            log.info("%s Halted deletion of topics %s due to %s", self.scope.prefix, sorted(halted), reason)

    def resume_deletion_for_topics(self, topics: set[str]) -> None:
        ctx = self.scope.ctx
        to_resume = topics & ctx.topics_to_be_deleted
        if to_resume:
            ctx.topics_ineligible_for_deletion -= to_resume
            self.resume_deletions()

    def fail_replica_deletion(self, replicas: list[tuple[TopicPartition, int]]) -> None:
        ctx = self.scope.ctx
        failed = [k for k in replicas if ctx.is_topic_queued_for_deletion(k[0].topic)]
        if failed:
            self.scope.rsm.handle_state_changes(failed, R.ReplicaDeletionIneligible)
            self.mark_topic_ineligible_for_deletion({tp.topic for tp, _ in failed}, "replica deletion failure")
            self.resume_deletions()

    def complete_replica_deletion(self, replicas: list[tuple[TopicPartition, int]]) -> None:
        ctx = self.scope.ctx
        done = [k for k in replicas if ctx.is_topic_queued_for_deletion(k[0].topic)]
        if done:
            self.scope.rsm.handle_state_changes(done, R.ReplicaDeletionSuccessful)
            self.resume_deletions()

    def on_stop_replica_response(self, response: ControllerResponse, request: StopReplicaRequest) -> None:
        """Answers to StopReplica requests that deleted replicas in ReplicaDeletionStarted decide their
        fate; a StopReplica that only stopped one (OfflineReplica's, sent before it) decides nothing,
        as in Kafka's callback, which counts only the partitions its request deleted."""
        ctx = self.scope.ctx
        deleted = {(p.topic, p.partition) for p in request.partitions if p.delete_partition}
        ok, failed = [], []
        for e in response.partition_errors:
            key = (TopicPartition(e.topic, e.partition), response.broker_id)
            if (e.topic, e.partition) in deleted and ctx.replica_states.get(key) is R.ReplicaDeletionStarted:
                (ok if e.error_code == Errors.NONE else failed).append(key)
        if response.error_code != Errors.NONE:  # the whole request was refused
            failed += ok
            ok = []
        if failed:
            self.fail_replica_deletion(failed)
        if ok:
            self.complete_replica_deletion(ok)

    def _eligible(self, topic: str) -> bool:
        ctx = self.scope.ctx
        return (topic in ctx.topics_to_be_deleted
                and not ctx.is_any_replica_in_state(topic, R.ReplicaDeletionStarted)
                and topic not in ctx.topics_ineligible_for_deletion)

    def resume_deletions(self) -> None:
        ctx = self.scope.ctx
        retry, eligible = set(), set()
        for topic in sorted(ctx.topics_to_be_deleted):
            if ctx.are_all_replicas_in_state(topic, R.ReplicaDeletionSuccessful):
                self._complete_delete_topic(topic)
                continue
            if not ctx.is_any_replica_in_state(topic, R.ReplicaDeletionStarted) \
                    and ctx.is_any_replica_in_state(topic, R.ReplicaDeletionIneligible):
                retry.add(topic)
            if self._eligible(topic):
                eligible.add(topic)
        if retry:
            failed = [k for t in retry for k in ctx.replicas_in_state(t, R.ReplicaDeletionIneligible)]
            self.scope.rsm.handle_state_changes(failed, R.OfflineReplica)
        if eligible:
            self._on_topic_deletion(eligible)

    def _on_topic_deletion(self, topics: set[str]) -> None:
        s, ctx = self.scope, self.scope.ctx
        unseen = topics - ctx.topics_with_deletion_started
        if unseen:
            partitions = [tp for t in sorted(unseen) for tp in ctx.partitions_for_topic(t)]
            s.psm.handle_state_changes(partitions, P.OfflinePartition)
            s.psm.handle_state_changes(partitions, P.NonExistentPartition)
            ctx.topics_with_deletion_started |= unseen
        # brokers drop the partitions from their caches (leader -2 in UpdateMetadata)
        s.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids,
                                    [tp for t in topics for tp in ctx.partitions_for_topic(t)])
        dead, retry, ineligible = [], [], set()
        for topic in sorted(topics):
            replicas = ctx.replicas_for_topic(topic)
            done = set(ctx.replicas_in_state(topic, R.ReplicaDeletionSuccessful))
            topic_dead = [k for k in replicas if not ctx.is_replica_online(k[1], k[0])]
            dead += topic_dead
            retry += [k for k in replicas if ctx.is_replica_online(k[1], k[0]) and k not in done]
            if topic_dead:
                ineligible.add(topic)
        s.rsm.handle_state_changes(dead, R.ReplicaDeletionIneligible)
        s.rsm.handle_state_changes(retry, R.OfflineReplica)
        s.rsm.handle_state_changes(retry, R.ReplicaDeletionStarted)
        if ineligible:
            self.mark_topic_ineligible_for_deletion(ineligible, "offline replicas")

    def _complete_delete_topic(self, topic: str) -> None:
        s, ctx = self.scope, self.scope.ctx
        s.rsm.handle_state_changes(ctx.replicas_in_state(topic, R.ReplicaDeletionSuccessful), R.NonExistentReplica)
        s.zk.delete_topic(topic)
        ctx.remove_topic(topic)
        log.info("%s Deletion of topic %s successfully completed", s.prefix, topic)
