"""Figures a person can read (reports built by hand, nothing trained): no figure wider than
`MAX_WIDTH` inches (a report with more groups than bars fit gets the solved grid: rows x tables,
k/n in each cell), every solve-rate axis labelled "share of seeds solved", markers drawn whole
inside the axes, rows on the same points drawn side by side, a placement's figures within the
width with the legend beside the axes, never over them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from recall_lab.experiments import place_plots, plots, stats
from recall_lab.experiments.state import LayerState
from tests.experiments.test_plots_seeds import make_group, report

SIZES = (4, 8, 16, 32)


def wide_report() -> dict:
    """9 rows x 2 tables (18 groups: 16.1 inches of bars at 0.7 each); row i solves the tables
    below 2^(i mod 4 + 2), so k/n differs across cells."""
    groups = []
    for i in range(9):
        for size in SIZES[:2]:
            accs = [1.0, 1.0, 0.5] if size < 2 ** (i % 4 + 2) else [0.3, 0.2, 0.2]
            groups.append(make_group(f"model-{i:02d}", size, accs))
    return report(groups)


def markers_inside(ax) -> bool:
    """Every marker of every line in `ax` lies inside the axes by at least its own radius."""
    box = ax.get_window_extent()
    for ln in ax.get_lines():
        if ln.get_marker() in (None, "None", "", " "):
            continue
        r = ln.get_markersize() / 2 * ax.figure.dpi / 72
        for x, y in ax.transData.transform(ln.get_xydata()):
            if not (box.x0 + r <= x <= box.x1 - r and box.y0 + r <= y <= box.y1 - r):
                return False
    return True


def test_no_report_figure_is_wider_than_16_inches_and_the_bars_become_a_grid(captured,
                                                                              tmp_path):
    rep = wide_report()
    plots.plot_bars(rep, tmp_path / "report-bars.png")
    grid = captured["report-bars.png"]
    assert grid.get_size_inches()[0] <= plots.MAX_WIDTH
    ax = grid.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        f"table {s} entries" for s in SIZES[:2]]
    assert len(ax.get_yticklabels()) == 9
    cells = {t.get_gid(): t.get_text() for t in ax.texts}
    # model-01 solves tables below 8: 2 of 3 seeds at 4 entries, 0 of 3 at 8
    assert cells["cell:model-01:0"].split("\n")[0] == "2/3"
    assert cells["cell:model-01:1"].split("\n")[0] == "0/3"
    assert plots.SOLVED in grid.axes[1].get_ylabel()  # the colour bar says what it shows


def test_a_narrow_report_keeps_its_bars_and_many_bars_without_tables_go_in_rows(captured,
                                                                              tmp_path):
    few = report([make_group("mamba", 4, [1.0, 0.5]), make_group("mamba", 8, [0.2])])
    plots.plot_bars(few, tmp_path / "few.png")
    assert len(captured["few.png"].axes) == 1 and captured["few.png"].axes[0].patches
    many = report([make_group(f"m{i}", 4, [1.0]) for i in range(20)])
    many["by"] = ["model.name"]
    plots.plot_bars(many, tmp_path / "many.png")
    fig = captured["many.png"]
    assert fig.get_size_inches()[0] <= plots.MAX_WIDTH
    assert [len(ax.get_xticklabels()) for ax in fig.axes] == [10, 10]  # two rows, balanced


def test_solve_rate_axes_say_share_and_markers_are_whole_and_side_by_side(captured, tmp_path):
    # two rows on the same points (both solve every seed at 4 and 8, none at 16)
    groups = [make_group(m, s, [1.0, 1.0] if s < 16 else [0.1, 0.1], [100, 200])
              for m in ("mamba", "transformer") for s in (4, 8, 16)]
    rep = report(groups)
    plots.plot_solved_axis(rep, "task.levels", tmp_path / "report-solved-task_levels.png")
    plots.plot_survival(rep, tmp_path / "report-survival.png")
    for name in ("report-solved-task_levels.png", "report-survival.png"):
        for ax in captured[name].axes:
            if ax.get_visible() and ax.get_ylabel():
                assert ax.get_ylabel().startswith(plots.SOLVED), name
                assert "seeds solved (" not in ax.get_ylabel()
    ax = captured["report-solved-task_levels.png"].axes[0]
    assert markers_inside(ax)
    a, b = (ln for ln in ax.get_lines() if len(ln.get_xdata()) == 3)
    assert list(a.get_ydata()) == list(b.get_ydata()) == [1.0, 1.0, 0.0]
    assert all(xa < xb for xa, xb in zip(a.get_xdata(), b.get_xdata(), strict=True))
    assert a.get_marker() != b.get_marker()


def test_frontier_markers_are_not_cut_at_the_largest_table(captured, tmp_path):
    groups = [make_group("mamba", s, [1.0, 1.0]) for s in SIZES]
    groups += [make_group("mamba", s, [1.0, 0.2]) for s in SIZES]
    for g, state in zip(groups, [64] * 4 + [256] * 4, strict=True):
        g.state = LayerState(state, "constant", 0, "measured")
    for g, d in zip(groups, [1] * 4 + [4] * 4, strict=True):
        g.values = {**g.values, "model.d_state": d}
    plots.plot_frontier(report(groups), tmp_path / "f.png")
    ax = captured["f.png"].axes[0]
    assert markers_inside(ax)


def _answer() -> dict:
    """place-deltanet's answer at its two largest tables (two panels draw in half the time)."""
    folder = Path(__file__).resolve().parents[2] / "docs" / "results" / "place-deltanet"
    answer = json.loads((folder / "answer.json").read_text())
    keep = answer["protocol"]["tables"][-2:]
    answer["protocol"]["tables"] = keep
    answer["cells"] = [c for c in answer["cells"] if c["size"] in keep]
    return answer


def _rows(answer: dict) -> list:
    """Reference rows as `place_figures` reads them: a label, a state, cells by table size."""
    rows = []
    for i, (label, nb) in enumerate(answer["neighbours"].items()):
        cells = {float(s): SimpleNamespace(solved=stats.wilson(c["k"], c["n"]))
                 for s, c in nb["cells"].items()}
        rows.append(SimpleNamespace(label=label, cells=cells,
                                    state=LayerState(100 * 2 ** i, "constant", 0, "measured")))
    return rows


def test_placement_figures_fit_and_keep_the_legend_beside_the_axes(tmp_path, monkeypatch):
    kept = {}
    monkeypatch.setattr(plt, "close", lambda fig: kept.setdefault(len(kept), fig))
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: None)  # drawn below instead
    answer = _answer()
    place_plots.place_figures(answer, _rows(answer), tmp_path)
    for fig in kept.values():
        fig.canvas.draw()
        assert fig.get_size_inches()[0] <= plots.MAX_WIDTH
        legend = fig.legends[0].get_window_extent()
        for ax in (a for a in fig.axes if a.get_visible()):
            assert legend.x0 >= ax.get_window_extent().x1  # beside, not over
            assert markers_inside(ax)
    solved, frontier = kept.values()
    assert solved.axes[0].get_ylabel().startswith(place_plots.SOLVED)
    assert frontier.axes[0].get_ylim()[1] > max(answer["protocol"]["tables"])
