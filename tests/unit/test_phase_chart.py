"""The report's phase chart (phases_per_bucket.png): a colour of its own per phase, in its owner's hue
family, a legend grouped by owner, and row labels that do not overlap (pure: matplotlib's Agg)."""
from __future__ import annotations

import colorsys
import itertools

import matplotlib
import pytest
from matplotlib.colors import to_hex, to_rgb

from jobs.measures.phases import PARTITION_PHASES, PHASE_OWNERS, UNEXPLAINED
from jobs.reports.report import OWNER_TITLES, phase_chart, phase_colors

PHASES = [*PARTITION_PHASES, UNEXPLAINED]
HUES = {"controller": (190, 230), "brokers": (55, 165), "client": (10, 40), "fault": (290, 345)}  # degrees


def test_every_phase_has_one_owner():
    owned = [p for phases in PHASE_OWNERS.values() for p in phases]
    assert sorted(owned) == sorted(PHASES) and len(owned) == len(set(owned))


def test_every_phase_has_a_colour_of_its_own_in_its_owners_hue_family():
    colors = phase_colors()
    assert set(colors) == set(PHASES)
    assert len(set(colors.values())) == len(PHASES)
    for owner, phases in PHASE_OWNERS.items():
        for p in phases:
            hue, lightness, saturation = colorsys.rgb_to_hls(*to_rgb(colors[p]))
            if owner == "unexplained":
                assert saturation < 0.05, p  # grey: nobody's
            else:
                low, high = HUES[owner]
                assert low <= hue * 360 <= high and saturation > 0.3, (owner, p, colors[p])
            assert 0.15 < lightness < 0.9, (p, colors[p])  # neither lost on the white nor black


def test_within_a_family_neighbours_in_time_are_told_apart():
    colors = phase_colors()
    for phases in PHASE_OWNERS.values():
        for a, b in itertools.pairwise(phases):
            distance = sum((x - y) ** 2 for x, y in zip(to_rgb(colors[a]), to_rgb(colors[b]))) ** 0.5
            assert distance > 0.08, (a, b)


@pytest.fixture
def chart():
    matplotlib.use("Agg")  # as the report draws them
    import matplotlib.pyplot as plt

    keys = [(source, detector, bucket) for source in ("group", "load", "probe") for detector in (False, True)
            for bucket in ("1-99", "100-499", "1000-4999")]
    means = {(*k, p): 100.0 + 10 * i for k in keys for i, p in enumerate(PHASES)}
    means[("load", False, "100-499", "fault_end_ms")] = 0.01  # a sliver first: autoscaling started the axis there
    fig = phase_chart(means, keys)
    fig.tight_layout()
    fig.canvas.draw()
    yield fig
    plt.close(fig)


def test_a_bar_per_row_its_segments_coloured_by_phase_and_the_legend_grouped_by_owner(chart):
    *panels, key = chart.axes
    assert [ax.get_title(loc="left") for ax in panels] == ["source: group", "source: load", "source: probe"]
    assert all(ax.get_xlim()[0] == 0 for ax in panels)  # from the fault
    colors = phase_colors()
    for ax in panels:
        assert len(ax.patches) == 6 * len(PHASES)  # a segment per phase in each of the panel's six rows
        faces = {to_hex(p.get_facecolor()) for p in ax.patches}
        assert faces == set(colors.values())
    legend = key.get_legend()
    expected = []
    for owner, phases in PHASE_OWNERS.items():
        expected += [OWNER_TITLES[owner]] + [p[:-3].replace("_", " ") for p in phases]
    assert [t.get_text() for t in legend.get_texts()] == expected
    bold = [t.get_text() for t in legend.get_texts() if t.get_fontweight() == "bold"]
    assert bold == list(OWNER_TITLES.values())


def test_no_labels_overlap(chart):
    fig = chart
    renderer = fig.canvas.get_renderer()
    *panels, key = fig.axes
    boxes = [t.get_window_extent(renderer) for ax in panels for t in ax.get_yticklabels()]
    boxes += [t.get_window_extent(renderer) for t in panels[-1].get_xticklabels() if t.get_text()]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)
    legend = key.get_legend().get_window_extent(renderer)
    assert not any(legend.overlaps(ax.get_window_extent(renderer)) for ax in panels)
    assert legend.x1 <= fig.bbox.x1 and legend.y0 >= 0 and legend.y1 <= fig.bbox.y1  # all of it in the picture
