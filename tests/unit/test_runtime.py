"""Process set-up of the actors: CPU priority of the control plane."""
from __future__ import annotations

import subprocess
import sys
import textwrap


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
