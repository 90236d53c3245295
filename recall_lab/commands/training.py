"""What the `train`, `finetune` and `demo` commands share: the CPU set-up of a training process,
the summary table of finished runs, and the warning about held-out samples seen in training."""

from __future__ import annotations

import os

import torch
from rich.table import Table

from recall_lab.generators.errors import RecallLabError
from recall_lab.device import default_threads, usable_cpus
from recall_lab.ssm import retain_freed_memory


def summary_table(rows: list[dict], title: str):
    table = Table(title=title, caption="best = step of the best held-out accuracy; test = that "
                  "checkpoint on the test set (exact = whole table right)")
    for col in ("model", "params", "best", "valid", "test acc", "exact", "loss", "tok/s"):
        table.add_column(col, justify="left" if col == "model" else "right",
                         no_wrap=col == "model")
    for s in rows:
        table.add_row(
            s["model"], f"{s['n_params']:,}", str(s["best_step"]), f"{s['valid']['acc']:.3f}",
            f"{s['test']['acc']:.3f}", f"{s['test']['exact']:.3f}", f"{s['test']['loss']:.3f}",
            f"{s['tokens_per_s_this_session']:,.0f}",
        )
    return table


def print_summary(console, summary: dict, cfg) -> None:
    """A finished `train` run: its table, the overlap warning, and why it stopped early."""
    console.print(summary_table([summary], "best checkpoint on the test set"))
    warn_overlap(console, summary)
    warn_warmup(console, cfg.train)
    if summary["stopped"] != "steps":
        why = {"stop_at": f"held-out accuracy reached {cfg.train.stop_at}",
               "patience": f"{cfg.train.patience} evaluations without a better "
                           "checkpoint"}[summary["stopped"]]
        console.print(f"stopped early after step {summary['stopped_at']}: {why}")


def warn_overlap(console, summary: dict) -> None:
    """A tiny task's streamed held-out sets repeat training rows: say so next to the numbers."""
    seen = summary.get("held_out_in_training") or {}
    if seen.get("valid", 0) > 0 or seen.get("test", 0) > 0:
        console.print(f"[yellow]warning:[/] {seen.get('valid', 0):.0%} of the valid and "
                      f"{seen.get('test', 0):.0%} of the test samples also occur in the first "
                      f"{seen['train_rows_checked']:,} training samples (a task with few distinct "
                      "samples): held-out accuracy includes memorisation")


def warmup_note(train) -> str | None:
    """One line when the linear warm-up is as long as the run or longer: the learning rate never
    reaches its peak (the tour's 300-step passkey run under the default warm-up of 500 ended at
    test accuracy 0.096; with warm-up 100 it learns). None when the warm-up ends inside the run."""
    if train.warmup < train.steps:
        return None
    return (f"warning: the warm-up ({train.warmup:,} steps) is as long as the run "
            f"({train.steps:,} steps) or longer, so the learning rate never reaches --lr; "
            "a shorter --warmup lets it")


def warn_warmup(console, train) -> None:
    note = warmup_note(train)
    if note is not None:
        console.print(note, markup=False, highlight=False)


def set_threads(threads: int | None) -> str:
    """CPU set-up of a training process: thread count, and glibc keeps freed memory (training
    steps otherwise page-fault their activations in again: 1.6-3.6x slower at B=64, L=1058).
    Without `threads`: OMP_NUM_THREADS where it is set, else `device.default_threads()` (the
    cores idle at the start). Returns how the count was chosen, for the command's header."""
    retain_freed_memory()
    if threads is not None:
        if threads < 1:
            raise RecallLabError(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
        return f"{threads} torch thread{'s' if threads != 1 else ''} (--threads)"
    if os.environ.get("OMP_NUM_THREADS"):
        n = torch.get_num_threads()
        return f"{n} torch thread{'s' if n != 1 else ''} (OMP_NUM_THREADS)"
    n = default_threads()
    torch.set_num_threads(n)
    return (f"{n} torch thread{'s' if n != 1 else ''} (of {len(usable_cpus())} cores, those "
            "idle at the start; --threads sets it)")
