"""CLI of placement: `place` (one mixer on the recall-against-state frontier, against the
reference the lab ships). The body only parses, calls the API and prints."""

from __future__ import annotations

import textwrap
from pathlib import Path

import typer

from recall_lab.commands.shell import GuardedApp, console
from recall_lab.generators.errors import RecallLabError


def _tables(text: str | None) -> list[float] | None:
    if not text:
        return None
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise RecallLabError(f"--tables takes table sizes, comma-separated (e.g. 4,8,16), got "
                             f"{text!r}") from None


def register(app: GuardedApp) -> None:
    @app.command()
    def place(
        mixer: str = typer.Argument(..., help="A built-in model or zoo mixer name (deltanet), "
                                    "an import path (pkg.mod:Class) or a plug-in's name."),
        kwargs: str = typer.Option(None, "--kwargs", help="The mixer's keyword arguments as a "
                                   "JSON object, e.g. '{\"num_heads\": 4, \"expand_k\": 0.25}'."),
        kwargs_file: str = typer.Option(None, "--kwargs-file", help="Take the mixer's "
                                        "kwargs from this TOML file's \\[mixers.\"PATH\"] table, "
                                        "or a shipped file's name (zoology); --kwargs wins key "
                                        "by key."),
        tables: str = typer.Option(None, "--tables", help="Only these tables of the reference "
                                   "(their sizes, comma-separated, e.g. 4,8,16); default: all."),
        seeds: int = typer.Option(None, "--seeds", help="Seeds per table (default: the "
                                  "reference's, 10)."),
        workers: int = typer.Option(1, help="Runs in parallel (processes, or Ray tasks)."),
        threads: int = typer.Option(1, help="torch threads per worker."),
        engine: str = typer.Option("local", help="local (process pool) or ray."),
        reference: str = typer.Option(None, "--reference", help="A shipped reference's name "
                                      "(zoo-frontier, the default; frontier-2026: it plus the "
                                      "2025-26 families' placements; overwrite-2026: the "
                                      "forgetting-MQAR tables, 8 live keys with 12 and 16 "
                                      "writes, as --tables 12,16) or a reference folder "
                                      "(run records plus place.toml; docs/place.md)."),
        check: bool = typer.Option(True, "--check/--no-check", help="Refuse a mixer that fails "
                                   "a correctness row of `recall-lab check` before training."),
        out: Path = typer.Option(Path("runs"), help="Root folder; the placement goes to "
                                 "OUT/place-LABEL-HASH/."),
        plots: bool = typer.Option(True, help="Draw the two figures."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (the mixer's "
                                     "state, its claims, the runs, and the wall time estimated "
                                     "from a timing probe at each table's shape) and run "
                                     "nothing; nothing is written."),
        estimate: bool = typer.Option(True, "--estimate/--no-estimate", help="With --dry-run: "
                                      "time the probe; --no-estimate skips it (tests, "
                                      "scripts)."),
        memory: bool = typer.Option(False, "--memory", help="Also measure the layer as a "
                                    "memory outside training (no decay; minutes), where the "
                                    "mixer offers memory_spec() (docs/mixers.md)."),
        pilot_rule: int = typer.Option(1, "--pilot-rule", help="The lr pilot's rule: 1 (the "
                                       "reference's: one seed per lr) or 2 (two seeds per lr "
                                       "ranked by their mean, the grid extended at an edge; a "
                                       "different protocol, in its own folder)."),
        lr_window: bool = typer.Option(False, "--lr-window", help="Once the cells finish, "
                                       "measure the lr window at the placement's boundary "
                                       "table (as `recall-lab lr-window`; hours)."),
    ) -> None:
        """Place a mixer on the recall-against-state frontier: the reference's protocol (the
        zoo-frontier's tables, budgets, lr pilot rule, cut rule, solve threshold) run for it,
        its claims recorded before the first run, each table's seeds stopped once no outcome
        of the rest can change a verdict; writes report.md, row.md, answer.json and two
        figures. Rerun to resume."""
        from recall_lab import api
        from recall_lab.experiments.engine import ENGINES
        from recall_lab.experiments.place import frontier_text
        from recall_lab.experiments.reference import SHIPPED_REFERENCES
        from recall_lab.runs import mixer_kwargs_json

        if engine not in ENGINES:
            raise RecallLabError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
        if reference is not None and not Path(reference).is_dir() \
                and reference not in SHIPPED_REFERENCES:
            raise RecallLabError(f"reference {reference} is neither a folder nor a shipped "
                                 f"reference ({', '.join(SHIPPED_REFERENCES)})")
        args = mixer_kwargs_json(kwargs, "--kwargs")
        if kwargs_file is not None:
            from recall_lab.mixers.kwargs_files import mixer_kwargs
            from recall_lab.mixers.registry import resolve_mixer

            args = {**mixer_kwargs(kwargs_file, resolve_mixer(mixer)), **(args or {})}

        def say(text: str) -> None:  # whole words, the console's width, continued lines indented
            console.print(textwrap.fill(text, min(console.width, 100), subsequent_indent="  ",
                                        break_long_words=False, break_on_hyphens=False),
                          markup=False, highlight=False, soft_wrap=True)

        answer = api.place(mixer, args, tables=_tables(tables), seeds=seeds, workers=workers,
                           threads=threads, engine=engine, reference=reference, check=check,
                           out=out, plots=plots, say=say,
                           monitor=api.place_monitor(console), dry_run=dry_run,
                           estimate=estimate, memory=memory, pilot_rule=pilot_rule,
                           lr_window=lr_window)
        if dry_run:
            say(f"{answer['label']}: recurrent state per layer {answer['state']['text']}; "
                f"reference {answer['reference']}; {answer['pilot_runs']} pilot runs, up to "
                f"{answer['cell_runs']} cell runs (tables "
                f"{', '.join(f'{t:g}' for t in answer['tables'])} x {len(answer['seeds'])} "
                f"seeds) into {answer['folder']}")
            for i, c in enumerate(answer["claims"], 1):
                say(f"claim {i} ({c['decidable']}): {c['claim']}")
            if not answer["claims"]:
                say("no claims: no reference row has finished these tables (a row with seeds "
                    "still to run is no one's neighbour); every seed of every table runs")
            if lr_window:
                from recall_lab.experiments.lr_window import planned_line

                say(planned_line(mixer, args))
            if answer.get("estimate"):
                from recall_lab.experiments.estimate import estimate_lines

                for line in estimate_lines(answer["estimate"], "; the pilot, then every cell: "
                                           "cells that settle early take less",
                                           width=min(console.width, 100)):
                    console.print(line, markup=False, highlight=False, soft_wrap=True)
            return 0
        r = answer["runs"]
        for c in answer["claims"]:
            say(f"{c['verdict'].upper()}{' (settled)' if c.get('settled') else ''}: "
                f"{c['claim']}")
        for c in answer["cells"]:
            solved = c["solved"]["text"] if c["solved"] else "-"
            say(f"{c['table']}: {solved}, {c['status']}: {c['reason']}")
        say(f"frontier {frontier_text(answer['frontier'])}; runs: "
            f"{r['trained']} trained, {r['saved']} of {r['planned']} saved, {r['failed']} "
            f"failed; {answer['wall_s_this_call']:.0f} s")
        say(f"written: {answer['folder']}/report.md, row.md, answer.json"
            + (", place-solved-state.png, place-frontier.png" if answer["figures"] else ""))
        if answer.get("lr_window"):
            from recall_lab.experiments.lr_window import lines as window_lines

            for line in window_lines(answer["lr_window"]):
                say(line)
            say(f"written: {answer['lr_window']['folder']}/report.md")
        return 1 if r["failed"] else 0

    @app.command()
    def state(
        mixer: str = typer.Argument(..., help="A zoo mixer's name (gla), a plug-in's name or an "
                                    "import path (pkg.mod:Class)."),
        target: float = typer.Option(..., "--target", help="The recurrent state per layer "
                                     "wanted, in numbers (e.g. 256: a reference row's)."),
        kwargs: str = typer.Option(None, "--kwargs", help="Keyword arguments held fixed while "
                                   "the others are searched, as a JSON object."),
        reference: str = typer.Option(None, "--reference", help="Whose protocol the state is "
                                      "counted in (its d_model and longest table; default "
                                      "zoo-frontier), as place's --reference."),
    ) -> None:
        """The kwargs that give a mixer a target recurrent state per layer, counted as `place`
        counts it (at d_model 64 and the reference's longest table, by default): the sets that
        give it exactly, or the nearest below and above; each as the --kwargs to place it with.
        A target below every count found names the smallest and exits 2."""
        from recall_lab.experiments.reference import SHIPPED_REFERENCES
        from recall_lab.experiments.state_search import search, search_lines
        from recall_lab.runs import mixer_kwargs_json

        if reference is not None and not Path(reference).is_dir() \
                and reference not in SHIPPED_REFERENCES:
            raise RecallLabError(f"reference {reference} is neither a folder nor a shipped "
                                 f"reference ({', '.join(SHIPPED_REFERENCES)})")
        answer = search(mixer, target, mixer_kwargs_json(kwargs, "--kwargs"), reference)
        for line in search_lines(answer):
            console.print(textwrap.fill(line, min(console.width, 100), subsequent_indent="    ",
                                        break_long_words=False, break_on_hyphens=False),
                          markup=False, highlight=False, soft_wrap=True)
