"""Jepsen's network faults as link settings (pure): which process's link to what gets which fault.

A process is a broker, a controller candidate or a broker's RequestSender (all named by broker id,
the candidate living beside its broker as Kafka's controller lives in the broker's JVM). Broker
links are set on both ends, so that fetches stall whichever of the two brokers is the follower; the
controller's link to broker N is set in N's RequestSender, named after the broker the controller
runs on (`broker-C`), so that cutting brokers apart also cuts a controller among them off from the
others; ZooKeeper links are the process's session. Healing a shape is the same settings with HEALTHY.

| shape             | what is cut (both directions unless said)                                      |
|-------------------|---------------------------------------------------------------------------------|
| cut-replication N | N from every other broker; ZooKeeper kept (a leader cut off from its followers) |
| cut-zookeeper N   | broker N's session only (the controller's: its candidate's)                     |
| isolate-broker N  | N from every other broker and from ZooKeeper, its candidate too                 |
| split-brokers     | the lower half of the broker ids from the upper half; ZooKeeper kept by all     |
| bridge-brokers    | two halves, and one broker in the middle that reaches both                      |
| slow-replication N| N's links to every other broker slowed by the given fault (not cut)             |
| cut-controller-broker N | the controller's requests to N and their answers; all else kept           |
| cut-clients N     | every client's connections to N's listener; replication and ZooKeeper kept      |
| slow-clients N    | the clients' connections to N slowed by the given fault (not cut)               |
| drop-zookeeper N  | broker N's session connection (the controller's: its candidate's) closed, new   |
|                   | ones refused; the session lives if healed well within its timeout               |
"""
from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from actors.links.faults import CLIENTS_LINK, HEALTHY, ZOOKEEPER_LINK, LinkFault, broker_link


class Role(str, Enum):
    BROKER = "broker"
    CANDIDATE = "candidate"
    SENDER = "request-sender"  # broker N's RequestSender: its link `broker-C` is the controller's on C


class LinkSetting(NamedTuple):
    role: Role
    broker_id: int  # the broker, or the broker whose candidate it is
    link: str
    fault: LinkFault


class Shape(str, Enum):
    CUT_REPLICATION = "cut-replication"
    CUT_ZOOKEEPER = "cut-zookeeper"
    ISOLATE_BROKER = "isolate-broker"
    SPLIT_BROKERS = "split-brokers"
    BRIDGE_BROKERS = "bridge-brokers"
    SLOW_REPLICATION = "slow-replication"
    CUT_CONTROLLER_BROKER = "cut-controller-broker"
    CUT_CLIENTS = "cut-clients"
    SLOW_CLIENTS = "slow-clients"
    DROP_ZOOKEEPER = "drop-zookeeper"


TARGETED = {Shape.CUT_REPLICATION, Shape.CUT_ZOOKEEPER, Shape.ISOLATE_BROKER, Shape.SLOW_REPLICATION,
            Shape.CUT_CONTROLLER_BROKER, Shape.CUT_CLIENTS, Shape.SLOW_CLIENTS, Shape.DROP_ZOOKEEPER}
SLOW = {Shape.SLOW_REPLICATION, Shape.SLOW_CLIENTS}  # the shapes that take a fault that slows the link
CUT = LinkFault(cut=True)
DROP = LinkFault(drop=True)


def bisect(items: list) -> tuple[list, list]:
    """Jepsen's halves: the smaller first (the second's first is a bridge's middle). The links' and the
    hosts' (jobs/hosts/shapes.py) partitions split alike."""
    half = len(items) // 2
    return items[:half], items[half:]


def _between(side_a: list[int], side_b: list[int], fault: LinkFault) -> list[LinkSetting]:
    """Every broker of one side's link to every broker of the other, on both ends, and the link of a
    controller on either side to the brokers of the other."""
    pairs = [(a, b) for a in side_a for b in side_b] + [(b, a) for a in side_a for b in side_b]
    return [LinkSetting(Role.BROKER, a, broker_link(b), fault) for a, b in pairs] + \
           [LinkSetting(Role.SENDER, b, broker_link(a), fault) for a, b in pairs]


def plan(shape: Shape, brokers: list[int], target: int | None = None, candidate: bool = False,
         slow: LinkFault | None = None, controller: int | None = None) -> list[LinkSetting]:
    """The settings that make `shape` among `brokers` (`target` for the shapes that take one;
    `candidate`: cut-zookeeper of N's controller candidate rather than the broker; `slow`: the fault
    of slow-replication and slow-clients; `controller`: the broker the active controller runs on, for
    cut-controller-broker). ValueError for a shape that cannot be made."""
    brokers = sorted(set(brokers))
    if shape in TARGETED and target not in brokers:
        raise ValueError(f"{shape.value} needs one of the brokers {brokers} as its target, not {target}")
    others = [b for b in brokers if b != target]
    if shape is Shape.CUT_REPLICATION:
        return _between([target], others, CUT)
    if shape in SLOW and (slow is None or slow.cut or slow.healthy):
        raise ValueError(f"{shape.value} needs a fault that slows the link (delay, jitter, loss or rate)")
    if shape in (Shape.CUT_CLIENTS, Shape.SLOW_CLIENTS):
        return [LinkSetting(Role.BROKER, target, CLIENTS_LINK, CUT if shape is Shape.CUT_CLIENTS else slow)]
    if shape in (Shape.CUT_ZOOKEEPER, Shape.DROP_ZOOKEEPER):
        return [LinkSetting(Role.CANDIDATE if candidate else Role.BROKER, target, ZOOKEEPER_LINK,
                            CUT if shape is Shape.CUT_ZOOKEEPER else DROP)]
    if shape is Shape.ISOLATE_BROKER:
        return _between([target], others, CUT) + [LinkSetting(Role.BROKER, target, ZOOKEEPER_LINK, CUT),
                                                  LinkSetting(Role.CANDIDATE, target, ZOOKEEPER_LINK, CUT)]
    if shape is Shape.CUT_CONTROLLER_BROKER:
        if controller not in others:
            raise ValueError(f"cut-controller-broker needs a controller on another broker than {target}, "
                             f"not {controller}")
        return [LinkSetting(Role.SENDER, target, broker_link(controller), CUT)]
    if shape is Shape.SLOW_REPLICATION:
        return _between([target], others, slow)
    if shape is Shape.SPLIT_BROKERS:
        if len(brokers) < 2:
            raise ValueError("split-brokers needs at least 2 brokers")
        return _between(*bisect(brokers), CUT)
    if len(brokers) < 3:
        raise ValueError("bridge-brokers needs at least 3 brokers")
    first, second = bisect(brokers)
    return _between(first, second[1:], CUT)  # second[0], the middle, bridges the halves


def every_link(brokers: list[int]) -> list[LinkSetting]:
    """Every link of every process among `brokers`, healthy (`kray chaos heal`)."""
    return [LinkSetting(role, b, ZOOKEEPER_LINK, HEALTHY) for b in brokers for role in (Role.BROKER, Role.CANDIDATE)] + \
        [LinkSetting(Role.BROKER, b, CLIENTS_LINK, HEALTHY) for b in brokers] + \
        [LinkSetting(role, a, broker_link(b), HEALTHY) for a in brokers for b in brokers if a != b
         for role in (Role.BROKER, Role.SENDER)]


def healed(settings: list[LinkSetting]) -> list[LinkSetting]:
    """The settings that undo `settings`."""
    return [s._replace(fault=HEALTHY) for s in settings]
