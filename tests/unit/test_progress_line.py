"""The experiment's progress line: its figures before the first sample and without a controller, and its
clock against how long the load really runs (pure: the Scheduler's loop with faults that only take time)."""
from __future__ import annotations

import random
import re
import threading
import time

import pytest

from jobs.experiments import sampling
from jobs.experiments import schedule as schedule_module
from jobs.experiments.experiment import Experiment, FaultSpec
from jobs.experiments.sampling import Sampler
from jobs.experiments.schedule import Scheduler, load_length_s, schedule
from jobs.measures.rundir import FaultKind
from jobs.sweep import QUICK

REBALANCING = {"leader_imbalance_check_interval_seconds": 5}  # within the faults' wait for recovery


def sampler(exp: Experiment) -> Sampler:
    return Sampler(exp, zk=None, cluster=None, writer=None, load=lambda: ([], []))


def test_before_the_first_sample_the_line_says_so_instead_of_none_and_zeros():
    line = sampler(Experiment(name="e")).line("[   0.0s of 30s]", 0, 3)
    assert "None" not in line and "brokers 0/" not in line and "acked" not in line
    assert line == "[   0.0s of 30s] faults 0/3 | the first sample is under way"


def test_a_sample_without_a_controller_is_an_election_under_way():
    s = sampler(Experiment(name="e"))
    s.sampled, s.controller, s.live = True, (None, None), [1, 3]
    line = s.line("[  12.0s of 30s]", 1, 3)
    assert "None" not in line
    assert line.endswith("faults 1/3 | no controller: an election is under way | brokers 2/3 registered")
    s.controller = (2, 4)
    assert "| controller 2 (epoch 4) | brokers 2/3 registered" in s.line("[  13.0s of 30s]", 1, 3)


def test_the_quick_sweeps_load_lasts_at_least_the_horizon_after_its_last_kill_not_just_duration_s():
    """`make demo` said "21 s of load" and its clock ran to [35.0s/21s]: the load goes on horizon_s (15 s)
    after the last kill (at 15 s), and each kill waits for the cluster to recover from the one before."""
    for exp in QUICK.experiments():
        faults = schedule(exp, random.Random(exp.seed))
        assert load_length_s(exp, faults) == faults[-1].at_s + exp.horizon_s > exp.duration_s
    assert [load_length_s(e, e.schedule) for e in QUICK.experiments()] == [30, 34]


class TimedScheduler(Scheduler):
    """The real loop and clock; a fault is only the wait before it is injected (as one waiting for
    recovery) and how long it lasts (pauses: no kill, so Ray's printing is left alone)."""

    def __init__(self, exp: Experiment, waits_s: list[float], lines: list[str]):
        s = sampler(exp)
        s.sampled, s.controller, s.live = True, (1, 1), list(exp.broker_ids)
        super().__init__(exp, zk=None, cluster=None, chaos=None, lock=threading.Lock(), writer=None, settling=None,
                         sampler=s, grow=lambda done, timeout: None, progress=lines.append)
        self.waits_s = waits_s

    def _inject(self, fault_id: int, spec: FaultSpec) -> None:
        time.sleep(self.waits_s[fault_id - 1])
        self._last_injected = time.monotonic()
        self._injected.add(fault_id)
        time.sleep(spec.seconds)
        self.faults_done += 1


@pytest.mark.parametrize("waits_s", [[0.0, 0.0], [0.0, 1.0]], ids=["on time", "the last fault late"])
def test_the_clock_states_how_long_the_load_really_runs(monkeypatch, waits_s):
    monkeypatch.setattr(schedule_module, "PROGRESS_EVERY_S", 0.1)
    exp = Experiment(name="e", duration_s=1.2, horizon_s=1.0, controller=REBALANCING, schedule=[
        FaultSpec(at_s=0.2, fault=FaultKind.PAUSE_BROKER, target=1, seconds=0.2, after_recovery=True),
        FaultSpec(at_s=0.6, fault=FaultKind.PAUSE_BROKER, target=2, seconds=0.2, after_recovery=True)])
    lines: list[str] = []
    began = time.monotonic()
    TimedScheduler(exp, waits_s, lines).drive()
    ran = time.monotonic() - began  # 1.6 s on time, 2.6 s with the last fault 1 s late (duration_s: 1.2)
    assert lines[0] == "Load for at least 1.6 s with 2 faults (2 of them waiting for the cluster to recover or a " \
                       "broker to return, which puts them and the load's end later)"  # 0.6 + 1.0 s
    clocks = [re.match(r"\[ *([\d.]+)s of (at least )?([\d.]+)s\]", line).groups() for line in lines[1:]]
    assert clocks
    for elapsed, at_least, end in clocks:  # (to 0.1 s: the figures are rounded)
        assert float(elapsed) <= float(end) + 0.1  # never past the length it states
        if not at_least:  # once the length is known, it is the load's (the loop looks every 50 ms)
            assert float(end) == pytest.approx(ran, abs=0.3)
        else:  # before, never more than it turns out to be
            assert float(end) <= ran + 0.1
    assert not clocks[-1][1]  # the end was known before it came


def test_the_clock_is_exact_once_every_fault_is_in_and_a_lower_bound_before():
    exp = Experiment(name="e", duration_s=21, horizon_s=15, controller=REBALANCING, schedule=[
        FaultSpec(at_s=3, fault=FaultKind.KILL_BROKER, target=1, after_recovery=True),
        FaultSpec(at_s=15, fault=FaultKind.KILL_BROKER, target=2, after_recovery=True)])
    s = TimedScheduler(exp, [0, 0], [])
    assert s.clock(2.0, 0.0, exp.schedule) == "[   2.0s of at least 30.0s]"  # 15 + 15
    assert s.clock(20.0, 0.0, exp.schedule) == "[  20.0s of at least 35.0s]"  # the last fault no earlier than now
    s._injected = {1, 2}
    assert s.clock(30.0, 22.0, exp.schedule) == "[  30.0s of 37.0s]"
    assert s.clock(38.0, 22.0, exp.schedule) == "[  38.0s of at least 38.0s]"  # a fault's thread still ending


class Producer:
    """A load producer whose stats call answers at once (what ray.get gives back, below)."""

    def __init__(self, acked: list[int]):
        self.acked = acked
        self.stats = self

    def remote(self) -> dict:
        return {"acked": self.acked[0]}


def test_the_first_samples_rate_is_over_its_interval_not_everything_acked_before_sampling_began(monkeypatch):
    """The load runs seconds before sampling starts (the group's first rebalance is waited for): the first
    line said "acked 117,138 (115,777/s)" of a load doing 10,000/s."""
    monkeypatch.setattr(sampling.ray, "get", lambda refs, timeout=None: refs)
    acked = [100_000]
    s = Sampler(Experiment(name="e", sample_interval_s=0.2), zk=None, cluster=None, writer=None,
                load=lambda: ([Producer(acked)], []))

    baselines = []

    def sample(last_acked: int, last_ts: float) -> None:  # the rate as _sample computes it, no ZooKeeper
        baselines.append((last_acked, time.monotonic() - last_ts))
        s.acked = acked[0]
        s.rate = (s.acked - last_acked) / baselines[-1][1]
        s._stopped.set()
    monkeypatch.setattr(s, "_sample", sample)
    threading.Timer(0.1, lambda: acked.__setitem__(0, 101_000)).start()  # 1,000 more in the first interval
    s._loop()
    [(baseline, interval)] = baselines
    assert baseline == 100_000 and s.rate == pytest.approx(1_000 / interval)  # not 101,000 / interval
