"""The `recall-lab` command line: a thin typer app.

Commands live in `recall_lab/commands/<area>.py`, each with a `register(app)` function; this module
owns the app, the shared console and the rule that bad input ends with one line and exit code 2.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console

from generators.errors import RecallLabError

app = typer.Typer(
    name="recall-lab",
    help="A laboratory for long-context recall in hybrid state-space models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# When stdout is not a terminal (CI, nohup, pipes) rich fits tables into 80 columns by cutting
# cells ("train/valid/te…"); a wide virtual width keeps every cell whole and long lines unbroken.
PIPE_WIDTH = 4096
console = Console()
if not console.is_terminal:
    console = Console(width=PIPE_WIDTH)
err_console = Console(stderr=True)
if not err_console.is_terminal:
    err_console = Console(stderr=True, width=PIPE_WIDTH)

F = TypeVar("F", bound=Callable[..., Any])


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e["loc"]) or "input"
            msg = str(e["msg"]).removeprefix("Value error, ")
            parts.append(f"{loc}: {msg}" if e["type"] != "value_error" else msg)
        return "invalid configuration: " + "; ".join(parts)
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def fail(message: str, code: int = 2) -> None:
    """Print one error line and exit non-zero."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def guarded(fn: F) -> F:
    """Turn bad input (RecallLabError, config validation) and I/O errors (OSError: missing files,
    disk full) into one line, exit 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (RecallLabError, ValidationError) as exc:
            fail(_one_line(exc))
        except OSError as exc:  # disk full, permissions, missing files: one line naming the path
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or _one_line(exc)}")
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def _register_commands() -> None:
    from recall_lab.commands import register_all

    register_all(app)


_register_commands()

if __name__ == "__main__":  # pragma: no cover
    app()
