"""CLI of the experiment layer: `sweep` (run a grid), `report` (aggregate run folders),
`archive` (a sweep's records without weights) and `power` (how many seeds a solve-rate
difference needs, before the runs).

Bodies only parse, call `recall_lab.experiments` and print."""

from __future__ import annotations

import textwrap
from pathlib import Path

import typer
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from recall_lab.commands.fit import fit
from recall_lab.commands.shell import GuardedApp, console
from recall_lab.config import read_toml
from recall_lab.generators.errors import RecallLabError
from recall_lab.progress import SweepProgress
from recall_lab.tracking import parse_log

MAX_EXIT = 100  # the exit code is the number of failed runs, capped here


def _fmt_tokens(n: float) -> str:
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n:.0f}"


def register(app: GuardedApp) -> None:
    @app.command()
    def sweep(
        experiment: Path = typer.Argument(..., help="Experiment TOML (a base run config plus "
                                          "a \\[grid] of axes), or the name of a shipped "
                                          "experiment (`recall-lab experiments list`)."),
        out: Path = typer.Option(Path("runs"), help="Root folder; runs go to OUT/EXPERIMENT/"
                                 "NAME-HASH/ beside OUT/EXPERIMENT/sweep.json."),
        workers: int = typer.Option(1, help="Runs in parallel (processes, or Ray tasks)."),
        threads: int = typer.Option(1, help="torch threads per worker."),
        engine: str = typer.Option("local", help="local (process pool) or ray."),
        address: str = typer.Option(None, help="Ray cluster address (default: start a local "
                                    "Ray instance)."),
        log: str = typer.Option(None, help="Also log every run to tensorboard and/or wandb "
                                "(offline), comma-separated; needs the \\[tracking] extra."),
        dry_run: bool = typer.Option(False, "--dry-run", help="List the runs, what would "
                                     "happen to each and the tokens they train on, and estimate "
                                     "the wall time from a timing probe of each model (a few "
                                     "steps at each shape); run nothing."),
        estimate: bool = typer.Option(True, "--estimate/--no-estimate", help="With --dry-run: "
                                      "time the probe (seconds per model and shape); "
                                      "--no-estimate skips it (tests, scripts)."),
        only: list[str] = typer.Option(None, "--only", help="Run only the grid's runs whose "
                                       "config has FIELD=VALUE (repeatable; e.g. "
                                       "model.name=transformer): different fields must all "
                                       "match, one field given twice matches either value; "
                                       "the rest are left as they are."),
        replicate: Path = typer.Option(None, "--replicate", help="A TOML file of "
                                       "\\[\\[report.expect]] claims (comparisons an earlier "
                                       "report found): run their groups again at the lr the "
                                       "original chose, on --seeds new seeds, as the sweep "
                                       "EXPERIMENT-replication; the claims are recorded before "
                                       "its first run."),
        seeds: int = typer.Option(None, "--seeds", help="With --replicate: seeds per group, "
                                  "numbered after every seed of the original sweep (default "
                                  "10)."),
    ) -> None:
        """Run every run of an experiment grid: finished runs are skipped, interrupted ones
        resumed, failures recorded; the exit code is the number of failed runs."""
        from rich.table import Table

        from recall_lab.experiments.engine import ENGINES, outside_grid, plan, run_sweep
        from recall_lab.experiments.grid import load_experiment, parse_only, train_tokens
        from recall_lab.experiments.overlap import group_overlaps, overlap_lines

        if engine not in ENGINES:  # checked before --dry-run too: a dry run shows a real plan
            raise RecallLabError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
        if address is not None and engine != "ray":
            raise RecallLabError("--address is a Ray cluster's address: give it with --engine ray")
        kinds = parse_log(log)
        rule = parse_only(only)
        exp = load_experiment(experiment)
        replicates = None
        if seeds is not None and replicate is None:
            raise RecallLabError("--seeds goes with --replicate")
        if replicate is not None:
            from recall_lab.experiments.replicate import plan_replication, read_claims

            exp, replicates = plan_replication(exp, out, read_claims(replicate),
                                               10 if seeds is None else seeds, replicate)
        others = outside_grid(exp, out)
        if others:
            console.print(f"{len(others)} run folders in {out / exp.name} are not runs of "
                          f"this grid (left alone), e.g. {others[0]}", markup=False,
                          highlight=False)
        if dry_run:
            jobs = plan(exp, out, rule)
            table = Table(title=escape(f"{exp.name}: {len(jobs)} runs -> {out / exp.name}"),
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
                if job.action in ("fresh", "resume"):
                    total += tokens
                table.add_row(job.run.name, job.action,
                              *(str(job.run.values[a]) for a in exp.axes),
                              _fmt_tokens(tokens))
            console.print(table)
            todo = [j.run for j in jobs if j.action in ("fresh", "resume")]
            console.print(f"to train: {len(todo)} runs, {_fmt_tokens(total)} tokens",
                          highlight=False)
            if estimate and todo:
                from recall_lab.experiments.estimate import estimate as time_runs
                from recall_lab.experiments.estimate import estimate_lines, run_label

                est = time_runs([[(run_label(r), r.config) for r in todo]],
                                workers=min(workers, len(todo)), threads=threads)
                for line in estimate_lines(est, "; runs that stop early take less",
                                           width=min(console.width, 100)):
                    console.print(line, markup=False, highlight=False, soft_wrap=True)
            return 0

        monitor = SweepProgress(console, exp.name)
        try:
            index = run_sweep(exp, out, workers=workers, threads=threads, engine=engine,
                              address=address, monitor=monitor, log=kinds, only=rule,
                              replicates=replicates,
                              say=lambda t: console.print(t, markup=False, highlight=False))
        finally:
            monitor.close()
        c = index["counts"]
        left = f", {c['left']} left outside --only" if c.get("left") else ""
        console.print(f"{exp.name}: {c['done']} of {c['runs']} runs done "
                      f"({c['skipped']} were already{left}), {c['failed']} failed; "
                      f"index {out / exp.name / 'sweep.json'}", highlight=False)
        for line in overlap_lines(group_overlaps(out / exp.name, index.get("runs") or [])):
            console.print(line, markup=False, highlight=False)
        tm = index.get("timing")
        if tm and tm["overhead_per_run_s"] is not None:
            console.print(f"time: {tm['wall_s']:.1f} s wall on {tm['workers']} "
                          f"worker{'s' if tm['workers'] != 1 else ''}, "
                          f"{tm['train_s']:.1f} s in training loops; "
                          f"{tm['overhead_per_run_s']:.2f} s per run outside training "
                          f"({tm['in_run_overhead_per_run_s']:.2f} s of it inside the runs)",
                          highlight=False)
        return min(c["failed"], MAX_EXIT)

    @app.command()
    def report(
        runs: list[Path] = typer.Argument(..., help="Sweep folders (runs/EXPERIMENT) or folders "
                                          "of run folders."),
        by: str = typer.Option(None, help="Group by these dotted fields, comma-separated "
                               "(default: every field that varies except lr and seed)."),
        metric: str = typer.Option(None, help="Reported metric, test.acc (default), "
                                   "test.exact or test.loss; the lr is chosen on its valid twin."),
        experiment: Path = typer.Option(None, "--experiment", "-e", help="Experiment TOML whose "
                                        "\\[report] and \\[reference] tables to use (default: "
                                        "those recorded in sweep.json)."),
        out: Path = typer.Option(None, help="Folder for report.md/.csv/.json and the PNGs "
                                 "(default: the runs folder, when there is one)."),
        plots: bool = typer.Option(True, help="Write the PNG figures."),
        check: bool = typer.Option(False, "--check", help="Exit 1 unless every claim of "
                                   "the experiment (\\[\\[report.expect]]) passes; a claim is "
                                   "PASS, FAIL, or OPEN while a run of its rows is unfinished."),
        solve_at: float = typer.Option(None, "--solve-at", help="A seed counts as solved when "
                                       "its test metric reaches this (default: the experiment's "
                                       "\\[report] solve_at, else 0.95)."),
        best_of_lr: bool = typer.Option(False, "--best-of-lr", help="Also write "
                                        "best-of-lr.md/.json/.png: every seed that ran every "
                                        "lr, reported as zoology reports a cell (one seed at "
                                        "its own best lr), beside the lab's solve rate."),
        memory: bool = typer.Option(False, "--memory", help="Also measure each fixed-state "
                                    "row's layer as a memory outside training (no decay, 20 "
                                    "seeds x 512 tables per n; minutes) and draw it beside the "
                                    "trained frontier."),
    ) -> None:
        """Aggregate runs: best lr per group on validation, test mean +/- std over seeds; writes
        report.md, report.csv, report.json and PNGs; --check tests the experiment's claims."""
        from recall_lab import api
        from recall_lab.experiments.report import (
            overlap_recorded,
            replication_lines,
            terminal_warnings,
        )

        exp = read_toml(experiment) if experiment is not None else None
        fields = [f.strip() for f in by.split(",") if f.strip()] if by else None
        result = api.report(runs, out=out, plots=plots, by=fields, metric=metric,
                            experiment=exp, solve_at=solve_at, best_of_lr=best_of_lr,
                            memory=memory)
        rep, paths = result.data, result.paths
        print_warnings(terminal_warnings(rep))
        console.print(report_table(rep))
        if not overlap_recorded(rep):
            console.print("held-out overlap: not recorded by these runs", highlight=False)
        pivot = by_table_table(rep)
        if pivot is not None:
            console.print(pivot)
        mem = memory_table_rich(rep)
        if mem is not None:
            console.print(mem)
        for c in rep["checks"]:
            mark = {"pass": "[green]PASS[/]", "fail": "[bold red]FAIL[/]",
                    "open": "[yellow]OPEN[/]"}[c["verdict"]]
            # the claim; what its op tests; the numbers, required and found; its registration
            console.print(f"{mark} {escape(c['claim'])}", highlight=False)
            for line in ([f"tests: {c['tests']}"] if c.get("tests") else []) + [
                    c["detail"], f"{c['registered']['status']}: {c['registered']['text']}"]:
                console.print(textwrap.fill(line, max(console.width, 40), initial_indent=" " * 5,
                                            subsequent_indent=" " * 5, break_long_words=False,
                                            break_on_hyphens=False),
                              markup=False, highlight=False, soft_wrap=True)
        if rep.get("replication"):
            for line in replication_lines(rep["replication"]):
                console.print(escape(line), highlight=False)
        if rep.get("best_of_lr") is not None:
            from recall_lab.experiments.best_of_lr import lines as best_of_lr_lines

            for line in best_of_lr_lines(rep["best_of_lr"], rep["metric"]) or [
                    "best of lr: no group ran more than one lr"]:
                console.print(escape(line.replace("**", "")), highlight=False)
        console.print(f"written: {', '.join(str(p) for p in paths)}", highlight=False)
        failed = sum(not c["ok"] for c in rep["checks"])
        return 1 if (check and failed) else 0

    @app.command()
    def archive(
        sweep_dir: Path = typer.Argument(..., metavar="SWEEP", help="A sweep folder "
                                         "(runs/EXPERIMENT)."),
        dest: Path = typer.Argument(..., help="Folder for the records, e.g. "
                                    "docs/results/EXPERIMENT/runs."),
    ) -> None:
        """Copy a sweep's records without weights (sweep.json, claims.json, each finished run's
        config, summary and metrics) to DEST: `report DEST` rebuilds the report, and copying
        DEST back under runs/ lets `sweep` train only the runs still missing."""

        from recall_lab.experiments.archive import archive_runs

        n = archive_runs(sweep_dir, dest)
        console.print(f"archived {n} finished runs of {sweep_dir} to {dest}", highlight=False)

    @app.command()
    def power(
        rate_a: float = typer.Argument(..., help="Solve rate you expect for A (0-1)."),
        rate_b: float = typer.Argument(..., help="Solve rate you expect for B (0-1)."),
        seeds: str = typer.Option("3,5,10,15,20,30", help="Seeds per arm to evaluate, "
                                  "comma-separated."),
        level: float = typer.Option(0.05, help="Significance level of the test."),
        target: float = typer.Option(0.8, help="Power for the 'seeds needed' line."),
    ) -> None:
        """Exact power of Fisher's test that A solves more seeds than B (one-sided, as report
        claims with stat = "solved" test it; two-sided beside it), per number of seeds, and
        the seeds per arm the target power needs: choose the seeds before the runs."""

        from recall_lab.experiments import stats

        for name, v in (("rate_a", rate_a), ("rate_b", rate_b), ("level", level),
                        ("target", target)):
            if not 0.0 <= v <= 1.0:
                raise RecallLabError(f"{name} must be in [0, 1], got {v:g}")
        try:
            ns = [int(x) for x in seeds.split(",") if x.strip()]
        except ValueError:
            raise RecallLabError(f"--seeds must be comma-separated integers, got "
                                 f"{seeds!r}") from None
        if not ns or min(ns) < 1 or max(ns) > 500:
            raise RecallLabError(f"--seeds must be between 1 and 500, got {seeds!r}")
        table = Table(title=f"power of Fisher's test at {level:g}: A {rate_a:g} vs B {rate_b:g}")
        for col in ("seeds per arm", "one-sided (A > B)", "two-sided"):
            table.add_column(col, justify="right")
        for n in ns:
            one = stats.fisher_power(rate_a, rate_b, n, level=level)
            two = stats.fisher_power(rate_a, rate_b, n, level=level, alternative="two-sided")
            table.add_row(str(n), f"{one:.3f}", f"{two:.3f}")
        console.print(table)
        need = stats.seeds_for_power(rate_a, rate_b, target, level, max_seeds=200)
        console.print(f"seeds per arm for {target:.0%} power (one-sided): "
                      f"{need if need is not None else 'more than 200'}", highlight=False)


def print_warnings(lines: list[str]) -> None:
    """A report's warnings, above its table (`report`, `demo`): where the person reads."""
    for line in lines:
        console.print(line, style="yellow" if line.startswith("warning") else None,
                      markup=False, highlight=False)


def by_table_table(rep: dict):
    """report.md's seeds solved by table, for the terminal; None where the groups do not sweep
    two or more tables."""
    from rich.table import Table

    from recall_lab.experiments.report import BY_TABLE_NOTE, by_table

    pivot = by_table(rep)
    if pivot is None:
        return None
    head, rows = pivot
    table = Table(title="seeds solved by table", caption=escape(BY_TABLE_NOTE))
    for col in head:  # escaped: rich would take "[range]" for a style tag
        table.add_column(escape(col), justify="left" if col == "row" else "right")
    for row in rows:
        table.add_row(*map(escape, row))
    return table


def memory_table_rich(rep: dict):
    """report.md's "layer as a memory" section, for the terminal; None where not asked for."""
    from rich.table import Table

    from recall_lab.experiments.memory import NOTE, memory_table

    if not rep.get("memory"):
        return None
    head, rows = memory_table(rep["memory"])
    table = Table(title="the layer as a memory (exploratory)", caption=escape(NOTE))
    for col in head:
        table.add_column(escape(col), justify="left" if col == "row" else "right")
    for row in rows:
        table.add_row(*map(escape, row))
    return table


# The report table's columns a reader needs first; when the whole table does not fit the width
# at hand (a pipe: 100 columns), the rest move to a second table with the same group columns.
HEADLINE = ("solved [95% CI]", "KM median steps [95% CI]", "mean +/- std", "seeds")


def report_table(rep: dict, width: int | None = None):
    """The report's table for the terminal (rich). Wider than `width` (default: the console's):
    the headline columns first, and what does not fit moves to tables that repeat the group's
    columns (`commands/fit.py`), so no cell is folded and no number split."""
    head, cells = report_columns(rep)
    title = f"{rep['metric']} at the best lr per group ({rep['runs']} runs)"
    full = _table(title, head, cells, rep["by"])
    width = console.width if width is None else width
    if Measurement.get(console, console.options.update_width(10**4), full).maximum <= width:
        return full
    by = [i for i, h in enumerate(head) if h in rep["by"]]
    order = by + [i for i, h in enumerate(head) if h in HEADLINE]
    order += [i for i in range(len(head)) if i not in order]
    ordered = _table(title, [head[j] for j in order], [[row[j] for j in order] for row in cells],
                     rep["by"])
    return fit(ordered, console, width, keys=max(1, len(by)),
               continued="the same groups, continued")


def _table(title: str, head: list[str], cells: list[list[str]], by: list[str]):
    from rich.table import Table

    table = Table(title=escape(title) if title else None)
    for col in head:
        table.add_column(escape(col), justify="left" if col in by else "right")
    for row in cells:
        table.add_row(*map(escape, row))
    return table


def report_columns(rep: dict) -> tuple[list[str], list[list[str]]]:
    """The report table's header and cells, as text."""
    # as report.md: only where some group has a fixed state, and last
    state = any(row.get("state_per_layer") is not None for row in rep["rows"])
    overlap = any(row.get("overlap_valid") is not None for row in rep["rows"])
    head = [*rep["by"], "best lr", "valid", "solved [95% CI]", "KM median steps [95% CI]",
            "restricted mean steps", "steps to solve", "mean +/- std", "per seed", "seeds",
            "missing", "failed",
            *(["reference"] if rep["reference"].get("values") else []),
            *(["recurrent state per layer", "conv per layer"] if state else []),
            *(["held-out overlap valid / test"] if overlap else [])]
    rows = []
    for row in rep["rows"]:
        cells = [str(row[f]) for f in rep["by"]]
        cells += ["-" if row["best_lr"] is None else f"{row['best_lr']:g}",
                  "-" if row["valid"] is None else f"{row['valid']:.4f}",
                  row["solved"], row["km_text"], row["rmst_text"], row["steps_to_solve"],
                  ("-" if row["mean"] is None else f"{row['mean']:.4f}")
                  + (f" +/- {row['std']:.4f}" if row["std"] is not None else ""),
                  " / ".join("-" if x is None else f"{x:.3f}" for x in row["per_seed"]) or "-",
                  str(row["seeds"]), str(row["missing"]), str(row["failed"])]
        if rep["reference"].get("values"):
            ref = row["reference"]
            cells.append("-" if ref is None else f"{ref:.4f}")
        if state:
            cells += [row["state_text"], row["conv_text"]]
        if overlap:
            cells.append(row["overlap_text"])
        rows.append(cells)
    return head, rows
