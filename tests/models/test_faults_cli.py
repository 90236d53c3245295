"""Bad input and faults met through `recall-lab train` / `eval` (issue 18): each ends with one
line on stderr and exit code 2, and leaves every existing file as it was (byte for byte)."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors import SafetensorError
from typer.testing import CliRunner

from recall_lab import checkpoint as ck
from recall_lab.cli import app
from recall_lab.generators import TaskSpec
from recall_lab.generators.dataset import write_dataset
from tests.cli_checks import fails_with, snapshot

runner = CliRunner()
SPEC = TaskSpec(levels=((3, 3),), values=4)
TINY = ["--model", "mamba", "--d-model", "16", "--steps", "2", "--batch-size", "2",
        "--eval-every", "1", "--eval-samples", "4", "--device", "cpu"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "good"
    write_dataset(SPEC, out, {"train": 9, "valid": 5, "test": 6}, 0)
    return out


@pytest.fixture(scope="module")
def good_run(tmp_path_factory, dataset):
    run = tmp_path_factory.mktemp("runs") / "run"
    r = runner.invoke(app, ["train", *TINY, "--data", str(dataset), "--out", str(run)])
    assert r.exit_code == 0, r.output
    return run


@pytest.fixture
def run(tmp_path, good_run):
    """A private copy of a finished good run."""
    dest = tmp_path / "run"
    shutil.copytree(good_run, dest)
    return dest


def _damaged(dataset: Path, tmp_path: Path, how: str) -> Path:
    bad = tmp_path / f"bad-{how}"
    shutil.copytree(dataset, bad)
    shard = bad / json.loads((bad / "manifest.json").read_text())["splits"]["test"][0]["file"]
    data = bytearray(shard.read_bytes())
    if how == "truncated":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    return bad


@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_force_with_corrupt_data_keeps_the_good_run(tmp_path, dataset, run, how):
    """The test shard (read last) is checked before the run folder is touched: the good run in
    RUN survives `--force`, and a new --out is never created (no stub to clean up)."""
    bad = _damaged(dataset, tmp_path, how)
    before = snapshot(run)
    fails_with(["train", *TINY, "--data", bad, "--force", "--out", run], "sha256")
    assert snapshot(run) == before
    fails_with(["train", *TINY, "--data", bad, "--out", tmp_path / "new"], "sha256")
    assert not (tmp_path / "new").exists()


def test_force_replaces_only_what_the_lab_wrote(tmp_path, dataset, run):
    (run / "notes.txt").write_text("my notes")
    (run / "eval-old.json").write_text("{}")
    (run / "analysis").mkdir()
    (run / "analysis" / "mean_distance.json").write_text("{}")
    r = runner.invoke(app, ["train", *TINY, "--data", str(dataset), "--force", "--out", str(run)])
    assert r.exit_code == 0, r.output
    assert (run / "notes.txt").read_text() == "my notes"
    # results of the replaced run are gone with it
    assert not (run / "eval-old.json").exists() and not (run / "analysis").exists()
    # a folder that holds no run is never cleared, --force or not
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.csv").write_text("1,2")
    fails_with(["train", *TINY, "--data", dataset, "--force", "--out", other],
                "not a recall-lab run")
    assert snapshot(other) == {"data.csv": b"1,2"}


HOLD = """
import sys, time
from recall_lab.checkpoint import RunLock
lock = RunLock(sys.argv[1]); lock.acquire(); print("locked", flush=True); time.sleep(120)
"""


def test_second_process_on_a_run_in_use_is_refused(run):
    """Another process holds RUN's lock: `train --resume`, `train --force` on RUN are refused;
    once that process is killed (-9), the lock is gone with it and the resume runs."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE,
                              env=env, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = snapshot(run)
        line = fails_with(["train", "--out", run, "--resume", "--steps", "3"], "in use")
        assert f"pid {holder.pid}" in line
        fails_with(["train", *TINY, "--force", "--task", "mini-mqar", "--out", run], "in use")
        assert snapshot(run) == before
    finally:
        holder.kill()
        holder.wait()
    (run / ".best.safetensors.tmp999999").write_bytes(b"half")  # left by the killed writer
    r = runner.invoke(app, ["train", "--out", str(run), "--resume", "--steps", "3"])
    assert r.exit_code == 0, r.output
    assert not (run / ".best.safetensors.tmp999999").exists()
    rows = ck.read_lines(run / ck.METRICS)
    assert [row["step"] for row in rows] == [1, 1, 2, 2, 3, 3]  # no duplicated rows


@pytest.mark.parametrize("size", ["0", "-4"])
def test_eval_batch_size_must_be_positive(run, size):
    before = snapshot(run)
    fails_with(["eval", run, "--batch-size", size, "--device", "cpu"], "--batch-size")
    assert snapshot(run) == before


