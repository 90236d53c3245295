"""CLI commands, one module per area; each module exposes `register(app)`, and registers its
commands on a `GuardedApp`, which applies the shell's error guard to each of them once."""

from __future__ import annotations

import typer

from recall_lab.commands import (
    analysis,
    bench,
    check,
    data,
    experiments,
    extrapolate,
    finetune,
    lr_window,
    models,
    place,
    prove,
    shipped,
)
from recall_lab.commands.shell import GuardedApp

# Order is the order of `recall-lab --help`.
MODULES = (data, models, check, finetune, experiments, place, lr_window, extrapolate, prove,
           analysis, bench, shipped)


def register_all(app: typer.Typer) -> None:
    shell = GuardedApp(app)
    for module in MODULES:
        module.register(shell)
