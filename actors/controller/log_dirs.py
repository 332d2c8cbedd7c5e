"""A broker's failed log directory (KIP-112), as Kafka 2.8's controller handles it.

A broker whose log directory fails keeps running: it stops serving the replicas on that directory
(they answer KAFKA_STORAGE_ERROR) and writes /log_dir_event_notification/log_dir_event_N. The
controller (`process_log_dir_event_notification`) reads and deletes the notifications and sends a
LeaderAndIsr for every replica on those brokers (OnlineReplica: Kafka's onBrokerLogDirFailure), to
learn which are still online. The brokers' answers (`on_leader_and_isr_response`, for every
LeaderAndIsr, a failover's included) name the replicas on failed directories; the new ones go offline
as a dead broker's do (`brokers.on_replicas_become_offline`): partitions they led elect new leaders,
and they leave the ISRs. The controller remembers them per broker (`replicas_on_offline_dirs`: not
online though their broker is) until that broker dies or starts again.

How it fails: a malformed notification is reported and skipped, and deleted with the others; a
notification written while no controller is active is deleted at failover, whose LeaderAndIsr to
every live replica asks the same question.
"""
from __future__ import annotations

import logging

from actors.controller.brokers import on_replicas_become_offline
from actors.controller.decisions import log_dir_event_brokers, replicas_on_offline_dirs
from actors.controller.events import LogDirEventNotification
from actors.controller.flow import FlowScope, handles
from actors.controller.state_machines import ReplicaStateName as R
from actors.protocol import ControllerResponse
from coordination import zkdata
from coordination.errors import Errors, MalformedZNodeError
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("state.change.logger")


def _notification_paths(s: FlowScope) -> list[str]:
    return [f"{zkdata.LOG_DIR_EVENT_NOTIFICATION}/{n}" for n in sorted(s.zk.children(zkdata.LOG_DIR_EVENT_NOTIFICATION))]


def delete_log_dir_event_notifications(s: FlowScope) -> None:
    """At failover (Kafka's order): the LeaderAndIsr the failover sends every live replica finds them anyway."""
    s.zk.delete_paths(_notification_paths(s))


@handles(LogDirEventNotification)
def process_log_dir_event_notification(s: FlowScope, _event: LogDirEventNotification) -> None:
    paths = _notification_paths(s)
    if not paths:
        return
    try:
        notifications = []
        for path, got in s.zk.get_many(paths).items():
            if got is None:
                continue
            try:
                notifications.append(zkdata.decode(zkdata.LogDirEventNotificationZNode, path, got[0]))
            except MalformedZNodeError as e:
                log.error("%s Skipping log dir event notification: %s", s.prefix, e)
        broker_ids = [b for b in log_dir_event_brokers(notifications) if b in s.ctx.live_brokers]
        if broker_ids:
            on_broker_log_dir_failure(s, broker_ids)
    finally:
        s.zk.delete_paths(paths)


def on_broker_log_dir_failure(s: FlowScope, broker_ids: list[int]) -> None:
    """Kafka's onBrokerLogDirFailure: a LeaderAndIsr for all the brokers' replicas, to see which are online."""
    log.info("%s Handling log directory failure for brokers %s", s.prefix, ",".join(map(str, broker_ids)))
    s.rsm.handle_state_changes(s.ctx.replicas_on_brokers(set(broker_ids)), R.OnlineReplica)


def on_leader_and_isr_response(s: FlowScope, response: ControllerResponse) -> None:
    """Kafka's processLeaderAndIsrResponseReceived: the partitions a broker answered KAFKA_STORAGE_ERROR
    are on a failed log directory; those newly so go offline."""
    broker_id = response.broker_id
    if response.error_code != Errors.NONE or broker_id not in s.ctx.live_brokers:
        return  # a refused request says nothing of the partitions; a dead broker's replicas are offline already
    previous = s.ctx.replicas_on_offline_dirs.get(broker_id, frozenset())
    if not previous and not any(e.error_code == Errors.KAFKA_STORAGE_ERROR for e in response.partition_errors):
        return  # the usual answer, read once
    found = replicas_on_offline_dirs(previous, ((TopicPartition(e.topic, e.partition), e.error_code)
                                                for e in response.partition_errors))
    if found.current:
        s.ctx.replicas_on_offline_dirs[broker_id] = set(found.current)
    else:
        s.ctx.replicas_on_offline_dirs.pop(broker_id, None)
    if found.newly_offline:
        state_change_log.info("%s Mark replicas %s on broker %d as offline", s.prefix,
                              ",".join(map(str, sorted(found.newly_offline))), broker_id)
        on_replicas_become_offline(s, [(tp, broker_id) for tp in sorted(found.newly_offline)])

