"""Ray's reports of a fault's own kills are left out; any other is printed as Ray prints it (pure: the
filter in front of a stand-in for Ray's printing, no Ray started)."""
from __future__ import annotations

import pytest
from ray._private import worker

from jobs.experiments import expected_deaths
from jobs.experiments.expected_deaths import ExpectedDeaths


def report(pid: int) -> str:
    """Ray 2.60's report of a SIGKILLed actor process, as `make demo` printed it."""
    return ("A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the "
            "problem, check the logs for the dead worker. Lease ID: 08000000ea10 Worker ID: 8c25e4510abc Node ID: "
            f"fcc8fb233f7c Worker IP address: 192.0.2.2 Worker port: 40799 Worker PID: {pid} Worker exit type: "
            "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file. "
            "Some common causes include: (1) the process was killed by the OOM killer due to high memory usage, (2) "
            "ray stop --force was called, or (3) the worker crashed unexpectedly due to SIGSEGV or another "
            "unexpected error.")


@pytest.fixture
def printed(monkeypatch) -> list[dict]:
    """What reaches Ray's printing (a stand-in, put back after the test)."""
    out: list[dict] = []
    monkeypatch.setattr(worker, "print_to_stdstream", lambda data, ignore_prefix: out.append(data))
    return out


def test_the_report_of_an_expected_death_is_left_out_once_and_others_are_printed(printed):
    deaths = ExpectedDeaths()
    assert deaths.install()  # Ray 2.60's error thread prints through print_to_stdstream
    deaths.expect([2411, 2415])
    worker.print_to_stdstream({"lines": [report(2411)], "pid": "raylet", "is_err": False}, False)
    worker.print_to_stdstream({"lines": [report(24110), report(2415)], "pid": "raylet", "is_err": False}, False)
    worker.print_to_stdstream({"lines": [report(2411)], "pid": "raylet", "is_err": False}, False)  # pid reused
    warning = "WARNING: 12 PYTHON worker processes have been started on node"
    worker.print_to_stdstream({"lines": [warning], "pid": "raylet", "is_err": False}, False)
    assert printed == [{"lines": [report(24110)], "pid": "raylet", "is_err": False},
                       {"lines": [report(2411)], "pid": "raylet", "is_err": False},
                       {"lines": [warning], "pid": "raylet", "is_err": False}]


def test_a_death_expected_long_ago_is_reported(monkeypatch):
    deaths = ExpectedDeaths()
    monkeypatch.setattr(expected_deaths, "EXPECTED_FOR_S", -1.0)
    deaths.expect([2411])
    assert not deaths.expected(report(2411))


def test_without_ray_printing_its_reports_as_2_60_does_the_filter_says_it_is_not_in_place(monkeypatch, printed):
    monkeypatch.setattr(worker, "listen_error_messages", lambda worker, threads_stopped: print(threads_stopped))
    assert not ExpectedDeaths().install()
