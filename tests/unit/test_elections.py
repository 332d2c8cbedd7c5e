"""actors.controller.election: Kafka's PartitionLeaderElectionAlgorithms and the ISR that follows."""
from __future__ import annotations

import itertools

import pytest

from actors.controller.election import (
    initial_leader_and_isr,
    isr_after_election,
    offline_partition_leader_election,
)

AR = [1, 2, 3, 4, 5]
ISR = [1, 2, 3]


# -- the seed examples -----------------------------------------------------------------------------

def test_seed_clean_election_picks_first_live_isr_member_in_ar_order():
    live = [2, 3, 5]
    leader = offline_partition_leader_election(AR, ISR, live, unclean_leader_election_enabled=False)
    assert leader == 2
    assert isr_after_election(leader, ISR, live) == (2, 3)


def test_seed_clean_election_same_with_unclean_enabled():
    live = [2, 3, 5]
    assert offline_partition_leader_election(AR, ISR, live, True) == 2


def test_seed_no_live_isr_clean_gives_none():
    assert offline_partition_leader_election(AR, ISR, [4, 6, 7], unclean_leader_election_enabled=False) is None


def test_seed_no_live_isr_unclean_gives_first_live_replica():
    live = [4, 6, 7]
    leader = offline_partition_leader_election(AR, ISR, live, unclean_leader_election_enabled=True)
    assert leader == 4
    assert isr_after_election(leader, ISR, live) == (4,)


# -- more examples -----------------------------------------------------------------------------------

def test_ar_order_not_isr_order_decides():
    # ISR lists 3 first, but AR puts 2 before 3: Kafka scans the assignment
    assert offline_partition_leader_election([1, 2, 3], [3, 2], [2, 3], False) == 2
    assert offline_partition_leader_election([3, 2, 1], [2, 3], [2, 3], False) == 3


def test_isr_member_outside_assignment_cannot_lead():
    assert offline_partition_leader_election([1, 2], [9], [9], False) is None
    assert offline_partition_leader_election([1, 2], [9], [9], True) is None


def test_nothing_live():
    assert offline_partition_leader_election([1, 2, 3], [1, 2, 3], [], False) is None
    assert offline_partition_leader_election([1, 2, 3], [1, 2, 3], [], True) is None


def test_empty_isr_unclean():
    assert offline_partition_leader_election([1, 2, 3], [], [2, 3], False) is None
    assert offline_partition_leader_election([1, 2, 3], [], [3, 2], True) == 2


def test_accepts_sets_and_tuples():
    assert offline_partition_leader_election((1, 2, 3), frozenset({2, 3}), {3}, False) == 3


def test_isr_after_election_keeps_isr_order_and_drops_dead():
    assert isr_after_election(2, [3, 1, 2], {2, 3}) == (3, 2)
    assert isr_after_election(1, [1, 2, 3], {1, 2, 3}) == (1, 2, 3)
    assert isr_after_election(1, (1,), {1}) == (1,)


def test_isr_after_unclean_election_is_only_the_leader():
    assert isr_after_election(5, [1, 2], {1, 2, 5}) == (5,)


def test_isr_after_election_returns_tuple():
    assert type(isr_after_election(1, [1, 2], [1, 2])) is tuple
    assert type(isr_after_election(3, [1, 2], [3])) is tuple


def test_initial_leader_and_isr():
    assert initial_leader_and_isr([1, 2, 3], {1, 2, 3}) == (1, (1, 2, 3))
    assert initial_leader_and_isr([3, 1, 2], {1, 2}) == (1, (1, 2))
    assert initial_leader_and_isr([3, 1, 2], [2, 3]) == (3, (3, 2))
    assert initial_leader_and_isr([1, 2, 3], {4, 5, 3}) == (3, (3,))


def test_initial_leader_and_isr_no_live_replica():
    assert initial_leader_and_isr([1, 2, 3], set()) is None
    assert initial_leader_and_isr([1, 2, 3], {4, 5}) is None
    assert initial_leader_and_isr([], {1}) is None


# -- exhaustive over a 3-replica assignment ------------------------------------------------------

def _subsets(items):
    return [list(c) for k in range(len(items) + 1) for c in itertools.combinations(items, k)]


def _ordered_subsets(items):
    return [list(p) for s in _subsets(items) for p in itertools.permutations(s)]


BROKERS = [1, 2, 3, 4]  # 4 is a live broker outside the assignment


@pytest.mark.parametrize("ar", [list(p) for p in itertools.permutations([1, 2, 3])])
def test_exhaustive_clean_and_unclean(ar):
    cases = 0
    for live in _subsets(BROKERS):
        live_set = set(live)
        live_replicas = [r for r in ar if r in live_set]
        for isr in _ordered_subsets(ar):
            expected_clean = next((r for r in ar if r in live_set and r in isr), None)
            clean = offline_partition_leader_election(ar, isr, live, False)
            assert clean == expected_clean, (ar, isr, live)

            unclean = offline_partition_leader_election(ar, isr, live, True)
            if expected_clean is not None:
                assert unclean == expected_clean
            else:
                assert unclean == (live_replicas[0] if live_replicas else None), (ar, isr, live)

            for leader in (clean, unclean):
                if leader is None:
                    continue
                assert leader in live_set, "an elected leader must be alive"
                assert leader in ar, "an elected leader must be an assigned replica"
                new_isr = isr_after_election(leader, isr, live_set)
                assert leader in new_isr, "the leader is always in its ISR"
                assert set(new_isr) <= live_set, "the new ISR holds live replicas only"
                if leader in isr:
                    assert list(new_isr) == [r for r in isr if r in live_set]
                else:
                    assert new_isr == (leader,)
            cases += 1
    assert cases == 16 * 16  # 16 live subsets x 16 ordered ISRs


def test_exhaustive_initial_leader_and_isr():
    for ar in itertools.permutations([1, 2, 3]):
        for live in _subsets(BROKERS):
            result = initial_leader_and_isr(list(ar), set(live))
            expected_isr = tuple(r for r in ar if r in live)
            if not expected_isr:
                assert result is None
            else:
                assert result == (expected_isr[0], expected_isr)
                assert result[0] in live
