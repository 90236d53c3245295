"""What the `train`, `finetune` and `demo` commands share: the CPU set-up of a training process,
the summary table of finished runs, and the warning about held-out samples seen in training."""

from __future__ import annotations

from rich.table import Table

from recall_lab.threads import set_threads

__all__ = ["print_summary", "set_threads", "summary_table", "warn_overlap", "warn_warmup"]


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
