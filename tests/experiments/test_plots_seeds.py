"""The figures show the seeds: per-seed dots over the bars and along the metric's lines (as many
as finished seeds, at their values), bars, error bars and bands inside [0, 1] for an accuracy,
legend entries in the colours drawn, survival against training steps with the rows no seed
solved named in words, and one log2 scale for the table size in the accuracy and the solve-rate
figures. Reports built by hand from a few groups (no runs trained, no files read)."""

import statistics
from pathlib import Path

import pytest

from recall_lab.experiments import plots, stats
from recall_lab.experiments.grid import group_label
from recall_lab.experiments.report import Group, RunRecord


def make_group(model: str, pairs: int, accs: list[float], durations: list[int] | None = None,
               solve_at: float = 0.95) -> Group:
    """A group of finished seeds with test accuracies `accs`; with `durations`, each seed's
    step of solving (acc >= solve_at) or its last step (unsolved), as time to event."""
    values = {"model.name": model, "task.levels": [[pairs, pairs]]}
    g = Group((model, pairs), values, group_label(values))
    g.selected = [RunRecord(f"{model}-{pairs}-s{i}", Path(f"/nonexistent/{model}-{pairs}-s{i}"),
                            "done", {"train.seed": i, "train.lr": 1e-3,
                                     "train.batch_size": 32},
                            summary={"test": {"acc": a}}) for i, a in enumerate(accs)]
    g.runs = list(g.selected)
    if accs:
        g.mean = statistics.mean(accs)
        g.std = statistics.stdev(accs) if len(accs) > 1 else None
    g.solved = stats.wilson(sum(a >= solve_at for a in accs), len(accs))
    if durations is not None:
        g.durations = [float(d) for d in durations]
        g.events = [a >= solve_at for a in accs]
        g.survival = stats.kaplan_meier(g.durations, g.events)
    return g


def report(groups: list[Group], reference: dict | None = None) -> dict:
    return {"groups": groups, "by": ["model.name", "task.levels"], "metric": "test.acc",
            "solve_at": 0.95, "reference": reference or {}}


# bimodal seeds (mean 0.625, std 0.43: mean + std 1.06), a tight group near 1 (0.967 + 0.058),
# one seed (no std) and a group with no finished seed
BIMODAL = [0.25, 0.25, 1.0, 1.0]
NEAR_ONE = [1.0, 1.0, 0.9]


def bar_groups() -> list[Group]:
    return [make_group("mamba", 8, BIMODAL), make_group("transformer", 8, NEAR_ONE),
            make_group("mamba", 4, [0.5]), make_group("transformer", 4, [])]


def colour(artist) -> tuple:
    """The colour an artist or legend handle is drawn in, as RGB: a bar's face, a dot's face,
    an error bar's stroke, a line's colour."""
    if hasattr(artist, "lines"):  # an errorbar container: its vertical bars' stroke
        return tuple(plots.to_rgb(artist.lines[2][0].get_color()[0]))
    if hasattr(artist, "patches"):  # a bar container: its first bar
        artist = artist.patches[0]
    if hasattr(artist, "get_segments"):  # a line collection (an error bar's legend key)
        return tuple(plots.to_rgb(artist.get_color()[0]))
    if hasattr(artist, "get_offsets"):  # a scatter: its dots' face
        return tuple(plots.to_rgb(artist.get_facecolor()[0]))
    if hasattr(artist, "get_xdata"):  # a line
        return tuple(plots.to_rgb(artist.get_color()))
    return tuple(plots.to_rgb(artist.get_facecolor()))


