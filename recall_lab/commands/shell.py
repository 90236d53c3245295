"""The CLI shell every command runs in: the shared consoles, the one-line error printer, the
one check every flag's value passes, and the guard applied once where commands register
(`GuardedApp`), so a command body only parses its flags, calls the library and prints.

Bad input (`RecallLabError`, config validation, a flag click cannot parse) and I/O errors end with
one `error:` line and exit code 2, never a traceback; a command that returns a non-zero int exits
with it. Messages are printed literally: a `[/x]` in a name is text, not rich markup.

Values, before a command body runs (`check_values`, from each command's signature, so a new
option is covered without a line here): a float must be finite; an integer must lie in
[0, 2^31 - 1] (counts, sizes, seeds, indices: none is negative; `SIGNED` lists the exceptions).
What a value means beyond that (a size the machine can hold, a config's fields) is checked by
the library before any work: `recall_lab.generators.limits`, the pydantic config models.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import signal
import sys
import threading
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from typer.core import TyperCommand, TyperGroup

try:  # typer >= 0.22 vendors click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer
    from click import exceptions as click_errors

from recall_lab.commands.fit import fit
from recall_lab.errors import one_line
from recall_lab.generators.errors import RecallLabError

# When stdout is not a terminal (CI, nohup, pipes, files) output is PIPE_WIDTH columns wide, or
# COLUMNS where that is set: tables fit that width without splitting a token (`fit`: cells wrap
# at spaces, or the columns are split over tables that repeat the key column, or plain rows) and
# text wraps at word boundaries, so no content is lost. Error lines stay one line whatever their
# length (`fail`).
PIPE_WIDTH = 100


def pipe_width() -> int:
    """The width of output that is not a terminal: COLUMNS if it is a positive integer, else
    PIPE_WIDTH."""
    try:
        width = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return PIPE_WIDTH
    return width if width > 0 else PIPE_WIDTH


class FittingConsole(Console):
    """A console whose tables fit its width with every token whole (`commands/fit.py`)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        width = kwargs.get("width") or self.width
        super().print(*(self.fitted(obj, width) for obj in objects), **kwargs)

    def fitted(self, obj: Any, width: int) -> Any:
        """`obj` with every table in it (alone or in a Group) fitted to `width`."""
        if isinstance(obj, Table):
            return fit(obj, self, width)
        if isinstance(obj, Group):
            return Group(*(self.fitted(o, width) for o in obj.renderables))
        return obj


console = FittingConsole()
if not console.is_terminal:
    console = FittingConsole(width=pipe_width())
err_console = FittingConsole(stderr=True)
if not err_console.is_terminal:
    err_console = FittingConsole(stderr=True, width=pipe_width())

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 2) -> None:
    """Print one error line (the message literally, never as markup) and exit non-zero."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False,
                      soft_wrap=True)
    raise typer.Exit(code)


# The largest integer a flag takes: every count, size, seed and index fits a C int.
MAX_INT = 2**31 - 1
# Integer parameters that may be negative (none today: a layer index counts from 0).
SIGNED: frozenset[str] = frozenset()


def flag_name(name: str, default: Any) -> str:
    """How a user writes parameter `name` of a command: its first `--flag`, or its ARGUMENT."""
    decls = [d for d in getattr(default, "param_decls", None) or () if d.startswith("--")]
    if decls:
        return decls[0]
    if isinstance(default, typer.models.ArgumentInfo):
        return name.upper()
    return "--" + name.replace("_", "-")


def check_values(fn: Callable[..., Any], values: dict[str, Any]) -> None:
    """The one check of every flag's value before a command runs (see the module's doc)."""
    hints = typing.get_type_hints(fn)
    for name, param in inspect.signature(fn).parameters.items():
        value = values.get(name)
        kind = hints.get(name)
        if value is None or isinstance(value, bool) or kind is bool:
            continue
        flag = flag_name(name, param.default)
        if isinstance(value, float) and not math.isfinite(value):
            raise_bad(f"{flag} must be a finite number, got {value}")
        if isinstance(value, int):
            low = -MAX_INT if name in SIGNED else 0
            if not low <= value <= MAX_INT:
                raise_bad(f"{flag} must be an integer in [{low}, {MAX_INT}], got {value}")


def raise_bad(message: str) -> None:
    raise RecallLabError(message)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so it stops as Ctrl-C does: `finally` blocks run
    (locks released, temporaries removed, a sweep's workers stopped and its index saved) and
    multiprocessing's semaphores are released (without it, a SIGTERM to `sweep` ended with the
    resource tracker's "leaked semaphore objects" warning)."""


