"""CLI: `recall-lab finetune RUN` (Expansion Span Sec. 3.4: SE-Attn + HyLoRA context extension).

Thin: builds the fine-tune `RunConfig` (`recall_lab.finetune.finetune_config`) and runs the one
trainer (`recall_lab.train.train_run`); the new run records its base run in `train.finetune`.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from recall_lab.commands.shell import GuardedApp, console
from recall_lab.config import resolve_task
from recall_lab.progress import TrainProgress


def register(app: GuardedApp) -> None:
    @app.command()
    def finetune(
        run: Path = typer.Argument(..., help="Base run directory (written by `recall-lab "
                                   "train`) whose weights are the starting point."),
        task: str = typer.Option(None, "--task", "-t", help="Longer task: preset or TOML "
                                 "(default: the base run's task)."),
        length_factor: int = typer.Option(1, "--length-factor", help="Fine-tune on the task "
                                          "at this many times its length (same tables, filler)."),
        attention: str = typer.Option("se", "--attention", help="keep, full, sw, se (SE-Attn, "
                                      "causal), se-paper (the paper's chunk scoring, not "
                                      "causal), se-nomem, se-random."),
        adapter: str = typer.Option("hylora", "--adapter", help="lora (attention projections), "
                                    "lora+ (LongLoRA: + embedding, norms), hylora (+ SSM "
                                    "convolutions), full."),
        rank: int = typer.Option(8, "--rank", help="LoRA rank r."),
        alpha: float = typer.Option(None, "--alpha", help="LoRA alpha (default 2 * rank)."),
        steps: int = typer.Option(None, help="Optimizer steps (default: the base run's)."),
        lr: float = typer.Option(None, help="Peak learning rate (default: the base run's)."),
        batch_size: int = typer.Option(None, "--batch-size", help="Batch size (default: the "
                                       "base run's)."),
        eval_every: int = typer.Option(None, "--eval-every", help="Evaluate and checkpoint "
                                       "every N steps."),
        seed: int = typer.Option(None, help="Seed of the LoRA init and patterns' draws."),
        device: str = typer.Option(None, help="auto, cpu or cuda[:N] (default: the base run's)."),
        out: Path = typer.Option(None, help="Run directory (default RUN-ft-ATTENTION-ADAPTER)."),
        force: bool = typer.Option(False, help="Overwrite an existing run directory."),
        resume: bool = typer.Option(False, help="Continue the fine-tune run in --out."),
        threads: int = typer.Option(None, help="torch CPU threads (default: the cores idle "
                                    "when it starts, at least 1; OMP_NUM_THREADS where set)."),
    ) -> None:
        """Fine-tune a trained run at a longer length with another attention and an adapter
        (LoRA / LoRA+ / HyLoRA / full); writes a new run that records its base run."""
        from recall_lab.commands.training import set_threads, summary_table
        from recall_lab.device import resolve_device
        from recall_lab.finetune import finetune_config
        from recall_lab.runs import (
            finetune_dir_name,
            load_run_config,
            refuse_overwrite,
            resume_step,
        )
        from recall_lab.train import check_run, train_run

        set_threads(threads)
        base = load_run_config(run)
        spec, name = resolve_task(task) if task is not None else (base.task, base.task_name)
        if length_factor != 1:
            spec, name = spec.at_length(length_factor), f"{name or 'task'}-x{length_factor}"
        over = {"steps": steps, "lr": lr, "batch_size": batch_size,
                "eval_every": eval_every, "seed": seed, "device": device}
        cfg = finetune_config(run, spec, name, attention, adapter, rank, alpha, over)
        run_dir = out or finetune_dir_name(run, attention, adapter)
        if resume:
            start = resume_step(run_dir)
        else:
            refuse_overwrite(run_dir, force, folder=True, resume=True)
            start = 0
        check_run(cfg, resolve_device(cfg.train.device))
        console.print(f"[bold]{escape(cfg.model.name)}[/] "
                      + escape(f"fine-tuned from {run} with {adapter} on "
                               f"{name or cfg.task.describe()} (max length "
                               f"{cfg.task.max_len}) -> {run_dir}"))
        with TrainProgress(console, cfg.model.name, cfg.train.steps, start) as bar:
            summary = train_run(cfg, run_dir, force=force, resume=resume, progress=bar)
        console.print(summary_table([summary], "best checkpoint on the test set"))
        console.print(f"{summary['n_trainable']:,} of {summary['n_params']:,} parameters "
                      f"trained; run written to {run_dir}")
