"""`recall-lab demo`: mamba and mamba+hax trained briefly on a tiny joint-recall table, one after
the other, into normal run folders, with a learning-curve PNG and demo.json."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from generators import TaskSpec
from generators.errors import RecallLabError
from recall_lab.checkpoint import METRICS, read_lines, write_json
from recall_lab.config import RunConfig, TrainConfig

# A tiny joint-recall table (2 contexts x 2 keys, 8 values, 22 tokens) with a scaled-down model
# (hidden 32, state 8, k = 16 = 8 LSH + 8 KS): the largest setting found where a 2-minute CPU
# budget separates the two models (measured: after 800 steps, held-out accuracy 0.43 vs 0.70; on
# 2 x 3 contexts/keys both stayed at chance within 800 steps).
DEMO_TASK = {"levels": ((2, 2), (2, 2)), "values": 8}
DEMO_TASK_NAME = "demo-mqjr"
DEMO_MODELS = ("mamba", "mamba+hax")
DEMO_MODEL = {"d_model": 32, "d_state": 8}
DEMO_K = {"mamba+hax": 16}
DEMO_TRAIN = {"steps": 2000, "batch_size": 32, "lr": 1e-2, "warmup": 20, "eval_every": 200,
              "eval_samples": 256, "test_samples": 1024, "device": "cpu"}


def run_demo(out: Path | None, steps: int | None, force: bool, *,
             say: Callable[[str], Any] = print,
             progress: Callable[[str, int], Any] | None = None) -> dict:
    """Train the demo models one after the other into OUT/<model>/ (normal run directories),
    then write OUT/demo.json and OUT/learning_curves.png. `progress(model, steps)` gives a
    context manager that is also train_run's progress callback (the CLI's bar)."""
    from recall_lab.analysis.plots import plot_learning_curves
    from recall_lab.models import model_config
    from recall_lab.train import train_run

    out = out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise RecallLabError(f"{out} already exists; pass --force to overwrite it")
        if not (out / "demo.json").is_file():
            raise RecallLabError(f"{out} is not a demo folder; refusing to overwrite it")
        # --force replaces only what the demo wrote: its JSON, its plot, its run folders
        ours = {"demo.json", "learning_curves.png", *DEMO_MODELS}
        foreign = sorted(e.name for e in out.iterdir() if e.name not in ours)
        if foreign:
            raise RecallLabError(f"{out} holds {foreign[0]!r}, which the demo did not write; "
                                 "refusing to overwrite the folder")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    spec, name = TaskSpec(**DEMO_TASK), DEMO_TASK_NAME
    train_cfg = TrainConfig(**{**DEMO_TRAIN, **({"steps": steps} if steps else {})})
    say(f"demo: {', '.join(DEMO_MODELS)} on {name} ({spec.describe()}, up to "
        f"{spec.max_len} tokens), {train_cfg.steps} steps each -> {out}")
    t0 = time.perf_counter()
    summaries, curves = [], {}
    for mname in DEMO_MODELS:
        mcfg = model_config(mname, spec.vocab().size, **DEMO_MODEL, k=DEMO_K.get(mname))
        cfg = RunConfig(model=mcfg, train=train_cfg, task=spec, task_name=name)
        with (progress(mname, train_cfg.steps) if progress else nullcontext()) as bar:
            summaries.append(train_run(cfg, out / mname, progress=bar))
        curves[mname] = read_lines(out / mname / METRICS)
    wall = time.perf_counter() - t0
    png = out / "learning_curves.png"
    plot_learning_curves(curves, png, f"{name}: {spec.describe()}", 1.0 / spec.values)
    write_json(out / "demo.json", {"task": name, "train": train_cfg.model_dump(mode="json"),
                                   "wall_s": wall, "runs": summaries})
    return {"wall_s": wall, "runs": summaries, "png": png, "task": name,
            "steps": train_cfg.steps}
