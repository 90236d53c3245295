"""The CLI shell every command runs in: the shared consoles, the one-line error printer, and
the guard applied once where commands register (`GuardedApp`), so a command body only parses
its flags, calls the library and prints.

Bad input (`RecallLabError`, config validation) and I/O errors end with one `error:` line and
exit code 2, never a traceback; a command that returns a non-zero int exits with it.
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


def one_line(exc: BaseException) -> str:
    """The message of `exc` as one line (a validation error: every failing field, joined)."""
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
    disk full) into one line, exit 2; a non-zero int returned by `fn` becomes the exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            code = fn(*args, **kwargs)
        except (RecallLabError, ValidationError) as exc:
            fail(one_line(exc))
        except OSError as exc:  # disk full, permissions, missing files: one line naming the path
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or one_line(exc)}")
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(130)
        if code:
            raise typer.Exit(code)

    return wrapper  # type: ignore[return-value]


class GuardedApp:
    """What a command module's `register(app)` receives: `app.command(...)` registers the
    command on the typer app with `guarded` applied."""

    def __init__(self, app: typer.Typer) -> None:
        self.app = app

    def command(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        def register(fn: F) -> F:
            self.app.command(*args, **kwargs)(guarded(fn))
            return fn

        return register
