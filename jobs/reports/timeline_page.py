"""The timeline page of a run directory (timeline.html): what the faults did, at a glance, on one time
axis. Produce throughput and latency (produced/), ISR sizes and offline partitions
(partition_states.jsonl), controller epochs (load.jsonl), each partition's wait through each fault
(waits.jsonl: its recovery and its worst wait, as the summary counts them), and every fault
(faults.jsonl) shaded across all of them with its kind and target.

The page is one file opened from disk: SVG drawn here, inline CSS, and a few lines of script (a
cursor that reads out the time across the charts; window.onerror, which shows script errors on the
page). Nothing is fetched. `timeline_html` builds it from the records (pure); `write_timeline` reads
them from a run directory and writes the page beside them (jobs/experiments/summary.py, after summary.json). What a run
cut short left is enough: a missing file draws an empty chart, malformed lines are skipped.

Sized for runs of 1,000 partitions: partition state is drawn as counts (partitions per ISR size),
and only the partitions the faults touched get a bar (the load's waits, the probes' where no load
was measured), longest first, at most MAX_WAITING_ROWS of them and a note of how many more.
"""
from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from html import escape
from pathlib import Path
from typing import Iterable, NamedTuple

from actors.records import PRODUCED, Ack, RunReader
from jobs.measures import rundir
from jobs.measures.phases import PARTITION_PHASES
from jobs.measures.rundir import FaultRecord, LoadSample, PartitionWait, Source, StateSample, Summary
from jobs.measures.waits import percentile, source_of, touched

MAX_WAITING_ROWS = 40
MAX_BUCKETS = 240  # produce throughput and latency points across the run
LEFT, WIDTH, RIGHT = 120, 960, 20  # the charts' left margin (labels), plot width, right margin (px)
PLOT_HEIGHT = 150
ROW = 16  # a lane's row: a fault label, a partition's bar
FAULT_FILL = "#f4a261"
COLORS = ["#1d3557", "#2a9d8f", "#e9c46a", "#8d99ae", "#6a4c93"]  # one per ISR size, largest first
OFFLINE = "#d62828"
# a partition's phases (jobs/measures/phases.py: PARTITION_PHASES), drawn over its recovery bar; what is left red is unexplained
PHASE_COLORS = dict(zip(PARTITION_PHASES, ["#f4a261", "#adb5bd", "#8d99ae", "#6a4c93", "#1d3557", "#457b9d", "#2a9d8f",
                                           "#83c5be", "#a8dadc", "#e9c46a", "#e76f51", "#ffb4a2", "#b5838d",
                                           "#cdb4db", "#ffd6a5"], strict=True))


class Axis(NamedTuple):
    """The run's time axis: every chart maps wall-clock ms to the same x."""

    start_ms: float
    end_ms: float

    def x(self, ms: float) -> float:
        return LEFT + (ms - self.start_ms) / (self.end_ms - self.start_ms) * WIDTH


class Series(NamedTuple):
    name: str
    color: str
    points: list[tuple[float, float | None]]  # (ms, value); None breaks the line


class ProduceSeries(NamedTuple):
    bucket_ms: float
    throughput: Series  # records acknowledged per second
    latency_p50: Series
    latency_p99: Series


def produce_series(acks: Iterable[Ack], origin_ms: float, bucket_ms: float) -> ProduceSeries:
    """Acknowledgements per bucket of bucket_ms by when they arrived: throughput (an empty bucket is
    0/s, the dip a fault makes) and latency from send to acknowledgement (none in an empty bucket)."""
    latencies: dict[int, list[float]] = defaultdict(list)
    for a in acks:
        latencies[math.floor((a.acked_ms - origin_ms) / bucket_ms)].append(a.acked_ms - a.sent_ms)
    buckets = range(min(latencies), max(latencies) + 1) if latencies else range(0)
    middle = [origin_ms + (b + 0.5) * bucket_ms for b in buckets]
    ranked = [sorted(latencies.get(b, [])) for b in buckets]
    return ProduceSeries(
        bucket_ms,
        Series("acknowledged/s", "#1d3557", [(t, len(v) / bucket_ms * 1000) for t, v in zip(middle, ranked)]),
        Series("p50", "#2a9d8f", [(t, percentile(v, 50)) for t, v in zip(middle, ranked)]),
        Series("p99", "#e76f51", [(t, percentile(v, 99)) for t, v in zip(middle, ranked)]))


