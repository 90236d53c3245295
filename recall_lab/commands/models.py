"""CLI of the models/training area: `train`, `eval`, `demo`, `models`, `info`.

Bodies are thin: they build a `RunConfig` (`recall_lab.runs`), call `recall_lab.train` /
`recall_lab.evaluate`, and print rich progress and tables. Library imports happen inside the
command bodies (the CLI starts without torch).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from recall_lab.commands.experiments import print_warnings, report_table
from recall_lab.commands.shell import GuardedApp, checkpoint_option, console
from recall_lab.config import resolve_task
from recall_lab.generators.errors import RecallLabError
from recall_lab.progress import SweepProgress, TrainProgress
from recall_lab.tracking import parse_log

# `recall-lab models`' columns (listing_row's keys) and their headers: one table that fits 100
# columns; the backbone, d_model and k, which most rows share or their names carry, are said
# under it (`listing_legend`)
LISTING = {"name": "name", "branch": "branch", "params": "params",
           "state per layer": "state per layer", "conv, all layers": "conv, all layers",
           "decode state": "decode state, all layers"}


def _usual(rows: list[dict], key: str) -> str:
    """`key`'s most common value over the rows that have one ("-": none), and the rows that
    differ from it by name: "64 (mamba-2x 128, mamba2-2x 128)"."""
    have = [r for r in rows if r[key] != "-"]
    values = [r[key] for r in have]
    usual = max(dict.fromkeys(values), key=values.count, default="-")
    other = [f"{r['name']} {r[key]}" for r in have if r[key] != usual]
    return usual + (f" ({', '.join(other)})" if other else "")


def listing_legend(rows: list[dict]) -> str:
    """What the listing says under its table: each model's backbone, d_model and k."""
    backbones = [b for b in dict.fromkeys(r["backbone"] for r in rows) if b != "mixer"]
    mixers = [r["name"] for r in rows if r["backbone"] == "mixer"]
    return ("backbone: the first part of the name (" + ", ".join(backbones) + ")"
            + (f"; {', '.join(mixers)}: one mixer in every layer, x + mixer(norm(x))"
               if mixers else "")
            + f". d_model {_usual(rows, 'd_model')}. k (the keys a query's attention branch "
            f"or window reads; Attamba's chunk P; DeciMamba's L_base), where a model has one: "
            f"{_usual(rows, 'k')}")


