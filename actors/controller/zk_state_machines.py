"""The partition and replica state machines: plan (pure, `changes.py`), then apply in one place.

Applying means: persist leader/ISR changes to ZooKeeper in `multi` batches
fenced on the controller epoch, then update ControllerContext, then add the
requests to the event's batch. A partition whose znode moved under us (a
leader changed its ISR) is re-read and planned again while the rounds make progress
(Kafka retries until every write is done; MAX_ZK_RETRIES rounds in a row without one end it). Large partition changes
are planned in chunks whose writes leave as soon as each is planned, so that
ZooKeeper and the planning overlap.
"""
from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable

from kazoo.exceptions import BadVersionError

from actors.controller.changes import (
    ElectionStrategy,
    OfflineElection,
    PartitionChanges,
    ReplicaChanges,
    plan_partition_state_changes,
    plan_replica_state_changes,
)
from actors.controller.controller_zk import ControllerZk
from actors.controller.context import ControllerContext, LeaderAndIsr, LeaderIsrAndControllerEpoch, ReplicaAssignment
from actors.controller.request_batch import ControllerBrokerRequestBatch
from actors.controller.state_machines import PartitionStateName as P, ReplicaStateName as R
from coordination import zkdata
from coordination.errors import KrayError
from coordination.topic_config import parse_topic_config
from coordination.zkclient import PartitionStateRecord
from coordination.zkdata import TopicPartition

state_change_log = logging.getLogger("state.change.logger")

MAX_ZK_RETRIES = 5  # rounds in a row that wrote nothing before the rest is given up
PLAN_CHUNK = 1000  # partitions planned per step of an event; one multi's worth


def leadership_from_record(record: PartitionStateRecord) -> LeaderIsrAndControllerEpoch:
    s = record.state
    return LeaderIsrAndControllerEpoch(LeaderAndIsr(s.leader, s.leader_epoch, tuple(s.isr), record.zk_version),
                                       s.controller_epoch)


def partition_state_znode(lai: LeaderAndIsr, controller_epoch: int) -> bytes:
    """The state znode's JSON for a LeaderAndIsr written by this controller epoch."""
    return zkdata.PartitionStateZNode.encode_fields(lai.leader, lai.leader_epoch, controller_epoch, lai.isr)


class RetryRounds:
    """Rounds of conditional writes: another while some are pending and the last MAX_ZK_RETRIES rounds
    did not all leave as many pending as before them (Kafka loops until done; this ends a loop that
    stopped making progress)."""

    def __init__(self):
        self.retrying, self._pending, self._idle = False, None, 0

    def go_on(self, pending: int) -> bool:
        if self._pending is not None:
            self.retrying = True
            self._idle = self._idle + 1 if pending >= self._pending else 0
        self._pending = pending
        return pending > 0 and self._idle < MAX_ZK_RETRIES


