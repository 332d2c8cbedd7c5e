"""Partition leader election as pure functions of (assignment, isr, live replicas).

Kafka's PartitionLeaderElectionAlgorithms: the leader is the first replica of
the assignment (AR order, so the preferred replica wins when it can) that
satisfies the strategy's condition, or None when no replica can lead. The ISR
that goes with each result is computed by the `isr_after_*` functions.
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


def reassign_partition_leader_election(reassignment: Sequence[int], isr: Collection[int],
                                       live_replicas: Collection[int]) -> int | None:
    """First replica of the reassignment target that is live and in the ISR."""
    return next((r for r in reassignment if r in live_replicas and r in isr), None)


def preferred_replica_partition_leader_election(assignment: Sequence[int], isr: Collection[int],
                                                live_replicas: Collection[int]) -> int | None:
    """The preferred (first) replica, only if it is live and in the ISR."""
    if assignment and assignment[0] in live_replicas and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_partition_leader_election(assignment: Sequence[int], isr: Collection[int],
                                                  live_replicas: Collection[int],
                                                  shutting_down_brokers: Collection[int]) -> int | None:
    """First live ISR member that is not shutting down."""
    return next((r for r in assignment
                 if r in live_replicas and r in isr and r not in shutting_down_brokers), None)


def isr_after_election(leader: int, isr: Sequence[int], live_replicas: Collection[int]) -> tuple[int, ...]:
    """After an offline election: the live ISR members; only the leader when it came from outside (unclean)."""
    if leader in isr:
        return tuple(r for r in isr if r in live_replicas)
    return (leader,)


def isr_after_controlled_shutdown(isr: Sequence[int], shutting_down_brokers: Collection[int]) -> tuple[int, ...]:
    return tuple(r for r in isr if r not in shutting_down_brokers)


def isr_after_replica_removed(isr: Sequence[int], replica: int) -> tuple[int, ...]:
    """A replica going offline leaves the ISR, except the last member, which is kept so that a
    clean election later knows who was last in sync."""
    return tuple(isr) if len(isr) == 1 else tuple(r for r in isr if r != replica)


def initial_leader_and_isr(assignment: Sequence[int], live_replicas: Collection[int]) -> tuple[int, tuple[int, ...]] | None:
    """A new partition: every live replica is in sync (no data yet); the first one leads."""
    live = tuple(r for r in assignment if r in live_replicas)
    return (live[0], live) if live else None
