"""Kafka's partition and replica state machines: the states and their valid previous states.

Each transition is checked against VALID_PREVIOUS before anything acts on it;
invalid ones are reported to the state-change log and skipped
(PartitionStateMachine.scala, ReplicaStateMachine.scala).
"""
from __future__ import annotations

from enum import Enum


class PartitionStateName(Enum):
    __hash__ = object.__hash__  # members are singletons; Enum's own hash runs Python code per lookup

    NonExistentPartition = 3
    NewPartition = 0
    OnlinePartition = 1
    OfflinePartition = 2


class ReplicaStateName(Enum):
    __hash__ = object.__hash__

    NewReplica = 1
    OnlineReplica = 2
    OfflineReplica = 3
    ReplicaDeletionStarted = 4
    ReplicaDeletionSuccessful = 5
    ReplicaDeletionIneligible = 6
    NonExistentReplica = 7


P = PartitionStateName
R = ReplicaStateName

PARTITION_VALID_PREVIOUS: dict[PartitionStateName, frozenset[PartitionStateName]] = {
    P.NewPartition: frozenset({P.NonExistentPartition}),
    P.OnlinePartition: frozenset({P.NewPartition, P.OnlinePartition, P.OfflinePartition}),
    P.OfflinePartition: frozenset({P.NewPartition, P.OnlinePartition, P.OfflinePartition}),
    P.NonExistentPartition: frozenset({P.OfflinePartition}),
}

REPLICA_VALID_PREVIOUS: dict[ReplicaStateName, frozenset[ReplicaStateName]] = {
    R.NewReplica: frozenset({R.NonExistentReplica}),
    R.OnlineReplica: frozenset({R.NewReplica, R.OnlineReplica, R.OfflineReplica, R.ReplicaDeletionIneligible}),
    R.OfflineReplica: frozenset({R.NewReplica, R.OnlineReplica, R.OfflineReplica, R.ReplicaDeletionIneligible}),
    R.ReplicaDeletionStarted: frozenset({R.OfflineReplica}),
    R.ReplicaDeletionSuccessful: frozenset({R.ReplicaDeletionStarted}),
    R.ReplicaDeletionIneligible: frozenset({R.OfflineReplica, R.ReplicaDeletionStarted}),
    R.NonExistentReplica: frozenset({R.ReplicaDeletionSuccessful}),
}


def is_valid_partition_transition(current: PartitionStateName, target: PartitionStateName) -> bool:
    return current in PARTITION_VALID_PREVIOUS[target]


def is_valid_replica_transition(current: ReplicaStateName, target: ReplicaStateName) -> bool:
    return current in REPLICA_VALID_PREVIOUS[target]
