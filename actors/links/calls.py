"""Links carried by Ray calls rather than TCP: the controller's requests to a broker go through that
broker's RequestSender as actor calls, so the controller <-> broker link is faulted in the sender.

The faults are the ones of a TCP link (`faults.py`), applied to each call as a whole: a cut holds
the call, and its answer, until the link heals (TCP's retransmissions deliver them then, and Kafka's
RequestSendThread retries until answered); a delay, jitter, loss or throttle makes the call leave,
and its answer come back, when the `Shaper` says those bytes would arrive. The link is named after
the broker the controller runs on (`broker-C`), as a broker's link to a peer is.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from actors.links.faults import Direction, FaultTable, LinkFault, Shaper, describe

log = logging.getLogger(__name__)

HELD_POLL_S = 0.1  # how often a held call looks at whether it is still wanted


class CallLinks:
    """The faults of one process's call links; `pass_call` blocks a call as its link would."""

    def __init__(self) -> None:
        self._faults = FaultTable()
        self._shapers: dict[tuple[str, Direction], Shaper] = {}
        self._changed = threading.Condition()

    def set_fault(self, name: str, direction: Direction, fault: LinkFault) -> dict[str, dict[str, LinkFault]]:
        """Every link's faults, this one set; calls held by a cut go on when it heals."""
        with self._changed:
            if self._faults.get(name, direction) != fault:
                log.info("Call link %s %s: %s", name, direction.value, describe(fault))
            self._faults.set(name, direction, fault)
            self._changed.notify_all()
            return self._faults.report()

    def faults(self) -> dict[str, dict[str, LinkFault]]:
        with self._changed:
            return self._faults.report()

    def pass_call(self, name: str, direction: Direction, nbytes: Callable[[], int],
                  wanted: Callable[[], bool] = lambda: True) -> bool:
        """Block until a call (or its answer) of `nbytes()` bytes sent now would have crossed link
        `name` in `direction`; False if it stopped being `wanted` meanwhile (its sender moved on)."""
        sent_at = time.monotonic()
        with self._changed:
            while True:
                fault = self._faults.get(name, direction)
                if not fault.cut:
                    break
                if not wanted():
                    return False
                self._changed.wait(HELD_POLL_S)
                sent_at = time.monotonic()  # held by the cut: it leaves when the link heals
            if fault.healthy:
                return True
            shaper = self._shapers.setdefault((name, direction), Shaper())
            arrives = shaper.deliver_at(sent_at, nbytes() if fault.rate_bytes_per_s else 0, fault)
        time.sleep(max(0.0, arrives - time.monotonic()))
        return True
