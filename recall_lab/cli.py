"""The `recall-lab` command line: the typer app, with every command of `recall_lab/commands/`
registered on it (each module's `register(app)`; the shell in `commands/shell.py` applies the
rule that bad input ends with one line and exit code 2)."""

from __future__ import annotations

import typer

from recall_lab.commands import register_all, shell, verify

# commands/bench.py still imports these from here
from recall_lab.commands.shell import PIPE_WIDTH, OneLineGroup, console, err_console, fail, guarded  # noqa: F401

app = typer.Typer(
    name="recall-lab",
    help="A laboratory for long-context recall in hybrid state-space models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineGroup,  # a flag click cannot parse: one `error:` line too
)
register_all(app)
verify.register(shell.GuardedApp(app))  # `recall-lab verify` (commands/verify.py)

if __name__ == "__main__":  # pragma: no cover
    app()
