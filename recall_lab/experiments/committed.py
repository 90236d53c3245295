"""What the committed records say about each shipped experiment: the run folders archived under
docs/results (each sweep's `sweep.json` names its experiment) and the runs' own wall time,
summed from their `summary.json`. `recall-lab experiments list` prints these beside each
experiment, so its words about what ran come from the records, not from the experiment files.

A sweep.json's `timing` covers only the call that wrote it (a sweep run in pieces keeps its last
piece's), so the time here is the runs' own training loops, summed over each run's segments
(`timing.run_time`: a resumed run's earlier segments too, where its summary timed them):
core-time, not the wall time of a sweep with several workers. In an installation without the
repository's docs/ there are no records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from recall_lab.experiments.shipped import shipped_dir
from recall_lab.experiments.timing import run_time


@dataclass
class Committed:
    """The committed records of one experiment (summed over every folder that holds some)."""

    runs: int  # run folders with a summary.json
    planned: int  # the runs its sweeps planned (sweep.json's counts), at least `runs`
    run_s: float  # the runs' training-loop time over their timed segments, summed
    folders: list[str]  # where, relative to the repository


def results_dir() -> Path | None:
    """The repository's docs/results beside the shipped experiments (a checkout), else None."""
    folder = shipped_dir().resolve().parent / "docs" / "results"
    return folder if folder.is_dir() else None


def committed_records(results: Path | None = None) -> dict[str, Committed]:
    """Every experiment with committed records, by the name its sweep.json gives it."""
    results = results or results_dir()
    if results is None:
        return {}
    found: dict[str, Committed] = {}
    for index in sorted(results.rglob("sweep.json")):
        data = json.loads(index.read_text())
        exp = data.get("experiment")
        name = exp.get("name") if isinstance(exp, dict) else exp
        if not isinstance(name, str):
            continue
        runs, seconds = 0, 0.0
        for summary in index.parent.glob("*/summary.json"):
            runs += 1
            seconds += run_time(json.loads(summary.read_text()))["loop_s"]
        planned = int((data.get("counts") or {}).get("runs") or runs)
        rec = found.setdefault(name, Committed(0, 0, 0.0, []))
        rec.runs += runs
        rec.planned += max(planned, runs)
        rec.run_s += seconds
        rec.folders.append(index.parent.relative_to(results.parent.parent).as_posix())
    return found


def duration(seconds: float) -> str:
    """A time as a person reads it: s, min or h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
