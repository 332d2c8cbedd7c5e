"""The analysis as people read it: PNG charts, report.md beside the Parquet tables, and the short
summary table printed at the end of the job."""
from __future__ import annotations

from pathlib import Path

from jobs.measures.phases import (CONTROLLER_PHASES, COORDINATOR_STEPS, FEATURES, MEASURES, PARTITION_PHASES,
                                  PER_FAULT_SOURCES, PHASE_OWNERS, UNEXPLAINED, Analysis, bucket_order)

# the phase chart: a hue family per owner of a partition's phases (PHASE_OWNERS), a shade of it per phase: its
# colour map, and the part of it the shades spread over (wide for the brokers' seven; the light ends, near white,
# left out)
OWNER_COLORMAPS = {"controller": ("Blues", 0.35, 0.95), "brokers": ("YlGn", 0.2, 0.92), "client": ("Oranges", 0.4, 0.8),
                   "fault": ("RdPu", 0.45, 0.85), "unexplained": ("Greys", 0.5, 0.5)}
OWNER_TITLES = {"controller": "the controller", "brokers": "the brokers", "client": "the client", "fault": "the fault",
                "unexplained": "after the last step seen"}


def _fmt(v, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _interval(low, high, digits: int = 2) -> str:
    return "" if low is None else f" [{low:+.{digits}f}, {high:+.{digits}f}]"


def summary_table(a: Analysis) -> str:
    """Per source, detector and load bucket: partition-faults touched, censored, recovery and worst wait
    p50/p99 ms; and the controller's phases p50/p99 per failover."""
    by = {(r["source"], r["detector"], r["bucket"], r["measure"]): r for r in a.percentiles}
    keys = sorted({k[:3] for k in by if k[0] not in PER_FAULT_SOURCES},
                  key=lambda k: (k[0], bool(k[1]), bucket_order(k[2])))
    head = ["source", "detector", "partitions affected", "partition-faults", "censored",
            *(f"{m[:-3].replace('_', ' ')} p50/p99" for m in MEASURES)]
    rows = [[s, "-" if d is None else ("on" if d else "off"), b, str(by[(s, d, b, MEASURES[0])]["n"]),
             str(by[(s, d, b, MEASURES[0])]["censored"]),
             *(f"{_fmt(by[(s, d, b, m)]['p50'])}/{_fmt(by[(s, d, b, m)]['p99'])}" for m in MEASURES)]
            for s, d, b in keys]
    lines = _columns(head, rows)
    controller = sorted({k[1:3] for k in by if k[0] == "controller"}, key=lambda k: (bool(k[0]), bucket_order(k[1])))
    if controller:
        lines += [""] + _columns(
            ["detector", "partitions affected", "failovers", *(f"{p[:-3]} p50/p99" for p in CONTROLLER_PHASES)],
            [["on" if d else "off", b, str(by[("controller", d, b, CONTROLLER_PHASES[0])]["n"]),
              *(f"{_fmt(by[('controller', d, b, p)]['p50'])}/{_fmt(by[('controller', d, b, p)]['p99'])}"
                for p in CONTROLLER_PHASES)] for d, b in controller])
    coordinator = sorted({k[1:3] for k in by if k[0] == "coordinator"}, key=lambda k: (bool(k[0]), bucket_order(k[1])))
    if coordinator:
        lines += ["", "The consumer group's coordinator, ms after a fault on its broker:"] + _columns(
            ["detector", "partitions affected", "faults", *(f"{s} p50/p99" for s in COORDINATOR_STEPS.values())],
            [["on" if d else "off", b, str(by[("coordinator", d, b, next(iter(COORDINATOR_STEPS)))]["n"]),
              *(f"{_fmt(by[('coordinator', d, b, s)]['p50'])}/{_fmt(by[('coordinator', d, b, s)]['p99'])}"
                for s in COORDINATOR_STEPS)] for d, b in coordinator])
    placed = [f for f in a.faults if f["knee_fraction"] is not None and f["source"] == "load"]
    if placed:
        low, high = min(f["knee_fraction"] for f in placed), max(f["knee_fraction"] for f in placed)
        knees = ", ".join(f"{k:,.0f}" for k in sorted({f["knee_per_s"] for f in placed}))
        lines += ["", f"The load offered at the faults: {low:.0%} to {high:.0%} of the knee ({knees} records/s, p99 <= "
                      f"50 ms): " + ("every fault below it." if high < 1 else "NOT every fault below it: a failover "
                                     "there measures a queue as well.")]
    bad = sum(i["malformed"] for i in a.inputs)
    lines.append(f"{a.partitions} partition-fault rows and {a.failovers} failovers from {len(a.inputs)} runs; {bad} "
                 f"malformed lines; Spark on Ray: {'yes' if a.on_ray else 'no'}. Report: {a.out / 'report.md'}")
    return "\n".join(lines)


def _columns(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    return ["  ".join(h.ljust(w) for h, w in zip(head, widths))] + [
        "  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]


def write_report(a: Analysis, sample: list[dict]) -> Path:
    charts = _charts(a, sample)
    lines = ["# Failover latency against load", "",
             f"{a.partitions} partitions through a fault (each source counted apart) and {a.failovers} controller "
             f"failovers from {len(a.inputs)} runs, analysed with Spark on Ray (RayDP: {'yes' if a.on_ray else 'no'}). "
             "Times in ms. The *recovery* is a partition's first acknowledgement of a record sent at or after the "
             "fault; its *worst wait* the longest any record waited among those in flight at the fault or sent "
             "within the horizon; a *censored* partition had not recovered within the horizon (its value is a "
             "lower bound). Statistics over the partitions a fault touched (led or followed by its broker, or all "
             "for a fault with no broker). The *load* source is the load client's records (its queue included), "
             "the *probe* source one record in flight per partition, the *group* source a consumer group's members "
             "(a record's delivery is its being given to a member: the recovery is the first record sent at or after "
             "the fault that the group was given). The *controller* rows are its phases per failover, the "
             "*coordinator* rows the group's coordinator through each fault on its broker, each step in ms after "
             "the fault: " + "; ".join(f"`{s}` {what}" for s, what in COORDINATOR_STEPS.items()) + ".", ""]
    lines += [f"![{title}]({name})" for name, title in charts] + [""]
    lines += offered_load_section(a.faults)
    lines += by_count_section(a.by_count)
    lines += ["## Percentiles per load bucket", "",
              "| source | detector | partitions affected | measure | n | censored | mean | p50 | p95 | p99 |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['source']} | {'-' if r['detector'] is None else 'on' if r['detector'] else 'off'} | "
              f"{r['bucket']} | {r['measure']} | {r['n']} | {r['censored']} | {_fmt(r['mean'])} | {_fmt(r['p50'])} | "
              f"{_fmt(r['p95'])} | {_fmt(r['p99'])} |" for r in a.percentiles]
    lines += ["", "A partition's phases: " + "; ".join(f"`{p}` until {what}" for p, what in PARTITION_PHASES.items())
              + f"; `{UNEXPLAINED}` from the last step seen to the acknowledgement. A step not seen lasts 0 ms (its "
              "time is in the next step's).", ""]
    lines += ["## Correlations with the load", "",
              "Coefficient and its 95% interval (Fisher's z), over the partitions recovered within the horizon (a "
              "censored value is only a lower bound). The partitions of one fault share its controller and its "
              "client, so they are not independent: the intervals are narrower than a sample of faults would "
              "give.", ""]
    cells = {(c["source"], c["method"], c["measure"], c["feature"]): c for c in a.correlations}
    for source in sorted({c["source"] for c in a.correlations}):
        for method in ("pearson", "spearman"):
            n = next(c["n"] for c in a.correlations if c["source"] == source)
            lines += [f"### {source}, {method} (n = {n})", "", "| measure | " + " | ".join(FEATURES) + " |",
                      "|---|" + "---|" * len(FEATURES)]
            for m in [*MEASURES, *PARTITION_PHASES, UNEXPLAINED]:
                if (source, method, m, FEATURES[0]) in cells:
                    lines.append(f"| {m} | " + " | ".join(
                        "constant" if (c := cells[(source, method, m, f)])["value"] is None else
                        f"{c['value']:+.2f}{_interval(c['ci_low'], c['ci_high'])}" for f in FEATURES) + " |")
            lines.append("")
    lines += ["## Linear regression of each measure on the load", "",
              "Coefficients in ms per unit of the feature, with their 95% intervals (Student's t), over the partitions "
              "recovered within the horizon. As above, partitions of one fault are not independent: the intervals are "
              "narrower than a sample of faults would give.", "",
              "| source | measure | n | R² | intercept | coefficients |", "|---|---|---|---|---|---|"]
    for r in a.regressions:
        coefficients = ", ".join(f"{f} {v:+.4g}{_interval(lo, hi, 3) if lo is not None else ''}"
                                 for f, (v, lo, hi) in r["coefficients"].items()) or r["skipped"]
        if r["dropped"]:
            coefficients += f" (left out, a linear combination of the others: {', '.join(r['dropped'])})"
        lines.append(f"| {r['source']} | {r['measure']} | {r['n']} | {_fmt(r['r2'], 3)} | {_fmt(r['intercept'], 1)} | "
                     f"{coefficients} |")
    lines += ["", "## Input", "", "| run | failovers | partition-faults | coordinator failovers | malformed lines | "
              "without a fault | status | examples |", "|---|---|---|---|---|---|---|---|"]
    for i in a.inputs:
        examples = "<br>".join(f"`{e[:80]}`" for e in i["examples"])
        lines.append(f"| {i['run_id']} | {i['failovers']} | {i['waits']} | {i.get('coordinators', 0)} | "
                     f"{i['malformed']} | {i['unexplained']} | {i['status']} | {examples} |")
    path = a.out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def by_count_section(by_count: list[dict]) -> list[str]:
    """The controller's phases (p50, ms) at each partition count of the cluster, per failover kind and detector."""
    if not by_count:
        return []
    lines = ["## The controller's phases against the partition count", "",
             "Per failover kind, detector and the cluster's partition count at the failover: the failovers, the "
             "partitions each affected (mean) and the p50 of each phase of the controller's (ms), and of their sum.",
             "", "| kind | detector | partitions | failovers | affected | " + " | ".join(CONTROLLER_PHASES) + " | total |",
             "|---|---|---|---|---|" + "---|" * (len(CONTROLLER_PHASES) + 1)]
    for r in by_count:
        lines.append(f"| {r['kind']} | {'-' if r['detector'] is None else 'on' if r['detector'] else 'off'} | "
                     f"{r['partitions_total']:,} | {r['n']} | {_fmt(r['partitions_affected'])} | " +
                     " | ".join(_fmt(r[f"{c}_p50"]) for c in [*CONTROLLER_PHASES, "total_ms"]) + " |")
    return lines + [""]


def by_count_chart(by_count: list[dict]):
    """A panel per failover kind: each controller phase's p50 (and their sum's) against the cluster's
    partition count, both axes logarithmic; the detector off dashed."""
    import matplotlib.pyplot as plt

    kinds = sorted({r["kind"] for r in by_count})
    fig, axes = plt.subplots(1, len(kinds), figsize=(6.5 * len(kinds), 4.8), squeeze=False)
    colors = dict(zip([*CONTROLLER_PHASES, "total_ms"], ["#9ecae1", "#6baed6", "#2171b5", "#08306b", "#e6550d"]))
    for ax, kind in zip(axes[0], kinds):
        for detector in sorted({r["detector"] for r in by_count if r["kind"] == kind}, key=bool, reverse=True):
            rows = sorted((r for r in by_count if r["kind"] == kind and r["detector"] == detector),
                          key=lambda r: r["partitions_total"])
            for phase, color in colors.items():
                points = [(r["partitions_total"], max(r[f"{phase}_p50"], 0.1)) for r in rows
                          if r[f"{phase}_p50"] is not None]
                if points:
                    ax.plot(*zip(*points), marker="o", color=color, linestyle="-" if detector is not False else "--",
                            linewidth=2.4 if phase == "total_ms" else 1.6,
                            label=f"{phase[:-3].replace('_', ' ')}" + ("" if detector is not False else
                                                                        " (detector off)"))
        ax.set(xscale="log", yscale="log", xlabel="partitions in the cluster", ylabel="p50 (ms)",
               title=kind.replace("_", " "))
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("The controller's phases against the partition count")
    return fig


def offered_load_section(faults: list[dict]) -> list[str]:
    """Each fault against the load offered at it: the run's knee, the load's fraction of it, the load's own
    latency in the seconds before the fault, and the p50/p99 of each measure per source."""
    if not faults:
        return []
    knees = sorted({f["knee_per_s"] for f in faults if f["knee_per_s"]})
    lines = ["## Against the offered load", "",
             ("The knee (the highest rate the cluster served with p99 <= 50 ms, measured at the sweep's start): " +
              ", ".join(f"{k:,.0f} records/s" for k in knees) + ". " if knees else
              "No knee was measured for these runs (their loads were given as rates). ") +
             "*offered*: the load's open-loop rate at the fault (the experiment's); *acknowledged*: the load's "
             "records/s over the second before it (a backlog from an earlier fault drains above the offered rate); "
             "*before*: the load's latency p50/p99 over the records sent in the 5 s before the fault (from "
             "`produced/`): a load near or above the knee shows there.", "",
             "| run | fault | source | partitions | offered/s | of the knee | acknowledged/s | before p50/p99 | "
             "recovery p50/p99 | worst wait p50/p99 | censored |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in faults:
        pair = lambda m: f"{_fmt(f[f'{m}_p50'])} / {_fmt(f[f'{m}_p99'])}"
        fraction = "-" if f["knee_fraction"] is None else f"{f['knee_fraction']:.0%}"
        lines.append(f"| {f['run_id']} | {f['fault_id']} | {f['source']} | {_fmt(f['partitions_total'])} | "
                     f"{_fmt(f['offered_per_s'])} | {fraction} | {_fmt(f['produce_rate'])} | "
                     f"{_fmt(f['baseline_latency_ms_p50'])} / {_fmt(f['baseline_latency_ms_p99'])} | "
                     f"{pair('recovery_ms')} | {pair('worst_wait_ms')} | {f['censored']} of {f['partitions']} |")
    return lines + [""]


def offered_load_chart(faults: list[dict]):
    """The p99 of the recovery and of the worst wait per fault and source, against the offered load (the
    knees marked) and against the partitions."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharey="row")
    markers = {"load": "o", "probe": "^", "group": "s"}
    for row, measure in zip(axes, MEASURES):
        for ax, feature, label in zip(row, ("offered", "partitions_total"),
                                      ("load at the fault (records/s: offered, else acknowledged)", "partitions")):
            for source, marker in markers.items():
                pts = [{**f, "offered": f["offered_per_s"] if f["offered_per_s"] is not None else f["produce_rate"]}
                       for f in faults if f["source"] == source and f[f"{measure}_p99"] is not None]
                if pts:
                    ax.scatter([f[feature] for f in pts], [max(f[f"{measure}_p99"], 0.5) for f in pts], marker=marker,
                               s=30, alpha=0.7, label=f"{source} p99")
            if feature == "offered":
                for knee in sorted({f["knee_per_s"] for f in faults if f["knee_per_s"]}):
                    ax.axvline(knee, color="#b2182b", linestyle="--", linewidth=1)
                    ax.annotate(f"knee {knee:,.0f}/s", (knee, 1), xycoords=("data", "axes fraction"), rotation=90,
                                va="top", ha="right", fontsize=8, color="#b2182b")
            ax.set(xlabel=label, ylabel=f"{measure[:-3].replace('_', ' ')} p99 (ms)", yscale="log")
            ax.set_xlim(left=0)
            ax.legend(fontsize=8)
    fig.suptitle("Per fault: the p99 over the partitions it touched, against the load and the partitions")
    return fig


def _charts(a: Analysis, sample: list[dict]) -> list[tuple[str, str]]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    if sample:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
        for ax, measure in zip(axes, MEASURES):
            for role, marker in (("leader", "o"), ("follower", "^"), ("cluster", "s")):
                pts = [p for p in sample if p["role"] == role and p["source"] == "load"] or \
                      [p for p in sample if p["role"] == role]
                if pts:
                    ax.scatter([p["partitions_affected"] for p in pts], [max(p[measure], 0.5) for p in pts],
                               marker=marker, s=14, alpha=0.5, label=role)
            ax.set(xlabel="partitions affected at the controller", ylabel=f"{measure[:-3].replace('_', ' ')} (ms)",
                   yscale="log", title=measure[:-3].replace("_", " ").capitalize() + " per partition")
            ax.legend()
        made.append(_save(fig, a.out / "waits_vs_partitions.png", "recovery and worst wait against load"))
    if a.faults:
        made.append(_save(offered_load_chart(a.faults), a.out / "waits_vs_offered_load.png",
                          "recovery and worst wait against the offered load, the knee marked"))
    if a.by_count:
        made.append(_save(by_count_chart(a.by_count), a.out / "controller_phases_vs_partitions.png",
                          "the controller's phases against the partition count"))
    means = {(r["source"], r["detector"], r["bucket"], r["measure"]): r["mean"] or 0 for r in a.percentiles
             if r["source"] not in PER_FAULT_SOURCES}
    keys = sorted({k[:3] for k in means}, key=lambda k: (k[0], bool(k[1]), bucket_order(k[2])))
    if keys:
        made.append(_save(phase_chart(means, keys), a.out / "phases_per_bucket.png", "phase breakdown per load bucket"))
    cells = {(c["measure"], c["feature"]): c["value"] for c in a.correlations
             if c["method"] == "pearson" and c["source"] == "load"}
    measures = [m for m in [*MEASURES, *PARTITION_PHASES, UNEXPLAINED] if (m, FEATURES[0]) in cells]
    if measures:
        fig, ax = plt.subplots(figsize=(9, 5))
        grid = [[cells[(m, f)] if cells[(m, f)] is not None else float("nan") for f in FEATURES] for m in measures]
        im = ax.imshow(grid, cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set_xticks(range(len(FEATURES)), FEATURES, rotation=30, ha="right")
        ax.set_yticks(range(len(measures)), measures)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, "-" if v != v else f"{v:.2f}", ha="center", va="center", fontsize=7)
        fig.colorbar(im, ax=ax, label="Pearson r")
        ax.set_title("Correlation of each measure and phase with the load (the load's records)")
        made.append(_save(fig, a.out / "correlations.png", "correlation heat map"))
    return made


def phase_colors() -> dict[str, str]:
    """Each phase's colour, its own: a shade of its owner's hue family, lighter to darker in time order, so
    that the chart shows at a glance whose time a recovery is."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    colors = {}
    for owner, phases in PHASE_OWNERS.items():
        name, light, dark = OWNER_COLORMAPS[owner]
        step = (dark - light) / max(1, len(phases) - 1)
        colors |= {p: to_hex(colormaps[name](light + i * step)) for i, p in enumerate(phases)}
    return colors


def phase_chart(means: dict[tuple, float], keys: list[tuple]):
    """A horizontal bar per (source, detector, bucket) of `keys`, a panel per source, its phases' means
    stacked in time order; the legend grouped by owner. Horizontal: the rows' labels never overlap."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    sources = sorted({k[0] for k in keys})
    rows = {s: [k for k in keys if k[0] == s] for s in sources}
    fig = plt.figure(figsize=(11, 1.2 + 0.38 * len(keys) + 0.45 * len(sources)))
    grid = fig.add_gridspec(len(sources), 2, width_ratios=[4, 1], height_ratios=[len(rows[s]) for s in sources])
    colors = phase_colors()
    axes = []
    for i, source in enumerate(sources):
        ax = fig.add_subplot(grid[i, 0], sharex=axes[0] if axes else None)
        axes.append(ax)
        left = [0.0] * len(rows[source])
        for phase in [*PARTITION_PHASES, UNEXPLAINED]:
            values = [means.get((*k, phase), 0.0) for k in rows[source]]
            ax.barh(range(len(values)), values, left=left, height=0.7, color=colors[phase], edgecolor="white",
                    linewidth=0.6)
            left = [x + y for x, y in zip(left, values)]
        ax.set_yticks(range(len(left)), [f"detector {'on' if d else 'off'}, {b}" for _, d, b in rows[source]],
                      fontsize=8)
        ax.invert_yaxis()
        ax.set_title(f"source: {source}", loc="left", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        if i < len(sources) - 1:
            ax.tick_params(labelbottom=False)
    axes[-1].set_xlabel("mean ms per partition (rows: Ray failure detector, partitions affected)")
    axes[-1].set_xlim(left=0)  # from the fault (autoscaling may start it past 0, losing the 0 tick)
    handles, labels = [], []
    for owner, phases in PHASE_OWNERS.items():
        handles += [Patch(visible=False)] + [Patch(facecolor=colors[p], edgecolor="white") for p in phases]
        labels += [OWNER_TITLES[owner]] + [p[:-3].replace("_", " ") for p in phases]
    key = fig.add_subplot(grid[:, 1])
    key.axis("off")
    legend = key.legend(handles, labels, loc="center left", fontsize=8, frameon=False, handlelength=1.5)
    for text in legend.get_texts():
        if text.get_text() in OWNER_TITLES.values():
            text.set_fontweight("bold")
    fig.suptitle("Where a partition's recovery goes (mean per phase, by whose time it is)")
    return fig


def _save(fig, path: Path, title: str) -> tuple[str, str]:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path.name, title
