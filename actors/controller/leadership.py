"""Leadership moves that are not failures: preferred replica elections (ZooKeeper- and API-triggered),
unclean elections the admin API asks for, the auto leader rebalance task, and the ISR change
notifications leaders write."""
from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import TYPE_CHECKING

from actors.controller import reassignment
from actors.controller.changes import (
    ElectionType,
    OfflineElection,
    PreferredElection,
    auto_rebalance_candidates,
    election_needed,
)
from actors.controller.state_machines import PartitionStateName as P
from actors.controller.zk_state_machines import leadership_from_record
from coordination import zkdata
from coordination.errors import ApiError, Errors, MalformedZNodeError
from coordination.zkdata import TopicPartition

if TYPE_CHECKING:
    from actors.controller.controller import KafkaController

log = logging.getLogger(__name__)


def elect_leaders(c: KafkaController, partitions, election_type: ElectionType,
                  trigger: str) -> dict[TopicPartition, ApiError | None]:
    """Kafka's onReplicaElection, after election_needed: None per partition elected, else its error. An
    unclean election (only the admin API asks for one) elects offline partitions from outside the ISR
    whatever unclean.leader.election.enable says, as Kafka's does."""
    valid, errors = election_needed(c.ctx, partitions, election_type)
    if valid:
        log.info("%s Starting replica leader election (%s) for partitions %s triggered by %s", c.prefix,
                 election_type.name, ",".join(map(str, valid[:20])) + ("..." if len(valid) > 20 else ""), trigger)
        preferred = election_type is ElectionType.PREFERRED
        failed = c.psm.handle_state_changes(valid, P.OnlinePartition,
                                            PreferredElection() if preferred else OfflineElection(allow_unclean=True))
        unavailable = Errors.PREFERRED_LEADER_NOT_AVAILABLE if preferred else Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
        errors.update({tp: ApiError(unavailable, reason) for tp, reason in failed.items()})
    return {tp: errors.get(tp) for tp in list(valid) + [tp for tp in errors if tp not in valid]}


def process_preferred_replica_election_znode(c: KafkaController) -> None:
    try:
        znode = c.zk.get_znode(zkdata.PreferredReplicaElectionZNode, zkdata.PREFERRED_REPLICA_ELECTION)
        if znode is None:
            return
        results = elect_leaders(c, [TopicPartition(p.topic, p.partition) for p in znode.partitions],
                                ElectionType.PREFERRED, "ZooKeeper")
        failed = {tp: e for tp, e in results.items() if e}
        if failed:
            log.warning("%s Preferred replica election failed for %s", c.prefix, failed)
    except MalformedZNodeError as e:
        log.error("%s Ignoring a malformed preferred replica election request: %s", c.prefix, e)
    finally:
        c.zk.delete_path_fenced(zkdata.PREFERRED_REPLICA_ELECTION, c.ctx.epoch_zk_version)


def process_replica_leader_election(c: KafkaController, partitions, election_type: ElectionType,
                                    reply: Future) -> None:
    """Kafka's ElectLeaders request: the partitions named, or all of them when None."""
    try:
        chosen = c.ctx.all_partitions() if partitions is None else [TopicPartition(*p) for p in partitions]
        reply.set_result(elect_leaders(c, chosen, election_type, "AdminClient"))
    except Exception as e:
        reply.set_exception(e)
        raise


def check_and_trigger_auto_leader_rebalance(c: KafkaController) -> None:
    candidates = auto_rebalance_candidates(c.ctx, c.config.leader_imbalance_per_broker_percentage)
    if candidates:
        elect_leaders(c, candidates, ElectionType.PREFERRED, "AutoTriggered")


def delete_isr_change_notifications(c: KafkaController) -> None:
    names = c.zk.children(zkdata.ISR_CHANGE_NOTIFICATION)
    c.zk.delete_paths_fenced([f"{zkdata.ISR_CHANGE_NOTIFICATION}/{n}" for n in names], c.ctx.epoch_zk_version)


def process_isr_change_notification(c: KafkaController) -> None:
    """Leaders changed ISRs in ZooKeeper: refresh those partitions and tell every broker."""
    names = sorted(c.zk.children(zkdata.ISR_CHANGE_NOTIFICATION))
    if not names:
        return
    paths = [f"{zkdata.ISR_CHANGE_NOTIFICATION}/{n}" for n in names]
    partitions: set[TopicPartition] = set()
    try:
        for path, got in c.zk.get_many(paths).items():
            if got is None:
                continue
            try:
                znode = zkdata.decode(zkdata.IsrChangeNotificationZNode, path, got[0])
            except MalformedZNodeError as e:
                log.error("%s Skipping ISR change notification: %s", c.prefix, e)
                continue
            partitions |= {TopicPartition(p.topic, p.partition) for p in znode.partitions}
        known = [tp for tp in partitions if c.ctx.partition_replicas(tp)]
        for tp, record in c.zk.get_partition_states(known).items():
            c.ctx.partition_leadership[tp] = leadership_from_record(record)
        c.batch.add_update_metadata(c.ctx.live_or_shutting_down_broker_ids, known)
        for tp in known:
            reassignment.process_partition_reassignment_isr_change(c, tp)
    finally:
        c.zk.delete_paths_fenced(paths, c.ctx.epoch_zk_version)
