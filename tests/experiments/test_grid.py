"""Grid expansion: cross product, linked axes, exclusions, base files, names and hashes, and one
clear error for every kind of bad experiment (before anything runs)."""

import hashlib
import json
import subprocess
import sys

import pytest

from recall_lab.experiments.grid import expand, load_experiment, run_label, train_tokens
from recall_lab.generators.errors import RecallLabError


def _values(exp):
    return [tuple(r.values.values()) for r in exp.runs]


def test_cross_product_in_file_order(tiny):
    tiny["grid"] = {"model.name": ["mamba", "mamba+hax"], "train.lr": [1e-3, 3e-3],
                    "train.seed": [0, 1, 2]}
    exp = expand(tiny, "x")
    assert exp.axes == ["model.name", "train.lr", "train.seed"]
    want = [(m, lr, s) for m in ("mamba", "mamba+hax") for lr in (1e-3, 3e-3) for s in (0, 1, 2)]
    assert _values(exp) == want
    for r, (m, lr, s) in zip(exp.runs, want, strict=True):
        assert (r.config.model.name, r.config.train.lr, r.config.train.seed) == (m, lr, s)
        assert r.config.model.d_model == 16 and r.config.train.steps == 6  # base kept
    assert exp.runs[0].label == "mamba-lr0.001-s0"


def test_nested_dotted_keys_equal_quoted_ones(tiny):
    a = expand({**tiny, "grid": {"model.d_state": [4, 8]}}, "x")
    b = expand({**tiny, "grid": {"model": {"d_state": [4, 8]}}}, "x")
    assert [r.name for r in a.runs] == [r.name for r in b.runs]
    assert [r.config.model.d_state for r in a.runs] == [4, 8]
    assert a.runs[1].label == "d_state8"


def test_linked_axes_move_together(tiny):
    tiny["grid"] = {"train.seed": [0, 1]}
    tiny["link"] = [{"task.seq_len": [20, 40, 80], "train.batch_size": [8, 4, 2]}]
    exp = expand(tiny, "x")
    got = {(r.config.train.seed, r.config.task.seq_len, r.config.train.batch_size)
           for r in exp.runs}
    assert got == {(s, L, b) for s in (0, 1) for L, b in ((20, 8), (40, 4), (80, 2))}
    assert len(exp.runs) == 6


def test_exclusions_drop_exactly_the_matching_runs(tiny):
    tiny["grid"] = {"model.name": ["mamba", "mamba+hax", "mamba+sw"], "train.lr": [1e-3, 3e-3]}
    tiny["exclude"] = [{"model.name": "mamba", "train.lr": 3e-3},
                       {"model.name": ["mamba+hax", "mamba+sw"], "train.lr": 1e-3}]
    exp = expand(tiny, "x")
    assert sorted(_values(exp)) == sorted([("mamba", 1e-3), ("mamba+hax", 3e-3),
                                           ("mamba+sw", 3e-3)])


def test_exclusions_reach_inside_a_linked_whole_table_axis(tiny):
    """Rows linked as whole model tables (each with its lr) are cut by fields inside the table;
    a table that does not set the field is not matched, and the runs left keep their hashes."""
    tiny["grid"] = {"train.seed": [0, 1]}
    tiny["link"] = [{"model": [{"name": "mamba", "d_state": 1}, {"name": "mamba", "d_state": 4},
                               {"name": "mamba+hax"}],
                     "train.lr": [1e-3, 1e-3, 1e-2]},
                    {"task.levels": [[[4, 4]], [[8, 8]]]}]
    before = {r.name: r.hash for r in expand(tiny, "x").runs}
    tiny["exclude"] = [{"model.name": "mamba", "model.d_state": 1, "task.levels": [[8, 8]]}]
    runs = expand(tiny, "x").runs
    got = {(r.config.model.name, r.config.model.d_state, r.config.task.levels[0][0])
           for r in runs}
    assert (("mamba", 1, 8) not in got and ("mamba", 1, 4) in got and ("mamba", 4, 8) in got
            and len(runs) == len(before) - 2)
    assert all(before[r.name] == r.hash for r in runs)
    # mamba+hax's table sets no d_state: a rule on d_state alone leaves it in
    tiny["exclude"] = [{"model.d_state": [1, 4]}]
    assert {r.config.model.name for r in expand(tiny, "x").runs} == {"mamba+hax"}


def test_hash_is_sha256_of_the_full_config_and_changes_with_any_value(tiny):
    tiny["grid"] = {"train.seed": [0]}
    run = expand(tiny, "x").runs[0]
    text = json.dumps(run.config.to_json(), sort_keys=True, separators=(",", ":"))
    assert run.hash == hashlib.sha256(text.encode()).hexdigest()[:8]
    assert run.name == f"s0-{run.hash}"
    again = expand(tiny, "x").runs[0]
    assert again.hash == run.hash
    tiny["train"]["warmup"] = 3  # not swept, still part of the config
    assert expand(tiny, "x").runs[0].hash != run.hash


