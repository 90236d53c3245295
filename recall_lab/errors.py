"""User errors as the lab's own error: the one line the command line prints, and the wrapper that
gives the Python API the same.

`one_line` words any exception as one line (a pydantic validation error: every failing field,
joined, without pydantic's URL); `lab_errors` wraps an API function so that a user's mistake
reaches Python as `RecallLabError` with that line (a config that does not validate, a file or
folder that is not there), chained to the original, while the command line prints the same line
after `error:`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError

from recall_lab.generators.errors import RecallLabError

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
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or type(exc).__name__}"
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# files or folders a user named that are not there (or not of the kind named): the user's error;
# other OS errors (a full disk, permissions) stay what they are
MISSING = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


def lab_errors(fn: F) -> F:
    """`fn` raising RecallLabError, with the command line's line, for a user's mistake."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RecallLabError:
            raise
        except (ValidationError, *MISSING) as exc:
            raise RecallLabError(one_line(exc)) from exc

    return wrapper  # type: ignore[return-value]