class IsrCount(NamedTuple):
    """A ZooKeeper sample as the page draws it: counts, not its partitions (a long run of 1,000
    partitions has millions of partition states)."""

    ts_ms: float
    isr_sizes: Counter  # ISR size -> partitions
    offline: int  # partitions without a leader: Kafka's OfflinePartitionsCount
    partitions: int

    @classmethod
    def of(cls, sample: StateSample) -> IsrCount:
        states = sample.partitions.values()
        return cls(sample.ts_ms, Counter(len(p.isr) for p in states), sum(p.leader < 0 for p in states), len(states))


def isr_series(counts: list[IsrCount]) -> list[Series]:
    """Partitions per ISR size at each ZooKeeper sample, largest ISR first, and the offline ones."""
    sizes = sorted({size for c in counts for size in c.isr_sizes}, reverse=True)
    out = [Series(f"ISR {size}", COLORS[i % len(COLORS)], [(c.ts_ms, c.isr_sizes[size]) for c in counts])
           for i, size in enumerate(sizes)]
    if counts:
        out.append(Series("offline", OFFLINE, [(c.ts_ms, c.offline) for c in counts]))
    return out


def controller_changes(samples: list[LoadSample]) -> list[LoadSample]:
    """The first load sample of each controller epoch (the run's first included)."""
    out: list[LoadSample] = []
    for s in samples:
        if s.controller_epoch is not None and (not out or s.controller_epoch != out[-1].controller_epoch):
            out.append(s)
    return out


def waiting_partitions(waits: list[PartitionWait]) -> list[tuple[str, list[PartitionWait]]]:
    """Each partition a fault touched with its waits (the load's, or the probes' where the load has none
    of that partition and fault: the producers', a consumer group's left to the run's report), the longest
    total recovery first."""
    mine = [w for w in waits if touched(w) and w.source is not Source.GROUP]
    loaded = {(w.fault_id, w.partition) for w in mine if w.source is Source.LOAD}
    by_partition: dict[str, list[PartitionWait]] = defaultdict(list)
    for w in mine:
        if w.source is Source.LOAD or (w.fault_id, w.partition) not in loaded:
            by_partition[w.partition].append(w)
    return sorted(by_partition.items(), key=lambda item: (-sum(w.recovery_ms for w in item[1]), item[0]))


def _axis(faults: list[FaultRecord], load: list[LoadSample], isr: list[IsrCount],
          waits: list[PartitionWait]) -> Axis | None:
    times = [t for f in faults for t in (f.injected_ms, f.ended_ms) if t is not None]
    times += [s.ts_ms for s in load] + [c.ts_ms for c in isr] + \
        [w.fault_ms + max(w.recovery_ms, w.worst_wait_ms) for w in waits]
    return Axis(min(times), max(times)) if times else None


def timeline_html(title: str, faults: list[FaultRecord], load: list[LoadSample], states: Iterable[StateSample],
                  waits: list[PartitionWait], acks: Iterable[Ack], summary: Summary | None = None) -> str:
    """The page. `states` and `acks` are read once, as they stream (partition_states.jsonl and
    produced/ are a run's largest files)."""
    faults = sorted(faults, key=lambda f: (f.injected_ms, f.fault_id))
    load = sorted(load, key=lambda s: s.ts_ms)
    counts = sorted(map(IsrCount.of, states), key=lambda c: c.ts_ms)
    provisional = _axis(faults, load, counts, waits)
    origin = provisional.start_ms if provisional else 0.0
    span = provisional.end_ms - origin if provisional else 0.0
    produce = produce_series(acks, origin, max(1000.0, math.ceil(span / MAX_BUCKETS / 1000) * 1000))
    times = [t for t, _ in produce.throughput.points] + ([origin, origin + span] if provisional else [])
    start, end = (min(times), max(times)) if times else (0.0, 1000.0)
    axis = Axis(start, max(end, start + 1000))
    bucket_s = f"{produce.bucket_ms / 1000:g} s"
    isr = isr_series(counts)
    sections = [
        _section("Faults", "each fault from its injection to its end; a thin line: no end recorded",
                 _fault_lane(faults, axis)),
        _section("Produce throughput", f"records acknowledged per second, per {bucket_s}",
                 _chart([produce.throughput], faults, axis, "no acknowledged records"), [produce.throughput]),
        _section("Produce latency", f"send to acknowledgement, ms, per {bucket_s}",
                 _chart([produce.latency_p99, produce.latency_p50], faults, axis, "no acknowledged records"),
                 [produce.latency_p50, produce.latency_p99]),
        _section("ISR sizes", "partitions per ISR size and offline partitions, at each ZooKeeper sample",
                 _chart(isr, faults, axis, "no ZooKeeper samples"), isr),
        _section("Controller", "the first load sample of each controller epoch", _controller_lane(load, faults, axis)),
        _unavailable_section(waits, faults, axis, counts[-1].partitions if counts else None),
    ]
    return PAGE.format(
        title=escape(title), header=_header(title, summary, axis, len(faults)), sections="\n".join(sections),
        fault_table=_fault_table(faults, axis), start_ms=f"{axis.start_ms:.0f}",
        span_ms=f"{axis.end_ms - axis.start_ms:.0f}", left=LEFT, width=WIDTH, script=SCRIPT, fault=FAULT_FILL,
        offline=OFFLINE)


