"""Replication as a command: `sweep EXP --replicate CLAIMS --seeds N` runs the groups an
exploratory claim compares again, at the original's chosen lr, on seeds beyond the original's,
with the claim recorded before the first run; `report` shows original and replication side by
side. On a miniature experiment (6 steps a run)."""

import copy
import json

import pytest
from typer.testing import CliRunner

from recall_lab import checkpoint as ck
from recall_lab.cli import app
from recall_lab.experiments import claims as prereg
from recall_lab.experiments.engine import read_index
from recall_lab.experiments.grid import expand
from recall_lab.experiments.replicate import plan_replication
from recall_lab.experiments.report import build_report
from tests.cli_checks import fails_with, snapshot
from tests.experiments.conftest import TINY

CLAIM = ('[[report.expect]]\nclaim = "state 4 solves more than state 2"\nstat = "solved"\n'
         'a = { "model.d_state" = 4 }\nb = { "model.d_state" = 2 }\nop = ">"\n')


# the original's validation accuracy per (state, lr): the report chooses 3e-3 for state 2 and
# 1e-3 for state 4, so the replication must take a different lr per group
VALID = {(2, 1e-3): 0.3, (2, 3e-3): 0.6, (4, 1e-3): 0.9, (4, 3e-3): 0.5}


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """A recorded sweep (no training: configs and summaries written as a sweep leaves them) of
    two states x two lrs, seed 0, and its experiment file."""
    tmp_path = tmp_path_factory.mktemp("replicate")
    tiny = copy.deepcopy(TINY)
    tiny["name"] = "mini"
    tiny["grid"] = {"model.d_state": [2, 4], "train.lr": [1e-3, 3e-3], "train.seed": [0]}
    path = tmp_path / "mini.toml"
    lines = ['name = "mini"']
    for table in ("model", "train", "task", "grid"):
        lines.append(f"[{table}]")
        lines += [f'"{k}" = {json.dumps(v)}' for k, v in tiny[table].items()]
    path.write_text("\n".join(lines) + "\n")
    exp = expand(tiny, "mini")
    root = tmp_path / "runs"
    entries = []
    for run in exp.runs:
        folder = root / "mini" / run.name
        folder.mkdir(parents=True)
        ck.write_json(folder / ck.CONFIG, {**run.config.to_json(), "n_params": 1})
        acc = VALID[(run.config.model.d_state, run.config.train.lr)]
        ck.write_json(folder / ck.SUMMARY, {"steps": 6, "stopped_at": 6,
                                            "valid": {"acc": acc}, "test": {"acc": acc}})
        entries.append({"name": run.name, "status": "done", "config": run.config.to_json()})
    ck.write_json(root / "mini" / "sweep.json", {"experiment": "mini", "runs": entries})
    claims = tmp_path / "claims.toml"
    claims.write_text(CLAIM)
    return exp, path, claims, root


def test_plan_takes_the_chosen_lr_and_fresh_seeds(original):
    exp, _, claims, root = original
    rep = build_report([root / "mini"])
    best = {g.values["model.d_state"]: g.best_lr for g in rep["groups"]}
    assert best == {2: 3e-3, 4: 1e-3}
    spec = [{"claim": "c", "stat": "solved", "a": {"model.d_state": 4},
             "b": {"model.d_state": 2}, "op": ">"}]
    derived, record = plan_replication(exp, root, spec, 3)
    assert derived.name == "mini-replication" and record["seeds"] == [1, 2, 3]
    assert record["original_seeds"] == [0]
    assert len(derived.runs) == 2 * 3
    originals = {(r.config.model.d_state, r.config.train.lr): r.config.to_json()
                 for r in exp.runs if r.config.train.seed == 0}
    for run in derived.runs:
        state = run.config.model.d_state
        assert run.config.train.lr == best[state]  # the lr the original report chose
        want = json.loads(json.dumps(originals[(state, best[state])]))
        have = run.config.to_json()
        assert have["train"].pop("seed") in (1, 2, 3)
        want["train"].pop("seed")
        assert have == want  # nothing else changed
    # claims are read from the replication's own report table, checked on its groups
    assert derived.report["expect"] == spec and derived.report["by"] == ["model.d_state"]


def test_replicate_records_the_claim_first_and_report_shows_both(original):
    _, path, claims, root = original
    r = CliRunner().invoke(app, ["sweep", str(path), "--out", str(root), "--replicate",
                                 str(claims), "--seeds", "2"])
    assert r.exit_code == 0, r.output
    folder = root / "mini-replication"
    index = read_index(folder)
    assert index["replicates"]["seeds"] == [1, 2] and index["replicates"]["original"] == "mini"
    (reg,) = prereg.read_registry(folder)["registrations"]
    assert reg["claims"][0]["claim"] == "state 4 solves more than state 2"
    assert {e["registration"] for e in index["runs"]} == {reg["id"]}
    assert all(e["launched"] >= reg["time"] for e in index["runs"])
    first = min(p.stat().st_mtime for p in folder.rglob(ck.CONFIG))
    assert (folder / prereg.CLAIMS).stat().st_mtime <= first
    assert sorted({e["config"]["train"]["seed"] for e in index["runs"]}) == [1, 2]

    r = CliRunner().invoke(app, ["report", str(folder), "--no-plots"])
    assert r.exit_code == 0, r.output
    data = json.loads((folder / "report.json").read_text())
    (claim,) = data["replication"]["claims"]
    assert claim["replication"]["registered"] == "pre-registered"
    assert claim["original"]["registered"] != "pre-registered"  # it was exploratory there
    orig = build_report([root / "mini"])
    mine = build_report([folder])
    for g in claim["groups"]:
        o = next(x for x in orig["groups"] if x.label == g["label"])
        m = next(x for x in mine["groups"] if x.label == g["label"])
        assert g["original"]["solved"] == o.solved.text() and g["original"]["n"] == 1
        assert g["replication"]["solved"] == m.solved.text() and g["replication"]["n"] == 2
        assert g["original"]["seeds"] == [0] and g["replication"]["seeds"] == [1, 2]
    md = (folder / "report.md").read_text()
    assert "## Replication" in md and "(seeds 0)" in md and "seeds 1-2" in md
    assert "- replication: " in md and "pre-registered" in md
    assert "## Replication" in r.stdout

    # again: nothing new to train, the same seeds
    r = CliRunner().invoke(app, ["sweep", str(path), "--out", str(root), "--replicate",
                                 str(claims), "--seeds", "2"])
    assert r.exit_code == 0 and "0 of 4 runs done" not in r.stdout, r.output
    assert read_index(folder)["counts"]["ran"] == 0


def test_replicate_refusals_are_one_line(original, tmp_path):
    _, path, claims, root = original
    before = snapshot(root)
    fails_with(["sweep", path, "--out", root, "--seeds", "3"], "--seeds goes with --replicate")
    empty = tmp_path / "empty.toml"
    empty.write_text('name = "x"\n')
    fails_with(["sweep", path, "--out", root, "--replicate", empty], "no [[report.expect]]")
    fails_with(["sweep", path, "--out", tmp_path / "nowhere", "--replicate", claims],
               "no sweep of mini")
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(CLAIM.replace("= 2 }", "= 8 }"))
    fails_with(["sweep", path, "--out", root, "--replicate", wrong], "matches 0 groups")
    assert snapshot(root) == before
