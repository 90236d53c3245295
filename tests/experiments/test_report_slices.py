"""Slices in reports: where a task gives slices (zoology's MQAR scored per number of pairs), the
report gives the metric per slice at each group's best lr, mean and sample std over seeds,
checked against values worked out by hand; a report of runs without slices has no slice key."""

import json

import pytest

from recall_lab import checkpoint as ck
from recall_lab.experiments.grid import expand
from recall_lab.experiments.report import _json, build_report, write_report

# seed -> test slices (label -> acc) of the one lr
SLICES = {0: {"4": 1.0, "16": 0.5}, 1: {"4": 0.9, "16": 0.3}, 2: {"4": 0.8}}


def _sweep(tmp_path, tiny, slices: bool):
    tiny["grid"] = {"train.seed": [0, 1, 2]}
    exp = expand(tiny, "x")
    root = tmp_path / "sweep"
    entries = []
    for run in exp.runs:
        folder = root / run.name
        folder.mkdir(parents=True)
        seed = run.config.train.seed
        ck.write_json(folder / ck.CONFIG, run.config.to_json())
        (folder / ck.METRICS).write_text(json.dumps({"step": 3, "split": "valid", "acc": 0.5,
                                                     "loss": 1.0}) + "\n")
        test = {"acc": 0.7, "exact": 0.0, "loss": 0.3}
        if slices:
            test["slices"] = {k: {"acc": v, "exact": 0.0, "n": 10}
                              for k, v in SLICES[seed].items()}
        ck.write_json(folder / ck.SUMMARY, {"steps": 6, "valid": {"acc": 0.5, "loss": 1.0},
                                            "test": test})
        entries.append({"name": run.name, "hash": run.hash, "values": run.values,
                        "status": "done", "config": run.config.to_json()})
    ck.write_json(root / "sweep.json", {"experiment": "x", "report": {}, "reference": {},
                                        "runs": entries})
    return root


def test_per_slice_means_by_hand(tmp_path, tiny):
    rep = build_report([_sweep(tmp_path, tiny, slices=True)])
    (row,) = rep["rows"]
    # slice 4: 1.0, 0.9, 0.8 -> mean 0.9, std 0.1; slice 16: 0.5, 0.3 -> mean 0.4, std 0.1414
    assert list(row["slices"]) == ["4", "16"]  # numeric labels in numeric order
    assert row["slices"]["4"] == {"mean": pytest.approx(0.9), "std": pytest.approx(0.1),
                                  "seeds": 3}
    assert row["slices"]["16"]["mean"] == pytest.approx(0.4)
    assert row["slices"]["16"]["std"] == pytest.approx(2 ** 0.5 / 10)
    assert row["slices"]["16"]["seeds"] == 2
    md = write_report(rep, tmp_path / "out", plots=False)[0].read_text()
    assert "## Per slice" in md and "| 16 | 0.4000 +/- 0.1414 | 2 |" in md
    assert _json(rep)["groups"][0]["slices"]["4"]["seeds"] == 3


def test_no_slices_no_key(tmp_path, tiny):
    rep = build_report([_sweep(tmp_path, tiny, slices=False)])
    assert "slices" not in rep["rows"][0] and "slices" not in _json(rep)["groups"][0]
    assert "Per slice" not in write_report(rep, tmp_path / "out", plots=False)[0].read_text()
