"""CLI commands, one module per area; each module exposes `register(app)`."""

from __future__ import annotations

import importlib

import typer

# Order is the order of `recall-lab --help`.
MODULES = ("data", "models", "finetune", "experiments", "extrapolate", "prove", "analysis",
           "bench")


def register_all(app: typer.Typer) -> None:
    for name in MODULES:
        importlib.import_module(f"recall_lab.commands.{name}").register(app)
