"""Topic creation, partition expansion and the deletion trigger (Kafka's TopicChange,
PartitionModifications and TopicDeletion events)."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from actors.controller.context import ReplicaAssignment
from coordination import zkdata
from coordination.zkdata import TopicPartition

if TYPE_CHECKING:
    from actors.controller.controller import KafkaController

log = logging.getLogger(__name__)


def process_topic_change(c: KafkaController) -> None:
    topics = c.zk.get_all_topics()
    new_topics = topics - c.ctx.all_topics
    deleted = c.ctx.all_topics - topics
    for topic in deleted:  # removed behind our back (not through /admin/delete_topics)
        if not c.ctx.is_topic_queued_for_deletion(topic):
            c.ctx.remove_topic(topic)
    if not new_topics:
        return
    new_partitions = c.add_topics(new_topics)
    log.info("%s New topics: [%s], new partition replica assignment: %d partitions", c.prefix,
             ",".join(sorted(new_topics)), len(new_partitions))
    c.on_new_partition_creation(new_partitions)


def process_partition_modifications(c: KafkaController, topic: str) -> None:
    """New partitions in /brokers/topics/T are created; any other change to the assignment is undone."""
    if topic not in c.ctx.all_topics:
        return
    znode = c.zk.get_topic_znodes([topic]).get(topic)
    if znode is None:
        return
    assignment = znode.assignment()
    to_add = {TopicPartition(topic, p): r for p, r in assignment.items()
              if not c.ctx.partition_replicas(TopicPartition(topic, p))}
    changed = any(tuple(r) != c.ctx.partition_replicas(TopicPartition(topic, p))
                  for p, r in assignment.items() if TopicPartition(topic, p) not in to_add)
    removed = [tp for tp in c.ctx.partitions_for_topic(topic) if tp.partition not in assignment]
    if c.ctx.is_topic_queued_for_deletion(topic) and to_add:
        log.warning("%s Skipping adding partitions %s for topic %s since it is currently being deleted",
                    c.prefix, sorted(tp.partition for tp in to_add), topic)
        write_topic_assignment(c, topic)
        return
    if changed or removed:
        log.error("%s Partition assignment of %s changed or partitions were removed in ZooKeeper; restoring it",
                  c.prefix, topic)
        write_topic_assignment(c, topic)
    if to_add:
        log.info("%s New partitions to be added %s", c.prefix, sorted(to_add))
        for tp, replicas in to_add.items():
            c.ctx.update_partition_full_assignment(tp, ReplicaAssignment(tuple(replicas)))
        c.on_new_partition_creation(sorted(to_add))


def write_topic_assignment(c: KafkaController, topic: str) -> None:
    """Write the controller's view of the topic's assignment (RS, AR, RR per partition) to /brokers/topics/T."""
    parts = {tp.partition: c.ctx.partition_full_assignment(tp) for tp in c.ctx.partitions_for_topic(topic)}
    c.zk.set_topic_znode(topic, zkdata.TopicZNode(
        partitions={str(p): list(a.replicas) for p, a in sorted(parts.items())},
        adding_replicas={str(p): list(a.adding) for p, a in sorted(parts.items()) if a.adding},
        removing_replicas={str(p): list(a.removing) for p, a in sorted(parts.items()) if a.removing},
        topic_id=c.ctx.topic_ids.get(topic) or None), c.ctx.epoch_zk_version)


def process_topic_deletion(c: KafkaController) -> None:
    """Children of /admin/delete_topics: queue them (or drop the requests when deletion is disabled)."""
    requested = set(c.zk.children(zkdata.DELETE_TOPICS))
    unknown = requested - c.ctx.all_topics
    if unknown:
        log.warning("%s Ignoring request to delete non-existing topics %s", c.prefix, sorted(unknown))
        c.zk.delete_topic_deletions(unknown, c.ctx.epoch_zk_version)
    requested -= unknown
    if not requested:
        return
    if not c.config.delete_topic_enable:
        log.info("%s Removing %s since delete topic is disabled", c.prefix, sorted(requested))
        c.zk.delete_topic_deletions(requested, c.ctx.epoch_zk_version)
        return
    log.info("%s Starting topic deletion for topics %s", c.prefix, sorted(requested))
    reassigning = {tp.topic for tp in c.ctx.partitions_being_reassigned}
    c.deletion.enqueue_topics_for_deletion(requested, requested & reassigning, "topic reassignment in progress")
