"""A broker's Kafka metrics in a scrape of the Ray node, under jmx_exporter's names behind Ray's `ray_`
(actors/broker/metrics.py): RequestMetrics timers and RequestsPerSec per request type, BrokerTopicMetrics
MessagesInPerSec and BytesInPerSec, ReplicaManager UnderReplicatedPartitions."""
from __future__ import annotations

import re
import urllib.request

import ray
from confluent_kafka import Producer

from coordination import admin
from tests.integration.conftest import wait_until

NETWORK, SERVER = "ray_kafka_network_requestmetrics_", "ray_kafka_server_"


def scrape(namespace: str) -> dict[tuple[str, str, str], float]:
    """This cluster's broker series: (name, broker, request) -> value."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{ray.metrics_export_port}/metrics", timeout=5).read().decode()
    values = {}
    for line in body.splitlines():
        if line.startswith((NETWORK, SERVER)) and f'cluster="{namespace}"' in line:
            request = re.search(r'request="([^"]*)"', line)
            broker = re.search(r'broker="(\d+)"', line).group(1)
            values[(line.split("{")[0], broker, request.group(1) if request else "")] = float(line.rsplit(" ", 1)[1])
    return values


def total(values: dict, name: str, request: str = "") -> float:
    """A series summed over the brokers."""
    return sum(v for (n, _, r), v in values.items() if n == name and r == request)


def test_request_metrics_and_messages_in_after_an_acks_all_produce(new_cluster):
    cluster, zk = new_cluster(own=True)
    admin.create_topic(zk, "m", 1, 3, config={"min.insync.replicas": "2"})
    cluster.wait_for_metadata(lambda m: any(tp.topic == "m" and v[0] >= 0 for tp, v in m["partitions"].items()))
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers(), "acks": "all", "linger.ms": 5})
    errors = []
    for i in range(40):
        producer.produce("m", b"%03d" % i, partition=0, on_delivery=lambda err, _: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors
    namespace, brokers = cluster.config.namespace, {str(b) for b in cluster.brokers}
    under_replicated = SERVER + "replicamanager_underreplicatedpartitions"

    def exported():  # each counter reaches the scrape on its own: a scrape may have one and not yet another
        v = scrape(namespace)
        return total(v, SERVER + "brokertopicmetrics_messagesinpersec_total") == 40 \
            and total(v, SERVER + "brokertopicmetrics_bytesinpersec_total") > 0 \
            and total(v, NETWORK + "totaltimems_count", "Produce") >= 1 \
            and {b for (n, b, _) in v if n == under_replicated} == brokers and v
    values = wait_until(exported, timeout=60, what="the produce in every broker's metrics export")
    assert total(values, SERVER + "brokertopicmetrics_bytesinpersec_total") > 40 * 3  # batches: records and headers
    assert total(values, NETWORK + "requestspersec_total", "Produce") >= 1
    assert total(values, NETWORK + "requestspersec_total", "Metadata") >= 1
    produce = {n.removeprefix(NETWORK): v for (n, _, r), v in values.items() if r == "Produce" and v == v}
    for timer in ("totaltimems", "requestqueuetimems", "localtimems", "remotetimems", "responsequeuetimems",
                  "responsesendtimems"):
        for stat in ("mean", "50thpercentile", "99thpercentile", "999thpercentile", "count"):
            assert f"{timer}_{stat}" in produce, (timer, stat)
    # acks=all: the leader waits for a follower's fetch to move the high watermark
    assert produce["remotetimems_mean"] > 0 and produce["totaltimems_mean"] >= produce["remotetimems_mean"]
    assert total(values, NETWORK + "totaltimems_count", "FetchFollower") >= 1
    assert total(values, under_replicated) == 0
