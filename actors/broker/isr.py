"""The leader's ISR changes in ZooKeeper (Kafka's Partition.shrinkIsr / expandIsr with the
ZooKeeper-mode AlterIsr, and ReplicaManager's ISR change propagation).

A change is written to the partition state znode conditionally on the zkVersion the
leader was given: if the controller or another leader wrote since, the write fails
and this broker stops acting as that partition's leader (no produce, no fetches
served) until a LeaderAndIsr brings it a new state. An expansion also checks, in the
same multi, that the joining broker's registration is the incarnation whose fetches
earned it (its czxid is the broker epoch: KIP-903): the controller reads ISRs only after
a dead broker's registration is gone, so an expansion that would land after that read
(and keep a dead broker in the ISR, stalling acks=all, or put its next incarnation in
before it fetched) is refused instead (the ZooKeeper-mode form of KIP-841's and
KIP-903's refusal of ineligible replicas).
Changed partitions are announced in batches under /isr_change_notification, where
the controller picks them up and sends UpdateMetadata.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, TypeVar

from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError

from actors.broker.replica_manager import ReplicaManager
from coordination import zkdata
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)
T = TypeVar("T")


class IsrManager:
    """ISR writes go one at a time on a thread of their own (ZooKeeper calls block); what a partition
    is and becomes is read and applied on the broker's event loop, through `on_loop`."""

    def __init__(self, broker_id: int, zk: KrayZkClient, replica_manager: ReplicaManager,
                 on_loop: Callable[[Callable[[], T]], T]):
        self.broker_id, self.zk, self.rm, self.on_loop = broker_id, zk, replica_manager, on_loop
        self._lock = threading.Lock()
        self._changed: set[TopicPartition] = set()
        self._expanding: set[tuple[TopicPartition, int]] = set()  # queued or being written (Kafka's isInflight)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"isr-writer-{broker_id}")  # one change at a time:
        # two at once would fence each other

    def shrink(self, now_ms: int, replica_lag_time_max_ms: int) -> None:
        """Kafka's isr-expiration task (from the scheduler's thread)."""
        for tp in self.on_loop(lambda: self.rm.isr_shrinks(now_ms, replica_lag_time_max_ms)):
            self._writer.submit(self._change, tp, lambda p: p.isr_to_shrink(now_ms, replica_lag_time_max_ms,
                                                                            self.rm.last_session_fetch),
                                "Shrinking").result()

    def expand(self, partitions: list[TopicPartition], replica_id: int) -> list[Future]:
        """Take back a follower whose fetch found it caught up. Checked again on the writer's thread, on
        the state the previous change left, with the metadata as it is then: the follower's live
        incarnation must be the one that fetched (KIP-903), so a fetch that was long-polling here when
        its broker died brings neither the dead broker nor its next incarnation into the ISR (KIP-841's
        check). Called on the loop: the writes go on the writer's thread (their futures, for whoever
        wants to wait)."""
        with self._lock:  # one expansion per partition and follower at a time: each fetch asks again
            partitions = [tp for tp in partitions if (tp, replica_id) not in self._expanding]
            self._expanding.update((tp, replica_id) for tp in partitions)
        return [self._writer.submit(self._change, tp,
                                    lambda p: p.isr_to_expand(replica_id, self.rm.alive_broker_epoch(replica_id)),
                                    "Expanding", replica_id)
                for tp in partitions]

    def _change(self, tp: TopicPartition, new_isr, verb: str, joining: int | None = None) -> None:
        """Write `new_isr(partition)` (computed again here, on the state the previous change left); with
        `joining`, only while the incarnation of that broker which the metadata has alive (the one whose
        fetches earned it) is registered, and with the high watermark waiting for it meanwhile."""
        partition = None

        def decide():
            isr = new_isr(partition)
            if joining is None:
                return isr, partition.state, None
            return partition.expanding(isr), partition.state, self.rm.alive_broker_epoch(joining)
        try:
            partition = self.on_loop(lambda: self.rm.partition(tp))
            if partition is None:
                return
            isr, state, epoch = self.on_loop(decide)
            if isr is not None:
                self._write(tp, partition, state, isr, verb, joining, epoch)
        except Exception:  # a ZooKeeper hiccup: the next fetch or check tries again
            log.exception("[Partition %s broker=%d] %s ISR failed", tp, self.broker_id, verb)
            if partition is not None:
                self.on_loop(partition.isr_change_failed)
        finally:
            with self._lock:
                self._expanding.discard((tp, joining))

    def close(self) -> None:
        self._writer.shutdown(wait=False, cancel_futures=True)

    def _write(self, tp: TopicPartition, partition, state, isr: tuple[int, ...], verb: str,
               joining: int | None, broker_epoch: int | None) -> None:
        data = zkdata.PartitionStateZNode.encode_fields(state.leader, state.leader_epoch, state.controller_epoch, isr)
        try:
            stat = self._set_partition_state(tp, data, state.zk_version, joining, broker_epoch)
        except _NotRegistered:
            self.on_loop(partition.isr_change_failed)
            log.info("[Partition %s broker=%d] Not expanding ISR from %s: broker %d is no longer registered with "
                     "broker epoch %s", tp, self.broker_id, ",".join(map(str, state.isr)), joining, broker_epoch)
            return
        except (BadVersionError, NoNodeError):
            self.on_loop(partition.isr_change_failed)
            if self.on_loop(lambda: partition.stop_leading(state.leader_epoch)):
                log.warning("[Partition %s broker=%d] Cached zkVersion %d not equal to that in zookeeper: not "
                            "updating the ISR, and no longer acting as leader until a LeaderAndIsr arrives",
                            tp, self.broker_id, state.zk_version)
            return
        self.on_loop(lambda: partition.update_isr(isr, stat.version, state.leader_epoch))
        self.rm.events.isr_change(tp, state.leader_epoch, isr, f"{verb} from {','.join(map(str, state.isr))}")
        log.info("[Partition %s broker=%d] %s ISR from %s to %s; zkVersion updated to %d", tp, self.broker_id, verb,
                 ",".join(map(str, state.isr)), ",".join(map(str, isr)), stat.version)
        with self._lock:
            self._changed.add(tp)

    def _set_partition_state(self, tp: TopicPartition, data: bytes, version: int, joining: int | None,
                             broker_epoch: int | None):
        """The conditional write; with `joining`, only while that broker's registration is the one of
        `broker_epoch`. A multi cannot check a czxid: the registration is read first and the multi
        checks that it still exists with the version read (always 0: a registration is never
        rewritten). One deleted and made again within the milliseconds between the two passes, as a
        new incarnation would need a new session first; its new stat."""
        path = zkdata.partition_state_path(tp)
        if joining is None:
            return self.zk.kazoo.set(path, data, version=version)
        registration = self.zk.kazoo.exists(zkdata.broker_path(joining))
        if registration is None or registration.czxid != broker_epoch:
            raise _NotRegistered
        txn = self.zk.kazoo.transaction()
        txn.check(zkdata.broker_path(joining), registration.version)
        txn.set_data(path, data, version=version)
        registered, written = txn.commit()
        if isinstance(registered, NoNodeError):
            raise _NotRegistered
        if isinstance(registered, Exception) and not isinstance(registered, RolledBackError):
            raise registered  # the check failed otherwise (no access?): as a failed set would
        if isinstance(written, Exception):
            raise written
        return written

    def propagate(self) -> None:
        """One /isr_change_notification/isr_change_N znode for everything changed since the last one.
        The changes are forgotten once the znode is written (as Kafka clears its isrChangeSet only
        then): a failed write leaves them for the next round, or no UpdateMetadata would carry them."""
        with self._lock:
            changed = sorted(self._changed)
        if changed:
            self.zk.kazoo.create(f"{zkdata.ISR_CHANGE_NOTIFICATION}/{zkdata.ISR_CHANGE_PREFIX}",
                                 zkdata.IsrChangeNotificationZNode(partitions=[
                                     zkdata.PartitionRef(topic=tp.topic, partition=tp.partition) for tp in changed
                                 ]).encode(), sequence=True)
            with self._lock:
                self._changed.difference_update(changed)


class _NotRegistered(Exception):
    """The broker an ISR expansion would take in has no registration any more."""
