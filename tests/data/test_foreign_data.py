"""Data made by another tool: a Parquet file written with pandas and an HF `datasets` folder
train with `recall-lab train --data`; bad schemas end in one line with nothing written; a run
records its data (resolved path + content hash), resumes from any folder, refuses changed or moved
data; a generator of a test package trains by import path inside a 2-worker sweep."""

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.generators.foreign import read_foreign

runner = CliRunner()
TRAIN = ["--model", "transformer", "--steps", "4", "--batch-size", "4", "--eval-every", "2",
         "--eval-samples", "8", "--device", "cpu"]


def _frame(n=60, seed=0, vocab=20):
    """Rows of 5-11 random ids; the one label, at the last position, is the first id."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        ids = rng.integers(0, vocab, size=int(rng.integers(5, 12))).tolist()
        rows.append({"input_ids": ids, "labels": [-100] * (len(ids) - 1) + [ids[0]]})
    return pd.DataFrame(rows)


def _train(args, cwd=None):
    old = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        return runner.invoke(app, ["train", *TRAIN, *args])
    finally:
        os.chdir(old)


def _last_line(res) -> str:
    lines = [x for x in res.output.strip().splitlines() if x.strip()]
    assert res.exit_code == 2, res.output
    return lines[-1]


def test_a_pandas_parquet_file_trains_and_its_labels_are_used_as_given(tmp_path):
    frame = _frame()
    frame.to_parquet(tmp_path / "rows.parquet")
    res = _train(["--data", str(tmp_path / "rows.parquet"), "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    kw = cfg["task"]["kwargs"]
    assert cfg["task"]["generator"] == "dataset" and cfg["train"]["data"] == str(
        (tmp_path / "rows.parquet").resolve())
    assert kw["vocab_size"] == 1 + max(max(r) for r in frame.input_ids)
    assert kw["max_len"] == max(len(r) for r in frame.input_ids)
    assert (kw["valid"], kw["test"], kw["split_seed"]) == (0.1, 0.1, 0)
    splits, _, how = read_foreign(tmp_path / "rows.parquet", {})
    assert how == "fraction" and sum(len(s.lengths) for s in splits.values()) == 60
    assert [len(splits[s].lengths) for s in ("train", "valid", "test")] == [48, 6, 6]
    # labels as given: every test row's one target is its first id
    x, y = splits["test"].padded(np.arange(6))
    assert (y.max(1) == x[:, 0]).all() and ((y != -100).sum(1) == 1).all()


def test_an_hf_datasets_folder_trains_by_split_name(tmp_path):
    datasets = pytest.importorskip("datasets")
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_pandas(_frame(40)),
                               "validation": datasets.Dataset.from_pandas(_frame(8, 1)),
                               "test": datasets.Dataset.from_pandas(_frame(8, 2))})
    dd.save_to_disk(str(tmp_path / "hf"))
    splits, files, how = read_foreign(tmp_path / "hf")
    assert how == "named" and [len(splits[s].lengths) for s in ("train", "valid", "test")] == \
        [40, 8, 8]
    assert all(len(h) == 64 for h in files.values())
    res = _train(["--data", str(tmp_path / "hf"), "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["test"]["n"] == 8


@pytest.mark.parametrize("frame, says", [
    (pd.DataFrame({"input_ids": [[1, 2]], "tokens": [[1, 2]]}), "no labels column"),
    (pd.DataFrame({"input_ids": [[1, 2, 3]], "labels": [[-100, 2]]}), "3 input_ids but 2 labels"),
    (pd.DataFrame({"input_ids": [[1, -2]], "labels": [[-100, 2]]}), "input_ids must be >= 0"),
    (pd.DataFrame({"input_ids": [[1, 2]] * 20, "labels": [[-100, -100]] * 20}),
     "every training label is -100"),
    (pd.DataFrame({"input_ids": [[1.5, 2.0]], "labels": [[-100, 2]]}), "lists of integers"),
])
def test_a_bad_dataset_is_one_line_and_nothing_is_written(tmp_path, frame, says):
    frame.to_parquet(tmp_path / "bad.parquet")
    res = _train(["--data", str(tmp_path / "bad.parquet"), "--out", str(tmp_path / "run")])
    assert says in _last_line(res)
    assert not (tmp_path / "run").exists()


def test_a_relative_data_path_resumes_from_another_folder_and_changed_data_is_refused(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    _frame().to_parquet(work / "rows.parquet")
    res = _train(["--data", "rows.parquet", "--out", str(tmp_path / "run")], cwd=work)
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["train", "--resume", "--out", str(tmp_path / "run"),
                              "--steps", "6"])
    assert res.exit_code == 0, res.output  # from this test's folder, not `work`
    res = runner.invoke(app, ["eval", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    _frame(seed=5).to_parquet(work / "rows.parquet")  # the data changes under the run
    res = runner.invoke(app, ["train", "--resume", "--out", str(tmp_path / "run"),
                              "--steps", "8"])
    assert "content sha256" in _last_line(res)
    shutil.move(work / "rows.parquet", tmp_path / "elsewhere.parquet")
    res = runner.invoke(app, ["train", "--resume", "--out", str(tmp_path / "run"),
                              "--steps", "8"])
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    line = _last_line(res)
    assert "does not exist" in line and cfg["task"]["kwargs"]["sha256"] in line


@pytest.mark.slow  # two worker processes start (about 50 s on the 2-core machine under load)
def test_a_generator_by_import_path_in_a_two_worker_sweep(tmp_path):
    toml = tmp_path / "toy.toml"
    toml.write_text("""name = "toy"
