"""coordination.admin.assign_replicas_to_brokers against Kafka's rack-unaware AdminUtils algorithm."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from coordination.admin import assign_replicas_to_brokers
from coordination.errors import (
    Errors,
    InvalidPartitionsException,
    InvalidReplicationFactorException,
)


# -- Kafka's AdminZkClientTest.testReplicaAssignment ---------------------------------------------

KAFKA_EXPECTED = {
    0: [0, 1, 2],
    1: [1, 2, 3],
    2: [2, 3, 4],
    3: [3, 4, 0],
    4: [4, 0, 1],
    5: [0, 2, 3],
    6: [1, 3, 4],
    7: [2, 4, 0],
    8: [3, 0, 1],
    9: [4, 1, 2],
}


def test_kafka_replica_assignment_table():
    assert assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 3, fixed_start_index=0) == KAFKA_EXPECTED


def test_kafka_table_is_deterministic_and_ignores_rng_when_start_index_fixed():
    a = assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 3, 0, rng=random.Random(1))
    b = assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 3, 0, rng=random.Random(999))
    assert a == b == KAFKA_EXPECTED


def test_partition_keys_are_ints_in_order():
    result = assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 3, fixed_start_index=0)
    assert list(result) == list(range(10))
    assert all(isinstance(p, int) for p in result)


def test_fixed_start_index_shifts_first_replica():
    # start index 2: partition 0 starts at broker_ids[2]; replica shift also starts at 2
    result = assign_replicas_to_brokers([10, 11, 12, 13, 14], 5, 2, fixed_start_index=2)
    assert result == {0: [12, 10], 1: [13, 11], 2: [14, 12], 3: [10, 13], 4: [11, 14]}


def test_broker_list_order_is_used_not_sorted():
    result = assign_replicas_to_brokers([7, 3, 5], 3, 2, fixed_start_index=0)
    assert result == {0: [7, 3], 1: [3, 5], 2: [5, 7]}


def test_single_broker_replication_factor_one():
    assert assign_replicas_to_brokers([42], 4, 1, fixed_start_index=0) == {0: [42], 1: [42], 2: [42], 3: [42]}
    assert assign_replicas_to_brokers([42], 3, 1) == {0: [42], 1: [42], 2: [42]}


def test_replication_factor_equal_to_broker_count_uses_every_broker():
    result = assign_replicas_to_brokers([0, 1, 2], 6, 3, fixed_start_index=0)
    assert result == {0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1], 3: [0, 2, 1], 4: [1, 0, 2], 5: [2, 1, 0]}


# -- errors, with Kafka's messages -----------------------------------------------------------------

def test_replication_factor_zero():
    with pytest.raises(InvalidReplicationFactorException) as e:
        assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 0)
    assert e.value.args[0] == "Replication factor must be larger than 0."
    assert e.value.error == Errors.INVALID_REPLICATION_FACTOR
    assert str(e.value) == "InvalidReplicationFactorException: Replication factor must be larger than 0."


def test_replication_factor_negative():
    with pytest.raises(InvalidReplicationFactorException) as e:
        assign_replicas_to_brokers([0, 1, 2], 1, -1)
    assert e.value.args[0] == "Replication factor must be larger than 0."


def test_replication_factor_larger_than_brokers():
    with pytest.raises(InvalidReplicationFactorException) as e:
        assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 6)
    assert e.value.args[0] == "Replication factor: 6 larger than available brokers: 5."


def test_replication_factor_with_no_brokers():
    with pytest.raises(InvalidReplicationFactorException) as e:
        assign_replicas_to_brokers([], 3, 1)
    assert e.value.args[0] == "Replication factor: 1 larger than available brokers: 0."


@pytest.mark.parametrize("n_partitions", [0, -1])
def test_partitions_not_positive(n_partitions):
    with pytest.raises(InvalidPartitionsException) as e:
        assign_replicas_to_brokers([0, 1, 2, 3, 4], n_partitions, 3)
    assert e.value.args[0] == "Number of partitions must be larger than 0."
    assert e.value.error == Errors.INVALID_PARTITIONS


def test_partitions_checked_before_replication_factor():
    # Kafka checks nPartitions first
    with pytest.raises(InvalidPartitionsException):
        assign_replicas_to_brokers([0, 1], 0, 0)


# -- equivalence with the transliterated Kafka algorithm -----------------------------------------

def _random_cases(seed, count):
    rng = random.Random(seed)
    for _ in range(count):
        n = rng.randint(1, 12)
        brokers = rng.sample(range(0, 1000), n)
        rf = rng.randint(1, n)
        parts = rng.randint(1, 60)
        start_partition = rng.choice([-1, 0, rng.randint(1, 40)])
        yield brokers, parts, rf, start_partition


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_properties_random(seed):
    rng = random.Random(seed)
    for _ in range(200):
        n = rng.randint(1, 15)
        brokers = rng.sample(range(0, 100), n)
        rf = rng.randint(1, n)
        parts = rng.randint(1, 100)
        fixed = rng.choice([-1, rng.randrange(n)])
        start_partition = rng.choice([-1, rng.randint(0, 50)])
        result = assign_replicas_to_brokers(brokers, parts, rf, fixed, start_partition,
                                            rng=random.Random(rng.random()))

        first_id = max(0, start_partition)
        assert sorted(result) == list(range(first_id, first_id + parts))
        for p, replicas in result.items():
            assert len(replicas) == rf, (p, replicas)
            assert len(set(replicas)) == rf, f"duplicate replicas {replicas} for partition {p}"
            assert set(replicas) <= set(brokers)
        leaders = Counter(r[0] for r in result.values())
        counts = [leaders.get(b, 0) for b in brokers]
        assert max(counts) - min(counts) <= 1, counts


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_replicas_spread_evenly_over_whole_rounds(seed):
    # with start partition 0 and a multiple of n partitions, every broker holds exactly
    # (partitions / n) * rf replicas and leads exactly partitions / n of them
    rng = random.Random(seed)
    for _ in range(100):
        n = rng.randint(1, 10)
        brokers = rng.sample(range(0, 100), n)
        rf = rng.randint(1, n)
        rounds = rng.randint(1, 6)
        result = assign_replicas_to_brokers(brokers, n * rounds, rf, rng=random.Random(rng.random()))
        all_replicas = Counter(b for rs in result.values() for b in rs)
        assert all(all_replicas[b] == rounds * rf for b in brokers), all_replicas
        leaders = Counter(rs[0] for rs in result.values())
        assert all(leaders[b] == rounds for b in brokers), leaders


def test_consecutive_leaders_round_robin():
    brokers = [5, 6, 7, 8]
    result = assign_replicas_to_brokers(brokers, 9, 2, fixed_start_index=1)
    assert [result[p][0] for p in range(9)] == [6, 7, 8, 5, 6, 7, 8, 5, 6]


# -- start_partition_id (adding partitions) ----------------------------------------------------

def test_start_partition_id_keys():
    result = assign_replicas_to_brokers([0, 1, 2, 3, 4], 3, 2, fixed_start_index=0, start_partition_id=10)
    assert list(result) == [10, 11, 12]


def test_start_partition_id_continues_the_kafka_table():
    # partitions 5..9 computed on their own equal the tail of the 10-partition table
    tail = assign_replicas_to_brokers([0, 1, 2, 3, 4], 5, 3, fixed_start_index=0, start_partition_id=5)
    assert tail == {p: KAFKA_EXPECTED[p] for p in range(5, 10)}


def test_start_partition_id_shift_bumps_at_multiples_of_n():
    # Kafka bumps the shift only when crossing partition ids that are multiples of n,
    # not once per n generated partitions
    result = assign_replicas_to_brokers([0, 1, 2], 4, 2, fixed_start_index=0, start_partition_id=2)
    assert result == {2: [2, 0], 3: [0, 2], 4: [1, 0], 5: [2, 1]}


def test_negative_start_partition_id_means_zero():
    a = assign_replicas_to_brokers([0, 1, 2, 3], 5, 2, fixed_start_index=1, start_partition_id=-1)
    b = assign_replicas_to_brokers([0, 1, 2, 3], 5, 2, fixed_start_index=1, start_partition_id=0)
    assert a == b
    assert list(a) == [0, 1, 2, 3, 4]
