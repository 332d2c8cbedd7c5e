"""Launch real ZooKeeper servers on loopback: one standalone, or a 3-server ensemble.

Uses Debian's `zookeeper` package (the jar under /usr/share/java), started in the
foreground as a child process so that stopping it is a plain terminate and no
daemon or pid file is left behind. `KRAY_ZK_CONNECT` points everything at an
existing ensemble instead (see `connect_string`).
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, Field

from coordination.errors import ZooKeeperServerError

log = logging.getLogger(__name__)

ZK_CONNECT_ENV = "KRAY_ZK_CONNECT"
ZOOKEEPER_JAR = Path(os.environ.get("KRAY_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperSettings(BaseModel):
    """The zoo.cfg knobs and JVM options kray cares about; session limits bound what clients may ask for.

    Sized for 200,000 partitions (400,000+ znodes; BENCHMARKS.md, "The controller at scale"), without
    costing a small cluster anything: the JVM takes heap as it needs it, up to `heap_mb`."""

    tick_time_ms: int = Field(500, ge=50)
    min_session_timeout_ms: int | None = None  # ZooKeeper's default: 2 ticks
    max_session_timeout_ms: int = Field(60_000, ge=1)
    init_limit: int = 10
    sync_limit: int = 5
    # every znode lives in the heap; with 1 GB, 100,000 partitions' creation ran into back-to-back
    # collections and 2 s sessions expired
    heap_mb: int = Field(3072, ge=64)
    # G1 (not the serial collector Java picks on a small machine), its pauses aimed far below the
    # shortest session a client may ask for (2 ticks): a pause longer than a session ends it. gc.log
    # has each pause with its CPU time: on a busy machine a pause's wall time is mostly waiting for a
    # core (100k partitions on 2 cores: 0.15 s paused, 0.05 s of CPU)
    gc_pause_goal_ms: int = Field(50, ge=1)
    # the largest request, response or znode: a topic's znode holds its whole assignment, and
    # ZooKeeper's 1 MB holds about 60,000 partitions at RF 3; 4 MB about 240,000
    jute_maxbuffer_bytes: int = Field(4 * 1024 * 1024, ge=1024 * 1024)
    # writes between snapshots (ZooKeeper's default): creating 100,000 partitions takes 2-3, each written
    # by its own thread while requests go on
    snap_count: int = Field(100_000, ge=1000)

    def jvm_options(self, gc_log: Path) -> list[str]:
        return [f"-Xmx{self.heap_mb}m", "-XX:+UseG1GC", f"-XX:MaxGCPauseMillis={self.gc_pause_goal_ms}",
                f"-Xlog:gc,gc+cpu:file={gc_log}:uptime", f"-Djute.maxbuffer={self.jute_maxbuffer_bytes}",
                "-Dzookeeper.admin.enableServer=false"]

    def describe(self) -> str:
        """The settings as the server's log states them at its start."""
        return (f"heap up to {self.heap_mb} MB (G1, pauses aimed under {self.gc_pause_goal_ms} ms, logged in "
                f"gc.log), jute.maxbuffer {self.jute_maxbuffer_bytes // 1024} KB, snapCount {self.snap_count}, "
                f"tickTime {self.tick_time_ms} ms")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_server(connect: str) -> tuple[str, int]:
    """(host, port) of the first server a connect string names ("h1:p1,h2:p2/chroot")."""
    host, port = connect.split("/")[0].split(",")[0].rsplit(":", 1)
    return host, int(port)


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command ('ruok', 'srvr', 'mntr') and return the reply."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def server_mode(port: int, host: str = "127.0.0.1") -> str | None:
    """'standalone', 'leader' or 'follower', or None when the server does not answer (or serves no
    quorum yet)."""
    try:
        reply = four_letter_word(host, port, "srvr")
    except OSError:
        return None
    for line in reply.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