def write_timeline(run_dir: Path) -> Path:
    """Reads the run directory's records and writes its timeline.html; the page's path."""
    reader = RunReader(run_dir)
    page = timeline_html(
        run_dir.name, list(reader.lines(rundir.FAULTS, FaultRecord)), list(reader.lines(rundir.LOAD, LoadSample)),
        reader.lines(rundir.PARTITION_STATES, StateSample),
        list(reader.lines(rundir.WAITS, PartitionWait)),
        (a for a in reader.lines(PRODUCED, Ack) if source_of(a.record_id) is Source.LOAD),
        reader.document(rundir.SUMMARY, Summary))
    path = run_dir / rundir.TIMELINE
    path.write_text(page)
    return path


# -- drawing -------------------------------------------------------------------

def _nice_step(extent: float, ticks: int) -> float:
    """A step of 1, 2 or 5 times a power of ten that cuts extent into about `ticks` parts."""
    raw = max(extent, 1e-9) / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _number(v: float) -> str:
    return f"{v:,.0f}" if v >= 1 or v == 0 else f"{v:.2g}"


def _seconds(axis: Axis, ms: float) -> str:
    return f"+{(ms - axis.start_ms) / 1000:.1f} s"


def _svg(height: float, body: list[str]) -> str:
    total = LEFT + WIDTH + RIGHT
    return (f'<svg class="chart" viewBox="0 0 {total} {height:.0f}" width="{total}" height="{height:.0f}" '
            f'role="img">{"".join(body)}'
            f'<line class="cursor" x1="0" x2="0" y1="0" y2="{height:.0f}" visibility="hidden"/></svg>')


def _time_ticks(axis: Axis, top: float, height: float) -> list[str]:
    step = _nice_step((axis.end_ms - axis.start_ms) / 1000, 10) * 1000
    out = [f'<line class="axis" x1="{LEFT}" x2="{LEFT + WIDTH}" y1="{top + height}" y2="{top + height}"/>']
    t = 0.0
    while axis.start_ms + t <= axis.end_ms:
        x = axis.x(axis.start_ms + t)
        out.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + height}"/>'
                   f'<text class="tick" x="{x:.1f}" y="{top + height + 13}" text-anchor="middle">{t / 1000:g} s</text>')
        t += step
    return out


def _fault_shading(faults: list[FaultRecord], axis: Axis, top: float, height: float) -> list[str]:
    out = []
    for f in faults:
        x = axis.x(f.injected_ms)
        shape = f'class="fault" x="{x:.1f}" y="{top}" width="{max(1.5, axis.x(f.ended_ms) - x):.1f}"' \
            if f.ended_ms is not None else f'class="fault instant" x="{x:.1f}" y="{top}" width="1.5"'
        out.append(f'<rect {shape} height="{height}">'
                   f'<title>{escape(f.label)}</title></rect>')
    return out


def _path(series: Series, axis: Axis, y) -> str:
    d, pen_down = [], False
    for t, v in series.points:
        if v is None:
            pen_down = False
            continue
        d.append(f'{"L" if pen_down else "M"}{axis.x(t):.1f},{y(v):.1f}')
        pen_down = True
    return f'<path d="{" ".join(d)}" stroke="{series.color}" fill="none" stroke-width="1.5"/>'


