"""jobs.reports.timeline_page: the run's page built from records made in memory, read as HTML, and opened in a real
headless Chromium (tests/chromium.py)."""
from __future__ import annotations

import re
from html.parser import HTMLParser

from actors.records import PRODUCED, Ack, RunWriter
from jobs.measures import rundir
from jobs.measures.rundir import (
    FaultKind,
    FaultRecord,
    LoadSample,
    PartitionLeadership,
    PartitionWait,
    Role,
    Source,
    StateSample,
)
from jobs.reports.timeline_page import (
    MAX_WAITING_ROWS,
    controller_changes,
    produce_series,
    timeline_html,
    waiting_partitions,
    write_timeline,
)
from tests.chromium import open_in_chromium

T0 = 1_700_000_000_000.0  # wall-clock ms of the run's first sample
FAULTS = [
    FaultRecord(fault_id=1, kind=FaultKind.CUT_REPLICATION, target=2, injected_ms=T0 + 3000, ended_ms=T0 + 7000,
                detail="4 links"),
    FaultRecord(fault_id=2, kind=FaultKind.KILL_CONTROLLER, target=1, injected_ms=T0 + 10_000),  # no end: a line
    FaultRecord(fault_id=3, kind=FaultKind.SPLIT_BROKERS, injected_ms=T0 + 14_000, ended_ms=T0 + 17_000),
    FaultRecord(fault_id=4, kind=FaultKind.RESTART_BROKER, target=3, injected_ms=T0 + 20_000,
                detail="failed: RuntimeError: no broker to pick as <random> & \"others\""),
]


def load_sample(second: int, epoch: int, controller: int) -> LoadSample:
    return LoadSample(ts_ms=T0 + second * 1000, acked_total=second * 100, produce_rate=100, consumed_total=0,
                      inbox_depth=0, brokers_alive=3, controller_id=controller, controller_epoch=epoch)


def state(second: int, isr: list[int], leader: int = 1, partitions: int = 3) -> StateSample:
    return StateSample(ts_ms=T0 + second * 1000, live_brokers=[1, 2, 3], partitions={
        f"orders-{p}": PartitionLeadership(leader=leader, leader_epoch=1, isr=isr) for p in range(partitions)})


def wait(fault: FaultRecord, tp: str, recovery_ms: float, role: Role = Role.LEADER, source: Source = Source.LOAD,
         censored: bool = False) -> PartitionWait:
    return PartitionWait(fault_id=fault.fault_id, fault_kind=fault.kind, partition=tp, source=source, role=role,
                         fault_ms=fault.injected_ms, observed_ms=30_000, recovery_ms=recovery_ms,
                         recovery_censored=censored, worst_wait_ms=recovery_ms + 20, records=5, rate=10,
                         phases={"detection_ms": recovery_ms / 4, "hw_ms": recovery_ms / 2},
                         unexplained_ms=recovery_ms / 4)


def ack(n: int, sent_ms: float, acked_ms: float, partition: int = 0) -> Ack:
    return Ack(topic="orders", partition=partition, offset=n, record_id=f"p0-{n}", broker_id=1, leader_epoch=1,
               sent_ms=sent_ms, acked_ms=acked_ms)


def acks() -> list[Ack]:
    """10 a second, 5 ms each, but none from 3 s to 5 s (the cut), and 800 ms each just after it."""
    out = []
    for i, ms in enumerate(range(0, 25_000, 100)):
        if 3000 <= ms < 5000:
            continue
        out.append(ack(i, T0 + ms - (800 if 5000 <= ms < 6000 else 5), T0 + ms))
    return out


def records() -> dict:
    return {"faults": FAULTS,
            "load": [load_sample(s, 1 if s < 11 else 2, 1 if s < 11 else 3) for s in range(25)],
            "states": [state(s, [1, 2] if 3 <= s < 8 else [1, 2, 3]) for s in range(25)],
            "waits": [wait(FAULTS[0], "orders-0", 2000), wait(FAULTS[0], "orders-1", 3500, Role.FOLLOWER),
                      wait(FAULTS[0], "orders-1", 3400, Role.FOLLOWER, Source.PROBE),  # the load's is shown
                      wait(FAULTS[0], "orders-2", 900, Role.OTHER),  # a bystander: no bar
                      wait(FAULTS[2], "orders-2", 8000, Role.CLUSTER, Source.PROBE, censored=True)]}


def page() -> str:
    return timeline_html("20261126-short-links", acks=acks(), **records())


