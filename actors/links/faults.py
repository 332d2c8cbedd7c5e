"""Link faults, as Jepsen and netem shape them, for one direction of a TCP link: cut, delay (fixed and
jittered), loss and a throttle. Pure: when each chunk of a byte stream reaches the other end.

TCP keeps a stream in order and whole, so a fault on a link shows only in *when* bytes arrive:
- cut: nothing passes (iptables DROP); what was sent meanwhile arrives the moment the link heals
  (`proxy.py` holds it), sooner than real TCP delivers it: its retransmissions back off exponentially
  through a silent cut, so the first byte after an 8 s cut arrives about 5.5 s after the heal
  (measured between hosts of this machine, BENCHMARKS.md, "Faults the kernel makes, against their
  twins");
- delay and jitter: each chunk arrives `delay_ms` +/- `jitter_ms` after it was sent, never before
  the chunk sent ahead of it;
- loss: a lost segment is sent again after the retransmission timeout (Linux's minimum, 200 ms),
  and everything behind it waits (head-of-line blocking);
- throttle: at most `rate_bytes_per_s`, the chunks queued behind one another;
- drop: the link closes the connections it carries and refuses new ones until healed (a server that
  resets connections, or a client that gives up on a silent one: kazoo drops its connection when a
  heartbeat goes unanswered for a third of the session timeout, and reconnects to the same session).
"""
from __future__ import annotations

import random
import re
from enum import Enum
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from coordination.errors import KrayError

ZOOKEEPER_LINK = "zookeeper"  # a process's ZooKeeper session (to every server of the ensemble)
CLIENTS_LINK = "clients"  # a broker's clients' connections to its PLAINTEXT listener (forward: to the broker)
LINK_NAME = re.compile(r"zookeeper|clients|broker-\d+")
Links = TypeVar("Links")
RETRANSMIT_S = 0.2  # Linux's TCP_RTO_MIN
MAX_RETRANSMITS = 6  # a segment lost this many times in a row is sent once more and arrives


class LinkFault(BaseModel):
    """What one direction of a link does to the bytes on it; the default passes them untouched."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cut: bool = Field(False, description="nothing passes until healed")
    delay_ms: float = Field(0.0, ge=0, description="added to every chunk")
    jitter_ms: float = Field(0.0, ge=0, description="the delay varies uniformly by up to this much either way")
    loss: float = Field(0.0, ge=0, le=1, description="share of chunks lost once (each loss costs a retransmission)")
    rate_bytes_per_s: float | None = Field(None, gt=0, description="throttle; None: no limit")
    drop: bool = Field(False, description="connections closed, new ones refused, until healed")

    @property
    def healthy(self) -> bool:
        return self == HEALTHY


HEALTHY = LinkFault()


class Direction(str, Enum):
    """A link from A to B (A connected to B): `forward` carries A's bytes to B, `backward` B's to A."""

    FORWARD = "forward"
    BACKWARD = "backward"


def broker_link(broker_id: int) -> str:
    """The name of a process's link to broker N's listener."""
    return f"broker-{broker_id}"


class Shaper:
    """One direction of one connection: the arrival time of each chunk, given in the order sent."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()
        self._free_at = 0.0  # the throttle has sent everything before this
        self._last = 0.0  # the previous chunk's arrival: none arrives before it

    def deliver_at(self, sent_at: float, nbytes: int, fault: LinkFault) -> float:
        """When a chunk of `nbytes` sent at `sent_at` (seconds, any clock) arrives; `fault` must not
        be a cut (the caller holds chunks while the link is cut, and sends them when it heals)."""
        start, done = sent_at, sent_at
        if fault.rate_bytes_per_s is not None:
            start = max(sent_at, self._free_at)
            done = start + nbytes / fault.rate_bytes_per_s
            self._free_at = done
        latency = fault.delay_ms / 1000
        if fault.jitter_ms:
            latency = max(0.0, latency + self.rng.uniform(-fault.jitter_ms, fault.jitter_ms) / 1000)
        losses = 0
        while losses < MAX_RETRANSMITS and fault.loss and self.rng.random() < fault.loss:
            losses += 1
        at = max(done + latency + losses * RETRANSMIT_S, self._last)
        self._last = at
        return at


class FaultTable:
    """A process's faults by link name and direction, set before or after the link is first used; a
    link never faulted is healthy."""

    def __init__(self) -> None:
        self._faults: dict[str, dict[Direction, LinkFault]] = {}

    def set(self, name: str, direction: Direction, fault: LinkFault) -> None:
        if not LINK_NAME.fullmatch(name):
            raise KrayError(f"no link {name!r}: a process's links are 'zookeeper', 'clients' (a broker's) "
                            "and 'broker-N'")
        self._faults.setdefault(name, {})[direction] = fault

    def get(self, name: str, direction: Direction) -> LinkFault:
        return self._faults.get(name, {}).get(direction, HEALTHY)

    def of(self, name: str) -> dict[Direction, LinkFault]:
        return dict(self._faults.get(name, {}))

    def report(self, opened=()) -> dict[str, dict[str, LinkFault]]:
        """Each link faulted or in `opened`: each direction's fault (an actor's `set_link_fault` answer)."""
        return {name: {d.value: self.get(name, d) for d in Direction} for name in sorted(set(opened) | set(self._faults))}


def describe(fault: LinkFault) -> str:
    """A fault as the links' log lines give it."""
    if fault.healthy:
        return "healed"
    return ", ".join(f"{k}={v}" for k, v in fault.model_dump(exclude_defaults=True).items())


def faultable(links: Links | None) -> Links:
    """The links (a LinkTable, a RequestSender's CallLinks) of a process whose links may be off: an
    actor's `set_link_fault` on a cluster started without them is refused."""
    if links is None:
        raise KrayError("this cluster's links cannot be faulted: start it with link_faults_enable")
    return links