def _lane(faults: list[FaultRecord], axis: Axis, top: float, height: float) -> list[str]:
    """What every lane of the page starts with: the faults shaded across it and the time ticks."""
    return _fault_shading(faults, axis, top, height) + _time_ticks(axis, top, height)


def _empty_note(y: float, text: str) -> str:
    """A lane's note, centred, when it has nothing to draw."""
    return f'<text class="empty" x="{LEFT + WIDTH / 2}" y="{y}" text-anchor="middle">{escape(text)}</text>'


def _chart(series: list[Series], faults: list[FaultRecord], axis: Axis, empty: str) -> str:
    top, height = 8, PLOT_HEIGHT
    body = _lane(faults, axis, top, height)
    values = [v for s in series for _, v in s.points if v is not None]
    if not values:
        body.append(_empty_note(top + height / 2, empty))
        return _svg(top + height + 20, body)
    step = _nice_step(max(values), 4)
    high = step * math.ceil(max(values) / step) or step

    def y(v: float) -> float:
        return top + height - v / high * height
    for k in range(round(high / step) + 1):
        v = k * step
        body.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + WIDTH}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>'
                    f'<text class="tick" x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{_number(v)}</text>')
    body += [_path(s, axis, y) for s in series]
    return _svg(top + height + 20, body)


def _fault_lane(faults: list[FaultRecord], axis: Axis) -> str:
    """A bar per fault and its label (after the bar's start, or before it near the right edge), in as few
    rows as keep the labels apart."""
    row_ends: list[float] = []  # the x where each row's last label ends
    placed = []
    for f in faults:
        x = axis.x(f.injected_ms)
        end = axis.x(f.ended_ms) if f.ended_ms is not None else x
        label = f"{f.fault_id}: {f.label}"
        text_width = 6.5 * len(label)
        before = x + 4 + text_width > LEFT + WIDTH + RIGHT
        left = x - 4 - text_width if before else x
        row = next((i for i, e in enumerate(row_ends) if e <= left), len(row_ends))
        row_ends[row:row + 1] = [max(end, x + 4 + (0 if before else text_width)) + 8]
        placed.append((f, row, x, end, label, before))
    top, height = 8, max(1, len(row_ends)) * ROW
    body = _lane(faults, axis, top, height)
    for f, row, x, end, label, before in placed:
        y = top + row * ROW
        tip = escape(f"{f.label}: {_seconds(axis, f.injected_ms)}"
                     + (f" to {_seconds(axis, f.ended_ms)}" if f.ended_ms is not None else "")
                     + (f"; {f.detail}" if f.detail else ""))
        body.append(f'<g class="fault-label"><title>{tip}</title>'
                    f'<rect x="{x:.1f}" y="{y + 2}" width="{max(1.5, end - x):.1f}" height="{ROW - 4}" '
                    f'fill="{FAULT_FILL}"/><text x="{x - 4 if before else x + 4:.1f}" y="{y + ROW - 4}" '
                    f'text-anchor="{"end" if before else "start"}">{escape(label)}</text></g>')
    if not faults:
        body.append(_empty_note(top + height - 3, "no faults"))
    return _svg(top + height + 20, body)


def _controller_lane(load: list[LoadSample], faults: list[FaultRecord], axis: Axis) -> str:
    top, height = 8, 2 * ROW
    body = _lane(faults, axis, top, height)
    changes = controller_changes(load)
    for i, s in enumerate(changes):
        x, y = axis.x(s.ts_ms), top + (i % 2) * ROW + ROW / 2
        body.append(f'<g class="epoch"><title>{_seconds(axis, s.ts_ms)}: controller epoch {s.controller_epoch}, '
                    f'broker {s.controller_id}</title><path d="M{x:.1f},{y - 5} l5,5 l-5,5 l-5,-5 z" fill="#6a4c93"/>'
                    f'<text x="{x + 7:.1f}" y="{y + 4}">epoch {s.controller_epoch} (broker {s.controller_id})</text></g>')
    if not changes:
        body.append(_empty_note(top + ROW + 4, "no load samples"))
    return _svg(top + height + 20, body)


