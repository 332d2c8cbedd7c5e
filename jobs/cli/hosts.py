"""`kray hosts`: hosts of their own on this machine (network, PID and mount namespaces on a bridge,
sshd in each), brought up, listed, entered and brought down. Needs root; kray runs on loopback
without them.
"""
from __future__ import annotations

import subprocess
import sys

import pydantic

from coordination.errors import KrayError
from jobs.experiments import local
from jobs.hosts.layout import HostsLayout
from jobs.hosts.netns import Hosts, preflight


def _table(hosts: Hosts) -> str:
    rows = [("HOST", "NAME", "ADDRESS", "PID 1")] + [
        (h.short, h.name, h.address, str(hosts.init_pids.get(h.name, "-"))) for h in hosts.layout.hosts]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def hosts_up(args) -> None:
    started = Hosts.started()
    if started and started.layout.count > args.count:
        raise KrayError(f"{started.layout.count} hosts are up: `kray hosts down` first to have {args.count}")
    try:
        layout = HostsLayout(count=args.count, subnet=args.subnet, prefix=args.prefix,
                             directory=local.kray_home() / "hosts")
    except pydantic.ValidationError as e:
        raise KrayError("kray hosts up: " + "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}"
                                                        for x in e.errors())) from None
    if started and started.layout.model_copy(update={"count": args.count}) != layout:
        raise KrayError(f"hosts {started.layout.prefix}-h* are up on {started.layout.subnet}: `kray hosts down` first")
    hosts = Hosts(layout, started.init_pids, started.cluster, started.control_pid).up() if started else \
        Hosts(layout).up()
    print(_table(hosts))
    print(f"Reach one with: ssh -i {layout.client_key} root@{layout.hosts[0].address}  (or kray hosts exec h1 -- CMD)")
    if args.cluster:
        from jobs.hosts.cluster import start_cluster

        cluster = start_cluster(hosts)
        print(f"ZooKeeper: {cluster['zk_connect']}")
        print(f"Ray: {cluster['ray_address']} (the head on h1, a worker on each other host)")
        print(f"Brokers, one per host: kray hosts exec h1 -- kray --zookeeper {cluster['zk_connect']} cluster up")


def hosts_down(args) -> None:
    started = Hosts.started()
    if not started:
        print("No hosts are up (kray hosts up)")
        return
    preflight()
    removed = started.down()
    print(f"Hosts down: removed {', '.join(removed)}")


def hosts_list(args) -> None:
    started = Hosts.started()
    print(_table(started) if started else "No hosts are up (kray hosts up)")


def hosts_exec(args) -> None:
    started = Hosts.started()
    if not started:
        raise KrayError("no hosts are up (kray hosts up)")
    if not args.argv:
        raise KrayError("kray hosts exec: a command to run is needed (kray hosts exec h1 -- CMD)")
    done = started.run(started.host(args.host), args.argv, stdin=subprocess.DEVNULL)
    sys.exit(done.returncode)


def _control():
    from jobs.hosts.control import HostsControl

    control = HostsControl.find()
    if control is None:
        raise KrayError("no hosts are up here (kray hosts up, as root), and this is no host of them")
    return control


def hosts_power(args) -> None:
    control = _control()
    if args.action == "power-off":
        control.power_off(args.host)
        print(f"{args.host} powered off (every process killed, its link down)")
    else:
        print(control.power_on(args.host))


def hosts_partition(args) -> None:
    from jobs.hosts.shapes import HostShape

    _, what = _control().partition(HostShape(args.shape), args.hosts, args.among.split(",") if args.among else [])
    print(f"Partitioned: {what}; `kray hosts heal` heals it")


def hosts_heal(args) -> None:
    _control().heal()
    print("Healed: every host's rules removed")


def add_parsers(sub, zkp) -> None:
    h = sub.add_parser("hosts", help="hosts of their own on this machine (root)").add_subparsers(
        dest="action", required=True)
    s = h.add_parser("up", help="N hosts on a bridge, each with its own address and sshd")
    s.add_argument("count", type=int)
    s.add_argument("--subnet", default="10.77.0.0/24", help="their /24 (default 10.77.0.0/24)")
    s.add_argument("--prefix", default="kray", help="their names' (default kray: kray-h1.. on bridge kraybr0)")
    s.add_argument("--cluster", action="store_true",
                   help="and across them: a Ray cluster (head on h1) and a ZooKeeper ensemble on h1-h3")
    s.set_defaults(func=hosts_up)
    h.add_parser("down", help="every host powered off and removed, with the bridge").set_defaults(func=hosts_down)
    h.add_parser("list", help="the hosts that are up").set_defaults(func=hosts_list)
    s = h.add_parser("exec", help="a command inside a host (all of its namespaces)")
    s.add_argument("host", help="h1, kray-h1 or its address")
    s.add_argument("argv", nargs="*", metavar="-- CMD")
    s.set_defaults(func=hosts_exec)
    from jobs.hosts.shapes import HostShape

    for name, text in (("power-off", "every process of a host killed at once, its link down"),
                       ("power-on", "a powered-off host started again, with its share of a --cluster")):
        s = h.add_parser(name, help=text)
        s.add_argument("host", help="h1, kray-h1 or its address")
        s.set_defaults(func=hosts_power)
    s = h.add_parser("partition", help="cut hosts apart with iptables (a new partition replaces the last)")
    s.add_argument("shape", choices=[shape.value for shape in HostShape])
    s.add_argument("hosts", nargs="*", help="isolate, isolate-one-way: one host; cut: two")
    s.add_argument("--among", help="the hosts halves, bridge and majorities-ring span, in order (h2,h3,..; "
                                   "default: every host)")
    s.set_defaults(func=hosts_partition)
    h.add_parser("heal", help="every partition between hosts healed").set_defaults(func=hosts_heal)
