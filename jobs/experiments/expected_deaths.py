"""Ray's reports of the deaths a fault causes on purpose. When an actor's process ends without telling
its raylet (a SIGKILL), the raylet reports it to the driver of the actor's job, and the driver's error
thread prints the report whatever `ray.init(log_to_driver=...)` says and whatever RAY_DEDUP_LOGS says
(that only folds repeats): "(raylet) A worker died or was killed while executing a task by an
unexpected system error ... (1) the process was killed by the OOM killer ... (3) ... SIGSEGV ...".
For a fault's own SIGKILL that is false alarm. A fault names the processes it kills here before it
kills them; their reports are left out, once each and for EXPECTED_FOR_S at most, and every other
report (an actor that died of its own) is printed as Ray prints it, and sooner: Ray folds a report like
one printed within the last 5 s into a "[repeated Nx]" line printed later, which a kill's report would
have done to it.

Ray has no public hook for this: the filter takes the place of the function the error thread prints
through (ray._private.worker.listen_error_messages calls its module's print_to_stdstream), and only
where that is still how Ray prints them; elsewhere `install` says it is not in place, and the reports
go out as they are.
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable

WORKER_DIED = re.compile(r"A worker died or was killed while executing a task\b.*?\bWorker PID: (\d+)\b", re.DOTALL)
EXPECTED_FOR_S = 60.0  # a report comes within a second of the kill; a pid not reported by then is dropped
# (pids are reused: a later process of the same pid that dies unexpectedly must be reported)
# said at a kill when the filter is not in place
RAY_REPORTS_FOLLOW = " (a SIGKILL: Ray's \"(raylet) A worker died or was killed\" report that follows is this kill's)"


class ExpectedDeaths:
    """The pids of the processes a fault is killing, and the filter that leaves their reports out."""

    def __init__(self) -> None:
        self._until: dict[int, float] = {}  # pid -> until when its report is expected (monotonic)
        self._lock = threading.Lock()  # faults run in threads of their own; Ray's error thread reads
        self._print: Callable[[dict, bool], None] | None = None  # Ray's own, once the filter is in its place

    def expect(self, pids: Iterable[int]) -> None:
        """These processes are about to be killed on purpose."""
        now = time.monotonic()
        with self._lock:
            self._until = {pid: until for pid, until in self._until.items() if until >= now}  # never reported
            self._until.update(dict.fromkeys(pids, now + EXPECTED_FOR_S))

    def expected(self, line: str) -> bool:
        """Whether `line` is Ray's report of an expected death (which is then expected no more)."""
        match = WORKER_DIED.search(line)
        if match is None:
            return False
        with self._lock:
            until = self._until.pop(int(match.group(1)), None)
        return until is not None and time.monotonic() <= until

    def install(self) -> bool:
        """Put the filter in the driver's way of printing Ray's reports; whether it is in place."""
        from ray._private import worker

        if self._print is not None:
            return True
        listener = getattr(worker, "listen_error_messages", None)
        if listener is None or "print_to_stdstream" not in listener.__code__.co_names:
            return False
        self._print, worker.print_to_stdstream = worker.print_to_stdstream, self._filtered
        return True

    def _filtered(self, data: dict, ignore_prefix: bool) -> None:
        lines = [line for line in data.get("lines", []) if not self.expected(line)]
        if lines:
            self._print({**data, "lines": lines}, ignore_prefix)


EXPECTED_DEATHS = ExpectedDeaths()  # this driver's: Ray's error thread is one per process
