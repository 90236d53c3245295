"""Wall time before anything runs (`sweep --dry-run`, `place --dry-run`): a short timing probe
of each distinct model and shape, times the steps each run plans, laid out on the workers.

The probe (`probe_steps`) builds the run's model and optimizer in this process on its device
with the workers' torch threads, trains `warmup` untimed steps and then `steps` timed ones, each
drawing its own batch as a run does (a fixed training set is replaced by the stream of the same
task: the same shapes), and times as many forward passes without gradients. A run's estimate is
its planned steps at the probe's median step, plus its evaluations (every `eval_every` steps on
`eval_samples`, and the test set once) at the probe's forward time per sample, plus start-up:

- a run's own (`probe_startup`): what a run of the same shape spends beyond its steps and
  evaluations, measured by training one such run of 1 step into a temporary folder (building
  the model and data, the held-out sets, a checkpoint, the test set, the length tests, the
  summary) less that step and those evaluations at the probe's times;
- a worker's (`worker_start`): a fresh Python process importing what a worker imports (the
  engine spawns its workers anew for each sweep, and a placement sweeps its pilot, then its
  cells in rounds: one start per phase is counted, so a placement of several rounds takes more).

A run that stops early (`stop_at`, `patience`, a placement's settled cells) takes less: the
estimate is for the full budgets. Runs are laid out on `workers` as the engine takes them (the
next run to the first free worker); on a machine with fewer cores than workers x threads they
share the cores and take longer.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from recall_lab.config import RunConfig
from recall_lab.data import DataSource
from recall_lab.device import resolve_device
from recall_lab.experiments.grid import Run, group_label
from recall_lab.generators.errors import RecallLabError
from recall_lab.models.lm import forward_scored
from recall_lab.progress import makespan
from recall_lab.runs import build_run_model
from recall_lab.train import make_optimizer, objective, optimizer_step, train_run

PROBE_STEPS = 3
PROBE_WARMUP = 1
# fields of [train] that change what a run computes per step: the probe's key keeps these
_STEP_FIELDS = ("batch_size", "device", "precision", "recipe", "alpha", "data", "decay")
_NOT_SHAPE = ("train.seed", "train.data_seed", "train.lr", "train.steps", "task.levels")


@dataclass(frozen=True)
class Probe:
    """One model and shape, timed: seconds per training step and per forward pass (median)."""

    label: str
    step_s: float
    forward_s: float
    batch: int
    length: int
    device: str


def _key(cfg: RunConfig) -> str:
    js = cfg.to_json()
    train = {k: v for k, v in (js.get("train") or {}).items() if k in _STEP_FIELDS}
    return json.dumps([js.get("model"), js.get("task"), train], sort_keys=True, default=str)


def probe_steps(cfg: RunConfig, steps: int = PROBE_STEPS, warmup: int = PROBE_WARMUP,
                threads: int | None = 1, label: str | None = None,
                forward: bool = True) -> Probe:
    """Time `steps` training steps and (unless not `forward`) forward passes of `cfg`'s model
    on its own batches; `threads=None` keeps the process's thread count."""
    t = cfg.train
    device = resolve_device(t.device)
    if getattr(t, "train_examples", None):  # the stream of the same task: same shapes, no set
        cfg = cfg.model_copy(update={"train": t.model_copy(update={"train_examples": None})})
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        torch.manual_seed(t.seed)
        model = build_run_model(cfg).to(device).train()
        opt = make_optimizer(model, t.weight_decay, t.lr, t.betas, t.decay)
        data = DataSource.for_run(cfg)
        batches = [data.batch(i, t.batch_size, device) for i in range(2)]
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

        def step(i: int) -> None:
            x, y = data.batch(i, t.batch_size, device)  # drawn in the step, as a run draws it
            output, y_scored = forward_scored(model, x, y)
            loss = objective(output, y_scored, t.alpha)[0]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            optimizer_step(model, opt, t.grad_clip)

        def forward_pass(i: int) -> None:
            x, y = batches[i % 2]
            with torch.no_grad():
                forward_scored(model, x, y)

        def timed(fn) -> float:
            for i in range(warmup):
                fn(i)
            sync()
            times = []
            for i in range(steps):
                t0 = time.perf_counter()
                fn(i)
                sync()
                times.append(time.perf_counter() - t0)
            return statistics.median(times)

        step_s = timed(step)
        model.eval()
        forward_s = timed(forward_pass) if forward else float("nan")
    finally:
        torch.set_num_threads(before)
    x = batches[0][0]
    return Probe(label or cfg.model.name, step_s, forward_s, int(x.shape[0]), int(x.shape[1]),
                 str(device))


# what a worker process imports before its first run (engine.execute's modules)
WORKER_IMPORTS = "import torch, recall_lab.experiments.engine, recall_lab.train"


def worker_start() -> float:
    """Seconds a fresh Python process takes to import what a sweep's worker imports: the
    start-up of each worker the engine spawns (measured here, at this machine's load)."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", WORKER_IMPORTS], capture_output=True, text=True)
    took = time.perf_counter() - t0
    if r.returncode != 0:
        raise RecallLabError(f"the worker start-up probe failed: {' '.join(r.stderr.split())}")
    return took


def probe_startup(cfg: RunConfig, p: Probe, threads: int | None = 1) -> float:
    """Seconds a run of `cfg`'s shape spends beyond its steps and evaluations: one run of 1 step
    (one evaluation) trained into a temporary folder, less that step and its evaluations at the
    probe `p`'s times; never below 0."""
    t = cfg.train
    one = cfg.model_copy(update={"train": t.model_copy(update={
        "steps": 1, "eval_every": 1, "warmup": 0, "stop_at": None, "patience": None})})
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="recall-lab-startup-") as tmp:
            t0 = time.perf_counter()
            train_run(one, Path(tmp) / "run")
            took = time.perf_counter() - t0
    finally:
        torch.set_num_threads(before)
    per_sample = p.forward_s / max(p.batch, 1)
    return max(0.0, took - p.step_s - (t.eval_samples + t.test_samples) * per_sample)