class _Machine:
    def __init__(self, controller_id: int, ctx: ControllerContext, zk: ControllerZk,
                 batch: ControllerBrokerRequestBatch):
        self.controller_id = controller_id
        self.ctx = ctx
        self.zk = zk
        self.batch = batch

    @property
    def _prefix(self) -> str:
        return f"[Controller id={self.controller_id} epoch={self.ctx.epoch}]"

    def write_leaderships(self, updates: dict[TopicPartition, LeaderAndIsr], retry: bool = False) -> tuple[dict[TopicPartition, LeaderAndIsr], list[TopicPartition]]:
        """Conditional writes; (written with their new zkVersion, moved under us and re-read into the context)."""
        return self.begin_leadership_writes(updates, retry)()

    def begin_leadership_writes(self, updates: dict[TopicPartition, LeaderAndIsr], retry: bool = False):
        """write_leaderships in two steps: the writes leave now; the returned function waits for them.
        A first attempt gives a batch with several stale versions back unsent (the context lags: read
        it all again); a `retry` writes on versions just read, one write per multi, so that only the
        ones that moved again fail: with leaders busy changing ISRs (a broker that has just come back
        being taken into hundreds), a batch of them may always hold a few."""
        if not updates:
            return lambda: ({}, [])
        wait = self.zk.begin_update_partition_states(
            {tp: (partition_state_znode(lai, self.ctx.epoch), lai.zk_version) for tp, lai in updates.items()},
            one_per_multi=retry)

        def finish() -> tuple[dict[TopicPartition, LeaderAndIsr], list[TopicPartition]]:
            written, moved = {}, []
            for tp, result in wait().items():
                if isinstance(result, BadVersionError):
                    moved.append(tp)
                elif isinstance(result, Exception):
                    state_change_log.error("%s Failed to update the state of partition %s: %r", self._prefix, tp,
                                           result)
                else:
                    lai = updates[tp]
                    written[tp] = LeaderAndIsr(lai.leader, lai.leader_epoch, lai.isr, result)
            self.ctx.leaderships_written.update(written)
            self.ctx.leaderships_synced.update(written)
            self.read_leaderships(moved)
            return written, moved
        return finish

    def read_leaderships(self, partitions: list[TopicPartition], reads=None) -> set[TopicPartition]:
        """Bring the context's leader/ISR of these partitions up to ZooKeeper's (or up to `reads`, the warm
        standby's copy at failover); those it has."""
        found: set[TopicPartition] = set()
        if partitions:
            for tp, record in (reads or self.zk).get_partition_states(partitions).items():
                self.ctx.partition_leadership[tp] = leadership_from_record(record)
                found.add(tp)
            self.ctx.leaderships_synced.update(partitions)
        return found


def topic_unclean_overrides(zk, topics: Iterable[str]) -> dict[str, bool]:
    """The topics' unclean.leader.election.enable overrides in /config/topics/T (one batched read); a
    malformed or invalid config is logged and left out (the broker's setting applies)."""
    out = {}
    for path, got in zk.get_many(zkdata.topic_config_path(t) for t in sorted(set(topics))).items():
        if got is None or not got[0]:
            continue
        try:
            config = zkdata.decode(zkdata.TopicConfigZNode, path, got[0]).config
            if "unclean.leader.election.enable" in config:
                parsed = parse_topic_config({"unclean.leader.election.enable": config["unclean.leader.election.enable"]})
                out[path.rsplit("/", 1)[1]] = parsed["unclean.leader.election.enable"]
        except KrayError as e:
            state_change_log.warning("Ignoring the configs at %s: %s", path, e)
    return out


