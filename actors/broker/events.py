"""What a broker did that a partition's failover waits on, for the run directory (broker_events.jsonl,
records.BrokerEvent): jobs/measures/partition_phases.py lines each partition's recovery up against them.

- registered: this broker registered in ZooKeeper (at start, after a session expiry), with its epoch;
- leader_and_isr: a LeaderAndIsr applied: the partitions this broker now leads and follows, with their
  leader epochs;
- update_metadata: an UpdateMetadata applied, and how many partition states it carried;
- isr_change: an ISR this leader wrote (shrink or expansion, from what to what);
- truncation: a follower's log cut back (from and to);
- follower_fetch: a follower's first fetch from this leader in a leader epoch;
- client_append: the first client batch this leader appended in a leader epoch;
- hw_moved: the first move of this leader's high watermark after each change of its leadership or ISR,
  and after the first client append of each epoch (the move that can acknowledge it);
- produce_error: an error a produce was answered with, at most once a second per partition and error;
- group_loaded: the group coordinator loaded an offsets partition it was made leader of (how many groups,
  how long the load took);
- group_stabilized: a group's rebalance completed here (its generation and members: JoinGroup answered);
- group_synced: a group's assignment stored here, its members answered (SyncGroup done);
- coordinator_found: this broker answered a group's FindCoordinator with a coordinator it had not named
  for that group before.

The firsts are what make it cheap: a hot path pays a dict lookup, and a broker writes a few lines per
partition per failover. Without a recorder (ClusterConfig.recorder None) nothing is kept.
"""
from __future__ import annotations

import time

from actors import records
from actors.records import BrokerEvent, tp_key
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

ERROR_EVERY_MS = 1000.0


def now_ms() -> float:
    return time.time() * 1000


