"""`place --pilot-rule 2` and `place --lr-window` on the tiny reference, every run's outcome
chosen by hand (the sweep engine's pool replaced by a loop that writes each run's summary; no
training): the pilot
runs 2 seeds per lr, an edge winner extends its grid until it is interior, the report prints
the accuracies, and the placement lives in its own folder; rule 1's pilot keeps its configs;
--lr-window measures the window at the boundary table once the cells finish."""

from __future__ import annotations

import json
from pathlib import Path

from recall_lab.experiments import engine
from recall_lab.experiments import lr_window as lw
from recall_lab.experiments import place as pl
from recall_lab.experiments.reference import read_protocol

from .place_fixtures import make_reference

MIXER, KWARGS = "gla", {"num_heads": 2}


def _fake_pool(valid, solved, trained):
    """The sweep engine's process pool replaced by a loop that writes each run's summary
    (no training): held-out accuracy `valid(lr)` (+0.001 for odd seeds) for the pilot's runs,
    and for the others test accuracy 1.0 where `solved(size, lr, seed)` else 0.3."""
    def pool(payloads, workers, threads, monitor, on_result):
        for p in payloads:
            cfg, folder = p["config"], Path(p["dir"])
            lr, seed, size = cfg["train"]["lr"], cfg["train"]["seed"], cfg["task"]["levels"][0][1]
            kind = folder.parent.name
            acc = (valid(lr) + 0.001 * (seed % 2)) if kind == "pilot" else \
                (1.0 if solved(size, lr, seed) else 0.3)
            summary = {"steps": 6, "stopped_at": 6, "best_step": 6, "valid": {"acc": acc},
                       "test": {"acc": acc}, "wall_s_this_session": 0.0}
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.json").write_text(json.dumps(cfg))
            (folder / "summary.json").write_text(json.dumps(summary))
            trained.append((kind, lr, seed, size))
            on_result({"name": p["name"], "status": "done", "summary": summary, "wall_s": 0.0})
    return pool


def test_pilot_rule_2_extends_an_edge_winner_and_gets_its_own_folder(tmp_path, monkeypatch):
    ref = make_reference(tmp_path / "ref")  # its pilot grid: one lr, 3e-3
    protocol = read_protocol(ref)
    trained: list[tuple] = []
    # held-out accuracy peaks at 3e-2: the one-lr grid grows down to 1e-3, then up to 1e-1
    peak = {1e-3: 0.40, 3e-3: 0.50, 1e-2: 0.60, 3e-2: 0.70, 1e-1: 0.65}
    monkeypatch.setattr(engine, "_local", _fake_pool(peak.__getitem__,
                                                     lambda size, lr, seed: size == 2, trained))
    answer = pl.place(MIXER, KWARGS, reference=ref, check=False, out=tmp_path / "out",
                      plots=False, pilot_rule=2)
    pilot = [(lr, seed) for name, lr, seed, _ in trained if name == "pilot"]
    assert sorted({lr for lr, _ in pilot}) == sorted(peak) and len(pilot) == 2 * len(peak)
    assert {seed for _, seed in pilot} == set(lw.PILOT_SEEDS)
    rule = answer["pilot_rule"]
    assert answer["lr"] == rule["lr"] == 3e-2 and rule["interior"]
    assert rule["means"]["0.03"] == sum([0.70, 0.701]) / 2
    # every cell ran at the picked lr
    assert {lr for name, lr, _, _ in trained if name == "cells"} == {3e-2}
    folder = Path(answer["folder"])
    assert folder.name.endswith("-pilot2")
    assert json.loads((folder / "place.json").read_text())["pilot"]["rule"] == 2
    report = (folder / "report.md").read_text()
    assert "- pilot, rule 2 (mean held-out accuracy over 2 seeds per lr): 0.001: 0.401" in report
    assert "- lr 0.03: interior" in report
    # rule 1's folder and pilot configs are not touched by rule 2's existence
    table = pl.mixer_table(MIXER, KWARGS)
    assert pl._folder_name(pl.mixer_row_label(MIXER, KWARGS), table, ref, protocol) \
        != folder.name
    assert [r.config.to_json()["train"]["seed"]
            for r in pl.pilot_experiment(protocol, table).runs] == [protocol.pilot["seed"]]


def test_place_lr_window_measures_the_boundary_table_after_the_cells(tmp_path, monkeypatch):
    from recall_lab import api

    ref = make_reference(tmp_path / "ref")
    trained: list[tuple] = []
    # 2 pairs: every seed solves; 3 pairs: even seeds solve at 3e-3 only -> boundary table 3
    monkeypatch.setattr(engine, "_local", _fake_pool(
        lambda lr: 0.5, lambda size, lr, seed: size == 2 or (lr == 3e-3 and seed % 2 == 0),
        trained))
    monkeypatch.setattr(lw, "LADDER", (1e-3, 3e-3, 1e-2))  # a short default ladder: fewer runs
    answer = api.place(MIXER, KWARGS, reference=ref, check=False, out=tmp_path / "out",
                       plots=False, quiet=True, lr_window=True, seeds=4)
    win = answer["lr_window"]
    assert win["table"] == 3 and win["best"] == 3e-3
    assert [r["lr"] for r in win["rungs"]] == [1e-3, 3e-3, 1e-2]
    # the placement's own 3-pair cells at 3e-3 counted in the window, not retrained
    cells_3 = {seed for name, lr, seed, size in trained if name == "cells" and size == 3}
    window_3e3 = {seed for name, lr, seed, _ in trained if name == "window" and lr == 3e-3}
    assert cells_3 and not (cells_3 & window_3e3)


def test_a_dry_run_with_lr_window_says_what_follows_the_cells(tmp_path):
    from typer.testing import CliRunner

    from recall_lab.cli import app

    ref = make_reference(tmp_path / "ref")
    r = CliRunner().invoke(app, ["place", MIXER, "--kwargs", json.dumps(KWARGS), "--reference",
                                 str(ref), "--dry-run", "--no-estimate", "--no-check",
                                 "--lr-window", "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "then the lr window (--lr-window), once the cells finish: at the boundary table" in text
    command = f"recall-lab lr-window {MIXER} --kwargs '{json.dumps(KWARGS)}' --table T --dry-run"
    assert command in text
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


def test_a_place_toml_may_declare_pilot_rule_2(tmp_path):
    import pytest

    from recall_lab.generators.errors import RecallLabError

    from .place_fixtures import PLACE

    ref = make_reference(tmp_path / "ref", place=PLACE + "rule = 2\n")
    protocol = read_protocol(ref)
    assert protocol.pilot["rule"] == 2 and protocol.pilot["seeds"] == list(lw.PILOT_SEEDS)
    plan = pl.place(MIXER, KWARGS, reference=ref, check=False, out=tmp_path / "out",
                    dry_run=True)
    assert plan["folder"].endswith("-pilot2") and plan["pilot_runs"] == 2
    plain = read_protocol(make_reference(tmp_path / "plain"))
    assert "rule" not in plain.pilot  # a rule-1 protocol reads as it always did
    bad = make_reference(tmp_path / "bad", place=PLACE + "rule = 3\n")
    with pytest.raises(RecallLabError, match=r"\[pilot\] rule must be 1 or 2, got 3"):
        read_protocol(bad)
