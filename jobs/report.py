"""The analysis as people read it: PNG charts, report.md beside the Parquet tables, and the short
summary table printed at the end of the job."""
from __future__ import annotations

from pathlib import Path

from jobs.phases import FEATURES, PHASES, Analysis, bucket_order

STACKED = ["detection_ms", "inbox_wait_ms", "election_zk_ms", "propagation_ms"]


def _fmt(v, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def summary_table(a: Analysis) -> str:
    """Unavailability and the controller's phases, p50 / p99 ms, per detector and load bucket."""
    by = {(r["detector"], r["bucket"], r["phase"]): r for r in a.percentiles}
    keys = sorted({(d, b) for d, b, _ in by}, key=lambda k: (k[0], bucket_order(k[1])))
    head = ["detector", "partitions affected", "failovers", *(f"{p[:-3]} p50/p99" for p in PHASES)]
    rows = [[("on" if d else "off"), b, str(by[(d, b, PHASES[0])]["n"]),
             *(f"{_fmt(by[(d, b, p)]['p50'])}/{_fmt(by[(d, b, p)]['p99'])}" for p in PHASES)] for d, b in keys]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    bad = sum(i["malformed"] for i in a.inputs)
    lines.append(f"{a.failovers} failovers from {len(a.inputs)} runs; {bad} malformed lines; Spark on Ray: "
                 f"{'yes' if a.on_ray else 'no'}. Report: {a.out / 'report.md'}")
    return "\n".join(lines)


def write_report(a: Analysis, sample: list[dict]) -> Path:
    charts = _charts(a, sample)
    lines = ["# Failover latency against load", "",
             f"{a.failovers} failovers from {len(a.inputs)} runs, analysed with Spark on Ray (RayDP: "
             f"{'yes' if a.on_ray else 'no'}). Times in ms; phases as in the failover timeline of "
             "docs/ARCHITECTURE.md.", ""]
    lines += [f"![{title}]({name})" for name, title in charts] + [""]
    lines += ["## Percentiles per load bucket", "", "| detector | partitions affected | phase | n | p50 | p95 | p99 |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {'on' if r['detector'] else 'off'} | {r['bucket']} | {r['phase']} | {r['n']} | {_fmt(r['p50'])} | "
              f"{_fmt(r['p95'])} | {_fmt(r['p99'])} |" for r in a.percentiles]
    lines += ["", "## Correlations with the load", "", "| method | phase | " + " | ".join(FEATURES) + " |",
              "|---|---|" + "---|" * len(FEATURES)]
    cells = {(c["method"], c["phase"], c["feature"]): c["value"] for c in a.correlations}
    for method in ("pearson", "spearman"):
        for p in PHASES:
            if (method, p, FEATURES[0]) in cells:
                lines.append(f"| {method} | {p} | " + " | ".join(
                    "constant" if cells[(method, p, f)] is None else f"{cells[(method, p, f)]:+.2f}"
                    for f in FEATURES) + " |")
    lines += ["", "## Linear regression of each phase on the load", "",
              "| phase | n | R² | intercept | coefficients (ms per unit) |", "|---|---|---|---|---|"]
    for r in a.regressions:
        coefficients = ", ".join(f"{f} {v:+.4g}" for f, v in r["coefficients"].items()) or r["skipped"]
        lines.append(f"| {r['phase']} | {r['n']} | {_fmt(r['r2'], 3)} | {_fmt(r['intercept'], 1)} | {coefficients} |")
    lines += ["", "## Input", "", "| run | failovers | malformed lines | without a fault | status | examples |",
              "|---|---|---|---|---|---|"]
    for i in a.inputs:
        examples = "<br>".join(f"`{e[:80]}`" for e in i["examples"])
        lines.append(f"| {i['run_id']} | {i['failovers']} | {i['malformed']} | {i['unexplained']} | {i['status']} | "
                     f"{examples} |")
    path = a.out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _charts(a: Analysis, sample: list[dict]) -> list[tuple[str, str]]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    if sample:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for detector, marker in ((1, "o"), (0, "^")):
            pts = [p for p in sample if p["detector"] == detector]
            if pts:
                s = ax.scatter([p["partitions_affected"] for p in pts], [p["unavailability_ms"] for p in pts],
                               c=[p["produce_rate"] for p in pts], cmap="viridis", marker=marker, s=28,
                               vmin=min(p["produce_rate"] for p in sample), vmax=max(p["produce_rate"] for p in sample),
                               label=f"detector {'on' if detector else 'off'}")
        fig.colorbar(s, ax=ax, label="produce rate at the fault (records/s)")
        ax.set(xlabel="partitions affected", ylabel="client-visible unavailability (ms)", yscale="log",
               title="Unavailability against partitions affected")
        ax.legend()
        made.append(_save(fig, a.out / "unavailability_vs_partitions.png", "unavailability against load"))
    p50 = {(r["detector"], r["bucket"], r["phase"]): r["p50"] or 0 for r in a.percentiles}
    keys = sorted({(d, b) for d, b, _ in p50}, key=lambda k: (k[0], bucket_order(k[1])))
    if keys:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        labels = [f"{b}\n{'on' if d else 'off'}" for d, b in keys]
        bottom = [0.0] * len(keys)
        for phase in STACKED:
            values = [p50[(d, b, phase)] for d, b in keys]
            ax.bar(labels, values, bottom=bottom, label=phase[:-3])
            bottom = [x + y for x, y in zip(bottom, values)]
        ax.set(xlabel="partitions affected / detector", ylabel="p50 ms", yscale="symlog",
               title="Where a failover's time goes (p50 per phase)")
        ax.legend()
        made.append(_save(fig, a.out / "phases_per_bucket.png", "phase breakdown per load bucket"))
    cells = {(c["phase"], c["feature"]): c["value"] for c in a.correlations if c["method"] == "pearson"}
    phases = [p for p in PHASES if (p, FEATURES[0]) in cells]
    if phases:
        fig, ax = plt.subplots(figsize=(8, 3.8))
        grid = [[cells[(p, f)] if cells[(p, f)] is not None else float("nan") for f in FEATURES] for p in phases]
        im = ax.imshow(grid, cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set_xticks(range(len(FEATURES)), FEATURES, rotation=30, ha="right")
        ax.set_yticks(range(len(phases)), phases)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, "-" if v != v else f"{v:.2f}", ha="center", va="center", fontsize=8)
        fig.colorbar(im, ax=ax, label="Pearson r")
        ax.set_title("Correlation of each phase with the load")
        made.append(_save(fig, a.out / "correlations.png", "correlation heat map"))
    return made


def _save(fig, path: Path, title: str) -> tuple[str, str]:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path.name, title