def _unavailable_section(waits: list[PartitionWait], faults: list[FaultRecord], axis: Axis,
                         partitions: int | None) -> str:
    rows = waiting_partitions(waits)
    shown = rows[:MAX_WAITING_ROWS]
    top, height = 8, max(1, len(shown)) * ROW
    body = _lane(faults, axis, top, height)
    labels = {f.fault_id: f.label for f in faults}
    for i, (tp, ws) in enumerate(shown):
        y = top + i * ROW
        body.append(f'<text class="tick" x="{LEFT - 6}" y="{y + ROW - 4}" text-anchor="end">{escape(tp[-18:])}'
                    f'<title>{escape(tp)}</title></text>')
        for w in ws:
            tip = escape(f"{tp} ({w.role.value}, {w.source.value}): recovery {w.recovery_ms:,.0f} ms"
                         + (" or more (censored)" if w.recovery_censored else "")
                         + f", worst wait {w.worst_wait_ms:,.0f} ms"
                         + (" or more" if w.worst_wait_censored else "") + f" from fault {w.fault_id}"
                         + (f" ({labels[w.fault_id]})" if w.fault_id in labels else ""))
            start, end = axis.x(w.fault_ms), axis.x(w.fault_ms + w.recovery_ms)
            body.append(f'<rect class="{"censored" if w.recovery_censored else "unavailable"}" x="{start:.1f}" '
                        f'y="{y + 2}" width="{max(1.5, end - start):.1f}" height="{ROW - 4}"><title>{tip}</title></rect>')
            at = w.fault_ms
            for phase, ms in w.phases.items():  # in the order they ran; the red left over is unexplained
                x0, x1 = axis.x(at), axis.x(at + ms)
                at += ms
                if x1 - x0 >= 0.5:
                    body.append(f'<rect class="phase" x="{x0:.1f}" y="{y + 2}" width="{x1 - x0:.1f}" height="{ROW - 4}" '
                                f'fill="{PHASE_COLORS.get(phase, "#999")}"><title>{escape(f"{tp}: {phase} {ms:,.0f} ms")}'
                                f'</title></rect>')
            worst = axis.x(w.fault_ms + w.worst_wait_ms)
            body.append(f'<line class="worst" x1="{start:.1f}" x2="{max(start + 1.5, worst):.1f}" y1="{y + ROW - 2}" '
                        f'y2="{y + ROW - 2}"><title>{tip}</title></line>')
    if not rows:
        body.append(_empty_note(top + ROW - 4, "no partition was measured through a fault (waits.jsonl)"))
    of = f" of {partitions:,}" if partitions is not None else ""
    note = (f"{len(rows):,}{of} partitions the faults touched: a bar from the fault to the partition's recovery, "
            f"coloured by phase, red where unexplained (dashed: censored, not recovered within the horizon); a "
            f"line as long as its worst wait")
    if len(rows) > len(shown):
        rest = sum(w.recovery_ms for _, ws in rows[len(shown):] for w in ws)
        note += f"; the longest {len(shown)} shown"
        more = f'<p class="more">{len(rows) - len(shown):,} more partitions waited ' \
               f'({rest / 1000:,.1f} s of recovery in all), each for less time than those shown.</p>'
    else:
        more = ""
    legend = [Series(p[:-3].replace("_", " "), c, []) for p, c in PHASE_COLORS.items()] + \
        [Series("unexplained", OFFLINE, [])]
    return _section("Partitions waiting", note, _svg(top + height + 20, body) + more, legend)


def _section(title: str, note: str, content: str, legend: list[Series] = ()) -> str:
    keys = "".join(f'<span class="key"><i style="background:{s.color}"></i>{escape(s.name)}</span>' for s in legend)
    return f'<section><h2>{escape(title)} <small>{escape(note)}</small>{keys}</h2>{content}</section>'


def _header(title: str, summary: Summary | None, axis: Axis, faults: int) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(axis.start_ms / 1000))
    facts = [f"from {started}, {(axis.end_ms - axis.start_ms) / 1000:,.0f} s", f"{faults} faults"]
    if summary is not None:
        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v:,.0f}"
        facts += [f"{summary.failovers} failovers", f"{summary.acked:,} records acknowledged",
                  *(f"{source.value}: recovery p50 / p99 {ms(st.recovery_ms_p50)} / {ms(st.recovery_ms_p99)} ms, "
                    f"worst wait p50 / p99 {ms(st.worst_wait_ms_p50)} / {ms(st.worst_wait_ms_p99)} ms, "
                    f"{st.censored} censored" for source, st in summary.waits.items() if st.partitions),
                  f"produce latency p50 / p99 {ms(summary.produce_latency_ms_p50)} / "
                  f"{ms(summary.produce_latency_ms_p99)} ms",
                  "invariants OK" if summary.check.ok else "invariants FAILED (kray check)"]
    return f'<h1>{escape(title)}</h1><p>{escape("; ".join(facts))}</p>'


