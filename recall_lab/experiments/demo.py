"""`recall-lab demo`: a miniature of the capacity experiment (experiments/capacity/capacity.toml)
run by the sweep engine and summarised by the report, so the demo is the lab's main job on a small
grid (experiments/demo/demo.toml): MQAR accuracy against table size for attention and an SSM whose
state is one number per channel, one table, one plot, and the sentence the numbers support.

The grid: MQAR with 2, 4 and 8 key-value pairs over 16 values; `transformer` and `mamba` with
hidden 64, 2 layers and SSM state 1 (128 numbers per layer); 500 steps of batch 32 at
lr 3e-3, stopping once held-out accuracy reaches 0.99; one seed. State 1 rather than capacity's 4:
in capacity's runs mamba with state 4 held 8 pairs at lr 1e-2 (0.97) but not at 3e-3 (0.42), so at
state 4 a one-lr demo would show an lr effect, while state 1 stayed at 0.41 at both lrs. (Not a
pure state-size effect: mamba2 with the same 128 numbers per layer reached 0.98 at 8 pairs in a
trial of this grid; docs/results/capacity has the full picture.)
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from recall_lab.checkpoint import write_json
from recall_lab.config import read_toml
from recall_lab.experiments import overlap as held_out
from recall_lab.experiments.engine import run_sweep
from recall_lab.experiments.grid import expand
from recall_lab.experiments.report import build_report, write_report
from recall_lab.experiments.shipped import shipped_path
from recall_lab.generators.errors import RecallLabError
from recall_lab.runs import demo_dir_name, refuse_overwrite

DEMO_TOML = shipped_path("demo")  # experiments/demo/demo.toml, in a checkout or a wheel
DEMO_EXPERIMENT: dict[str, Any] = read_toml(DEMO_TOML)  # the sweep's input, as a dict
DEMO_MODELS = tuple(DEMO_EXPERIMENT["grid"]["model.name"])
DEMO_PAIRS = tuple(int(levels[0][1]) for levels in DEMO_EXPERIMENT["grid"]["task.levels"])
BASE_SSM = "mamba"
# files the demo writes into its folder (besides the run folders): --force replaces only these
_OURS = {"sweep.json", "demo.json", "report.md", "report.csv", "report.json", ".lock"}


def _pairs(levels: Any) -> int:
    return int(levels[0][1])


def gap_sentence(groups: list[dict]) -> str:
    """The sentence the table supports: who recalls at the largest table, and whether the base
    SSM fell behind as the table grew (a drop of more than 0.1 from the smallest table and more
    than 0.1 below the best model); otherwise it says there was no gap at this budget. A cell the
    report warns about (held-out overlap above 1%: its accuracy includes memorised samples) is
    not cited: the sentence says it left it out.
    `groups`: {"model.name", "task.levels" (the config value), "mean", optionally "overlap"}
    per report group."""
    warned = sorted((_pairs(g["task.levels"]), g["model.name"]) for g in groups
                     if held_out.high(g.get("overlap")))
    acc = {(g["model.name"], _pairs(g["task.levels"])): g["mean"] for g in groups
           if g["mean"] is not None and not held_out.high(g.get("overlap"))}
    sentence = _gap(acc)
    if warned:
        cells = ", ".join(f"{m} at {n} pairs" for n, m in warned)
        sentence = (f"{sentence.removesuffix('.')}; not cited: {cells}, whose held-out samples "
                    "also occur in training (the warning above).")
    return sentence


def _gap(acc: dict[tuple[str, int], float]) -> str:
    sizes = sorted({n for _, n in acc})
    if not sizes:
        return "No run finished: nothing to conclude."
    lo, hi = sizes[0], sizes[-1]
    at_hi = {m: a for (m, n), a in acc.items() if n == hi}
    best = max(at_hi, key=at_hi.get)
    base_lo, base_hi = acc.get((BASE_SSM, lo)), acc.get((BASE_SSM, hi))
    if base_lo is None or base_hi is None:
        return f"At {hi} pairs {best} recalls {at_hi[best]:.2f}; {BASE_SSM} did not finish."
    head = (f"At {hi} pairs {best} recalls {at_hi[best]:.2f} of the queries and {BASE_SSM} "
            f"{base_hi:.2f} (at {lo} pairs: {base_lo:.2f})")
    if base_lo - base_hi > 0.1 and at_hi[best] - base_hi > 0.1:
        return (f"{head}: the fixed-state SSM falls behind as the table grows, within this step "
                "budget and one seed: one seed cannot say how often (docs/results/capacity/ "
                "counts seeds solved out of 10 per cell, with intervals).")
    return f"{head}: no capacity gap shows at this budget."


def _clear(out: Path, force: bool) -> None:
    refuse_overwrite(out, force, folder=True)
    if not (out.exists() and any(out.iterdir())):
        return
    if not (out / "demo.json").is_file():
        raise RecallLabError(f"{out} is not a demo folder; refusing to overwrite it")
    runs = {f"{m}-levels{n}" for m in DEMO_MODELS for n in DEMO_PAIRS}
    foreign = sorted(e.name for e in out.iterdir() if e.name not in _OURS
                     and not e.name.endswith(".png") and e.name.rsplit("-", 1)[0] not in runs)
    if foreign:
        raise RecallLabError(f"{out} holds {foreign[0]!r}, which the demo did not write; "
                             "refusing to overwrite the folder")
    shutil.rmtree(out)


def run_demo(out: Path | None, steps: int | None, force: bool, *, workers: int = 2,
             monitor: Any = None) -> dict:
    """Train the demo grid into OUT/<run>/ (normal run folders, OUT/sweep.json), write the
    report (report.md/.csv/.json, PNGs) and OUT/demo.json; returns the report plus the sentence
    and the wall time."""
    out = out or demo_dir_name()
    _clear(out, force)
    data = dict(DEMO_EXPERIMENT)
    if steps:
        data["train"] = {**data["train"], "steps": steps,
                         "eval_every": min(data["train"]["eval_every"], steps)}
    exp = expand(data, out.name)
    t0 = time.perf_counter()
    index = run_sweep(exp, out.parent, workers=workers, monitor=monitor)
    wall = time.perf_counter() - t0
    rep = build_report([out])
    write_report(rep, out)
    sentence = gap_sentence([{**g.values, "mean": g.mean, "overlap": g.overlap}
                             for g in rep["groups"]])
    write_json(out / "demo.json", {"experiment": data, "wall_s": wall, "sentence": sentence,
                                   "counts": index["counts"]})
    return {"report": rep, "sentence": sentence, "wall_s": wall, "out": out,
            "steps": data["train"]["steps"], "runs": len(exp.runs)}
