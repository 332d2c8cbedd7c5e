"""Kafka's controller metrics, exported through ray.util.metrics (Prometheus on each Ray node).

Names follow Kafka's JMX names (kafka.controller:type=KafkaController,name=...,
type=ControllerEventManager, type=ControllerStats). Values are counted at the
edge, from the controller's status after each event, never inside pure logic.
"""
from __future__ import annotations

import time

from ray.util.metrics import Counter, Gauge, Histogram

GAUGE_REFRESH_S = 1.0  # whole-context gauges (imbalance, offline count) are O(partitions): refresh at most this often


class ControllerMetrics:
    def __init__(self, broker_id: int, cluster: str):
        tags = {"broker": str(broker_id), "cluster": cluster}
        keys = ("broker", "cluster")

        def gauge(name: str, doc: str) -> Gauge:
            g = Gauge(f"kafka_controller_{name}", doc, tag_keys=keys)
            g.set_default_tags(tags)
            return g
        self.active = gauge("ActiveControllerCount", "1 on the active controller, else 0")
        self.offline = gauge("OfflinePartitionsCount", "partitions without a live leader")
        self.imbalance = gauge("PreferredReplicaImbalanceCount", "partitions not led by their preferred replica")
        self.partitions = gauge("GlobalPartitionCount", "partitions in the cluster")
        self.topics = gauge("GlobalTopicCount", "topics in the cluster")
        self.queue_size = gauge("EventQueueSize", "events waiting in the controller's inbox")
        self.queue_time = Histogram("kafka_controller_EventQueueTimeMs", "time events wait in the inbox",
                                    boundaries=[1, 5, 10, 50, 100, 500, 1000, 5000], tag_keys=keys)
        self.queue_time.set_default_tags(tags)
        self.election_time = Histogram("kafka_controller_LeaderElectionRateAndTimeMs",
                                       "time of events that elected leaders",
                                       boundaries=[1, 5, 10, 50, 100, 500, 1000, 5000], tag_keys=keys)
        self.election_time.set_default_tags(tags)
        self.unclean = Counter("kafka_controller_UncleanLeaderElectionsPerSec", "unclean leader elections",
                               tag_keys=keys)
        self.unclean.set_default_tags(tags)
        self._elections = 0
        self._unclean = 0
        self._refreshed = 0.0

    def record_event(self, queue_time_ms: float, processing_ms: float, queue_size: int, elections: int,
                     unclean: int) -> None:
        if elections < self._elections or unclean < self._unclean:  # counters restart with each term
            self._elections = self._unclean = 0
        self.queue_time.observe(queue_time_ms)
        self.queue_size.set(queue_size)
        if elections > self._elections:
            self.election_time.observe(processing_ms)
        if unclean > self._unclean:
            self.unclean.inc(unclean - self._unclean)
        self._elections, self._unclean = elections, unclean

    def due(self) -> bool:
        return time.monotonic() - self._refreshed >= GAUGE_REFRESH_S

    def record_status(self, status: dict) -> None:
        self._refreshed = time.monotonic()
        self.active.set(1 if status["active"] else 0)
        self.offline.set(status["offline_partitions"])
        self.imbalance.set(status["preferred_replica_imbalance"])
        self.partitions.set(status["partitions"])
        self.topics.set(status["topics"])
