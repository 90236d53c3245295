"""Wall time before anything runs (`sweep --dry-run`, `place --dry-run`): a short timing probe
of each distinct model and shape, times the steps each run plans, laid out on the workers.

The probe (`probe_steps`) builds the run's model and optimizer in this process on its device
with the workers' torch threads, trains `warmup` untimed steps and then `steps` timed ones on
the run's own batches (a fixed training set is replaced by the stream of the same task: the
same shapes), and times as many forward passes without gradients. A run's estimate is its
planned steps at the probe's median step, plus its evaluations (every `eval_every` steps on
`eval_samples`, and the test set once) at the probe's forward time per sample. Start-up
(process, imports, held-out sets) and the length tests are not counted, and a run that stops
early (`stop_at`, `patience`, a placement's settled cells) takes less: the estimate is for the
full budgets. Runs are laid out on `workers` as the engine takes them (the next run to the
first free worker); on a machine with fewer cores than workers x threads they share the cores
and take longer.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import textwrap
import time
from dataclasses import dataclass

import torch

from recall_lab.config import RunConfig
from recall_lab.data import DataSource
from recall_lab.device import resolve_device
from recall_lab.experiments.grid import Run, group_label
from recall_lab.generators.errors import RecallLabError
from recall_lab.models.lm import forward_scored
from recall_lab.progress import makespan
from recall_lab.runs import build_run_model
from recall_lab.train import make_optimizer, objective, optimizer_step

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
            x, y = batches[i % 2]
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
             steps: int = PROBE_STEPS) -> dict:
    """Wall seconds of `phases` (lists of (label, run config); a phase starts when the one
    before ended, as a placement's cells follow its pilot) on `workers`, from one probe per
    distinct model and shape. Returns {"wall_s", "run_s" (the runs' seconds summed), "runs",
    "workers", "threads", "probes": [{label, batch, length, device, step_s, forward_s,
    runs}]}."""
    probes: dict[str, Probe] = {}
    used: dict[str, int] = {}
    wall = total = 0.0
    for runs in phases:
        costs = []
        for label, cfg in runs:
            key = _key(cfg)
            if key not in probes:
                try:
                    probes[key] = probe_steps(cfg, steps=steps, threads=threads, label=label)
                except RecallLabError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a model that cannot step: one line
                    raise RecallLabError(f"the timing probe of {cfg.model.name} failed: "
                                         f"{type(exc).__name__}: {exc}") from None
            used[key] = used.get(key, 0) + 1
            costs.append(run_seconds(cfg, probes[key]))
        total += sum(costs)
        wall += makespan([], costs, workers)
    return {"wall_s": wall, "run_s": total, "runs": sum(len(r) for r in phases),
            "workers": workers, "threads": threads, "probe_steps": steps,
            "load": os.getloadavg()[0],  # other work on the machine slows the probe too
            "probes": [{"label": p.label, "batch": p.batch, "length": p.length,
                        "device": p.device, "step_s": p.step_s, "forward_s": p.forward_s,
                        "runs": used[k]} for k, p in probes.items()]}


def _dur(seconds: float) -> str:
    if seconds < 1:
        return "under 1s"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def estimate_lines(est: dict, upper: str = "", width: int = 100) -> list[str]:
    """What a dry run prints, in lines of at most `width` (whole words): the estimate, and the
    probes it came from."""
    w, th = est["workers"], est["threads"]
    head = (f"estimated wall time: {_dur(est['wall_s'])} on {w} worker{'s' if w != 1 else ''} "
            f"x {th} thread{'s' if th != 1 else ''} ({est['runs']} runs, "
            f"{_dur(est['run_s'])} of runs in all; full step budgets{upper}; start-up not "
            "counted; an estimate from the probes below, timed at load average "
            f"{est.get('load', float('nan')):.1f})")
    lines = textwrap.wrap(head, width, subsequent_indent="  ", break_long_words=False,
                          break_on_hyphens=False)
    for p in est["probes"]:
        lines += textwrap.wrap(
            f"probe {p['label']} at {p['batch']} x {p['length']} on {p['device']}: "
            f"{p['step_s'] * 1e3:,.0f} ms a step, {p['forward_s'] * 1e3:,.0f} ms a forward "
            f"(median of {est['probe_steps']}); {p['runs']} runs", width,
            initial_indent="  ", subsequent_indent="    ", break_long_words=False,
            break_on_hyphens=False)
    return lines
