"""`recall-lab prove`: run the papers' statements as executable checks, one table row each."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from recall_lab.commands.shell import GuardedApp, console, fail
from recall_lab.proofs.registry import ON_REQUEST, STATEMENTS, prepare, run


def register(app: GuardedApp) -> None:
    @app.command()
    def prove(
        names: list[str] = typer.Argument(
            None, metavar="[NAME]...",
            help=f"Statements to check (default: {', '.join(STATEMENTS)}); on request only: "
                 f"{', '.join(ON_REQUEST)}.",
        ),
        scale: str = typer.Option(
            "small", help="small: the default statements take seconds; linear_memory 18.5 s of "
                          "CPU (measured: one core of a 2-core AMD EPYC at load 4, 24 s of wall "
                          "time; wall time grows with the load). large: construction up to "
                          "n = 10^6; linear_memory d = 8-512 and the optimal memory at d = 8-32, "
                          "about 20 min of CPU (the sum of its parts' measured or extrapolated "
                          "times; not run whole)."
        ),
        dims: list[int] = typer.Option(
            None, "--d", help="linear_memory: the dimensions d to measure, integers >= 4 "
                              "(repeat the flag; default: the scale's grid)."),
        n_max: int = typer.Option(
            None, help="linear_memory: the most pairs searched per d (default 2 d^2)."),
        seeds: int = typer.Option(
            None, help="linear_memory: seeds per d (>= 2; default 40, the listwise 20 and the "
                       "optimal memory 10)."),
        lp_time_limit: float = typer.Option(
            None, help="linear_memory: seconds one optimal-memory LP may take (default 120); "
                       "a hit is reported as 'not finished at d = ...' and exits 2."),
        seed: int = typer.Option(0, help="Seed of every random draw in the checks."),
        out: Path = typer.Option(None, help="Write the evidence as JSON (refuses to overwrite)."),
        force: bool = typer.Option(False, help="Overwrite --out if it exists."),
    ) -> None:
        """Check Cor. 3.1, Prop. 3.2/3.3/C.1 and App. A (and, when named, the linear-memory
        thresholds); exit 1 if any check fails."""
        from rich.markup import escape
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.table import Table

        from recall_lab.runs import refuse_overwrite

        options = {"dims": dims, "n_max": n_max, "seeds": seeds, "lp_time_limit": lp_time_limit}
        chosen = prepare(names, scale, **options)
        if out is not None:
            refuse_overwrite(out, force)
        with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as bar:
            task = bar.add_task(f"proving ({scale})", total=len(chosen))
            results = run(chosen, scale=scale, seed=seed,
                          on_done=lambda ev: bar.advance(task), **options)
        table = Table(title=f"recall-lab prove (scale={scale}, seed={seed})")
        findings = any(ev.finding for ev in results)
        cols = ("statement", "checked", "measured", "check", *(("finding",) if findings else ()))
        for col in cols:
            table.add_column(col, overflow="fold")
        for ev in results:
            colour = "green" if ev.passed else "red"
            row = [escape(ev.statement), escape(ev.checked), escape(ev.measured),
                   f"[{colour}]{ev.verdict_text}[/] ({ev.seconds:.1f}s)"]
            table.add_row(*row, *((escape(ev.finding or "-"),) if findings else ()))
        console.print(table)
        if findings:
            console.print("check: PASS/FAIL of the check itself; where it says self-test, the "
                          "theory's verdict is the finding.")
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            payload = {"scale": scale, "seed": seed,
                       "results": [ev.to_json() for ev in results]}
            out.write_text(json.dumps(payload, indent=2))
            console.print(f"wrote {out}")
        unfinished = [msg for ev in results for msg in ev.incomplete]
        if unfinished:  # reported above and in --out; the run is not a complete measurement
            fail("; ".join(unfinished))
        return int(any(not ev.passed for ev in results))  # exit 1 when a check fails