class BrokerEvents:
    def __init__(self, broker_id: int, sink=None):
        """`sink`: a RecordSink (actors/recording.py); None or a disabled one records nothing."""
        self.broker_id, self.sink = broker_id, sink
        self.enabled = sink is not None and sink.enabled
        self._appended: dict[TopicPartition, int] = {}  # the leader epoch whose first append was recorded
        self._fetched: dict[tuple[TopicPartition, int], int] = {}  # (partition, follower) -> that of its first fetch
        # as leader: the leadership state last seen, the HW to pass, and whether its move is still awaited
        self._hw: dict[TopicPartition, tuple[object, int, bool]] = {}
        self._last_hw: dict[TopicPartition, int] = {}  # the HW last seen, leader or follower
        self._hw_recorded: dict[TopicPartition, int] = {}  # the HW last recorded: one move is recorded once
        self._errors: dict[tuple[TopicPartition, int], float] = {}  # (partition, error) -> when last recorded
        self._coordinators: dict[str, tuple[int, int]] = {}  # group -> (coordinator, leader epoch) it last named

    def _emit(self, kind: str, tp: TopicPartition | None = None, **fields) -> None:
        self.sink.emit(records.BROKER_EVENTS, BrokerEvent(
            broker_id=self.broker_id, ts_ms=now_ms(), kind=kind,
            partition=tp_key(tp.topic, tp.partition) if tp is not None else None, **fields))

    def leader_and_isr(self, controller_epoch: int, leaders: dict[TopicPartition, tuple[int, tuple[int, ...]]],
                       followers: dict[TopicPartition, int]) -> None:
        """`leaders`: partition -> (leader epoch, ISR); `followers`: partition -> leader epoch."""
        if self.enabled and (leaders or followers):
            self._emit("leader_and_isr", controller_epoch=controller_epoch,
                       leaders={tp_key(tp.topic, tp.partition): e for tp, (e, _) in leaders.items()},
                       isrs={tp_key(tp.topic, tp.partition): list(isr) for tp, (_, isr) in leaders.items()},
                       followers={tp_key(tp.topic, tp.partition): e for tp, e in followers.items()})

    def registered(self, broker_epoch: int) -> None:
        if self.enabled:
            self._emit("registered", detail=str(broker_epoch))

    def update_metadata(self, controller_epoch: int, partitions: int) -> None:
        if self.enabled:
            self._emit("update_metadata", controller_epoch=controller_epoch, partitions=partitions)

    def isr_change(self, tp: TopicPartition, leader_epoch: int, isr: tuple[int, ...], detail: str) -> None:
        if self.enabled:
            self._emit("isr_change", tp, leader_epoch=leader_epoch, isr=list(isr), detail=detail)

    def truncation(self, tp: TopicPartition, leader_epoch: int, before: int, after: int) -> None:
        if self.enabled and after < before:
            self._emit("truncation", tp, leader_epoch=leader_epoch, detail=f"from {before} to {after}")

    def follower_fetch(self, tp: TopicPartition, follower: int, leader_epoch: int) -> None:
        if self.enabled and self._fetched.get((tp, follower)) != leader_epoch:
            self._fetched[(tp, follower)] = leader_epoch
            self._emit("follower_fetch", tp, leader_epoch=leader_epoch, replica=follower)

    def client_append(self, tp: TopicPartition, state, hw_before: int, hw_after: int) -> None:
        """A client batch appended as leader (`state`: its leadership state; the HW before and after it): the
        epoch's first is recorded, and the next HW move after it (at once, if the append moved it: an ISR of
        one)."""
        leader_epoch = state.leader_epoch
        if not self.enabled or self._appended.get(tp) == leader_epoch:
            return
        self._appended[tp] = leader_epoch
        self._emit("client_append", tp, leader_epoch=leader_epoch)
        if hw_after > hw_before:
            self._hw[tp] = (state, hw_after, False)
            self._hw_moved(tp, leader_epoch, hw_after)
        else:
            self._hw[tp] = (state, hw_before, True)

    def high_watermark(self, tp: TopicPartition, state, high_watermark: int, leader: bool) -> None:
        """A partition changed; `state`: its leadership state (a new object at every leader or ISR change).
        As leader, records the first time the HW passes where it stood when that state began (at once if
        the change itself moved it), or when the epoch's first client batch was appended."""
        if not self.enabled:
            return
        last, self._last_hw[tp] = self._last_hw.get(tp), high_watermark
        if not leader:
            return
        seen = self._hw.get(tp)
        if seen is None or seen[0] is not state:
            moved = last is not None and high_watermark > last
            self._hw[tp] = (state, high_watermark, not moved)
        elif seen[2] and high_watermark > seen[1]:
            self._hw[tp] = (state, seen[1], False)
            moved = True
        else:
            moved = False
        if moved:
            self._hw_moved(tp, state.leader_epoch, high_watermark)

    def _hw_moved(self, tp: TopicPartition, leader_epoch: int, high_watermark: int) -> None:
        if self._hw_recorded.get(tp) != high_watermark:
            self._hw_recorded[tp] = high_watermark
            self._emit("hw_moved", tp, leader_epoch=leader_epoch, detail=str(high_watermark))

    def produce_error(self, tp: TopicPartition, error: Errors) -> None:
        if not self.enabled:
            return
        now = now_ms()
        if now - self._errors.get((tp, int(error)), -ERROR_EVERY_MS) >= ERROR_EVERY_MS:
            self._errors[(tp, int(error))] = now
            self._emit("produce_error", tp, detail=Errors(error).name)

    def group_loaded(self, tp: TopicPartition, leader_epoch: int, groups: int, took_ms: float) -> None:
        if self.enabled:
            self._emit("group_loaded", tp, leader_epoch=leader_epoch, partitions=groups, detail=f"{took_ms:.0f} ms")

    def group_stabilized(self, group: str, generation: int, members: int) -> None:
        if self.enabled:
            self._emit("group_stabilized", group=group, generation=generation, partitions=members)

    def group_synced(self, group: str, generation: int) -> None:
        if self.enabled:
            self._emit("group_synced", group=group, generation=generation)

    def coordinator_found(self, group: str, coordinator: int, leader_epoch: int) -> None:
        """Recorded when this broker first names a coordinator for the group in a leader epoch of its offsets
        partition (the first answer, and after each move, back to a broker named before too)."""
        if self.enabled and self._coordinators.get(group) != (coordinator, leader_epoch):
            self._coordinators[group] = (coordinator, leader_epoch)
            self._emit("coordinator_found", group=group, replica=coordinator, leader_epoch=leader_epoch)
