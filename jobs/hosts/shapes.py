"""Network partitions between hosts, made by the kernel (pure): which hosts each host drops packets
from (Jepsen's "grudge"), and the iptables ruleset that does it in the host's network namespace.

Every rule sits in the receiving host's INPUT chain and names a peer host's address, so:
- a cut is silence, as on a real network: packets are dropped, never refused, and TCP retransmits
  until the cut heals or its connections time out;
- the root namespace (the bridge's address: `kray` run here, the hosts' control agent) is never cut;
- healing a host is restoring a ruleset without drops (the host's namespace holds no rules of anyone else);
- every ruleset, a healed one too, keeps a rule that uses conntrack, set as the host is made, so that the
  kernel tracks each connection from its first packet: conntrack enabled by a one-way cut itself would
  take the first packet it saw of a connection already open for the opener's, and let that connection
  through whichever end opened it (seen here: a broker's heartbeats made the cut host the "opener").

| shape           | what is cut                                                                      |
|-----------------|----------------------------------------------------------------------------------|
| isolate H       | H from every other host, both ways                                               |
| isolate-one-way H | the connections the other hosts open to H (their packets on them dropped at H:  |
|                 | iptables' conntrack --ctdir ORIGINAL), established ones included; H's own      |
|                 | connections to them work                                                         |
| cut A B         | A and B from each other, both ways                                               |
| halves          | the hosts in two halves, the smaller first (Jepsen's bisect, as the links split) |
| bridge          | two halves, and the first host of the second in both (it reaches every host)    |
| majorities-ring | the hosts in a ring, each reaching those within a majority's reach of it: every  |
|                 | host sees a majority, no two the same one (Jepsen's majorities-ring, made       |
|                 | symmetric: needs 4 hosts or more)                                                |
"""
from __future__ import annotations

from enum import Enum

from actors.links.shapes import bisect

Grudge = dict[str, frozenset[str]]  # host -> the hosts whose packets it drops


class HostShape(str, Enum):
    ISOLATE = "isolate"
    ISOLATE_ONE_WAY = "isolate-one-way"
    CUT = "cut"
    HALVES = "halves"
    BRIDGE = "bridge"
    MAJORITIES_RING = "majorities-ring"


TRACK_EVERY_CONNECTION = "-A INPUT -m conntrack --ctstate UNTRACKED -j ACCEPT"  # matches nothing; keeps conntrack on
TARGETED = {HostShape.ISOLATE: 1, HostShape.ISOLATE_ONE_WAY: 1, HostShape.CUT: 2}  # how many hosts each names


def _complete(*components: list[str]) -> Grudge:
    """Each host drops every host of the other components."""
    return {h: frozenset(o for other in components if other is not mine for o in other)
            for mine in components for h in mine}


def grudge(shape: HostShape, hosts: list[str], named: list[str] = ()) -> Grudge:
    """Who drops whom for `shape` among `hosts` (in their order: halves and rings follow it); `named`:
    the hosts the targeted shapes take (TARGETED). ValueError for a shape that cannot be made."""
    named = list(named)
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"{shape.value}: a host named twice among {', '.join(hosts)}")
    if len(named) != TARGETED.get(shape, 0) or not set(named) <= set(hosts) or len(set(named)) != len(named):
        need = TARGETED.get(shape, 0)
        raise ValueError(f"{shape.value} takes {need or 'no'} host{'s' if need != 1 else ''} of {', '.join(hosts)}"
                         + (f", not {', '.join(named) or 'none'}" if need or named else ""))
    if shape in (HostShape.ISOLATE, HostShape.ISOLATE_ONE_WAY):
        others = [h for h in hosts if h != named[0]]
        if not others:
            raise ValueError(f"{shape.value} needs another host to cut {named[0]} from")
        if shape is HostShape.ISOLATE_ONE_WAY:
            return {named[0]: frozenset(others)}
        return _complete([named[0]], others)
    if shape is HostShape.CUT:
        return _complete([named[0]], [named[1]])
    if shape is HostShape.HALVES:
        if len(hosts) < 2:
            raise ValueError("halves needs 2 hosts or more")
        return _complete(*bisect(hosts))
    if shape is HostShape.BRIDGE:
        if len(hosts) < 3:
            raise ValueError("bridge needs 3 hosts or more")
        first, second = bisect(hosts)
        return _complete(first, second[1:])  # second[0], the bridge, drops nothing and nobody drops it
    n = len(hosts)
    if n < 4:
        raise ValueError("majorities-ring needs 4 hosts or more (with 3, every majority is everyone's but one)")
    reach = (n // 2 + 1) // 2  # each side of a host: with itself, a majority (n // 2 + 1) or one more
    return {h: frozenset(hosts[j] for j in range(n) if min((i - j) % n, (j - i) % n) > reach)
            for i, h in enumerate(hosts)}


def ruleset(drops: frozenset[str], addresses: dict[str, str], one_way: bool = False) -> str:
    """The iptables-restore input for a host that drops packets from `drops` (host -> address in
    `addresses`); `one_way`: only on the connections those hosts opened. Empty `drops`: healed (and
    what a host is made with)."""
    match = ["-m", "conntrack", "--ctdir", "ORIGINAL"] if one_way else []
    rules = [" ".join(["-A", "INPUT", "-s", addresses[h], *match, "-j", "DROP"]) for h in sorted(drops)]
    return "\n".join(["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]", *rules,
                      TRACK_EVERY_CONNECTION, "COMMIT", ""])


def describe(shape: HostShape, drops: Grudge) -> str:
    """A shape as a log line gives it: which hosts drop whose packets."""
    cut = [f"{h} drops {', '.join(sorted(d))}" for h, d in sorted(drops.items()) if d]
    return f"{shape.value}: " + ("; ".join(cut) if cut else "nothing cut")
