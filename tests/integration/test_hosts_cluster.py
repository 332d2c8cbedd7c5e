"""A kray cluster across hosts of their own (`kray hosts up 3 --cluster`, then `kray cluster up` run on
h1): a Ray cluster of one node per host, a ZooKeeper ensemble of a server per host, a broker per host
advertising its host's address with its controller candidate beside it, reached from this namespace
over the bridge by Kafka clients; a broker Ray restarts on its node, where its logs are; and a host's
power loss (its broker, raylet and ZooKeeper server killed at once), made by `kray chaos` on h1,
costs no acknowledged record, and the host returns with its share of the cluster. Run as root, as CI is."""
from __future__ import annotations

import json
import subprocess
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from coordination.server import four_letter_word
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition
from jobs.cli import main
from jobs.hosts.layout import enter_command
from jobs.hosts.netns import Hosts, real_home
from tests.integration.test_hosts import PREFIX, SUBNET, kray, kray_home  # noqa: F401 (a fixture)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[tuple[int, int]]:
    """acks=all, each record's (partition, offset) once acknowledged; every record must be."""
    acked, failed = [], []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 60_000})
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % 3,
                  on_delivery=lambda e, m: (failed if e else acked).append(e or (m.partition(), m.offset())))
    assert p.flush(90) == 0 and failed == []
    return acked


def consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    """Read back by assignment: a group would need __consumer_offsets, which Kafka does not create with
    fewer live brokers than its replication factor (3), as here after a host's loss."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([KafkaTopicPartition(topic, p, 0) for p in range(3)])
    got, deadline = [], time.monotonic() + 60
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    return got


WHERE = """
import json, ray
from actors.cluster import LocalCluster
from jobs.cli.common import ray_connect, started_cluster
ray_connect()
cluster = LocalCluster.attach(started_cluster())
info = {b: ray.get(h.info.remote(), timeout=30) for b, h in cluster.brokers.items()}
print(json.dumps({b: [i["node_id"], i["broker_epoch"], i["recovered_partitions"],
                      ray.get(cluster.controller_actor(b).status.remote(), timeout=30)["node_id"]]
                  for b, i in info.items()}))
"""


def where(hosts: Hosts, h1) -> dict[int, list]:
    """Each broker's node, broker epoch and replica logs found at its start, and its candidate's node, as a
    driver on h1 finds them."""
    done = hosts.run(h1, ["python", "-c", WHERE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return {int(b): v for b, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def test_a_cluster_across_hosts_serves_clients_here_and_loses_nothing_when_a_host_loses_power(kray_home, capsys):
    code, out, err = kray(capsys, "hosts", "up", "3", "--prefix", PREFIX, "--subnet", SUBNET, "--cluster")
    assert code == 0, err
    lines = dict(line.split(": ", 1) for line in out.splitlines() if line.startswith(("ZooKeeper: ", "Ray: ")))
    zk_connect = lines["ZooKeeper"]
    assert zk_connect == "10.78.0.11:2181,10.78.0.12:2181,10.78.0.13:2181"
    assert lines["Ray"].startswith("10.78.0.11:6379")
    hosts = Hosts.started()
    h1, h2, h3 = hosts.layout.hosts
    modes = sorted(four_letter_word(h.address, 2181, "srvr").split("Mode: ")[1].split()[0] for h in (h1, h2, h3))
    assert modes == ["follower", "follower", "leader"]  # one server per host, a quorum across them
    up = hosts.run(h1, ["kray", "--zookeeper", zk_connect, "cluster", "up", "--brokers", "3", "--session-timeout-ms",
                        "6000"], capture_output=True, text=True, timeout=180)
    assert up.returncode == 0, up.stderr[-2000:]
    with KrayZkClient(zk_connect).start() as zk:  # from here, over the bridge
        brokers = {b: info for b, (info, _) in zk.get_brokers(zk.get_all_broker_ids()).items()}
        assert sorted(info.host for info in brokers.values()) == [h1.address, h2.address, h3.address]
        bootstrap = zk.bootstrap_servers()
        assert main(["--zookeeper", zk_connect, "topics", "create", "--topic", "orders", "--partitions", "3",
                     "--replication-factor", "3", "--config", "min.insync.replicas=2"]) == 0
        deadline = time.monotonic() + 60
        while any(s is None or s.state.leader < 0 for s in zk.get_partition_states(
                [TopicPartition("orders", p) for p in range(3)]).values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        before = produce(bootstrap, "orders", [f"before-{i}".encode() for i in range(300)])
        places = where(hosts, h1)
        assert len({node for node, *_ in places.values()}) == 3  # a broker per node
        assert all(node == candidate for node, _, _, candidate in places.values())  # each candidate beside it
        # Ray restarts a killed broker on its node (pinned there), where it finds its replicas' logs
        restarted = next(b for b, info in brokers.items() if info.host == h3.address)
        registered = zk.exists(f"/brokers/ids/{restarted}").czxid
        done = hosts.run(h1, ["kray", "chaos", "kill-broker", str(restarted), "--restart"], capture_output=True,
                         text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        deadline = time.monotonic() + 60
        while (stat := zk.exists(f"/brokers/ids/{restarted}")) is None or stat.czxid == registered:
            assert time.monotonic() < deadline, "the restarted broker did not register again"
            time.sleep(0.1)
        node, epoch, recovered, _ = where(hosts, h1)[restarted]
        assert node == places[restarted][0] and epoch > places[restarted][1] and recovered >= 3
        lost = next(b for b, info in brokers.items() if info.host == h2.address)
        registered = zk.exists(f"/brokers/ids/{lost}").czxid
        # made on h1 as a user makes it (through the hosts' control agent): h2's broker, raylet and ZooKeeper
        # server killed at once, its link down; h2 back after 3 s with its broker, its logs cut back to their
        # recovery points (Kafka does not fsync)
        chaos = subprocess.Popen(enter_command(hosts.init_pids[h1.name], real_home(), [
            "kray", "chaos", "host-power-loss", str(lost), "--seconds", "3", "--logs", "unflushed"]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while zk.exists(f"/brokers/ids/{lost}") is not None and time.monotonic() < deadline:
            time.sleep(0.1)  # its session expires: the controller moves its leaderships
        after = produce(",".join(f"{i.host}:{i.port}" for b, i in brokers.items() if b != lost), "orders",
                        [f"after-{i}".encode() for i in range(300)])
        out, err = chaos.communicate(timeout=180)
        assert chaos.returncode == 0, err[-2000:]
        [said] = [line for line in out.splitlines() if line.startswith("host-power-loss")]  # (and Ray's notes)
        assert said.startswith(f"host-power-loss {lost}: host {h2.address} down for 3 s; h2 powered on: ZooKeeper, "
                               "a Ray worker started in "), out
        assert "; unflushed tails lost: " in said and said.endswith("; broker started"), out
        back = zk.get_brokers([lost])[lost]
        assert back[0].host == h2.address and zk.exists(f"/brokers/ids/{lost}").czxid != registered
    assert len(before) == len(after) == 300
    assert "Mode: " in four_letter_word(h2.address, 2181, "srvr")  # its ZooKeeper server back in the ensemble
    read = consume_all(",".join(f"{i.host}:{i.port}" for i in brokers.values()), "orders", 600)
    assert sorted(read) == sorted([f"before-{i}".encode() for i in range(300)] + [f"after-{i}".encode() for i in range(300)])