def _edit_config(run: Path, edit) -> None:
    data = json.loads((run / ck.CONFIG).read_text())
    (run / ck.CONFIG).write_text(json.dumps(edit(data)))


def test_model_name_is_checked_against_the_config(run):
    _edit_config(run, lambda d: {**d, "model": {**d["model"], "name": "transformer"}})
    before = snapshot(run)
    fails_with(["eval", run, "--device", "cpu"], "does not match its config")
    fails_with(["train", "--out", run, "--resume", "--steps", "3"], "does not match its config")
    assert snapshot(run) == before


@pytest.mark.parametrize("content, needle", [
    ("[1, 2]", "got list"),
    ('{"model": "mamba", "train": {}, "task": {}}', "`model` must be a table"),
    ('{"train": {}, "task": {}}', "lacks 'model'"),
])
def test_malformed_run_config_is_one_line(run, content, needle):
    (run / ck.CONFIG).write_text(content)
    before = snapshot(run)
    fails_with(["eval", run, "--device", "cpu"], needle)
    fails_with(["train", "--out", run, "--resume"], needle)
    assert snapshot(run) == before


@pytest.mark.parametrize("toml, needle", [
    ('[model]\nname = 5\n[task]\npreset = "mini-mqar"\n', "model name must be a string"),
    ('model = "mamba"\n[task]\npreset = "mini-mqar"\n', "`model` must be a table"),
    ('task = "mini-mqar"\n[model]\nname = "mamba"\n', "`task` must be a table"),
])
def test_malformed_toml_is_one_line(tmp_path, toml, needle):
    cfg = tmp_path / "run.toml"
    cfg.write_text(toml)
    fails_with(["train", "--config", cfg, "--out", tmp_path / "run"], needle)
    assert not (tmp_path / "run").exists()


def test_disk_full_while_training_leaves_no_half_run(tmp_path, dataset, run, monkeypatch):
    """ENOSPC at the first checkpoint: one line naming the file, no stub folder for a new run;
    no temporary file left beside an existing run's files."""
    def full(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"partial")
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: '
                              'StorageFull, message: "No space left on device" })')

    monkeypatch.setattr(ck, "save_file", full)
    new = tmp_path / "new"
    line = fails_with(["train", *TINY, "--data", dataset, "--out", new], "cannot write")
    assert str(new / ck.BEST) in line and "No space left" in line
    assert not new.exists()
    # a resumed run that hits a full disk keeps its last checkpoint, readable and resumable
    before = snapshot(run)
    fails_with(["train", "--out", run, "--resume", "--steps", "4"], "No space left")
    after = snapshot(run)
    assert {k: v for k, v in after.items() if k != ck.METRICS and k != ck.LOCK} == \
        {k: v for k, v in before.items() if k != ck.METRICS and k != ck.LOCK}
    monkeypatch.undo()
    r = runner.invoke(app, ["train", "--out", str(run), "--resume", "--steps", "3"])
    assert r.exit_code == 0, r.output


def test_lock_is_released_after_a_failed_run(tmp_path):
    """The lock is taken in-process by train_run and given back on every exit path."""
    lock = ck.RunLock(tmp_path)
    lock.acquire()
    with pytest.raises(Exception, match="in use"):
        ck.RunLock(tmp_path).acquire()
    lock.release()
    t0 = time.perf_counter()
    with ck.RunLock(tmp_path):
        pass
    assert time.perf_counter() - t0 < 1.0


