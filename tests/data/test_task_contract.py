"""The task contract: a generator by import path trains, streams, resumes, writes datasets and
reports per slice; the joint-recall family goes through it byte for byte; bad generators end in
one line."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_lab import checkpoint as ck
from recall_lab.cli import app
from recall_lab.config import RunConfig, resolve_task, task_from_table
from recall_lab.data import DataSource, LabelledReader
from recall_lab.generators import TaskSpec, generate
from recall_lab.generators.dataset import row_keys, write_dataset
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.tasks import GeneratorTask, rows
from recall_lab.runs import run_config_from_tables
from recall_lab.train import train_run

TOY = {"generator": "tests.data.toy_tasks:copy_first", "kwargs": {"vocab": 8, "length": 6}}
TRAIN = {"steps": 4, "batch_size": 4, "eval_every": 2, "eval_samples": 8, "test_samples": 16,
         "warmup": 1, "device": "cpu"}


def _cfg(task=TOY, **train) -> RunConfig:
    return run_config_from_tables({"model": {"name": "transformer", "d_model": 16},
                                   "train": {**TRAIN, **train}, "task": task})


def test_joint_recall_through_the_contract_is_byte_identical():
    spec = TaskSpec(levels=((2, 4), (2, 3)), values=5)
    task = GeneratorTask(generator="joint-recall", kwargs=json.loads(spec.model_dump_json()))
    ss = np.random.SeedSequence(3, spawn_key=(7, 1))
    a, b = generate(spec, 20, ss), rows(task, 20, ss)
    assert np.array_equal(a.inputs, b.inputs) and np.array_equal(a.targets, b.targets)
    assert task.vocab().size == spec.vocab().size and task.max_len == spec.max_len


def test_a_joint_recall_run_config_keeps_its_json():
    cfg = _cfg({"preset": "mini-mqar"})
    assert cfg.to_json()["task"] == cfg.task.model_dump(mode="json")
    assert "generator" not in cfg.to_json()["task"] and isinstance(cfg.task, TaskSpec)
    back = RunConfig.model_validate(cfg.to_json())
    assert back == cfg


def test_generator_task_json_round_trip_and_resolution():
    cfg = _cfg()
    data = cfg.to_json()
    assert data["task"] == TOY
    assert RunConfig.model_validate(data).task == cfg.task
    assert cfg.model.vocab_size == 8 and cfg.model.max_len == 6
    spec, name = resolve_task("zoology-mqar")
    assert spec.generator == "zoology-mqar" and spec.vocab().size == 8192 and name is None


@pytest.mark.parametrize("name, says", [
    ("tests.data.nowhere:f", "does not import"),
    ("tests.data.toy_tasks:nothing", "has no nothing"),
    ("no_colon", "pkg.module:function"),
    ("tests.data.toy_tasks:no_size", "does not state its vocab_size"),
])
def test_a_generator_that_cannot_be_used_is_one_line(name, says):
    with pytest.raises(RecallLabError, match=says):
        task_from_table({"generator": name})


@pytest.mark.parametrize("name, says", [
    ("wrong_shape", "targets have shape"), ("floats", "must be integers"),
    ("out_of_vocab", "must lie in"),
])
def test_a_generator_breaking_the_contract_is_refused_and_nothing_written(tmp_path, name, says):
    task = GeneratorTask(generator=f"tests.data.toy_tasks:{name}")
    with pytest.raises(RecallLabError, match=says):
        task.rows(3, 0)
    toml = tmp_path / "t.toml"
    toml.write_text(f'[task]\ngenerator = "tests.data.toy_tasks:{name}"\n')
    res = CliRunner().invoke(app, ["train", "--model", "transformer", "--task", str(toml),
                                   "--steps", "2", "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and says in res.output
    assert not (tmp_path / "run").exists()


def test_stream_is_seeded_and_a_killed_run_resumes_bit_identically(tmp_path):
    cfg = _cfg(steps=5)
    src = DataSource.for_run(cfg)
    x0, _ = src.batch(3, 4)
    assert torch.equal(x0, DataSource.for_run(cfg).batch(3, 4)[0])
    assert not torch.equal(x0, src.batch(4, 4)[0])
    full = train_run(cfg, tmp_path / "a")

    def kill(step):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, tmp_path / "b", on_step=kill)
    resumed = train_run(cfg, tmp_path / "b", resume=True)
    a, b = load_file(tmp_path / "a" / ck.MODEL), load_file(tmp_path / "b" / ck.MODEL)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert full["test"] == resumed["test"]


def test_the_summary_reports_accuracy_per_slice(tmp_path):
    summary = train_run(_cfg(), tmp_path / "r")
    slices = summary["test"]["slices"]
    _, _, labels = (r := rows(_cfg().task, 16, np.random.SeedSequence(0, spawn_key=(2,)))), \
        None, r.slices
    assert set(slices) == {str(v) for v in np.unique(labels)}
    assert sum(s["n"] for s in slices.values()) == summary["test"]["n"] == 16
    mean = sum(s["acc"] * s["n"] for s in slices.values()) / 16
    assert mean == pytest.approx(summary["test"]["acc"])


def test_dataset_of_a_generator_task_is_worker_independent_disjoint_and_trains(tmp_path):
    task = GeneratorTask(**TOY)
    counts = {"train": 300, "valid": 40, "test": 40}
    one = write_dataset(task, tmp_path / "w1", counts, 5, workers=1, shard_size=8192)
    two = write_dataset(task, tmp_path / "w2", counts, 5, workers=2, shard_size=8192)
    assert one["splits"] == two["splits"] and one["task"] == TOY
    reader = LabelledReader(tmp_path / "w1")
    x = {s: reader.arrays(s)[0] for s in ("train", "valid", "test")}
    assert not np.isin(row_keys(x["train"]), row_keys(np.concatenate([x["valid"],
                                                                      x["test"]]))).any()
    assert not np.isin(row_keys(x["valid"]), row_keys(x["test"])).any()
    # labels are the stored ones: the target at the last position is the first id
    xs, ys = reader.arrays("test")
    assert np.array_equal(ys[:, -1], xs[:, 0]) and (ys[:, :-1] == -100).all()
    assert np.array_equal(reader.slices("test"), xs[:, 0] % 2)
    summary = train_run(_cfg(task=TOY, data=str(tmp_path / "w1")), tmp_path / "run")
    assert summary["test"]["n"] == 16 and set(summary["test"]["slices"]) <= {"0", "1"}


def test_show_and_generate_on_the_command_line(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["show", "zoology-mqar", "--count", "1"])
    assert res.exit_code == 0 and "slice" in res.output and "[->" in res.output
    res = runner.invoke(app, ["generate", "selective-copy", "--out", str(tmp_path / "d"),
                              "--train", "50", "--valid", "10", "--test", "10",
                              "--workers", "1"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["show", str(tmp_path / "d"), "--index", "2"])
    assert res.exit_code == 0 and "targets (position:id)" in res.output
    res = runner.invoke(app, ["presets"])
    assert res.exit_code == 0 and all(name in res.output for name in (
        "zoology-mqar", "selective-copy", "mad-recall", "mad-fuzzy-recall"))
