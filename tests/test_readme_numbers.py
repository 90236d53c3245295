"""The README's generated sections (the tour's wall times and numbers, one line per experiment)
equal what `scripts/readme_numbers.py` renders from the committed records: they cannot drift."""

import json
import subprocess
import sys
from pathlib import Path

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
        assert f"{rep['runs']} runs" in line
        if list((rep_file.parent / "runs").glob("*/summary.json")):
            assert "held-out overlap" in line
        checks = rep.get("checks") or []
        if checks:
            passed = sum(c.get("verdict") == "pass" or (c.get("verdict") is None and c.get("ok"))
                         for c in checks)
            assert f"claims: {passed} of {len(checks)} pass" in line
