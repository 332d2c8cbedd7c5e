"""A broker's Kafka metrics, exported through ray.util.metrics under jmx_exporter's names
(actors/metrics.py), tagged `request` where Kafka's MBean has it:

- kafka.network:type=RequestMetrics,name=<timer>,request=<request>, a Yammer timer in Kafka, shown as
  jmx_exporter shows one: gauges `ray_kafka_network_requestmetrics_<timer>_mean`, `_50thpercentile`,
  `_99thpercentile`, `_999thpercentile` and `_count`; name=RequestsPerSec a counter
  (`ray_kafka_network_requestmetrics_requestspersec_total`, the controller's requests over Ray included);
- kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec and BytesInPerSec (all topics), counters;
- kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions, a gauge.

The mean and the quantiles are over the requests answered since the last export (a second): Yammer's
reservoir favours the last few minutes, and a cumulative figure would hide any change once a broker has
run a while. A second without such a request leaves them as they were, as a reservoir keeps its samples.
"""
from __future__ import annotations

from actors.broker.request_metrics import TIMERS, Snapshot, difference, summary
from actors.metrics import KafkaMetrics

YAMMER_TIMER = {"mean": "mean", "p50": "50thPercentile", "p99": "99thPercentile", "p999": "999thPercentile"}


class BrokerMetrics:
    def __init__(self, broker_id: int, cluster: str):
        network = KafkaMetrics("kafka.network", broker_id, cluster)
        server = KafkaMetrics("kafka.server", broker_id, cluster)
        request = ("request",)
        self.timers = {(timer, stat): network.gauge("RequestMetrics", f"{timer}_{attribute}",
                                                    f"{timer} of the requests answered in the last second: {stat}",
                                                    request)
                       for timer in TIMERS for stat, attribute in YAMMER_TIMER.items()}
        self.counts = {timer: network.gauge("RequestMetrics", f"{timer}_Count", f"requests timed by {timer}", request)
                       for timer in TIMERS}
        self.requests_per_sec = network.counter("RequestMetrics", "RequestsPerSec", "requests served", request)
        self.messages_in = server.counter("BrokerTopicMetrics", "MessagesInPerSec", "records appended by produce")
        self.bytes_in = server.counter("BrokerTopicMetrics", "BytesInPerSec", "bytes appended by produce")
        self.under_replicated = server.gauge("ReplicaManager", "UnderReplicatedPartitions",
                                             "partitions led here whose ISR is smaller than their replicas")
        self._timed: Snapshot = {}
        self._served: dict[str, int] = {}
        self._messages_in = self._bytes_in = 0

    def export(self, timed: Snapshot, served: dict[str, int], messages_in: int, bytes_in: int,
               under_replicated: int) -> None:
        """Set the series from the broker's aggregates so far (request timers, requests served per name,
        records and bytes appended) and its under-replicated partitions now."""
        for name, stats in difference(timed, self._timed).items():
            tags = {"request": name}
            for timer, stats_of_timer in summary(stats).items():
                for stat, value in stats_of_timer.items():
                    self.timers[(timer, stat)].set(value, tags=tags)
                self.counts[timer].set(timed[name]["count"], tags=tags)
        for name, n in served.items():
            if n > self._served.get(name, 0):
                self.requests_per_sec.inc(n - self._served.get(name, 0), tags={"request": name})
        if messages_in > self._messages_in:
            self.messages_in.inc(messages_in - self._messages_in)
        if bytes_in > self._bytes_in:
            self.bytes_in.inc(bytes_in - self._bytes_in)
        self.under_replicated.set(under_replicated)
        self._timed, self._served, self._messages_in, self._bytes_in = timed, served, messages_in, bytes_in
