"""The committed placements' record.json files and their time and binding lines, generated from
their run records.

For each placement folder (the five 2026 families under docs/results/frontier-2026/, and
place-deltanet and place-retention under docs/results/):
- record.json: `recall_lab.experiments.records.build_record` over its records (schema in
  recall_lab/schemas/placement-record.schema.json). These placements ran before the lab
  recorded the machine, so its CPU model, cores and threads are null (their READMEs say in
  words what ran them); the commit is the one that first committed the placement's answer.
- report.md: its time line (training loops summed over every segment of each run, the
  segments recorded before segments were timed named as untimed) and its registration line
  (these runs are bound to their claims by time only, to the second) re-rendered in the words
  `place` now writes; nothing else in it changes.
- README.md: the section between the `placement-records` markers, the same two lines.

    python scripts/placement_records.py           # write them
    python scripts/placement_records.py --check   # exit 1 (naming the file) if one differs

The claims files are never touched: a registration is history.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from recall_lab.experiments import claims as prereg
from recall_lab.experiments.records import RECORD, build_record, content_hash
from recall_lab.experiments.timing import time_text

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "mixer-package"  # place-retention's mixer, for its source hash

RESULTS = ROOT / "docs" / "results"
FAMILIES = ("kda", "log-linear-mamba2", "mamba3", "gated-deltaproduct", "rwkv7")
PLACEMENTS = [RESULTS / "frontier-2026" / n for n in FAMILIES] + [
    RESULTS / "place-deltanet", RESULTS / "place-retention"]
WIDTH = 100
BEGIN = "<!-- placement-records begin (scripts/placement_records.py) -->"
END = "<!-- placement-records end -->"
TIME_RE = re.compile(r"Training loops: .*?(?:\(the runs' own wall time, all sessions\)|"
                     r"an estimate\)|segment summed\))\.")
REG_RE = re.compile(r"(?:Written and recorded before the first run \(claims\.json: [^)]*\)\. |"
                    r"Recorded before the runs by time only.*?preceded them\. |"
                    r"Written, fsynced and recorded before.*?pre-registered\. )", re.S)
MACHINE_NOTE = ("not recorded: these runs predate the lab recording the machine; the "
                "placement's README says in words what ran it")


def first_commit(folder: Path) -> str | None:
    out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--",
                          str(folder / "answer.json")], capture_output=True, text=True,
                         cwd=ROOT)
    lines = out.stdout.split()
    return lines[-1] if out.returncode == 0 and lines else None


def record_of(folder: Path) -> dict:
    sys.path.insert(0, str(EXAMPLES))
    try:
        record = build_record(folder, commit=first_commit(folder))
    finally:
        sys.path.remove(str(EXAMPLES))
    record["machine"]["note"] = MACHINE_NOTE
    record["dedupe_identity"]["content_hash"] = content_hash(record)
    return record


def registration_of(record: dict) -> dict:
    c = record["claims"]
    return {"claims_recorded": c["claims_recorded"], "first_run_launched":
            c["first_run_launched"], "runs": c["runs"], "bound": c["runs_bound"],
            "sha256": next((r["sha256"] for r in reversed(c["registrations"])
                            if r["sha256"]), None),
            "before_every_run": c["claims_recorded"] is not None and all(
                prereg.when(r["launched"]) >= prereg.when(c["claims_recorded"])
                for r in record["runs"] if r["launched"])}


def report_md(text: str, record: dict) -> str:
    """report.md with its time and registration sentences in today's words."""
    text = TIME_RE.sub(lambda _m: time_text(record["time"]), text, count=1)
    return REG_RE.sub(lambda _m: prereg.registration_text(registration_of(record)) + " ", text,
                      count=1)


def readme_section(record: dict) -> str:
    lines = [f"From the records ({RECORD}, schema {record['schema_version']}, content hash "
             f"{record['dedupe_identity']['content_hash'][:16]}): "
             + time_text(record["time"]),
             "Claims: " + prereg.registration_text(registration_of(record))]
    body = "\n\n".join(textwrap.fill(x, WIDTH, break_long_words=False, break_on_hyphens=False)
                       for x in lines)
    return f"{BEGIN}\n{body}\n{END}"


def readme_md(text: str, record: dict) -> str:
    section = readme_section(record)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + section + rest.split(END, 1)[1]
    return text.rstrip("\n") + "\n\n## Time and claims, from the records\n\n" + section + "\n"


def outputs(folder: Path) -> dict[Path, str]:
    record = record_of(folder)
    return {folder / RECORD: json.dumps(record, indent=2) + "\n",
            folder / "report.md": report_md((folder / "report.md").read_text(), record),
            folder / "README.md": readme_md((folder / "README.md").read_text(), record)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a file differs")
    args = ap.parse_args(argv)
    differ = []
    for folder in PLACEMENTS:
        for path, text in outputs(folder).items():
            old = path.read_text() if path.is_file() else None
            if old == text:
                continue
            if args.check:
                differ.append(path)
            else:
                path.write_text(text)
                print(f"wrote {path.relative_to(ROOT)}")
    for path in differ:
        print(f"{path.relative_to(ROOT)} differs from its records: run "
              "python scripts/placement_records.py")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
