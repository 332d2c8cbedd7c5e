"""Partition leader election as pure functions of (assignment, isr, live replicas).

Kafka's PartitionLeaderElectionAlgorithms: the leader is the first replica of
the assignment (AR order, so the preferred replica wins when it can) that
satisfies the strategy's condition, or None when no replica can lead.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence


def offline_partition_leader_election(assignment: Sequence[int], isr: Collection[int],
                                      live_replicas: Collection[int],
                                      unclean_leader_election_enabled: bool) -> int | None:
    """First live ISR member in AR order; with unclean election, else the first live replica."""
    leader = next((r for r in assignment if r in live_replicas and r in isr), None)
    if leader is None and unclean_leader_election_enabled:
        leader = next((r for r in assignment if r in live_replicas), None)
    return leader


def isr_after_election(leader: int, isr: Sequence[int], live_replicas: Collection[int]) -> tuple[int, ...]:
    """The live ISR members; only the leader itself when it came from outside the ISR (unclean)."""
    if leader in isr:
        return tuple(r for r in isr if r in live_replicas)
    return (leader,)


def initial_leader_and_isr(assignment: Sequence[int], live_replicas: Collection[int]) -> tuple[int, tuple[int, ...]] | None:
    """A new partition: every live replica is in sync (no data yet); the first one leads."""
    live = tuple(r for r in assignment if r in live_replicas)
    return (live[0], live) if live else None