class ZkPartitionStateMachine(_Machine):
    """NonExistentPartition -> NewPartition -> OnlinePartition <-> OfflinePartition -> NonExistentPartition."""

    def __init__(self, controller_id, ctx, zk, batch, unclean_leader_election_enabled: bool = False):
        super().__init__(controller_id, ctx, zk, batch)
        self.unclean_leader_election_enabled = unclean_leader_election_enabled
        self.unclean_elections = 0
        self.elections = 0

    def _offline_election(self, partitions: list[TopicPartition]) -> OfflineElection:
        """Kafka's collectUncleanLeaderElectionState: the topic configs are read only for partitions with
        no live ISR member, the only ones an unclean election could concern."""
        leaderless = {tp.topic for tp in partitions if (l := self.ctx.partition_leadership.get(tp)) is not None
                      and not any(self.ctx.is_replica_online(r, tp) for r in l.leader_and_isr.isr)}
        return OfflineElection(self.unclean_leader_election_enabled,
                               topic_unclean_overrides(self.zk, leaderless) if leaderless else {})

    def trigger_online_partition_state_change(self, topic: str | None = None) -> dict[TopicPartition, str]:
        """Elect every New or Offline partition (of `topic` only, when given) whose topic is not being
        deleted."""
        partitions = [tp for tp in self.ctx.partitions_in_state(P.NewPartition, P.OfflinePartition)
                      if (topic is None or tp.topic == topic) and not self.ctx.is_topic_queued_for_deletion(tp.topic)]
        return self.handle_state_changes(partitions, P.OnlinePartition)

    def startup(self) -> None:
        """Kafka's PartitionStateMachine.startup: each partition New (no state yet), Online (its leader
        is live) or Offline, then every New or Offline one elected."""
        for tp in self.ctx.all_partitions():
            leadership = self.ctx.partition_leadership.get(tp)
            if leadership is None:
                self.ctx.partition_states[tp] = P.NewPartition
            elif self.ctx.is_replica_online(leadership.leader_and_isr.leader, tp):
                self.ctx.partition_states[tp] = P.OnlinePartition
            else:
                self.ctx.partition_states[tp] = P.OfflinePartition
        self.trigger_online_partition_state_change()

    def bump_leader_epochs(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Kafka's updateLeaderEpoch: the same leader and ISR at leader epoch + 1, so that the replicas
        take a new assignment in; a partition a newer controller wrote is left alone. The ones written."""
        done: list[TopicPartition] = []
        pending, rounds = list(partitions), RetryRounds()
        while rounds.go_on(len(pending)):
            updates = {}
            for tp in pending:
                current = self.ctx.partition_leadership.get(tp)
                if current is not None and current.controller_epoch <= self.ctx.epoch:
                    lai = current.leader_and_isr
                    updates[tp] = lai.new_leader_and_isr(lai.leader, lai.isr)
            written, pending = self.write_leaderships(updates, rounds.retrying)
            for tp, lai in written.items():
                self.ctx.partition_leadership[tp] = LeaderIsrAndControllerEpoch(lai, self.ctx.epoch)
            done += written
        return done

    def handle_state_changes(self, partitions: Iterable[TopicPartition], target: P,
                             strategy: ElectionStrategy | None = None) -> dict[TopicPartition, str]:
        """Apply the transitions; returns the partitions that failed, with the reason."""
        partitions = list(partitions)
        strategy = strategy or self._offline_election(partitions)
        failures: dict[TopicPartition, str] = {}  # elections that failed
        invalid: dict[TopicPartition, str] = {}
        changed: Counter[tuple[P, P]] = Counter()
        pending, rounds = list(partitions), RetryRounds()
        while rounds.go_on(len(pending)):
            pending = self._plan_and_apply(pending, target, strategy, failures, invalid, changed,
                                           retry=rounds.retrying)
            # an election that failed on a leader/ISR this event has not read may have failed on what a
            # leader has since changed (its notification still on the way): read ZooKeeper's, try again
            stale = [tp for tp in failures if tp in self.ctx.partition_leadership
                     and tp not in self.ctx.leaderships_synced]
            self.read_leaderships(stale)
            for tp in stale:
                del failures[tp]
            pending += stale
        for tp in pending:
            failures[tp] = "the partition state kept changing in ZooKeeper"
        failures.update(invalid)
        self._log_failures(failures, target)
        for (previous, current), count in changed.items():
            state_change_log.info("%s Changed %d partitions from %s to %s", self._prefix, count, previous.name,
                                  current.name)
        return failures

    def _plan_and_apply(self, partitions: list[TopicPartition], target: P, strategy: ElectionStrategy,
                        failures: dict[TopicPartition, str], invalid: dict[TopicPartition, str],
                        changed: Counter, retry: bool) -> list[TopicPartition]:
        """Plan in chunks and send each chunk's writes as soon as it is planned, so that ZooKeeper
        applies one chunk while the next is planned; then apply the chunks in order. Returns the
        partitions to plan again (their znode moved under us)."""
        in_flight = []
        for i in range(0, len(partitions), PLAN_CHUNK):
            plan = plan_partition_state_changes(self.ctx, partitions[i:i + PLAN_CHUNK], target, strategy)
            invalid.update({tp: f"invalid transition from {current.name} to {plan.target.name}"
                            for tp, current in plan.invalid.items()})
            failures.update(plan.failed)
            created = self._create(plan)
            in_flight.append((plan, created, self.begin_leadership_writes(
                {tp: e.leader_and_isr for tp, e in plan.elected.items()}, retry)))
        moved: list[TopicPartition] = []
        for plan, created, writes in in_flight:
            moved += self._apply(plan, created, *writes(), changed)
        return moved

    def _log_failures(self, failures: dict[TopicPartition, str], target: P) -> None:
        for tp, reason in failures.items():
            state_change_log.error("%s Controller %d epoch %d failed to change state for partition %s from %s to "
                                   "%s: %s", self._prefix, self.controller_id, self.ctx.epoch, tp,
                                   self.ctx.partition_states.get(tp, P.NonExistentPartition).name, target.name, reason)

    def _create(self, plan: PartitionChanges) -> dict[TopicPartition, LeaderAndIsr]:
        """Create the state znodes of new partitions; the ones created."""
        created: dict[TopicPartition, LeaderAndIsr] = {}
        if plan.created:
            results = self.zk.create_partition_states(
                {tp: partition_state_znode(lai, self.ctx.epoch) for tp, lai in plan.created.items()})
            for tp, error in results.items():
                if error is None:
                    created[tp] = plan.created[tp]
                else:
                    state_change_log.error("%s Failed to create the state znode of new partition %s: %s",
                                           self._prefix, tp, type(error).__name__)
        return created

    def _apply(self, plan: PartitionChanges, created: dict[TopicPartition, LeaderAndIsr],
               elected: dict[TopicPartition, LeaderAndIsr], moved: list[TopicPartition],
               changed: Counter) -> list[TopicPartition]:
        """Apply a plan whose writes are done to the context and the batch; returns `moved`."""
        debug = state_change_log.isEnabledFor(logging.DEBUG)  # one line per partition, only when asked
        for tp, previous in plan.transitions.items():
            if tp in moved or (tp in plan.created and tp not in created) or (tp in plan.elected and tp not in elected):
                continue
            self.ctx.partition_states[tp] = plan.target
            if tp in created or tp in elected:
                lai = created.get(tp) or elected[tp]
                self.ctx.partition_leadership[tp] = LeaderIsrAndControllerEpoch(lai, self.ctx.epoch)
                if tp in created:
                    recipients = [r for r in self.ctx.partition_replicas(tp) if self.ctx.is_replica_online(r, tp)]
                else:
                    recipients = plan.elected[tp].recipients
                    self.elections += 1
                    if plan.elected[tp].unclean:
                        self.unclean_elections += 1
                        state_change_log.warning("%s Unclean leader election for partition %s: leader %d was not "
                                                 "in the ISR; data loss is possible", self._prefix, tp, lai.leader)
                self.batch.add_leader_and_isr(recipients, tp, is_new=tp in created)
                if debug:
                    state_change_log.debug("%s Changed partition %s from %s to %s with state %s", self._prefix, tp,
                                           previous.name, plan.target.name, lai)
            else:
                if plan.target is P.NonExistentPartition:
                    self.ctx.partition_states.pop(tp, None)
                if debug:
                    state_change_log.debug("%s Changed partition %s state from %s to %s", self._prefix, tp,
                                           previous.name, plan.target.name)
            changed[(previous, plan.target)] += 1
        return moved


class ZkReplicaStateMachine(_Machine):
    """New / Online / Offline replicas, and the deletion states a topic deletion walks through."""

    def startup(self) -> None:
        """Kafka's ReplicaStateMachine.startup: live replicas Online (each is sent its LeaderAndIsr), the
        others Offline: out of their ISRs (a dead leader's partition gets leader -1), the brokers that
        follow told (a broker that died while no controller was active, most often the old controller's)."""
        online, offline = [], []
        for tp in self.ctx.all_partitions():
            for r in self.ctx.partition_replicas(tp):
                is_online = self.ctx.is_replica_online(r, tp)
                (online if is_online else offline).append((tp, r))
                self.ctx.replica_states[(tp, r)] = R.OnlineReplica if is_online else R.ReplicaDeletionIneligible
        self.handle_state_changes(online, R.OnlineReplica)
        self.handle_state_changes(offline, R.OfflineReplica)

    def handle_state_changes(self, replicas: Iterable[tuple[TopicPartition, int]], target: R) -> None:
        """Leaders change ISRs too, so the context's may be behind ZooKeeper's. Kafka's
        removeReplicasFromIsr reads every state first (a read of 1,000 states is most of a broker
        failure's time). Here a removal from an ISR the context has with the replica is written on
        the context's zkVersion: if a leader changed it meanwhile, the write is refused and the
        state read and written again. An ISR the context has without the replica is read first: a
        leader may have taken the replica back in, which no version check would catch."""
        by_broker: dict[int, list[tuple[TopicPartition, int]]] = defaultdict(list)
        for tp, r in replicas:
            by_broker[r].append((tp, r))
        if target is R.OfflineReplica:
            leaderships = self.ctx.partition_leadership
            self.read_leaderships(sorted({tp for rs in by_broker.values() for tp, r in rs
                                          if tp in leaderships and tp not in self.ctx.leaderships_synced
                                          and r not in leaderships[tp].leader_and_isr.isr}))
        for broker_replicas in by_broker.values():  # one broker at a time, as Kafka does
            pending, rounds = broker_replicas, RetryRounds()
            # leaving the ISRs is retried until done, as Kafka's removeReplicasFromIsr is: a dead or
            # restarted broker kept in an ISR could be elected without the records it lost
            while rounds.go_on(len(pending)) or pending and target is R.OfflineReplica:
                pending = self._apply(plan_replica_state_changes(self.ctx, pending, target), rounds.retrying)
            if pending:
                state_change_log.error("%s Gave up changing %d replicas to %s: their partition states kept "
                                       "changing in ZooKeeper", self._prefix, len(pending), target.name)

    def _apply(self, plan: ReplicaChanges, retry: bool) -> list[tuple[TopicPartition, int]]:
        for (tp, r), current in plan.invalid.items():
            state_change_log.error("%s Controller %d epoch %d failed to change state of replica %d for partition "
                                   "%s from %s to %s", self._prefix, self.controller_id, self.ctx.epoch, r, tp,
                                   current.name, plan.target.name)
        written, moved = self.write_leaderships(plan.isr_removals, retry)
        for tp, lai in written.items():
            self.ctx.partition_leadership[tp] = LeaderIsrAndControllerEpoch(lai, self.ctx.epoch)
            state_change_log.debug("%s Removed a replica from the ISR of %s: new state %s", self._prefix, tp, lai)
        if moved:
            state_change_log.info("%s %d ISR removals found a newer partition state in ZooKeeper (a leader "
                                  "changed the ISR): read again and retried", self._prefix, len(moved))
        moved_set = set(moved)
        again = [(tp, r) for (tp, r) in plan.transitions if tp in moved_set]
        # a failed ISR write (not a version race) leaves the replica where it was, as ZooKeeper says
        skip = moved_set | (set(plan.isr_removals) - set(written))
        for broker_id, tp, is_new in plan.leader_and_isr_to:
            if tp not in skip:
                self.batch.add_leader_and_isr([broker_id], tp, is_new=is_new)
        for broker_id, tp, delete, epoch in plan.stop_replica_to:
            if tp not in skip:
                self.batch.add_stop_replica(broker_id, tp, delete, epoch)
        if plan.update_metadata_for:
            self.batch.add_update_metadata(self.ctx.live_or_shutting_down_broker_ids, plan.update_metadata_for)
        for tp, r in plan.assignment_removals:
            assignment = self.ctx.partition_full_assignment(tp)
            self.ctx.update_partition_full_assignment(
                tp, ReplicaAssignment(tuple(x for x in assignment.replicas if x != r),
                                      tuple(x for x in assignment.adding if x != r),
                                      tuple(x for x in assignment.removing if x != r)))
        changed = 0
        for key, previous in plan.transitions.items():
            if key[0] in skip:
                continue
            if plan.target is R.NonExistentReplica:
                self.ctx.replica_states.pop(key, None)
            else:
                self.ctx.replica_states[key] = plan.target
            changed += 1
        if changed:
            state_change_log.info("%s Changed state of %d replicas to %s", self._prefix, changed, plan.target.name)
        return again
