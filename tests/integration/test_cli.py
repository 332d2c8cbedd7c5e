"""The `kray` command end to end: zk start/status/stop, cluster up/status/down, and the Kafka tools
(topics, configs, reassign, leader-election) against the cluster it started."""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import uuid

from coordination.server import server_mode


def kray(*args, home, zk=None, timeout=120):
    """The `kray` command in a process of its own, as a user runs it."""
    env = dict(os.environ, KRAY_HOME=str(home))
    env.pop("KRAY_ZK_CONNECT", None)
    cmd = [sys.executable, "-m", "jobs.cli", *(["--zookeeper", zk] if zk else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def kray_here(*args, home, zk=None) -> subprocess.CompletedProcess:
    """The `kray` command's main() in this process (on the test's Ray connection): the same parsing,
    output and exit status as `kray` without a second of Python and Ray start-up per command, for the
    tools the cluster test runs by the hundred (`kray` itself: cluster up, down, status and zk above)."""
    from jobs.cli import main

    argv = [*(["--zookeeper", zk] if zk else []), *args]
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in ("KRAY_HOME", "KRAY_ZK_CONNECT")}
    os.environ["KRAY_HOME"] = str(home)
    os.environ.pop("KRAY_ZK_CONNECT", None)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:  # argparse's refusals
                code = e.code if isinstance(e.code, int) else 1
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def test_zk_start_status_stop(tmp_path):
    assert kray("topics", "list", home=tmp_path).stderr.startswith("Error: KrayError: no ZooKeeper")
    started = kray("zk", "start", home=tmp_path)
    assert started.returncode == 0, started.stderr
    port = int(started.stdout.split("127.0.0.1:")[1].split()[0])
    try:
        assert server_mode(port) == "standalone"
        status = kray("zk", "status", home=tmp_path)
        assert status.returncode == 0 and "standalone" in status.stdout
        assert kray("topics", "list", home=tmp_path).returncode == 0  # found through $KRAY_HOME/zk.json
    finally:
        stopped = kray("zk", "stop", home=tmp_path)
    assert stopped.returncode == 0
    assert server_mode(port) is None
    assert kray("zk", "status", home=tmp_path).returncode == 1


def test_cluster_up_status_down(tmp_path, chroot_connect, ray_session):
    """`cluster up` joins the Ray that is running (here: the test session's) and leaves it running on down."""
    namespace = f"cli-{uuid.uuid4().hex[:6]}"
    for bad, message in (("no.such.config=1", "--override: unknown server config 'no.such.config'"),
                         ("min.insync.replicas=zero", "--override min.insync.replicas: Input should be a valid integer"),
                         ("auto.leader.rebalance.enable", "--override expects key=value")):
        refused = kray_here("cluster", "up", "--override", bad, home=tmp_path, zk=chroot_connect)  # before any start
        assert refused.returncode == 1 and message in refused.stderr, refused.stderr
    # the auto leader rebalance off (as kafka-server-start --override): the preferred election below is the
    # test's, not the rebalance's when it happens to come first
    up = kray("cluster", "up", "--brokers", "2", "--namespace", namespace, "--session-timeout-ms", "3000",
              "--link-faults", "--override", "auto.leader.rebalance.enable=false", home=tmp_path, zk=chroot_connect)
    assert up.returncode == 0, up.stderr
    assert "2 brokers up" in up.stdout
    status = kray("cluster", "status", home=tmp_path, zk=chroot_connect)
    assert "Brokers registered: 1, 2" in status.stdout and "Active controller:" in status.stdout
    assert "bootstrap.servers: 127.0.0.1:9093,127.0.0.1:9094" in status.stdout  # `cluster up` listens on 9092 + N
    _topic_and_controller_commands(tmp_path, chroot_connect, namespace)
    down = kray("cluster", "down", home=tmp_path, zk=chroot_connect)
    assert down.returncode == 0, down.stderr
    assert ray_session.is_initialized() and ray_session.cluster_resources()  # our Ray is untouched
    after = kray("cluster", "status", home=tmp_path, zk=chroot_connect)
    assert "Brokers registered: none" in after.stdout  # sessions closed cleanly: ephemerals gone at once


def _topic_and_controller_commands(home, zk, namespace):
    from tests.integration.conftest import wait_until

    def run(*args):
        """The commands that read ZooKeeper take --zookeeper after their name; the others before it."""
        after = args[0] in ("topics", "reassign", "leader-election", "configs", "controller", "cluster")
        return kray_here(*args, *(("--zookeeper", zk) if after else ()), home=home, zk=None if after else zk)

    def ok(*args):
        result = run(*args)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def fails(*args):
        """Exit 1 with one line on stderr; what the command printed, both streams."""
        result = run(*args)
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        return result.stdout + result.stderr

    def replicas(topic, partition):
        line = next(line for line in ok("topics", "describe", "--topic", topic).splitlines()
                    if f"\tPartition: {partition}\t" in line)
        return [int(b) for b in line.split("Replicas: ")[1].split("\t")[0].split(",")]

    assert ok("topics", "create", "--topic", "c", "--partitions", "2", "--replication-factor", "2") == "Created topic c.\n"
    assert "TopicExistsException: Topic 'c' already exists." in fails("topics", "create", "--topic", "c")
    assert ok("topics", "create", "--topic", "c", "--if-not-exists") == ""
    assert ok("topics", "create", "--topic", "u", "--replication-factor", "2", "--config", "min.insync.replicas=2")
    assert ok("topics", "create", "--topic", "v", "--replication-factor", "2")
    assert ok("topics", "create", "--topic", "m")
    assert "Adding partitions succeeded: 2 new partitions" in ok("topics", "alter", "--topic", "c", "--partitions", "4")
    assert "would not be an increase" in fails("topics", "alter", "--topic", "c", "--partitions", "3")
    assert "Topic 'nope' does not exist" in fails("topics", "alter", "--topic", "nope", "--partitions", "2")
    assert ok("topics", "alter", "--topic", "nope", "--partitions", "2", "--if-exists") == ""
    wait_until(lambda: "Leader: none" not in (topics := ok("topics", "describe")) and topics.count("Partition:") == 7)
    assert "can't be used with option" in fails("topics", "describe", "--unavailable-partitions",
                                                "--under-min-isr-partitions")

    # kafka-reassign-partitions: bad files change nothing; then c-0's replicas reversed
    a, b = replicas("c", 0)
    plan = home / "plan.json"
    execute = ("reassign", "--execute", "--reassignment-json-file", str(plan))
    plan.write_text('{"version":1,"partitions":[{"topic":"c","partition":0,"replicas":[2,7]}]}')
    assert "Unknown broker ids [7]" in fails(*execute)
    plan.write_text('{"version":1,"partitions":[{"topic":"c","partition":0,"replicas":[2,2]}]}')
    assert "duplicate" in fails(*execute)
    plan.write_text('{"version":1,"partitions":[{"topic":"c"')
    assert "Malformed reassignment JSON" in fails(*execute)
    plan.write_text('{"version":1,"partitions":[{"topic":"nope","partition":0,"replicas":[1,2]}]}')
    assert "UnknownTopicOrPartitionException: Partition nope-0 does not exist" in fails(*execute)
    assert "exactly one action" in fails("reassign", "--execute", "--verify", "--reassignment-json-file", str(plan))
    assert "exactly one action" in fails("reassign", "--reassignment-json-file", str(plan))
    plan.write_text(f'{{"version":1,"partitions":[{{"topic":"c","partition":0,"replicas":[{b},{a}]}}]}}')
    assert ok(*execute) == (
        "Current partition replica assignment\n\n"
        f'{{"version":1,"partitions":[{{"topic":"c","partition":0,"replicas":[{a},{b}],"log_dirs":["any","any"]}}]}}'
        "\n\nSave this to use as the --reassignment-json-file option during rollback\n"
        "Successfully started partition reassignment for c-0\n")
    verify = ("reassign", "--verify", "--reassignment-json-file", str(plan))
    wait_until(lambda: run(*verify).stdout == "Status of partition reassignment:\n"
                                             "Reassignment of partition c-0 is complete.\n")
    topics = home / "topics.json"
    topics.write_text('{"topics":[{"topic":"c"}],"version":1}')
    generated = ok("reassign", "--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "2,1")
    current_header, current, blank, proposed_header, proposed = generated.splitlines()
    assert (current_header, blank, proposed_header) == ("Current partition replica assignment", "",
                                                        "Proposed partition reassignment configuration")
    assert json.loads(current)["partitions"][0] == {"topic": "c", "partition": 0, "replicas": [b, a],
                                                    "log_dirs": ["any", "any"]}
    assert [(p["partition"], sorted(p["replicas"])) for p in json.loads(proposed)["partitions"]] == \
        [(p, [1, 2]) for p in range(4)]
    topics.write_text('{"topics":[{"topic":"nope"}],"version":1}')
    assert "Topic 'nope' does not exist" in fails("reassign", "--generate", "--topics-to-move-json-file",
                                                 str(topics), "--broker-list", "1,2")
    assert ok("reassign", "--list") == "No partition reassignments found.\n"  # --generate writes nothing

    # kafka-leader-election, through the controller
    assert ok("leader-election", "--election-type", "preferred", "--topic", "c", "--partition", "0") == \
        "Successfully completed leader election (PREFERRED) for partitions c-0\n"  # c-0's leader was a, not b
    assert ok("leader-election", "--election-type", "preferred", "--all-topic-partitions") == \
        "Valid replica already elected for partitions c-0, c-1, c-2, c-3, m-0, u-0, v-0\n"
    election = home / "election.json"
    election.write_text('{"partitions":[{"topic":"c","partition":1},{"topic":"v","partition":0}]}')
    assert ok("leader-election", "--election-type", "unclean", "--path-to-json-file", str(election)) == \
        "Valid replica already elected for partitions c-1, v-0\n"  # live leaders: nothing to elect
    election.write_text('{"partitions":[{"topic":"c","partition":1},{"topic":"nope","partition":0}]}')
    assert "Partition nope-0 does not exist" in fails("leader-election", "--election-type", "preferred",
                                                      "--path-to-json-file", str(election))
    assert "One and only one of" in fails("leader-election", "--election-type", "preferred")
    assert "One and only one of" in fails("leader-election", "--election-type", "unclean", "--all-topic-partitions",
                                          "--path-to-json-file", str(election))

    _reassignment_in_progress(ok, fails, run, replicas, home, namespace)
    status = ok("controller", "status")
    assert "active: True" in status and "partitions: 7" in status
    topic_configs = ("configs", "--entity-type", "topics", "--entity-name", "c")
    assert ok(*topic_configs, "--alter", "--add-config", "min.insync.replicas=2,retention.ms=60000") == \
        "Completed updating config for topic c.\n"
    assert "Invalid value x for configuration min.insync.replicas" in fails(*topic_configs, "--alter", "--add-config",
                                                                          "min.insync.replicas=x")
    assert ok(*topic_configs, "--alter", "--delete-config", "retention.ms")
    assert ok(*topic_configs, "--describe") == "Configs for topic 'c' are min.insync.replicas=2\n"
    for topic in ("c", "m"):
        assert f"Topic {topic} is marked for deletion." in ok("topics", "delete", "--topic", topic)
    wait_until(lambda: ok("topics", "list").split() == ["u", "v"])
    assert "does not exist" in fails("topics", "delete", "--topic", "c")
    assert ok("topics", "delete", "--topic", "c", "--if-exists") == ""
    _chaos_commands(ok, fails)
    _unclean_election(ok, fails, run, home)


def _reassignment_in_progress(ok, fails, run, replicas, home, namespace):
    """A move that cannot finish while its new replica's broker is stopped: listed, described with its
    adding and removing replicas, then cancelled (KIP-455) back to the original replica."""
    import ray

    from tests.integration.conftest import wait_until

    [x] = replicas("m", 0)
    y = 3 - x
    move = home / "move.json"
    move.write_text(f'{{"version":1,"partitions":[{{"topic":"m","partition":0,"replicas":[{y}]}}]}}')
    cancel = ("reassign", "--cancel", "--reassignment-json-file", str(move))
    pid = ray.get(ray.get_actor(f"broker-{y}", namespace=namespace).info.remote())["pid"]
    # broker y cannot fetch: the move waits for it to join the ISR (its 3 s session may expire meanwhile; the
    # move cannot finish either way, and the listing, the description and the cancel read the same)
    os.kill(pid, signal.SIGSTOP)
    try:
        assert "Successfully started partition reassignment for m-0" in ok("reassign", "--execute",
                                                                          "--reassignment-json-file", str(move))
        wait_until(lambda: ok("reassign", "--list") ==
                   f"Current partition reassignments:\nm-0: replicas: {y},{x}. adding: {y}. removing: {x}.\n")
        assert f"\tReplicas: {y},{x}\tIsr: {x}\tAdding Replicas: {y}\tRemoving Replicas: {x}\n" in \
            ok("topics", "describe", "--topic", "m")
        assert ok(*cancel) == "Successfully cancelled partition reassignment for: m-0\n"
        assert ok("reassign", "--list") == "No partition reassignments found.\n"
    finally:
        os.kill(pid, signal.SIGCONT)
    assert ok("topics", "describe", "--topic", "m").endswith(f"\tReplicas: {x}\tIsr: {x}\n")
    verified = run("reassign", "--verify", "--reassignment-json-file", str(move))
    assert verified.returncode == 1 and verified.stdout.endswith(
        f"There is no active reassignment of partition m-0, but replica set is {x} rather than {y}.\n")
    assert ok(*cancel) == "None of the specified partition reassignments are active.\n"
    wait_until(lambda: "Brokers registered: 1, 2\n" in ok("cluster", "status"), timeout=60,
               what="broker y back (its session may have expired while it was stopped)")


def _unclean_election(ok, fails, run, home):
    """Broker 2 is shut down (out of every ISR), then broker 1 dies and broker 2 comes back: u-0 and v-0
    have no live ISR member. The describe reports find them; a preferred election cannot help; an unclean
    one (KIP-460) elects broker 2 although unclean.leader.election.enable is false."""
    from actors.cluster import LocalCluster
    from actors.config import ClusterConfig
    from tests.integration.conftest import wait_until

    # both brokers in every ISR first: the chaos before may have left broker 1 catching up, and a broker 2
    # alone in u-0's ISR could not hand its leadership over at its shutdown
    wait_until(lambda: ok("topics", "describe", "--under-replicated-partitions") == "", timeout=60,
               what="every partition fully replicated")
    plan = home / "u.json"  # broker 2 first: a preferred replica that lives but is out of the ISR
    plan.write_text('{"version":1,"partitions":[{"topic":"u","partition":0,"replicas":[2,1]}]}')
    assert "Successfully started" in ok("reassign", "--execute", "--reassignment-json-file", str(plan))
    wait_until(lambda: "is complete." in run("reassign", "--verify", "--reassignment-json-file", str(plan)).stdout)
    assert "shut down after moving its leaderships" in ok("broker", "shutdown", "2")
    wait_until(lambda: "Brokers registered: 1\n" in ok("cluster", "status"))

    under_replicated = ok("topics", "describe", "--under-replicated-partitions")
    assert [line.split("\tLeader")[0] for line in under_replicated.splitlines()] == [
        "\tTopic: u\tPartition: 0", "\tTopic: v\tPartition: 0"]
    assert "\tIsr: 1\n" in under_replicated
    under_min_isr = ok("topics", "describe", "--under-min-isr-partitions")  # v's min.insync.replicas is 1
    assert under_min_isr.startswith("\tTopic: u\tPartition: 0\tLeader: 1\t") and under_min_isr.count("\n") == 1
    assert ok("topics", "describe", "--unavailable-partitions") == ""
    assert "Killed broker 1's actor" in ok("chaos", "kill-broker", "1")
    config = ClusterConfig(**json.loads((home / "cluster.json").read_text())["config"])
    LocalCluster(config, [2], detached=True).start_broker(2)
    wait_until(lambda: "Brokers registered: 2\n" in ok("cluster", "status") and "active: True" in
               run("controller", "status").stdout, timeout=60, what="broker 2 alone, and its controller")
    unavailable = ok("topics", "describe", "--unavailable-partitions").splitlines()
    assert [line.split("\tLeader")[0] for line in unavailable] == ["\tTopic: u\tPartition: 0",
                                                                    "\tTopic: v\tPartition: 0"]
    assert all(line.endswith("\tIsr: 1") for line in unavailable)
    preferred = fails("leader-election", "--election-type", "preferred", "--topic", "u", "--partition", "0")
    assert preferred.startswith("Error completing leader election (PREFERRED) for partition: u-0: "
                                "PreferredLeaderNotAvailableException: ")
    assert preferred.endswith("Error: AdminCommandFailedException: 1 replica(s) could not be elected\n")
    assert ok("leader-election", "--election-type", "unclean", "--all-topic-partitions") == \
        "Successfully completed leader election (UNCLEAN) for partitions u-0, v-0\n"
    assert "\tTopic: u\tPartition: 0\tLeader: 2\t" in (described := ok("topics", "describe"))
    assert described.count("\tIsr: 2\n") == 2
    assert ok("topics", "describe", "--unavailable-partitions") == ""


def _chaos_commands(ok, fails):
    """`kray chaos` against the running cluster: each fault, and the cluster back to two brokers and a
    controller after it."""
    from tests.integration.conftest import wait_until

    def recovered():
        seen = []

        def back() -> bool:
            seen[:] = [ok("cluster", "status"), ok("controller", "status")]
            return "Brokers registered: 1, 2\n" in seen[0] and "active: True" in seen[1]
        try:
            wait_until(back, timeout=60, what="the cluster back")
        except Exception as e:
            raise AssertionError(f"{e}: {seen}") from None
    assert ok("chaos", "pause", "1", "--seconds", "0.5") == "Paused broker 1 for 0.5 s\n"
    assert "Expired the ZooKeeper session of broker 1" in ok("chaos", "expire-session", "1")
    recovered()
    assert "RequestSender to broker 2" in ok("chaos", "kill-request-sender", "2")
    assert "Killed the active controller's actor" in ok("chaos", "kill-controller")
    recovered()
    assert "Killed broker 1's actor (Ray restarts it)" in ok("chaos", "kill-broker", "1", "--restart")
    recovered()
    torn = ok("chaos", "truncate-log-tail", "2", "--seconds", "0.5")  # killed, its logs torn, started again
    assert torn.startswith("truncate-log-tail 2: ") and torn.endswith("; started again after 0.5 s\n")
    recovered()
    assert "name a broker id, or --controller" in fails("chaos", "pause")
    assert "broker 9 is not running" in fails("chaos", "kill-broker", "9")
    # link faults (the cluster is up with --link-faults)
    # each broker's link to the other, and each one's RequestSender's link to a controller on the other
    assert ok("chaos", "split-brokers", "--seconds", "0.5") == "split-brokers: 4 links, healed after 0.5 s\n"
    assert ok("chaos", "cut-broker-zookeeper", "2") == \
        "cut-broker-zookeeper 2: 1 link; `kray chaos heal` heals them\n"
    wait_until(lambda: "Brokers registered: 1\n" in ok("cluster", "status"), timeout=60,
               what="broker 2's session expired while it lives, cut off")
    assert ok("chaos", "heal") == "Healed every link\n"
    recovered()
    assert "slow-replication: loss: Input should be less than or equal to 1" in fails(
        "chaos", "slow-replication", "1", "--loss", "2")
    assert "needs one of the brokers [1, 2] as its target, not 9" in fails("chaos", "cut-replication", "9")
    assert ok("chaos", "cut-clients", "1", "--seconds", "0.5") == "cut-clients 1: 1 link, healed after 0.5 s\n"
    assert "slow-clients: delay_ms: Input should be greater than or equal to 0" in fails(
        "chaos", "slow-clients", "2", "--delay-ms", "-5")


def test_sigterm_stops_the_embedded_zookeeper_it_started(ray_session):
    """A job stopped with SIGTERM (`timeout`, `kill`) leaves no ZooKeeper server behind, as Ctrl-C does
    (before, the signal handler of the Ray it started ended the process at once and the server ran on)."""
    env = {k: v for k, v in os.environ.items() if k not in ("KRAY_ZK_CONNECT", "RAY_ADDRESS")}
    script = ("import time\nfrom jobs.experiments.local import embedded_zookeeper_and_ray\n"
              "with embedded_zookeeper_and_ray() as environment:\n"
              "    print(environment.connect, flush=True)\n    time.sleep(120)\n")
    job = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env,
                           start_new_session=True)
    try:
        port = int(job.stdout.readline().rsplit(":", 1)[1])
        assert server_mode(port) == "standalone"
        os.killpg(job.pid, signal.SIGTERM)  # as `timeout` does: the job and the Ray it started
        job.wait(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever the job left in its group
            os.killpg(job.pid, signal.SIGKILL)
    assert server_mode(port) is None
    assert ray_session.is_initialized() and ray_session.cluster_resources()  # the tests' Ray is untouched