def test_bars_dots_per_seed_clipped_to_one_legend_in_drawn_colours(captured, tmp_path):
    groups = bar_groups()
    ref = {"source": "paper", "values": {groups[0].label: 0.9, groups[1].label: 1.0}}
    rep = report(groups, ref)
    pal = plots.palette(rep)
    plots.plot_bars(rep, tmp_path / "bars.png", pal)
    (ax,) = captured["bars.png"].axes
    # one dot per finished seed, at its value, over its own bar
    ticks = {t.get_text(): x for t, x in zip(ax.get_xticklabels(), ax.get_xticks(), strict=True)}
    for g, accs in zip(groups, (BIMODAL, NEAR_ONE, [0.5], []), strict=True):
        dots = [c for c in ax.collections if c.get_gid() == f"seeds:{g.label}"]
        if not accs:
            assert not dots
            continue
        (d,) = dots
        assert sorted(d.get_offsets()[:, 1]) == pytest.approx(sorted(accs))
        assert all(abs(x - ticks[g.label]) < 0.5 for x in d.get_offsets()[:, 0])
    # the bimodal seeds show as two values, not only as their mean
    bimodal = next(c for c in ax.collections if c.get_gid() == f"seeds:{groups[0].label}")
    assert set(bimodal.get_offsets()[:, 1]) == {0.25, 1.0}
    # nothing drawn past [0, 1]: bars, and the error bars clipped (0.625 + 0.433 -> 1.0)
    assert all(0.0 <= p.get_y() + p.get_height() <= 1.0 for p in ax.patches)
    segments = [s for c in ax.collections if hasattr(c, "get_segments") for s in c.get_segments()]
    ys = [y for s in segments for _, y in s]
    assert ys and min(ys) >= 0.0 and max(ys) <= 1.0
    assert len(segments) == 2  # the two groups with a std (one seed has none)
    # both reach past 1 unclipped (1.06 and 1.02): drawn up to 1.0, down to mean - std
    assert [max(y for _, y in seg) for seg in segments] == pytest.approx([1.0, 1.0])
    assert sorted(min(y for _, y in seg) for seg in segments) == pytest.approx(sorted(
        statistics.mean(xs) - statistics.stdev(xs) for xs in (BIMODAL, NEAR_ONE)))
    # the legend: every row's colour (rows span the two tables), the dots, the error bars and
    # the reference, each in the colour its artists are drawn in
    legend = ax.get_legend()
    entries = dict(zip([t.get_text() for t in legend.get_texts()], legend.legend_handles,
                       strict=True))
    assert {"mamba", "transformer"} <= set(entries)
    bars = ax.patches[:len(groups)]
    for g, bar in zip(groups, bars, strict=True):
        row = plots.row_label(rep, g, pal.facet)
        assert tuple(plots.to_rgb(bar.get_facecolor())) == pytest.approx(pal.rows[row])
        assert colour(entries[row]) == pytest.approx(tuple(plots.to_rgb(bar.get_facecolor())))
    assert colour(entries["one seed"]) == pytest.approx(colour(bimodal))
    std = next(lab for lab in entries if lab.startswith("+/- std"))
    assert "clipped to [0, 1]" in std
    drawn_bars = next(c for c in ax.collections if hasattr(c, "get_segments"))
    assert colour(entries[std]) == pytest.approx(tuple(plots.to_rgb(drawn_bars.get_color()[0])))
    # the reference: a hatched bar where it gives a number, "not reported" where it does not
    # (never a bar of 0), its legend entry naming the source and that its task is not recorded
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert [p.get_height() for p in hatched] == pytest.approx([0.9, 1.0])
    missing = [t for t in ax.texts if t.get_gid() == "not-reported"]
    assert [t.get_text() for t in missing] == [plots.NOT_REPORTED] * 2
    assert sorted(round(t.get_position()[0] - 0.2) for t in missing) == sorted(
        round(ticks[g.label]) for g in groups[2:])
    key = next(lab for lab in entries if lab.startswith("reference: paper"))
    assert "its task not recorded" in key
    assert colour(entries[key]) == pytest.approx(tuple(plots.to_rgb(
        hatched[0].get_facecolor())))
    assert "ours (mean +/- std)" not in entries


def test_axis_figure_dots_band_in_unit_range_and_log2_like_the_solve_rate(captured, tmp_path):
    groups = [make_group("mamba", 4, [1.0, 0.98, 0.99]), make_group("mamba", 8, BIMODAL),
              make_group("mamba", 16, [0.3, 0.31]), make_group("transformer", 4, NEAR_ONE),
              make_group("transformer", 16, [1.0, 0.96, 0.5])]
    rep = report(groups)
    # the demo's figures too: `recall-lab demo` writes them through `report_figures`
    names = {p.name for p in plots.report_figures(rep, tmp_path)}
    assert {"report-task_levels.png", "report-solved-task_levels.png"} <= names
    acc = captured["report-task_levels.png"].axes[0]
    solved = captured["report-solved-task_levels.png"].axes[0]
    for ax in (acc, solved):  # one scale for the table size: log2, the same ticks
        assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    assert [t.get_text() for t in acc.get_xticklabels()] == [
        t.get_text() for t in solved.get_xticklabels()]
    seeds: dict[str, list] = {}  # model -> (table size, a seed's accuracy)
    for g in groups:
        seeds.setdefault(g.values["model.name"], []).extend(
            (g.values["task.levels"][0][1], r.summary["test"]["acc"]) for r in g.selected)
    for model, pts in seeds.items():
        (dots,) = [c for c in acc.collections if c.get_gid() == f"seeds:{model} / w=1"]
        assert sorted(map(tuple, dots.get_offsets().tolist())) == sorted(pts)
    bands = [c for c in acc.collections if c.get_gid() is None]
    ys = [y for b in bands for path in b.get_paths() for _, y in path.vertices]
    assert ys and min(ys) >= 0.0 and max(ys) <= 1.0 + 1e-12
    assert max(ys) == pytest.approx(1.0)  # 0.967 + 0.058 and 0.625 + 0.433 clipped to 1
    assert acc.get_ylim()[1] <= 1.05


