"""What a newly elected controller does (seed 000's on_controller_failover, Kafka 2.8's
onControllerFailover order): set its watches, load the context from ZooKeeper, tell every broker who is
alive, start both state machines, then resume reassignments, deletions and preferred elections."""
from __future__ import annotations

import logging
from typing import Callable

from actors.controller import leadership, log_dirs, reassignment
from actors.controller.flow import FlowScope
from actors.controller.timeline import Laps

log = logging.getLogger(__name__)


def on_controller_failover(s: FlowScope, laps: Laps, register_watches: Callable[[], None] = lambda: None) -> None:
    """`laps`: the steps since the election, each step's time in the closing log line."""
    s.initialize_live_brokers()
    for broker_id in s.ctx.live_brokers:
        s.links.add_broker(broker_id)
    laps.lap("live brokers")
    # the live brokers first, in a request of their own: brokers need them before LeaderAndIsr (Kafka's
    # order). Sent before the watches are set and the partitions read (kray, not Kafka, which does both
    # first; the request names no partition): a broker that died with the controller it hosted stops
    # being named leader in every broker's Metadata answers at once, so clients ask again for the new
    # leader instead of waiting for their next scan (the watches cost 7-39 ms at 47 partitions). A broker
    # that registers or dies between this read and the watch is not missed: the watch fires once when set.
    s.batch.add_update_metadata(s.ctx.live_or_shutting_down_broker_ids, [])
    s.send_now()
    laps.lap("live brokers sent")
    register_watches()
    laps.lap("watches")
    leadership.delete_isr_change_notifications(s)
    log_dirs.delete_log_dir_event_notifications(s)
    laps.lap("isr and log dir notifications")
    s.initialize_context()
    s.deletion.init()
    laps.lap("context")
    if s.detector is not None:
        s.detector.watch(set(s.ctx.live_brokers))
    laps.lap("detector")
    s.rsm.startup()
    laps.lap("replica state machine")
    s.psm.startup()
    laps.lap("partition state machine")
    reassignment.initialize_partition_reassignments(s)
    s.deletion.resume_deletions()
    leadership.process_preferred_replica_election_znode(s)
    laps.lap("reassignments, deletions, preferred elections")
    log.info("%s Controller failover complete: %d live brokers, %d topics, %d partitions (%s)", s.prefix,
             len(s.ctx.live_brokers), len(s.ctx.all_topics), s.ctx.partition_count(), laps)
