"""`kray zk`: a local ZooKeeper server for the cluster, started, stopped and asked how it is, as
zookeeper-server-start and zookeeper-server-stop; its pid and port stay in $KRAY_HOME/zk.json.
"""
from __future__ import annotations

import os
import signal
import sys
import time

from coordination.server import (
    ZooKeeperServer,
    ZooKeeperSettings,
    first_server,
    server_mode,
)
from jobs.cli.common import stop_started
from jobs.experiments import local


def zk_start(args) -> None:
    state = local.read_state("zk")
    if state and server_mode(state["port"]):
        print(f"ZooKeeper already running at {state['connect']} (pid {state['pid']})")
        return
    base = local.kray_home() / "zookeeper"
    server = ZooKeeperServer(ZooKeeperSettings(tick_time_ms=args.tick_time_ms), port=args.port, base_dir=base)
    server.start()
    proc = server.servers[0]
    local.write_state("zk", {"connect": server.connect_string, "port": proc.client_port,
                             "tick_time_ms": args.tick_time_ms,
                             "pid": proc.process.pid, "dir": str(base)})
    print(f"ZooKeeper started at {server.connect_string} (pid {proc.process.pid}, data in {base})")


def zk_stop(args) -> None:
    stop_started("zk", "ZooKeeper is not running (started by kray)", _stop_server)


def _stop_server(state: dict) -> str:
    """SIGTERM, then up to 10 s for the server to exit."""
    try:
        os.kill(state["pid"], signal.SIGTERM)
        for _ in range(100):
            os.kill(state["pid"], 0)
            time.sleep(0.1)
    except ProcessLookupError:
        pass
    return f"ZooKeeper at {state['connect']} stopped"


def zk_status(args) -> None:
    connect = local.zk_connect(args.zookeeper)
    host, port = first_server(connect)
    mode = server_mode(port) if host in ("127.0.0.1", "localhost") else None
    print(f"ZooKeeper {connect}: {mode or 'not answering'}")
    if mode is None:
        sys.exit(1)


def add_parsers(sub, zkp) -> None:
    zk = sub.add_parser("zk", help="a local ZooKeeper server").add_subparsers(dest="action", required=True)
    s = zk.add_parser("start")
    s.add_argument("--port", type=int, default=None)
    s.add_argument("--tick-time-ms", type=int, default=500)
    s.set_defaults(func=zk_start)
    zk.add_parser("stop").set_defaults(func=zk_stop)
    zk.add_parser("status", parents=[zkp]).set_defaults(func=zk_status)
