"""An experiment's admin actions (ActionSpec), done through the same admin calls as `kray topics` and
`kray reassign` (coordination/admin.py) while faults strike: each is recorded with what it asked for
(ActionRecord), and `kray check` verifies at the end that the cluster did it (jobs/measures/check.py:
check_actions).
"""
from __future__ import annotations

import random
import time

from coordination import admin, zkdata
from coordination.errors import KrayError
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition
from jobs.experiments.experiment import ActionSpec
from jobs.measures.rundir import ActionKind, ActionRecord

UNCLEAN = {"unclean.leader.election.enable": "true"}


def perform(zk: KrayZkClient, spec: ActionSpec, action_id: int, broker_ids: list[int],
            rng: random.Random) -> ActionRecord:
    """Do one action; its record. A refusal (bad input, another reassignment or election in progress)
    or any other error is recorded as the action's error, for the check to report: the schedule asked
    for it."""
    started = time.time() * 1000
    expected: dict = {}
    error = None
    topic = spec.topic
    try:
        match spec.action:
            case ActionKind.CREATE_TOPIC:
                admin.create_topic(zk, topic, spec.partitions, spec.replication_factor, spec.config)
                expected = {"partitions": spec.partitions, "config": spec.config}
            case ActionKind.DELETE_TOPIC:
                admin.delete_topic(zk, topic)
            case ActionKind.ADD_PARTITIONS:
                admin.add_partitions(zk, topic, spec.partitions)
                expected = {"partitions": spec.partitions}
            case ActionKind.REASSIGN_PARTITIONS:
                target = {TopicPartition(topic, p): r for p, r in spec.replicas.items()} if spec.replicas else \
                    admin.generate_assignment(zk, [topic], broker_ids, rng)[1]
                admin.reassign_partitions(zk, zkdata.ReassignPartitionsZNode(partitions=[
                    zkdata.PartitionReplicas(topic=tp.topic, partition=tp.partition, replicas=r)
                    for tp, r in sorted(target.items())]))
                expected = {"replicas": {tp.partition: r for tp, r in target.items()}}
            case ActionKind.PREFERRED_ELECTION:
                znode = zk.get_topic_znodes([topic]).get(topic)
                if znode is None:
                    raise KrayError(f"Topic '{topic}' does not exist as expected")
                admin.preferred_replica_election(zk, [TopicPartition(topic, p) for p in sorted(znode.assignment())])
            case ActionKind.UNCLEAN_ELECTION:
                admin.alter_topic_config(zk, topic, UNCLEAN, [])
                expected = {"config": UNCLEAN}
            case ActionKind.ALTER_CONFIG:
                admin.alter_topic_config(zk, topic, spec.config, [])
                expected = {"config": spec.config}
    except Exception as e:  # refused (KrayError), or ZooKeeper's own error: recorded, never lost with its thread
        error = f"{type(e).__name__}: {e}"
    return ActionRecord(action_id=action_id, kind=spec.action, topic=topic, started_ms=started,
                        done_ms=time.time() * 1000, error=error, **expected)
