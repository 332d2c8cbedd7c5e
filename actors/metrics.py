"""Kafka's metrics as ray.util.metrics (Prometheus on each Ray node), the controller's and the brokers'.

Each is named as Prometheus's jmx_exporter names Kafka's MBean, so that a Kafka dashboard's query
needs only Ray's prefix: `kafka.controller:type=KafkaController,name=ActiveControllerCount` is
`kafka_controller_kafkacontroller_activecontrollercount` there and
`ray_kafka_controller_kafkacontroller_activecontrollercount` in a scrape of a Ray node (Ray adds
`ray_`; names come out lower-cased). Every series carries the tags `broker` (the broker's id, or the
controller candidate's) and `cluster` (the Ray namespace).
"""
from __future__ import annotations

from ray.util.metrics import Counter, Gauge, Histogram

EXPORT_INTERVAL_S = 1.0  # gauges computed over a whole context or a window are refreshed at most this often


def metric_name(domain: str, mbean_type: str, name: str) -> str:
    """jmx_exporter's name for <domain>:type=<mbean_type>,name=<name> (before Ray's `ray_`)."""
    return f"{domain.replace('.', '_')}_{mbean_type}_{name}".lower()


class KafkaMetrics:
    """Makes the metrics of one MBean domain (`kafka.controller`, `kafka.network`, ...), tagged with the
    broker and the cluster."""

    def __init__(self, domain: str, broker_id: int, cluster: str):
        self.domain = domain
        self.tags = {"broker": str(broker_id), "cluster": cluster}
        self.keys = ("broker", "cluster")

    def _tagged(self, metric):
        metric.set_default_tags(self.tags)
        return metric

    def gauge(self, mbean_type: str, name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
        return self._tagged(Gauge(metric_name(self.domain, mbean_type, name), doc, tag_keys=self.keys + extra))

    def counter(self, mbean_type: str, name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
        """A Kafka meter (`...PerSec`): its count, `_total` in a scrape."""
        return self._tagged(Counter(metric_name(self.domain, mbean_type, name), doc, tag_keys=self.keys + extra))

    def histogram(self, mbean_type: str, name: str, doc: str, boundaries: list[float]) -> Histogram:
        return self._tagged(Histogram(metric_name(self.domain, mbean_type, name), doc, boundaries=boundaries,
                                      tag_keys=self.keys))
