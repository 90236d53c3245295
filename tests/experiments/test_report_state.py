"""The report's state axis: each group's state per layer in numbers (`recall-lab models`' count
over the layers, rebuilt from the runs' configs), the seeds-solved-against-state figure (one line
per model family, one panel per table, attention dashed) and the frontier against state, on a
fake sweep (no training): Mamba2 at two d_states, DeltaNet at two head counts and a Transformer,
over two tables."""

import csv
import json

import pytest
import torch

from recall_lab import checkpoint as ck
from recall_lab.analysis.plots import save_figure
from recall_lab.experiments import plots
from recall_lab.experiments import state as layer_state
from recall_lab.experiments.grid import expand
from recall_lab.experiments.report import build_report, write_report
from recall_lab.models.registry import build_model
from recall_lab.models.state import state_count
from recall_lab.runs import run_config_from_json

ROWS = [{"name": "transformer"}, {"name": "mamba2", "d_state": 1},
        {"name": "mamba2", "d_state": 4}, {"name": "deltanet", "mixer_kwargs": {"num_heads": 4}},
        {"name": "deltanet", "mixer_kwargs": {"num_heads": 1}}]
# seeds solved (of 3) per row and table; the frontiers (largest table solved in >= 2 of 3):
# transformer 8, mamba2 state 1: 4, state 4: 8, deltanet 4 heads: none (0), 1 head: 4
SOLVED = {("transformer", 4): 3, ("transformer", 8): 2, ("mamba2/1", 4): 2, ("mamba2/1", 8): 0,
          ("mamba2/4", 4): 3, ("mamba2/4", 8): 2, ("deltanet/4", 4): 1, ("deltanet/4", 8): 0,
          ("deltanet/1", 4): 3, ("deltanet/1", 8): 1}


def _row(model) -> str:
    if model.name == "mamba2":
        return f"mamba2/{model.d_state}"
    if model.name == "deltanet":
        return f"deltanet/{model.mixer_kwargs['num_heads']}"
    return model.name


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """The sweep folder and its expanded runs (their RunConfigs, for the counts by hand)."""
    tables = {"name": "zoo", "model": {"name": "mamba2", "d_model": 16, "d_state": 4, "k": 4},
              "train": {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_samples": 8,
                        "test_samples": 8, "warmup": 2, "device": "cpu"},
              "task": {"levels": [[4, 4]], "values": 4},
              "grid": {"task.levels": [[[4, 4]], [[8, 8]]], "train.seed": [0, 1, 2]},
              "link": [{"model": ROWS}], "report": {"solve_at": 0.95}}
    exp = expand(tables, "zoo")
    root = tmp_path_factory.mktemp("state") / "zoo"
    entries = []
    for run in exp.runs:
        cfg = run.config
        solved = cfg.train.seed < SOLVED[(_row(cfg.model), cfg.task.levels[0][1])]
        acc = 0.99 if solved else 0.4
        folder = root / run.name
        folder.mkdir(parents=True)
        ck.write_json(folder / ck.CONFIG, cfg.to_json())
        curve = [{"step": s, "split": "valid", "acc": acc if s == 6 else 0.3} for s in (3, 6)]
        (folder / ck.METRICS).write_text("".join(json.dumps(r) + "\n" for r in curve))
        ck.write_json(folder / ck.SUMMARY, {"best_step": 6, "valid": {"acc": acc, "loss": 0},
                                            "test": {"acc": acc, "loss": 0}})
        entries.append({"name": run.name, "status": "done", "config": cfg.to_json()})
    ck.write_json(root / "sweep.json", {"experiment": "zoo", "report": exp.report,
                                        "runs": entries})
    return root, exp.runs


