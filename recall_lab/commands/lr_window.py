"""CLI of the lr window: `lr-window` (a mixer's seeds solved over an lr ladder at one table of a
reference protocol). The body only parses, calls the API and prints."""

from __future__ import annotations

import textwrap
from pathlib import Path

import typer

from recall_lab.commands.shell import GuardedApp, console
from recall_lab.generators.errors import RecallLabError


def _lrs(text: str | None) -> list[float] | None:
    if not text:
        return None
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise RecallLabError(f"--lrs takes learning rates, comma-separated and sorted (e.g. "
                             f"3e-4,1e-3,3e-3), got {text!r}") from None


def register(app: GuardedApp) -> None:
    @app.command("lr-window")
    def lr_window(
        mixer: str = typer.Argument(..., help="A built-in model or zoo mixer name (rwkv7), an "
                                    "import path (pkg.mod:Class) or a plug-in's name."),
        kwargs: str = typer.Option(None, "--kwargs", help="The mixer's keyword arguments as a "
                                   "JSON object, e.g. '{\"head_size\": 4}'."),
        table: float = typer.Option(..., "--table", help="The reference's table (its size, "
                                    "e.g. 16 pairs)."),
        lrs: str = typer.Option(None, "--lrs", help="The lr ladder, sorted, comma-separated "
                                "(default 3e-4,1e-3,3e-3,1e-2,3e-2); it grows by half a decade "
                                "where the best lr is at an end, within 1e-4 and 1e-1."),
        seeds: int = typer.Option(None, "--seeds", help="Seeds per lr at most (default: the "
                                  "reference's, 10); an lr stops once its comparison with the "
                                  "best is settled."),
        confirm: int = typer.Option(8, "--confirm", help="Fresh seeds at the best lr once the "
                                    "window is settled (from seed 100): the only seeds a "
                                    "verdict at the best lr reads; 0: none."),
        records: list[Path] = typer.Option([], "--records", help="A folder of finished runs "
                                           "(a placement's, a sweep's) whose runs at this "
                                           "config count instead of training; repeatable."),
        workers: int = typer.Option(1, help="Runs in parallel (processes, or Ray tasks)."),
        threads: int = typer.Option(1, help="torch threads per worker."),
        engine: str = typer.Option("local", help="local (process pool) or ray."),
        reference: str = typer.Option(None, "--reference", help="A shipped reference's name "
                                      "(zoo-frontier, the default; frontier-2026) or a "
                                      "reference folder (docs/place.md)."),
        check: bool = typer.Option(True, "--check/--no-check", help="Refuse a mixer that fails "
                                   "a correctness row of `recall-lab check` before training."),
        out: Path = typer.Option(Path("runs"), help="Root folder; the window goes to "
                                 "OUT/lr-window-LABEL-TABLE-HASH/."),
        plots: bool = typer.Option(True, help="Draw the figure."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (ladder, seeds, "
                                     "the records that count, the runs at most, the wall time "
                                     "from a timing probe) and run nothing; nothing is "
                                     "written."),
        estimate: bool = typer.Option(True, "--estimate/--no-estimate", help="With --dry-run: "
                                      "time the probe; --no-estimate skips it."),
    ) -> None:
        """Measure a mixer's lr window at one table of the reference's protocol: seeds solved
        per lr with Wilson intervals, the best lr, the lrs not separable from it (one-sided
        Fisher at 0.05) and the window's width in decades, an edge flag, then fresh seeds at
        the best lr to confirm it. Writes report.md, window.json and lr-window.png. Rerun to
        resume."""
        from recall_lab import api
        from recall_lab.experiments.engine import ENGINES
        from recall_lab.experiments.lr_window import lines
        from recall_lab.experiments.reference import SHIPPED_REFERENCES
        from recall_lab.runs import mixer_kwargs_json

        if engine not in ENGINES:
            raise RecallLabError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
        if reference is not None and not Path(reference).is_dir() \
                and reference not in SHIPPED_REFERENCES:
            raise RecallLabError(f"reference {reference} is neither a folder nor a shipped "
                                 f"reference ({', '.join(SHIPPED_REFERENCES)})")
        args = mixer_kwargs_json(kwargs, "--kwargs")

        def say(text: str) -> None:
            console.print(textwrap.fill(text, min(console.width, 100), subsequent_indent="  ",
                                        break_long_words=False, break_on_hyphens=False),
                          markup=False, highlight=False, soft_wrap=True)

        answer = api.lr_window(mixer, args, table=table, lrs=_lrs(lrs), seeds=seeds,
                               confirm=confirm, records=records, workers=workers,
                               threads=threads, engine=engine, reference=reference,
                               check=check, out=out, plots=plots, say=say,
                               monitor=api.place_monitor(console), dry_run=dry_run,
                               estimate=estimate)
        if dry_run:
            fmt = ", ".join
            say(f"{answer['label']} at {answer['table_name']} of {answer['reference']}: ladder "
                f"{fmt(f'{x:g}' for x in answer['ladder'])} (it may grow to "
                f"{fmt(f'{x:g}' for x in answer['widest'])}); up to {len(answer['seeds'])} "
                f"seeds per lr, then {len(answer['confirm_seeds'])} confirmation seeds")
            have = {k: n for k, n in answer["reused"].items() if n}
            say("records that count (not retrained): "
                + (fmt(f"{n} at lr {k}" for k, n in have.items())
                   + f" (from {fmt(answer['reused_from'])})" if have else "none"))
            say(f"runs at most: {answer['runs_ladder']} on the ladder, {answer['runs_growth']} "
                f"more if it grows to both bounds, {answer['runs_confirm']} to confirm; into "
                f"{answer['folder']}")
            say(f"rule: {answer['rule']}")
            for i, c in enumerate(answer["claims"], 1):
                say(f"claim {i}: {c['claim']}")
            if answer.get("estimate"):
                from recall_lab.experiments.estimate import estimate_lines

                for line in estimate_lines(answer["estimate"], ", every lr at all its seeds "
                                           "and the ladder grown to both bounds: settled lrs "
                                           "take less"):
                    console.print(line, markup=False, highlight=False)
            return 0
        for line in lines(answer):
            say(line)
        failed = sum(r["failed"] for r in answer["rungs"])
        say(f"written: {answer['folder']}/report.md, window.json"
            + (", lr-window.png" if answer["figures"] else "")
            + f"; {answer['wall_s_this_call']:.0f} s")
        return 1 if failed else 0
