"""The report's figures read across: one panel per table size, one colour per row in every
figure, at most MAX_LINES lines a panel, the legend outside the axes (figures captured before
they are written)."""

import pytest

from recall_lab.experiments import plots
from recall_lab.experiments.report import build_report
from tests.experiments.test_stats import table_sweep  # noqa: F401 - a fixture


def test_panels_per_table_colours_per_row_legend_outside(table_sweep, captured,  # noqa: F811
                                                        tmp_path):
    rep = build_report([table_sweep])
    pal = plots.palette(rep)
    assert pal.facet == "task.levels" and set(pal.rows) == {"mamba", "mamba+hax"}
    assert pal.rows["mamba"] != pal.rows["mamba+hax"]
    plots.report_figures(rep, tmp_path)
    surv = captured["report-survival.png"]
    panels = [ax for ax in surv.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["table 4 entries", "table 8 entries"]
    # every figure draws a row in the row's colour
    for name in ("report-survival.png", "report-curves.png", "report-solved-task_levels.png"):
        fig = captured[name]
        legend = next(ax.get_legend() for ax in fig.axes if ax.get_legend())
        labels = [t.get_text() for t in legend.get_texts()]
        colours = {lab.split(" / w=")[0].split(" (")[0]: h.get_color()
                   for lab, h in zip(labels, legend.legend_handles, strict=True)}
        for row, colour in colours.items():
            assert tuple(plots.to_rgb(colour)) == pytest.approx(pal.rows[row]), (name, row)
        # the legend sits right of every panel
        box = legend.get_window_extent()
        assert all(box.x0 >= ax.get_window_extent().x1 for ax in fig.axes if ax.get_visible())
    # the survival panels hold one curve per row (drawn in its colour)
    for ax in panels:
        drawn = {tuple(plots.to_rgb(ln.get_color())) for ln in ax.get_lines()}
        assert drawn == {pal.rows["mamba"], pal.rows["mamba+hax"]}


def test_more_lines_than_fit_are_split_over_panels(captured, tmp_path):
    lines = [plots.Line("table 8 entries", f"row {i}", None, i) for i in range(11)]
    plots.draw_panels(lines, lambda ax, ln: ax.plot([0, 1], [0, ln.data])[0],
                      tmp_path / "x.png", title="t", xlabel="x", ylabel="y")
    fig = captured["x.png"]
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [len(ax.get_lines()) for ax in panels] == [plots.MAX_LINES, 11 - plots.MAX_LINES]
    assert panels[0].get_title() == "table 8 entries (1/2)"
    legend = panels[-1].get_legend() or panels[0].get_legend()
    assert len(legend.get_texts()) == 11


def test_shades_of_one_model_and_distinct_models():
    base = plots.HUES[0]
    dark, light = plots._shade(base, -0.35), plots._shade(base, 0.45)
    assert all(d < b < w for d, b, w in zip(dark, plots.to_rgb(base), light, strict=True)
               if 0 < b < 1)
