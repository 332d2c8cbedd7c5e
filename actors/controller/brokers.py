"""What the controller does when brokers come, go, or ask to shut down (seed 004, Kafka's
onBrokerStartup / onBrokerFailure / onReplicasBecomeOffline / doControlledShutdown)."""
from __future__ import annotations

import logging

from actors.controller import reassignment
from actors.controller.changes import ControlledShutdownElection
from actors.controller.decisions import broker_changes, controlled_shutdown_plan, partitions_still_led
from actors.controller.events import BrokerActorDied, BrokerChange, ControlledShutdown, RequestSenderDied
from actors.controller.flow import FlowScope, handles
from actors.controller.request_batch import stop_replica_epoch
from actors.controller.state_machines import PartitionStateName as P, ReplicaStateName as R
from coordination.errors import Errors

log = logging.getLogger(__name__)

UNKNOWN_BROKER_EPOCH = -1


@handles(BrokerChange)
def process_broker_change(s: FlowScope, _event: BrokerChange | None = None) -> None:
    """/brokers/ids changed: sort brokers into new, dead and bounced (re-registered with a newer epoch).
    Failures first (kray, not Kafka, which starts new brokers first): the dead brokers' partitions are
    elected before the new brokers' work."""
    ctx = s.ctx
    registrations = s.read_brokers(s.zk.get_all_broker_ids())
    changes = broker_changes(ctx.live_broker_epochs, {b: epoch for b, (_, epoch) in registrations.items()})
    if not changes:
        return
    log.info("%s Newly added brokers: %s, deleted brokers: %s, bounced brokers: %s, all live brokers: %s",
             s.prefix, sorted(changes.new), sorted(changes.dead), sorted(changes.bounced), sorted(registrations))
    if changes.failed:
        s.begin_timeline("broker_failure", sorted(changes.failed))
        for b in changes.failed:
            s.links.remove_broker(b)
        ctx.remove_live_brokers(set(changes.failed))
        on_broker_failure(s, set(changes.failed))
    if changes.started:
        ctx.add_live_brokers({b: registrations[b] for b in changes.started})
        for b in changes.started:
            s.links.add_broker(b)
        on_broker_startup(s, set(changes.started))
    if s.detector is not None:
        s.detector.watch(set(ctx.live_brokers), fresh=set(changes.started))


@handles(BrokerActorDied)
def process_broker_actor_died(s: FlowScope, event: BrokerActorDied) -> None:
    """Ray says broker N's process died. ZooKeeper stays the source of truth: remove the registration
    of the incarnation we know (not a newer one), then handle it as the /brokers/ids watch would."""
    epoch = s.ctx.live_broker_epochs.get(event.broker_id)
    if epoch is None:
        return  # already handled (its session expired first, or the watch fired)
    if s.zk.delete_broker_registration(event.broker_id, epoch):
        log.info("%s Ray reports broker %d's actor %s: removed its registration (broker epoch %d)", s.prefix,
                 event.broker_id, event.state, epoch)
    process_broker_change(s)


@handles(RequestSenderDied)
def process_request_sender_died(s: FlowScope, event: RequestSenderDied) -> None:
    resent = s.links.restart_sender(event.broker_id, event.sender)
    if resent is not None:
        log.info("%s Started a new RequestSender to broker %d; %d unanswered requests sent again",
                 s.prefix, event.broker_id, resent)


def on_broker_failure(s: FlowScope, dead: set[int]) -> None:
    """Replicas on the dead brokers go offline: their leaderships move, their ISR membership ends.

    When leaders died, the brokers first hear who is alive, before the elections (kray, not Kafka,
    which tells them with the elections' UpdateMetadata): meanwhile they answer clients' metadata
    requests for those partitions with LEADER_NOT_AVAILABLE, so a client keeps asking and finds the
    new leader as soon as it is known, rather than waiting on the dead one until its next periodic
    refresh (librdkafka's comes once a second)."""
    s.ctx.shutting_down_broker_ids -= dead
    for b in dead:  # KIP-112: a dead broker's replicas are all offline; its next incarnation answers afresh
        s.ctx.replicas_on_offline_dirs.pop(b, None)
    if any(l.leader_and_isr.leader in dead for l in s.ctx.partition_leadership.values()):
        s.batch.add_update_metadata(s.ctx.live_or_shutting_down_broker_ids, [])
        s.send_now()
    on_replicas_become_offline(s, s.ctx.replicas_on_brokers(dead))