def run_seconds(cfg: RunConfig, p: Probe) -> float:
    """A run's training steps and evaluations at the probe's times (its full budget)."""
    t = cfg.train
    evals = math.ceil(t.steps / t.eval_every) if t.eval_every else 0
    per_sample = p.forward_s / max(p.batch, 1)
    return t.steps * p.step_s + (evals * t.eval_samples + t.test_samples) * per_sample


def run_label(run: Run) -> str:
    """A grid run's probe label: its swept values but the seeds, lr and budget (which do not
    change a step's time); the model's name where nothing else is swept."""
    values = {f: v for f, v in run.values.items() if f not in _NOT_SHAPE}
    return group_label(values) if values else run.config.model.name


def estimate(phases: list[list[tuple[str, RunConfig]]], workers: int = 1, threads: int = 1,
             steps: int = PROBE_STEPS, startup: bool = True) -> dict:
    """Wall seconds of `phases` (lists of (label, run config); a phase starts when the one
    before ended, as a placement's cells follow its pilot) on `workers`, from one probe per
    distinct model and shape, start-up included (`startup`: a run's own and each phase's
    worker start, both measured; False leaves them out). Returns {"wall_s", "run_s" (the runs'
    seconds summed), "runs", "workers", "threads", "startup": {"worker_s", "phases"} or None,
    "probes": [{label, batch, length, device, step_s, forward_s, startup_s, runs}]}."""
    probes: dict[str, Probe] = {}
    starts: dict[str, float] = {}
    used: dict[str, int] = {}
    wall = total = 0.0
    worker_s = worker_start() if startup and any(phases) else 0.0
    for runs in phases:
        costs = []
        for label, cfg in runs:
            key = _key(cfg)
            if key not in probes:
                try:
                    probes[key] = probe_steps(cfg, steps=steps, threads=threads, label=label)
                    starts[key] = (probe_startup(cfg, probes[key], threads) if startup
                                   else 0.0)
                except RecallLabError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a model that cannot step: one line
                    raise RecallLabError(f"the timing probe of {cfg.model.name} failed: "
                                         f"{type(exc).__name__}: {exc}") from None
            used[key] = used.get(key, 0) + 1
            costs.append(run_seconds(cfg, probes[key]) + starts[key])
        if not costs:
            continue
        busy = min(workers, len(costs))  # the workers this phase starts, each once
        total += sum(costs) + busy * worker_s
        wall += worker_s + makespan([], costs, workers)
    return {"wall_s": wall, "run_s": total, "runs": sum(len(r) for r in phases),
            "workers": workers, "threads": threads, "probe_steps": steps,
            "startup": ({"worker_s": worker_s, "phases": sum(1 for r in phases if r)}
                        if startup else None),
            "load": os.getloadavg()[0],  # other work on the machine slows the probe too
            "probes": [{"label": p.label, "batch": p.batch, "length": p.length,
                        "device": p.device, "step_s": p.step_s, "forward_s": p.forward_s,
                        "startup_s": starts[k], "runs": used[k]}
                       for k, p in probes.items()]}


def _dur(seconds: float) -> str:
    if seconds < 1:
        return "under 1s"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def _secs(x: float) -> str:
    return f"{x:.1f} s" if x >= 0.05 else "under 0.1 s"


def estimate_lines(est: dict, upper: str = "", width: int = 100) -> list[str]:
    """What a dry run prints, in lines of at most `width` (whole words; the caller passes the
    console's width and prints them as they are, so nothing re-wraps them): the estimate, and
    the probes it came from."""
    w, th = est["workers"], est["threads"]
    st = est.get("startup")
    phases = f" ({st['phases']} phases)" if st and st["phases"] > 1 else ""
    started = ("start-up included: "
               f"{_secs(st['worker_s'])} to start each worker of each sweep{phases}, and each "
               "run's own (below)" if st else "start-up not counted")
    head = (f"estimated wall time: {_dur(est['wall_s'])} on {w} worker{'s' if w != 1 else ''} "
            f"x {th} thread{'s' if th != 1 else ''} ({est['runs']} runs, "
            f"{_dur(est['run_s'])} of runs in all; full step budgets{upper}; {started}; an "
            "estimate from the probes below, timed at load average "
            f"{est.get('load', float('nan')):.1f})")
    lines = textwrap.wrap(head, width, subsequent_indent="  ", break_long_words=False,
                          break_on_hyphens=False)
    for p in est["probes"]:
        start = (f", {_secs(p['startup_s'])} of start-up a run"
                 if p.get("startup_s") is not None and st else "")
        lines += textwrap.wrap(
            f"probe {p['label']} at {p['batch']} x {p['length']} on {p['device']}: "
            f"{p['step_s'] * 1e3:,.0f} ms a step, {p['forward_s'] * 1e3:,.0f} ms a forward "
            f"(median of {est['probe_steps']}){start}; {p['runs']} runs", width,
            initial_indent="  ", subsequent_indent="    ", break_long_words=False,
            break_on_hyphens=False)
    return lines
