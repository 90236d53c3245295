"""The Python API at the package's top (recall_lab/api.py): the same functions the command
line calls, typed results, runs under ./runs of the working directory, and an executed
notebook (notebooks/python_api.ipynb) that trains two models, sweeps seeds and reads the solve
rates."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import recall_lab as rl
from recall_lab import api
from recall_lab.cli import app
from recall_lab.generators.errors import RecallLabError

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "python_api.ipynb"
TASK = {"levels": [[2, 2]], "values": 8}
TRAIN = {"steps": 6, "batch_size": 4, "warmup": 2, "eval_every": 3, "eval_samples": 8,
         "test_samples": 16, "device": "cpu"}


def test_import_stays_torch_free_and_names_are_the_functions():
    code = ("import sys, recall_lab as rl; assert 'torch' not in sys.modules; "
            "import recall_lab.train; print(callable(rl.train), rl.train.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "recall_lab.api"]  # a submodule of the same name does not hide it


def test_train_returns_a_run_and_the_cli_takes_the_same_path(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run = rl.train({"model": {"name": "mamba", "d_model": 16}, "task": TASK, "train": TRAIN})
    # an inline task's folder is named by the task's hash
    digest = hashlib.sha256(json.dumps(run.config.to_json()["task"], sort_keys=True,
                                       separators=(",", ":")).encode()).hexdigest()[:8]
    assert run.path == Path(f"runs/mamba-task-{digest}-s0")
    assert (tmp_path / run.path / "best.safetensors").is_file()
    assert "mamba: step 6/6" in capsys.readouterr().out  # the progress the commands show
    # a second inline task gets its own folder; the same one again is refused in the API's words
    other = rl.train({"model": {"name": "mamba", "d_model": 16}, "task": {**TASK, "values": 6},
                      "train": {**TRAIN, "steps": 2}}, quiet=True)
    assert other.path != run.path and other.summary["steps"] == 2
    assert capsys.readouterr().out == ""  # quiet
    with pytest.raises(RecallLabError, match=r"pass force=True to overwrite it or resume=True"):
        rl.train({"model": {"name": "mamba", "d_model": 16}, "task": TASK, "train": TRAIN})
    again = rl.load_run(run.path)
    assert again.config == run.config and again.summary == run.summary
    assert set(run.metrics["split"]) >= {"train", "valid"}
    assert rl.evaluate(run, n=16)["n"] == 16
    assert type(run.model()).__name__ == "RecallLM"

    calls, real = [], api.train

    def spy(cfg, **kw):
        calls.append(cfg)
        return real(cfg, **kw)

    monkeypatch.setattr(api, "train", spy)  # the command calls the API's function
    toml = tmp_path / "c.toml"
    toml.write_text("[model]\nname = \"mamba\"\nd_model = 16\n[task]\nlevels = [[2, 2]]\n"
                    "values = 8\n[train]\n" + "".join(f"{k} = {json.dumps(v)}\n"
                                                      for k, v in TRAIN.items()))
    r = CliRunner().invoke(app, ["train", "-c", str(toml), "--out", "runs/cli"])
    assert r.exit_code == 0, r.output
    assert len(calls) == 1 and calls[0] == rl.run_config(toml)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_notebook_runs_small(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("RECALL_LAB_NB_SMALL", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        "commit the notebook without outputs"
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []) if o.get("output_type") == "stream")
    assert "small setting: True" in text
    assert (tmp_path / "runs" / "python-api-seeds" / "sweep.json").is_file()  # ./runs
    assert "transformer" in text and "mamba" in text and "solved" in text
    assert "causality" in text and "FAIL" not in text
