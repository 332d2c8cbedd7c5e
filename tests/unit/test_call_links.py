"""Links carried by Ray calls (the controller's RequestSender path): a call crosses as its bytes would."""
from __future__ import annotations

import threading
import time

import pytest

from actors.links.calls import CallLinks
from actors.links.faults import HEALTHY, Direction, LinkFault
from coordination.errors import KrayError

CUT = LinkFault(cut=True)


def crossing(links: CallLinks, direction: Direction = Direction.FORWARD, wanted=lambda: True):
    """A call crossing link broker-1 on a thread: (the thread, what pass_call answered, when)."""
    answer: dict = {}

    def cross() -> None:
        answer["passed"] = links.pass_call("broker-1", direction, lambda: 100, wanted)
        answer["at"] = time.monotonic()
    thread = threading.Thread(target=cross, daemon=True)
    thread.start()
    return thread, answer


def test_a_healthy_link_passes_calls_at_once_and_never_asks_their_size():
    links = CallLinks()
    started = time.monotonic()
    assert links.pass_call("broker-1", Direction.FORWARD, lambda: pytest.fail("sized"))
    assert time.monotonic() - started < 0.05


def test_a_cut_holds_the_call_until_healed_and_only_in_its_direction():
    links = CallLinks()
    links.set_fault("broker-1", Direction.FORWARD, CUT)
    assert links.pass_call("broker-1", Direction.BACKWARD, lambda: 100)
    assert links.pass_call("broker-2", Direction.FORWARD, lambda: 100)
    thread, answer = crossing(links)
    thread.join(0.5)
    assert thread.is_alive()
    healed_at = time.monotonic()
    links.set_fault("broker-1", Direction.FORWARD, HEALTHY)
    thread.join(2)
    assert answer["passed"] and answer["at"] >= healed_at


def test_a_call_held_by_a_cut_is_given_up_once_no_longer_wanted():
    links = CallLinks()
    links.set_fault("broker-1", Direction.BACKWARD, CUT)
    wanted = threading.Event()
    wanted.set()
    thread, answer = crossing(links, Direction.BACKWARD, wanted.is_set)
    thread.join(0.3)
    assert thread.is_alive()
    wanted.clear()  # a newer controller took the sender over
    thread.join(2)
    assert answer["passed"] is False


@pytest.mark.parametrize("fault, nbytes, at_least_s", [
    (LinkFault(delay_ms=150), 100, 0.14),  # a delay holds every call
    (LinkFault(rate_bytes_per_s=10_000), 2_000, 0.19),  # a throttle holds a call for its size
])
def test_a_slow_link_holds_a_call_until_its_bytes_arrive(fault, nbytes, at_least_s):
    links = CallLinks()
    links.set_fault("broker-1", Direction.FORWARD, fault)
    started = time.monotonic()
    assert links.pass_call("broker-1", Direction.FORWARD, lambda: nbytes)
    assert time.monotonic() - started >= at_least_s


def test_faults_are_reported_per_link_and_a_link_that_does_not_exist_is_refused():
    links = CallLinks()
    report = links.set_fault("broker-3", Direction.BACKWARD, CUT)
    assert report == {"broker-3": {"forward": HEALTHY, "backward": CUT}}
    assert links.faults() == report
    with pytest.raises(KrayError, match="no link 'controller'"):
        links.set_fault("controller", Direction.FORWARD, CUT)
