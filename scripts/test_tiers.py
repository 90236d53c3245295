"""`make test-tiers`: the quick tier's list, tests/heavy.txt, from one measured run of the suite.

Reads a pytest JUnit XML file (the suite run with `--junitxml`) and writes the node ids of the
tests that took at least THRESHOLD seconds there, heaviest first, with the run's load in the
header. tests/conftest.py marks those tests `heavy`, and the test files of the oracles that
`make test` installs as well; `make test-fast` runs `-m "not slow and not heavy"`. A test added
since the last measurement is in the quick tier until the list is measured again.

    python scripts/test_tiers.py RUN.xml [--threshold 1.0] [--load "load average 1.2"]
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "heavy.txt"


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("xml", type=Path)
    ap.add_argument("--threshold", type=float, default=1.0)
    ap.add_argument("--load", default="", help="the machine's load during the run, for the header")
    args = ap.parse_args()
    rows = heavy(args.xml, args.threshold)
    head = [f"# The suite's tests that took >= {args.threshold:g} s in one measured run, "
            f"{len(rows)} tests, {sum(t for t, _ in rows):,.0f} s",
            f"# ({args.load or 'load not given'}).",
            "# scripts/test_tiers.py wrote this list (`make test-tiers`); tests/conftest.py "
            "marks them `heavy`,", "# and `make test-fast` leaves them out."]
    OUT.write_text("\n".join(head + [n for _, n in rows]) + "\n")
    print(f"{OUT.relative_to(ROOT)}: {len(rows)} tests >= {args.threshold:g} s")


if __name__ == "__main__":
    main()
