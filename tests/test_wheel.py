"""The installed package stands on its own: the wheel, built from the source tree and installed
into a fresh virtual environment outside the repository, lists its shipped experiments, trains a
run into `./runs` of the working directory and reports on it.

The new environment takes recall-lab from the wheel only (`pip install --no-deps --no-index`);
its dependencies (torch first) come from the test's own environment through a path file, so
nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from recall_lab.experiments.shipped import NOT_EXPERIMENTS

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "recall_lab", "generators", "proofs", "experiments")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("build") is None,
                       reason="the `build` package is missing (pip install -e '.[dev]')"),
]


def _run(args: list, cwd: Path, env: dict | None = None,
         timeout: int = 300) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the new environment's bin folder, an empty working folder, the environment variables)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info", "build")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=skip)
        else:
            shutil.copy2(path, src / name)
    # a copy of the tree, so the build leaves nothing in the shared checkout
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
          "--skip-dependency-check", "--outdir", tmp / "dist", src], cwd=tmp)
    wheel = next((tmp / "dist").glob("recall_lab-*.whl"))
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp)
    bin_dir = venv / "bin"
    site = Path(_run([bin_dir / "python", "-c", "import sysconfig; "
                      "print(sysconfig.get_paths()['purelib'])"], cwd=tmp).stdout.strip())
    # this environment's packages (torch, numpy, typer, ...) behind the new one's own; a plain
    # path line, so this environment's editable recall-lab finder is not installed there
    (site / "_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", bin_dir / "python", "install",
          "--no-deps", "--no-index", "--quiet", wheel], cwd=tmp)
    work = tmp / "work"
    work.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": "", "NO_COLOR": "1"}
    return bin_dir, work, env


def test_the_wheel_installs_its_own_copy(installed):
    bin_dir, work, env = installed
    where = _run([bin_dir / "python", "-c", "import recall_lab, recall_lab.generators as g; "
                  "print(recall_lab.__file__); print(g.__file__)"], work, env).stdout
    for line in where.split():
        assert Path(line).is_relative_to(bin_dir.parent), line  # not the checkout's files


def test_installed_cli_lists_trains_and_reports(installed):
    bin_dir, work, env = installed
    cli = bin_dir / "recall-lab"
    listed = _run([cli, "experiments", "list"], work, env).stdout
    shipped = [p for p in (ROOT / "experiments").glob("*/*.toml")
               if p.parent.name not in NOT_EXPERIMENTS]
    assert shipped and all(p.stem in listed and f"{p.parent.name}/" in listed for p in shipped)
    shown = _run([cli, "experiments", "show", "tiny"], work, env).stdout
    assert shown == (ROOT / "experiments" / "demo" / "tiny.toml").read_text()
    # the demo's grid is read from the wheel's own experiment files
    demo = _run([bin_dir / "python", "-c", "import recall_lab.experiments.demo as d; "
                 "print(d.DEMO_TOML)"], work, env).stdout.strip()
    assert Path(demo).is_relative_to(bin_dir.parent) and Path(demo).name == "demo.toml"
    # a base in another study's folder travels with the wheel and still resolves
    dry = _run([cli, "sweep", "leak-audit", "--dry-run", "--no-estimate"], work, env).stdout
    assert "leak-audit" in dry

    (work / "small.toml").write_text("[train]\ntest_samples = 16\n")
    _run([cli, "train", "--model", "mamba", "--task", "passkey", "--steps", "4", "--d-model",
          "16", "--batch-size", "4", "--eval-every", "2", "--eval-samples", "8", "--threads",
          "1", "--config", "small.toml"], work, env)
    runs = work / "runs"
    made = [p for p in runs.iterdir() if p.is_dir()]
    assert len(made) == 1 and (made[0] / "summary.json").is_file()  # ./runs of the cwd
    summary = json.loads((made[0] / "summary.json").read_text())
    assert 0.0 <= summary["test"]["acc"] <= 1.0

    _run([cli, "report", runs, "--no-plots"], work, env)
    report = json.loads((runs / "report.json").read_text())
    assert "mamba" in json.dumps(report)


def test_installed_place_finds_its_shipped_reference(installed):
    """`place`'s reference (the zoo-frontier's records) is package data: it loads from the
    installed wheel, outside the checkout."""
    bin_dir, work, env = installed
    out = _run([bin_dir / "python", "-c", "import recall_lab.experiments.reference as r\n"
                "from recall_lab.experiments.report import load_runs\n"
                "print(r.shipped_archive())\n"
                "with r.open_reference() as f:\n"
                "    p = r.read_protocol(f)\n"
                "    print(len(load_runs([f])[0]), [t.size for t in p.tables])\n"],
               work, env).stdout.split("\n")
    assert Path(out[0]).is_relative_to(bin_dir.parent)  # the wheel's copy
    assert out[1] == "570 [4.0, 8.0, 16.0, 32.0]"
