"""The README's generated sections (the tour's wall times and numbers, one line per experiment)
and the results index's held-out overlap table equal what `scripts/readme_numbers.py` renders
from the committed records: they cannot drift."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "readme_numbers.py"


def _check(readme: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--readme", str(readme)],
                          capture_output=True, text=True)


def test_readme_numbers_equal_their_records():
    r = _check(ROOT / "README.md")
    assert r.returncode == 0, r.stderr


def test_a_hand_edited_number_is_found(tmp_path):
    """Changing one quoted number in a copy of the README makes the check fail."""
    text = (ROOT / "README.md").read_text()
    rec = json.loads((ROOT / "docs" / "results" / "tour" / "record.json").read_text())
    train = next(x for x in rec["lines"] if " train " in x["cmd"])
    quoted = f"# {train['wall_s']:.0f} s: "
    assert quoted in text
    copy = tmp_path / "README.md"
    copy.write_text(text.replace(quoted, "# 3 min: ", 1))
    r = _check(copy)
    assert r.returncode == 1 and "differs" in r.stderr


def test_every_report_has_its_line():
    """One line per committed report, with its runs and its claims counted from report.json."""
    text = (ROOT / "README.md").read_text()
    for rep_file in sorted((ROOT / "docs" / "results").glob("*/report.json")):
        rep = json.loads(rep_file.read_text())
        name = rep_file.parent.name
        line = text.split(f"- **{name}** ", 1)[1].split("\n- ", 1)[0].replace("\n  ", " ")
        missing = sum(g.get("missing") or 0 for g in rep["groups"])
        if missing:  # a plan never reads as runs: "10 of 40 planned runs finished"
            assert f" {rep['runs'] - missing} of {rep['runs']} planned runs finished" in line
            assert f" {rep['runs']} runs " not in line
        else:
            assert f"{rep['runs']} run{'' if rep['runs'] == 1 else 's'} " in line
        if list((rep_file.parent / "runs").glob("*/summary.json")):
            assert "held-out overlap" in line
        checks = rep.get("checks") or []
        if checks:
            passed = sum(c.get("verdict") == "pass" or (c.get("verdict") is None and c.get("ok"))
                         for c in checks)
            assert f"claims: {passed} of {len(checks)} pass" in line
            still = sum(c.get("verdict") == "open" for c in checks)
            assert (f"pass, {still} open" in line) == bool(still)  # open is not a fail


def test_the_index_lists_the_overlap_of_every_committed_experiment(tmp_path):
    """Every folder of committed run records has its row in docs/results/index.md, its overlap
    read from its summaries; a hand-edited share is found."""
    index = (ROOT / "docs" / "results" / "index.md").read_text()
    section = index.split("<!-- readme-numbers:overlap begin", 1)[1]
    results = ROOT / "docs" / "results"
    for runs in sorted(results.glob("**/runs")):
        if not list(runs.glob("*/summary.json")):
            continue
        # a result's records: its sweep's runs, and a pilot's or placement's where it has them
        summaries = [p for sub in ("runs", "pilot", "cells")
                     for p in (runs.parent / sub).glob("*/summary.json")]
        name = str(runs.parent.relative_to(results))
        row = next(ln for ln in section.splitlines()
                   if ln.startswith((f"| {name} |", f"| [{name}](")))
        shares = [json.loads(p.read_text())["held_out_in_training"] for p in summaries]
        largest = max(max(s["valid"], s["test"]) for s in shares)
        assert ("| none |" in row) == (largest == 0), row
        assert f"| {len(summaries)} of " in row
    assert "| [seattn](seattn/README.md) | - | not recorded" in section
    copy = tmp_path / "index.md"
    copy.write_text(index.replace("| 570 of 570 | none |", "| 570 of 570 | 0.1% / 0.0% |"))
    r = subprocess.run([sys.executable, str(SCRIPT), "--check", "--index", str(copy)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "index.md differs" in r.stderr


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_numbers", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_tours_spread_is_shown_with_its_seeds():
    """A group's seeds: the record's own values where it has them; a 2-seed record without them
    gives the two values its mean and sample std imply (they reproduce both); the 95% interval
    of a std over 2 seeds, checked by the chi-square (1 dof) cdf erf(sqrt(x / 2))."""
    import math
    import statistics

    rn = _script()
    assert rn.seeds_text({"seeds": 3, "per_seed": [0.7, 0.5, 0.6], "mean": 0.6, "std": 0.1}) \
        == "3 seeds: 0.500, 0.600, 0.700"
    rec = json.loads((ROOT / "docs" / "results" / "tour" / "record.json").read_text())
    for g in rec["numbers"]["tiny"]["groups"].values():
        text = rn.seeds_text(g)
        values = [float(v) for v in text.split(": ")[1].split(", ")]
        assert len(values) == g["seeds"] == 2
        assert statistics.mean(values) == pytest.approx(g["mean"], abs=1e-3)
        assert statistics.stdev(values) == pytest.approx(g["std"], abs=1e-3)
        assert text in (ROOT / "README.md").read_text().replace("\n", " ")
    lo, hi = rn.std_interval_2()
    # s^2 / sigma^2 ~ chi2(1): P(below 1 / hi^2) = 0.025 and P(below 1 / lo^2) = 0.975
    assert math.erf(math.sqrt(1 / hi ** 2 / 2)) == pytest.approx(0.025, abs=1e-9)
    assert math.erf(math.sqrt(1 / lo ** 2 / 2)) == pytest.approx(0.975, abs=1e-9)