class Tags(HTMLParser):
    """Every element opened is closed, in order (void elements aside): the page is well formed."""

    VOID = {"meta", "br", "hr", "img", "input", "link"}

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.mismatched: list[str] = []
        self.seen: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.seen.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.seen.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.open or self.open.pop() != tag:
            self.mismatched.append(tag)


def parsed(html: str) -> Tags:
    tags = Tags()
    tags.feed(html)
    tags.close()
    return tags


def assert_self_contained(html: str) -> None:
    tags = parsed(html)
    assert html.startswith("<!doctype html>") and not tags.open and not tags.mismatched
    assert {"html", "head", "body", "main", "svg", "script"} <= {tag for tag, _ in tags.seen}
    assert not [(tag, attrs) for tag, attrs in tags.seen
                if tag in ("link", "img", "iframe") or (tag == "script" and "src" in attrs)]
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", html, re.IGNORECASE)
    assert "http://" not in html and "https://" not in html and "@import" not in html


def test_the_page_names_every_fault_with_its_kind_and_target_and_fetches_nothing():
    html = page()
    assert_self_contained(html)
    for label in ("1: cut-replication 2", "2: kill-controller 1", "3: split-brokers", "4: restart-broker 3"):
        assert f'text-anchor="start">{label}</text>' in html  # in the faults lane, after the fault's start
    table = html[html.index("<table>"):]
    assert all(f"<td>{f.label}</td>" in table for f in FAULTS)
    assert "<td>4.0 s</td>" in table and "<td>-</td>" in table  # lasted, or no end recorded
    assert "&lt;random&gt; &amp; &quot;others&quot;" in table and "<random>" not in html  # escaped
    assert 'id="errors"' in html and "window.onerror" in html


def test_a_fault_without_an_end_is_a_thin_line_and_one_with_an_end_spans_it():
    html = page()
    shading = re.findall(r'<rect class="fault( instant)?" x="[\d.]+" y="8" width="([\d.]+)" height="150">'
                         r'<title>([^<]+)</title>', html)
    widths = {label: (float(w), instant) for instant, w, label in shading}
    assert widths["kill-controller 1"] == widths["restart-broker 3"] == (1.5, " instant")
    assert widths["cut-replication 2"][0] > 100 and widths["split-brokers"][0] > 50  # 4 s and 3 s of a 25 s run


def test_a_fault_near_the_end_of_the_run_is_labelled_before_its_start():
    late = FaultRecord(fault_id=5, kind=FaultKind.CUT_BROKER_ZOOKEEPER, target=2, injected_ms=T0 + 24_500)
    html = timeline_html("late", [*FAULTS, late], acks=acks(), **{k: v for k, v in records().items() if k != "faults"})
    assert 'text-anchor="end">5: cut-broker-zookeeper 2</text>' in html


def test_an_empty_run_gets_a_page_that_says_so():
    html = timeline_html("empty", [], [], [], [], [])
    assert_self_contained(html)
    assert "No faults were injected." in html and "no acknowledged records" in html
    assert "no ZooKeeper samples" in html and "no partition was measured through a fault" in html


def test_produce_throughput_drops_to_zero_where_nothing_was_acknowledged_and_latency_has_a_gap():
    series = produce_series(acks(), T0, 1000)
    rate = [v for _, v in series.throughput.points]
    assert rate[:3] == [10, 10, 10] and rate[3:5] == [0, 0] and len(rate) == 25
    p50 = [v for _, v in series.latency_p50.points]
    assert p50[0] == 5 and p50[3] is None and p50[4] is None and p50[5] == 800
    assert produce_series([], T0, 1000).throughput.points == []


def test_controller_epochs_are_marked_where_they_change():
    changes = controller_changes(records()["load"])
    assert [(s.controller_epoch, s.controller_id, s.ts_ms - T0) for s in changes] == [(1, 1, 0), (2, 3, 11_000)]


