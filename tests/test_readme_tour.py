"""The README is the test: its set-up and tour lines, exactly as printed, and the record its
numbers come from (docs/results/tour/record.json, written by scripts/tour.py).

- The set-up says how to put `recall-lab` on PATH before the tour types it bare, and `make demo`
  ends by saying so too.
- The record is current: its hash of the tour's inputs and its probe of each tour model equal
  what HEAD computes (a record made before a change to the tour's configs or models fails here,
  in the fast suite).
- Slow: the set-up lines (`make test` aside: it is this suite) and the tour lines run verbatim in
  one `bash -c`, in a fresh local clone of HEAD that shares the built `.venv` by a symlink (no
  reinstall of torch), and the fresh numbers agree with the record: the same seeds solved and
  claim verdicts, accuracies within TOLERANCE. The environment is the suite's (one torch thread,
  tests/conftest.py), plus DEMO_STEPS (a Makefile variable, like WORKERS) so that `make demo`
  trains 20 steps a run instead of 500, and PYTHONPATH naming the clone, so its code runs. The
  README's numbers themselves equal the record's exactly (tests/test_readme_numbers.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "results" / "tour" / "record.json"
BEGIN = "<!-- readme-numbers:tour begin"
# a fresh run's accuracies may differ from the record's by this much: a CPU's rounding (its
# kernels, its thread count) moves a few of 512 test samples (place-deltanet showed it)
TOLERANCE = 0.02
# the probe's sums (6 significant digits) may differ by rounding alone
PROBE_RTOL = 1e-4
STALE = ("docs/results/tour/record.json is stale: run `make tour-record`, then "
         "`make readme-numbers` (on a quiet machine)")
MARK = "::tour-line::"


def _tour_module():
    spec = importlib.util.spec_from_file_location("tour", ROOT / "scripts" / "tour.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tour = _tour_module()


def bash_block(text: str, after: str) -> list[str]:
    """The commands of the first ```bash block after `after`, comments stripped."""
    block = text.split(after, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines()
            if line.split("#", 1)[0].strip()]


def setup_lines(text: str) -> list[str]:
    return bash_block(text, "## Set up")


def tour_lines(text: str) -> list[str]:
    return bash_block(text, BEGIN)


def test_the_setup_activates_the_venv_before_the_tour_types_recall_lab():
    text = (ROOT / "README.md").read_text()
    setup = setup_lines(text)
    assert setup[setup.index("make demo") + 1] == "source .venv/bin/activate"
    assert all(line.startswith("recall-lab ") for line in tour_lines(text))
    if shutil.which("make"):  # make demo's last line says the same
        dry = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True)
        assert "source .venv/bin/activate" in dry.stdout, dry.stdout


def test_the_tour_record_is_current():
    """The record's lines are the README's and the tour's; its inputs hash and model probes are
    HEAD's."""
    record = json.loads(RECORD.read_text())
    lines = tour_lines((ROOT / "README.md").read_text())
    assert lines == [x["cmd"] for x in record["lines"]] == [x["cmd"] for x in tour.TOUR]
    assert record.get("inputs") == tour.inputs_hash(), STALE
    probe = tour.probes()
    assert set(record.get("probe") or {}) == set(probe), STALE
    for name, sums in probe.items():
        assert sums == pytest.approx(record["probe"][name], rel=PROBE_RTOL, abs=1e-6), \
            f"{STALE}: the probe of {name} moved"


def test_the_record_check_finds_a_changed_model(monkeypatch):
    """A change to a tour model's forward moves its probe."""
    import torch

    from recall_lab.models.lm import RecallLM

    before = tour.probes()
    forward = RecallLM.forward

    def shifted(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        out.logits = out.logits + torch.linspace(0, 1e-2, out.logits.shape[-1])
        return out

    monkeypatch.setattr(RecallLM, "forward", shifted)
    after = tour.probes()
    assert any(a != pytest.approx(b, rel=PROBE_RTOL) for a, b in zip(
        before["mamba-passkey-s0"], after["mamba-passkey-s0"], strict=True))


@pytest.mark.slow
def test_the_readme_lines_run_verbatim_in_a_fresh_clone(tmp_path):
    venv = ROOT / ".venv"
    stamp = venv / ".installed"
    if not (shutil.which("git") and shutil.which("make") and stamp.is_file()
            and (ROOT / ".git").exists()):
        pytest.skip("needs git, make and a .venv built by make in a git checkout")
    text = (ROOT / "README.md").read_text()
    lines = [x for x in setup_lines(text) if x != "make test"] + tour_lines(text)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    (clone / ".venv").symlink_to(venv)
    # the stamp's prerequisites in the clone (pyproject.toml and the lock) are older than the
    # venv's stamp, so make does not reinstall the shared venv from the clone (which would
    # point its console script and editable install at the clone, deleted after the test)
    old = stamp.stat().st_mtime - 10
    for name in ("pyproject.toml", "requirements-test.lock", "test-oracles-nodeps.txt"):
        os.utime(clone / name, (old, old))
    script = "set -e\n" + "".join(f"echo '{MARK}{i}'\n{line}\n" for i, line in enumerate(lines))
    env = {**os.environ, "DEMO_STEPS": "20", "PYTHONPATH": str(clone)}
    r = subprocess.run(["bash", "-c", script], cwd=clone, env=env, capture_output=True,
                       text=True)
    parts = r.stdout.split(MARK)[1:]
    outputs = {lines[int(p.split("\n", 1)[0])]: p.split("\n", 1)[1] for p in parts}
    assert r.returncode == 0, (f"README line failed: {lines[len(parts) - 1]}\n"
                               f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    assert len(parts) == len(lines)
    train = next(x for x in lines if x.startswith("recall-lab train "))
    assert "warning: the warm-up" not in outputs[train]  # the tour's flags reach --lr
    fresh, quoted = tour.numbers(clone), json.loads(RECORD.read_text())["numbers"]
    for key in ("test_acc", "x4_acc"):  # the passkey run: solved as recorded, and close
        assert (fresh["passkey"][key] >= 0.95) == (quoted["passkey"][key] >= 0.95), key
        assert abs(fresh["passkey"][key] - quoted["passkey"][key]) <= TOLERANCE, key
    assert fresh["tiny"]["claims"]["pass"] == quoted["tiny"]["claims"]["pass"]
    assert fresh["tiny"]["claims"]["n"] == quoted["tiny"]["claims"]["n"]
    assert set(fresh["tiny"]["groups"]) == set(quoted["tiny"]["groups"])
    for label, group in fresh["tiny"]["groups"].items():
        was = quoted["tiny"]["groups"][label]
        if "solved" in was:
            assert group["solved"] == was["solved"], label
        assert abs(group["mean"] - was["mean"]) <= TOLERANCE, label