def test_survival_in_steps_unsolved_rows_in_words_colours_apart(captured, tmp_path):
    groups = [
        # 4 pairs: mamba 2 of 3 seeds (steps 300 and 500; the third ran 800), transformer all
        # three, mamba+hax none within 700 steps
        make_group("mamba", 4, [0.99, 0.97, 0.4], [300, 500, 800]),
        make_group("transformer", 4, [1.0, 1.0, 1.0], [200, 200, 400]),
        make_group("mamba+hax", 4, [0.3, 0.4, 0.35], [700, 700, 650]),
        # 8 pairs: no seed of any row solved within 800 steps
        make_group("mamba", 8, [0.3, 0.25, 0.3], [800, 800, 800]),
        make_group("transformer", 8, [0.5, 0.6, 0.4], [800, 800, 800])]
    rep = report(groups)
    pal = plots.palette(rep)
    plots.plot_survival(rep, tmp_path / "s.png", pal)
    fig = captured["s.png"]
    four, eight = [ax for ax in fig.axes if ax.get_visible()]
    assert (four.get_title(), eight.get_title()) == ("table 4 entries", "table 8 entries")
    # steps, not samples (the runs' batch of 32 does not scale the axis)
    assert "steps" in four.get_xlabel() and "samples" not in four.get_xlabel()
    lines = {tuple(plots.to_rgb(ln.get_color())): ln for ln in four.get_lines()}
    assert set(lines) == {pal.rows["mamba"], pal.rows["transformer"]}  # colours apart
    assert list(lines[pal.rows["mamba"]].get_xdata()) == [0, 300, 500, 800]
    assert list(lines[pal.rows["transformer"]].get_xdata()) == [0, 200, 400]
    # the rows no seed solved: named in words, not drawn as lines at 0
    (text,) = [t.get_text() for t in four.texts if t.get_gid() == "unsolved"]
    assert "no seed solved within 700 steps" in text and "mamba+hax" in text
    assert not eight.get_lines()
    (text,) = [t.get_text() for t in eight.texts if t.get_gid() == "unsolved"]
    assert "no seed solved within 800 steps" in text
    assert "mamba" in text and "transformer" in text
    assert eight.get_xlim()[1] >= 800  # the axis reaches the step the words name
    # the legend: each entry in the colour of the row's drawn line
    legend = next(ax.get_legend() for ax in fig.axes if ax.get_legend())
    entries = dict(zip([t.get_text() for t in legend.get_texts()], legend.legend_handles,
                       strict=True))
    assert set(entries) == {"mamba", "transformer"}
    for label, handle in entries.items():
        assert tuple(plots.to_rgb(handle.get_color())) == pytest.approx(pal.rows[label])


def test_lr_on_log10_like_the_window_and_long_titles_wrapped(captured, tmp_path):
    groups = []
    for lr, accs in ((1e-4, [0.25]), (1e-3, [0.9, 1.0]), (1e-2, [1.0, 0.99])):
        g = make_group("transformer", 4, accs)
        g.values = {"train.lr": lr}
        g.label = f"lr={lr:g}"
        groups.append(g)
    rep = {**report(groups), "by": ["train.lr"]}
    names = {p.name for p in plots.report_figures(rep, tmp_path)}
    assert {"report-train_lr.png", "report-solved-train_lr.png"} <= names
    for name in ("report-train_lr.png", "report-solved-train_lr.png"):
        ax = captured[name].axes[0]
        assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 10
        # one panel: no title line longer than the wrap width (a 66-character one ran past the
        # figure's left edge)
        assert all(len(line) <= plots.TITLE_WIDTH for line in ax.get_title().split("\n"))
    # its second line (63 characters) wrapped in two
    assert captured["report-train_lr.png"].axes[0].get_title().count("\n") == 2
