"""Process set-up shared by the broker and controller actors: Kafka-style logs, GC tuned for batches."""
from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import select
import threading
import time

from ray.exceptions import RayError

from coordination.errors import KrayError

# A 10,000-partition event allocates a few hundred thousand short-lived objects. With
# Python's default young-generation threshold (700) that meant ~600 collections, a quarter
# of the event's time (measured on a broker failure); at 50,000 it is a handful.
GC_THRESHOLDS = (50_000, 20, 20)
_gc_pauses = 0  # the `gc_paused` blocks running now, in any thread
_gc_pauses_lock = threading.Lock()

# What every Ray worker process of kray starts with, from the raylet's environment (`ray_worker_environment`:
# each place that starts Ray for kray sets it first), so that kray's actors need no runtime_env: one cost
# each actor 0.3-0.4 s more to start on this machine, a cluster's start 5.0 s where 4.0 s does without
# (BENCHMARKS.md, "The test suite's time").
# - MALLOC_ARENA_MAX=2: glibc gives threads that allocate at once their own malloc arenas (up to 8 per core)
#   and keeps what is freed in each: a broker's ~120 threads (its concurrency groups, Ray's and kazoo's) grew
#   its resident memory by 40 MB of arenas in minutes. Two arenas keep it near its working set (BENCHMARKS.md,
#   "Soak and memory"). Read by glibc once, at the process's first arena: it must be there at its start.
# - RAY_worker_niceness=0: Ray starts its workers at nice 15 by default, so that its own daemons come first.
#   kray's control plane (controller candidates, RequestSenders) runs at `control_plane_niceness`, 0 by
#   default, which a process started at 15 cannot go back to without privilege; so workers start at 0, and
#   the data plane (brokers, load clients) lowers its own priority to DATA_PLANE_NICENESS, which needs none.
RAY_WORKER_ENV = {"MALLOC_ARENA_MAX": "2", "RAY_worker_niceness": "0"}
DATA_PLANE_NICENESS = 15


def ray_worker_environment() -> None:
    """Put RAY_WORKER_ENV in this process's environment, for the Ray it is about to start (`ray.init`, a
    `ray start` child): its raylet, and every worker the raylet starts, inherit it."""
    os.environ.update(RAY_WORKER_ENV)


def rss_mb() -> float:
    """This process's resident memory in MB (soak runs watch it stay flat)."""
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def beside_this_actor():
    """A scheduling strategy that puts an actor on the node of the actor calling this (a hard one: the
    creator's node is alive, and the actors it creates die with it anyway)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


# Ray loads an actor's class in each process the first time it gets a handle to one (`ray.get_actor`):
# for a broker, the data plane and kafka-python's protocol classes, 0.5-1.7 s of imports that hold the
# import lock, so every other thread that unpickles a call waits too. A new controller's failure
# detector looks each broker up, and a RequestSender the broker it sends to: they import it when they
# start, so that no failover waits for it (measured: the brokers' first answers reached a new
# controller 0.5-1.1 s late, all stuck behind this import).
BROKER_ACTOR_MODULE = "actors.broker.actor"


def preload(module: str) -> None:
    """Import `module` on a thread of its own, off the paths that will need it."""
    threading.Thread(target=importlib.import_module, args=(module,), name=f"preload-{module}", daemon=True).start()


def die_with(pid: int, what: str) -> None:
    """End this process the moment process `pid` (on this node) ends. A controller candidate lives in a
    process of its own but must die with its broker, as Kafka's controller lives in the broker's
    process: Ray ends an actor whose owner died too, but 70-200 ms later, time enough for the orphan to
    win the election another death started and then die (seen: epoch 3 instead of 2)."""
    log = logging.getLogger(__name__)

    def alive() -> bool:
        try:
            os.kill(pid, 0)
            return True
        except (ProcessLookupError, PermissionError):  # gone, or its pid now another user's process's
            return False

    def gone() -> None:
        log.warning("%s (pid %d) has ended: this process ends with it", what, pid)
        os._exit(1)

    def poll_pid() -> None:
        while alive():
            time.sleep(0.02)
        gone()

    def wait_pidfd(fd: int) -> None:
        poller = select.poll()
        poller.register(fd, select.POLLIN)  # a pidfd turns readable when its process ends
        poller.poll()
        gone()

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        gone()
    except (AttributeError, OSError):  # not Linux, a kernel before 5.3, or a sandbox that refuses it: poll
        target, args = poll_pid, ()
    else:
        target, args = wait_pidfd, (fd,)
    threading.Thread(target=target, args=args, name=f"die-with-{pid}", daemon=True).start()


def configure_actor_process(niceness: int = DATA_PLANE_NICENESS) -> None:
    """Kafka-style logs, the GC thresholds, and this process's nice value: the data plane's by default, the
    control plane's `control_plane_niceness`. A Ray not started with RAY_WORKER_ENV (by hand, not by kray)
    is told in a warning: its workers start at 15, which the control plane cannot undo without privilege,
    and with glibc's default malloc arenas."""
    configure_logging()
    gc.set_threshold(*GC_THRESHOLDS)
    if os.getpriority(os.PRIO_PROCESS, 0) != niceness:
        set_niceness(niceness)
    missing = {k: v for k, v in RAY_WORKER_ENV.items() if os.environ.get(k) != v}
    if missing:
        logging.getLogger(__name__).warning(
            "This Ray's workers started without %s: start Ray with them in its environment, as kray does "
            "(kray cluster up, cluster.yaml)", " ".join(f"{k}={v}" for k, v in missing.items()))


