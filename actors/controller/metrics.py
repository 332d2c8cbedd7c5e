"""Kafka's controller metrics, exported through ray.util.metrics (Prometheus on each Ray node).

Each is named as Prometheus's jmx_exporter names Kafka's MBean, so that a Kafka dashboard's query
needs only Ray's prefix: `kafka.controller:type=KafkaController,name=ActiveControllerCount` is
`kafka_controller_kafkacontroller_activecontrollercount` there and
`ray_kafka_controller_kafkacontroller_activecontrollercount` in a scrape of a Ray node (Ray adds
`ray_`; names come out lower-cased). Kafka's timers (Yammer, shown as quantiles) are histograms
here (`_bucket`, `_count`, `_sum`), its meters counters (`_total`). Every series carries the tags
`broker` (the controller candidate's broker id) and `cluster` (the Ray namespace). Values are
counted at the edge, from the controller's status and the events it processes, never inside pure logic.
"""
from __future__ import annotations

from ray.util.metrics import Counter, Gauge, Histogram

from actors.controller.events import CONTROLLER_STATES, rate_and_time_metric

GAUGE_REFRESH_S = 1.0  # whole-context gauges (imbalance, offline count) are O(partitions): refreshed at most this often
TIMER_BOUNDARIES_MS = [1, 5, 10, 50, 100, 500, 1000, 5000, 30000]
KAFKA_CONTROLLER_GAUGES = {  # type=KafkaController: name -> the status field it shows
    "ActiveControllerCount": "active", "OfflinePartitionsCount": "offline_partitions",
    "PreferredReplicaImbalanceCount": "preferred_replica_imbalance", "GlobalPartitionCount": "partitions",
    "GlobalTopicCount": "topics", "TopicsToDeleteCount": "topics_to_delete_count",
    "ReplicasToDeleteCount": "replicas_to_delete_count",
    "TopicsIneligibleToDeleteCount": "topics_ineligible_to_delete_count",
    "ReplicasIneligibleToDeleteCount": "replicas_ineligible_to_delete_count",
}


def metric_name(mbean_type: str, name: str) -> str:
    """jmx_exporter's name for kafka.controller:type=<mbean_type>,name=<name> (before Ray's `ray_`)."""
    return f"kafka_controller_{mbean_type}_{name}".lower()


class ControllerMetrics:
    def __init__(self, broker_id: int, cluster: str):
        tags = {"broker": str(broker_id), "cluster": cluster}
        keys = ("broker", "cluster")

        def tagged(metric):
            metric.set_default_tags(tags)
            return metric

        def gauge(mbean_type: str, name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
            return tagged(Gauge(metric_name(mbean_type, name), doc, tag_keys=keys + extra))

        def timer(mbean_type: str, name: str, doc: str) -> Histogram:
            return tagged(Histogram(metric_name(mbean_type, name), doc, boundaries=TIMER_BOUNDARIES_MS,
                                    tag_keys=keys))
        self.gauges = {name: gauge("KafkaController", name, f"Kafka's {name}") for name in KAFKA_CONTROLLER_GAUGES}
        self.state = gauge("KafkaController", "ControllerState",
                           "the ControllerState of the event being processed (0: Idle)")
        self.queue_size = gauge("ControllerEventManager", "EventQueueSize", "events waiting in the controller's inbox")
        self.queue_time = timer("ControllerEventManager", "EventQueueTimeMs", "time events wait in the inbox")
        self.state_timers = {state: timer("ControllerStats", metric, f"processing time of {state} events")
                             for state in CONTROLLER_STATES if (metric := rate_and_time_metric(state))}
        self.unclean = tagged(Counter(metric_name("ControllerStats", "UncleanLeaderElectionsPerSec"),
                                      "unclean leader elections", tag_keys=keys))
        self.failed = tagged(Counter(metric_name("ControllerStats", "FailedEventsPerSec"),
                                     "controller events that failed (each moves the controller)", tag_keys=keys))
        self.sender_queue = gauge("ControllerChannelManager", "QueueSize",
                                  "requests queued or in flight to one broker", ("brokerId",))
        self.sender_total = gauge("ControllerChannelManager", "TotalQueueSize",
                                  "requests queued or in flight to every broker")
        self._unclean = 0
        self._queued_to: set[int] = set()

    def event_started(self, state: str) -> None:
        self.state.set(CONTROLLER_STATES[state])

    def event_processed(self, state: str, queue_time_ms: float, processing_ms: float, queue_size: int,
                        unclean: int) -> None:
        """After each event: its timers, the inbox, and unclean elections (a count that restarts each term)."""
        self.state.set(CONTROLLER_STATES["Idle"])
        self.queue_time.observe(queue_time_ms)
        self.queue_size.set(queue_size)
        if state in self.state_timers:
            self.state_timers[state].observe(processing_ms)
        if unclean < self._unclean:
            self._unclean = 0
        if unclean > self._unclean:
            self.unclean.inc(unclean - self._unclean)
        self._unclean = unclean

    def event_failed(self) -> None:
        self.failed.inc()

    def record_status(self, status: dict) -> None:
        for name, field in KAFKA_CONTROLLER_GAUGES.items():
            self.gauges[name].set(int(status[field]))
        depths = status["sender_queue_depths"]
        for broker_id in self._queued_to | set(depths):  # a broker no longer sent to shows 0, not its last depth
            self.sender_queue.set(depths.get(broker_id, 0), tags={"brokerId": str(broker_id)})
        self._queued_to = set(depths)
        self.sender_total.set(sum(depths.values()))
