"""`make test-tiers`: the quick tier's list, tests/heavy.txt, and the tiers' measured times.

Reads a pytest JUnit XML file of the whole suite (`make test`'s command with `--junitxml`) and
writes the node ids of the tests that took at least THRESHOLD seconds there, heaviest first,
with the run's load in the header. tests/conftest.py marks those tests `heavy`, and the test
files of the oracles that `make test` installs as well; `make test-fast` runs
`-m "not slow and not heavy"`. A test added since the last measurement is in the quick tier until
the list is measured again. With `--fast FAST.xml` (a run of the quick tier) it also writes
docs/results/tests/record.json: both runs' wall time and counts, the load, the machine and the
commit, from which `make readme-numbers` writes the README's sentence on the tiers.

    python scripts/test_tiers.py FULL.xml [--fast FAST.xml] [--threshold 1.0] [--load "0.5 0.7"]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

from recall_lab.experiments.records import this_machine

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "heavy.txt"
RECORD = ROOT / "docs" / "results" / "tests" / "record.json"


def node_id(classname: str, name: str) -> str | None:
    """pytest's node id from JUnit's dotted classname (a module, or a module then classes);
    None for a module-level entry (a file skipped whole) or a file no longer there."""
    parts = [p for p in classname.split(".") if p]
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (ROOT / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    return None


def heavy(xml: Path, threshold: float) -> list[tuple[float, str]]:
    cases = ET.parse(xml).getroot().iter("testcase")
    timed = [(float(c.get("time", 0)), node_id(c.get("classname", ""), c.get("name", "")))
             for c in cases]
    return sorted((t, n) for t, n in timed if t >= threshold and n is not None)[::-1]


def totals(xml: Path) -> dict:
    """A run's wall time (pytest's session, as JUnit's testsuite `time`) and its counts."""
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    return {"wall_s": round(float(suite.get("time", 0)), 1), **n,
            "passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"]}


def record(full: Path, fast: Path, load: str) -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    machine = this_machine()  # the placements' records read the machine the same way
    return {"full": totals(full), "fast": totals(fast), "load_average": load,
            "cpu": machine["cpu_model"] or "unknown", "cores": machine["cores"], "workers": 2,
            "commit": commit, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "commands": {"full": "make test", "fast": "make test-fast"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("xml", type=Path)
    ap.add_argument("--threshold", type=float, default=1.0)
    ap.add_argument("--load", default="", help="the load average after the run (/proc/loadavg)")
    ap.add_argument("--fast", type=Path, help="JUnit XML of a run of the quick tier")
    args = ap.parse_args()
    if args.fast is not None:
        RECORD.parent.mkdir(parents=True, exist_ok=True)
        RECORD.write_text(json.dumps(record(args.xml, args.fast, args.load), indent=2) + "\n")
        print(f"{RECORD.relative_to(ROOT)} written")
    rows = heavy(args.xml, args.threshold)
    head = [f"# The suite's tests that took >= {args.threshold:g} s in one measured run, "
            f"{len(rows)} tests, {sum(t for t, _ in rows):,.0f} s",
            f"# (load average {args.load or 'not given'} after the run).",
            "# scripts/test_tiers.py wrote this list (`make test-tiers`); tests/conftest.py "
            "marks them `heavy`,", "# and `make test-fast` leaves them out."]
    OUT.write_text("\n".join(head + [n for _, n in rows]) + "\n")
    print(f"{OUT.relative_to(ROOT)}: {len(rows)} tests >= {args.threshold:g} s")


if __name__ == "__main__":
    main()