def _fault_table(faults: list[FaultRecord], axis: Axis) -> str:
    rows = "".join(
        f'<tr><td>{f.fault_id}</td><td>{escape(f.label)}</td><td>{_seconds(axis, f.injected_ms)}</td>'
        f'<td>{"-" if f.ended_ms is None else f"{(f.ended_ms - f.injected_ms) / 1000:.1f} s"}</td>'
        f'<td>{escape(f.detail)}</td></tr>' for f in faults)
    return ('<table><thead><tr><th>#</th><th>fault</th><th>injected</th><th>lasted</th><th>detail</th></tr>'
            f'</thead><tbody>{rows}</tbody></table>') if faults else "<p>No faults were injected.</p>"


SCRIPT = """
const page = document.getElementById("timeline");
const start = Number(page.dataset.startMs), span = Number(page.dataset.spanMs);
const left = Number(page.dataset.left), width = Number(page.dataset.width);
const readout = document.getElementById("cursor");
for (const svg of document.querySelectorAll("svg.chart")) {
  svg.addEventListener("mousemove", (event) => {
    const box = svg.getBoundingClientRect();
    const x = (event.clientX - box.left) * svg.viewBox.baseVal.width / box.width;
    if (x < left || x > left + width) return;
    for (const line of document.querySelectorAll("line.cursor")) {
      line.setAttribute("x1", x);
      line.setAttribute("x2", x);
      line.setAttribute("visibility", "visible");
    }
    const ms = (x - left) / width * span;
    readout.textContent = `+${(ms / 1000).toFixed(1)} s, ${new Date(start + ms).toISOString().slice(11, 23)} UTC`;
  });
}
"""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}: timeline</title>
<style>
body {{ font: 13px system-ui, sans-serif; margin: 16px; color: #222; }}
h1 {{ font-size: 18px; margin: 0 0 4px; }}
h2 {{ font-size: 14px; margin: 14px 0 2px; }}
h2 small {{ font-weight: normal; color: #666; margin-right: 12px; }}
.key {{ font-weight: normal; margin-right: 10px; }}
.key i {{ display: inline-block; width: 10px; height: 10px; margin-right: 4px; }}
#cursor {{ position: sticky; top: 0; background: #fff; color: #444; margin: 0; padding: 2px 0; }}
#errors {{ color: #b00; }}
svg {{ display: block; max-width: 100%; height: auto; }}
svg text {{ font-size: 11px; fill: #222; }}
svg .tick {{ fill: #666; }}
svg .empty {{ fill: #999; }}
.grid {{ stroke: #eee; }}
.axis {{ stroke: #999; }}
.fault {{ fill: {fault}; fill-opacity: 0.25; }}
.fault.instant {{ fill-opacity: 0.9; }}
.unavailable {{ fill: {offline}; }}
.censored {{ fill: {offline}; fill-opacity: 0.45; stroke: {offline}; stroke-dasharray: 3 2; }}
.worst {{ stroke: #1d3557; stroke-width: 2; }}
.cursor {{ stroke: #000; stroke-dasharray: 3 3; }}
.more {{ color: #666; margin: 2px 0 0 {left}px; }}
table {{ border-collapse: collapse; margin-top: 14px; }}
td, th {{ border: 1px solid #ddd; padding: 2px 8px; text-align: left; }}
</style>
</head>
<body>
<pre id="errors" hidden></pre>
<script>
window.onerror = (message, source, line) => {{
  const errors = document.getElementById("errors");
  errors.hidden = false;
  errors.textContent += `Script error: ${{message}} (line ${{line}})\\n`;
}};
</script>
<header>{header}</header>
<p id="cursor">Point at a chart to read its time.</p>
<main id="timeline" data-start-ms="{start_ms}" data-span-ms="{span_ms}" data-left="{left}" data-width="{width}">
{sections}
</main>
<h2>Faults</h2>
{fault_table}
<script>{script}</script>
</body>
</html>
"""
