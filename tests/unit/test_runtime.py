"""Process set-up of the actors: CPU priority of the control plane."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_niceness_reaches_every_thread_or_only_the_calling_one():
    """In a child process (a nice value once raised cannot be lowered again without privilege)."""
    script = textwrap.dedent("""
        import os, threading
        from actors.runtime import set_niceness, set_thread_niceness

        ready, done = threading.Event(), threading.Event()
        other = threading.Thread(target=lambda: (ready.set(), done.wait()))
        other.start(); ready.wait()
        nice = lambda tid: os.getpriority(os.PRIO_PROCESS, tid)
        base = nice(other.native_id)
        set_thread_niceness(max(3, base))
        print(nice(threading.get_native_id()) - max(3, base), nice(other.native_id) - base)
        assert set_niceness(max(5, base + 1))
        print(nice(threading.get_native_id()) == nice(other.native_id) == max(5, base + 1))
        done.set()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["0 0", "True"]
