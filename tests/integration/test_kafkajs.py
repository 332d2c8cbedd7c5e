"""kafkajs, a Kafka client in another language (Node.js, from the npm registry; `make setup` installs it in
tests/kafkajs): its admin creates, grows, configures, moves and deletes topics through the controller,
its producer puts many partitions in one ProduceRequest as the Java client does, and its consumer group
shares a topic, rebalances, and resumes from its commits (real ZooKeeper, real Ray, loopback TCP)."""
from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from coordination import admin, zkdata
from tests.integration.conftest import wait_until
from tests.integration.test_consumer_groups import GROUPS, PARTITIONS, TOPIC, ProcessMember, share_leave_join_resume

CLIENT = Path(__file__).resolve().parents[1] / "kafkajs" / "client.js"


@pytest.fixture
def cluster(new_cluster):
    cluster, zk = new_cluster(broker=GROUPS)
    return cluster, zk


def node(*args: str, timeout: float = 120) -> list[dict]:
    done = subprocess.run(["node", str(CLIENT), *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def produce(servers: str, count: int, start: int = 0) -> list[bytes]:
    """`count` records to each partition, all in one sendBatch."""
    assert node("produce", servers, TOPIC, str(PARTITIONS), str(count), str(start)) == [{"sent": count * PARTITIONS}]
    return [f"{p}-{i}".encode() for p in range(PARTITIONS) for i in range(start, start + count)]


def test_kafkajs_admin_creates_grows_configures_moves_and_deletes(cluster):
    cluster, zk = cluster
    servers = cluster.bootstrap_servers()
    results = node("admin", servers, json.dumps([
        {"op": "createTopics", "args": {"waitForLeaders": True, "topics": [
            {"topic": TOPIC, "numPartitions": 2, "replicationFactor": 3,
             "configEntries": [{"name": "retention.ms", "value": "600000"}]}]}},
        {"op": "createTopics", "args": {"topics": [{"topic": TOPIC, "numPartitions": 2}]}},  # exists: false
        {"op": "createPartitions", "args": {"topicPartitions": [{"topic": TOPIC, "count": PARTITIONS}]}},
        {"op": "alterConfigs", "args": {"resources": [{"type": 2, "name": TOPIC, "configEntries": [
            {"name": "min.insync.replicas", "value": "2"}]}]}},
        {"op": "describeConfigs", "args": {"resources": [{"type": 2, "name": TOPIC,
                                                          "configNames": ["min.insync.replicas"]}]}},
        {"op": "alterPartitionReassignments", "args": {"topics": [
            {"topic": TOPIC, "partitionAssignment": [{"partition": 0, "replicas": [3, 2, 1]}]}]}},
        {"op": "describeCluster", "args": None},
    ]))
    by_op = {r["op"]: r for r in results}
    assert not [r for r in results if "error" in r], results
    assert [r["result"] for r in results if r["op"] == "createTopics"] == [True, False]
    assert len(zk.get_znode(zkdata.TopicZNode, zkdata.topic_path(TOPIC)).assignment()) == PARTITIONS
    assert admin.topic_config(zk, TOPIC) == {"min.insync.replicas": "2"}  # AlterConfigs replaces them all
    entry = by_op["describeConfigs"]["result"]["resources"][0]["configEntries"][0]
    assert (entry["configName"], entry["configValue"], entry["configSource"]) == ("min.insync.replicas", "2", 1)
    assert by_op["describeCluster"]["result"]["controller"] == zk.get_controller_id()
    wait_until(lambda: zk.get_znode(zkdata.TopicZNode, zkdata.topic_path(TOPIC)).assignment()[0] == [3, 2, 1],
               timeout=30, what="the move of partition 0 done")
    deleted = node("admin", servers, json.dumps([{"op": "deleteTopics", "args": {"topics": [TOPIC]}}]))
    assert deleted == [{"op": "deleteTopics", "result": None}]
    wait_until(lambda: not zk.get_all_topics(), timeout=30, what="the topic's znodes deleted")


class NodeMember(ProcessMember):
    """A kafkajs group member in its own process: its records and assignments from its JSON lines."""

    def __init__(self, servers: str, group: str, client_id: str, seen: Counter):
        super().__init__(client_id, seen)
        self.assigned: list[int] = []
        self.process = subprocess.Popen(["node", str(CLIENT), "consume", servers, group, TOPIC, client_id],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.start()

    def run(self) -> None:
        for line in self.process.stdout:
            event = json.loads(line)
            if "assigned" in event:
                self.assigned = event["assigned"]
            elif "value" in event:
                with self.lock:
                    self.seen[event["value"].encode()] += 1



def test_kafkajs_group_shares_rebalances_and_resumes_from_its_commits(cluster):
    cluster, zk = cluster
    admin.create_topic(zk, TOPIC, PARTITIONS, 3)
    cluster.wait_for_metadata(lambda m: len([tp for tp in m["partitions"] if tp.topic == TOPIC]) == PARTITIONS)
    servers = cluster.bootstrap_servers()
    share_leave_join_resume(lambda client_id, seen: NodeMember(servers, "g-kafkajs", client_id, seen),
                            lambda count, start: produce(servers, count, start), commit_interval_s=0.5)
