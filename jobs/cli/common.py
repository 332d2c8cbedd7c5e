"""What the command groups share: how a command reaches ZooKeeper, Ray, the cluster `kray cluster up`
started and its active controller, and how it reads its key=value options and files. A mistake is a
KrayError, which `kray` prints as one line.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from coordination.errors import ControllerMovedException, Errors, KrayError
from coordination.zkclient import KrayZkClient, credential_from_env
from jobs.experiments import local

NAMESPACE_HELP = "the cluster's Ray namespace (default: the one `kray cluster up` started here, else kray)"
CONTROLLER_WAIT_S = 30  # how long a controller-bound command waits out a controller failover
CONTROLLER_RETRY_BACKOFF_S = 0.1


def zookeeper(args) -> KrayZkClient:
    """A session on the ZooKeeper of --zookeeper (else $KRAY_ZK_CONNECT, else `kray zk start`'s)."""
    return KrayZkClient(local.zk_connect(args.zookeeper), credential=credential_from_env()).start(timeout=10)


def ray_connect() -> bool:
    """Join the running Ray for a command: True. False in a process on Ray already (a notebook, a test
    calling `main`), which keeps its connection after the command (`ray_leave`)."""
    import ray
    if ray.is_initialized():
        return False
    ray.init(address="auto", namespace="kray", log_to_driver=False, configure_logging=False)
    return True


def ray_leave(joined: bool) -> None:
    import ray
    if joined:
        ray.shutdown()


def started_cluster():
    """The ClusterConfig of the cluster `kray cluster up` started here."""
    from actors.config import ClusterConfig

    state = local.read_state("cluster")
    if not state:
        raise KrayError("no kray cluster was started here (kray cluster up)")
    return ClusterConfig(**state["config"])


def stop_started(name: str, not_running: str, stop: Callable[[dict], str]) -> None:
    """`kray zk stop` and `kray cluster down`: what was started here (its state file `name`) stopped by
    `stop`, which says what it stopped, then forgotten; `not_running` said when nothing was."""
    state = local.read_state(name)
    if not state:
        print(not_running)
        return
    stopped = stop(state)
    local.clear_state(name)
    print(stopped)


def parse_configs(pairs: list[str], option: str = "--config") -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise KrayError(f"{option} expects key=value, got {pair!r}")
        k, v = pair.split("=", 1)
        out[k] = v
    return out


def flag(option: str) -> str:
    """The option as the user typed it: reassignment_json_file -> --reassignment-json-file."""
    return "--" + option.replace("_", "-")


def read_file(path: str, what: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise KrayError(f"cannot read {what} file {path}: {e.strerror}") from None


def ask_controller(args, method: str, *call_args):
    """Call the active controller's actor, kray's AdminClient: Kafka's tools send these requests to the
    controller (through a broker); the actor answers them in order with its events. While a failover is
    under way (/controller still names a candidate that died or resigned) it asks again, as Kafka's
    AdminClient retries NOT_CONTROLLER until its timeout; a namespace without that broker fails at once."""
    import ray

    from actors.names import broker_actor_name, controller_actor_name

    namespace = args.namespace or (local.read_state("cluster") or {}).get("config", {}).get("namespace", "kray")
    try:
        joined = ray_connect()
    except ConnectionError:
        raise KrayError("no Ray cluster is running here (kray cluster up)") from None
    deadline = time.monotonic() + CONTROLLER_WAIT_S
    try:
        with zookeeper(args) as zk:
            while True:
                controller_id = zk.get_controller_id()
                if controller_id is None:
                    problem = KrayError("no active controller")
                else:
                    try:
                        actor = ray.get_actor(controller_actor_name(controller_id), namespace=namespace)
                        answer = ray.get(getattr(actor, method).remote(*call_args))
                    except ValueError:  # no live actor of that name
                        try:
                            ray.get_actor(broker_actor_name(controller_id), namespace=namespace)
                        except ValueError:
                            raise KrayError(f"no broker {controller_id} in Ray namespace {namespace} "
                                            "(--namespace)") from None
                        problem = KrayError(f"no controller of broker {controller_id} in Ray namespace "
                                            f"{namespace}: it died, and no other has been elected yet")
                    except ray.exceptions.RayActorError:
                        problem = KrayError(f"the controller of broker {controller_id} died while answering")
                    else:
                        if answer is not Errors.NOT_CONTROLLER:
                            return answer
                        problem = ControllerMovedException(f"broker {controller_id} is no longer the controller")
                if time.monotonic() > deadline:
                    raise problem
                time.sleep(CONTROLLER_RETRY_BACKOFF_S)
    finally:
        ray_leave(joined)
