"""The lab from Python: one function per verb, the same ones the command line calls.

    import recall_lab as rl
    run = rl.train({"model": {"name": "mamba", "d_model": 32}, "task": {"preset": "mini-mqar"},
                    "train": {"steps": 300}})
    run.summary["test"]["acc"], run.metrics.tail(), run.model()

Every function takes its configuration as a config object, a dict (the tables of a TOML file)
or a TOML path, and returns a typed result: `Run` (a run folder: config, summary, metrics,
`model()`), `Report` (a report: its rows as a DataFrame, its claims, its figures) or `Check`
rows. Runs go to `./runs` of the working directory unless `out` says otherwise. Weights: the
best checkpoint (by validation) unless `checkpoint="last"`. A user's mistake (a config that
does not validate, a missing file) raises `RecallLabError` with the line the command line
prints.

Threads follow the command line's policy (`recall_lab.threads`): `train` and `evaluate` set
torch's thread count for the process as `recall-lab train` does (the cores idle at the start,
OMP_NUM_THREADS where set, or `threads=`), and keep freed memory; `sweep` and `place` run each
run in a worker with `threads` torch threads (default 1, the CLI's `--threads`).

`train`, `sweep`, `place` and `generate` show the commands' progress (`recall_lab.progress`:
a bar with an ETA in a terminal or notebook, a plain line at most every 30 s elsewhere);
`quiet=True` turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from recall_lab import checkpoint as ck
from recall_lab.config import RunConfig, read_toml, resolve_task, task_from_table
from recall_lab.device import resolve_device
from recall_lab.errors import lab_errors
from recall_lab.evaluate import evaluate_run
from recall_lab.experiments.engine import run_sweep
from recall_lab.experiments.estimate import estimate as estimate_wall
from recall_lab.experiments.estimate import run_label as estimate_label
from recall_lab.experiments.grid import expand, load_experiment
from recall_lab.experiments.lr_window import after_placement
from recall_lab.experiments.lr_window import lr_window as lr_window_run
from recall_lab.experiments.place import place as place_mixer
from recall_lab.experiments.replicate import add_replication
from recall_lab.experiments.report import build_report, runs_frame, write_report
from recall_lab.generators import TaskSpec
from recall_lab.generators.dataset import write_dataset
from recall_lab.generators.errors import RecallLabError
from recall_lab.progress import CountProgress, SweepProgress, TrainProgress
from recall_lab.runs import (
    load_run_config,
    load_run_model,
    refuse_overwrite,
    run_config_from_tables,
    run_dir_name,
)
from recall_lab.testing import Check, resolve_target, run_checks
from recall_lab.threads import set_threads
from recall_lab.train import check_run, train_run

Config = RunConfig | dict | str | Path
API_OPTIONS = ("force=True", "resume=True")  # what an overwrite error tells a Python caller


def place_monitor(console):
    """The monitor factory of a placement's sweeps: a pilot, then rounds of cells, each round a
    slice of the cells (the rest are not in this round, not "finished")."""
    return lambda name: SweepProgress(console, name, left="not in this round")


@dataclass
class Run:
    """A run folder: its config, its summary (None while unfinished), its metrics."""

    path: Path
    config: RunConfig
    summary: dict | None

    @property
    def metrics(self) -> pd.DataFrame:
        """metrics.jsonl as a DataFrame: one row per logged step and evaluation."""
        path = self.path / ck.METRICS
        return pd.read_json(path, lines=True) if path.is_file() else pd.DataFrame()

    def model(self, checkpoint: str = "best") -> nn.Module:
        """The trained model with its best (default) or last weights, in eval mode."""
        return load_run_model(self.path, checkpoint).eval()


@dataclass
class Report:
    """A report over run folders: `frame` one row per group (solve rate, Kaplan-Meier median,
    mean +/- std, ...), `claims` the checked claims, `figures` the PNGs written, `data`
    everything report.json holds."""

    frame: pd.DataFrame
    claims: list[dict]
    figures: list[Path]
    data: dict = field(repr=False)
    paths: list[Path] = field(default_factory=list, repr=False)  # every file written

    @property
    def passed(self) -> bool:
        return all(c["ok"] for c in self.claims)


@lab_errors
def run_config(config: Config) -> RunConfig:
    """A RunConfig from itself, a dict of `[model]`, `[train]`, `[task]` tables, or a TOML
    path."""
    if isinstance(config, RunConfig):
        return config
    if isinstance(config, (str, Path)):
        return run_config_from_tables(read_toml(Path(config)), str(config))
    if isinstance(config, dict):
        return run_config_from_tables(config, "config")
    raise RecallLabError(f"a run config is a RunConfig, a dict or a TOML path, got "
                         f"{type(config).__name__}")


@lab_errors
def load_run(path: str | Path) -> Run:
    """A run folder written by `train` (finished or not)."""
    path = Path(path)
    cfg = load_run_config(path)
    summary = ck.read_json(path / ck.SUMMARY, "summary") if (path / ck.SUMMARY).is_file() \
        else None
    return Run(path, cfg, summary)


def _console():
    from rich.console import Console

    return Console()


@lab_errors
def train(config: Config, *, out: str | Path | None = None, force: bool = False,
          resume: bool = False, progress=None, log: tuple[str, ...] = (),
          quiet: bool = False, threads: int | None = None) -> Run:
    """Train one run into `out` (default runs/MODEL-TASK-sSEED under the working directory;
    TASK is the preset's name, or for an inline task `task-` and 8 hex digits of its hash, so
    two inline tasks never share a folder); an existing folder is refused unless
    `force=True` (replace) or `resume=True` (continue). Shows a progress bar with an ETA unless
    `quiet`; `progress` (a function of train_run's step events) replaces it. `threads`: torch's
    threads for this process (default: the CLI's choice, the cores idle at the start)."""
    set_threads(threads, option="threads=")
    cfg = run_config(config)
    out = Path(out) if out is not None else run_dir_name(cfg)
    if not resume:
        refuse_overwrite(out, force, folder=True, resume=True, options=API_OPTIONS)
    check_run(cfg, resolve_device(cfg.train.device))
    if progress is None and not quiet:
        with TrainProgress(_console(), cfg.model.name, cfg.train.steps) as bar:
            train_run(cfg, out, force=force, resume=resume, progress=bar, log=log)
    else:
        train_run(cfg, out, force=force, resume=resume, progress=progress, log=log)
    return load_run(out)


@lab_errors
def evaluate(run: str | Path | Run, task: TaskSpec | str | dict | None = None, *,
             n: int = 512, data_seed: int = 0, checkpoint: str = "best",
             batch_size: int = 64, device: str = "auto", decode: bool = False,
             threads: int | None = None) -> dict:
    """Accuracy of a run's weights on `task` (default: its own task; a preset, a TOML path, a
    `[task]` dict or a TaskSpec: other lengths or table sizes test extrapolation). `threads` as
    in `train`."""
    set_threads(threads, option="threads=")
    path = run.path if isinstance(run, Run) else Path(run)
    spec = load_run_config(path).task if task is None else _task(task)
    return evaluate_run(path, spec, n, data_seed, checkpoint, batch_size, device,
                        decode=decode)


def _task(task: TaskSpec | str | dict) -> Any:
    if isinstance(task, dict):
        return task_from_table(task)[0]
    if isinstance(task, str):
        return resolve_task(task)[0]
    return task


@lab_errors
def generate(task: TaskSpec | str | dict, out: str | Path, *, train: int = 10_000,
             valid: int = 1_000, test: int = 1_000, seed: int = 0, workers: int = 2,
             force: bool = False, quiet: bool = False) -> dict:
    """Write a dataset (Parquet shards + manifest.json) of `task` into `out`; its manifest.
    Shows the samples written unless `quiet`."""
    spec = _task(task)
    name = task if isinstance(task, str) and not task.endswith(".toml") else None
    counts = {"train": train, "valid": valid, "test": test}
    if quiet:
        return write_dataset(spec, Path(out), counts, seed, preset=name, workers=workers,
                             force=force)
    total = sum(max(c, 0) for c in counts.values())
    with CountProgress(_console(), "generating samples", total) as bar:
        return write_dataset(spec, Path(out), counts, seed, preset=name, workers=workers,
                             force=force, on_shard=lambda r: bar.advance(r["rows"]))


@lab_errors
def sweep(experiment: str | Path | dict, *, root: str | Path = "runs", workers: int = 1,
          threads: int = 1, engine: str = "local", only: dict | None = None,
          quiet: bool = False) -> Path:
    """Run an experiment (a TOML path, a shipped experiment's name, or its tables as a dict with
    a `name`) under `root/NAME/`; finished runs are skipped. Returns the sweep folder. Shows
    the sweep's progress (done, running, failed, ETA) unless `quiet`."""
    if isinstance(experiment, dict):
        exp = expand(experiment, str(experiment.get("name") or "experiment"))
    else:
        exp = load_experiment(experiment)
    monitor = None if quiet else SweepProgress(_console(), exp.name)
    try:
        run_sweep(exp, root, workers=workers, threads=threads, engine=engine, only=only,
                  monitor=monitor)
    finally:
        if monitor is not None:
            monitor.close()
    return Path(root) / exp.name


@lab_errors
def report(runs: str | Path | list, *, out: str | Path | None = None, plots: bool = True,
           by: list[str] | None = None, metric: str | None = None,
           experiment: dict | None = None, solve_at: float | None = None,
           best_of_lr: bool = False, memory: bool = False) -> Report:
    """The report over sweep folders (or folders of run folders): best lr per group, solve
    rates with Wilson intervals, steps to solve as time to event, the experiment's claims
    checked, a replication beside its original. Written to `out` (default: the one runs
    folder) as report.md / .csv / .json and PNGs. `experiment`: the tables of an experiment
    file whose `[report]` and `[reference]` to use instead of those the sweep recorded.
    `best_of_lr`: also best-of-lr.md / .json / .png, what one seed at its best lr (zoology's
    way of reporting a cell) would have given, for every seed that ran every lr. `memory`: also
    each fixed-state row's layer measured as a memory beside its trained frontier
    (experiments/memory.py; minutes: 20 seeds x 512 tables per n)."""
    dirs = [Path(r) for r in (runs if isinstance(runs, list) else [runs])]
    if out is None:
        if len(dirs) != 1:
            raise RecallLabError("several runs folders: pass --out for the report")
        if (dirs[0] / ck.CONFIG).is_file():  # a run folder holds the run's files only
            raise RecallLabError(f"{dirs[0]} is a single run's folder: pass --out for the "
                                 "report")
    rep = build_report(dirs, by=by, metric=metric, experiment=experiment, solve_at=solve_at,
                       best_of_lr=best_of_lr, memory=memory)
    add_replication(rep, dirs)
    paths = write_report(rep, Path(out) if out is not None else dirs[0], plots=plots)
    return Report(pd.DataFrame(rep["rows"]), rep["checks"],
                  [p for p in paths if p.suffix == ".png"], rep, paths)


@lab_errors
def check(target: str, kwargs: dict | None = None, *, learning: bool = True,
          speed: bool = True, strict_state: bool = False, dtype: str | None = None
          ) -> list[Check]:
    """The generic checks (recall_lab.testing) on a mixer (import path or name) or a built-in
    model: one `Check` per row. `strict_state`: a declared `state_size` that differs from the
    recurrent state the step cache carries fails the state row (else it is a finding);
    `dtype="float32"`: compare a mixer that casts to float32 inside at float32's tolerance."""
    if dtype not in (None, "float32", "float64"):
        raise RecallLabError(f"dtype {dtype!r}: float32 or float64")
    target_ = resolve_target(target, kwargs, None if dtype is None else getattr(torch, dtype))
    return run_checks(target_, learning=learning, speed=speed, strict_state=strict_state)


@lab_errors
def place(mixer: str, kwargs: dict | None = None, *, tables: list[float] | None = None,
          seeds: int | None = None, workers: int = 1, threads: int = 1, engine: str = "local",
          reference: str | Path | None = None, check: bool = True,
          out: str | Path = "runs", plots: bool = True, say=None, monitor=None,
          dry_run: bool = False, estimate: bool = True, quiet: bool = False,
          memory: bool = False, pilot_rule: int = 1, lr_window: bool = False) -> dict:
    """Place a mixer (a built-in name, a zoo mixer, an import path or a plug-in, built with
    `kwargs`) on the recall-against-state frontier: the reference's protocol (default: the
    shipped zoo-frontier records; "frontier-2026": them plus the placed 2025-26 families; or
    a reference folder) run for it under `out/place-LABEL-HASH/`, claims recorded
    before its first run, cells stopped once their verdicts are settled. Returns the answer
    (the placement folder's answer.json: cells, claims with verdicts, frontier, runs saved);
    report.md, row.md and two figures are beside it. A second call with the same mixer and
    kwargs reuses its finished runs. `say` (a function of one line) hears its progress,
    `monitor(name)` gives each sweep's monitor (default: its lines and progress bars, as the
    command prints them, unless `quiet`); `dry_run` returns the plan (state, claims, runs)
    without checking, training or writing anything, and with `estimate` its "estimate": the
    wall time of the pilot then every cell at its full budget, from a timing probe of each
    table's shape (`experiments.estimate`); `memory` also measures the layer as a memory
    outside training where the mixer offers `memory_spec()` (minutes). `pilot_rule` 2: the
    pilot's rule for new placements (2 seeds per lr, ranked by their mean, the grid extended at
    an edge; its own folder). `lr_window`: once the cells finish, the lr window at the
    placement's boundary table (`lr_window`, as `rl.lr_window`), under "lr_window"."""
    if not quiet and (say is None or monitor is None):
        console = _console()
        say = say or (lambda text: console.print(text, markup=False, highlight=False))
        monitor = monitor or place_monitor(console)
    answer = place_mixer(mixer, kwargs, tables=tables, seeds=seeds, workers=workers,
                         threads=threads, engine=engine, reference=reference, check=check,
                         out=out, plots=plots, say=say, monitor=monitor, dry_run=dry_run,
                         memory=memory, pilot_rule=pilot_rule)
    if lr_window and not dry_run:
        answer["lr_window"] = after_placement(answer, workers=workers, threads=threads,
                                              engine=engine, reference=reference, out=out,
                                              plots=plots, say=say, monitor=monitor)
    if dry_run:
        phases = [[(estimate_label(r), r.config) for r in e.runs]
                  for e in answer.pop("experiments", [])]
        if estimate and phases:
            answer["estimate"] = estimate_wall(phases, workers=workers, threads=threads)
    return answer


@lab_errors
def lr_window(mixer: str, kwargs: dict | None = None, *, table: float,
              lrs: list[float] | None = None, seeds: int | None = None, confirm: int = 8,
              records: list[str | Path] = (), workers: int = 1, threads: int = 1,
              engine: str = "local", reference: str | Path | None = None, check: bool = True,
              out: str | Path = "runs", plots: bool = True, say=None, monitor=None,
              dry_run: bool = False, estimate: bool = True, quiet: bool = False) -> dict:
    """A mixer's lr window at one table of the reference's protocol (default: the shipped
    zoo-frontier's): seeds over an lr ladder (default 3e-4 to 3e-2 in half decades, grown by
    half a decade where the best lr is at an end, within 1e-4 and 1e-1), each run a placement
    cell's config but for its lr, run in rounds until each lr's comparison with the best is
    settled, then `confirm` fresh seeds at the best lr (the only seeds a verdict at that lr
    reads). Finished records at the same config (the shipped references, `records` folders)
    count and are not retrained. Returns the answer (window.json under
    `out/lr-window-LABEL-TABLE-HASH/`, beside report.md and the figure); `dry_run` returns the
    plan without checking, training or writing anything, with `estimate` its wall time at full
    budgets (`experiments.estimate`)."""
    if not quiet and (say is None or monitor is None):
        console = _console()
        say = say or (lambda text: console.print(text, markup=False, highlight=False))
        monitor = monitor or place_monitor(console)
    answer = lr_window_run(mixer, kwargs, table=table, lrs=lrs, seeds=seeds, confirm=confirm,
                           records=list(records), workers=workers, threads=threads,
                           engine=engine, reference=reference, check=check, out=out,
                           plots=plots, say=say, monitor=monitor, dry_run=dry_run)
    if dry_run:
        phases = [[(estimate_label(r), r.config) for r in runs]
                  for runs in answer.pop("phases", []) if runs]
        if estimate and phases:
            answer["estimate"] = estimate_wall(phases, workers=workers, threads=threads)
    return answer


__all__ = ["Report", "Run", "check", "evaluate", "generate", "load_run", "lr_window", "place",
           "report", "run_config", "runs_frame", "sweep", "train"]
