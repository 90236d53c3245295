"""CLI: `recall-lab extrapolate`: trained runs at k times their length, zero-shot DeciMamba."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer
from rich.markup import escape

from recall_lab.commands.shell import GuardedApp, checkpoint_option, console
from recall_lab.generators.errors import RecallLabError


def register(app: GuardedApp) -> None:
    @app.command()
    def extrapolate(
        runs: list[Path] = typer.Argument(..., help="Run directories trained on a filler task."),
        factors: str = typer.Option("1,2,4,8,16,32", "--factors", help="Length factors: the "
                                    "same tables with more filler."),
        decimate: list[str] = typer.Option(None, "--decimate", help="A zero-shot DeciMamba "
                                           "variant, key=value pairs (repeatable), e.g. "
                                           "L_base=63 or L_base=63,score=random; 'off' "
                                           "evaluates a mamba+deci run without decimation."),
        n: int = typer.Option(128, "--n", help="Samples in the test set drawn at each length "
                              "(seeded by --data-seed)."),
        data_seed: int = typer.Option(0, "--data-seed", help="Seed of the test samples."),
        batch_size: int = typer.Option(32, "--batch-size", help="Evaluation batch size."),
        md_samples: int = typer.Option(0, "--md-samples", help="Also measure the Mamba Mean "
                                       "Distance (Eq. 8) of every layer on this many samples."),
        checkpoint: str = checkpoint_option(),
        decode: bool = typer.Option(False, "--decode", help="Also evaluate every length by "
                                    "recurrent decoding (prefill the context, step the inquiry) "
                                    "and time both ways."),
        out: Path = typer.Option(..., "--out", help="Folder for extrapolation.json/.md, "
                                 "acc.png (md.png)."),
        force: bool = typer.Option(False, help="Overwrite existing results in --out."),
    ) -> None:
        """Evaluate runs at 1x..32x their training length (DeciMamba Fig. 1 shape)."""
        from recall_lab.experiments.extrapolate import (
            extrapolation_rows,
            markdown,
            parse_factors,
            write_outputs,
        )
        from recall_lab.models.decimation import parse_decimate
        from recall_lab.runs import refuse_overwrite

        refuse_overwrite(out / "extrapolation.json", force)
        if n < 1:
            raise RecallLabError(f"--n must be >= 1, got {n}")
        variants = [(d, "off" if d == "off" else parse_decimate(d)) for d in decimate or []]
        rows = extrapolation_rows(runs, parse_factors(factors), variants, n=n,
                                  data_seed=data_seed, batch_size=batch_size,
                                  md_samples=md_samples, which=checkpoint, decode=decode,
                                  progress=lambda s: console.print(s, highlight=False))
        command = "recall-lab " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        files = write_outputs(rows, out, command)
        console.print(markdown_table(markdown(rows)))
        console.print("written: " + ", ".join(str(f) for f in files))


def markdown_table(md: str):
    """extrapolation.md's table as a rich table for the terminal (its cells fold to the width
    at hand when piped, where the Markdown's long rows did not fit 100 columns)."""
    from rich.table import Table

    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in md.splitlines()
            if line.strip() and not line.startswith("|---")]
    table = Table(title="accuracy by evaluation length")
    for i, col in enumerate(rows[0]):
        table.add_column(escape(col), justify="left" if i == 0 else "right")
    for row in rows[1:]:
        table.add_row(*map(escape, row))
    return table