[model]
name = "transformer"
d_model = 16
[train]
steps = 3
batch_size = 4
eval_every = 3
eval_samples = 8
test_samples = 8
device = "cpu"
[task]
generator = "tests.data.toy_tasks:copy_first"
[task.kwargs]
vocab = 8
length = 6
[grid]
"train.seed" = [0, 1]
""")
    res = runner.invoke(app, ["sweep", str(toml), "--out", str(tmp_path / "runs"),
                              "--workers", "2"])
    assert res.exit_code == 0, res.output
    summaries = sorted((tmp_path / "runs").rglob("summary.json"))
    assert len(summaries) == 2
    for path in summaries:
        s = json.loads(path.read_text())
        assert s["test"]["n"] == 8 and set(s["test"]["slices"]) <= {"0", "1"}
    res = runner.invoke(app, ["report", str(tmp_path / "runs" / "toy"), "--no-plots",
                              "--out", str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "report" / "report.md").is_file()


def test_split_fractions_are_stated_beside_the_data(tmp_path):
    from recall_lab.generators.errors import RecallLabError
    from recall_lab.runs import run_config_from_tables

    _frame(40).to_parquet(tmp_path / "rows.parquet")
    tables = {"model": {"name": "transformer"}, "train": {"data": str(tmp_path / "rows.parquet")}}
    cfg = run_config_from_tables({**tables, "task": {"valid": 0.25, "test": 0.25,
                                                     "split_seed": 3}})
    kw = cfg.task.kwargs
    assert (kw["valid"], kw["test"], kw["split_seed"]) == (0.25, 0.25, 3)
    splits, _, _ = read_foreign(tmp_path / "rows.parquet", {"valid": 0.25, "test": 0.25,
                                                            "split_seed": 3})
    other, _, _ = read_foreign(tmp_path / "rows.parquet", {"valid": 0.25, "test": 0.25,
                                                           "split_seed": 4})
    assert [len(splits[s].lengths) for s in ("train", "valid", "test")] == [20, 10, 10]
    assert not np.array_equal(splits["test"].lengths, other["test"].lengths) or \
        not np.array_equal(splits["test"].ids, other["test"].ids)  # the seed picks the rows
    with pytest.raises(RecallLabError, match="does not apply to data files"):
        run_config_from_tables({**tables, "task": {"levels": [[2, 2]]}})
    with pytest.raises(RecallLabError, match="leave no training rows"):
        run_config_from_tables({**tables, "task": {"valid": 0.5, "test": 0.5}})


def test_held_out_rows_also_in_train_are_counted_for_foreign_data(tmp_path):
    from recall_lab.data import DataSource
    from recall_lab.runs import run_config_from_tables

    frame = _frame(20)
    pd.concat([frame, frame.iloc[:10]]).to_parquet(tmp_path / "dup.parquet")  # 10 rows twice
    cfg = run_config_from_tables({"model": {"name": "transformer"},
                                  "train": {"data": str(tmp_path / "dup.parquet")},
                                  "task": {"valid": 0.2, "test": 0.2}})
    src = DataSource.for_run(cfg)
    held = {s: src.held_out(s, 100)[0] for s in ("valid", "test")}
    got = src.overlap(4, 1, held)
    def key(row):  # a row up to its right padding, as the row hash sees it
        return tuple(np.trim_zeros(row, "b"))

    train = {key(r) for r in src.reader.rows("train", np.arange(src.reader.count("train")))[0]}
    for s in ("valid", "test"):
        expect = np.mean([key(r) in train for r in held[s]])
        assert 0 < expect < 1 or s == "valid"
        assert got[s] == pytest.approx(expect)
    assert got["train_rows_checked"] == src.reader.count("train")


def test_runs_are_named_after_their_dataset_and_a_missing_one_is_missing(tmp_path):
    """Without --out, a run on data/qa.parquet is runs/MODEL-qa-s0 (a second dataset gets its
    own folder, not runs/MODEL-task-s0); a path that does not exist is reported as missing."""
    _frame().to_parquet(tmp_path / "qa.parquet")
    (tmp_path / "other").mkdir()
    _frame(seed=1).to_parquet(tmp_path / "other" / "train.parquet")
    for data, name in (("qa.parquet", "transformer-qa-s0"), ("other", "transformer-other-s0")):
        res = _train(["--data", data], cwd=tmp_path)
        assert res.exit_code == 0, res.output
        assert (tmp_path / "runs" / name / "summary.json").is_file()
    res = _train(["--data", str(tmp_path / "nowhere")])
    line = _last_line(res)
    assert "does not exist" in line and "manifest" not in line
    assert not (tmp_path / "runs" / "transformer-nowhere-s0").exists()


def test_labels_i_is_the_target_of_position_i():
    """The alignment docs/tasks.md states: the output at position i (having read input_ids[:i+1])
    is scored against labels[i], with no shift inside the lab."""
    import torch

    from recall_lab.evaluate import batch_metrics

    targets = torch.tensor([[-100, 3, 1, -100]])
    logits = torch.nn.functional.one_hot(torch.tensor([[0, 3, 1, 2]]), 5).float()
    assert batch_metrics(logits, targets)["acc_sum"].item() == 1.0
    shifted = torch.nn.functional.one_hot(torch.tensor([[3, 1, 0, 2]]), 5).float()
    assert batch_metrics(shifted, targets)["acc_sum"].item() == 0.0
