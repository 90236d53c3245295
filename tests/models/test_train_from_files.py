"""Training on a dataset folder written by `recall-lab generate` (instead of streaming)."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_lab import checkpoint as ck
from recall_lab import native
from recall_lab.cli import app
from recall_lab.config import RunConfig, TrainConfig
from recall_lab.evaluate import evaluate
from recall_lab.generators import TaskSpec
from recall_lab.generators.dataset import write_dataset
from recall_lab.generators.errors import RecallLabError
from recall_lab.models import build_model, model_config
from recall_lab.train import train_run

SPEC = TaskSpec(levels=((3, 3),), values=4)


def _cfg(data, steps=5, **train) -> RunConfig:
    t = {"steps": steps, "batch_size": 4, "eval_every": 2, "eval_samples": 8, "test_samples": 6,
         "warmup": 1, "device": "cpu", "data": str(data), **train}
    m = model_config("mamba+sw", SPEC.vocab().size, d_model=16, d_state=4, k=4)
    return RunConfig(model=m, train=TrainConfig(**t), task=SPEC, task_name="tiny")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "d"
    write_dataset(SPEC, out, {"train": 9, "valid": 5, "test": 6}, 0)
    return out


def test_files_run_resumes_bit_identically_and_tests_on_the_test_split(tmp_path, dataset):
    cfg = _cfg(dataset, steps=5, eval_every=2)
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
    # the final test is the best checkpoint on the dataset's own test split (6 rows)
    from recall_lab.data import DatasetReader

    model = build_model(cfg.model)
    ck.load_weights(tmp_path / "a" / ck.BEST, model)
    x, y = DatasetReader(dataset).arrays("test")
    assert full["test"] == evaluate(model, x, y, 64, "cpu")
    assert full["test"]["n"] == 6


def test_files_and_stream_train_differently(tmp_path, dataset):
    train_run(_cfg(dataset, steps=2), tmp_path / "a")
    train_run(_cfg(dataset, steps=2).model_copy(update={"train": TrainConfig(
        **{**_cfg(dataset).train.model_dump(), "steps": 2, "data": None})}), tmp_path / "b")
    a, b = load_file(tmp_path / "a" / ck.MODEL), load_file(tmp_path / "b" / ck.MODEL)
    assert not all(torch.equal(a[k], b[k]) for k in a)


def test_task_must_match_the_dataset(tmp_path, dataset):
    other = TaskSpec(levels=((2, 2),), values=4, pools=(3,))
    cfg = _cfg(dataset).model_copy(update={"task": other})
    with pytest.raises(RecallLabError, match="is not the task of dataset"):
        train_run(cfg, tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_cli_data_option(tmp_path, dataset):
    runner = CliRunner()
    r = runner.invoke(app, ["train", "--model", "mamba", "--data", str(dataset), "--task",
                            "mini-mqar", "--out", str(tmp_path / "r")])
    assert r.exit_code == 2 and "not both" in r.stderr
    other = tmp_path / "other.toml"
    other.write_text('[task]\npreset = "mini-mqar"\n')
    r = runner.invoke(app, ["train", "-m", "mamba", "-c", str(other), "--data", str(dataset)])
    assert r.exit_code == 2 and "is not the task of dataset" in r.stderr
    same = tmp_path / "same.toml"
    same.write_text('[task]\nlevels = [[3, 3]]\nvalues = 4\n[train]\nsteps = 1\n'
                    'eval_every = 1\nbatch_size = 2\n[model]\nd_model = 8\n')
    r = runner.invoke(app, ["train", "-m", "mamba", "-c", str(same), "--data", str(dataset),
                            "--out", str(tmp_path / "same"), "--threads", "1"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["train", "--model", "mamba", "--data", str(dataset), "--steps", "2",
                            "--eval-every", "2", "--batch-size", "2", "--d-model", "8",
                            "--out", str(tmp_path / "r"), "--threads", "1"])
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    assert cfg["train"]["data"] == str(dataset) and cfg["task"]["levels"] == [[3, 3]]
    # whether the native CPU kernels ran: runs with and without them differ by rounding
    loaded, why = native.load()
    assert cfg["versions"]["native_kernels"] == ("on" if loaded is not None else f"off: {why}")
    # and which kernel code: the hash of the sources, which moves when a kernel changes
    if loaded is not None:
        assert cfg["versions"]["native_sources"] == native.sources_sha256()
        assert len(cfg["versions"]["native_sources"]) == 12
    assert np.isfinite(json.loads((tmp_path / "r" / "summary.json").read_text())["test"]["loss"])


def test_a_relative_data_path_is_recorded_resolved_and_a_moved_dataset_named_by_hash(
        tmp_path, dataset):
    import os
    import shutil

    from recall_lab.runs import recorded_data_hash

    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(dataset, work / "dw")
    runner = CliRunner()
    args = ["train", "--model", "mamba", "--steps", "2", "--eval-every", "2", "--batch-size",
            "2", "--d-model", "8", "--threads", "1", "--out", str(tmp_path / "r")]
    old = os.getcwd()
    try:
        os.chdir(work)
        r = runner.invoke(app, [*args, "--data", "dw"])
    finally:
        os.chdir(old)
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    assert cfg["train"]["data"] == str((work / "dw").resolve())
    resume = ["train", "--resume", "--out", str(tmp_path / "r"), "--threads", "1"]
    r = runner.invoke(app, [*resume, "--steps", "4"])  # from another folder than `work`
    assert r.exit_code == 0, r.output
    shutil.move(work / "dw", tmp_path / "moved")
    r = runner.invoke(app, [*resume, "--steps", "6"])
    digest = recorded_data_hash(tmp_path / "r")
    assert r.exit_code == 2 and digest and digest in r.stderr and "does not exist" in r.stderr