def register(app: GuardedApp) -> None:
    @app.command()
    def train(
        model: str = typer.Option(None, "--model", "-m", help="Model name, e.g. mamba+hax "
                                  "(see `recall-lab models`)."),
        task: str = typer.Option(None, "--task", "-t", help="Task preset (mini-mqjr, ...), "
                                 "built-in task (zoology-mqar, selective-copy, ...: see "
                                 "`recall-lab presets`) or a TOML file with a \\[task] table "
                                 "(a generator by import path too)."),
        steps: int = typer.Option(None, help="Optimizer steps (default 2000)."),
        lr: float = typer.Option(None, help="Peak learning rate (default 3e-3)."),
        warmup: int = typer.Option(None, help="Steps of linear learning-rate warm-up "
                                   "(default 500; a run no longer than its warm-up never "
                                   "reaches --lr)."),
        batch_size: int = typer.Option(None, "--batch-size", help="Batch size (default 32)."),
        k: int = typer.Option(None, help="Sparse-attention key budget per query (default 64)."),
        d_model: int = typer.Option(None, "--d-model", help="Hidden size (default 64)."),
        seed: int = typer.Option(None, help="Model-init / hashing seed (default 0)."),
        data_seed: int = typer.Option(None, "--data-seed", help="Data stream / held-out seed."),
        eval_every: int = typer.Option(None, "--eval-every", help="Evaluate and checkpoint "
                                       "every N steps (default 200)."),
        eval_samples: int = typer.Option(None, "--eval-samples", help="Samples in the "
                                         "validation set, evaluated every --eval-every steps "
                                         "(default 512; the test set's size is "
                                         "train.test_samples in --config)."),
        stop_at: float = typer.Option(None, "--stop-at", help="Stop once the held-out accuracy "
                                      "reaches this (e.g. 0.99, as zoology)."),
        patience: int = typer.Option(None, help="Stop after this many evaluations without a "
                                     "better checkpoint."),
        data: Path = typer.Option(None, "--data", help="Dataset folder from `recall-lab "
                                  "generate`, or another tool's Parquet file or folder or HF "
                                  "`datasets` folder with input_ids and labels: train on its "
                                  "train split, evaluate on its valid/test splits (default: "
                                  "stream from the generator)."),
        device: str = typer.Option(None, help="auto, cpu or cuda[:N] (default auto)."),
        config: Path = typer.Option(None, "--config", "-c", help="TOML run config "
                                    "(\\[model], \\[train], \\[task]); flags override it."),
        out: Path = typer.Option(None, help="Run directory (default runs/MODEL-TASK-sSEED)."),
        force: bool = typer.Option(False, help="Overwrite an existing run directory."),
        resume: bool = typer.Option(False, help="Continue the run in --out from its last "
                                    "checkpoint."),
        threads: int = typer.Option(None, help="torch CPU threads (default: the cores idle "
                                    "when it starts, at least 1; OMP_NUM_THREADS where set)."),
        log: str = typer.Option(None, help="Also log to tensorboard and/or wandb (offline), "
                                "comma-separated; needs the \\[tracking] extra."),
        decimate: str = typer.Option(None, "--decimate", help="DeciMamba settings for "
                                     "mamba+deci: key=value pairs, e.g. L_base=24,layers=-1 "
                                     "(beta, min_len, score, top_k)."),
        mixer: str = typer.Option(None, "--mixer", help="A sequence mixer by import path "
                                  "(pkg.module:Class) or name: every layer is x + "
                                  "mixer(norm(x)); --model then names the run (default: the "
                                  "class name). See docs/mixers.md."),
        mixer_kwargs: str = typer.Option(None, "--mixer-kwargs", help="The mixer's keyword "
                                         "arguments as a JSON object, e.g. '{\"heads\": 2}'."),
    ) -> None:
        """Train one model on one recall task into a run directory (metrics, checkpoints)."""
        from recall_lab import api
        from recall_lab.commands.training import print_summary, set_threads
        from recall_lab.runs import (
            refuse_overwrite,
            resume_config,
            run_config_from_flags,
            run_dir_name,
        )

        how = set_threads(threads)
        kinds = parse_log(log)
        over = {"steps": steps, "lr": lr, "warmup": warmup, "batch_size": batch_size,
                "seed": seed,
                "data_seed": data_seed, "eval_every": eval_every,
                "eval_samples": eval_samples, "device": device, "stop_at": stop_at,
                "patience": patience,
                "data": str(data) if data is not None else None}
        if resume:
            if force:
                raise RecallLabError("--resume continues a run and --force replaces it: give "
                                     "one of them")
            given = {"--" + k.replace("_", "-"): v for k, v in over.items() if k != "steps"}
            given.update({"--task": task, "--config": config, "--k": k, "--d-model": d_model,
                          "--decimate": decimate, "--mixer": mixer,
                          "--mixer-kwargs": mixer_kwargs})
            cfg, run_dir, start = resume_config(out, model, steps, given)
        else:
            cfg = run_config_from_flags(model, task, config, k, d_model, over, decimate,
                                        mixer=mixer, mixer_kwargs=mixer_kwargs)
            run_dir = out or run_dir_name(cfg)
            start = 0
            # the CLI's words for an existing folder (the API's say force=True / resume=True)
            refuse_overwrite(run_dir, force, folder=True, resume=True)
        console.print(f"[bold]{escape(cfg.model.name)}[/] on "
                      f"{escape(cfg.task_name or cfg.task.describe())}"
                      f" (max length {cfg.task.max_len}) -> {escape(str(run_dir))}")
        console.print(how, markup=False, highlight=False)
        with TrainProgress(console, cfg.model.name, cfg.train.steps, start) as bar:
            run = api.train(cfg, out=run_dir, force=force, resume=resume, progress=bar,
                            log=kinds)
        print_summary(console, run.summary, cfg)
        console.print(f"run written to {run_dir}", markup=False)

    @app.command("eval")
    def eval_(
        run: Path = typer.Argument(..., help="Run directory written by `recall-lab train`."),
        task: str = typer.Option(None, "--task", "-t", help="Task preset or TOML (default: the "
                                 "run's own task); other lengths/table sizes test extrapolation."),
        n: int = typer.Option(512, "--n", help="Samples in the test set this command draws "
                              "(seeded by --data-seed)."),
        data_seed: int = typer.Option(0, "--data-seed", help="Seed of the test samples."),
        checkpoint: str = checkpoint_option(),
        batch_size: int = typer.Option(64, "--batch-size", help="Evaluation batch size."),
        device: str = typer.Option("auto", help="auto, cpu or cuda[:N]."),
        length_factor: int = typer.Option(1, "--length-factor", help="Evaluate the same tables "
                                          "at this many times the task's length, by filler."),
        decimate: str = typer.Option(None, "--decimate", help="DeciMamba zero-shot on a mamba "
                                     "run: key=value pairs, e.g. L_base=48 or "
                                     "L_base=48,layers=-1,score=mean (beta, min_len, top_k, "
                                     "layers=auto). 'off' disables a run's own decimation."),
        attention: str = typer.Option(None, "--attention", help="Evaluate with another "
                                      "attention than the run's: full, sw, se, se-paper, "
                                      "se-nomem, se-random (SE-Attn (Expansion Span) "
                                      "evaluates SE-Attn fine-tunes with full)."),
        decode: bool = typer.Option(False, "--decode", help="Also evaluate by recurrent "
                                    "decoding (prefill each information component, then step "
                                    "through the inquiry) and say whether its accuracy equals "
                                    "the parallel evaluation's."),
        out: Path = typer.Option(None, help="JSON result file (default RUN/eval-TASK-nN-sS-"
                                 "CHECKPOINT.json)."),
        force: bool = typer.Option(False, help="Overwrite the result file."),
    ) -> None:
        """Evaluate a trained run on a task (per-sample accuracy, exact match, loss)."""
        from rich.table import Table

        from recall_lab.checkpoint import write_json
        from recall_lab.evaluate import evaluate_run
        from recall_lab.runs import eval_target, refuse_overwrite

        cfg, spec, label, deci = eval_target(run, task, n, batch_size, length_factor, decimate,
                                             attention, decode)
        dest = out or run / f"eval-{label}-n{n}-s{data_seed}-{checkpoint}.json"
        refuse_overwrite(dest, force)
        res = evaluate_run(run, spec, n, data_seed, checkpoint, batch_size, device, deci,
                           attention, decode)
        table = Table(title=escape(f"{cfg.model.name} on {label} ({spec.describe()})"))
        for col in ("max length", "samples", "acc", "exact", "loss"):
            table.add_column(col, justify="right")
        rows = [("", res)] + ([("decode", res["decode"])] if decode else [])
        if decode:
            table.add_column("forward", justify="left")
        for how, r in rows:
            table.add_row(str(res["max_len"]), str(r["n"]), f"{r['acc']:.4f}",
                          f"{r['exact']:.4f}", f"{r['loss']:.4f}",
                          *([how or "parallel"] if decode else []))
        console.print(table)
        if res.get("slices"):  # a task with slices (zoology's pairs): accuracy per slice
            per = Table(title="per slice (the task's label per row, e.g. zoology's pairs)")
            for col in ("slice", "samples", "acc", "exact"):
                per.add_column(col, justify="right")
            for name, r in sorted(res["slices"].items(), key=lambda kv: (len(kv[0]), kv[0])):
                per.add_row(name, str(r["n"]), f"{r['acc']:.4f}", f"{r['exact']:.4f}")
            console.print(per)
        if decode:
            same = res["decode"]["acc_equal"]
            console.print(f"decode accuracy {'equals' if same else 'DIFFERS FROM'} the parallel "
                          "evaluation's", highlight=False)
        write_json(dest, {**res, "task_name": label})
        console.print(f"written to {dest}", markup=False)

    @app.command()
    def models(
        task: str = typer.Option("paper-mqjr", "--task", "-t", help="Task whose vocabulary "
                                 "sizes the embedding."),
    ) -> None:
        """List the named models (the joint-recall paper's rows, the other mechanisms' rows and
        the mixers of the `recall_lab.mixers` entry points) in one table: their parameter
        counts, their recurrent state per layer (in numbers; each layer's count where the
        layers differ), the convolution caches and the decode state of all layers (constant
        bytes per sequence, or how they grow with the length L). A plug-in that cannot be built
        gets one line under the table saying why."""
        from rich.table import Table

        from recall_lab.models.registry import (
            branch_legend,
            listed_models,
            listing_row,
            unlisted_plugin,
        )

        spec, name = resolve_task(task)
        table = Table(title=escape(f"models (vocabulary of {name or task}: "
                                   f"{spec.vocab().size})"))
        rows, unlisted = [], []
        for mname in listed_models():
            try:
                rows.append(listing_row(mname, spec.vocab().size))
            except Exception as exc:  # a plug-in's failure stays on its own line
                unlisted.append((mname, *unlisted_plugin(mname, exc)))
        for col, head in LISTING.items():
            table.add_column(head, justify="left" if col in ("name", "branch") else "right")
        for row in rows:
            # "const 19.0 KB" is "19.0 KB" under its header (the legend says constant)
            table.add_row(*(escape(row[col].removeprefix("const ")) for col in LISTING))
        console.print(table)
        for line in (branch_legend({r["branch"] for r in rows}), listing_legend(rows),
                     "state per layer: the recurrent state one layer carries for one sequence, "
                     "in numbers (models/state.py: '(declared)' where a mixer's own state_size "
                     "stands in; a count that grows as log L at its length); conv: the short "
                     "convolutions' caches, kernel - 1 columns per channel; decode state: the "
                     "bytes a sequence's decoding holds when they do not depend on the length, "
                     "else how they grow with it"):
            console.print(line, highlight=False, markup=False)
        for mname, kind, why in unlisted:
            console.print(f"{mname}: {'needs ' if kind == 'needs' else 'not loaded: '}{why}",
                          highlight=False, markup=False)

    @app.command()
    def info() -> None:
        """Versions, device and the compute backends that will be used."""
        from rich.table import Table

        from recall_lab.environment import environment_rows

        table = Table("item", "value", title="recall-lab environment")
        for k, v in environment_rows():
            table.add_row(k, v)
        console.print(table)

    @app.command()
    def demo(
        out: Path = typer.Option(None, help="Output folder (default runs/demo-TIMESTAMP, a "
                                 "fresh folder each time)."),
        steps: int = typer.Option(None, help="Training steps per run (default: the demo's "
                                  "500)."),
        force: bool = typer.Option(False, help="Overwrite --out if it exists."),
        workers: int = typer.Option(2, help="Runs in parallel (one torch thread each)."),
    ) -> None:
        """A miniature of the capacity experiment: MQAR accuracy vs table size (2, 4, 8 pairs)
        for attention and Mamba with state 1; prints the report's warnings, its table and the
        sentence it supports, and writes the report with its figures (5 for the demo's grid:
        bars, accuracy and seeds solved against the table size, validation curves, survival)."""
        from recall_lab.commands.training import set_threads
        from recall_lab.experiments.demo import DEMO_EXPERIMENT as exp
        from recall_lab.experiments.demo import run_demo

        set_threads(None)
        console.print(f"demo: {', '.join(exp['grid']['model.name'])} on MQAR with 2 / 4 / 8 "
                      f"pairs, {steps or exp['train']['steps']} steps each, {workers} "
                      f"worker{'s' if workers != 1 else ''}",
                      highlight=False)
        monitor = SweepProgress(console, "demo")
        try:
            res = run_demo(out, steps, force, workers=workers, monitor=monitor)
        finally:
            monitor.close()
        from recall_lab.experiments.report import terminal_warnings

        print_warnings(terminal_warnings(res["report"]))
        console.print(report_table(res["report"]))
        console.print(res["sentence"], highlight=False)
        pngs = res["report"]["figures"]
        console.print(f"wall time {res['wall_s']:.0f} s; report {res['out'] / 'report.md'}; "
                      f"{len(pngs)} figure{'s' if len(pngs) != 1 else ''}: "
                      f"{', '.join(str(p) for p in pngs) or '-'}", highlight=False,
                      markup=False)
