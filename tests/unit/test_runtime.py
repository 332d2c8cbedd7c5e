"""Process set-up of the actors: CPU priority of the control plane, a candidate dying with its broker."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def test_niceness_reaches_every_thread_of_the_process():
    """In a child process (a nice value once raised cannot be lowered again without privilege); a
    thread started afterwards inherits it."""
    script = textwrap.dedent("""
        import os, threading
        from actors.runtime import set_niceness

        nice = lambda tid: os.getpriority(os.PRIO_PROCESS, tid)
        ready, done = threading.Event(), threading.Event()
        other = threading.Thread(target=lambda: (ready.set(), done.wait()))
        other.start(); ready.wait()
        target = nice(other.native_id) + 3
        assert set_niceness(target)
        later = threading.Thread(target=lambda: print(nice(threading.get_native_id()) == target))
        later.start(); later.join()
        print(nice(threading.get_native_id()) == nice(other.native_id) == target)
        done.set()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["True", "True"]


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polling"])
def test_a_process_ends_when_the_one_it_dies_with_ends(pidfd):
    """die_with in a child (standing for a candidate) watching a sleeping process (its broker): the
    child runs on while that process lives, and ends as soon as it ends; without pidfd_open (not
    Linux) it asks every 20 ms."""
    broker = subprocess.Popen(["sleep", "60"])
    script = textwrap.dedent(f"""
        import os, sys, time
        {"" if pidfd else "del os.pidfd_open"}
        from actors.runtime import die_with

        die_with({broker.pid}, "broker-1")
        print("watching", flush=True)
        time.sleep(60)
        print("outlived its broker", flush=True)
    """)
    candidate = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
    try:
        assert candidate.stdout.readline() == "watching\n"
        with pytest.raises(subprocess.TimeoutExpired):
            candidate.wait(timeout=0.5)  # its broker lives: so does it
        broker.kill()
        broker.wait()
        assert candidate.wait(timeout=10) == 1
        assert "broker-1 (pid %d) has ended" % broker.pid in candidate.stderr.read()
    finally:
        broker.kill()
        candidate.kill()


def test_the_collector_is_paused_while_any_gc_paused_block_runs_and_back_after_the_last():
    import gc
    import threading

    from actors.runtime import gc_paused

    assert gc.isenabled()
    inner_done, outer_may_end = threading.Event(), threading.Event()
    seen = []

    def other_thread() -> None:
        with gc_paused():
            seen.append(gc.isenabled())
            inner_done.set()
            outer_may_end.wait(5)

    with gc_paused():
        thread = threading.Thread(target=other_thread)
        thread.start()
        inner_done.wait(5)
        with gc_paused():  # nested in the same thread
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())
    seen.append(gc.isenabled())  # the other thread's block still runs
    outer_may_end.set()
    thread.join(5)
    assert seen == [False, False, False, False] and gc.isenabled()
    try:
        with gc_paused():
            raise KeyError("the block failed")
    except KeyError:
        pass
    assert gc.isenabled()
