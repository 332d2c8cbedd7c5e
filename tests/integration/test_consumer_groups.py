"""Consumer groups through real clients: kafka-python's KafkaConsumer and confluent-kafka's Consumer with
a group.id, and Debian's kcat -G; the coordinator on the leader of the group's __consumer_offsets
partition, groups and offsets kept there (real ZooKeeper, real Ray, loopback TCP).

Each client's test: three consumers share a topic, one leaves and one joins; every record is read
once; commits survive a restart of every consumer; the group's offsets are reset."""
from __future__ import annotations

import re
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition as CTopicPartition
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition as KTopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import CommitFailedError, RebalanceInProgressError

from actors.broker.group.group_records import GROUP_METADATA_TOPIC
from actors.config import BrokerConfig
from coordination import admin
from tests.integration.test_kafka_clients import produce

# __consumer_offsets replicated as Kafka's default has it (3), smaller (10 partitions) for a quick creation
GROUPS = BrokerConfig(replica_lag_time_max_ms=2000, replica_fetch_wait_max_ms=200,
                      isr_change_propagation_interval_ms=200, replica_fetch_backoff_ms=200,
                      offsets_topic_num_partitions=10, offsets_topic_replication_factor=3)
TOPIC, PARTITIONS = "orders", 6


@pytest.fixture
def cluster(new_cluster):
    cluster, zk = new_cluster(broker=GROUPS)
    admin.create_topic(zk, TOPIC, PARTITIONS, 3)
    cluster.wait_for_metadata(lambda m: len([tp for tp in m["partitions"] if tp.topic == TOPIC]) == PARTITIONS)
    return cluster, zk


def produce_all(servers: str, per_partition: int, start: int = 0) -> list[bytes]:
    values = []
    for p in range(PARTITIONS):
        batch = [f"{p}-{i}".encode() for i in range(start, start + per_partition)]
        produce(servers, TOPIC, batch, partition=p)
        values += batch
    return values


class Member(threading.Thread):
    """A group consumer polling on a thread of its own, as an application runs one, committing what each
    poll read. (kafka-python's, polled in turn from one thread, sends a new JoinGroup whenever the last
    one's answer came between two polls, and a leader's new JoinGroup starts another rebalance.) A commit
    refused because the group is rebalancing is the client's to retry: those records may be read again
    (at least once), so the tests count records read only while the group is stable."""

    def __init__(self, client_id: str, seen: Counter):
        super().__init__(daemon=True, name=f"consumer-{client_id}")
        self.seen, self.lock = seen, threading.Lock()
        self.stopping, self.error = threading.Event(), None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                values = self.poll()
                with self.lock:
                    self.seen.update(values)
                self.commit()
        except Exception as e:  # the test reports it
            self.error = e
        finally:
            self.close()

    def begin_stop(self) -> None:
        self.stopping.set()

    def stop(self) -> None:
        self.begin_stop()
        self.join(30)


class PythonMember(Member):
    def __init__(self, servers: str, group: str, client_id: str, seen: Counter):
        super().__init__(client_id, seen)
        self.consumer = KafkaConsumer(TOPIC, group_id=group, bootstrap_servers=servers, auto_offset_reset="earliest",
                                      enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300,
                                      max_poll_interval_ms=10_000, client_id=client_id)
        self.start()

    def poll(self) -> list[bytes]:
        return [r.value for records in self.consumer.poll(timeout_ms=1000).values() for r in records]

    def commit(self) -> None:
        try:
            self.consumer.commit()
        except (CommitFailedError, RebalanceInProgressError):
            pass

    def close(self) -> None:
        self.consumer.close()

    def partitions(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())


class ConfluentMember(Member):
    """librdkafka's consumer, subscribed, with the assignor asked for (eager `range` or
    `cooperative-sticky`, which moves only the partitions that change owner). Its assignment is read from
    its rebalance callbacks, on its own thread: librdkafka's assignment() waits while consume() runs."""

    def __init__(self, servers: str, group: str, client_id: str, seen: Counter, strategy: str = "range"):
        super().__init__(client_id, seen)
        self.assigned: set[int] = set()
        self.consumer = Consumer({"bootstrap.servers": servers, "group.id": group, "client.id": client_id,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                                  "max.poll.interval.ms": 10_000, "partition.assignment.strategy": strategy})
        self.consumer.subscribe([TOPIC], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)
        self.start()

    def _assigned(self, consumer, partitions) -> None:
        self.assigned |= {tp.partition for tp in partitions}  # cooperative: what is added; eager: everything

    def _revoked(self, consumer, partitions) -> None:
        self.assigned -= {tp.partition for tp in partitions}

    def poll(self) -> list[bytes]:
        msgs = self.consumer.consume(500, timeout=0.5)
        return [m.value() for m in msgs if not m.error()]

    def commit(self) -> None:
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException:  # nothing new to commit, or the group is rebalancing
            pass

    def close(self) -> None:
        self.consumer.close()

    def partitions(self) -> list[int]:
        return sorted(self.assigned)


