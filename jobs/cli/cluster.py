"""`kray cluster`: the brokers on the local Ray (started as kafka-server-start starts one, with its
`--override`s), stopped, and what ZooKeeper says of them. What `cluster up` started stays in
$KRAY_HOME/cluster.json for the commands that act on that cluster.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from coordination.errors import KrayError
from jobs.cli.common import (
    parse_configs,
    ray_connect,
    ray_leave,
    stop_started,
    zookeeper,
)
from jobs.experiments import local

RAY = str(Path(sys.executable).parent / "ray")  # the venv's ray, whether or not it is on PATH


def cluster_up(args) -> None:
    from actors.cluster import LocalCluster, listener_host
    from actors.config import ClusterConfig
    from actors.runtime import ray_worker_environment

    broker, controller = _server_overrides(args.override, log_dirs=str(local.kray_home() / "logs" / args.namespace))
    connect = local.zk_connect(args.zookeeper)
    started_ray = subprocess.run([RAY, "status"], capture_output=True).returncode != 0
    if started_ray:
        ray_worker_environment()
        subprocess.run([RAY, "start", "--head", "--include-dashboard=false", "--disable-usage-stats"],
                       check=True, capture_output=True)
    joined = ray_connect()
    config = ClusterConfig(zk_connect=connect, namespace=args.namespace, base_port=args.base_port, host=listener_host(),
                           zk_session_timeout_ms=args.session_timeout_ms, link_faults_enable=args.link_faults,
                           broker=broker, controller=controller)
    cluster = LocalCluster(config, list(range(1, args.brokers + 1)), detached=True).start()
    with config.zk_client().start() as zk:
        controller, epoch = cluster.wait_for_controller(zk)
        servers = zk.bootstrap_servers()
    # the credential stays out of the state file: commands read it from the environment again
    local.write_state("cluster", {"config": config.model_dump(mode="json", exclude={"zk_credential"}),
                                  "started_ray": started_ray})
    print(f"{args.brokers} brokers up in Ray namespace {config.namespace}; controller is broker {controller} "
          f"(epoch {epoch}); bootstrap.servers={servers}")
    ray_leave(joined)


def _server_overrides(pairs: list[str], log_dirs: str):
    """The BrokerConfig (logs in `log_dirs` unless overridden) and ControllerConfig of kafka-server-start's
    `--override name=value`, by Kafka's names; an unknown name or a bad value is a KrayError naming it,
    before anything starts."""
    from pydantic import ValidationError

    from actors.config import BrokerConfig, ControllerConfig

    broker, controller = {"log_dirs": log_dirs}, {}
    for name, value in parse_configs(pairs, "--override").items():
        field = name.replace(".", "_")
        if field in BrokerConfig.model_fields:
            broker[field] = value
        elif field in ControllerConfig.model_fields:
            controller[field] = value
        else:
            raise KrayError(f"--override: unknown server config {name!r}")
    try:
        return BrokerConfig(**broker), ControllerConfig(**controller)
    except ValidationError as e:
        first = e.errors()[0]
        raise KrayError(f"--override {str(first['loc'][0]).replace('_', '.')}: {first['msg']}") from None


def cluster_down(args) -> None:
    stop_started("cluster", "No kray cluster was started here (kray cluster up)", _stop_cluster)


def _stop_cluster(state: dict) -> str:
    from actors.cluster import LocalCluster
    from actors.config import ClusterConfig

    try:
        joined = ray_connect()
        LocalCluster.attach(ClusterConfig(**state["config"])).stop()
        ray_leave(joined)
    except (ConnectionError, ValueError):
        pass  # Ray is already gone
    if state["started_ray"]:  # only stop the Ray that `cluster up` started
        subprocess.run([RAY, "stop"], capture_output=True)
    return "kray cluster stopped"


def cluster_status(args) -> None:
    with zookeeper(args) as zk:
        brokers = zk.get_all_broker_ids()
        controller = zk.get_controller_id()
        epoch = zk.get_controller_epoch()
        servers = zk.bootstrap_servers()
    print(f"Brokers registered: {', '.join(map(str, brokers)) or 'none'}")
    print(f"bootstrap.servers: {servers or 'none'}")
    print(f"Active controller: {controller if controller is not None else 'none'}"
          f"{f' (epoch {epoch[0]})' if epoch else ''}")


def add_parsers(sub, zkp) -> None:
    cl = sub.add_parser("cluster", help="brokers on the local Ray").add_subparsers(dest="action", required=True)
    s = cl.add_parser("up", parents=[zkp])
    s.add_argument("--brokers", type=int, default=3)
    s.add_argument("--namespace", default="kray")
    s.add_argument("--session-timeout-ms", type=int, default=18_000)
    s.add_argument("--base-port", type=int, default=9092,
                   help="broker N's PLAINTEXT listener is on base-port + N (0: free ports, named in /brokers/ids/N)")
    s.add_argument("--link-faults", action="store_true",
                   help="route ZooKeeper sessions, replication, clients' connections and the controller's "
                        "requests through links `kray chaos` can cut or slow")
    s.add_argument("--override", action="append", default=[], metavar="NAME=VALUE",
                   help="a broker or controller config by Kafka's name, as kafka-server-start's --override "
                        "(e.g. auto.leader.rebalance.enable=false); repeatable")
    s.set_defaults(func=cluster_up)
    cl.add_parser("down").set_defaults(func=cluster_down)
    cl.add_parser("status", parents=[zkp]).set_defaults(func=cluster_status)