def on_replicas_become_offline(s: FlowScope, replicas: list) -> None:
    """Kafka's onReplicasBecomeOffline; replicas of topics being deleted go Offline before their deletion
    fails (kray, not Kafka: Kafka hands them to failReplicaDeletion as they are, and an OnlineReplica's
    move to ReplicaDeletionIneligible is invalid, logged and skipped)."""
    ctx = s.ctx
    for_deletion = [k for k in replicas if ctx.is_topic_queued_for_deletion(k[0].topic)]
    others = [k for k in replicas if not ctx.is_topic_queued_for_deletion(k[0].topic)]
    offline_leaders = ctx.partitions_with_offline_leader()
    s.psm.handle_state_changes(offline_leaders, P.OfflinePartition)
    s.psm.trigger_online_partition_state_change()
    s.rsm.handle_state_changes(others, R.OfflineReplica)
    if for_deletion:
        s.rsm.handle_state_changes(for_deletion, R.OfflineReplica)
        s.deletion.fail_replica_deletion(for_deletion)
    if not offline_leaders:  # no LeaderAndIsr went out: tell every broker who is alive
        s.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, [])


def on_broker_startup(s: FlowScope, new: set[int]) -> None:
    """UpdateMetadata to all (every partition to the new brokers), the new brokers' replicas Online, New/Offline partitions elected,
    and reassignments and deletions that were waiting for these brokers resumed."""
    ctx = s.ctx
    for b in new:  # KIP-112: its LeaderAndIsr answers tell which of its replicas are on failed directories
        ctx.replicas_on_offline_dirs.pop(b, None)
    s.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids - new, [])
    s.batch.add_update_metadata(new, ctx.partitions_with_leaders())
    s.send_now()  # in a request of their own, before the LeaderAndIsr that follow (Kafka's order)
    replicas = ctx.replicas_on_brokers(new)
    s.rsm.handle_state_changes(replicas, R.OnlineReplica)
    s.psm.trigger_online_partition_state_change()
    reassignment.maybe_resume_reassignments(s, lambda a: any(r in new for r in a.target_replicas))
    to_resume = {tp.topic for tp, _ in replicas if ctx.is_topic_queued_for_deletion(tp.topic)}
    if to_resume:
        s.deletion.resume_deletion_for_topics(to_resume)


@handles(ControlledShutdown)
def process_controlled_shutdown(s: FlowScope, event: ControlledShutdown) -> None:
    """Move the broker's leaderships away (controlled-shutdown election), take it out of the ISRs it
    follows, and answer with the partitions it still leads (empty when it may stop)."""
    ctx, broker_id, reply = s.ctx, event.broker_id, event.reply
    try:
        # -1: a broker that does not know its epoch (KIP-380's compatibility), not checked, as in Kafka
        if event.broker_epoch != UNKNOWN_BROKER_EPOCH and event.broker_epoch < ctx.live_broker_epochs.get(broker_id, -1):
            reply.set_result(Errors.STALE_BROKER_EPOCH)
            return
        if broker_id not in ctx.live_or_shutting_down_broker_ids:
            reply.set_result(Errors.BROKER_NOT_AVAILABLE)
            return
        ctx.shutting_down_broker_ids.add(broker_id)
        log.info("%s Shutting down broker %d", s.prefix, broker_id)
        plan = controlled_shutdown_plan(ctx, broker_id)
        s.psm.handle_state_changes(plan.led, P.OnlinePartition, ControlledShutdownElection())
        for tp in plan.followed:
            s.batch.add_stop_replica(broker_id, tp, delete=False, leader_epoch=stop_replica_epoch(ctx, tp))
        s.rsm.handle_state_changes([(tp, broker_id) for tp in plan.followed], R.OfflineReplica)
        remaining = partitions_still_led(ctx, broker_id)
        log.info("%s Controlled shutdown of broker %d: %d leaderships moved, %d partitions remain",
                 s.prefix, broker_id, len(plan.led) - len(remaining), len(remaining))
        reply.set_result(remaining)
    except Exception as e:  # the broker must get an answer whatever happens
        reply.set_exception(e)
        raise
