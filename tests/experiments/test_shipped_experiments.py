"""The shipped experiments (experiments/STUDY/*.toml) end to end in miniature: the file's own base
config, claims and grid shape, each axis cut to two values and 2 training steps; the sweep trains
them, and the report's numbers must be those of the runs' summaries (best lr on validation, test
mean and sample std over seeds), with every declared claim evaluated."""

import json
import statistics
from pathlib import Path

import pytest

from recall_lab.config import read_toml
from recall_lab.experiments.engine import run_sweep
from recall_lab.experiments.grid import expand, load_experiment
from recall_lab.experiments.report import (
    RunRecord,
    _flat_config,
    aggregate,
    build_report,
    check_expectations,
)
from recall_lab.experiments.shipped import NOT_EXPERIMENTS

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
# every experiment file by name, from its study's folder (replications/, tasks/ and lr-window/
# hold none)
FILES = {p.stem: p for p in sorted(EXPERIMENTS.glob("*/*.toml"))
         if p.parent.name not in NOT_EXPERIMENTS}
SHIPPED = ["capacity", "capacity-mamba2", "recipe", "default-flags", "ks-question", "mini-table1",
           "mini-table1-v1", "leak-audit", "attamba-jr", "ks-ablation", "ks-oracle",
           "capacity-mamba2-state1", "capacity-mamba2-state1-16", "zoology-fig2"]
# seeds per cell: 10 for the experiments re-measured to the solve-rate standard (issue 24: a
# solve rate needs 10+ seeds for an interval that separates 0.9 from 0.3), 3 for the others
SEEDS = {name: set(range(10))
         for name in ("capacity", "capacity-mamba2", "recipe", "default-flags", "ks-question",
                         "mini-table1", "ks-oracle", "capacity-mamba2-state1",
                         "capacity-mamba2-state1-16", "zoology-fig2")}


def miniature(data: dict) -> dict:
    """Two values per axis (the first and the last, so excluded corners stay excluded or
    other rows remain), 2 steps, small held-out sets."""
    data = json.loads(json.dumps(data))  # deep copy
    data["grid"] = {k: ([v[0], v[-1]] if len(v) > 1 else v)
                    for k, v in data.get("grid", {}).items()}
    for link in data.get("link", []) or []:
        for k, v in link.items():
            link[k] = [v[0], v[-1]] if len(v) > 1 else v
    data["train"] = {**data.get("train", {}), "steps": 2, "eval_every": 1, "eval_samples": 8,
                     "test_samples": 8, "warmup": 1}
    if data["train"].get("recipe"):  # a recipe fixes its warm-up; a fixed set of one batch
        del data["train"]["warmup"]
        data["train"]["train_examples"] = data["train"].get("batch_size", 32)
    return data


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_experiment_is_valid(name):
    exp = load_experiment(FILES[name])
    assert exp.name == name and exp.runs
    seeds = {r.config.train.seed for r in exp.runs}
    assert seeds == SEEDS.get(name, {0, 1, 2})
    assert exp.report.get("expect"), "claims must be declared so that --check tests them"


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_experiment_in_miniature(name, tmp_path):
    path = FILES[name]
    data = miniature(read_toml(path))
    exp = expand(data, name, path)
    index = run_sweep(exp, tmp_path, workers=2)  # the suite runs on one core: use the other
    assert index["counts"]["done"] == len(exp.runs)
    rep = build_report([tmp_path / name])
    # every run lands in exactly one group; checks: recomputed from the summaries
    assert sum(len(g.runs) for g in rep["groups"]) == len(exp.runs)
    for g in rep["groups"]:
        summaries = {r.name: json.loads((r.folder / "summary.json").read_text()) for r in g.runs}
        by_lr: dict = {}
        for r in g.runs:
            by_lr.setdefault(r.config["train.lr"], []).append(summaries[r.name])
        valid = {lr: statistics.fmean(s["valid"]["acc"] for s in ss) for lr, ss in by_lr.items()}
        best = max(valid, key=lambda lr: (valid[lr], -lr))
        assert g.best_lr == pytest.approx(best) or valid[g.best_lr] == pytest.approx(valid[best])
        tests = [s["test"]["acc"] for s in by_lr[g.best_lr]]
        assert g.mean == pytest.approx(statistics.fmean(tests))
        if len(tests) > 1:
            assert g.std == pytest.approx(statistics.stdev(tests))
    # each declared claim was evaluated on groups that exist in the miniature, or says why not
    assert len(rep["checks"]) == len(exp.report["expect"])
    for c in rep["checks"]:
        assert isinstance(c["ok"], bool) and c["detail"]


# experiments whose claims compare their rows with another experiment's runs (the report is given
# both folders, as the file's header says); ks-ablation's alpha = 0.1 rows were the 3-seed
# capacity.toml of commit dbc56f4, since redesigned, so its claims cannot be checked today
COMPANIONS = {"ks-question": ["capacity"], "ks-oracle": ["capacity", "ks-question"],
              "capacity-mamba2-state1": ["capacity-mamba2"],
              "capacity-mamba2-state1-16": ["capacity-mamba2", "capacity-mamba2-state1"],
              "leak-audit": ["mini-table1-v1"]}
UNCHECKABLE = {("ks-ablation", 0), ("ks-ablation", 1)}


def _records(exp, metric: str, acc: float) -> list[RunRecord]:
    """The experiment's runs as finished records, every metric at `acc` (not solved at 0.5, so
    no metrics.jsonl is read): what the report would group after a complete sweep."""
    summary: dict = {split: {"acc": acc, "loss": 1.0} for split in ("valid", "test")}
    for split in summary:  # the experiment's own metric, e.g. test.x8-full.acc
        node = summary[split]
        *parents, leaf = metric.split(".")[1:]
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = acc
    return [RunRecord(r.name, Path("/nonexistent") / r.name, "done",
                      _flat_config(r.config.to_json()), summary)
            for r in exp.runs]


@pytest.mark.parametrize("path", sorted(FILES.values()), ids=lambda p: p.stem)
def test_every_claim_selects_groups_of_its_own_grid(path):
    """Each declared claim of every experiment file resolves against the groups its own grid
    (and its companions') produces, with the file's `[report] by`: a typo in a selector key, or a
    selector that matches two groups, shows here and not after an hour of runs."""
    exp = load_experiment(path)
    metric = exp.report.get("metric", "test.acc")
    runs = [r for e in [exp, *(load_experiment(FILES[c])
                               for c in COMPANIONS.get(exp.name, []))]
            for r in _records(e, metric, 0.5)]
    _, groups = aggregate(runs, exp.report.get("by"), metric)
    assert sum(len(g.runs) for g in groups) == len(runs)
    for i, c in enumerate(check_expectations(groups, exp.report.get("expect") or [])):
        checkable = c["verdict"] in ("pass", "fail") and not c["detail"].startswith("cannot")
        assert checkable != ((exp.name, i) in UNCHECKABLE), f"{c['claim']}: {c['detail']}"
