"""What a newly elected controller does once its watches are set (seed 000's on_controller_failover,
Kafka 2.8's onControllerFailover order): load the context from ZooKeeper, tell every broker who is
alive, start both state machines, then resume reassignments, deletions and preferred elections."""
from __future__ import annotations

import logging

from actors.controller import leadership, reassignment
from actors.controller.flow import FlowScope

log = logging.getLogger(__name__)


def on_controller_failover(s: FlowScope) -> None:
    leadership.delete_isr_change_notifications(s)
    s.initialize_context()
    s.deletion.init()
    for broker_id in s.ctx.live_brokers:
        s.links.add_broker(broker_id)
    if s.detector is not None:
        s.detector.watch(set(s.ctx.live_brokers))
    # the live brokers first, in a request of their own: brokers need them before LeaderAndIsr (Kafka's order)
    s.batch.add_update_metadata(s.ctx.live_or_shutting_down_broker_ids, [])
    s.send_now()
    s.rsm.startup()
    s.psm.startup()
    reassignment.initialize_partition_reassignments(s)
    s.deletion.resume_deletions()
    leadership.process_preferred_replica_election_znode(s)
    log.info("%s Controller failover complete: %d live brokers, %d topics, %d partitions", s.prefix,
             len(s.ctx.live_brokers), len(s.ctx.all_topics), s.ctx.partition_count())
