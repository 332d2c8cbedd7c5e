"""Topic creation, partition expansion and the deletion trigger (Kafka's TopicChange,
PartitionModifications and TopicDeletion events)."""
from __future__ import annotations

import logging

from actors.controller.context import ReplicaAssignment
from actors.controller.decisions import partition_modification, topic_changes
from actors.controller.events import PartitionModifications, TopicChange, TopicDeletion
from actors.controller.flow import FlowScope, handles
from coordination import zkdata

log = logging.getLogger(__name__)


@handles(TopicChange)
def process_topic_change(s: FlowScope, _event: TopicChange) -> None:
    changes = topic_changes(s.ctx, s.zk.get_all_topics())
    for topic in changes.removed:
        s.ctx.remove_topic(topic)
    if not changes.new:
        return
    new_partitions = s.add_topics(set(changes.new))
    log.info("%s New topics: [%s], new partition replica assignment: %d partitions", s.prefix,
             ",".join(sorted(changes.new)), len(new_partitions))
    s.on_new_partition_creation(new_partitions)


@handles(PartitionModifications)
def process_partition_modifications(s: FlowScope, event: PartitionModifications) -> None:
    """New partitions in /brokers/topics/T are created; any other change to the assignment is undone
    (kray, not Kafka: Kafka leaves the edit in ZooKeeper and its own view apart, until its next
    controller loads the edit; here ZooKeeper and the context never disagree on an assignment)."""
    topic = event.topic
    if topic not in s.ctx.all_topics:
        return
    znode = s.zk.get_topic_znodes([topic]).get(topic)
    if znode is None:
        return
    change = partition_modification(s.ctx, topic, znode.assignment())
    if change.refused:
        log.warning("%s Skipping adding partitions %s for topic %s since it is currently being deleted",
                    s.prefix, list(change.refused), topic)
    elif change.restore:
        log.error("%s Partition assignment of %s changed or partitions were removed in ZooKeeper; restoring it",
                  s.prefix, topic)
    for tp, replicas in change.to_add.items():
        s.ctx.update_partition_full_assignment(tp, ReplicaAssignment(replicas))
    if change.restore:
        s.write_topic_assignment(topic)
    if change.to_add:
        log.info("%s New partitions to be added %s", s.prefix, sorted(change.to_add))
        s.on_new_partition_creation(sorted(change.to_add))


@handles(TopicDeletion)
def process_topic_deletion(s: FlowScope, _event: TopicDeletion) -> None:
    """Children of /admin/delete_topics: queue them (or drop the requests when deletion is disabled)."""
    requested = set(s.zk.children(zkdata.DELETE_TOPICS))
    unknown = requested - s.ctx.all_topics
    if unknown:
        log.warning("%s Ignoring request to delete non-existing topics %s", s.prefix, sorted(unknown))
    requested -= unknown
    dropped = unknown | (requested if not s.config.delete_topic_enable else set())
    if requested and not s.config.delete_topic_enable:
        log.info("%s Removing %s since delete topic is disabled", s.prefix, sorted(requested))
    if dropped:
        s.zk.delete_paths([zkdata.delete_topic_path(t) for t in sorted(dropped)])
    if not requested or not s.config.delete_topic_enable:
        return
    log.info("%s Starting topic deletion for topics %s", s.prefix, sorted(requested))
    reassigning = {tp.topic for tp in s.ctx.partitions_being_reassigned}
    s.deletion.enqueue_topics_for_deletion(requested, requested & reassigning, "topic reassignment in progress")
