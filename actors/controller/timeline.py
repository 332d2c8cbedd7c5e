"""Failover timelines: DESIGN.md's timestamps for each broker failure and controller failover.

detected (the event entered the inbox) -> processing_started (it left the inbox)
-> zk_written (new leaders/ISRs persisted) -> requests_sent -> requests_acked
(the last response to the requests that event produced). Wall-clock ms.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class FailoverTimeline:
    kind: str  # "broker_failure" or "controller_failover"
    controller_id: int
    epoch: int
    brokers: list[int]  # the brokers that failed (for a controller failover: the new controller)
    detected_ms: float
    processing_started_ms: float
    inbox_depth: int
    partitions_total: int = 0
    partitions_affected: int = 0
    live_brokers: int = 0
    zk_written_ms: float | None = None
    requests_sent_ms: float | None = None
    requests_acked_ms: float | None = None
    requests: int = 0
    pending: set[int] = field(default_factory=set, repr=False)

    def record(self) -> dict:
        out = asdict(self)
        out.pop("pending")
        return out

    def sent(self, correlation_ids: list[int], now_ms: float) -> None:
        self.requests_sent_ms = now_ms
        self.requests = len(correlation_ids)
        self.pending = set(correlation_ids)
        if not self.pending:
            self.requests_acked_ms = now_ms

    def acked(self, correlation_id: int, now_ms: float) -> bool:
        """Count one response; True when it was the last one outstanding."""
        if correlation_id in self.pending:
            self.pending.discard(correlation_id)
            if not self.pending:
                self.requests_acked_ms = now_ms
                return True
        return False
