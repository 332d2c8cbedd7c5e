"""The pure part of a link fault: when each chunk of one direction of a TCP stream arrives."""
from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from actors.links.faults import HEALTHY, MAX_RETRANSMITS, RETRANSMIT_S, LinkFault, Shaper


def arrivals(fault: LinkFault, chunks: list[tuple[float, int]], seed: int = 1) -> list[float]:
    shaper = Shaper(random.Random(seed))
    return [shaper.deliver_at(t, n, fault) for t, n in chunks]


def test_a_healthy_link_delivers_each_chunk_when_it_is_sent():
    chunks = [(0.0, 10), (0.5, 70_000), (0.5, 1), (2.0, 5)]
    assert arrivals(HEALTHY, chunks) == [0.0, 0.5, 0.5, 2.0]
    assert HEALTHY.healthy and not LinkFault(delay_ms=1).healthy


def test_a_delay_shifts_every_chunk_and_keeps_their_spacing():
    assert arrivals(LinkFault(delay_ms=100), [(0.0, 1), (0.01, 1), (1.0, 1)]) == pytest.approx([0.1, 0.11, 1.1])


def test_jitter_stays_within_its_bounds_and_never_reorders():
    fault = LinkFault(delay_ms=50, jitter_ms=40)
    sent = [i * 0.001 for i in range(2_000)]
    got = arrivals(fault, [(t, 100) for t in sent])
    assert got == sorted(got)  # TCP: in order, whatever the jitter
    assert all(t + 0.010 - 1e-9 <= a for t, a in zip(sent, got))  # never earlier than delay - jitter
    assert max(a - t for t, a in zip(sent, got)) <= 0.090 + 0.001  # nor later than delay + jitter (+ the queue)
    assert len({round(a - t, 6) for t, a in zip(sent, got)}) > 100  # and it does vary


def test_jitter_larger_than_the_delay_never_delivers_before_the_send():
    got = arrivals(LinkFault(delay_ms=5, jitter_ms=50), [(i * 0.01, 1) for i in range(500)])
    assert all(a >= i * 0.01 for i, a in enumerate(got))


def test_a_throttle_queues_chunks_behind_one_another():
    fault = LinkFault(rate_bytes_per_s=1_000)
    # 500 bytes take 0.5 s; the second chunk, sent at 0.1, waits for the first
    assert arrivals(fault, [(0.0, 500), (0.1, 500), (5.0, 100)]) == pytest.approx([0.5, 1.0, 5.1])


def test_a_throttle_and_a_delay_add_up():
    fault = LinkFault(rate_bytes_per_s=1_000, delay_ms=100)
    assert arrivals(fault, [(0.0, 500), (0.0, 500)]) == pytest.approx([0.6, 1.1])


def test_a_lost_chunk_arrives_a_retransmission_later():
    sent = [i * 2.0 for i in range(3_000)]  # far enough apart that none waits behind another
    late = [a - t for t, a in zip(sent, arrivals(LinkFault(loss=0.3), [(t, 1) for t in sent]))]
    assert all(round(d / RETRANSMIT_S, 6).is_integer() for d in late)  # whole retransmissions
    assert 0.25 < sum(d > 0 for d in late) / len(late) < 0.35
    assert 0.05 < sum(d >= 2 * RETRANSMIT_S for d in late) / len(late) < 0.13  # lost twice: 0.3 * 0.3


def test_chunks_behind_a_lost_one_wait_for_it():
    shaper = Shaper(random.Random(0))
    first = shaper.deliver_at(0.0, 1, LinkFault(loss=1.0))
    assert shaper.deliver_at(0.001, 1, HEALTHY) == first  # head-of-line blocking
    assert shaper.deliver_at(5.0, 1, HEALTHY) == 5.0


def test_total_loss_still_delivers_after_the_retransmissions_run_out():
    assert arrivals(LinkFault(loss=1.0), [(0.0, 1)]) == pytest.approx([MAX_RETRANSMITS * RETRANSMIT_S])


def test_the_same_seed_gives_the_same_arrivals():
    fault = LinkFault(delay_ms=20, jitter_ms=10, loss=0.1)
    chunks = [(i * 0.002, 100) for i in range(300)]
    assert arrivals(fault, chunks, seed=7) == arrivals(fault, chunks, seed=7)
    assert arrivals(fault, chunks, seed=7) != arrivals(fault, chunks, seed=8)


@pytest.mark.parametrize("bad", [{"delay_ms": -1}, {"jitter_ms": -0.1}, {"loss": 1.5}, {"loss": -0.1},
                                 {"rate_bytes_per_s": 0}, {"cut": True, "bogus": 1}])
def test_an_impossible_fault_is_refused(bad):
    with pytest.raises(ValidationError):
        LinkFault(**bad)
