"""Failover timelines: the timestamps (docs/ARCHITECTURE.md) for each broker failure and controller failover.

detected (the event entered the inbox) -> processing_started (it left the inbox)
-> zk_written (new leaders/ISRs persisted) -> requests_sent -> requests_acked
(the last response to the requests that event produced). Wall-clock ms. The fields
are the run directory's TimelineRecord; this adds the bookkeeping of answers.
"""
from __future__ import annotations

from pydantic import PrivateAttr

from actors.controller.events import now_ms
from actors.records import TimelineRecord


class Laps:
    """How long each step of a sequence took, for the log line that ends it."""

    def __init__(self) -> None:
        self._last = now_ms()
        self.laps: list[tuple[str, float]] = []

    def lap(self, step: str) -> None:
        """`step` ends now."""
        t = now_ms()
        self.laps.append((step, t - self._last))
        self._last = t

    def __str__(self) -> str:
        return ", ".join(f"{step} {ms:.0f} ms" for step, ms in self.laps)


class FailoverTimeline(TimelineRecord):
    _pending: set[int] = PrivateAttr(default_factory=set)  # correlation ids not yet answered
    _final: bool = PrivateAttr(default=False)  # the event's last requests have left

    def record(self) -> dict:
        return self.model_dump()

    def sent(self, correlation_ids: list[int], now_ms: float, final: bool = True) -> None:
        """Requests of the event left; `final`: its last ones (others may have gone ahead, such as the
        UpdateMetadata sent before the elections of a broker failure)."""
        self._pending |= set(correlation_ids)
        self.requests += len(correlation_ids)
        if final:
            self.requests_sent_ms = now_ms
            self._final = True
            if not self._pending:
                self.requests_acked_ms = now_ms

    def acked(self, correlation_id: int, now_ms: float) -> bool:
        """Count one response; True when it was the last one outstanding of an event whose last requests left."""
        if correlation_id in self._pending:
            self._pending.discard(correlation_id)
            if not self._pending and self._final:
                self.requests_acked_ms = now_ms
                return True
        return False
