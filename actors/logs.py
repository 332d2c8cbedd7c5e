"""Kafka-style log lines for actors: `[timestamp] LEVEL message (logger)`."""
from __future__ import annotations

import logging
import os


def configure_logging() -> None:
    level = os.environ.get("KRAY_LOG_LEVEL", "INFO").upper()
    root = logging.getLogger()
    if not any(getattr(h, "_kray", False) for h in root.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(message)s (%(name)s)"))
        handler._kray = True
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
