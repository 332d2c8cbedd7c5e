"""Capacity benchmark: the load a kray cluster sustains, open loop, beside floors from the same run (issue 42).

    .venv/bin/python -m benchmarks.bench_capacity [--partitions 1000 10000 6] [--rates R ...] [--seconds 10]
        [--warm-s 3] [--start-rate R] [--max-rate 1024000] [--bisect 2] [--knee-p99-ms 50] [--linger-ms 5]
        [--out FILE] [--profile-rate R --profile-dir DIR]

On a cluster of 3 brokers per partition count (one topic, RF 3, min.insync.replicas=2; ZooKeeper sessions
of 18 s, Kafka's default, so that an overloaded broker is slow, not dead), a load client (confluent-kafka,
acks=all and idempotent as Kafka's defaults for acks=all, linger.ms 5 as librdkafka's default, 100-byte
records without a key) offers records at a fixed rate whatever comes back (open loop), round robin over
the partitions, in a Ray actor of its own that does nothing per record but the produce call and a
delivery callback appending librdkafka's `Message.latency()` to an array (from the produce call to the
callback: librdkafka takes the clock when the callback asks, and the loop polls every millisecond).
Every partition first gets one record, and what follows the first writes is let pass (the leader-epoch
checkpoints, see `settle`), so that none of it is measured; then the cluster is measured idle over
`--idle-s`. Each rate is warmed for `--warm-s`, then measured over `--seconds`: the rate
actually offered, the acknowledged rate over that window, the latency p50 / p99 / p99.9 of the records
acknowledged in it (and, in the JSON, the worst of each tenth of the window: a stall shows
there), the CPU each kind of this run's processes used (from /proc) per acknowledged record: brokers,
the load client (split into librdkafka's threads and Python), the controller (candidates and
RequestSenders), ZooKeeper (the java process), the rest (Ray's daemons, this driver); and the brokers'
Produce requests served per record. This run's processes are this driver's descendants: the cores other
processes on the machine used are shown apart (`foreign`, kernel threads apart again), and a row where
they reached 0.05 cores is marked SHARED. The client's queue is drained between rates. Beside each row, the
Produce request's time split as Kafka's RequestMetrics split it (queue, local, remote, response queue,
send: mean and p99 over the window, summed over the brokers' request_metrics()).

The rates double from `--start-rate` (default: 500, or 2,000 under 100 partitions, the batched case)
until the cluster falls behind (acknowledged < 97% of offered, or p99 above `--stop-p99-ms`), then are
bisected `--bisect` times between the highest that met the knee and the lowest above it that did not;
`--rates` gives a list instead (run in order, also stopping once behind). The knee: the highest
offered rate served in full (>= 97%) with p99 <= `--knee-p99-ms`. A point where the client offered
less than 97% of its rate with room in librdkafka's queue is marked invalid (the client, not the
cluster, was the limit); a knee whose next rate was such a point is a lower bound.

Floors and calibration, same run, before the clusters (and the loop again after them): a pure-Python
loop of 5 million additions in a function (seconds, best of 3), and the bare exchange of bench_produce
(a uvloop protocol answering a fixed frame to a one-at-a-time request/response client at `--floor-rate`):
its CPU per request, the least a request costs in CPython here. Figures from different days compare as
ratios to these. Tables are printed per partition count, the rows written as JSON to `--out`.

Where a Produce request's time goes, per rate: Kafka's RequestMetrics of the Produce requests the brokers
answered in the window (the difference of their request timers at its start and end, summed over the
brokers), mean and p99 of each timer, in the row (`produce_ms`) and a line under the table.

Profiling (`--profile-rate R`): after the ladder, R is offered again for `--seconds` while py-spy samples
every broker (`--native`: the event loop's C and the kernel calls show too, at 100 Hz, pausing the
process at each sample); the collapsed stacks go to `--profile-dir`, and a breakdown of the samples of
the brokers' event loops while busy (not in epoll) by where the time went (the stages of a request,
`PROFILE_STAGES`) and the functions with the most samples of their own is printed. That window is not a
row of the table: py-spy's own CPU would count against the cluster.
"""
from __future__ import annotations

import argparse
import array
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import ray

