"""`recall-lab bench`: side-by-side benchmarks, ratios in one run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import typer

from generators.errors import RecallLabError
from recall_lab.bench import BENCHES, run_bench


def register(app: typer.Typer) -> None:
    @app.command()
    def bench(
        which: list[str] = typer.Argument(
            None, help=f"Benchmarks to run (default: all available): {', '.join(BENCHES)}."
        ),
        quick: bool = typer.Option(False, help="Smaller sizes, for a fast look."),
        out: Path = typer.Option(
            None, help="Write the results as JSON to this file (refuses to overwrite)."
        ),
        force: bool = typer.Option(False, help="Overwrite --out if it exists."),
    ) -> None:
        """Benchmark fast paths against their baselines in the same run and print ratios."""
        from recall_lab.cli import console, guarded

        @guarded
        def _run() -> None:
            from recall_lab.commands.progress import Running

            names = list(which) if which else [
                b for b in BENCHES
                if importlib.util.find_spec(f"recall_lab.bench.{b}") is not None
            ]
            unknown = [n for n in names if n not in BENCHES]
            if unknown:
                raise RecallLabError(
                    f"unknown benchmark {unknown[0]!r}; choose from {', '.join(BENCHES)}"
                )
            if out is not None and out.exists() and not force:
                raise RecallLabError(f"{out} exists; pass --force to overwrite it")
            results = {}
            for name in names:
                if importlib.util.find_spec(f"recall_lab.bench.{name}") is None:
                    raise RecallLabError(f"benchmark {name!r} is not implemented yet")
                with Running(console, f"bench {name}"):  # plain lines when piped
                    results[name] = run_bench(name, console, quick)
            if out is not None:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(results, indent=2))
                console.print(f"results written to {out}")

        _run()
