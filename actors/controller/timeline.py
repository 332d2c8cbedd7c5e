"""Failover timelines: DESIGN.md's timestamps for each broker failure and controller failover.

detected (the event entered the inbox) -> processing_started (it left the inbox)
-> zk_written (new leaders/ISRs persisted) -> requests_sent -> requests_acked
(the last response to the requests that event produced). With requests sent after each state
machine call, zk_written and requests_sent are those of the last requests. Wall-clock ms. The fields
are the run directory's TimelineRecord; this adds the bookkeeping of answers.
"""
from __future__ import annotations

from pydantic import PrivateAttr

from jobs.rundir import TimelineRecord


class FailoverTimeline(TimelineRecord):
    _pending: set[int] = PrivateAttr(default_factory=set)  # correlation ids not yet answered

    def record(self) -> dict:
        return self.model_dump()

    def sent(self, correlation_ids: list[int], now_ms: float) -> None:
        """Requests of the event went out: a state machine call's, or the rest at the event's end."""
        self.requests_sent_ms = now_ms
        self.requests += len(correlation_ids)
        self._pending |= set(correlation_ids)

    def close(self, now_ms: float) -> bool:
        """The event is over; True when there is no answer to wait for."""
        self.requests_sent_ms = self.requests_sent_ms or now_ms
        if not self._pending:
            self.requests_acked_ms = now_ms
        return not self._pending

    def acked(self, correlation_id: int, now_ms: float) -> bool:
        """Count one response; True when it was the last one outstanding."""
        if correlation_id in self._pending:
            self._pending.discard(correlation_id)
            if not self._pending:
                self.requests_acked_ms = now_ms
                return True
        return False
