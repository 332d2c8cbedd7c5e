"""Process set-up shared by the broker and controller actors: Kafka-style logs, GC tuned for batches."""
from __future__ import annotations

import gc
import logging
import os

# A 10,000-partition event allocates a few hundred thousand short-lived objects. With
# Python's default young-generation threshold (700) that meant ~600 collections, a quarter
# of the event's time (measured on a broker failure); at 50,000 it is a handful.
GC_THRESHOLDS = (50_000, 20, 20)


def configure_actor_process() -> None:
    configure_logging()
    gc.set_threshold(*GC_THRESHOLDS)


def configure_logging() -> None:
    """`[timestamp] LEVEL message (logger)` lines, as Kafka's log4j layout writes them."""
    level = os.environ.get("KRAY_LOG_LEVEL", "INFO").upper()
    root = logging.getLogger()
    if not any(getattr(h, "_kray", False) for h in root.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(message)s (%(name)s)"))
        handler._kray = True
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
