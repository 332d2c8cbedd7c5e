"""The consumer group's coordinator through each fault on its broker: the steps of its failover, from
the brokers' events (broker_events.jsonl), the members' commits and the group's waits.

A fault strikes the coordinator when its target led the group's partition of __consumer_offsets just
before it: the newest leader epoch of that partition seen before the fault, in the last ZooKeeper
sample (once a second, and one just before each fault on a broker) or in a broker's LeaderAndIsr
event. A fault on the active controller alone leaves the coordinator in place, and is not one. Its
steps, each the first seen after the fault and within the horizon:

    elected_ms          another broker applies a LeaderAndIsr leading that partition (the controller's part)
    loaded_ms           the new coordinator has loaded the partition's groups
    found_ms            a broker answers the group's FindCoordinator with the new coordinator
    rejoined_ms         the members rejoined and synced (a SyncGroup answered; absent when the new
                        coordinator loaded the group Stable and its members went on without a rebalance)
    committed_ms        a member is told a commit was stored
    consumed_first_ms   the group is given the first record sent at or after the fault (any partition)
    consumed_all_ms     every partition the group reads has given it such a record (absent when one
                        had not within the horizon)

Pure: records in, GroupFailoverRecords out.
"""
from __future__ import annotations

import bisect
from typing import Iterable

from actors.records import BrokerEvent, GroupCommit
from jobs.measures.rundir import CONTROLLER_FAULTS, FaultRecord, GroupFailoverRecord, PartitionWait, Source, StateSample


def _first(events: list[BrokerEvent], after: float, until: float, match) -> BrokerEvent | None:
    return next((e for e in events if after < e.ts_ms <= until and match(e)), None)


def compose(faults: list[FaultRecord], states: list[StateSample], events: Iterable[BrokerEvent],
            commits: Iterable[GroupCommit], waits: list[PartitionWait], group: str, offsets_partition: str,
            horizon_ms: float, detector: bool) -> list[GroupFailoverRecord]:
    """One record per fault (that struck) on the broker coordinating `group`, whose coordinator is the
    leader of `offsets_partition` ("__consumer_offsets-N")."""
    states = sorted(states, key=lambda s: s.ts_ms)
    times = [s.ts_ms for s in states]
    mine = sorted((e for e in events if e.group == group or e.partition == offsets_partition
                   or offsets_partition in e.leaders), key=lambda e: e.ts_ms)
    told = sorted(c.ts_ms for c in commits if c.group == group and c.stored_offset is None)
    out = []
    for fault in sorted(faults, key=lambda f: f.injected_ms):
        if fault.target is None or fault.kind in CONTROLLER_FAULTS or fault.detail.startswith("failed"):
            continue
        i = bisect.bisect_right(times, fault.injected_ms)
        state = states[i - 1].partitions.get(offsets_partition) if i else None
        led = [(state.leader_epoch, state.leader)] if state is not None else []
        led += [(e.leaders[offsets_partition], e.broker_id) for e in mine
                if e.ts_ms <= fault.injected_ms and e.kind == "leader_and_isr" and offsets_partition in e.leaders]
        if not led or max(led)[1] != fault.target:
            continue
        t0, victim = fault.injected_ms, fault.target
        until = t0 + horizon_ms
        elected = _first(mine, t0, until, lambda e: e.kind == "leader_and_isr" and offsets_partition in e.leaders
                         and e.broker_id != victim)
        coordinator = elected.broker_id if elected else None
        loaded = _first(mine, t0, until, lambda e: e.kind == "group_loaded" and e.partition == offsets_partition
                        and e.broker_id == coordinator)
        found = _first(mine, t0, until, lambda e: e.kind == "coordinator_found" and e.group == group
                       and e.replica not in (None, victim))
        rejoined = _first(mine, t0, until, lambda e: e.kind == "group_synced" and e.group == group
                          and e.broker_id != victim)
        j = bisect.bisect_right(told, t0)
        committed = told[j] if j < len(told) and told[j] <= until else None
        given = [w for w in waits if w.fault_id == fault.fault_id and w.source is Source.GROUP]
        recovered = [t0 + w.recovery_ms for w in given if not w.recovery_censored]
        censored = len(given) - len(recovered)
        out.append(GroupFailoverRecord(
            fault_id=fault.fault_id, fault_kind=fault.kind, group=group, coordinator=victim,
            offsets_partition=offsets_partition, fault_injected_ms=t0, detector=detector,
            new_coordinator=coordinator, elected_ms=elected.ts_ms if elected else None,
            loaded_ms=loaded.ts_ms if loaded else None, found_ms=found.ts_ms if found else None,
            rejoined_ms=rejoined.ts_ms if rejoined else None, committed_ms=committed,
            consumed_first_ms=min(recovered, default=None),
            consumed_all_ms=max(recovered) if recovered and not censored else None,
            partitions=len(given), censored=censored))
    return out