def stop_all(members: list[Member]) -> None:
    """Every member told to stop first, then each waited for: one by one, each leave started a rebalance
    the next member finished before it could stop."""
    for m in members:
        m.begin_stop()
    for m in members:
        m.stop()


def wait_for(members: list[Member], done, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        errors = [m.error for m in members if m.error is not None]
        assert not errors, errors
        assert time.monotonic() < deadline, f"timed out waiting for {what}; assignments " \
                                            f"{[m.partitions() for m in members]}"
        time.sleep(0.1)


def covers(seen: Counter, values: list[bytes]) -> bool:
    return set(values) <= set(seen)


def shared(members: list[Member]) -> bool:
    """Every partition assigned to exactly one of them, and each of them has some."""
    assigned = [m.partitions() for m in members]
    return all(assigned) and sorted(p for ps in assigned for p in ps) == list(range(PARTITIONS))


def share_leave_join_resume(member: Callable[[str, Counter], Member], produce: Callable[[int, int], list[bytes]],
                            commit_interval_s: float = 0.0) -> list[bytes]:
    """What every client's group test runs: three members share the topic (each partition read by one of
    them), every record read once; one leaves and the two others take its partitions over; one joins and
    the three share again; then every member stopped, and new ones resume from the commits, reading only
    what came after. `member(client id, seen)` starts a member; `produce(count, start)` sends `count`
    records to each partition; a client that commits by itself gets `commit_interval_s` to do so. Every
    record sent, in order."""
    seen: Counter = Counter()
    members = [member(f"c{i}", seen) for i in range(3)]
    try:
        wait_for(members, lambda: shared(members), "three members sharing the topic")
        sent = produce(50, 0)
        wait_for(members, lambda: covers(seen, sent), "every record read")
        assert seen == Counter(sent)
        members.pop().stop()
        wait_for(members, lambda: shared(members), "two members sharing the topic")
        members.append(member("c3", seen))
        wait_for(members, lambda: shared(members), "three members again")
        more = produce(20, 50)
        wait_for(members, lambda: covers(seen, sent + more), "the new records read")
        assert set(seen) == set(sent + more)
        time.sleep(commit_interval_s)
    finally:
        stop_all(members)
    last = produce(10, 70)
    seen = Counter()
    members = [member(f"again{i}", seen) for i in range(3)]
    try:
        wait_for(members, lambda: covers(seen, last), "the records after the commits")
        # a partition is read in order from the committed offset: a record before `last` would have come first
        assert set(seen) == set(last)
    finally:
        stop_all(members)
    return sent + more + last


def read_once_more(member: Member, seen: Counter, expected: list[bytes]) -> None:
    """A member started after an offset reset reads exactly `expected`."""
    try:
        wait_for([member], lambda: covers(seen, expected), "the records after the reset offsets")
        assert set(seen) == set(expected)
    finally:
        member.stop()


def test_kafka_python_group_shares_rebalances_commits_resumes_and_resets(cluster):
    cluster, zk = cluster
    servers = cluster.bootstrap_servers()
    everything = share_leave_join_resume(lambda client_id, seen: PythonMember(servers, "g-python", client_id, seen),
                                         lambda count, start: produce_all(servers, count, start))
    assert GROUP_METADATA_TOPIC in zk.get_all_topics()
    # the offsets reset (the group is empty now) to the earliest: a consumer reads everything again
    client = KafkaAdminClient(bootstrap_servers=servers)
    try:
        committed = client.list_group_offsets("g-python")["g-python"]
        assert {tp.partition: o.offset for tp, o in committed.items()} == dict.fromkeys(range(PARTITIONS), 80)
        reset = client.reset_group_offsets("g-python", {KTopicPartition(TOPIC, p): OffsetSpec.EARLIEST
                                                         for p in range(PARTITIONS)})
        assert {r["offset"] for r in reset.values()} == {0}
    finally:
        client.close()
    seen: Counter = Counter()
    read_once_more(PythonMember(servers, "g-python", "after-reset", seen), seen, everything)


def test_confluent_kafka_group_shares_rebalances_commits_resumes_and_resets(cluster, strategy="cooperative-sticky"):
    """librdkafka's group with a cooperative assignor, which moves only the partitions that change owner (kcat's
    below is librdkafka's with the eager `range`, kafka-python's too): the broker does not care which."""
    cluster, zk = cluster
    servers, group = cluster.bootstrap_servers(), f"g-confluent-{strategy}"
    everything = share_leave_join_resume(
        lambda client_id, seen: ConfluentMember(servers, group, client_id, seen, strategy),
        lambda count, start: produce_all(servers, count, start))
    client = AdminClient({"bootstrap.servers": servers})
    listed = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    assert {tp.partition: tp.offset for tp in listed.topic_partitions} == dict.fromkeys(range(PARTITIONS), 80)
    alter_once_empty(client, group, [CTopicPartition(TOPIC, p, 70) for p in range(PARTITIONS)])
    seen: Counter = Counter()
    read_once_more(ConfluentMember(servers, group, "after-reset", seen, strategy), seen,
                   [v for v in everything if int(v.split(b"-")[1]) >= 70])


def alter_once_empty(client: AdminClient, group: str, offsets: list[CTopicPartition], timeout_s: float = 30) -> None:
    """The group's offsets set by the admin client, asked again while the coordinator refuses them: a commit
    without a generation is for an empty group only (UNKNOWN_MEMBER_ID while the last members' LeaveGroup
    or session is still to come, as Kafka answers), and the refusal is each partition's error in the result."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])[group]
        refused = {tp.partition: tp.error.name() for tp in result.result(timeout=30).topic_partitions if tp.error}
        if not refused:
            return
        assert time.monotonic() < deadline, f"the offsets of {group} not set: {refused}"
        time.sleep(0.5)


class ProcessMember(Member):
    """A member in a process of its own (kcat, node): its assignment as it last reported it; stopped with
    SIGTERM, after which it leaves the group and commits what it read."""

    assigned: set[int] | list[int] = ()
    process: subprocess.Popen

    def partitions(self) -> list[int]:
        return sorted(self.assigned)

    def begin_stop(self) -> None:
        self.process.terminate()

    def stop(self) -> None:
        self.begin_stop()
        self.process.wait(30)
        self.join(30)


class KcatMember(ProcessMember):
    """Debian's kcat -G (librdkafka's balanced consumer, committing by itself): its records from its
    stdout, its assignment from the rebalance lines it prints on stderr; stopped with SIGTERM, after which
    it leaves the group and commits what it read."""

    ASSIGNED = re.compile(r"rebalanced .*: (assigned|revoked): (.*)")

    def __init__(self, servers: str, group: str, client_id: str, seen: Counter):
        super().__init__(client_id, seen)
        self.assigned: set[int] = set()
        self.process = subprocess.Popen(
            ["kcat", "-b", servers, "-G", group, "-u", "-f", "%s\\n", "-X", "auto.offset.reset=earliest",
             "-X", f"client.id={client_id}", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=300",
             "-X", "auto.commit.interval.ms=100", "-X", "max.poll.interval.ms=10000", TOPIC],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.start()

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            if m := self.ASSIGNED.search(line):
                parts = {int(p) for p in re.findall(r"\[(\d+)\]", m.group(2))}
                self.assigned = parts if m.group(1) == "assigned" else self.assigned - parts

    def run(self) -> None:
        for line in self.process.stdout:
            with self.lock:
                self.seen[line.rstrip("\n").encode()] += 1


def test_kcat_balanced_consumers_share_rebalance_commit_and_resume(cluster):
    cluster, zk = cluster
    servers = cluster.bootstrap_servers()
    share_leave_join_resume(lambda client_id, seen: KcatMember(servers, "g-kcat", client_id, seen),
                            lambda count, start: produce_all(servers, count, start), commit_interval_s=0.5)


def test_kafka_utils_reads_the_groups_commits_from_consumer_offsets(cluster, tmp_path):
    """A third-party reader of __consumer_offsets, Yelp's kafka-consumer-manager list_groups (its own venv,
    kafka-python 1.4): it consumes the topic and decodes each offset commit's key and value itself."""
    cluster, zk = cluster
    servers = cluster.bootstrap_servers()
    produce_all(servers, 5)
    seen: Counter = Counter()
    members = [PythonMember(servers, "g-read-by-yelp", "y", seen)]
    try:
        wait_for(members, lambda: len(seen) >= 5 * PARTITIONS, "every record read")
    finally:
        members[0].stop()
    tool = Path(__file__).resolve().parents[2] / ".venv-tools" / "bin" / "kafka-consumer-manager"
    brokers = "".join(f'\n      - "{s}"' for s in servers.split(","))
    (tmp_path / "kray.yaml").write_text(f'clusters:\n  c:\n    broker_list:{brokers}\n'
                                        f'    zookeeper: "{cluster.config.zk_connect}"\nlocal_config:\n  cluster: c\n')
    done = subprocess.run([str(tool), "--cluster-type", "kray", "--discovery-base-path", str(tmp_path), "list_groups"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "\tg-read-by-yelp\n" in done.stdout, (done.stdout, done.stderr[-2000:])


def test_kray_consumer_groups_lists_describes_resets_and_deletes(cluster, tmp_path):
    """kafka-consumer-groups' commands and tables, through the brokers' group API."""
    from tests.integration.test_cli import kray_here

    cluster, zk = cluster
    servers = cluster.bootstrap_servers()
    produce_all(servers, 10)
    seen: Counter = Counter()
    members = [PythonMember(servers, "g-tool", f"t{i}", seen) for i in range(2)]

    def kray(*args):
        return kray_here("consumer-groups", *args, home=tmp_path, zk=cluster.config.zk_connect)
    try:
        wait_for(members, lambda: shared(members) and covers(seen, [f"{p}-9".encode() for p in range(PARTITIONS)]),
                 "two members sharing the topic, every record read")
        assert kray("--list").stdout.split() == ["g-tool"]
        described = kray("--describe", "--group", "g-tool")
        lines = described.stdout.strip().splitlines()
        assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                    "CONSUMER-ID", "HOST", "CLIENT-ID"]
        rows = [line.split() for line in lines[1:]]
        assert [(r[2], r[3], r[4], r[5]) for r in rows] == [(str(p), "10", "10", "0") for p in range(PARTITIONS)]
        assert {r[8] for r in rows} == {"t0", "t1"}
        members_view = kray("--describe", "--group", "g-tool", "--members").stdout.strip().splitlines()
        assert sorted(line.split()[-1] for line in members_view[1:]) == ["3", "3"]
        assert "Stable" in kray("--describe", "--group", "g-tool", "--state").stdout
        refused = kray("--reset-offsets", "--group", "g-tool", "--topic", TOPIC, "--to-earliest", "--execute")
        assert refused.returncode == 1 and "inactive, but the current state is Stable" in refused.stderr
        assert kray("--delete", "--group", "g-tool").returncode == 1
    finally:
        stop_all(members)
    dry = kray("--reset-offsets", "--group", "g-tool", "--topic", f"{TOPIC}:0,1", "--shift-by", "-4")
    assert "No action will be performed" in dry.stdout and dry.stdout.strip().splitlines()[-2:] == [
        "g-tool orders 0         6", "g-tool orders 1         6"]
    unchanged = kray("--describe", "--group", "g-tool").stdout.strip().splitlines()[3:]  # a note, a blank, the header
    assert [line.split()[3] for line in unchanged] == ["10"] * PARTITIONS  # a dry run changes nothing
    done = kray("--reset-offsets", "--group", "g-tool", "--all-topics", "--to-earliest", "--execute")
    assert done.returncode == 0, done.stderr
    described = kray("--describe", "--group", "g-tool").stdout
    assert "Consumer group 'g-tool' has no active members." in described
    rows = described.strip().splitlines()
    rows = rows[next(i for i, line in enumerate(rows) if line.startswith("GROUP")) + 1:]
    assert [line.split()[3] for line in rows] == ["0"] * PARTITIONS
    assert kray("--delete", "--group", "g-tool").stdout.strip() == \
        "Deletion of requested consumer groups ('g-tool') was successful."
    assert kray("--list").stdout.split() == []
    bad = kray("--describe", "--group", "g-tool", "--members", "--state")
    assert bad.returncode != 0
