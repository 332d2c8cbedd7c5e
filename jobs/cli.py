"""The `kray` command: ZooKeeper, the local cluster, topics, and the main job.

User mistakes print one line and exit 1; no tracebacks.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from importlib import import_module
from pathlib import Path

from coordination import admin, zkdata
from coordination.errors import (
    AdminCommandFailedException,
    ControllerMovedException,
    Errors,
    KrayError,
    TopicExistsException,
)
from coordination.server import ZooKeeperServer, ZooKeeperSettings, first_server, server_mode
from coordination.zkclient import KrayZkClient, credential_from_env
from coordination.zkdata import TopicPartition
from jobs.experiments import local


def _zk(args) -> KrayZkClient:
    return KrayZkClient(local.zk_connect(args.zookeeper), credential=credential_from_env()).start(timeout=10)


# -- kray zk ---------------------------------------------------------------

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
    state = local.read_state("zk")
    if not state:
        print("ZooKeeper is not running (started by kray)")
        return
    try:
        os.kill(state["pid"], signal.SIGTERM)
        for _ in range(100):
            os.kill(state["pid"], 0)
            time.sleep(0.1)
    except ProcessLookupError:
        pass
    local.clear_state("zk")
    print(f"ZooKeeper at {state['connect']} stopped")


def zk_status(args) -> None:
    connect = local.zk_connect(args.zookeeper)
    host, port = first_server(connect)
    mode = server_mode(port) if host in ("127.0.0.1", "localhost") else None
    print(f"ZooKeeper {connect}: {mode or 'not answering'}")
    if mode is None:
        sys.exit(1)


# -- kray cluster ----------------------------------------------------------

RAY = str(Path(sys.executable).parent / "ray")  # the venv's ray, whether or not it is on PATH


def _ray_connect() -> bool:
    """Join the running Ray for a command: True. False in a process on Ray already (a notebook, a test
    calling `main`), which keeps its connection after the command (`_ray_leave`)."""
    import ray
    if ray.is_initialized():
        return False
    ray.init(address="auto", namespace="kray", log_to_driver=False, configure_logging=False)
    return True


def _ray_leave(joined: bool) -> None:
    import ray
    if joined:
        ray.shutdown()


def cluster_up(args) -> None:
    from actors.cluster import LocalCluster
    from actors.config import ClusterConfig
    from actors.runtime import ray_worker_environment

    broker, controller = _server_overrides(args.override, log_dirs=str(local.kray_home() / "logs" / args.namespace))
    connect = local.zk_connect(args.zookeeper)
    started_ray = subprocess.run([RAY, "status"], capture_output=True).returncode != 0
    if started_ray:
        ray_worker_environment()
        subprocess.run([RAY, "start", "--head", "--include-dashboard=false", "--disable-usage-stats"],
                       check=True, capture_output=True)
    joined = _ray_connect()
    config = ClusterConfig(zk_connect=connect, namespace=args.namespace, base_port=args.base_port,
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
    _ray_leave(joined)


def _server_overrides(pairs: list[str], log_dirs: str):
    """The BrokerConfig (logs in `log_dirs` unless overridden) and ControllerConfig of kafka-server-start's
    `--override name=value`, by Kafka's names; an unknown name or a bad value is a KrayError naming it,
    before anything starts."""
    from pydantic import ValidationError

    from actors.config import BrokerConfig, ControllerConfig

    broker, controller = {"log_dirs": log_dirs}, {}
    for name, value in _parse_configs(pairs, "--override").items():
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
    from actors.cluster import LocalCluster
    from actors.config import ClusterConfig

    state = local.read_state("cluster")
    if not state:
        print("No kray cluster was started here (kray cluster up)")
        return
    try:
        joined = _ray_connect()
        LocalCluster.attach(ClusterConfig(**state["config"])).stop()
        _ray_leave(joined)
    except (ConnectionError, ValueError):
        pass  # Ray is already gone
    local.clear_state("cluster")
    if state["started_ray"]:  # only stop the Ray that `cluster up` started
        subprocess.run([RAY, "stop"], capture_output=True)
    print("kray cluster stopped")


def cluster_status(args) -> None:
    with _zk(args) as zk:
        brokers = zk.get_all_broker_ids()
        controller = zk.get_controller_id()
        epoch = zk.get_controller_epoch()
        servers = zk.bootstrap_servers()
    print(f"Brokers registered: {', '.join(map(str, brokers)) or 'none'}")
    print(f"bootstrap.servers: {servers or 'none'}")
    print(f"Active controller: {controller if controller is not None else 'none'}"
          f"{f' (epoch {epoch[0]})' if epoch else ''}")


# -- kray topics -----------------------------------------------------------

def _parse_configs(pairs: list[str], option: str = "--config") -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise KrayError(f"{option} expects key=value, got {pair!r}")
        k, v = pair.split("=", 1)
        out[k] = v
    return out


def topics_create(args) -> None:
    with _zk(args) as zk:
        try:
            admin.create_topic(zk, args.topic, args.partitions, args.replication_factor, _parse_configs(args.config))
        except TopicExistsException:
            if args.if_not_exists:  # Kafka's --if-not-exists: nothing to do, nothing printed
                return
            raise
    print(f"Created topic {args.topic}.")


def configs(args) -> None:
    """kafka-configs for topics, in ZooKeeper mode."""
    if args.entity_type != "topics":
        raise KrayError(f"kray configs handles --entity-type topics only, not {args.entity_type}")
    with _zk(args) as zk:
        if args.alter:
            added = _parse_configs([c for c in args.add_config.split(",") if c]) if args.add_config else {}
            deleted = [c for c in (args.delete_config or "").split(",") if c]
            if not added and not deleted:
                raise KrayError("--alter needs --add-config or --delete-config")
            admin.alter_topic_config(zk, args.entity_name, added, deleted)
            print(f"Completed updating config for topic {args.entity_name}.")
        else:
            config = admin.describe_topics(zk, [args.entity_name])[0].config
            print(f"Configs for topic '{args.entity_name}' are {','.join(f'{k}={v}' for k, v in sorted(config.items()))}")


def topics_list(args) -> None:
    with _zk(args) as zk:
        for topic in sorted(zk.get_all_topics()):
            print(topic)


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def describe_report(args) -> str | None:
    """The partition report kafka-topics --describe was asked for (one at most, as Kafka allows)."""
    reports = [r for r in admin.DESCRIBE_REPORTS if getattr(args, r)]
    if len(reports) > 1:
        raise AdminCommandFailedException(f'Option "{_flag(reports[0])}" can\'t be used with option '
                                          f'"{_flag(reports[1])}"')
    return reports[0] if reports else None


def topics_describe(args) -> None:
    from actors.config import BrokerConfig

    report = describe_report(args)
    with _zk(args) as zk:
        text = admin.format_describe(admin.describe_topics(zk, [args.topic] if args.topic else None), report,
                                     zk.get_all_broker_ids(), BrokerConfig().min_insync_replicas)
    if text:
        print(text)


def _topic_missing(zk: KrayZkClient, args) -> bool:
    """--if-exists: a topic that does not exist is left alone, silently (Kafka's ensureTopicExists)."""
    return args.if_exists and args.topic not in zk.get_all_topics()


def topics_delete(args) -> None:
    with _zk(args) as zk:
        if _topic_missing(zk, args):
            return
        admin.delete_topic(zk, args.topic)
    print(f"Topic {args.topic} is marked for deletion.")


def topics_alter(args) -> None:
    with _zk(args) as zk:
        if _topic_missing(zk, args):
            return
        added = admin.add_partitions(zk, args.topic, args.partitions)
    print(f"Adding partitions succeeded: {len(added)} new partitions of {args.topic} "
          f"({', '.join(f'{p}:{r}' for p, r in sorted(added.items()))})")


def _read_file(path: str, what: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise KrayError(f"cannot read {what} file {path}: {e.strerror}") from None


CONTROLLER_WAIT_S = 30  # how long a controller-bound command waits out a controller failover
CONTROLLER_RETRY_BACKOFF_S = 0.1


def _ask_controller(args, method: str, *call_args):
    """Call the active controller's actor, kray's AdminClient: Kafka's tools send these requests to the
    controller (through a broker); the actor answers them in order with its events. While a failover is
    under way (/controller still names a candidate that died or resigned) it asks again, as Kafka's
    AdminClient retries NOT_CONTROLLER until its timeout; a namespace without that broker fails at once."""
    import ray

    from actors.names import broker_actor_name, controller_actor_name

    namespace = args.namespace or (local.read_state("cluster") or {}).get("config", {}).get("namespace", "kray")
    try:
        joined = _ray_connect()
    except ConnectionError:
        raise KrayError("no Ray cluster is running here (kray cluster up)") from None
    deadline = time.monotonic() + CONTROLLER_WAIT_S
    try:
        with _zk(args) as zk:
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
        _ray_leave(joined)


# -- kray reassign (kafka-reassign-partitions) -------------------------------

REASSIGN_ACTIONS = ("generate", "execute", "verify", "cancel", "list")
REASSIGN_ARGUMENTS = ("reassignment_json_file", "topics_to_move_json_file", "broker_list", "namespace")
REASSIGN_OPTIONS = {  # action -> (the options it needs, the others it may have), as Kafka's tool checks them
    "generate": (("topics_to_move_json_file", "broker_list"), ()),
    "execute": (("reassignment_json_file",), ()),
    "verify": (("reassignment_json_file",), ()),
    "cancel": (("reassignment_json_file",), ("namespace",)),
    "list": ((), ()),
}


def reassign_action(args) -> str:
    """Kafka's ReassignPartitionsCommand.validateAndParseArgs: exactly one action, the options it needs,
    none that it cannot use."""
    actions = [a for a in REASSIGN_ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise AdminCommandFailedException(
            f"Command must include exactly one action: {', '.join(map(_flag, REASSIGN_ACTIONS))}")
    action = actions[0]
    needed, allowed = REASSIGN_OPTIONS[action]
    missing = [o for o in needed if getattr(args, o) is None]
    if missing:
        raise AdminCommandFailedException(f'Missing required argument "{_flag(missing[0])}"')
    extra = [o for o in REASSIGN_ARGUMENTS if getattr(args, o) is not None and o not in needed + allowed]
    if extra:
        raise AdminCommandFailedException(f'Option "{_flag(extra[0])}" can\'t be used with action "{_flag(action)}"')
    return action


def _read_plan(args) -> zkdata.ReassignPartitionsZNode:
    return admin.parse_reassignment(_read_file(args.reassignment_json_file, "reassignment"))


def _plural(items) -> str:
    return "" if len(items) == 1 else "s"


def reassign_generate(args) -> None:
    topics = admin.parse_topics_to_move(_read_file(args.topics_to_move_json_file, "topics-to-move"))
    brokers = admin.parse_broker_list(args.broker_list)
    with _zk(args) as zk:
        current, proposed = admin.generate_assignment(zk, topics, brokers)
    print(f"Current partition replica assignment\n{admin.format_reassignment_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{admin.format_reassignment_json(proposed)}")


def reassign_execute(args) -> None:
    with _zk(args) as zk:
        current = admin.reassign_partitions(zk, _read_plan(args))
    print(f"Current partition replica assignment\n\n{admin.format_reassignment_json(current)}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback")
    print(f"Successfully started partition reassignment{_plural(current)} for {','.join(map(str, sorted(current)))}")


def reassign_verify(args) -> None:
    with _zk(args) as zk:
        states = admin.verify_reassignment(zk, _read_plan(args))
    print(admin.format_reassignment_states(states))
    if any(s.done and s.current != s.target for s in states.values()):
        sys.exit(1)


def reassign_cancel(args) -> None:
    """KIP-455's cancel: the file's partitions that are being moved go back to their original replicas.
    Kafka 2.8's tool cancels through its AdminClient only (not with --zookeeper): kray asks its controller."""
    partitions = _read_plan(args).topic_partitions()
    with _zk(args) as zk:
        moving = sorted(set(partitions) & set(admin.list_reassignments(admin.topic_znodes_of(zk, partitions))))
    if not moving:
        print("None of the specified partition reassignments are active.")
        return
    errors = {tp: e for tp, e in _ask_controller(args, "alter_partition_reassignments",
                                                            [(tp, None) for tp in moving]).items() if e}
    if errors:
        raise AdminCommandFailedException(f"Error cancelling partition reassignment{_plural(errors)} for: " +
                                          "; ".join(f"{tp}: {e.exception()}" for tp, e in sorted(errors.items())))
    print(f"Successfully cancelled partition reassignment{_plural(moving)} for: {','.join(map(str, moving))}")


def reassign_list(args) -> None:
    with _zk(args) as zk:
        print(admin.format_reassignments(admin.list_reassignments(zk.get_topic_znodes(zk.get_all_topics()))))


def reassign(args) -> None:
    {"generate": reassign_generate, "execute": reassign_execute, "verify": reassign_verify,
     "cancel": reassign_cancel, "list": reassign_list}[reassign_action(args)](args)


# -- kray leader-election (kafka-leader-election) ----------------------------

def election_partitions(args) -> list[TopicPartition] | None:
    """The partitions kafka-leader-election was asked to elect (None: all), its options checked as Kafka's
    LeaderElectionCommand.validate does."""
    if [args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None].count(True) != 1:
        raise AdminCommandFailedException("One and only one of the following options is required: "
                                          "topic, all-topic-partitions, path-to-json-file")
    if (args.topic is None) != (args.partition is None):
        raise AdminCommandFailedException("Missing required option(s): partition" if args.partition is None
                                          else "Option partition is only allowed if topic is used")
    if args.path_to_json_file is not None:
        return admin.parse_election_partitions(_read_file(args.path_to_json_file, "replica election"))
    return None if args.all_topic_partitions else [TopicPartition(args.topic, args.partition)]


def leader_election(args) -> None:
    """An ElectLeaders request to the controller (Kafka's kafka-leader-election talks to no ZooKeeper);
    the partitions a file or --topic names must exist, or nothing is elected."""
    from actors.controller.changes import ElectionType

    partitions = election_partitions(args)
    if partitions is not None:
        with _zk(args) as zk:
            admin.topic_znodes_of(zk, partitions)
    report, failed = admin.format_election_results(args.election_type, _ask_controller(
        args, "elect_leaders", partitions, ElectionType[args.election_type]))
    if report:
        print(report)
    if failed:
        raise AdminCommandFailedException(f"{failed} replica(s) could not be elected")


def consumer_groups(args) -> None:
    """kafka-consumer-groups (Kafka 2.8's ConsumerGroupCommand) through the brokers' group API."""
    from jobs import consumer_groups as cg

    groups = args.group
    if args.list and groups:
        raise AdminCommandFailedException("Option --list does not take --group")
    if (args.describe or args.reset_offsets or args.delete) and not groups and not args.all_groups:
        raise AdminCommandFailedException("Option --describe, --reset-offsets and --delete need --group or "
                                          "--all-groups")
    spec = next((s for s in cg.RESET_SPECS if getattr(args, s) not in (None, False)), None)
    if args.reset_offsets:
        if spec is None:
            raise AdminCommandFailedException("Option --reset-offsets needs one of --to-earliest, --to-latest, "
                                              "--to-offset, --shift-by")
        if not args.topic and not args.all_topics:
            raise AdminCommandFailedException("Option --reset-offsets needs --topic or --all-topics")
    with _zk(args) as zk:
        servers = args.bootstrap_server or cg.bootstrap_servers(zk)
        known = {t: len(z.assignment()) for t, z in zk.get_topic_znodes(zk.get_all_topics()).items()}
    client = cg.GroupsClient(servers)
    try:
        if args.all_groups:
            groups = client.list()
        if args.list:
            for group in client.list():
                print(group)
        elif args.describe:
            _describe_groups(client, groups, args)
        elif args.reset_offsets:
            _reset_offsets(client, groups, spec, args, known)
        elif args.delete:
            failed = {g: e for g, e in client.delete(groups).items() if e}
            if failed:
                raise AdminCommandFailedException("Deletion of some consumer groups failed:\n" + "\n".join(
                    f"* Group '{g}' could not be deleted due to: {e}" for g, e in sorted(failed.items())))
            print("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in groups) +
                  ") was successful.")
    finally:
        client.close()


def _describe_groups(client, groups: list[str], args) -> None:
    from jobs import consumer_groups as cg

    for group in groups:
        desc = client.describe(group)
        state = desc.get("group_state") or "Dead"
        if state == "Dead" and not desc.get("members"):
            raise AdminCommandFailedException(f"Consumer group '{group}' does not exist.")
        members = [cg.MemberRow(group, m["member_id"], m["client_host"], m["client_id"],
                                cg.assigned_partitions(m.get("member_assignment"))) for m in desc["members"]]
        if args.state:
            print(cg.format_state(group, f"{desc.get('coordinator', '')}", desc.get("protocol_data") or "", state,
                                  len(members)))
        elif args.members:
            print(cg.format_members(group, members, state))
        else:
            committed = client.committed(group)
            owner = {tp: m for m in members for tp in m.partitions}
            partitions = sorted(set(committed) | set(owner))
            from kafka.admin import OffsetSpec

            latest = client.offsets(partitions, OffsetSpec.LATEST)
            print(cg.format_offsets(group, [
                cg.PartitionRow(group, tp, committed.get(tp), latest.get(tp),
                                *((owner[tp].consumer_id, owner[tp].host, owner[tp].client_id) if tp in owner else ()))
                for tp in partitions], state))


def _reset_offsets(client, groups: list[str], spec: str, args, known: dict[str, int]) -> None:
    from kafka.admin import OffsetSpec

    from jobs import consumer_groups as cg

    for group in groups:
        state = client.describe(group).get("group_state") or "Dead"
        if state not in ("Empty", "Dead"):
            raise AdminCommandFailedException(f"Assignments can only be reset if the group '{group}' is inactive, "
                                              f"but the current state is {state}.")
        committed = client.committed(group)
        partitions = cg.parse_topic_partitions(args.topic, known) if args.topic else sorted(committed)
        plan = cg.reset_plan(spec, getattr(args, spec) if spec in ("to_offset", "shift_by") else None, partitions,
                             committed, client.offsets(partitions, OffsetSpec.EARLIEST),
                             client.offsets(partitions, OffsetSpec.LATEST))
        if args.execute:
            failed = client.commit(group, plan)
            if failed:
                raise AdminCommandFailedException(f"Error: resetting the offsets of group '{group}' failed: " +
                                                  ", ".join(f"{tp}: {e}" for tp, e in sorted(failed.items())))
        else:
            print("WARN: No action will be performed as the --execute option is missing. In a future major release, "
                  "the default behavior of this command will be to prompt the user before executing the reset "
                  "rather than doing a dry run. You should add the --dry-run option explicitly if you are "
                  "scripting this command and want to keep the current default behavior without prompting.")
        print(cg.format_reset(group, plan))


def _started_cluster():
    """The ClusterConfig of the cluster `kray cluster up` started here."""
    from actors.config import ClusterConfig

    state = local.read_state("cluster")
    if not state:
        raise KrayError("no kray cluster was started here (kray cluster up)")
    return ClusterConfig(**state["config"])


def broker_shutdown(args) -> None:
    from actors.cluster import LocalCluster

    config = _started_cluster()
    joined = _ray_connect()
    with config.zk_client().start() as zk:
        if args.broker_id not in zk.get_all_broker_ids():
            raise KrayError(f"broker {args.broker_id} is not registered")
        result = LocalCluster.attach(config).controlled_shutdown(args.broker_id)
    _ray_leave(joined)
    if result["succeeded"]:
        print(f"Broker {args.broker_id} shut down after moving its leaderships ({result['attempts']} attempt(s))")
    else:
        print(f"Broker {args.broker_id} shut down uncleanly: still leading {result['remaining']}")
        sys.exit(1)


def controller_status(args) -> None:
    for key, value in _ask_controller(args, "status").items():
        print(f"{key}: {value}")


# -- kray chaos / experiment / check ----------------------------------------

DISK_FAULT_HELP = {
    "corrupt-log-tail": "kill a broker, flip a byte of each of its logs' last batch, start it again",
    "truncate-log-tail": "kill a broker, cut each of its logs' last batch in half, start it again",
    "lose-unflushed-tail": "kill a broker, cut its logs back to their recovery points (a power loss), start it again",
}
LINK_FAULT_HELP = {
    "cut-replication": "cut a broker off from every other broker (ZooKeeper kept)",
    "cut-broker-zookeeper": "cut a broker's ZooKeeper session only",
    "cut-controller-zookeeper": "cut the active controller's ZooKeeper session only",
    "isolate-broker": "cut a broker (and its controller candidate) off from the brokers and ZooKeeper",
    "split-brokers": "split the brokers into two halves",
    "bridge-brokers": "two halves, and one broker between them that reaches both",
    "slow-replication": "slow a broker's links to every other broker",
    "cut-controller-broker": "cut the active controller's requests to a broker (ZooKeeper and replication kept)",
    "cut-clients": "cut every client's connections to a broker (replication and ZooKeeper kept)",
    "slow-clients": "slow every client's connections to a broker",
    "drop-broker-zookeeper": "close a broker's ZooKeeper connections and refuse new ones (its session lives if "
                             "healed in time)",
    "drop-controller-zookeeper": "close the active controller's ZooKeeper connections and refuse new ones",
}


def _link_fault(c, args) -> str:
    """A link fault: held for --seconds then healed, or (without) left until `kray chaos heal`."""
    from pydantic import ValidationError

    from actors.links.faults import LinkFault
    from actors.links.shapes import healed
    from jobs.experiments.chaos import SLOW_LINKS
    from jobs.measures.rundir import FaultKind

    kind = FaultKind(args.fault)
    slow = None
    if kind in SLOW_LINKS:
        try:
            slow = LinkFault(delay_ms=args.delay_ms, jitter_ms=args.jitter_ms, loss=args.loss,
                             rate_bytes_per_s=args.rate)
        except ValidationError as e:
            first = e.errors()[0]
            raise KrayError(f"{args.fault}: {first['loc'][0]}: {first['msg']}") from None
    target, settings, _ = c.link_fault(kind, getattr(args, "broker_id", None), slow)
    what = f"{args.fault}" + (f" {target}" if target is not None else "") + \
        f": {len(settings)} link{'' if len(settings) == 1 else 's'}"
    if not args.seconds:
        return f"{what}; `kray chaos heal` heals them"
    time.sleep(args.seconds)
    c.apply_links(healed(settings))
    return f"{what}, healed after {args.seconds:g} s"


def chaos(args) -> None:
    """One fault against the cluster `kray cluster up` started."""
    from actors.cluster import LocalCluster
    from jobs.experiments.chaos import Chaos

    config = _started_cluster()
    if args.fault == "zk-restart":  # the server `kray zk start` started: SIGKILL, then start it on its data
        zk_state = local.read_state("zk")
        if not zk_state:
            raise KrayError("zk-restart needs the ZooKeeper server `kray zk start` started")
        os.kill(zk_state["pid"], signal.SIGKILL)
        time.sleep(args.seconds)
        zk_start(argparse.Namespace(tick_time_ms=zk_state.get("tick_time_ms", 500), port=zk_state["port"]))
        print(f"Restarted ZooKeeper after {args.seconds:g} s down")
        return
    joined = _ray_connect()
    with config.zk_client().start() as zk:
        c = Chaos(LocalCluster.attach(config), zk)
        match args.fault:
            case "kill-broker":
                c.kill_broker(args.broker_id, restart=args.restart)
                done = f"Killed broker {args.broker_id}'s actor" + (" (Ray restarts it)" if args.restart else "")
            case "kill-controller":
                done = (f"Killed the active controller's actor (broker {c.kill_controller()[0]}); its broker starts "
                        "a new candidate after candidate_restart_backoff_ms")
            case "pause":
                who, _ = c.pause(args.seconds, None if args.controller else args.broker_id)
                done = f"Paused {'the controller on ' if args.controller else ''}broker {who} for {args.seconds:g} s"
            case "expire-session":
                who, _ = c.expire_session(None if args.controller else args.broker_id)
                done = f"Expired the ZooKeeper session of {'the controller on ' if args.controller else ''}broker {who}"
            case "kill-request-sender":
                done = f"Killed controller {c.kill_request_sender(args.broker_id)}'s RequestSender to broker " \
                       f"{args.broker_id}"
            case "heal":
                c.heal_links()
                done = "Healed every link"
            case "flaky-zookeeper":
                import random

                _, drops = c.flaky_zookeeper(args.seconds, config.zk_session_timeout_ms, random.Random())
                done = f"Stalled and dropped {drops} ZooKeeper links over {args.seconds:g} s"
            case fault if fault in DISK_FAULT_HELP:
                from jobs.experiments.disk_faults import describe
                from jobs.measures.rundir import FaultKind

                _, damages = c.disk_fault(FaultKind(fault), args.broker_id)
                time.sleep(args.seconds)
                c.cluster.detached = True  # outlives this command, as `kray cluster up`'s brokers
                c.cluster.start_broker(args.broker_id)
                done = f"{fault} {args.broker_id}: {describe(damages)}; started again after {args.seconds:g} s"
            case _:  # a link fault
                done = _link_fault(c, args)
    _ray_leave(joined)
    print(done)


def experiment_run(args) -> None:
    from jobs.experiments.experiment import load_experiment
    from jobs.experiments.runner import report, run_experiment

    experiment = load_experiment(args.file)
    run_dir, summary = run_experiment(experiment, args.runs_dir)
    print(report(run_dir))
    if not summary.check.ok:
        sys.exit(1)


def check(args) -> None:
    from jobs.measures.check import main as check_main
    sys.exit(check_main([args.run_dir, "--grace-ms", str(args.grace_ms)]))


def demo(args) -> None:
    from jobs.demo import run
    run(session_timeout_ms=args.session_timeout_ms)


class _Parser(argparse.ArgumentParser):
    """Mistaken options print one line and exit 1, as every other mistake does."""

    def error(self, message: str):
        self.exit(1, f"Error: {self.prog}: {message}\n")


ZOOKEEPER_HELP = "ZooKeeper connect string (default: $KRAY_ZK_CONNECT or `kray zk start`'s)"
NAMESPACE_HELP = "the cluster's Ray namespace (default: the one `kray cluster up` started here, else kray)"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kray", description="Kafka's ZooKeeper-mode controller on Ray")
    p.add_argument("--zookeeper", help=ZOOKEEPER_HELP)
    # the commands that read ZooKeeper take --zookeeper after their name too, as Kafka's tools do
    zkp = argparse.ArgumentParser(add_help=False)
    zkp.add_argument("--zookeeper", default=argparse.SUPPRESS, help=ZOOKEEPER_HELP)
    sub = p.add_subparsers(dest="command", required=True)

    zk = sub.add_parser("zk", help="a local ZooKeeper server").add_subparsers(dest="action", required=True)
    s = zk.add_parser("start")
    s.add_argument("--port", type=int, default=None)
    s.add_argument("--tick-time-ms", type=int, default=500)
    s.set_defaults(func=zk_start)
    zk.add_parser("stop").set_defaults(func=zk_stop)
    zk.add_parser("status", parents=[zkp]).set_defaults(func=zk_status)

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

    s = sub.add_parser("configs", parents=[zkp], help="kafka-configs (topics)")
    s.add_argument("--entity-type", required=True)
    s.add_argument("--entity-name", required=True)
    mode = s.add_mutually_exclusive_group(required=True)
    mode.add_argument("--alter", action="store_true")
    mode.add_argument("--describe", action="store_true")
    s.add_argument("--add-config", metavar="K=V[,K=V...]")
    s.add_argument("--delete-config", metavar="K[,K...]")
    s.set_defaults(func=configs)

    tp = sub.add_parser("topics", help="kafka-topics").add_subparsers(dest="action", required=True)
    s = tp.add_parser("create", parents=[zkp])
    s.add_argument("--topic", required=True)
    s.add_argument("--partitions", type=int, default=1)
    s.add_argument("--replication-factor", type=int, default=1)
    s.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("--if-not-exists", action="store_true", help="nothing to do if the topic exists")
    s.set_defaults(func=topics_create)
    tp.add_parser("list", parents=[zkp]).set_defaults(func=topics_list)
    s = tp.add_parser("describe", parents=[zkp])
    s.add_argument("--topic")
    s.add_argument("--under-replicated-partitions", action="store_true",
                   help="only the partitions with fewer in-sync replicas than replicas")
    s.add_argument("--unavailable-partitions", action="store_true",
                   help="only the partitions whose leader is not available")
    s.add_argument("--under-min-isr-partitions", action="store_true",
                   help="only the partitions with fewer in-sync replicas than min.insync.replicas")
    s.set_defaults(func=topics_describe)
    s = tp.add_parser("delete", parents=[zkp])
    s.add_argument("--topic", required=True)
    s.add_argument("--if-exists", action="store_true", help="nothing to do if the topic does not exist")
    s.set_defaults(func=topics_delete)
    s = tp.add_parser("alter", parents=[zkp])
    s.add_argument("--topic", required=True)
    s.add_argument("--partitions", type=int, required=True)
    s.add_argument("--if-exists", action="store_true", help="nothing to do if the topic does not exist")
    s.set_defaults(func=topics_alter)

    s = sub.add_parser("consumer-groups", parents=[zkp], help="kafka-consumer-groups")
    s.add_argument("--bootstrap-server", help="the brokers to ask (default: those registered in ZooKeeper)")
    mode = s.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="every group")
    mode.add_argument("--describe", action="store_true", help="offsets and lag (or --members, --state)")
    mode.add_argument("--reset-offsets", action="store_true", help="of an inactive group (--dry-run by default)")
    mode.add_argument("--delete", action="store_true", help="empty groups, their offsets too")
    s.add_argument("--group", action="append", default=[])
    s.add_argument("--all-groups", action="store_true")
    view = s.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="(default) each partition's offset, log end and lag")
    view.add_argument("--members", action="store_true")
    view.add_argument("--state", action="store_true")
    s.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]")
    s.add_argument("--all-topics", action="store_true")
    to = s.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument("--shift-by", type=int)
    run = s.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true")
    run.add_argument("--dry-run", action="store_true")
    s.set_defaults(func=consumer_groups)

    s = sub.add_parser("reassign", parents=[zkp], help="kafka-reassign-partitions")
    for action, text in (("generate", "propose an assignment of the topics over the brokers (writes nothing)"),
                         ("execute", "start the reassignment in the file"),
                         ("verify", "how the reassignment in the file is going"),
                         ("cancel", "move the file's partitions that are being reassigned back (KIP-455)"),
                         ("list", "the partitions being reassigned")):
        s.add_argument(f"--{action}", action="store_true", help=text)
    s.add_argument("--reassignment-json-file", help="Kafka's reassignment JSON")
    s.add_argument("--topics-to-move-json-file", help='{"topics":[{"topic":"t"}],"version":1}, for --generate')
    s.add_argument("--broker-list", help='"1,2,3": the brokers --generate assigns over')
    s.add_argument("--namespace", help=NAMESPACE_HELP)
    s.set_defaults(func=reassign)

    s = sub.add_parser("leader-election", parents=[zkp], help="kafka-leader-election")
    s.add_argument("--election-type", required=True, type=str.upper, choices=("PREFERRED", "UNCLEAN"))
    s.add_argument("--topic")
    s.add_argument("--partition", type=int)
    s.add_argument("--all-topic-partitions", action="store_true")
    s.add_argument("--path-to-json-file", help='{"partitions":[{"topic":"t","partition":0}]}')
    s.add_argument("--namespace", help=NAMESPACE_HELP)
    s.set_defaults(func=leader_election)

    br = sub.add_parser("broker", help="brokers").add_subparsers(dest="action", required=True)
    s = br.add_parser("shutdown", help="controlled shutdown")
    s.add_argument("broker_id", type=int)
    s.set_defaults(func=broker_shutdown)

    ct = sub.add_parser("controller", help="the active controller").add_subparsers(dest="action", required=True)
    s = ct.add_parser("status", parents=[zkp])
    s.add_argument("--namespace", help=NAMESPACE_HELP)
    s.set_defaults(func=controller_status)

    ch = sub.add_parser("chaos", help="inject one fault into the running cluster").add_subparsers(
        dest="fault", required=True)
    s = ch.add_parser("kill-broker", help="SIGKILL a broker's actor")
    s.add_argument("broker_id", type=int)
    s.add_argument("--restart", action="store_true", help="let Ray restart it")
    s.set_defaults(func=chaos)
    ch.add_parser("kill-controller", help="SIGKILL the active controller's actor").set_defaults(func=chaos)
    s = ch.add_parser("pause", help="SIGSTOP a broker (or the controller) for a while, then SIGCONT")
    s.add_argument("broker_id", type=int, nargs="?")
    s.add_argument("--controller", action="store_true", help="pause the active controller instead")
    s.add_argument("--seconds", type=float, default=5.0)
    s.set_defaults(func=chaos)
    s = ch.add_parser("expire-session", help="expire a broker's (or the controller's) ZooKeeper session")
    s.add_argument("broker_id", type=int, nargs="?")
    s.add_argument("--controller", action="store_true")
    s.set_defaults(func=chaos)
    s = ch.add_parser("kill-request-sender", help="SIGKILL the RequestSender to a broker")
    s.add_argument("broker_id", type=int)
    s.set_defaults(func=chaos)
    s = ch.add_parser("zk-restart", help="SIGKILL the ZooKeeper server, start it again after --seconds")
    s.add_argument("--seconds", type=float, default=1.0)
    s.set_defaults(func=chaos)
    for name, text in LINK_FAULT_HELP.items():  # on a cluster started with --link-faults
        s = ch.add_parser(name, help=text)
        if name in ("cut-replication", "cut-broker-zookeeper", "isolate-broker", "slow-replication",
                    "cut-controller-broker", "cut-clients", "slow-clients", "drop-broker-zookeeper"):
            s.add_argument("broker_id", type=int)
        s.add_argument("--seconds", type=float, default=0.0, help="heal after this long (0: leave it)")
        if name in ("slow-replication", "slow-clients"):
            s.add_argument("--delay-ms", type=float, default=200.0)
            s.add_argument("--jitter-ms", type=float, default=50.0)
            s.add_argument("--loss", type=float, default=0.0, help="share of chunks lost once (0-1)")
            s.add_argument("--rate", type=float, default=None, help="bytes/s")
        s.set_defaults(func=chaos)
    s = ch.add_parser("flaky-zookeeper", help="stall, then drop, every ZooKeeper link at once or one of them (a "
                      "broker's or the controller's), round after round, for --seconds")
    s.add_argument("--seconds", type=float, default=30.0)
    s.set_defaults(func=chaos)
    ch.add_parser("heal", help="heal every link").set_defaults(func=chaos)
    for name, text in DISK_FAULT_HELP.items():
        s = ch.add_parser(name, help=text)
        s.add_argument("broker_id", type=int)
        s.add_argument("--seconds", type=float, default=3.0, help="how long it stays down")
        s.set_defaults(func=chaos)

    ex = sub.add_parser("experiment", help="chaos experiments").add_subparsers(dest="action", required=True)
    s = ex.add_parser("run", help="run an experiment file (YAML)")
    s.add_argument("file")
    s.add_argument("--runs-dir", default="runs")
    s.set_defaults(func=experiment_run)

    s = sub.add_parser("check", help="check a run directory's invariants")
    s.add_argument("run_dir")
    s.add_argument("--grace-ms", type=float, default=5000)
    s.set_defaults(func=check)

    sub.add_parser("sweep", help="a grid of experiments, then the Spark analysis (kray sweep -h)")
    sub.add_parser("analyse", help="the Spark analysis of run directories (kray analyse -h)")

    s = sub.add_parser("demo", help="a quick look: election, a topic, a controller failover")
    s.add_argument("--session-timeout-ms", type=int, default=6000)
    s.set_defaults(func=demo)
    return p


PASSED_ON = {"sweep": "jobs.sweep", "analyse": "jobs.analysis"}  # commands with parsers of their own


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in PASSED_ON:  # every option theirs, in any order
        return import_module(PASSED_ON[argv[0]]).main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "fault", None) in ("pause", "expire-session") and (args.broker_id is None) != args.controller:
            raise KrayError("name a broker id, or --controller (not both)")
        args.func(args)
    except KrayError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
