"""Placeholder: commands of this area are registered here."""

import typer


def register(app: typer.Typer) -> None:
    pass
