"""CLI of the experiment layer: `sweep` (run a grid) and `report` (aggregate run folders).

Bodies only parse, call `recall_lab.experiments` and print."""

from __future__ import annotations

from pathlib import Path

import typer

MAX_EXIT = 100  # the exit code is the number of failed runs, capped here


def _fmt_tokens(n: float) -> str:
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n:.0f}"


def register(app: typer.Typer) -> None:
    from recall_lab.cli import console, guarded

    @app.command()
    def sweep(
        experiment: Path = typer.Argument(..., help="Experiment TOML: a base run config plus a "
                                          "\\[grid] of axes (see README, Experiments)."),
        out: Path = typer.Option(Path("runs"), help="Root folder; runs go to OUT/EXPERIMENT/"
                                 "NAME-HASH/ beside OUT/EXPERIMENT/sweep.json."),
        workers: int = typer.Option(1, help="Runs in parallel (processes, or Ray tasks)."),
        threads: int = typer.Option(1, help="torch threads per worker."),
        engine: str = typer.Option("local", help="local (process pool) or ray."),
        address: str = typer.Option(None, help="Ray cluster address (default: start a local "
                                    "Ray instance)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="List the runs, what would "
                                     "happen to each and the tokens they train on; run nothing."),
    ) -> None:
        """Run every run of an experiment grid: finished runs are skipped, interrupted ones
        resumed, failures recorded; the exit code is the number of failed runs."""

        @guarded
        def _run() -> int:
            from rich.table import Table

            from recall_lab.experiments.engine import plan, run_sweep
            from recall_lab.experiments.grid import load_experiment, train_tokens

            exp = load_experiment(experiment)
            if dry_run:
                jobs = plan(exp, out)
                table = Table(title=f"{exp.name}: {len(jobs)} runs -> {out / exp.name}",
                              caption="tokens = steps x batch x longest sample (padding "
                                      "included: an upper bound)")
                table.add_column("run", no_wrap=True)
                table.add_column("action")
                for axis in exp.axes:
                    table.add_column(axis, justify="right")
                table.add_column("tokens", justify="right")
                total = 0
                for job in jobs:
                    tokens = train_tokens(job.run.config)
                    if job.action != "skip":
                        total += tokens
                    table.add_row(job.run.name, job.action,
                                  *(str(job.run.values[a]) for a in exp.axes),
                                  _fmt_tokens(tokens))
                console.print(table)
                console.print(f"to train: {sum(j.action != 'skip' for j in jobs)} runs, "
                              f"{_fmt_tokens(total)} tokens", highlight=False)
                return 0
            from recall_lab.commands.progress import SweepProgress

            monitor = SweepProgress(console, exp.name)
            try:
                index = run_sweep(exp, out, workers=workers, threads=threads, engine=engine,
                                  address=address, monitor=monitor)
            finally:
                monitor.close()
            c = index["counts"]
            console.print(f"{exp.name}: {c['done']} of {c['runs']} runs done "
                          f"({c['skipped']} were already), {c['failed']} failed; "
                          f"index {out / exp.name / 'sweep.json'}", highlight=False)
            return min(c["failed"], MAX_EXIT)

        code = _run()
        if code:
            raise typer.Exit(code)