def terminate_as_interrupt() -> Callable[[], None]:
    """Install the SIGTERM handler that raises `Terminated`; returns what restores the old one
    (only the main thread can set handlers: elsewhere it does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: Any) -> None:
        raise Terminated

    old = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, old)


def guarded(fn: F) -> F:
    """Turn bad input (RecallLabError, config validation) and I/O errors (OSError: missing files,
    disk full) into one line, exit 2; a non-zero int returned by `fn` becomes the exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        restore = terminate_as_interrupt()
        try:
            check_values(fn, kwargs)
            code = fn(*args, **kwargs)
        except (RecallLabError, ValidationError) as exc:
            fail(one_line(exc))
        except OSError as exc:  # disk full, permissions, missing files: one line naming the path
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or one_line(exc)}")
        except Terminated:
            err_console.print("terminated")
            sys.exit(143)
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(130)
        finally:
            restore()
        if code:
            raise typer.Exit(code)

    return wrapper  # type: ignore[return-value]


# How a value's type reads in help: a word, as a user types it (typer shows `<list[str]>`)
TYPE_WORDS = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "path": "PATH",
              "Path": "PATH", "file": "PATH", "directory": "PATH"}


def type_word(label: str | None) -> str | None:
    """typer's type label (`<int>`, `<list[Path]>`) as a word (`INTEGER`, `PATH...`); a
    metavar a command chose (`best|last`, `SWEEP`) stays as it is."""
    if not label or not (label.startswith("<") and label.rstrip(".").endswith(">")):
        return label
    many = label.endswith("...")
    inner = label.rstrip(".")[1:-1]
    if inner.startswith("list[") and inner.endswith("]"):
        inner, many = inner[5:-1], True
    word = TYPE_WORDS.get(inner, inner.upper())
    return word + ("..." if many else "")


class InWords:
    """Help that reads as words, for a command or a group: a plain flag shows no `<bool>` (it
    takes no value), a type shows as `TEXT`, `PATH...`, and backticks (code in the docstrings)
    are not printed raw."""

    help: str | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.help:
            self.help = self.help.replace("`", "")

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)  # the command's, and --help
        for param in params:
            if getattr(param, "_in_words", False):
                continue
            param._in_words = True
            if getattr(param, "help", None):
                param.help = param.help.replace("`", "")
            shown = param.display_type_rich

            def words(ctx: Any, _param: Any = param, _shown: Any = shown) -> str | None:
                if getattr(_param, "is_flag", False) and not getattr(_param, "count", False):
                    return None
                return type_word(_shown(ctx=ctx))

            param.display_type_rich = words  # type: ignore[method-assign]
        return params


class WordsCommand(InWords, TyperCommand):
    """Every command of the app (`GuardedApp` registers it so)."""


class OneLineGroup(InWords, TyperGroup):
    """The app's command group: a flag click cannot parse (`--index abc`, a missing argument,
    an unknown option) ends in one `error:` line and exit 2, like every other bad input,
    instead of click's usage box. `recall-lab` alone still prints the help."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except click_errors.UsageError as exc:
            self._one_line(exc)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except click_errors.UsageError as exc:
            self._one_line(exc)

    @staticmethod
    def _one_line(exc: Any) -> None:
        if isinstance(exc, getattr(click_errors, "NoArgsIsHelpError", ())):
            raise exc
        where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        fail(one_line(RuntimeError(exc.format_message())).rstrip(".") + where)


def help_text(doc: str) -> str:
    """A command's docstring as help: each paragraph one line, so the help (and the command
    list of `recall-lab --help`) wraps it at word boundaries to the width at hand instead of
    keeping the docstring's own line breaks ("causality, padding and / length")."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


class GuardedApp:
    """What a command module's `register(app)` receives: `app.command(...)` registers the
    command on the typer app with `guarded` applied, its help in words (`WordsCommand`)."""

    def __init__(self, app: typer.Typer) -> None:
        self.app = app

    def command(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        def register(fn: F) -> F:
            if kwargs.get("help") is None and fn.__doc__:
                kwargs["help"] = help_text(fn.__doc__)
            kwargs.setdefault("cls", WordsCommand)
            self.app.command(*args, **kwargs)(guarded(fn))
            return fn

        return register


CHECKPOINT_HELP = ("Which weights load: best (the checkpoint with the highest validation "
                   "accuracy during training; the default) or last (the final step's).")


def checkpoint_option() -> Any:
    """The one `--checkpoint best|last` option of every command that loads a run's weights."""
    return typer.Option("best", "--checkpoint", metavar="best|last", help=CHECKPOINT_HELP)