def by_hand(cfg) -> tuple[float | None, str]:
    """The recurrent state per layer, from the papers' formulas (not from the code under
    test): Mamba2 `expand * d_model * d_state`; DeltaNet `heads * d_k * d_v` with d_k = d_v =
    d_model / heads; attention's KV cache grows with L."""
    m = cfg.model
    if m.name == "transformer":
        return None, "L"
    if m.name == "mamba2":
        return float(m.expand * m.d_model * m.d_state), "constant"
    heads = m.mixer_kwargs["num_heads"]
    return float(heads * (m.d_model // heads) ** 2), "constant"


def test_state_per_layer_is_the_models_count_over_the_layers(zoo):
    root, runs = zoo
    rep = build_report([root])
    assert rep["by"] == ["model.name", "task.levels", "model.d_state",
                         "model.mixer_kwargs.num_heads"]
    expected = {}
    for run in runs:
        expected[(_row(run.config.model), run.config.task.levels[0][1])] = by_hand(run.config)
    got = {}
    for g in rep["groups"]:
        cfg = g.runs[0].config
        row = {"mamba2": f"mamba2/{cfg['model.d_state']}",
               "deltanet": f"deltanet/{cfg.get('model.mixer_kwargs.num_heads')}"}.get(
            cfg["model.name"], cfg["model.name"])
        got[(row, cfg["task.levels"][0][1])] = (g.state.numbers, g.state.growth)
    assert got == expected
    # the counts differ where the state does, and attention has none (its KV cache grows)
    assert expected[("transformer", 4)] == (None, "L")
    assert expected[("mamba2/1", 4)][0] < expected[("mamba2/4", 4)][0]
    assert expected[("deltanet/4", 4)][0] != expected[("deltanet/1", 4)][0]
    assert expected[("mamba2/4", 4)] == expected[("mamba2/4", 8)]  # fixed: same at any length


def test_figures_lines_per_panel_and_frontier(zoo, monkeypatch, tmp_path):
    root, runs = zoo
    figs = {}

    def keep(fig, path):  # keep the figure to look into, and write it as the report does
        figs[path.name] = fig
        return save_figure(fig, path)

    monkeypatch.setattr(plots, "save_figure", keep)
    rep = build_report([root])
    paths = write_report(rep, tmp_path / "out")
    names = {p.name for p in paths}
    assert {"report-solved-state.png", "report-frontier.png"} <= names
    assert (tmp_path / "out" / "report-solved-state.png").stat().st_size > 0
    # against d_state: the Mamba2 rows only (the transformer and DeltaNet have no d_state), one
    # line per table through states 1 and 4
    fig = figs["report-solved-model_d_state.png"]
    drawn = [ln for ax in fig.axes if ax.get_visible() for ln in ax.get_lines()]
    assert drawn and all(list(ln.get_xdata()) == [1.0, 4.0] for ln in drawn)
    state = {(_row(r.config.model), r.config.task.levels[0][1]): by_hand(r.config)[0]
             for r in runs}
    pal = plots.palette(rep)

    fig = figs["report-solved-state.png"]
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["table 4 entries", "table 8 entries"]
    assert panels[0].get_xscale() == "log"
    for ax, size in zip(panels, (4, 8), strict=True):
        lines = ax.get_lines()  # Mamba2 and DeltaNet through their states, attention dashed
        assert len(lines) == 3
        solid = {tuple(plots.to_rgb(ln.get_color())): ln for ln in lines
                 if ln.get_linestyle() == "-"}
        mamba = solid[pal.model("mamba2")]
        assert list(mamba.get_xdata()) == pytest.approx(
            [state[("mamba2/1", size)], state[("mamba2/4", size)]])
        assert list(mamba.get_ydata()) == pytest.approx(
            [SOLVED[("mamba2/1", size)] / 3, SOLVED[("mamba2/4", size)] / 3])
        delta = solid[pal.model("deltanet")]
        pts = sorted([(state[(f"deltanet/{h}", size)], SOLVED[(f"deltanet/{h}", size)] / 3)
                      for h in (4, 1)])  # in x order, whichever head count has more state
        assert list(delta.get_xdata()) == pytest.approx([x for x, _ in pts])
        assert list(delta.get_ydata()) == pytest.approx([y for _, y in pts])
        dashed = [ln for ln in lines if ln.get_linestyle() == "--"]
        assert len(dashed) == 1
        assert list(dashed[0].get_ydata()) == pytest.approx([SOLVED[("transformer", size)] / 3] * 2)
    legend = next(ax.get_legend() for ax in fig.axes if ax.get_legend())
    assert [t.get_text() for t in legend.get_texts()] == [
        "mamba2", "deltanet", "transformer (state grows with the sequence)"]
    box = legend.get_window_extent()
    assert all(box.x0 >= ax.get_window_extent().x1 for ax in panels)  # outside the axes
    assert "state per layer" in panels[-1].get_xlabel()

    # the frontier: Mamba2 4 then 8, DeltaNet 0 (no table in >= half its seeds) then 4,
    # attention 8, dashed
    fixed, growing = plots.frontier_points(rep)
    assert fixed == {"mamba2": {state[("mamba2/1", 4)]: 4.0, state[("mamba2/4", 4)]: 8.0},
                     "deltanet": {state[("deltanet/4", 4)]: 0.0, state[("deltanet/1", 4)]: 4.0}}
    # by row, named by its family alone; d_state is a grouping field, but a transformer never
    # reads it, so its label leaves the base config's value out
    assert growing == {"transformer": (8.0, "L", "transformer")}
    (ax,) = [ax for ax in figs["report-frontier.png"].axes if ax.get_visible()]
    drawn = {tuple(plots.to_rgb(ln.get_color())): (list(ln.get_xdata()), list(ln.get_ydata()))
             for ln in ax.get_lines() if ln.get_linestyle() == "-"}
    assert drawn[pal.model("mamba2")] == (sorted(fixed["mamba2"]),
                                          [fixed["mamba2"][x] for x in sorted(fixed["mamba2"])])
    assert [ln.get_ydata()[0] for ln in ax.get_lines() if ln.get_linestyle() == "--"] == [8.0]
    # table size on log2 as in every other figure; "no table solved" (DeltaNet's 0) one step
    # below the smallest table (4 pairs)
    assert ax.get_yscale() == "log" and ax.yaxis.get_transform().base == 2
    assert drawn[pal.model("deltanet")][1] == [2.0, 4.0]
    assert "none" in [t.get_text() for t in ax.get_yticklabels()]
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == (
        "transformer (state grows with the sequence)")
    assert "recall-lab models" in ax.get_xlabel()

    # the tables carry the count: report.md's column, report.csv and report.json
    md = (tmp_path / "out" / "report.md").read_text()
    lines = md.splitlines()
    assert next(ln for ln in lines if ln.startswith("| model.name |")).endswith(
        "| failed | recurrent state per layer (numbers) | conv caches per layer |")  # last: the
    # other columns keep their places; Mamba2's conv cache: 3 columns of x, B and C (32 + 2 x 4)
    assert any(ln.startswith("| mamba2 | 4 | 4 | None |")
               and ln.endswith(f"| {state[('mamba2/4', 4)]:,.0f} | {3 * (32 + 2 * 4)} |")
               for ln in lines)
    # the transformer's d_state reads None: its model never reads the base config's 4
    assert any(ln.startswith("| transformer | 4 | None | None |")
               and ln.endswith("| grows as L | - |") for ln in lines)
    with open(tmp_path / "out" / "report.csv") as f:
        rows = {r["label"]: r for r in csv.DictReader(f)}
    assert float(rows["mamba2 / levels=4 / d_state=1"]["state_per_layer"]) == pytest.approx(
        state[("mamba2/1", 4)])
    assert rows["transformer / levels=4"]["state_per_layer"] == ""
    assert rows["transformer / levels=4"]["state_growth"] == "L"
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    one = {g["label"]: g for g in data["groups"]}["deltanet / levels=8 / num_heads=1"]
    assert one["state_per_layer"] == pytest.approx(state[("deltanet/1", 8)])
    assert one["state_growth"] == "constant"


def test_a_group_over_several_states_has_none_and_no_state_figure(zoo):
    root, _ = zoo
    rep = build_report([root], by=["model.name", "task.levels"])
    got = {g.label: g.state for g in rep["groups"]}
    assert got["mamba2 / levels=4"] == layer_state.UNKNOWN  # d_state 1 and 4 in one group
    assert got["transformer / levels=4"].growth == "L"
    assert not plots.state_axis(rep)  # no family at two states: no figure against state
    assert plots.state_axis(build_report([root]))


def test_one_build_per_model_and_task_and_torch_left_as_found(zoo, monkeypatch):
    root, runs = zoo
    built = []

    def counting(cfg):
        built.append(cfg)
        return build_model(cfg)

    monkeypatch.setattr(layer_state, "_CACHE", {})
    monkeypatch.setattr(layer_state, "build_model", counting)
    torch.manual_seed(3)
    before = torch.get_rng_state()
    build_report([root])
    assert torch.equal(torch.get_rng_state(), before)  # the report drew nothing from it
    # 5 rows x 2 tables (the table fixes the length the state is taken at), not 30 runs
    assert len(built) == len({(_row(r.config.model), r.config.task.levels[0][1]) for r in runs})
    assert len(built) == 10


def test_hax_counts_its_branch_slots_as_its_models_listing_does(zoo):
    """mamba2+hax: its decode state does not grow with L, and its recurrent state holds the
    branch's key and value slots beside the SSM state, as `recall-lab models` shows it: the
    report follows that count."""
    _, runs = zoo
    cfg = next(r.config for r in runs if r.config.model.name == "mamba2")
    hax = cfg.to_json()
    hax["model"] = {**hax["model"], "name": "mamba2+hax", "pattern": "hax"}
    got = layer_state.run_state(hax)
    model = build_model(run_config_from_json(hax, "hax").model)
    count = state_count(model, cfg.model.max_len)
    assert got == layer_state.LayerState(count.per_layer(), "constant",
                                         count.per_layer("conv"), "measured")
    assert got.numbers > by_hand(cfg)[0]  # more than the SSM state alone
    assert layer_state.run_state(None) == layer_state.UNKNOWN


def test_terminal_table_has_the_state_column(zoo):
    """`report`'s terminal table carries each group's state per layer as report.md does (last
    column), with the count `recall-lab models` gives."""
    from rich.console import Console

    from recall_lab.commands.experiments import report_table

    root, runs = zoo
    rep = build_report([root])
    console = Console(width=400, record=True, color_system=None)
    console.print(report_table(rep))
    rows = [[c.strip() for c in ln.replace("┃", "│").split("│")[1:-1]]
            for ln in console.export_text().splitlines() if ln.count("│") + ln.count("┃") > 2]
    head = next(r for r in rows if r[0] == "model.name")
    assert head[-2:] == ["recurrent state per layer", "conv per layer"]
    cfg = next(r.config for r in runs if r.config.model.name == "mamba2"
               and r.config.model.d_state == 4)
    numbers, _ = by_hand(cfg)
    cells = [r for r in rows if r[0] == "mamba2" and r[head.index("model.d_state")] == "4"]
    assert cells and all(r[-2] == f"{numbers:,.0f}" for r in cells)
    assert all(r[-2] == "grows as L" for r in rows if r[0] == "transformer")


def test_a_log_l_state_is_counted_at_each_runs_length():
    """log-linear-mamba2's Fenwick levels (ceil(log2 L) + 1 states of d_state x headdim per
    head, arXiv 2506.04761) at each run's length, growth "log L": a count the report shows and
    `place` reads as a fixed count at that length (`state_class`), not a growing row."""
    import math

    from recall_lab.experiments.place import state_class

    tables = {"name": "loglin", "model": {"name": "log-linear-mamba2", "d_model": 16},
              "train": {"steps": 6, "batch_size": 4, "device": "cpu"},
              "task": {"levels": [[4, 4]], "values": 4},
              "grid": {"task.levels": [[[4, 4]], [[16, 16]]]}}
    states = {}
    for run in expand(tables, "loglin").runs:
        cfg = run.config
        got = layer_state.run_state(cfg.to_json())
        length = cfg.model.max_len
        # expand 2 x d_model 16 = 1 head of 32 channels, d_state 16: 512 per level
        assert got.numbers == 512 * (math.ceil(math.log2(length)) + 1)
        assert (got.growth, got.length, got.grows) == ("log L", length, False)
        assert got.text() == f"{got.numbers:,.0f} at {length} tokens (log L)"
        assert state_class(got) == "log L"
        states[length] = got.numbers
    assert len(states) == 2 and len(set(states.values())) == 2  # longer runs, more levels
    assert state_class(layer_state.LayerState(None, "L")) == "grows"
    assert state_class(layer_state.LayerState(2048.0, "constant")) == "fixed"
    assert state_class(layer_state.UNKNOWN) == "unknown"


def test_layers_that_differ_give_each_layers_count_never_their_mean():
    """Based: a sliding window of 4 keys (the 3 keys and 3 values before the token, 64 wide:
    384) and a Taylor layer of feature dimension 2 (1 + 2 + 3 features, each with a 64-wide
    value row and a normaliser: 6 x 64 + 6 = 390), by hand from the layers' definitions. The
    state's text gives both layers' counts, never their mean 387 as if one layer held it;
    `numbers` keeps the mean (the figures' x, the neighbours' order)."""
    tables = {"model": {"name": "based", "d_model": 64, "mixer_kwargs": {"feature_dim": 2}},
              "train": {"steps": 6, "batch_size": 4, "device": "cpu"},
              "task": {"levels": [[4, 4]], "values": 16}}
    run = expand({**tables, "name": "based"}, "based").runs[0]
    got = layer_state.run_state(run.config.to_json())
    assert got.layers == (384.0, 390.0) and got.numbers == (384 + 390) / 2
    assert got.text() == "384 (layer 1) / 390 (layer 2)"
    assert "387" not in got.text()
    # layers that agree keep one count
    assert layer_state.LayerState(256.0, "constant").text() == "256"
