"""The README's tour, run as a new user runs it: each command in a fresh folder, its wall time,
and the numbers the README quotes, written to docs/results/tour/record.json (the record
`scripts/readme_numbers.py` renders into the README; a number without a record is not quoted).

    python scripts/tour.py [--out docs/results/tour/record.json] [--workdir DIR]

Run it on one core (`make tour-record`: `taskset -c 0`, one torch thread; the record says what
it ran on). `tests/test_readme_tour.py` runs the same lines at the same flags. Standard library
only: it calls the `recall-lab` console script beside this Python.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "results" / "tour" / "record.json"

# The tour, in order: the command, what the README says it does, and whether the README gives its
# wall time. tests/test_readme_tour.py runs every line (about a minute on one core).
TOUR: list[dict] = [
    {"cmd": "recall-lab presets", "what": "the named tasks"},
    {"cmd": "recall-lab generate mini-mqjr --out data/mini-mqjr",
     "what": "Parquet shards + manifest.json", "timed": True},
    {"cmd": "recall-lab show data/mini-mqjr --index 0",
     "what": "one sample, as in the paper's Figure 2"},
    {"cmd": "recall-lab train --model mamba --task passkey --steps 300 --warmup 100",
     "what": "-> runs/mamba-passkey-s0", "timed": True},
    {"cmd": "recall-lab eval runs/mamba-passkey-s0 --length-factor 4",
     "what": "the same tables at 4x the length", "timed": True},
    {"cmd": "recall-lab sweep experiments/demo/tiny.toml --dry-run",
     "what": "an experiment: 8 runs, the tokens they train on"},
    {"cmd": "recall-lab sweep experiments/demo/tiny.toml --workers 1",
     "what": "-> runs/tiny/; run again, it skips finished runs", "timed": True},
    {"cmd": "recall-lab report runs/tiny --check",
     "what": "best lr per group, mean +/- std, the file's claims", "timed": True},
    {"cmd": "recall-lab prove", "what": "the paper's theorems as checks", "timed": True},
]


def console_script() -> str:
    """The `recall-lab` beside this Python (the venv's), else the one on PATH."""
    here = Path(sys.executable).parent / "recall-lab"
    return str(here) if here.exists() else "recall-lab"


def run_line(cmd: str, cwd: Path, env: dict) -> tuple[float, str]:
    """Run one tour line in `cwd`; its wall time and output. A failing line stops the tour."""
    argv = shlex.split(cmd)
    argv[0] = console_script()
    t0 = time.monotonic()
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"tour line failed ({r.returncode}): {cmd}\n{r.stdout}\n{r.stderr}")
    return wall, r.stdout


def numbers(work: Path) -> dict:
    """The numbers the README quotes, read from the files the tour wrote."""
    run = work / "runs" / "mamba-passkey-s0"
    summary = json.loads((run / "summary.json").read_text())
    ev = json.loads((run / "eval-passkey-x4-n512-s0-best.json").read_text())
    out = {"passkey": {"test_acc": summary["test"]["acc"], "valid_acc": summary["valid"]["acc"],
                       "x4_acc": ev["acc"], "steps": summary.get("steps")}}
    report = work / "runs" / "tiny" / "report.json"
    if report.exists():
        rep = json.loads(report.read_text())
        out["tiny"] = {
            "groups": {g["label"]: {"mean": g["mean"], "std": g["std"], "seeds": g["seeds"]}
                       for g in rep["groups"]},
            "claims": {"n": len(rep.get("checks", [])),
                       "pass": sum(c.get("verdict") == "pass" for c in rep.get("checks", []))},
        }
    return out


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu}, {cores} core{'s' if cores != 1 else ''} available to the tour"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=RECORD)
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="recall-lab-tour-"))
    work.mkdir(parents=True, exist_ok=True)
    tiny = work / "experiments" / "demo" / "tiny.toml"
    tiny.parent.mkdir(parents=True, exist_ok=True)
    if not tiny.exists():
        tiny.write_text((ROOT / "experiments" / "demo" / "tiny.toml").read_text())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    lines = []
    for line in TOUR:
        wall, _ = run_line(line["cmd"], work, env)
        lines.append({**line, "wall_s": round(wall, 1)})
        print(f"{wall:7.1f} s  {line['cmd']}", flush=True)
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    record = {"lines": lines, "numbers": numbers(work), "machine": machine(),
              "threads": 1, "commit": commit,
              "date": time.strftime("%Y-%m-%d", time.gmtime())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
