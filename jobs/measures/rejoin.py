"""How long a broker back from a fault takes to rejoin every ISR it left: from its registration
(broker_events.jsonl: `registered`) to the leaders' ISR expansions that take it back (`isr_change`),
over the partitions it is a replica of (final_state.json's assignments) whose ISR a ZooKeeper sample
showed it out of, from the last one before the fault to the next fault (a broker whose session
expired registers again at once, and leaves its ISRs only after). Until the next fault, or the end
of the run. Pure (`rejoins`: records in, Rejoin out), `of_run` reading them from a run directory.
"""
from __future__ import annotations

import bisect
from typing import Iterable, NamedTuple

from actors.records import BROKER_EVENTS, BrokerEvent, RunReader
from jobs.measures.rundir import FINAL_STATE, PARTITION_STATES, FaultRecord, FinalState, StateSample


class Rejoin(NamedTuple):
    fault_id: int
    broker_id: int
    registered_ms: float
    out_of_isr: int  # partitions whose ISR it had to rejoin
    rejoined_ms: list[float]  # after its registration, each that it rejoined, in time order

    @property
    def all_back(self) -> bool:
        return len(self.rejoined_ms) == self.out_of_isr

    @property
    def last_ms(self) -> float | None:
        """How long after its registration it was back in every ISR it left (0: it left none; None: not in
        all of them before the next fault)."""
        if not self.all_back:
            return None
        return self.rejoined_ms[-1] if self.rejoined_ms else 0.0


def rejoins(faults: list[FaultRecord], events: Iterable[BrokerEvent], states: list[StateSample],
            assignments: dict[str, list[int]], until_ms: float) -> list[Rejoin]:
    """One per fault whose broker registered again before the next fault (or `until_ms`)."""
    faults = sorted((f for f in faults if f.target is not None and not f.detail.startswith("failed")),
                    key=lambda f: f.injected_ms)
    events = list(events)
    states = sorted(states, key=lambda s: s.ts_ms)
    times = [s.ts_ms for s in states]
    out = []
    for i, fault in enumerate(faults):
        end = faults[i + 1].injected_ms if i + 1 < len(faults) else until_ms
        victim = fault.target
        registered = min((e.ts_ms for e in events if e.kind == "registered" and e.broker_id == victim
                          and fault.injected_ms < e.ts_ms < end), default=None)
        if registered is None:
            continue
        seen = states[max(0, bisect.bisect_right(times, fault.injected_ms) - 1):bisect.bisect_left(times, end)]
        left = {tp for tp, replicas in assignments.items() if victim in replicas
                and any(tp in s.partitions and victim not in s.partitions[tp].isr for s in seen)}
        first: dict[str, float] = {}
        for e in events:
            if e.kind == "isr_change" and e.partition in left and e.partition not in first and e.isr \
                    and victim in e.isr and victim not in _isr_before(e) and registered <= e.ts_ms < end:
                first[e.partition] = e.ts_ms
        out.append(Rejoin(fault.fault_id, victim, registered, len(left),
                          sorted(t - registered for t in first.values())))
    return out


def of_run(reader: RunReader, faults: list[FaultRecord], until_ms: float) -> list[Rejoin]:
    """`rejoins` over a run directory's records (the printed report's, the unavailability benchmark's)."""
    final = reader.document(FINAL_STATE, FinalState)
    return rejoins(faults, reader.lines(BROKER_EVENTS, BrokerEvent), list(reader.lines(PARTITION_STATES, StateSample)),
                   final.assignments or {} if final else {}, until_ms)


def _isr_before(e: BrokerEvent) -> set[int]:
    """The ISR an isr_change event changed ("Expanding from 1,2")."""
    before = e.detail.rpartition(" from ")[2]
    return {int(b) for b in before.split(",") if b.strip().isdigit()}
