"""`recall-lab generate` and `recall-lab show`: dataset files and readable samples."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.markup import escape

from recall_lab.commands.shell import GuardedApp, console
from recall_lab.config import resolve_task
from recall_lab.generators import PRESETS, TaskSpec, get_preset_entry
from recall_lab.generators import (
    generate as generate_samples,  # `generate` is also the command below
)
from recall_lab.generators.dataset import write_dataset
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.joint_recall import check_samples_fit
from recall_lab.generators.render import render_sample, render_scored
from recall_lab.generators.tasks import BUILTIN, GeneratorTask
from recall_lab.generators.tasks import rows as task_rows
from recall_lab.progress import CountProgress


def parse_levels(text: str) -> tuple[tuple[int, int], ...]:
    """'5-16,5-16' or '4,4' -> ((5, 16), (5, 16)) / ((4, 4), (4, 4))."""
    levels = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
            else:
                lo = hi = int(part)
        except ValueError:
            raise RecallLabError(
                f"cannot read level size {part!r}: use N or LO-HI, comma-separated per level"
            ) from None
        levels.append((lo, hi))
    return tuple(levels)


def parse_ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise RecallLabError(f"cannot read {what} {text!r}: comma-separated integers") from None


def register(app: GuardedApp) -> None:
    @app.command()
    def generate(
        preset: str = typer.Argument(None, help="Named preset (see `recall-lab presets`), a "
                                     "built-in task (zoology-mqar, selective-copy, mad-recall, "
                                     "mad-noisy-recall) or a TOML task file (as `train --task` "
                                     "takes); it fixes the task: --levels, --values, --pools, "
                                     "--seq-len are refused with it, --train/--valid/--test "
                                     "override its counts."),
        out: Path = typer.Option(..., "--out", help="Output folder (must be new or empty)."),
        levels: str = typer.Option(
            None, help="Level sizes instead of a preset, outermost first: '5-16,5-16' or '4,4'."
        ),
        values: int = typer.Option(None, help="Number of value tokens |V| (with --levels)."),
        pools: str = typer.Option(None, help="Token ids per level, e.g. '16,16' (default: max)."),
        seq_len: int = typer.Option(None, help="Pad every sample to this length."),
        train: int = typer.Option(None, help="Samples in the train split (default: "
                                  "the preset's; 10,000 without one)."),
        valid: int = typer.Option(None, help="Samples in the validation split (default: "
                                  "the preset's; 1,000 without one)."),
        test: int = typer.Option(None, help="Samples in the test split (default: "
                                  "the preset's; 1,000 without one)."),
        seed: int = typer.Option(0, help="Seed; the same seed gives the same bytes."),
        workers: int = typer.Option(2, help="Worker processes (the bytes do not depend on it)."),
        shard_size: int = typer.Option(
            65536, help="Rows per shard, a multiple of 8192 (the bytes do not depend on it)."
        ),
        force: bool = typer.Option(False, help="Replace an existing dataset in --out."),
    ) -> None:
        """Generate a recall dataset as Parquet shards plus manifest.json."""
        from rich.table import Table

        if (preset is None) == (levels is None):
            raise RecallLabError("give either a PRESET or --levels (with --values)")
        task_flags = [f for f, v in (("--values", values), ("--pools", pools),
                                     ("--seq-len", seq_len)) if v is not None]
        if preset is not None and task_flags:  # the preset (or TOML task) fixes the task
            raise RecallLabError(f"{task_flags[0]} describes a task given by --levels; PRESET "
                                 f"{preset!r} fixes the task (only --train/--valid/--test "
                                 "override its counts)")
        name = preset
        if preset in BUILTIN or (preset is not None and (preset.endswith(".toml") or
                                                         Path(preset).is_file())):
            spec, name = resolve_task(preset)  # the forms `train --task` takes
            entry = get_preset_entry(name) if name is not None else None
            defaults = ({"train": entry.train, "valid": entry.valid, "test": entry.test}
                        if entry is not None else {"train": 10_000, "valid": 1_000,
                                                   "test": 1_000})
        elif preset is not None:
            entry = get_preset_entry(preset)
            spec = entry.spec
            defaults = {"train": entry.train, "valid": entry.valid, "test": entry.test}
        else:
            if values is None:
                raise RecallLabError("--levels needs --values")
            spec = TaskSpec(levels=parse_levels(levels), values=values,
                            pools=parse_ints(pools, "--pools"), seq_len=seq_len)
            defaults = {"train": 10_000, "valid": 1_000, "test": 1_000}
        counts = {
            "train": defaults["train"] if train is None else train,
            "valid": defaults["valid"] if valid is None else valid,
            "test": defaults["test"] if test is None else test,
        }
        total = sum(max(c, 0) for c in counts.values())
        start = time.perf_counter()
        with CountProgress(console, "generating samples", total) as progress:
            manifest = write_dataset(
                spec, out, counts, seed, preset=name, workers=workers,
                shard_size=shard_size, force=force,
                on_shard=lambda r: progress.advance(r["rows"]),
            )
        elapsed = time.perf_counter() - start
        table = Table(title=escape(f"{name or 'custom'}: {spec.describe()}"))
        for col in ("split", "samples", "shards", "tokens", "mean length"):
            table.add_column(col, justify="right" if col != "split" else "left")
        for split, shards in manifest["splits"].items():
            rows = sum(s["rows"] for s in shards)
            tokens = sum(s["tokens"] for s in shards)
            table.add_row(split, f"{rows:,}", str(len(shards)), f"{tokens:,}",
                          f"{tokens / rows:.1f}" if rows else "-")
        console.print(table)
        if manifest["disjoint"]["redrawn_rows"] == 0:
            dup = "no duplicates"
        else:
            dup = f"{manifest['disjoint']['redrawn_rows']} duplicate rows redrawn"
        console.print(
            f"vocabulary {spec.vocab().size} ids, padded length "
            f"{spec.seq_len or 'per batch'}, splits disjoint ({dup}); "
            f"{total:,} samples in {elapsed:.1f} s -> {out}", markup=False
        )

    @app.command()
    def show(
        source: str = typer.Argument(..., help="A dataset folder (or another tool's Parquet / "
                                     "HF datasets data), a preset name, a built-in task or a "
                                     "TOML task file (as `train --task` takes)."),
        index: int = typer.Option(0, help="Which sample."),
        split: str = typer.Option("test", help="Split to read from a dataset folder."),
        seed: int = typer.Option(0, help="Seed when SOURCE is a preset or a task."),
        count: int = typer.Option(1, help="How many samples from --index on."),
    ) -> None:
        """Decode samples to readable text (joint recall in the style of the paper's Figure 2;
        any other task as ids with each scored position marked id[->target])."""
        import numpy as np
        from rich.table import Table

        if index < 0 or count < 1:
            raise RecallLabError("--index must be >= 0 and --count >= 1")
        targets = slices = None
        if Path(source).is_dir() or source.endswith(".parquet"):
            from recall_lab.data import open_reader

            reader = open_reader(source)  # a lab dataset or another tool's data
            spec = reader.spec
            total = reader.count(split)
            if index >= total:
                raise RecallLabError(f"{split} has {total} samples; index {index} is past it")
            picked = np.arange(index, min(index + count, total))
            rows, targets = reader.rows(split, picked)
            rows, targets = list(rows), list(targets)
            got = getattr(reader, "slices", lambda *_: None)(split)
            slices = None if got is None else list(got[picked])
            title = f"{source} [{split}]"
        elif source in PRESETS or source in BUILTIN or source.endswith(".toml") \
                or Path(source).is_file():
            # the task forms `train --task` accepts: a preset, a built-in task, a TOML task file
            spec, _ = resolve_task(source)
            if isinstance(spec, GeneratorTask):
                drawn = task_rows(spec, index + count, seed)
                rows = list(drawn.inputs[index:])
                targets = list(drawn.targets[index:])
                if drawn.slices is not None:
                    slices = list(drawn.slices[index:])
            else:
                check_samples_fit(spec, index + count, "--index + --count")
                rows = list(generate_samples(spec, index + count, seed).inputs[index:])
            title = f"{source} (seed {seed})"
        else:
            raise RecallLabError(f"{source!r} is neither a dataset folder nor a preset "
                                 f"({', '.join(PRESETS)}) nor a built-in task "
                                 f"({', '.join(BUILTIN)}) nor a TOML task file")
        if isinstance(spec, GeneratorTask):  # any task: ids, scored positions marked
            for i, row in enumerate(rows):
                t = Table(title=escape(f"{title} sample {index + i}: {spec.describe()}"),
                          show_header=False, expand=False)
                t.add_column(style="bold")
                t.add_column(overflow="fold")
                marked, scored = render_scored(row, targets[i])
                t.add_row("input (id[->target])", marked)
                t.add_row("targets (position:id)", scored)
                if slices is not None:
                    t.add_row("slice", str(int(slices[i])))
                console.print(t)
            return
        vocab = spec.vocab()
        for i, row in enumerate(rows):
            r = render_sample(row, vocab)
            t = Table(title=escape(f"{title} sample {index + i}: {spec.describe()}"),
                      show_header=False, expand=False)
            t.add_column(style="bold")
            t.add_column(overflow="fold")
            t.add_row("information", r.information)
            t.add_row("inquiry", r.inquiry)
            t.add_row("output", r.output)
            console.print(t)

    @app.command()
    def presets() -> None:
        """List the named task presets."""
        from rich.table import Table

        t = Table(title="task presets")
        for col in ("name", "task", "max length", "train/valid/test", "about"):
            t.add_column(col, no_wrap=col in ("name", "train/valid/test"))
        for name, p in PRESETS.items():
            t.add_row(name, p.spec.describe(), str(p.spec.seq_len or p.spec.max_len),
                      f"{p.train:,}/{p.valid:,}/{p.test:,}", p.about)
        console.print(t)
        tasks = Table(title=escape("built-in tasks (--task NAME, or [task] generator = NAME "
                                   "with [task.kwargs]; docs/tasks.md)"))
        for col in ("name", "function", "vocabulary", "max length (defaults)"):
            tasks.add_column(col, no_wrap=col in ("name", "function"))
        for name, path in BUILTIN.items():
            if name in ("dataset", "joint-recall"):  # data files' task; the presets above
                continue
            task = GeneratorTask(generator=name)
            tasks.add_row(name, path, str(task.vocab().size), str(task.max_len))
        console.print(tasks)
