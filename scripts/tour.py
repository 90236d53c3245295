"""The README's tour, run as a new user runs it: each line exactly as the README prints it, in
`bash -c` with the venv's `bin` first on PATH (what `source .venv/bin/activate` does), in a fresh
folder; its wall time, and the numbers the README quotes, written to
docs/results/tour/record.json (the record `scripts/readme_numbers.py` renders into the README; a
number without a record is not quoted).

    python scripts/tour.py [--out docs/results/tour/record.json] [--workdir DIR]

`make tour-record` runs it with .venv's Python. Nothing is pinned: no core affinity and no
OMP_NUM_THREADS, so the times are what the printed lines give on this machine; the record says
what they ran under (the machine, the cores available, the torch threads the lab's default
chose, the load average before and after).

The record also stores what makes it current: a hash of the tour's inputs (its lines, the run
configs its train and sweep lines build, the presets it generates and evaluates) and a probe of
each model it trains (the logits of one fixed input, summed per position, at the run's seed).
tests/test_readme_tour.py recomputes both at HEAD and fails when either differs, so a record
made before a change to the tour's configs or models cannot pass; it also runs the README's
lines verbatim in a fresh clone and compares their numbers with this record's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "results" / "tour" / "record.json"
TINY = ROOT / "experiments" / "demo" / "tiny.toml"

# The tour, in order: the command, what the README says it does, and whether the README gives its
# wall time. tests/test_readme_tour.py runs every line.
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
# the train line's flags, as `recall-lab train` turns them into a run config
TRAIN_FLAGS = {"model": "mamba", "task": "passkey", "steps": 300, "warmup": 100}
# the presets the generate and eval lines use
PRESETS = ("mini-mqjr", "passkey")
# the probe's input length (within every tour task's length)
PROBE_LEN = 24


def tour_configs() -> dict[str, dict]:
    """The run configs the tour trains, by run name: the train line's and the tiny sweep's."""
    from recall_lab.experiments.grid import load_experiment
    from recall_lab.runs import run_config_from_flags

    over = {k: v for k, v in TRAIN_FLAGS.items() if k not in ("model", "task")}
    train = run_config_from_flags(TRAIN_FLAGS["model"], TRAIN_FLAGS["task"], None, None, None,
                                  over)
    configs = {"mamba-passkey-s0": train}
    for run in load_experiment(TINY).runs:
        configs[f"tiny/{run.name}"] = run.config
    return configs


def inputs_hash() -> str:
    """sha256 of what the tour's numbers follow from: its lines, the run configs its train and
    sweep lines build (as their config.json has them) and the presets it generates and
    evaluates. A comment in tiny.toml does not change it; a changed default does."""
    from recall_lab.generators.spec import PRESETS as ALL_PRESETS

    data = {"lines": [x["cmd"] for x in TOUR],
            "runs": {name: cfg.to_json() for name, cfg in tour_configs().items()},
            "presets": {p: ALL_PRESETS[p].spec.model_dump(mode="json") for p in PRESETS}}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def probes() -> dict[str, list[float]]:
    """Per distinct model the tour trains: its logits on one fixed input at the run's seed,
    summed per position (PROBE_LEN numbers, 6 significant digits); what a change to a model's
    initialisation or forward moves."""
    import torch

    from recall_lab.runs import build_run_model

    out: dict[str, list[float]] = {}
    seen: dict[str, str] = {}
    for name, cfg in tour_configs().items():
        key = json.dumps(cfg.model.model_dump(mode="json"), sort_keys=True) + str(cfg.train.seed)
        if key in seen:
            continue
        seen[key] = name
        torch.manual_seed(cfg.train.seed)
        model = build_run_model(cfg).eval()
        vocab = cfg.task.vocab().size
        ids = (torch.arange(PROBE_LEN) * 7 + 3).remainder(vocab).unsqueeze(0)
        with torch.no_grad():
            logits = model(ids).logits
        out[name] = [float(f"{v:.6g}") for v in logits.double().sum(-1).flatten().tolist()]
    return out


def venv_env() -> dict:
    """The environment `source .venv/bin/activate` gives: the venv's bin first on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = str(Path(bin_dir).parent)
    return env


def run_line(cmd: str, cwd: Path, env: dict) -> tuple[float, str]:
    """Run one tour line as printed (`bash -c`) in `cwd`; its wall time and output. A failing
    line stops the tour."""
    t0 = time.monotonic()
    r = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True)
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
            # each seed's test accuracy (the seeds that give the mean and std) and the share
            # of the held-out samples also drawn in training (`report`'s overlap column)
            "groups": {g["label"]: {"mean": g["mean"], "std": g["std"], "seeds": g["seeds"],
                                    "solved": (g.get("solved") or {}).get("k"),
                                    "per_seed": g.get("per_seed"),
                                    "overlap": g.get("held_out_in_training")}
                       for g in rep["groups"]},
            "claims": {"n": len(rep.get("checks", [])),
                       "pass": sum(c.get("verdict") == "pass" for c in rep.get("checks", [])),
                       "verdicts": [c.get("verdict") for c in rep.get("checks", [])]},
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


def default_threads(env: dict) -> int:
    """The torch threads the lab's default gives a command in this environment (`train` calls
    set_threads(None) before it trains)."""
    code = ("from recall_lab.commands.training import set_threads; set_threads(None); "
            "import torch; print(torch.get_num_threads())")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       check=True)
    return int(r.stdout.split()[-1])


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
        tiny.write_text(TINY.read_text())
    env = venv_env()
    load_before = round(os.getloadavg()[0], 1)
    lines = []
    for line in TOUR:
        wall, _ = run_line(line["cmd"], work, env)
        lines.append({**line, "wall_s": round(wall, 1)})
        print(f"{wall:7.1f} s  {line['cmd']}", flush=True)
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    record = {"lines": lines, "numbers": numbers(work), "machine": machine(),
              "threads": default_threads(env), "load": [load_before,
                                                        round(os.getloadavg()[0], 1)],
              "commit": commit, "date": time.strftime("%Y-%m-%d", time.gmtime()),
              "inputs": inputs_hash(), "probe": probes()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
