"""The load a cluster sustains, measured: the knee (jobs/measures/knee.py) of a cluster shaped as an
experiment, with the experiments' own load client (a LoadGenerator, not recording). A sweep measures it at
its start, so that its experiments offer load as fractions of it (jobs/sweep.py).
"""
from __future__ import annotations

import time
import uuid
from typing import Callable

import ray

from actors.clients.load import LoadGenerator
from actors.cluster import LocalCluster, listener_host
from actors.config import ClusterConfig
from coordination import admin
from coordination.zkdata import TopicPartition
from jobs.experiments.local import fresh_chroot
from jobs.experiments.runner import await_group, beside_the_load
from jobs.measures.knee import KNEE_P99_MS, Capacity, knee_of, ladder, point

SESSION_TIMEOUT_MS = 18_000  # Kafka's zookeeper.session.timeout.ms: a broker overloaded by a rate is slow, not dead


def measure_capacity(connect: str, experiment, partitions: int, start_rate: float = 500, max_rate: float = 1_024_000,
                     warm_s: float = 2, window_s: float = 4, bisect: int = 1,
                     progress: Callable[[str], None] = lambda line: None) -> Capacity:
    """The knee of a cluster shaped as `experiment` (its brokers, broker settings and load: acks, record
    size, records per partition) with one topic of `partitions` (RF 3, or the brokers if fewer), measured
    with the experiment's load client and, running beside it as in the experiment, its consumers, probes
    and consumer group (`beside_the_load`): a 1,000-partition load that the producers alone carried at
    4,000/s queued for minutes at 2,000/s with 3 group members and 60 probes beside it. Its ZooKeeper
    sessions are Kafka's 18 s, not the experiment's, so that a rate beyond the cluster makes it slow
    rather than starts failovers. Every partition is written once before the first window. The cluster is
    stopped and its logs deleted after."""
    began = time.monotonic()
    config = ClusterConfig(zk_connect=fresh_chroot(connect, "kray-capacity"), namespace=f"capacity-{uuid.uuid4().hex[:6]}",
                           zk_session_timeout_ms=SESSION_TIMEOUT_MS, host=listener_host(), broker=experiment.broker)
    zk = config.zk_client().start()
    cluster = LocalCluster(config, experiment.broker_ids)
    load, beside = None, []
    try:
        cluster.start()
        cluster.wait_until_ready(zk)
        admin.create_topic(zk, "capacity", partitions, min(3, experiment.brokers))
        topic = [TopicPartition("capacity", p) for p in range(partitions)]
        cluster.wait_for_metadata(lambda m: len(m["partitions"]) >= partitions, timeout=300)
        spec = experiment.load
        load = LoadGenerator.remote(0, config, topic, None, spec.record_size, spec.acks_code,
                                    spec.records_per_partition)
        consumers, probers, members = beside_the_load(config, spec, topic, topic)
        beside = consumers + probers + members
        ray.get([a.start.remote() for a in [load, *beside]], timeout=60)
        ray.get(load.set_rate.remote(start_rate))
        deadline = time.monotonic() + 120
        while ray.get(load.stats.remote())["partitions_acked"] < partitions and time.monotonic() < deadline:
            time.sleep(0.2)
        # the group's first rebalance is not in any window
        if members and await_group(members, topic, max(0.0, deadline - time.monotonic())) is None:
            progress("Not every partition written, or the group not settled, after 120 s: measuring anyway")

        def measure(rate: float) -> dict:
            ray.get(load.set_rate.remote(rate))
            time.sleep(warm_s)
            m0 = ray.get(load.mark.remote())
            time.sleep(window_s)
            m1 = ray.get(load.mark.remote())
            row = point(rate, m0, m1, ray.get(load.latencies_ms.remote(m0["shipped"], m1["shipped"])))
            row.update(ray.get(load.drain.remote(30)))
            progress(f"{partitions:,} partitions, {rate:,.0f} records/s offered: {row['achieved_per_s']:,}/s "
                     f"acknowledged, p99 {row['latency_ms_p99']:g} ms" + (" (met the knee's bound)" if row["knee_ok"]
                                                                          else ""))
            return row
        rows = ladder(measure, start_rate, max_rate=max_rate, bisect=bisect)
        knee, limited = knee_of(rows)
        return Capacity(partitions=partitions, knee_per_s=knee, limited_by=limited, knee_p99_ms=KNEE_P99_MS,
                        rows=rows, seconds=round(time.monotonic() - began, 1))
    finally:
        for actor in [load, *beside] if load is not None else beside:
            try:  # a load client's stop flushes for up to 150 s: whatever it says, the cluster is stopped
                ray.get(actor.stop.remote(), timeout=200)
            except ray.exceptions.RayError as e:
                progress(f"A load actor did not stop cleanly: {e}")
            ray.kill(actor)
        cluster.stop(delete_logs=True)
        zk.close()