def test_demo_force_keeps_a_folder_with_foreign_files(tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "demo.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    fails_with(["demo", "--out", out, "--steps", "1", "--force"], "'notes.txt'")
    assert snapshot(out) == before


def test_force_refuses_another_programs_folder(tmp_path):
    """A folder of another program that has a `config.json` (a Hugging Face model) is not a run:
    `train --force` into it exits 2 and leaves every byte as it was (issue 28)."""
    other = tmp_path / "bert"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    (other / "pytorch_model.bin").write_bytes(b"\x80\x02weights")
    before = snapshot(other)
    fails_with(["train", "--model", "mamba", "--task", "mini-mqar", "--steps", "1",
                "--eval-samples", "4", "--device", "cpu", "--out", other, "--force"],
               "not a recall-lab run")
    assert snapshot(other) == before
    # a run config's tables without any file only a run writes: still not a run
    (other / "config.json").write_text(json.dumps(
        {"model": {"name": "mamba", "arch": "mamba", "vocab_size": 9}, "train": {}, "task": {}}))
    before = snapshot(other)
    fails_with(["train", *TINY, "--task", "mini-mqar", "--out", other, "--force"],
               "not a recall-lab run")
    assert snapshot(other) == before


def test_force_recognises_a_run_by_its_marker_and_an_old_run_by_its_files(tmp_path, dataset,
                                                                          run):
    """A run carries the marker `.recall-lab` ({"kind": "run"}); a run written before the marker
    existed (none) is still replaced, by the stricter rule; a marker of another kind is not."""
    from recall_lab.generators.folders import MARKER, read_marker

    assert read_marker(run) == "run"
    (run / MARKER).unlink()  # a run from before the marker
    r = runner.invoke(app, ["train", *TINY, "--data", str(dataset), "--force", "--out", str(run)])
    assert r.exit_code == 0, r.output
    assert read_marker(run) == "run"
    (run / MARKER).write_text(json.dumps({"kind": "dataset", "version": 1}))
    before = snapshot(run)
    fails_with(["train", *TINY, "--data", dataset, "--force", "--out", run],
               "not a recall-lab run")
    assert snapshot(run) == before


def _edit_resume(run: Path, how: str) -> None:
    from safetensors.torch import load_file, save_file

    path = run / ck.RESUME
    with open(path, "rb") as f:  # the JSON metadata rides in the safetensors header
        n = int.from_bytes(f.read(8), "little")
        meta = json.loads(json.loads(f.read(n))["__metadata__"]["json"])
    tensors = load_file(path)
    if how == "no-step":
        del meta["step"]
    elif how == "no-rng":
        del tensors["rng.cpu"]
    else:  # an AdamW moment of the wrong shape
        key = next(k for k in tensors if k.endswith(".exp_avg"))
        tensors[key] = tensors[key].reshape(-1)[:1].clone()
    save_file(tensors, str(path), metadata={"json": json.dumps(meta)})


@pytest.mark.parametrize("how, needle", [("no-step", "'step'"), ("no-rng", "'rng.cpu'"),
                                         ("moment-shape", "of shape")])
def test_resume_state_is_checked_before_use(run, how, needle):
    _edit_resume(run, how)
    before = snapshot(run)
    line = fails_with(["train", "--out", run, "--resume", "--steps", "3"], needle)
    assert str(run / ck.RESUME) in line
    assert snapshot(run) == before


def test_metrics_row_without_step_is_one_line(run):
    rows = (run / ck.METRICS).read_text().splitlines()
    rows[0] = json.dumps({k: v for k, v in json.loads(rows[0]).items() if k != "step"})
    (run / ck.METRICS).write_text("\n".join(rows) + "\n")
    before = snapshot(run)
    fails_with(["train", "--out", run, "--resume", "--steps", "3"], "line 1 has no integer 'step'")
    assert snapshot(run) == before


@pytest.mark.parametrize("flags, needle", [
    (["--lr", "0.5"], "--lr 0.5 differs from the run's"),
    (["--task", "mini-mqar"], "--task mini-mqar differs"),
    (["--d-model", "32"], "--d-model 32 differs"),
    (["--force"], "give one of them"),
])
def test_resume_refuses_flags_that_contradict_the_run(run, flags, needle):
    before = snapshot(run)
    fails_with(["train", "--out", run, "--resume", "--steps", "3", *flags], needle)
    assert snapshot(run) == before


def test_resume_refuses_a_changed_config_or_dataset(tmp_path):
    """resume.safetensors records the run's config and its dataset's manifest hash: an edited
    config.json, or a dataset regenerated under the run, is refused naming what changed."""
    data = tmp_path / "data"
    write_dataset(SPEC, data, {"train": 9, "valid": 5, "test": 6}, 0)
    run = tmp_path / "run"
    args = ["train", *TINY, "--data", str(data), "--out", str(run)]
    assert runner.invoke(app, args).exit_code == 0
    config = json.loads((run / ck.CONFIG).read_text())
    edited = {**config, "train": {**config["train"], "lr": 0.5}}
    (run / ck.CONFIG).write_text(json.dumps(edited))
    before = snapshot(run)
    fails_with(["train", "--out", run, "--resume", "--steps", "3"], "train.lr 0.003 -> 0.5")
    assert snapshot(run) == before
    (run / ck.CONFIG).write_text(json.dumps(config))
    write_dataset(SPEC, data, {"train": 9, "valid": 5, "test": 6}, 1, force=True)  # regenerated
    before = snapshot(run)
    fails_with(["train", "--out", run, "--resume", "--steps", "3"], "changed since the run began")
    assert snapshot(run) == before
    write_dataset(SPEC, data, {"train": 9, "valid": 5, "test": 6}, 0, force=True)  # the same again
    r = runner.invoke(app, ["train", "--out", str(run), "--resume", "--steps", "3"])
    assert r.exit_code == 0, r.output
