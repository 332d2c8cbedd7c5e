"""Kafka's controller metrics, exported through ray.util.metrics under jmx_exporter's names
(actors/metrics.py): `kafka.controller:type=KafkaController,name=ActiveControllerCount` is
`ray_kafka_controller_kafkacontroller_activecontrollercount` in a scrape of a Ray node. Kafka's timers
(Yammer, shown as quantiles) are histograms here (`_bucket`, `_count`, `_sum`), its meters counters
(`_total`). Values are counted at the edge, from the controller's status and the events it processes,
never inside pure logic.
"""
from __future__ import annotations

from actors.controller.events import CONTROLLER_STATES, rate_and_time_metric
from actors.metrics import KafkaMetrics

TIMER_BOUNDARIES_MS = [1, 5, 10, 50, 100, 500, 1000, 5000, 30000]
KAFKA_CONTROLLER_GAUGES = {  # type=KafkaController: name -> the status field it shows
    "ActiveControllerCount": "active", "OfflinePartitionsCount": "offline_partitions",
    "PreferredReplicaImbalanceCount": "preferred_replica_imbalance", "GlobalPartitionCount": "partitions",
    "GlobalTopicCount": "topics", "TopicsToDeleteCount": "topics_to_delete_count",
    "ReplicasToDeleteCount": "replicas_to_delete_count",
    "TopicsIneligibleToDeleteCount": "topics_ineligible_to_delete_count",
    "ReplicasIneligibleToDeleteCount": "replicas_ineligible_to_delete_count",
}


class ControllerMetrics:
    def __init__(self, broker_id: int, cluster: str):
        metrics = KafkaMetrics("kafka.controller", broker_id, cluster)
        gauge = metrics.gauge

        def timer(mbean_type: str, name: str, doc: str):
            return metrics.histogram(mbean_type, name, doc, TIMER_BOUNDARIES_MS)
        self.gauges = {name: gauge("KafkaController", name, f"Kafka's {name}") for name in KAFKA_CONTROLLER_GAUGES}
        self.state = gauge("KafkaController", "ControllerState",
                           "the ControllerState of the event being processed (0: Idle)")
        self.queue_size = gauge("ControllerEventManager", "EventQueueSize", "events waiting in the controller's inbox")
        self.queue_time = timer("ControllerEventManager", "EventQueueTimeMs", "time events wait in the inbox")
        self.state_timers = {state: timer("ControllerStats", metric, f"processing time of {state} events")
                             for state in CONTROLLER_STATES if (metric := rate_and_time_metric(state))}
        self.unclean = metrics.counter("ControllerStats", "UncleanLeaderElectionsPerSec", "unclean leader elections")
        self.failed = metrics.counter("ControllerStats", "FailedEventsPerSec",
                                      "controller events that failed (each moves the controller)")
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