def test_of_a_thousand_partitions_only_the_unavailable_get_bars_longest_first_with_a_note_of_the_rest():
    fault = FAULTS[0]
    down = [wait(fault, f"orders-{p}", 100 + p) for p in range(100)]  # orders-99 the longest
    html = timeline_html("big", [fault], [], [state(0, [1, 2, 3], partitions=1000)], down, [])
    assert_self_contained(html)
    bars = re.findall(r'text-anchor="end">(orders-\d+)<title>', html)
    assert bars == [f"orders-{p}" for p in range(99, 99 - MAX_WAITING_ROWS, -1)]
    assert "100 of 1,000 partitions" in html and "60 more partitions waited" in html
    ws = [wait(fault, "a-0", 10), wait(fault, "b-0", 30), wait(FAULTS[1], "a-0", 25), wait(fault, "c-0", 99, Role.OTHER),
          wait(fault, "d-0", 500, source=Source.GROUP), wait(fault, "b-0", 700, source=Source.GROUP)]
    # 35 ms in all, then 30; c-0 a bystander; a consumer group's waits are not the producers'
    assert [(tp, [w.source for w in ws]) for tp, ws in waiting_partitions(ws)] == \
        [("a-0", [Source.LOAD, Source.LOAD]), ("b-0", [Source.LOAD])]


def test_write_timeline_reads_the_run_directory(tmp_path):
    run_dir = tmp_path / "20261126-short-links-ab12"
    writer = RunWriter(run_dir)
    parts = records()
    writer.write(rundir.FAULTS, parts["faults"])
    writer.write(rundir.LOAD, parts["load"])
    writer.write(rundir.PARTITION_STATES, parts["states"])
    writer.write(rundir.WAITS, parts["waits"])
    writer.write(PRODUCED, acks())
    writer.close()
    (run_dir / PRODUCED / "part-00001.parquet").write_bytes(b"PAR1")  # a run cut short still gets its page
    path = write_timeline(run_dir)
    assert path == run_dir / rundir.TIMELINE
    assert path.read_text() == page().replace("20261126-short-links", run_dir.name)


def test_the_page_runs_in_chromium_without_errors_and_shows_every_fault(tmp_path):
    path = tmp_path / rundir.TIMELINE
    path.write_text(page())
    shown = open_in_chromium(path)
    assert shown.console == [] and shown.script_errors == ""
    assert all(f">{f.fault_id}: {f.label}</text>" in shown.dom for f in FAULTS)


def test_pointing_at_a_chart_reads_out_its_time_on_every_chart(tmp_path):
    path = tmp_path / rundir.TIMELINE
    point = """<script>
const chart = document.querySelectorAll("svg.chart")[2], box = chart.getBoundingClientRect();
chart.dispatchEvent(new MouseEvent("mousemove", {clientX: box.left + box.width / 2, clientY: box.top + 20}));
</script></body>"""
    path.write_text(page().replace("</body>", point))
    shown = open_in_chromium(path)
    assert shown.console == [] and shown.script_errors == ""
    readout = re.search(r'<p id="cursor">([^<]*)</p>', shown.dom).group(1)
    assert re.fullmatch(r"\+\d+\.\d s, \d\d:\d\d:\d\d\.\d{3} UTC", readout), readout
    cursors = re.findall(r'<line class="cursor" x1="([\d.]+)"[^>]*visibility="(\w+)"', shown.dom)
    assert len(cursors) == 6 and {visibility for _, visibility in cursors} == {"visible"}
    assert len({x for x, _ in cursors}) == 1  # one time, on every chart


def test_the_chromium_check_sees_a_script_error(tmp_path):
    """The check above would fail on a page whose script breaks: on the console and in the page itself."""
    path = tmp_path / rundir.TIMELINE
    path.write_text(page().replace("</body>", "<script>readout.textContent = undefinedName;</script></body>"))
    shown = open_in_chromium(path)
    assert any("undefinedName is not defined" in line for line in shown.console)
    assert "undefinedName is not defined" in shown.script_errors


def test_each_touched_partition_gets_its_recovery_bar_and_worst_wait_line_censored_ones_hatched():
    html = page()
    bars = re.findall(r'<rect class="(unavailable|censored)"[^>]*><title>([^<]*)</title>', html)
    assert [(cls, tip.split(":")[0]) for cls, tip in bars] == [
        ("censored", "orders-2 (cluster, probe)"), ("unavailable", "orders-1 (follower, load)"),
        ("unavailable", "orders-0 (leader, load)")]  # the longest recovery first; the bystander has none
    assert "recovery 8,000 ms or more (censored)" in html and html.count('<line class="worst"') == 3
    assert "3 of 3 partitions the faults touched" in html
    segments = re.findall(r'<rect class="phase"[^>]*fill="([^"]+)"><title>([^<]*)</title>', html)
    assert ("#8d99ae", "orders-0: detection_ms 500 ms") in segments and ("#b5838d", "orders-0: hw_ms 1,000 ms") in \
        segments and "unexplained" in html
