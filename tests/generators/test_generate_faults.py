"""Bad input and faults met through `recall-lab generate` / `show` / `train --data` (issue 18):
one line on stderr, exit code 2, nothing existing changed, no worker or temporary left behind."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.generators import TaskSpec
from recall_lab.generators.dataset import write_dataset
from tests.cli_checks import fails_with, snapshot

runner = CliRunner()
SPEC = TaskSpec(levels=((3, 3),), values=4)
GEN = ["generate", "--levels", "2,2", "--values", "5", "--train", "30", "--valid", "5",
       "--test", "5", "--workers", "1"]


def test_force_refuses_a_folder_that_is_not_a_lab_dataset(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    fails_with([*GEN, "--force", "--out", out], "not a recall-lab dataset")
    assert snapshot(out) == {"notes.txt": b"my notes"}
    # a lab dataset with a user's file in it is not replaced either
    ds = tmp_path / "ds"
    assert runner.invoke(app, [*GEN, "--out", str(ds)]).exit_code == 0
    (ds / "notes.txt").write_text("mine")
    before = snapshot(ds)
    fails_with([*GEN, "--seed", "1", "--force", "--out", ds], "'notes.txt'")
    assert snapshot(ds) == before
    # a dataset the lab wrote is replaced
    (ds / "notes.txt").unlink()
    r = runner.invoke(app, [*GEN, "--seed", "1", "--force", "--out", str(ds)])
    assert r.exit_code == 0, r.output
    assert json.loads((ds / "manifest.json").read_text())["seed"] == 1


def test_disk_full_while_generating_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    import recall_lab.generators.dataset as dataset

    def full(table, where, **kw):
        Path(where).write_bytes(b"PAR1")  # a half-written shard
        raise OSError(errno.ENOSPC, "No space left on device", where)

    old = tmp_path / "ds"
    write_dataset(SPEC, old, {"train": 9, "valid": 5, "test": 6}, 0)
    before = snapshot(old)
    monkeypatch.setattr(dataset.pq, "write_table", full)
    line = fails_with([*GEN, "--out", tmp_path / "new"], "No space left on device")
    assert str(tmp_path / "new") in line
    line = fails_with([*GEN, "--force", "--out", old], "No space left on device")
    assert snapshot(old) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no temporary, no stub


@pytest.mark.parametrize("manifest, needle", [
    ([], "not a recall-lab dataset manifest"),
    ("drop-counts", "counts"),
    ("escape-file", "file"),
    ("wrong-count", "counts says"),
    ("edited-task", "edited after its shards were written"),  # a valid task, not the shards'
])
def test_malformed_manifest_is_one_line(tmp_path, manifest, needle):
    ds = tmp_path / "ds"
    write_dataset(SPEC, ds, {"train": 9, "valid": 5, "test": 6}, 0)
    m = json.loads((ds / "manifest.json").read_text())
    if manifest == "drop-counts":
        del m["counts"]
    elif manifest == "escape-file":
        m["splits"]["test"][0]["file"] = "../../etc/passwd"
    elif manifest == "wrong-count":
        m["counts"]["valid"] = 7
    elif manifest == "edited-task":
        m["task"]["values"] += 1
    else:
        m = manifest
    (ds / "manifest.json").write_text(json.dumps(m))
    before = snapshot(ds)
    fails_with(["show", ds], needle)
    fails_with(["train", "--model", "mamba", "--data", ds, "--out", tmp_path / "run"], needle)
    assert snapshot(ds) == before and not (tmp_path / "run").exists()


@pytest.mark.parametrize("form", ["table", "bare", "preset"])
def test_show_accepts_the_task_forms_train_accepts(tmp_path, form):
    toml = tmp_path / "task.toml"
    toml.write_text({"table": "[task]\nlevels = [[3, 3]]\nvalues = 4\n",
                     "bare": "levels = [[3, 3]]\nvalues = 4\n",
                     "preset": '[task]\npreset = "mini-mqar"\n'}[form])
    r = runner.invoke(app, ["show", str(toml)])
    assert r.exit_code == 0, r.output
    if form == "preset":  # the same samples as naming the preset itself
        direct = runner.invoke(app, ["show", "mini-mqar"]).stdout
        def body(text: str) -> str:  # the table without its title
            return text[text.index("┌"):]

        assert body(r.stdout) == body(direct)
    else:
        inquiry = next(line for line in r.stdout.splitlines() if "inquiry" in line)
        assert inquiry.count("?") == 3


def _children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is `pid`."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killed_generate_leaves_no_workers_and_its_temporary_is_cleaned(tmp_path):
    """kill -9 of `generate --workers 2`: its workers exit with it; the `.OUT.tmp-PID` folder it
    left is removed by the next run, which writes the same bytes as an uninterrupted one."""
    out = tmp_path / "ds"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    args = ["-m", "recall_lab.cli", "generate", "mini-mqar", "--train", "600000", "--valid",
            "8192", "--test", "8192", "--shard-size", "8192", "--workers", "2"]
    proc = subprocess.Popen([sys.executable, *args, "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tmp = tmp_path / f".ds.tmp-{proc.pid}"
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while time.monotonic() < deadline and proc.poll() is None:
            children = _children(proc.pid)  # the two workers (and the resource tracker)
            workers = [p for p in children if "spawn_main" in
                       Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
            if len(workers) == 2 and any(tmp.glob("train-*.parquet")):
                workers = children
                break
            time.sleep(0.1)
        assert proc.poll() is None and len(workers) >= 2, "generate ended before the kill"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 20
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers), "workers outlived their parent"
    assert tmp.is_dir() and not out.exists()
    small = ["generate", "--levels", "2,2", "--values", "5", "--train", "30", "--valid", "5",
             "--test", "5", "--workers", "1"]
    r = runner.invoke(app, [*small, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert not tmp.exists()
    ref = tmp_path / "ref"
    assert runner.invoke(app, [*small, "--out", str(ref)]).exit_code == 0
    assert snapshot(out) == snapshot(ref)
    shutil.rmtree(ref)


def test_generate_accepts_a_toml_task(tmp_path):
    """`generate TASK.toml` writes the same bytes as the same task given as flags."""
    toml = tmp_path / "task.toml"
    toml.write_text("[task]\nlevels = [[2, 2], [2, 2]]\nvalues = 5\n")
    counts = ["--train", "30", "--valid", "5", "--test", "5", "--workers", "1"]
    r = runner.invoke(app, ["generate", str(toml), *counts, "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["generate", "--levels", "2,2", "--values", "5", *counts,
                            "--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    assert snapshot(tmp_path / "a") == snapshot(tmp_path / "b")


HOLD = """
import sys, time
from pathlib import Path
from recall_lab.generators.folders import FolderLock
out = Path(sys.argv[1])
FolderLock(out.parent / f".{out.name}.lock", out).acquire(); print("locked", flush=True)
time.sleep(120)
"""


def test_generate_into_a_folder_in_use_is_refused(tmp_path):
    """Another process holds OUT's lock (taken before the emptiness check): `generate` into OUT
    is refused with one line and writes nothing; once that process dies the lock is gone."""
    out = tmp_path / "ds"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE,
                              env=env, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        line = fails_with([*GEN, "--out", out], "in use")
        assert f"pid {holder.pid}" in line
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    r = runner.invoke(app, [*GEN, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # the lock file went with it


def test_two_concurrent_generates_never_both_succeed(tmp_path):
    """Two `generate` processes started together into one folder: at most one exits 0 (the
    other is refused: folder in use, or not empty), and the folder holds one whole dataset."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "ds"
    procs = [subprocess.Popen([sys.executable, "-m", "recall_lab.cli", *GEN, "--seed", str(s),
                               "--out", str(out)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for s in (1, 2)]
    codes = [p.wait(timeout=120) for p in procs]
    errs = [p.stderr.read() for p in procs]
    assert sorted(codes) == [0, 2], (codes, errs)
    loser = errs[codes.index(2)]
    assert "in use" in loser or "not empty" in loser, loser
    from recall_lab.data import DatasetReader

    winner = (1, 2)[codes.index(0)]
    assert DatasetReader(out).manifest["seed"] == winner
