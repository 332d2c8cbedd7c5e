"""Whether the cluster has settled, read from ZooKeeper and the brokers' caches: between faults, where a
fault waits for the cluster to recover from the last (`recovered`), and once the load has stopped, when
the run waits for ZooKeeper and every cache to agree, records that final state and reads every
partition back. The schedule, the samples and the end all read ZooKeeper's partition states as here.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
import ray

from actors.broker.group.group_records import GROUP_METADATA_TOPIC, partition_for
from actors.clients.load import now_ms, read_back, read_commits
from actors.cluster import LocalCluster
from actors.config import ClusterConfig
from actors.controller.changes import imbalanced_leaderships
from actors.records import CONSUMED, GROUP_COMMITS, RunWriter, tp_key
from coordination import zkdata
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition
from jobs.experiments.experiment import Experiment
from jobs.measures import rundir
from jobs.measures.check import check_replication

log = logging.getLogger(__name__)

READ_BACK_CHUNK = 100_000  # rows of the final read-back per call to the recorder


def recovered(assignment: dict[TopicPartition, list[int]], states: dict[str, rundir.PartitionLeadership],
              live: set[int], imbalance_percentage: int | None, awaited: dict[str, int]) -> bool:
    """Every replica's broker is up, every partition has all its replicas in its ISR, the controller
    has moved each `awaited` partition past the leader epoch given (it has handled the last kill:
    until then a killed broker may still look registered and in sync), and, unless
    `imbalance_percentage` is None (no auto leader rebalance), leadership is back as the rebalance
    leaves it (no broker over the imbalance ratio)."""
    leaders = {tp: s.leader for tp in assignment if (s := states.get(tp_key(tp.topic, tp.partition))) is not None}
    return len(leaders) == len(assignment) and all(
        set(replicas) <= live and set(states[tp_key(tp.topic, tp.partition)].isr) == set(replicas)
        for tp, replicas in assignment.items()) and all(
        key in states and states[key].leader_epoch > epoch for key, epoch in awaited.items()) and (
        imbalance_percentage is None or not imbalanced_leaderships(
            {tp: replicas[0] for tp, replicas in assignment.items()}, leaders, imbalance_percentage))


def zk_assignments(zk: KrayZkClient, skip: frozenset[str] = frozenset()) -> dict[TopicPartition, list[int]]:
    """Every topic's (the load's, those the admin actions made) but those `skip` names."""
    names = [name for name in zk.get_all_topics() if name not in skip]
    return {TopicPartition(name, p): replicas for name, topic in zk.get_topic_znodes(names).items()
            for p, replicas in topic.assignment().items()}


def zk_leaderships(zk: KrayZkClient, assignments: dict[TopicPartition, list[int]] | None = None
                   ) -> dict[str, rundir.PartitionLeadership]:
    return {tp_key(tp.topic, tp.partition): rundir.PartitionLeadership(
                leader=r.state.leader, leader_epoch=r.state.leader_epoch, isr=sorted(r.state.isr))
            for tp, r in zk.get_partition_states(assignments or zk_assignments(zk)).items()}


def repeated_records(final: pa.RecordBatch) -> dict[TopicPartition, list[tuple[int, str]]]:
    """(offset, record id) of each row of a read-back whose record id is at more than one offset."""
    ids = final.column("record_id")
    counts = pc.value_counts(ids)
    twice = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    out: dict[TopicPartition, dict[int, str]] = {}  # an offset read twice (the checker's) counted once
    for row in final.filter(pc.is_in(ids, value_set=twice)).select(["topic", "partition", "offset", "record_id"]
                                                                    ).to_pylist():
        out.setdefault(TopicPartition(row["topic"], row["partition"]), {})[row["offset"]] = row["record_id"]
    return {tp: list(rows.items()) for tp, rows in out.items()}


def stored_copies(zk: KrayZkClient, brokers: dict[int, ray.actor.ActorHandle],
                  repeated: dict[TopicPartition, list[tuple[int, str]]]) -> list[rundir.RecordCopy]:
    """Each copy of a record read back at more than one offset, with the producer its partition's leader
    stored it under. A leader that cannot be found or does not answer leaves its copies out: the checker
    counts those as duplicates."""
    try:
        leaders = zk.get_partition_states(repeated)
    except Exception as e:  # ZooKeeper busy: the copies stay unknown rather than the run's end failing
        log.warning("The leaders of the partitions with repeated records were not read: %s", e)
        return []
    refs = {tp: handle.stored_producers.remote(tp, [offset for offset, _ in rows]) for tp, rows in repeated.items()
            if (state := leaders.get(tp)) and (handle := brokers.get(state.state.leader))}
    copies = []
    for tp, ref in refs.items():
        try:
            stored = ray.get(ref, timeout=30)
        except Exception as e:
            log.warning("The leader of %s did not say who stored its repeated records: %s", tp, e)
            continue
        copies += [rundir.RecordCopy(topic=tp.topic, partition=tp.partition, offset=offset, record_id=record_id,
                                     producer_id=by[0], producer_epoch=by[1], sequence=by[2])
                   for (offset, record_id), by in zip(repeated[tp], stored) if by is not None]
    return copies


class Settling:
    """The waits for a settled cluster and what the run reads of it once settled. `lock` guards the
    cluster's broker handles, which the faults' threads change."""

    def __init__(self, experiment: Experiment, config: ClusterConfig, zk: KrayZkClient, cluster: LocalCluster,
                 lock: threading.Lock, writer: RunWriter, recorder, progress: Callable[[str], None]):
        self.exp, self.config, self.zk, self.cluster, self.lock = experiment, config, zk, cluster, lock
        self.writer, self.recorder, self.progress = writer, recorder, progress

    def wait_for_recovery(self, timeout_s: float, awaited: dict[str, int]
                          ) -> dict[str, rundir.PartitionLeadership] | None:
        """Until `recovered` holds (the partition states it read then), or None after timeout_s."""
        deadline = time.monotonic() + timeout_s
        controller = self.config.controller
        imbalance = controller.leader_imbalance_per_broker_percentage if controller.auto_leader_rebalance_enable \
            else None
        while True:
            try:
                assignment = zk_assignments(self.zk)
                states = zk_leaderships(self.zk)
                if recovered(assignment, states, set(self.zk.get_all_broker_ids()), imbalance, awaited):
                    return states
            except Exception as e:  # ZooKeeper busy for a moment: look again
                log.debug("Reading the cluster's state: %s", e)
            if time.monotonic() > deadline:
                return None
            time.sleep(0.5)

    def offsets_partition(self) -> TopicPartition:
        """The load group's partition of __consumer_offsets (made by the members' first FindCoordinator)."""
        topic = self.zk.get_topic_znodes([GROUP_METADATA_TOPIC]).get(GROUP_METADATA_TOPIC)
        if topic is None:
            raise RuntimeError(f"no {GROUP_METADATA_TOPIC} yet: the group has no coordinator")
        return TopicPartition(GROUP_METADATA_TOPIC, partition_for(self.exp.load.group, len(topic.partitions)))

    # -- once the load has stopped -------------------------------------------

    def converge(self) -> rundir.FinalState | None:
        """Until ZooKeeper and every cache agree (`_reading`), for settle_s at most: the last reading."""
        deadline, state, agreed = time.monotonic() + self.exp.settle_s, None, False
        while True:
            try:
                state, agreed = self._reading()
            except Exception as e:  # ZooKeeper or a broker busy for a moment: read again
                log.debug("Reading the final state: %s", e)
            if agreed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if not agreed:  # the checker reports what differs
            self.progress(f"Not converged after {self.exp.settle_s:.0f} s")
        return state

    def record_final_state(self, state: rundir.FinalState | None) -> None:
        """The final state (read once more if no reading succeeded), with every broker's logs on disk."""
        state = state or self._reading()[0]
        self.writer.document(rundir.FINAL_STATE, state.model_copy(update={"on_disk": self._on_disk()}))

    def read_back_all(self, partitions: list[TopicPartition], group: bool) -> TopicPartition | None:
        """Every partition from offset 0 and, for a `group`, its commits, to the run's recorder; the
        group's offsets partition."""
        self.progress("Reading every partition back from offset 0")
        final = read_back(self.config, partitions)
        ray.get([self.recorder.write_batches.remote(CONSUMED, [final.slice(start, READ_BACK_CHUNK)])
                 for start in range(0, final.num_rows, READ_BACK_CHUNK)])
        repeated = repeated_records(final)
        if repeated:
            with self.lock:
                handles = dict(self.cluster.brokers)
            copies = stored_copies(self.zk, handles, repeated)
            self.progress(f"{len(copies)} copies of records read back at more than one offset")
            ray.get(self.recorder.write.remote(rundir.COPIES, [c.model_dump_json() for c in copies]))
        if not group:
            return None
        self.progress(f"Reading group {self.exp.load.group}'s commits from {GROUP_METADATA_TOPIC}")
        offsets = self.offsets_partition()
        commits = read_commits(self.config, self.exp.load.group, offsets)
        ray.get(self.recorder.write.remote(GROUP_COMMITS, [c.model_dump_json() for c in commits]))
        return offsets

    def _reading(self) -> tuple[rundir.FinalState, bool]:
        """ZooKeeper and every broker's cache, and whether they agree at one moment with every broker
        back, every partition fully replicated and no admin work (reassignment, election, deletion)
        pending: ZooKeeper is read before and after the caches and
        must not have changed meanwhile (leaders may still be moving: the auto leader rebalance goes on)."""
        assignments = zk_assignments(self.zk)
        live, before = self.zk.get_all_broker_ids(), zk_leaderships(self.zk, assignments)
        caches = self._caches()
        after = zk_leaderships(self.zk, assignments)
        final = rundir.FinalState(ts_ms=now_ms(), live_brokers=live, zookeeper=after, caches=caches, assignments={
            tp_key(tp.topic, tp.partition): replicas for tp, replicas in assignments.items()},
            **self._admin_state())
        agreed = before == after and live == self.exp.broker_ids and len(caches) == len(live) \
            and all(c.partitions == after and c.brokers == live for c in caches.values()) \
            and check_replication(final).count == 0 and not final.reassigning \
            and not final.preferred_election_pending and not any(t.marked_for_deletion for t in final.topics.values())
        return final, agreed

    def _caches(self) -> dict[int, rundir.BrokerCache]:
        out = {}
        with self.lock:
            handles = dict(self.cluster.brokers)
        for broker_id, handle in handles.items():
            try:
                m = ray.get(handle.metadata.remote(), timeout=10)
            except Exception:  # not answering: absent from the final state, which the checker reports
                continue
            out[broker_id] = rundir.BrokerCache(
                controller_epoch=m["controller_epoch"], brokers=m["brokers"],
                partitions={tp_key(tp.topic, tp.partition): rundir.PartitionLeadership(
                    leader=v[0], leader_epoch=v[1], isr=sorted(v[2])) for tp, v in m["partitions"].items()})
        return out

    def _admin_state(self) -> dict:
        """What the admin actions' check reads at the end: every topic ZooKeeper knows of (its znode, its
        config, its deletion request), the pending reassignment and election."""
        zk = self.zk
        marked = set(zk.children(zkdata.DELETE_TOPICS))
        names = sorted(zk.get_all_topics() | marked | set(zk.children(zkdata.CONFIG_TOPICS)))
        znodes = zk.get_topic_znodes(names)
        configs = zk.get_many(zkdata.topic_config_path(name) for name in names)
        topics = {}
        for name in names:
            got = configs[zkdata.topic_config_path(name)]
            config = zkdata.decode(zkdata.TopicConfigZNode, zkdata.topic_config_path(name), got[0]).config \
                if got and got[0] else {}
            topics[name] = rundir.TopicFinal(partitions=len(znodes[name].partitions) if name in znodes else 0,
                                             config=config, marked_for_deletion=name in marked)
        reassigning = zk.get_znode(zkdata.ReassignPartitionsZNode, zkdata.REASSIGN_PARTITIONS)
        return dict(topics=topics,
                    reassigning=[tp_key(p.topic, p.partition) for p in reassigning.partitions] if reassigning else [],
                    preferred_election_pending=zk.get(zkdata.PREFERRED_REPLICA_ELECTION) is not None)

    def _on_disk(self) -> dict[int, list[str]]:
        """Each broker's partitions with a log on its disks, asked of all at once."""
        with self.lock:
            handles = dict(self.cluster.brokers)
        refs = {broker_id: handle.partitions_on_disk.remote() for broker_id, handle in handles.items()}
        on_disk = {}
        for broker_id, ref in refs.items():
            try:
                on_disk[broker_id] = ray.get(ref, timeout=10)
            except Exception:  # not answering: its logs are not known (the checker names the brokers it has)
                continue
        return on_disk
