"""What the controller does when brokers come, go, or ask to shut down (seed 004, Kafka's
onBrokerStartup / onBrokerFailure / onReplicasBecomeOffline / doControlledShutdown)."""
from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import TYPE_CHECKING

from actors.controller import reassignment
from actors.controller.changes import ControlledShutdownElection
from actors.controller.state_machines import PartitionStateName as P, ReplicaStateName as R
from coordination.errors import Errors

if TYPE_CHECKING:
    from actors.controller.controller import KafkaController

log = logging.getLogger(__name__)


def process_broker_change(c: KafkaController) -> None:
    """/brokers/ids changed: sort brokers into new, dead and bounced (re-registered with a newer epoch)."""
    ctx = c.ctx
    current = c.zk.get_all_broker_ids()
    registrations = c.read_brokers(current)
    known = dict(ctx.live_broker_epochs)
    new = {b for b in registrations if b not in known}
    bounced = {b for b in registrations if b in known and registrations[b][1] > known[b]}
    dead = set(known) - set(registrations)
    if not (new or bounced or dead):
        return
    log.info("%s Newly added brokers: %s, deleted brokers: %s, bounced brokers: %s, all live brokers: %s",
             c.prefix, sorted(new), sorted(dead), sorted(bounced), sorted(registrations))
    if dead | bounced:
        c.begin_timeline("broker_failure", sorted(dead | bounced))
    for b in dead | bounced:
        c.channel.remove_broker(b)
    ctx.remove_live_brokers(dead | bounced)
    if dead | bounced:
        on_broker_failure(c, dead | bounced)
    ctx.add_live_brokers({b: registrations[b] for b in new | bounced})
    for b in new | bounced:
        c.channel.add_broker(b)
    if new | bounced:
        on_broker_startup(c, new | bounced)
    if c.detector is not None:
        c.detector.watch(set(ctx.live_brokers), fresh=new | bounced)


def process_broker_actor_died(c: KafkaController, broker_id: int, state: str) -> None:
    """Ray says broker N's process died. ZooKeeper stays the source of truth: remove the registration
    of the incarnation we know (not a newer one), then handle it as the /brokers/ids watch would."""
    epoch = c.ctx.live_broker_epochs.get(broker_id)
    if epoch is None:
        return  # already handled (its session expired first, or the watch fired)
    if c.zk.delete_broker_registration(broker_id, epoch, c.ctx.epoch_zk_version):
        log.info("%s Ray reports broker %d's actor %s: removed its registration (broker epoch %d)", c.prefix,
                 broker_id, state, epoch)
    process_broker_change(c)


def on_broker_failure(c: KafkaController, dead: set[int]) -> None:
    """Replicas on the dead brokers go offline: their leaderships move, their ISR membership ends.

    When leaders died, the brokers first hear who is alive, before the elections (kray, not Kafka,
    which tells them with the elections' UpdateMetadata): meanwhile they answer clients' metadata
    requests for those partitions with LEADER_NOT_AVAILABLE, so a client keeps asking and finds the
    new leader as soon as it is known, rather than waiting on the dead one until its next periodic
    refresh (librdkafka's comes once a second)."""
    c.ctx.shutting_down_broker_ids -= dead
    if any(l.leader_and_isr.leader in dead for l in c.ctx.partition_leadership.values()):
        c.batch.add_update_metadata(c.ctx.live_or_shutting_down_broker_ids, [])
        c.channel.send(c.batch.build(c.ctx))
    on_replicas_become_offline(c, c.ctx.replicas_on_brokers(dead))


def on_replicas_become_offline(c: KafkaController, replicas: list) -> None:
    ctx = c.ctx
    for_deletion = [k for k in replicas if ctx.is_topic_queued_for_deletion(k[0].topic)]
    others = [k for k in replicas if not ctx.is_topic_queued_for_deletion(k[0].topic)]
    offline_leaders = ctx.partitions_with_offline_leader()
    c.psm.handle_state_changes(offline_leaders, P.OfflinePartition)
    c.psm.trigger_online_partition_state_change()
    c.rsm.handle_state_changes(others, R.OfflineReplica)
    if for_deletion:
        c.rsm.handle_state_changes(for_deletion, R.OfflineReplica)
        c.deletion.fail_replica_deletion(for_deletion)
    if not offline_leaders:  # no LeaderAndIsr went out: tell every broker who is alive
        c.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, [])


def on_broker_startup(c: KafkaController, new: set[int]) -> None:
    """UpdateMetadata to all, the new brokers' replicas Online, New/Offline partitions elected,
    and reassignments and deletions that were waiting for these brokers resumed."""
    ctx = c.ctx
    c.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids - new, [])
    c.batch.add_update_metadata(new, list(ctx.partition_leadership))
    replicas = ctx.replicas_on_brokers(new)
    c.rsm.handle_state_changes(replicas, R.OnlineReplica)
    c.psm.trigger_online_partition_state_change()
    reassignment.maybe_resume_reassignments(c, lambda a: any(r in new for r in a.target_replicas))
    to_resume = {tp.topic for tp, _ in replicas if ctx.is_topic_queued_for_deletion(tp.topic)}
    if to_resume:
        c.deletion.resume_deletion_for_topics(to_resume)


def process_controlled_shutdown(c: KafkaController, broker_id: int, broker_epoch: int, reply: Future) -> None:
    """Move the broker's leaderships away (controlled-shutdown election), take it out of the ISRs it
    follows, and answer with the partitions it still leads (empty when it may stop)."""
    ctx = c.ctx
    try:
        if broker_id not in ctx.live_or_shutting_down_broker_ids:
            reply.set_result(Errors.BROKER_NOT_AVAILABLE)
            return
        if broker_epoch < ctx.live_broker_epochs.get(broker_id, -1):
            reply.set_result(Errors.STALE_BROKER_EPOCH)
            return
        ctx.shutting_down_broker_ids.add(broker_id)
        log.info("%s Shutting down broker %d", c.prefix, broker_id)
        to_act_on = [tp for tp in ctx.partitions_on_broker(broker_id)
                     if len(ctx.partition_replicas(tp)) > 1 and tp in ctx.partition_leadership
                     and not ctx.is_topic_queued_for_deletion(tp.topic)]
        led = [tp for tp in to_act_on if ctx.partition_leadership[tp].leader_and_isr.leader == broker_id]
        followed = [tp for tp in to_act_on if tp not in set(led)]
        c.psm.handle_state_changes(led, P.OnlinePartition, ControlledShutdownElection())
        for tp in followed:
            c.batch.add_stop_replica(broker_id, tp, delete=False)
        c.rsm.handle_state_changes([(tp, broker_id) for tp in followed], R.OfflineReplica)
        remaining = sorted(tp for tp, l in ctx.partition_leadership.items()
                           if l.leader_and_isr.leader == broker_id and len(ctx.partition_replicas(tp)) > 1
                           and not ctx.is_topic_queued_for_deletion(tp.topic))
        log.info("%s Controlled shutdown of broker %d: %d leaderships moved, %d partitions remain",
                 c.prefix, broker_id, len(led) - len(remaining), len(remaining))
        reply.set_result(remaining)
    except Exception as e:  # the broker must get an answer whatever happens
        reply.set_exception(e)
        raise
