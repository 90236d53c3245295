"""`recall-lab mean-distance` and `recall-lab attention-map`: hidden attention and Mamba Mean
Distance (DeciMamba Sec. 3) of a trained run."""

from __future__ import annotations

from pathlib import Path

import typer

from recall_lab.commands.shell import GuardedApp, checkpoint_option, console
from recall_lab.config import int_list


def _parse_lengths(text: str | None) -> list[int] | None:
    return None if text is None else int_list(text, "--lengths", 2)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4g}"
    return str(v)


def register(app: GuardedApp) -> None:
    @app.command("mean-distance")
    def mean_distance_cmd(
        run: Path = typer.Argument(..., help="Run directory (config.json + model.safetensors)."),
        lengths: str = typer.Option(
            None, help="Evaluation lengths, e.g. 128,256,512 (default: 1/2..8x training length)."
        ),
        task: str = typer.Option(
            None, help="Task preset or TOML for the inputs (default: the run's task)."
        ),
        samples: int = typer.Option(4, help="Sequences measured per length, drawn from the "
                                    "task's generator (results are their means)."),
        seed: int = typer.Option(0, help="Seed of the evaluation inputs."),
        checkpoint: str = checkpoint_option(),
        all_tokens: bool = typer.Option(
            True, "--all-tokens/--last-only",
            help="Also average Eq. 6 over every token (O(L^2) work) or only the last (Eq. 8).",
        ),
        out: Path = typer.Option(None, help="Output folder (default RUN/analysis)."),
        force: bool = typer.Option(False, help="Overwrite existing outputs."),
    ) -> None:
        """Mamba Mean Distance per layer (and the sparse branch's, for hybrids) vs length."""
        from rich.progress import Progress
        from rich.table import Table

        from recall_lab.analysis.runs import run_mean_distance

        lens = _parse_lengths(lengths)
        with Progress(console=console, transient=True) as bar:
            n = len(lens) if lens else 5
            t = bar.add_task("measuring", total=n)
            res = run_mean_distance(
                run, lengths=lens, task=task, samples=samples, seed=seed, checkpoint=checkpoint,
                all_tokens=all_tokens, out=out, force=force,
                progress=lambda _length: bar.advance(t),
            )
        table = Table(title=f"mean distance: {res['model']} (training length "
                            f"{res['train_length']})")
        cols = {"length": "L", "layer": "layer", "memory": "memory", "md_last": "MD last",
                "md_last_norm": "/L"}
        if all_tokens:
            cols.update({"md_all": "MD all", "md_all_norm": "/(i+1)"})
        cols["delta_sum_last"] = "sum Delta"
        for header in cols.values():
            table.add_column(header, justify="right")
        for r in res["rows"]:
            table.add_row(*(_fmt(r.get(c, "")) for c in cols))
        console.print(table)
        console.print("MD last: Eq. 8 (last token); MD all: Eq. 6 averaged over tokens, /(i+1) "
                      "normalised per token; sum Delta: sum_{k=2..L} Delta_k (Eq. 9); channel "
                      "and batch means")
        console.print(f"written: {res['json']} and {res['png']}", markup=False)

    @app.command("attention-map")
    def attention_map_cmd(
        run: Path = typer.Argument(..., help="Run directory (config.json + model.safetensors)."),
        layer: int = typer.Option(..., help="SSM layer number (0-based)."),
        index: int = typer.Option(0, help="Sample number among the evaluation inputs."),
        length: int = typer.Option(None, help="Sequence length (default: training length)."),
        task: str = typer.Option(None, help="Task preset or TOML (default: the run's task)."),
        channel: str = typer.Option(
            "mean", help="mean (signed channel mean), abs (mean |alpha|) or a channel number."
        ),
        memory: str = typer.Option("ssm", help="ssm, or attention (a hybrid's sparse branch)."),
        threshold: float = typer.Option(1e-3, help="Lowest value shown, relative to the max."),
        seed: int = typer.Option(0, help="Seed of the evaluation inputs."),
        checkpoint: str = checkpoint_option(),
        out: Path = typer.Option(None, help="PNG path (default RUN/analysis/attention_map_*)."),
        force: bool = typer.Option(False, help="Overwrite an existing PNG."),
    ) -> None:
        """PNG of one layer's hidden attention on a log scale (DeciMamba Fig. 2-3 style)."""
        from recall_lab.analysis.runs import run_attention_map

        res = run_attention_map(
            run, layer=layer, index=index, length=length, task=task, seed=seed,
            checkpoint=checkpoint, channel=channel, memory=memory, threshold=threshold,
            out=out, force=force,
        )
        console.print(f"written: {res['png']} (last-row mean distance "
                      f"{res['md_last']:.2f} of {res['length']} tokens)", markup=False)
