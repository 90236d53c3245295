"""The README's tour, every line at the README's own flags, in a fresh folder (about a minute on
one core). The passkey line must learn and give the numbers the README quotes from its record;
the tiny sweep's claims must pass."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- readme-numbers:tour begin"


def tour_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split(BEGIN, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


@pytest.mark.slow
def test_readme_tour_runs_and_learns(tmp_path):
    record = json.loads((ROOT / "docs" / "results" / "tour" / "record.json").read_text())
    lines = tour_lines()
    assert lines == [x["cmd"] for x in record["lines"]]  # the README shows the record's lines
    (tmp_path / "experiments" / "demo").mkdir(parents=True)
    (tmp_path / "experiments" / "demo" / "tiny.toml").write_text(
        (ROOT / "experiments" / "demo" / "tiny.toml").read_text())
    exe = str(Path(sys.executable).parent / "recall-lab")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for cmd in lines:
        argv = shlex.split(cmd)
        argv[0] = exe if Path(exe).exists() else argv[0]
        r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode == 0, f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        if " train " in f" {cmd} ":
            assert "warning: the warm-up" not in r.stdout  # the tour's flags reach --lr
    run = tmp_path / "runs" / "mamba-passkey-s0"
    summary = json.loads((run / "summary.json").read_text())
    x4 = json.loads((run / "eval-passkey-x4-n512-s0-best.json").read_text())
    assert summary["test"]["acc"] >= 0.95 and x4["acc"] >= 0.95  # it learns
    quoted = record["numbers"]["passkey"]
    readme = (ROOT / "README.md").read_text()
    assert f"{summary['test']['acc']:.3f}" == f"{quoted['test_acc']:.3f}"
    assert f"{x4['acc']:.3f}" == f"{quoted['x4_acc']:.3f}"
    assert re.search(rf"test\s+accuracy\s+{quoted['test_acc']:.3f}\b", readme)
    tiny = json.loads((tmp_path / "runs" / "tiny" / "report.json").read_text())
    assert [c["verdict"] for c in tiny["checks"]] == ["pass", "pass"]