# A throwaway server (tests, the demo, experiments) keeps its transaction log in memory when it can:
# ZooKeeper fsyncs every write, and on a machine with one disk the brokers' log writes and
# checkpoints made those fsyncs take hundreds of ms (ZooKeeper's operators give its log a disk of
# its own for the same reason). A server with a base_dir (`kray zk start`) keeps its data there.
THROWAWAY_DIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


class _ServerProcess:
    """One QuorumPeerMain JVM with its own config, data dir and log file."""

    def __init__(self, directory: Path, client_port: int, config: str, myid: int | None, settings: ZooKeeperSettings):
        self.directory = directory
        self.settings = settings
        self.client_port = client_port
        self.data_dir = directory / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if myid is not None:
            (self.data_dir / "myid").write_text(f"{myid}\n")
        self.config_file = directory / "zoo.cfg"
        self.config_file.write_text(config.replace("@DATA_DIR@", str(self.data_dir)))
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        if not ZOOKEEPER_JAR.exists():
            raise ZooKeeperServerError(
                f"{ZOOKEEPER_JAR} not found: install Debian's 'zookeeper' package (make setup does)"
            )
        if shutil.which("java") is None:
            raise ZooKeeperServerError("java not found: install OpenJDK 17 (make setup checks)")
        said = f"ZooKeeper on 127.0.0.1:{self.client_port}: {self.settings.describe()}"
        log.info("%s (%s)", said, self.directory)
        with open(self.directory / "zookeeper.out", "ab") as out:
            out.write(f"{said}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                ["java", *self.settings.jvm_options(self.directory / "gc.log"),
                 "-cp", str(ZOOKEEPER_JAR), ZOOKEEPER_MAIN, str(self.config_file)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """SIGKILL, as a crash: no clean shutdown of the quorum peer."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class _Launcher:
    """Shared lifecycle: readiness check, clean stop, temporary directory removal."""

    servers: list[_ServerProcess]

    def __init__(self, base_dir: str | os.PathLike | None):
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="kray-zk-", dir=THROWAWAY_DIR))

    @property
    def connect_string(self) -> str:
        return ",".join(f"127.0.0.1:{s.client_port}" for s in self.servers)

    def start(self, timeout: float = 30.0) -> "_Launcher":
        for server in self.servers:
            server.start()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [s for s in self.servers if s.process and s.process.poll() is not None]
            if dead:
                raise ZooKeeperServerError(
                    f"ZooKeeper exited with {dead[0].process.returncode}; see {dead[0].directory}/zookeeper.out"
                )
            if all(server_mode(s.client_port) for s in self.servers if s.running):
                return
            time.sleep(0.1)
        self.stop()
        raise ZooKeeperServerError(f"ZooKeeper at {self.connect_string} not ready after {timeout:.0f}s")

    def kill_server(self, index: int) -> None:
        self.servers[index].kill()

    def restart_server(self, index: int, timeout: float = 30.0) -> None:
        """Start a killed server again on its data directory (a standalone server's sessions survive a
        restart shorter than their timeout; an ensemble member rejoins the quorum)."""
        self.servers[index].start()
        deadline = time.monotonic() + timeout
        while server_mode(self.servers[index].client_port) is None:
            if time.monotonic() > deadline:
                raise ZooKeeperServerError(f"server {index + 1} did not come back within {timeout:.0f}s")
            time.sleep(0.1)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class EnsembleMember(BaseModel, frozen=True):
    """One server of an ensemble spread over nodes: where it is, as every member's zoo.cfg names it."""

    host: str
    client_port: int = 2181
    quorum_port: int = 2888
    election_port: int = 3888

    @classmethod
    def parse(cls, spec: str) -> "EnsembleMember":
        """`host` or `host:client:quorum:election`."""
        host, *ports = spec.strip().split(":")
        if len(ports) not in (0, 3) or not host:
            raise ValueError(f"{spec!r}: a member is host or host:client:quorum:election")
        return cls(host=host, **dict(zip(("client_port", "quorum_port", "election_port"), map(int, ports))))


def ensemble_connect_string(members: list[EnsembleMember]) -> str:
    return ",".join(f"{m.host}:{m.client_port}" for m in members)


def _quorum_config(settings: ZooKeeperSettings, members: list[EnsembleMember]) -> str:
    """An ensemble member's zoo.cfg lines after the common ones: the quorum's time limits and every member."""
    return (f"initLimit={settings.init_limit}\nsyncLimit={settings.sync_limit}\n"
            + "".join(f"server.{i}={m.host}:{m.quorum_port}:{m.election_port}\n" for i, m in enumerate(members, 1)))


def _common_config(settings: ZooKeeperSettings, client_port: int, client_address: str | None = "127.0.0.1") -> str:
    """zoo.cfg's common lines; the client port on `client_address`, or every interface when None."""
    lines = [
        f"tickTime={settings.tick_time_ms}",
        "dataDir=@DATA_DIR@",
        f"clientPort={client_port}",
        *([f"clientPortAddress={client_address}"] if client_address else []),
        f"maxSessionTimeout={settings.max_session_timeout_ms}",
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons",
        "maxClientCnxns=0",
        "autopurge.purgeInterval=1",
        f"snapCount={settings.snap_count}",
    ]
    if settings.min_session_timeout_ms is not None:
        lines.append(f"minSessionTimeout={settings.min_session_timeout_ms}")
    return "\n".join(lines) + "\n"


class ZooKeeperServer(_Launcher):
    """A standalone server on a free loopback port.

    >>> with ZooKeeperServer() as zk:
    ...     client = KazooClient(zk.connect_string)
    """

    def __init__(self, settings: ZooKeeperSettings | None = None, port: int | None = None,
                 base_dir: str | os.PathLike | None = None):
        super().__init__(base_dir)
        self.settings = settings or ZooKeeperSettings()
        port = port or free_port()
        self.servers = [_ServerProcess(self.base_dir, port, _common_config(self.settings, port), None, self.settings)]


class ZooKeeperEnsemble(_Launcher):
    """A quorum of `size` servers on loopback; servers can be killed and restarted one by one."""

    def __init__(self, size: int = 3, settings: ZooKeeperSettings | None = None,
                 base_dir: str | os.PathLike | None = None):
        super().__init__(base_dir)
        self.settings = settings or ZooKeeperSettings()
        members = [EnsembleMember(host="127.0.0.1", client_port=free_port(), quorum_port=free_port(),
                                  election_port=free_port()) for _ in range(size)]
        self.servers = [
            _ServerProcess(self.base_dir / f"server{i}", m.client_port,
                           _common_config(self.settings, m.client_port) + _quorum_config(self.settings, members), i,
                           self.settings)
            for i, m in enumerate(members, 1)
        ]

    def leader_index(self) -> int | None:
        for i, s in enumerate(self.servers):
            if s.running and server_mode(s.client_port) == "leader":
                return i
        return None


class ZooKeeperNodeServer(_Launcher):
    """Member `myid` (1-based) of an ensemble whose members are on several nodes (hosts of their own, a
    cloud cluster's nodes), run on its node: its client port on every interface, its data in
    `base_dir`, which it keeps; detached, so that it outlives the command that started it."""

    def __init__(self, members: list[EnsembleMember], myid: int, base_dir: str | os.PathLike,
                 settings: ZooKeeperSettings | None = None):
        super().__init__(base_dir)
        self.settings = settings or ZooKeeperSettings()
        me = members[myid - 1]
        self.servers = [_ServerProcess(self.base_dir, me.client_port,
                                       _common_config(self.settings, me.client_port, None)
                                       + _quorum_config(self.settings, members), myid, self.settings)]


def connect_string(default: str | None = None) -> str | None:
    """The ensemble to use: `KRAY_ZK_CONNECT` when set, else `default`."""
    return os.environ.get(ZK_CONNECT_ENV) or default
