"""The `kray` command end to end: zk start/status/stop and cluster up/status/down."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid

from coordination.server import server_mode


def kray(*args, home, zk=None, timeout=120):
    env = dict(os.environ, KRAY_HOME=str(home))
    env.pop("KRAY_ZK_CONNECT", None)
    cmd = [sys.executable, "-m", "jobs.cli", *(["--zookeeper", zk] if zk else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


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
    up = kray("cluster", "up", "--brokers", "2", "--namespace", namespace, "--session-timeout-ms", "6000",
              home=tmp_path, zk=chroot_connect)
    assert up.returncode == 0, up.stderr
    assert "2 brokers up" in up.stdout
    status = kray("cluster", "status", home=tmp_path, zk=chroot_connect)
    assert "Brokers registered: 1, 2" in status.stdout and "Active controller:" in status.stdout
    assert "bootstrap.servers: 127.0.0.1:9093,127.0.0.1:9094" in status.stdout  # `cluster up` listens on 9092 + N
    _topic_and_controller_commands(tmp_path, chroot_connect)
    down = kray("cluster", "down", home=tmp_path, zk=chroot_connect)
    assert down.returncode == 0, down.stderr
    assert ray_session.is_initialized() and ray_session.cluster_resources()  # our Ray is untouched
    after = kray("cluster", "status", home=tmp_path, zk=chroot_connect)
    assert "Brokers registered: none" in after.stdout  # sessions closed cleanly: ephemerals gone at once


def _topic_and_controller_commands(home, zk):
    from tests.integration.conftest import wait_until

    def ok(*args):
        result = kray(*args, home=home, zk=zk)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def fails(*args):
        result = kray(*args, home=home, zk=zk)
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        return result.stderr

    assert ok("topics", "create", "--topic", "c", "--partitions", "2", "--replication-factor", "2") == "Created topic c.\n"
    assert "Adding partitions succeeded: 2 new partitions" in ok("topics", "alter", "--topic", "c", "--partitions", "4")
    assert "would not be an increase" in fails("topics", "alter", "--topic", "c", "--partitions", "3")
    wait_until(lambda: "Leader: none" not in ok("topics", "describe", "--topic", "c")
               and ok("topics", "describe", "--topic", "c").count("Partition:") == 4)
    plan = home / "plan.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"c","partition":0,"replicas":[2,7]}]}')
    assert "Unknown broker ids [7]" in fails("reassign", "--execute", str(plan))
    plan.write_text('{"version":1,"partitions":[{"topic":"c","partition":0,"replicas":[2,2]}]}')
    assert "duplicate" in fails("reassign", "--execute", str(plan))
    plan.write_text('{"version":1,"partitions":[{"topic":"c"')
    assert "Malformed reassignment JSON" in fails("reassign", "--execute", str(plan))
    plan.write_text('{"version":1,"partitions":[{"topic":"c","partition":0,"replicas":[2,1]}]}')
    out = ok("reassign", "--execute", str(plan))
    assert "Current partition replica assignment" in out and "Successfully started partition reassignment" in out
    wait_until(lambda: "is complete" in kray("reassign", "--verify", str(plan), home=home, zk=zk).stdout)
    assert "Created preferred replica election for 1 partitions" in ok("leader-election", "--preferred", "--topic",
                                                                          "c", "--partition", "1")
    assert "go together" in fails("leader-election", "--preferred", "--topic", "c")
    status = ok("controller", "status")
    assert "active: True" in status and "partitions: 4" in status
    topic_configs = ("configs", "--entity-type", "topics", "--entity-name", "c")
    assert ok(*topic_configs, "--alter", "--add-config", "min.insync.replicas=2,retention.ms=60000") == \
        "Completed updating config for topic c.\n"
    assert "Invalid value x for configuration min.insync.replicas" in fails(*topic_configs, "--alter", "--add-config",
                                                                          "min.insync.replicas=x")
    assert ok(*topic_configs, "--alter", "--delete-config", "retention.ms")
    assert ok(*topic_configs, "--describe") == "Configs for topic 'c' are min.insync.replicas=2\n"
    assert "marked for deletion" in ok("topics", "delete", "--topic", "c")
    wait_until(lambda: "c" not in ok("topics", "list").split())
    assert "does not exist" in fails("topics", "delete", "--topic", "c")
    _chaos_commands(ok, fails)
    assert "shut down after moving its leaderships" in ok("broker", "shutdown", "2")
    wait_until(lambda: "Brokers registered: 1\n" in ok("cluster", "status"))


def _chaos_commands(ok, fails):
    """`kray chaos` against the running cluster: each fault, and the cluster back to two brokers and a
    controller after it."""
    from tests.integration.conftest import wait_until

    def recovered():
        wait_until(lambda: "Brokers registered: 1, 2\n" in ok("cluster", "status")
                   and "active: True" in ok("controller", "status"), timeout=60, what="the cluster back")
    assert ok("chaos", "pause", "1", "--seconds", "0.5") == "Paused broker 1 for 0.5 s\n"
    assert "Expired the ZooKeeper session of broker 1" in ok("chaos", "expire-session", "1")
    recovered()
    assert "RequestSender to broker 2" in ok("chaos", "kill-request-sender", "2")
    assert "Killed the active controller's actor" in ok("chaos", "kill-controller")
    recovered()
    assert "Killed broker 1's actor (Ray restarts it)" in ok("chaos", "kill-broker", "1", "--restart")
    recovered()
    assert "name a broker id, or --controller" in fails("chaos", "pause")
    assert "broker 9 is not running" in fails("chaos", "kill-broker", "9")



def test_sigterm_stops_the_embedded_zookeeper_it_started(ray_session):
    """A job stopped with SIGTERM (`timeout`, `kill`) leaves no ZooKeeper server behind, as Ctrl-C does
    (before, the signal handler of the Ray it started ended the process at once and the server ran on)."""
    env = {k: v for k, v in os.environ.items() if k not in ("KRAY_ZK_CONNECT", "RAY_ADDRESS")}
    script = ("import time\nfrom jobs.local import embedded_zookeeper_and_ray\n"
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
