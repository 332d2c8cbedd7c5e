"""What the run samples while it goes, every sample_interval_s in a thread of its own: the load's
figures, the controller's queues, every actor's memory (load.jsonl) and ZooKeeper's partition states
(partition_states.jsonl, also just before each fault on a broker; not an idle topic's: at 100,000
partitions a sample would take a second of ZooKeeper reads and megabytes). The faults, the actions and
the actors' own records reach the run directory from where they happen; the last sample's figures make
the progress line."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import ray

from actors.clients.load import now_ms
from actors.cluster import LocalCluster
from actors.records import RunWriter
from coordination.zkclient import KrayZkClient
from jobs.experiments.experiment import Experiment
from jobs.experiments.settling import zk_assignments, zk_leaderships
from jobs.measures import rundir

log = logging.getLogger(__name__)


class Sampler:
    """`load` gives the load's producers and its other actors (probers, consumers, group members) as they
    are at each sample: topics created during the run add consumers."""

    def __init__(self, experiment: Experiment, zk: KrayZkClient, cluster: LocalCluster, writer: RunWriter,
                 load: Callable[[], tuple[list, list]]):
        self.exp, self.zk, self.cluster, self.writer, self.load = experiment, zk, cluster, writer, load
        self._stopped = threading.Event()
        self.acked = self.consumed = 0
        self.rate = 0.0
        self.controller: tuple[int | None, int | None] = (None, None)  # id, epoch
        self.live: list[int] = []
        self.sampled = False  # the figures above are a sample's (the first comes sample_interval_s in)
        self._idle = frozenset(t.name for t in experiment.topics if t.load == "idle")  # read at the end only

    def start(self) -> None:
        threading.Thread(target=self._loop, name="sampler", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def line(self, clock: str, faults_done: int, faults: int) -> str:
        """The progress line after `clock` (the Scheduler's): the last sample's figures, or that there is
        none yet; no controller in the sample is an election under way."""
        if not self.sampled:
            return f"{clock} faults {faults_done}/{faults} | the first sample is under way"
        controller_id, epoch = self.controller
        controller = "no controller: an election is under way" if controller_id is None else \
            f"controller {controller_id}" + (f" (epoch {epoch})" if epoch is not None else "")
        return (f"{clock} acked {self.acked:,} ({self.rate:,.0f}/s), consumed {self.consumed:,} | faults "
                f"{faults_done}/{faults} | {controller} | brokers {len(self.live)}/{self.exp.brokers} registered")

    def _loop(self) -> None:
        last_acked, last_ts = self._acked(), time.monotonic()  # the first rate is over the first interval too
        while not self._stopped.wait(self.exp.sample_interval_s):
            try:
                self._sample(last_acked, last_ts)
                last_acked, last_ts = self.acked, time.monotonic()
            except Exception as e:  # ZooKeeper or an actor unavailable for a moment: the next sample
                log.debug("Sample skipped: %s", e)

    def _acked(self) -> int:
        """Records the load has had acknowledged so far (before the first sample: the load has run
        since its actors started, and the group's first rebalance was waited for)."""
        producers, _ = self.load()
        try:
            return sum(s.get("acked", 0) for s in ray.get([p.stats.remote() for p in producers], timeout=5))
        except Exception as e:  # a producer unavailable for a moment: the first rate counts from 0
            log.debug("No acknowledged count before the first sample: %s", e)
            return 0

    def _sample(self, last_acked: int, last_ts: float) -> None:
        producers, others = self.load()
        stats = ray.get([a.stats.remote() for a in producers + others], timeout=5)
        self.acked = sum(s.get("acked", 0) for s in stats[:len(producers)])  # the load's, probes apart
        self.consumed = sum(s.get("consumed", 0) for s in stats)
        self.rate = (self.acked - last_acked) / max(1e-3, time.monotonic() - last_ts)
        controller_id = self.zk.get_controller_id()
        epoch = self.zk.get_controller_epoch()
        status = {}
        if controller_id is not None:
            try:
                status = ray.get(self.cluster.controller_actor(controller_id).status.remote(timeout=2), timeout=3)
            except Exception:  # the controller is moving: its queues are unknown for this sample
                status = {}
        live = self.zk.get_all_broker_ids()
        ts = now_ms()
        self.controller = (controller_id, epoch[0] if epoch else None)
        self.live = live
        self.sampled = True
        self.writer.write(rundir.LOAD, [rundir.LoadSample(
            ts_ms=ts, acked_total=self.acked, produce_rate=self.rate, consumed_total=self.consumed,
            inbox_depth=status.get("inbox_depth", 0), sender_queue_depths=status.get("sender_queue_depths", {}),
            brokers_alive=len(live), controller_id=controller_id, controller_epoch=self.controller[1],
            rss_mb=self._resident_memory(stats, controller_id, status))])
        self.sample_states(live)

    def sample_states(self, live: list[int] | None = None) -> None:
        """ZooKeeper's partition states, dated when the reads end: a sample dated before a fault read the
        state before it (a periodic sample's actor calls can take seconds). The Scheduler takes one just
        before a fault on a broker: a leadership the auto rebalance moved back since the last sample, the
        coordinator's among them, is the fault's to take, and a killed broker's own record of it can be lost
        with it."""
        live = self.zk.get_all_broker_ids() if live is None else live
        partitions = zk_leaderships(self.zk, zk_assignments(self.zk, self._idle))
        self.writer.write(rundir.PARTITION_STATES, [rundir.StateSample(ts_ms=now_ms(), live_brokers=live,
                                                                        partitions=partitions)])

    def _resident_memory(self, load_stats: list[dict], controller_id: int | None, status: dict) -> dict[str, float]:
        """MB per actor: the brokers that answer at once, the active controller, the load actors."""
        refs = {h.info.remote(): f"broker-{b}" for b, h in list(self.cluster.brokers.items())}  # chaos changes it
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=2) if refs else ([], [])
        out = {}
        for ref in ready:
            try:
                out[refs[ref]] = ray.get(ref)["rss_mb"]
            except Exception:  # a broker that died meanwhile: no figure this time
                pass
        if "rss_mb" in status:
            out[f"controller-{controller_id}"] = status["rss_mb"]
        return out | {s["name"]: s["rss_mb"] for s in load_stats if "rss_mb" in s}
