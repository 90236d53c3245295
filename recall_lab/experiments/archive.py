"""Run records without weights: a sweep folder's index, claims and each run's config, summary and
metrics, copied to a folder that git can hold (kilobytes per run, where the checkpoints are
megabytes).

An archive is itself a sweep folder that `report` reads (every figure and statistic comes from
these files), and copying it back under `runs/` lets `sweep` go on where it stopped: a run with
`summary.json` is finished and skipped, so only the missing runs train. Run folders on a
session's machine may not outlive the session; the archive in `docs/results/<name>/runs/` does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from recall_lab import checkpoint as ck
from recall_lab.experiments.claims import CLAIMS
from recall_lab.experiments.engine import INDEX
from recall_lab.generators.errors import RecallLabError

RUN_FILES = (ck.CONFIG, ck.SUMMARY, ck.METRICS)


def archive_runs(sweep: Path, dest: Path) -> int:
    """Copy `sweep`'s index, claims and every finished run's records into `dest` (files of the
    same name are replaced, nothing else in `dest` is touched). Returns the number of runs."""
    sweep, dest = Path(sweep), Path(dest)
    if not (sweep / INDEX).is_file():
        raise RecallLabError(f"{sweep} is not a sweep folder (no {INDEX})")
    if dest.resolve() == sweep.resolve():
        raise RecallLabError("the archive must be another folder than the sweep's")
    index = ck.read_json(sweep / INDEX, "sweep index")
    dest.mkdir(parents=True, exist_ok=True)
    for name in (INDEX, CLAIMS):
        if (sweep / name).is_file():
            shutil.copy2(sweep / name, dest / name)
    n = 0
    for entry in index.get("runs", []):
        run = sweep / entry["name"]
        if not (run / ck.SUMMARY).is_file():
            continue
        (dest / entry["name"]).mkdir(exist_ok=True)
        for name in RUN_FILES:
            if (run / name).is_file():
                shutil.copy2(run / name, dest / entry["name"] / name)
        n += 1
    return n
