"""The leader's ISR changes in ZooKeeper (Kafka's Partition.shrinkIsr / expandIsr with the
ZooKeeper-mode AlterIsr, and ReplicaManager's ISR change propagation).

A change is written to the partition state znode conditionally on the zkVersion the
leader was given: if the controller wrote since, the write is refused and, as Kafka's leader
does, this one gives up the change and keeps leading with no further ISR change until the
LeaderAndIsr that follows the controller's write brings it the new state. An expansion also checks, in the
same multi, that the joining broker's registration is the incarnation whose fetches
earned it (its czxid is the broker epoch: KIP-903): the controller reads ISRs only after
a dead broker's registration is gone, so an expansion that would land after that read
(and keep a dead broker in the ISR, stalling acks=all, or put its next incarnation in
before it fetched) is refused instead (the ZooKeeper-mode form of KIP-841's and
KIP-903's refusal of ineligible replicas). The partitions one fetch (or one expiration check) changes
go together, in ZooKeeper multis of up to MULTI_OPS partitions, each write still conditional on its
own zkVersion: a broker back after a failure rejoins a thousand ISRs in a few writes rather than a
thousand one after another (Kafka 2.8 writes them from its request handler threads, several at once).
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
from coordination.errors import MalformedZNodeError
from coordination.zkclient import Attempts, KrayZkClient
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)
T = TypeVar("T")
MULTI_OPS = 500  # partition states per ZooKeeper multi (a few hundred bytes each, far under jute.maxbuffer)


class IsrManager:
    """ISR writes go one at a time on a thread of their own (ZooKeeper calls block); what a partition
    is and becomes is read and applied on the broker's event loop, through `on_loop`."""

    def __init__(self, broker_id: int, zk: KrayZkClient, replica_manager: ReplicaManager,
                 on_loop: Callable[[Callable[[], T]], T]):
        self.broker_id, self.zk, self.rm, self.on_loop = broker_id, zk, replica_manager, on_loop
        self._lock = threading.Lock()
        self._changed: set[TopicPartition] = set()
        self._expanding: set[tuple[TopicPartition, int]] = set()  # queued or being written (Kafka's isInflight)
        self.failed_isr_updates = 0  # changes refused or failed (Kafka's FailedIsrUpdatesPerSec meter, as a count)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"isr-writer-{broker_id}")  # one change at a time:
        # two at once would fence each other

    def shrink(self, now_ms: int, replica_lag_time_max_ms: int) -> None:
        """Kafka's isr-expiration task (from the scheduler's thread): every partition due, in one batch."""
        due = self.on_loop(lambda: self.rm.isr_shrinks(now_ms, replica_lag_time_max_ms))
        if due:
            self._writer.submit(self._change, due, lambda p: p.isr_to_shrink(now_ms, replica_lag_time_max_ms,
                                                                          self.rm.last_session_fetch),
                                "Shrinking").result()

    def expand(self, partitions: list[TopicPartition], replica_id: int) -> list[Future]:
        """Take back a follower whose fetch found it caught up. Checked again on the writer's thread, on
        the state the previous change left, with the metadata as it is then: the follower's live
        incarnation must be the one that fetched (KIP-903), so a fetch that was long-polling here when
        its broker died brings neither the dead broker nor its next incarnation into the ISR (KIP-841's
        check). Called on the loop: the partitions go in one batch on the writer's thread (its future,
        for whoever wants to wait; none if each is queued already)."""
        with self._lock:  # one expansion per partition and follower at a time: each fetch asks again
            partitions = [tp for tp in partitions if (tp, replica_id) not in self._expanding]
            self._expanding.update((tp, replica_id) for tp in partitions)
        if not partitions:
            return []
        return [self._writer.submit(self._change, partitions,
                                    lambda p: p.isr_to_expand(replica_id, self.rm.alive_broker_epoch(replica_id)),
                                    "Expanding", replica_id)]

    def _change(self, tps: list[TopicPartition], new_isr, verb: str, joining: int | None = None) -> None:
        """Write `new_isr(partition)` for each partition (computed again here, on the state the previous
        change left), in as few ZooKeeper multis as conflicts allow; with `joining`, only while the
        incarnation of that broker which the metadata has alive (the one whose fetches earned it) is
        registered, and with each high watermark waiting for it meanwhile."""
        decided: list[tuple[TopicPartition, object, tuple[int, ...], object]] = []
        epoch = None

        def decide():
            nonlocal epoch
            epoch = self.rm.alive_broker_epoch(joining) if joining is not None else None
            for tp in tps:
                partition = self.rm.partition(tp)
                if partition is None:
                    continue
                isr = new_isr(partition)
                if isr is not None and joining is not None:
                    isr = partition.expanding(isr)
                if isr is not None:
                    decided.append((tp, partition, isr, partition.state))
        try:
            self.on_loop(decide)
            self._write(decided, verb, joining, epoch)
        except Exception:  # a ZooKeeper hiccup: the next fetch or check tries again
            log.exception("[Broker id=%d] %s ISR of %d partitions failed", self.broker_id, verb, len(decided))
            self.failed_isr_updates += len(decided)
            self.on_loop(lambda: [partition.isr_change_failed() for _, partition, _, _ in decided])
        finally:
            with self._lock:
                self._expanding.difference_update((tp, joining) for tp in tps)

    def close(self) -> None:
        self._writer.shutdown(wait=False, cancel_futures=True)

    def _write(self, decided: list, verb: str, joining: int | None, broker_epoch: int | None) -> None:
        """The conditional writes, MULTI_OPS at a time; when a multi is refused, the partitions whose
        zkVersion moved are settled (`_settle_refused`) and the rest written again."""
        pending = list(decided)
        while pending:
            chunk, pending = pending[:MULTI_OPS], pending[MULTI_OPS:]
            try:
                stats, refused, sent_again = self._set_partition_states(chunk, joining, broker_epoch)
            except _NotRegistered:
                self.on_loop(lambda: [partition.isr_change_failed() for _, partition, _, _ in chunk + pending])
                log.info("[Broker id=%d] Not expanding the ISR of %d partitions: broker %d is no longer registered "
                         "with broker epoch %s", self.broker_id, len(chunk) + len(pending), joining, broker_epoch)
                return
            if refused is not None and sent_again and (stats := self._landed(chunk)) is not None:
                refused = None  # the first try went through whole; only its answer was lost
            if refused is not None:
                pending = self._settle_refused(chunk, verb) + pending
                continue
            self._applied(chunk, stats, verb)

    def _settle_refused(self, chunk: list, verb: str) -> list:
        """A multi of `chunk` was refused: zkVersions moved. Every znode of the chunk is read at once and
        each moved one settled as Kafka settles one partition's: if it holds exactly the state this write
        would make, an earlier write of it went through and only its answer was lost (a connection loss),
        so it counts as done at the version found (checkLeaderAndIsrZkData); otherwise the controller
        wrote, and the change is given up until its LeaderAndIsr arrives (`Partition.give_up_isr_change`).
        Returns the rest, whose versions had not moved, to write again. One read per refused multi: settled
        one refusal at a time, a leader that had decided 50,000 shrinks on states the controller's
        LeaderAndIsr was about to replace took minutes over them, its followers' expansions queued behind."""
        found = self.zk.get_many(zkdata.partition_state_path(tp) for tp, *_ in chunk)
        again, landed, stats, moved = [], [], [], []
        for change in chunk:
            tp, _, isr, state = change
            got = found[zkdata.partition_state_path(tp)]
            if got is not None and got[1].version == state.zk_version:
                again.append(change)
            elif _holds(tp, got, state, isr):
                landed.append(change)
                stats.append(got[1])
            else:
                moved.append(change)
        if landed:
            self._applied(landed, stats, verb)
        if moved:
            given_up = self.on_loop(lambda: [partition.give_up_isr_change(state.leader_epoch)
                                             for _, partition, _, state in moved])
            self.failed_isr_updates += sum(given_up)
            for (tp, _, isr, state), gave_up in zip(moved, given_up):
                if gave_up:
                    log.info("[Partition %s broker=%d] Failed to update ISR to %s due to invalid version (cached "
                             "zkVersion %d). Giving up.", tp, self.broker_id, ",".join(map(str, isr)), state.zk_version)
        return again

    def _landed(self, chunk: list) -> list | None:
        """Each partition's znode stat if every znode holds exactly the state its write would make,
        else None (Kafka's checkLeaderAndIsrZkData, for a multi's whole chunk)."""
        found = self.zk.get_many(zkdata.partition_state_path(tp) for tp, *_ in chunk)
        stats = []
        for tp, _, isr, state in chunk:
            got = found[zkdata.partition_state_path(tp)]
            if not _holds(tp, got, state, isr):
                return None
            stats.append(got[1])
        return stats

    def _applied(self, chunk: list, stats: list, verb: str) -> None:
        def apply() -> None:
            for (tp, partition, isr, state), stat in zip(chunk, stats):
                partition.update_isr(isr, stat.version, state.leader_epoch)
        self.on_loop(apply)
        for (tp, _, isr, state), stat in zip(chunk, stats):
            before = ",".join(map(str, state.isr))
            self.rm.events.isr_change(tp, state.leader_epoch, isr, f"{verb} from {before}")
            log.info("[Partition %s broker=%d] %s ISR from %s to %s; zkVersion updated to %d", tp, self.broker_id,
                     verb, before, ",".join(map(str, isr)), stat.version)
        with self._lock:
            self._changed.update(tp for tp, *_ in chunk)

    def _set_partition_states(self, chunk: list, joining: int | None, broker_epoch: int | None):
        """One multi: each partition's state written conditionally on its zkVersion; with `joining`, only
        while that broker's registration is the one of `broker_epoch`, sent again after a lost connection
        while the session lives. (the new stats, None, sent again) when it went through, (None, the index
        of the partition refused, sent again) when a version check failed. A multi
        cannot check a czxid: the registration is read first and the multi checks that it still exists
        with the version read (always 0: a registration is never rewritten). One deleted and made again
        within the milliseconds between the two passes, as a new incarnation would need a new session
        first."""
        if joining is not None:
            registration = self.zk.exists(zkdata.broker_path(joining))
            if registration is None or registration.czxid != broker_epoch:
                raise _NotRegistered

        def commit() -> list:
            txn = self.zk.kazoo.transaction()
            if joining is not None:
                txn.check(zkdata.broker_path(joining), registration.version)
            for tp, _, isr, state in chunk:
                txn.set_data(zkdata.partition_state_path(tp), zkdata.PartitionStateZNode.encode_fields(
                    state.leader, state.leader_epoch, state.controller_epoch, isr), version=state.zk_version)
            return txn.commit()
        send = Attempts(commit)
        results = self.zk.until_connected(send)
        checked, written = (results[0], results[1:]) if joining is not None else (None, results)
        if isinstance(checked, NoNodeError):
            raise _NotRegistered
        if isinstance(checked, Exception) and not isinstance(checked, RolledBackError):
            raise checked  # the check failed otherwise (no access?): as a failed set would
        for i, result in enumerate(written):
            if isinstance(result, (BadVersionError, NoNodeError)):
                return None, i, send.again
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise result
        return written, None, send.again

    def propagate(self) -> None:
        """One /isr_change_notification/isr_change_N znode for everything changed since the last one.
        The changes are forgotten once the znode is written (as Kafka clears its isrChangeSet only
        then): a failed write leaves them for the next round, or no UpdateMetadata would carry them."""
        with self._lock:
            changed = sorted(self._changed)
        if changed:
            self.zk.create(f"{zkdata.ISR_CHANGE_NOTIFICATION}/{zkdata.ISR_CHANGE_PREFIX}",
                           zkdata.IsrChangeNotificationZNode(partitions=[
                               zkdata.PartitionRef(topic=tp.topic, partition=tp.partition) for tp in changed
                           ]).encode(), sequence=True)
            with self._lock:
                self._changed.difference_update(changed)


class _NotRegistered(Exception):
    """The broker an ISR expansion would take in has no registration any more."""


def _holds(tp: TopicPartition, got, state, isr: tuple[int, ...]) -> bool:
    """Whether a partition's state znode as read (`got`: (data, stat), or None when absent) holds exactly
    the state an ISR write of `isr` on `state` makes."""
    try:
        znode = zkdata.decode(zkdata.PartitionStateZNode, zkdata.partition_state_path(tp), got[0]) \
            if got is not None else None
    except MalformedZNodeError:
        return False
    return znode is not None and (znode.leader, znode.leader_epoch, znode.controller_epoch, tuple(znode.isr)) == \
        (state.leader, state.leader_epoch, state.controller_epoch, tuple(isr))
