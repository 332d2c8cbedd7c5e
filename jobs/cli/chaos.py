"""`kray chaos`: one fault injected into the cluster `kray cluster up` started, by hand, with the same
faults an experiment schedules (jobs/experiments/chaos.py): processes killed or paused, ZooKeeper
sessions expired or the server restarted, links cut or slowed (on a cluster with --link-faults), logs
damaged on disk.
"""
from __future__ import annotations

import argparse
import os
import signal
import time

from coordination.errors import KrayError
from jobs.cli.common import ray_connect, ray_leave, started_cluster
from jobs.cli.zk import zk_start
from jobs.hosts.layout import POWER_LOSS_LOGS
from jobs.experiments import local

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


HOST_FAULT_HELP = {
    "host-power-loss": "a broker's host loses power (every process at once, its link down), back after --seconds "
                       "with its broker",
    "isolate-host": "cut a broker's host off from every other host (iptables, both ways)",
    "isolate-host-one-way": "cut the connections other hosts open to a broker's host; its own work",
    "cut-hosts": "cut a broker's host and another's (--peer, default the controller's) from each other",
    "partition-hosts-halves": "the brokers' hosts in two halves",
    "partition-hosts-bridge": "two halves of the brokers' hosts, and one between them that reaches both",
    "partition-hosts-majorities-ring": "each broker's host sees a majority of them, no two the same one",
}


def _host_fault(c, args) -> str:
    """A host fault (a cluster across `kray hosts`): held for --seconds, then healed (or, for a power loss,
    the host and its broker back); a partition without --seconds is left until `kray chaos heal-hosts`."""
    from jobs.measures.rundir import FaultKind

    kind = FaultKind(args.fault)
    if kind is FaultKind.HOST_POWER_LOSS:
        _, host, log_dirs = c.host_power_loss(args.broker_id)
        try:
            time.sleep(args.seconds)
        finally:  # Ctrl-C too: the host comes back with its broker
            back = c.host_return(args.broker_id, host, log_dirs, args.logs)
            c.cluster.detached = True  # outlives this command, as `kray cluster up`'s brokers
            c.cluster.start_broker(args.broker_id)
        return f"host-power-loss {args.broker_id}: host {host} down for {args.seconds:g} s; {back}; broker started"
    peer = getattr(args, "peer", None)
    if kind is FaultKind.CUT_HOSTS and peer is None:
        peer = c.controller_id()
        if peer == args.broker_id:
            raise KrayError(f"broker {args.broker_id} is the controller's: name another with --peer")
    _, what = c.host_partition(kind, getattr(args, "broker_id", None), peer)
    if not args.seconds:
        return f"{what}; `kray chaos heal-hosts` heals it"
    try:
        time.sleep(args.seconds)
    finally:  # Ctrl-C too
        c.heal_hosts()
    return f"{what}; healed after {args.seconds:g} s"


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

    if args.fault in ("pause", "expire-session") and (args.broker_id is None) != args.controller:
        raise KrayError("name a broker id, or --controller (not both)")
    config = started_cluster()
    if args.fault == "zk-restart":  # the server `kray zk start` started: SIGKILL, then start it on its data
        zk_state = local.read_state("zk")
        if not zk_state:
            raise KrayError("zk-restart needs the ZooKeeper server `kray zk start` started")
        os.kill(zk_state["pid"], signal.SIGKILL)
        time.sleep(args.seconds)
        zk_start(argparse.Namespace(tick_time_ms=zk_state.get("tick_time_ms", 500), port=zk_state["port"]))
        print(f"Restarted ZooKeeper after {args.seconds:g} s down")
        return
    joined = ray_connect()
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
            case "heal-hosts":
                c.heal_hosts()
                done = "Healed every host's partitions"
            case fault if fault in HOST_FAULT_HELP:
                done = _host_fault(c, args)
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
    ray_leave(joined)
    print(done)


def add_parsers(sub, zkp) -> None:
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
    for name, text in HOST_FAULT_HELP.items():  # on a cluster across `kray hosts`
        s = ch.add_parser(name, help=text)
        if not name.startswith("partition-"):
            s.add_argument("broker_id", type=int, help="the broker whose host it strikes")
        if name == "cut-hosts":
            s.add_argument("--peer", type=int, help="the broker whose host it is cut from (default: the controller's)")
        if name == "host-power-loss":
            s.add_argument("--seconds", type=float, default=5.0, help="how long the host stays down")
            s.add_argument("--logs", choices=POWER_LOSS_LOGS, default="unflushed",
                           help="its broker's logs at its return (unflushed: cut back to their recovery points)")
        else:
            s.add_argument("--seconds", type=float, default=0.0, help="heal after this long (0: leave it)")
        s.set_defaults(func=chaos)
    ch.add_parser("heal-hosts", help="heal every partition between hosts").set_defaults(func=chaos)
    for name, text in DISK_FAULT_HELP.items():
        s = ch.add_parser(name, help=text)
        s.add_argument("broker_id", type=int)
        s.add_argument("--seconds", type=float, default=3.0, help="how long it stays down")
        s.set_defaults(func=chaos)
