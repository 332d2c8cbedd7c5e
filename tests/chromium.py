"""A page opened from disk in a real headless Chromium (Debian's `chromium`, which `make setup` installs):
the DOM once its scripts ran, and what reached the console. The timeline page's tests use it."""
from __future__ import annotations

import re
import subprocess
import tempfile
from html import unescape
from pathlib import Path
from typing import NamedTuple

# headless, as root, and quiet: no first-run, sync or update traffic (this machine's network is closed)
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000"]


class RenderedPage(NamedTuple):
    dom: str  # the document after its scripts ran
    console: list[str]  # every console message (Chromium logs them as lines with "CONSOLE"), errors included
    script_errors: str | None  # what the page's window.onerror put into its #errors element (None: no such element)


def open_in_chromium(page: Path) -> RenderedPage:
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(["chromium", *FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                               page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    errors = re.search(r'<pre id="errors"[^>]*>(.*?)</pre>', done.stdout, re.DOTALL)
    return RenderedPage(done.stdout, [line for line in done.stderr.splitlines() if "CONSOLE" in line],
                        unescape(errors.group(1)) if errors else None)