@contextlib.contextmanager
def gc_paused():
    """No cyclic collection while the block runs (in any thread: the collector is the process's), one when
    the last block ends if one is due. A controller event at 100,000 partitions allocates millions of
    objects that their reference counts free, not the collector: with it on, the young generations were
    collected every 50,000 of them, each pass also walking what survived: 40% of a failover's context in
    one process, 20% in the cluster (BENCHMARKS.md, "The warm standby, the collector paused, and the
    controller-host kill"). Not the brokers': paused for a LeaderAndIsr (whose steps let produces and fetches
    run between them) they spent more CPU, not less."""
    global _gc_pauses
    with _gc_pauses_lock:
        _gc_pauses += 1
        gc.disable()
    try:
        yield
    finally:
        with _gc_pauses_lock:
            _gc_pauses -= 1
            if not _gc_pauses:
                gc.enable()


def set_niceness(niceness: int) -> bool:
    """Give every thread of this process `niceness`: Linux schedules threads, so each is set; threads
    started later inherit it from the thread that starts them. False when the OS refuses (raising
    priority needs root or CAP_SYS_NICE): the process runs on as it was, with a warning."""
    for tid in (int(t) for t in os.listdir("/proc/self/task")):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except ProcessLookupError:  # the thread ended meanwhile
            continue
        except OSError as e:
            logging.getLogger(__name__).warning("Cannot set the nice value to %d (%s); control_plane_niceness "
                                                "needs root or CAP_SYS_NICE", niceness, e)
            return False
    return True


def ray_says_this_actor_lives() -> bool:
    """Whether Ray's GCS still has this process's actor alive: after ray.kill it is DEAD (or RESTARTING)
    at once, while the process itself may run on for a second or more."""
    import ray
    from ray._private import state

    try:
        return state.actors(actor_id=ray.get_runtime_context().get_actor_id()).get("State") == "ALIVE"
    except Exception:  # the GCS cannot say: assume we live (ZooKeeper's session still decides)
        return True


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


ACTOR_NOT_READY = (RayError, ValueError)  # restarting or dead (RayError), not yet created (ValueError)


def poll(predicate, timeout: float = 30.0, what: str = "a condition", tolerate: tuple[type[BaseException], ...] = ACTOR_NOT_READY,
         interval: float = 0.05):
    """Call predicate until it returns something truthy, and return that. The `tolerate`d errors
    count as "not yet"; KrayError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except tolerate:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise KrayError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