def test_base_file_and_overrides(tmp_path, tiny):
    (tmp_path / "base.toml").write_text(
        '[model]\nname = "mamba+hax"\nd_model = 16\nd_state = 4\nk = 4\n'
        '[train]\nsteps = 50\nlr = 0.01\ndevice = "cpu"\n[task]\nlevels = [[3, 3]]\nvalues = 4\n')
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "exp.toml").write_text('base = "../base.toml"\n[train]\nsteps = 7\n'
                                  '[grid]\n"train.seed" = [0, 1]\n')
    exp = load_experiment(sub / "exp.toml")
    assert exp.name == "exp"
    c = exp.runs[0].config
    assert (c.model.name, c.model.k, c.train.steps, c.train.lr) == ("mamba+hax", 4, 7, 0.01)


def test_levels_axis_and_token_estimate(tiny):
    tiny["grid"] = {"task.levels": [[[2, 2], [3, 3]], [[4, 6]]]}
    exp = expand(tiny, "x")
    assert [r.label for r in exp.runs] == ["levels2x3", "levels4-6"]
    c = exp.runs[0].config  # 2 contexts x 3 keys: BOS + 2 * (2 + 2*3*2) + SEP = 30 tokens
    assert c.task.max_len == 30
    assert train_tokens(c) == 6 * 4 * 30


def test_run_label_is_filesystem_safe():
    assert run_label({"model.name": "mamba+hax", "task.preset": "a/b c"}) == "mamba+hax-preseta_b_c"


@pytest.mark.parametrize("change, message", [
    ({"grid": {"train.lrr": [1]}}, "unknown field 'train.lrr'"),
    ({"grid": {"optim.lr": [1]}}, "'optim.lr' is not a config field"),
    ({"grid": {"train.lr": 0.1}}, "must be a non-empty list"),
    ({"grid": {"train.lr": [0.1, -1.0]}}, "run lr-1: invalid configuration: lr:"),
    ({"grid": {"model.name": ["mamba", "mamba+nope"]}}, "unknown model 'mamba+nope'"),
    ({"link": [{"train.lr": [1e-3, 1e-2], "train.seed": [0]}]}, "different lengths"),
    ({"grid": {"train.lr": [1e-3]}, "exclude": [{"train.seed": 0}]}, "not swept"),
    ({"grid": {"train.lr": [1e-3]}, "exclude": [{"train.lr": 1e-3}]}, "no runs left"),
    ({"grid": {"train.seed": [0, 0]}}, "have the same config"),
    ({"grids": {}}, "unknown key or table 'grids'"),
    ({"name": "../x"}, "plain folder name"),
])
def test_bad_experiments_are_one_clear_error(tiny, change, message):
    with pytest.raises(RecallLabError, match=message.replace("(", r"\(").replace("+", r"\+")):
        expand({**tiny, **change}, "x")


def test_cli_bad_experiment_one_line_exit_2_nothing_written(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nname = "mamba"\n[task]\npreset = "mini-mqjr"\n'
                   '[grid]\n"train.lr" = [0.001, -1.0]\n')
    r = subprocess.run([sys.executable, "-m", "recall_lab.cli", "sweep", str(bad),
                        "--out", str(tmp_path / "runs")], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "lr" in r.stderr
    assert not (tmp_path / "runs").exists()


def test_axis_over_a_typed_sub_config(tiny):
    tiny["model"]["decimation"] = {"L_base": 8}
    tiny["grid"] = {"model.decimation.beta": [0.5, 0.25]}
    exp = expand(tiny, "x")
    assert [r.label for r in exp.runs] == ["beta0.5", "beta0.25"]
    assert [(r.config.model.decimation.beta, r.config.model.decimation.L_base)
            for r in exp.runs] == [(0.5, 8), (0.25, 8)]
    assert tiny["model"]["decimation"] == {"L_base": 8}  # the base is not changed
    with pytest.raises(RecallLabError, match="decimation.betta"):
        expand({**tiny, "grid": {"model.decimation.betta": [0.5]}}, "x")


def test_whole_table_axis_mixes_rows_with_different_fields(tiny):
    """A `model` axis of tables: attamba rows carry their sub-config, baselines do not."""
    tiny["grid"] = {"train.seed": [0]}
    tiny["link"] = [{"model": [{"name": "attamba", "attamba": {"chunk": 4}},
                               {"name": "transformer+sw", "k": 7}, {"name": "mamba"}]}]
    exp = expand(tiny, "x")
    cfgs = [r.config.model for r in exp.runs]
    assert [c.name for c in cfgs] == ["attamba", "transformer+sw", "mamba"]
    assert cfgs[0].attamba.chunk == 4 and cfgs[1].attamba is None and cfgs[1].k == 7
    assert cfgs[2].d_model == 16  # the base table is kept under the merged value
    assert [r.label for r in exp.runs] == ["s0-attamba-chunk4", "s0-transformer+sw-k7",
                                           "s0-mamba"]
    tiny["link"] = [{"model": [{"name": "mamba", "bogus": 1}]}]
    with pytest.raises(RecallLabError, match="bogus"):
        expand(tiny, "x")
    tiny["link"] = [{"model": ["mamba"]}]
    with pytest.raises(RecallLabError, match="takes tables"):
        expand(tiny, "x")