from actors.clients.producer import producer_config
from actors.runtime import configure_actor_process
from benchmarks.bench_failover import cpu_seconds, new_cluster, thread_cpu
from benchmarks.bench_produce import VALUE, exchange_floor, request_counts
from benchmarks.request_breakdown import breakdown_line, produce_breakdown, request_timers
from coordination import admin
from coordination.zkdata import TopicPartition
from jobs.experiments.capacity import SESSION_TIMEOUT_MS
from jobs.measures.knee import SERVED, knee_of, ladder, point
from jobs.experiments.local import embedded_zookeeper_and_ray

TOPIC = "capacity"
SHARED_CORES = 0.05  # other processes on the machine using this much: the row is not this run's alone
KINDS = {"brokers": ("BrokerActor",), "load_client": ("OpenLoopProducer",),
         "controller": ("ControllerActor", "RequestSender"), "zookeeper": ("java",)}


@ray.remote(num_cpus=0, max_concurrency=2)
class OpenLoopProducer:
    """Offers records at a fixed rate, round robin over a topic's partitions, whatever is acknowledged.
    Per record: one produce call, and one delivery callback that appends librdkafka's latency."""

    def __init__(self, servers: str, topic: str, partitions: int, linger_ms: float):
        import confluent_kafka

        configure_actor_process()  # the data plane's nice value, as the brokers and kray's load clients
        self.latencies = array.array("d")  # seconds, in the order acknowledged: 8 bytes a record, no object
        self.errors: dict[str, int] = {}
        append, errors = self.latencies.append, self.errors

        def delivered(err, msg) -> None:
            if err is None:
                append(msg.latency() or -1.0)  # None: librdkafka had no figure (never seen for an acknowledged one)
            else:
                errors[err.name()] = errors.get(err.name(), 0) + 1

        self.producer = confluent_kafka.Producer(producer_config(servers, -1, **{
            "linger.ms": linger_ms, "queue.buffering.max.messages": 2_000_000, "on_delivery": delivered}))
        self.topic, self.partitions = topic, partitions
        self.sent = self.full = 0
        self._pace = (0.0, time.monotonic())  # records/s (0: none), since when
        self._stopped = threading.Event()
        threading.Thread(target=self._loop, name="open-loop", daemon=True).start()

    def pid(self) -> int:
        return os.getpid()

    def _loop(self) -> None:
        produce, poll_, topic, n = self.producer.produce, self.producer.poll, self.topic, self.partitions
        sent, pace, base = 0, None, 0
        while not self._stopped.is_set():
            if self._pace is not pace:  # a new rate: its schedule starts now
                pace, base = self._pace, sent
            rate, since = pace
            if rate > 0:
                due = int(rate * (time.monotonic() - since)) - (sent - base)
                while due > 0:
                    try:
                        produce(topic, VALUE, partition=sent % n)
                    except BufferError:  # librdkafka's queue is full: the client cannot offer more
                        self.full += 1
                        break
                    sent += 1
                    due -= 1
                self.sent = sent
            poll_(0.001)

    def prime(self, timeout: float) -> dict:
        """One record to every partition, all acknowledged (or `timeout`): no first write is measured."""
        start = time.monotonic()
        for p in range(self.partitions):
            self.producer.produce(self.topic, VALUE, partition=p)
        left = self._wait_empty(timeout)
        out = {"primed_s": round(time.monotonic() - start, 2), "primed_acked": len(self.latencies),
               "prime_left": left, "prime_errors": dict(self.errors)}
        self._reset()
        return out

    def set_rate(self, rate: float) -> None:
        self._pace = (rate, time.monotonic())

    def mark(self) -> dict:
        return {"t": time.monotonic(), "sent": self.sent, "acked": len(self.latencies),
                "errors": sum(self.errors.values()), "full": self.full, "queued": len(self.producer)}

    def latencies_ms(self, start: int, end: int) -> np.ndarray:
        """The latencies of the records acknowledged between two marks, in ms, in the order acknowledged."""
        values = np.frombuffer(self.latencies[start:end], dtype=np.float64)
        return values[values >= 0] * 1000

    def drain(self, timeout: float) -> dict:
        """Stop offering; wait until every record is acknowledged, else purge what is still queued."""
        self.set_rate(0)
        start = time.monotonic()
        left = self._wait_empty(timeout)
        if left:
            self.producer.purge(in_queue=True, in_flight=False)
            self._wait_empty(60)
        out = {"drain_s": round(time.monotonic() - start, 2), "purged": left, "errors_by_name": dict(self.errors)}
        self._reset()
        return out

    def _wait_empty(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while len(self.producer) and time.monotonic() < deadline:
            time.sleep(0.01)  # the loop thread serves the acknowledgements
        return len(self.producer)

    def _reset(self) -> None:
        del self.latencies[:]
        self.errors.clear()

    def stop(self) -> None:
        self._stopped.set()


def python_loop_s(n: int = 5_000_000, repeats: int = 3) -> float:
    """Seconds for n additions in a plain Python loop, best of `repeats`: the machine's speed per core."""
    best = float("inf")
    for _ in range(repeats):
        start, x = time.perf_counter(), 0
        for i in range(n):
            x += i
        best = min(best, time.perf_counter() - start)
    return round(best, 3)


def descendants(root: int) -> set[int]:
    """root and every process started under it: this run's Ray (its raylet, hence every worker) and its
    ZooKeeper server are this driver's children; another run on the machine is not."""
    children: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:  # gone meanwhile
            continue
        children.setdefault(ppid, []).append(int(pid))
    out, todo = set(), [root]
    while todo:
        out.add(pid := todo.pop())
        todo.extend(children.get(pid, []))
    return out


def cpu_by_kind(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict:
    """CPU seconds between two cpu_seconds() snapshots per kind of this run's processes (a process started
    meanwhile counts from 0), KINDS grouped, the rest of this run's in `other` (Ray's daemons, this
    driver), `all` their sum; `foreign`: the machine's other processes (another run sharing the cores);
    `kernel`: kernel threads (this run's disk writes among them)."""
    ours = descendants(os.getpid())
    raw: dict[str, float] = {}
    foreign: dict[str, float] = {}
    kernel: dict[str, float] = {}
    for pid, (kind, cpu) in after.items():
        kind = kind.rsplit(":", 1)[-1]  # Ray titles some actors' processes "ray::<name>:<class>"
        into = raw if pid in ours else kernel if kind == "?" else foreign  # "?": no command line, a kernel thread
        into[kind] = into.get(kind, 0.0) + cpu - before.get(pid, (kind, 0.0))[1]
    out: dict = {group: sum(raw.pop(k, 0.0) for k in kinds) for group, kinds in KINDS.items()}
    out["other"] = sum(raw.values())
    out["all"] = sum(out.values())
    out["foreign"] = sum(foreign.values())
    out["kernel"] = sum(kernel.values())
    out["other_by_kind"] = {k: round(v, 3) for k, v in sorted(raw.items(), key=lambda kv: -kv[1]) if v >= 0.01}
    out["foreign_by_kind"] = {k: round(v, 3) for k, v in sorted(foreign.items(), key=lambda kv: -kv[1]) if v >= 0.01}
    return out


def settle(checkpoint_interval_s: float, quiet_cores: float = 0.2, timeout: float = 120) -> float:
    """Seconds until the first writes' aftermath is over: a partition's first record starts its leader
    epoch, and the next checkpoint (within checkpoint_interval_s) writes every such partition's
    leader-epoch file on the broker's event loop, 50 files a turn (about 0.6 ms a file here: 0.6 s of
    loop time per 1,000 partitions, requests waiting between turns). Then the brokers in all use less
    than `quiet_cores` over a second."""
    start = time.monotonic()
    time.sleep(checkpoint_interval_s + 0.5)
    while time.monotonic() - start < timeout:
        before = cpu_seconds()
        time.sleep(1)
        if cpu_by_kind(before, cpu_seconds())["brokers"] < quiet_cores:
            break
    return round(time.monotonic() - start, 1)


def idle_window(seconds: float) -> dict:
    """Cores each kind of process uses with the cluster and the client connected and nothing offered."""
    before, start = cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    used, wall = cpu_by_kind(before, cpu_seconds()), time.monotonic() - start
    return {k: round(v / wall, 3) for k, v in used.items() if not k.endswith("_by_kind")}


def run_point(cluster, load, load_pid: int, n: int, rate: float, args) -> dict:
    """One offered rate: warmed, then measured over args.seconds; the client's queue drained after."""
    ray.get(load.set_rate.remote(rate))
    time.sleep(args.warm_s)
    started = time.strftime("%H:%M:%S")
    m0, cpu0, threads0, req0 = ray.get(load.mark.remote()), cpu_seconds(), thread_cpu(load_pid), request_counts(cluster)
    timers0 = request_timers(cluster)
    time.sleep(args.seconds)
    m1, cpu1, threads1, req1 = ray.get(load.mark.remote()), cpu_seconds(), thread_cpu(load_pid), request_counts(cluster)
    timers1 = request_timers(cluster)
    latencies = ray.get(load.latencies_ms.remote(m0["acked"], m1["acked"]))
    drained = ray.get(load.drain.remote(args.drain_timeout_s))
    wall, acked = m1["t"] - m0["t"], m1["acked"] - m0["acked"]
    used = cpu_by_kind(cpu0, cpu1)
    per = lambda s: round(1e6 * s / acked, 1) if acked else None  # µs per acknowledged record
    produce_requests = sum(req1[b].get("Produce", 0) - req0[b].get("Produce", 0) for b in req1)
    fetches = sum(req1[b].get("FetchFollower", 0) - req0[b].get("FetchFollower", 0) for b in req1)
    return {
        "partitions": n, **point(rate, m0, m1, latencies, args.knee_p99_ms),
        "latency_ms_max_by_tenth": [round(float(part.max()), 1) if len(part) else None
                                    for part in np.array_split(latencies, 10)],
        "cpu_us_per_record": {k: per(v) for k, v in used.items() if not k.endswith("_by_kind")},
        "load_client_us_per_record": {k: per(threads1[k] - threads0[k]) for k in threads1},
        "cores": {k: round(v / wall, 3) for k, v in used.items() if not k.endswith("_by_kind")},
        **{f"{k[:-8]}_cores_by_kind": {kind: round(v / wall, 3) for kind, v in used[k].items() if v / wall >= 0.005}
           for k in ("other_by_kind", "foreign_by_kind")},
        "produce_requests_per_s": round(produce_requests / wall), "follower_fetches_per_s": round(fetches / wall),
        "records_per_produce_request": round(acked / produce_requests, 2) if produce_requests else None,
        "window_started": started, "produce_ms": produce_breakdown(timers0, timers1), **drained}


# Where a broker's time goes, by the innermost frame of a sample that matches (in this order): the
# stages of a request's way through kray, then the rest of the loop's work.
PROFILE_STAGES = [
    ("garbage collection", ("gc_collect", "collect_with_callback")),
    ("socket writes", ("sock_sendmsg", "__libc_send", "_write_ready", "write (uvloop")),
    ("socket reads", ("sock_recvmsg", "__libc_recv", "_read_ready", "readexactly", "data_received")),
    ("frames and headers", ("network.py", "wire.py")),
    ("request decoding (kafka-python)", ("kafka/protocol",)),
    ("log appends and reads (files)", ("log/log.py", "log/batches.py", "write (", "pwrite", "pread", "os.py")),
    ("producer state", ("producer_state.py",)),
    ("partition and ISR/HW", ("partition.py", "isr.py", "replication.py")),
    ("fetch sessions", ("fetch_session.py",)),
    ("delayed operations", ("delayed_operations.py",)),
    ("replica manager", ("replica_manager.py", "controller_requests.py")),
    ("API handlers", ("kafka_apis.py", "group_apis.py", "admin_apis.py")),
    ("follower fetcher", ("fetcher.py",)),
    ("run-directory events", ("events.py",)),
    ("event loop (asyncio/uvloop)", ("asyncio", "uvloop", "epoll")),
    ("Ray's threads", ("ray/", "grpc", "_raylet")),
]


LOOP_THREAD = "kafka-network-thread-"  # the broker's event loop (actor.py; its broker id follows)
IDLE = ("epoll_wait", "epoll_pwait")


def profile_brokers(cluster, load, rate: float, seconds: float, out_dir: Path) -> dict:
    """py-spy on every broker while `rate` is offered: the collapsed stacks, and the samples by stage and by
    function (own samples), summed over the brokers."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pids = [i["pid"] for i in ray.get([h.info.remote() for h in cluster.brokers.values()])]
    ray.get(load.set_rate.remote(rate))
    time.sleep(2)
    spies = [subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--native", "--threads", "--rate", "100", "--format", "raw",
                               "--duration", str(int(seconds)), "--pid", str(pid),
                               "--output", str(out_dir / f"broker-{pid}.txt")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in pids]
    for spy in spies:
        spy.wait()
    ray.get(load.drain.remote(60))
    return {"rate": rate, "seconds": seconds, **summarise_profile(out_dir)}


def summarise_profile(out_dir: Path) -> dict:
    """The busy samples of the brokers' event loops in py-spy's collapsed stacks, by stage and by function."""
    stages: dict[str, int] = {}
    own: dict[str, int] = {}
    within: dict[str, int] = {}  # samples with the function anywhere on the stack
    total = 0
    for path in out_dir.glob("broker-*.txt"):
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = stack.split(";")
            if LOOP_THREAD not in frames[0] or any(w in frames[-1] for w in IDLE):
                continue  # other threads (Ray's, ZooKeeper's: mostly waiting), and the loop waiting
            stage = next((name for frame in reversed(frames) for name, marks in PROFILE_STAGES
                          if any(m in frame for m in marks)), "other")
            stages[stage] = stages.get(stage, 0) + int(count)
            own[frames[-1]] = own.get(frames[-1], 0) + int(count)
            for function in {f.split(" (")[0] for f in frames}:
                within[function] = within.get(function, 0) + int(count)
            total += int(count)
    top = sorted(own.items(), key=lambda kv: -kv[1])[:30]
    return {"samples": total, "dir": str(out_dir),
            "stages_pct": {k: round(100 * v / total, 1) for k, v in sorted(stages.items(), key=lambda kv: -kv[1])},
            "own_pct": {k: round(100 * v / total, 1) for k, v in top},
            "within_pct": {k: round(100 * v / total, 1) for k, v in sorted(within.items(), key=lambda kv: -kv[1])[:60]}
            } if total else {"samples": 0}


def print_profile(profile: dict) -> None:
    if not profile.get("samples"):
        print("profile: no samples (is py-spy installed, and may it attach?)")
        return
    print(f"\nprofile of the brokers at {profile['rate']:,.0f}/s ({profile['samples']:,} samples, stacks in "
          f"{profile['dir']}), by stage (the innermost matching frame):")
    for k, v in profile["stages_pct"].items():
        print(f"  {v:5.1f}%  {k}")
    for title, key in (("functions with the most samples of their own:", "own_pct"),
                       ("functions with the most samples within them (callees included):", "within_pct")):
        print(title)
        for k, v in profile[key].items():
            print(f"  {v:5.1f}%  {k}")


def capacity(connect: str, n: int, args) -> dict:
    """One cluster of n partitions: creation, priming, the idle window, then the ladder of rates."""
    cluster, zk = new_cluster(connect, session_timeout_ms=SESSION_TIMEOUT_MS)
    load = None
    try:
        start = time.monotonic()
        admin.create_topic(zk, TOPIC, n, 3, config={"min.insync.replicas": "2"})
        cluster.wait_for_metadata(lambda m: sum(tp.topic == TOPIC and v[0] >= 0 for tp, v in m["partitions"].items())
                                  == n, timeout=1800)
        created = round(time.monotonic() - start, 1)
        _, epoch = cluster.wait_for_controller(zk)
        load = OpenLoopProducer.remote(cluster.bootstrap_servers(), TOPIC, n, args.linger_ms)
        load_pid = ray.get(load.pid.remote())
        primed = ray.get(load.prime.remote(300))
        settled = settle(cluster.config.broker.replica_high_watermark_checkpoint_interval_ms / 1000)
        idle = idle_window(args.idle_s)
        start_rate = args.start_rate or (2000 if n < 100 else 500)
        rows = ladder(lambda rate: _progress(run_point(cluster, load, load_pid, n, rate, args)), start_rate,
                      args.rates, args.max_rate, args.bisect, args.stop_p99_ms)
        states = zk.get_partition_states([TopicPartition(TOPIC, i) for i in range(n)])
        _, epoch_after = cluster.wait_for_controller(zk)
        info = ray.get([h.info.remote() for h in cluster.brokers.values()])
        health = {"controller_epoch_changed": epoch_after != epoch,
                  "partitions_isr_below_3": sum(len(s.state.isr) < 3 for s in states.values()),
                  "failed_isr_updates": sum(i["failed_isr_updates"] for i in info)}
        profile = profile_brokers(cluster, load, args.profile_rate, args.seconds, Path(args.profile_dir) / str(n)) \
            if args.profile_rate else None
        knee, limited = knee_of(rows)
        return {"partitions": n, "topic_created_s": created, **primed, "settled_s": settled, "idle_cores": idle,
                "rows": rows, "profile": profile, "knee_per_s": knee, "knee_limited_by": limited, **health}
    finally:
        if load is not None:
            ray.get(load.stop.remote())
            ray.kill(load)
        cluster.stop(delete_logs=True)
        zk.close()


def _progress(row: dict) -> dict:
    print(f"  ... {row['window_started']} {row['partitions']} partitions, {row['rate']:.0f}/s: achieved "
          f"{row['achieved_per_s']}, p99 {row['latency_ms_p99']} ms, max per tenth of the window "
          f"{row['latency_ms_max_by_tenth']}, foreign cores {row['cores']['foreign']}", file=sys.stderr, flush=True)
    return row


def _us(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def print_table(result: dict, floor_us: float) -> None:
    n = result["partitions"]
    print(f"\n{n:,} partitions (RF 3, min.insync.replicas 2, acks=all idempotent, 100-byte records): topic "
          f"created in {result['topic_created_s']} s, every partition primed in {result['primed_s']} s, the first "
          f"writes' aftermath over {result['settled_s']} s later")
    print("idle, cores: " + ", ".join(f"{k} {v}" for k, v in result["idle_cores"].items()))
    head = ["offered/s", "sent/s", "acked/s", "acked %", "p50 ms", "p99 ms", "p99.9 ms", "brokers", "load rdk+py",
            "controller", "zk", "other", "all", "brokers/floor", "rec/produce", "cores", "client cores",
            "foreign cores", "note"]
    lines = [head]
    for r in result["rows"]:
        us, client = r["cpu_us_per_record"], r["load_client_us_per_record"]
        note = ("client behind: invalid" if r["client_behind"] else "KNEE" if r["rate"] == result["knee_per_s"]
                else "behind" if not r["served"] else "" if r["knee_ok"] else "p99 over the knee's")
        if r["purged"]:
            note += f" (purged {r['purged']})"
        if r["cores"]["foreign"] >= SHARED_CORES:
            note += " SHARED"
        lines.append([f"{r['rate']:,.0f}", f"{r['offered_per_s']:,}", f"{r['achieved_per_s']:,}",
                      f"{100 * r['achieved_ratio']:.1f}", f"{r['latency_ms_p50']:,}", f"{r['latency_ms_p99']:,}",
                      f"{r['latency_ms_p999']:,}", _us(us["brokers"]),
                      f"{_us(client['librdkafka'])}+{_us(client['python'])}", _us(us["controller"]),
                      _us(us["zookeeper"]), _us(us["other"]), _us(us["all"]),
                      f"{us['brokers'] / floor_us:.1f}" if us["brokers"] else "-",
                      str(r["records_per_produce_request"]), f"{r['cores']['all']:.2f}",
                      f"{r['cores']['load_client']:.2f}", f"{r['cores']['foreign']:.2f}", note])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    print("CPU columns: µs per acknowledged record by kind of process (load: librdkafka's threads + Python; "
          "brokers/floor: the brokers' µs in bare exchanges); cores: this run's in all, the load client's, and other "
          "processes' on the machine (SHARED: another run took some of the cores)")
    for line in [head] + sorted(lines[1:], key=lambda line: float(line[0].replace(",", ""))):
        print("  ".join(c.rjust(w) for c, w in zip(line, widths)))
    for r in sorted(result["rows"], key=lambda r: r["rate"]):
        print(f"{r['rate']:>8,.0f}/s " + breakdown_line(r["produce_ms"]))
    knee, limit = result["knee_per_s"], result["knee_limited_by"]
    print(f"knee ({n:,} partitions): " + ("none of the rates tried" if knee is None else f"{knee:,.0f} records/s")
          + {"cluster": "", "max rate": " (the highest rate tried, --max-rate: the knee is at least this)",
             "client": " (the next rate tried was beyond the load client: the cluster's knee is at least this)"}[limit])
    print(f"health: controller epoch changed {result['controller_epoch_changed']}, partitions with ISR < 3 "
          f"{result['partitions_isr_below_3']}, failed ISR updates {result['failed_isr_updates']}")


def machine() -> dict:
    import confluent_kafka

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True,
                            text=True).stdout.strip()
    return {"platform": platform.platform(), "node": platform.node(), "cores": os.cpu_count(),
            "python": platform.python_version(), "ray": ray.__version__,
            "confluent_kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0],
            "commit": commit, "loadavg_at_start": open("/proc/loadavg").read().split()[:3],
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 10000, 6])
    parser.add_argument("--rates", type=float, nargs="+", default=None,
                        help="offered rates to run in order (default: doubling from --start-rate, then bisecting)")
    parser.add_argument("--start-rate", type=float, default=None,
                        help="the first rate of the doubling (default 500, or 2,000 under 100 partitions)")
    parser.add_argument("--max-rate", type=float, default=1_024_000)
    parser.add_argument("--bisect", type=int, default=2, help="bisections between the last rate that met the knee "
                                                              "and the first above it that did not")
    parser.add_argument("--seconds", type=float, default=10, help="each rate's measured window")
    parser.add_argument("--warm-s", type=float, default=3, help="each rate offered this long before its window")
    parser.add_argument("--idle-s", type=float, default=5, help="the idle window of each cluster")
    parser.add_argument("--drain-timeout-s", type=float, default=60)
    parser.add_argument("--knee-p99-ms", type=float, default=50)
    parser.add_argument("--stop-p99-ms", type=float, default=500, help="a p99 above this stops the rates too")
    parser.add_argument("--linger-ms", type=float, default=5, help="the load client's linger.ms (librdkafka's default)")
    parser.add_argument("--floor-rate", type=float, default=2000, help="requests/s of the bare exchange floor")
    parser.add_argument("--floor-seconds", type=float, default=5)
    parser.add_argument("--profile-rate", type=float, default=None, help="profile the brokers at this rate (py-spy)")
    parser.add_argument("--profile-dir", default="/tmp/bench_capacity-profile")
    parser.add_argument("--out", default=f"/tmp/bench_capacity-{time.strftime('%Y%m%d-%H%M%S')}.json")
    args = parser.parse_args()
    started = time.monotonic()
    with embedded_zookeeper_and_ray() as env:
        info = machine()
        print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
        loop_before = python_loop_s()
        floor = exchange_floor(args.floor_rate, args.floor_seconds)
        print(f"calibration: Python loop of 5M additions {loop_before} s (best of 3); bare exchange floor "
              f"(uvloop, fixed frame, one request at a time) {floor['cpu_us_per_request']} µs CPU per request at "
              f"{floor['requests_per_s']:,} requests/s ({floor['cpu_pct_of_a_core']}% of a core)", flush=True)
        results = []
        for n in args.partitions:
            results.append(capacity(env.connect, n, args))
            print_table(results[-1], floor["cpu_us_per_request"])
            if results[-1]["profile"] is not None:
                print_profile(results[-1]["profile"])
            sys.stdout.flush()
        loop_after = python_loop_s()
    elapsed = round(time.monotonic() - started)
    print(f"\nknees (p99 <= {args.knee_p99_ms:g} ms, acknowledged >= {SERVED:.0%} of offered): " + "; ".join(
        f"{r['partitions']:,} partitions {'-' if r['knee_per_s'] is None else format(r['knee_per_s'], ',.0f')}/s"
        + ("" if r["knee_limited_by"] == "cluster" else f" (at least: {r['knee_limited_by']}-limited)")
        for r in results))
    print(f"calibration after: Python loop {loop_after} s (before: {loop_before} s); whole run {elapsed} s")
    out = {"machine": info, "args": vars(args), "python_loop_s": {"before": loop_before, "after": loop_after},
           "exchange_floor": floor, "elapsed_s": elapsed, "clusters": results}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"rows written to {args.out}")


if __name__ == "__main__":
    main()
