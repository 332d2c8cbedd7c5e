"""Leadership moves that are not failures: preferred replica elections (ZooKeeper- and API-triggered),
unclean elections the admin API asks for, the auto leader rebalance task, and the ISR change
notifications leaders write."""
from __future__ import annotations

import logging

from actors.controller import reassignment
from actors.controller.changes import (
    ElectionType,
    OfflineElection,
    PreferredElection,
    auto_rebalance_candidates,
    election_needed,
)
from actors.controller.events import (
    AutoPreferredReplicaLeaderElection,
    IsrChangeNotification,
    PreferredReplicaElection,
    ReplicaLeaderElection,
    TopicUncleanLeaderElectionEnable,
)
from actors.controller.flow import FlowScope, handles
from actors.controller.state_machines import PartitionStateName as P
from coordination import zkdata
from coordination.errors import ApiError, Errors, MalformedZNodeError
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)


def elect_leaders(s: FlowScope, partitions, election_type: ElectionType,
                  trigger: str) -> dict[TopicPartition, ApiError | int]:
    """Kafka's onReplicaElection, after election_needed: per partition its new leader, or its error (Kafka's
    Either[ApiError, Int]: a broker answering ElectLeaders waits until its cache shows that leader). An
    unclean election (only the admin API asks for one) elects offline partitions from outside the ISR
    whatever unclean.leader.election.enable says, as Kafka's does."""
    valid, errors = election_needed(s.ctx, partitions, election_type)
    if valid:
        log.info("%s Starting replica leader election (%s) for partitions %s triggered by %s", s.prefix,
                 election_type.name, ",".join(map(str, valid[:20])) + ("..." if len(valid) > 20 else ""), trigger)
        preferred = election_type is ElectionType.PREFERRED
        failed = s.psm.handle_state_changes(valid, P.OnlinePartition,
                                            PreferredElection() if preferred else OfflineElection(allow_unclean=True))
        unavailable = Errors.PREFERRED_LEADER_NOT_AVAILABLE if preferred else Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
        errors.update({tp: ApiError(unavailable, reason) for tp, reason in failed.items()})
    return {tp: errors[tp] if tp in errors else s.ctx.partition_leadership[tp].leader_and_isr.leader
            for tp in list(valid) + [tp for tp in errors if tp not in valid]}


@handles(PreferredReplicaElection)
def process_preferred_replica_election_znode(s: FlowScope, _event: PreferredReplicaElection | None = None) -> None:
    try:
        znode = s.zk.get_znode(zkdata.PreferredReplicaElectionZNode, zkdata.PREFERRED_REPLICA_ELECTION)
        if znode is None:
            return
        results = elect_leaders(s, znode.topic_partitions(), ElectionType.PREFERRED, "ZooKeeper")
        failed = {tp: e for tp, e in results.items() if isinstance(e, ApiError)}
        if failed:
            log.warning("%s Preferred replica election failed for %s", s.prefix, failed)
    except MalformedZNodeError as e:
        log.error("%s Ignoring a malformed preferred replica election request: %s", s.prefix, e)
    finally:
        s.zk.delete_paths([zkdata.PREFERRED_REPLICA_ELECTION])


@handles(ReplicaLeaderElection)
def process_replica_leader_election(s: FlowScope, event: ReplicaLeaderElection) -> None:
    """Kafka's ElectLeaders request: the partitions named, or all of them when None."""
    try:
        chosen = (s.ctx.all_partitions() if event.partitions is None
                  else [TopicPartition(*p) for p in event.partitions])
        event.reply.set_result(elect_leaders(s, chosen, event.election_type, "AdminClient"))
    except Exception as e:
        event.reply.set_exception(e)
        raise


@handles(AutoPreferredReplicaLeaderElection)
def check_and_trigger_auto_leader_rebalance(s: FlowScope, _event: AutoPreferredReplicaLeaderElection) -> None:
    candidates = auto_rebalance_candidates(s.ctx, s.config.leader_imbalance_per_broker_percentage)
    if candidates:
        elect_leaders(s, candidates, ElectionType.PREFERRED, "AutoTriggered")


def delete_isr_change_notifications(s: FlowScope) -> None:
    names = s.zk.children(zkdata.ISR_CHANGE_NOTIFICATION)
    s.zk.delete_paths([f"{zkdata.ISR_CHANGE_NOTIFICATION}/{n}" for n in names])


@handles(IsrChangeNotification)
def process_isr_change_notification(s: FlowScope, _event: IsrChangeNotification) -> None:
    """Leaders changed ISRs in ZooKeeper: refresh those partitions and tell every broker."""
    names = sorted(s.zk.children(zkdata.ISR_CHANGE_NOTIFICATION))
    if not names:
        return
    paths = [f"{zkdata.ISR_CHANGE_NOTIFICATION}/{n}" for n in names]
    partitions: set[TopicPartition] = set()
    try:
        for path, got in s.zk.get_many(paths).items():
            if got is None:
                continue
            try:
                znode = zkdata.decode(zkdata.IsrChangeNotificationZNode, path, got[0])
            except MalformedZNodeError as e:
                log.error("%s Skipping ISR change notification: %s", s.prefix, e)
                continue
            partitions |= set(znode.topic_partitions())
        known = [tp for tp in partitions if s.ctx.partition_replicas(tp)]
        s.sync_leaderships(known)
        s.batch.add_update_metadata(s.ctx.live_or_shutting_down_broker_ids, known)
        for tp in known:
            reassignment.complete_reassignment_if_ready(s, tp)
    finally:
        s.zk.delete_paths(paths)


@handles(TopicUncleanLeaderElectionEnable)
def process_topic_unclean_leader_election_enable(s: FlowScope, event: TopicUncleanLeaderElectionEnable) -> None:
    """The topic's unclean.leader.election.enable was turned on: its offline partitions may be elected now."""
    if event.topic in s.ctx.all_topics and not s.ctx.is_topic_queued_for_deletion(event.topic):
        s.psm.trigger_online_partition_state_change(event.topic)
