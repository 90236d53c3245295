"""CLI of the generic checks: `recall-lab check MIXER` (recall_lab/testing.py)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from recall_lab.commands.shell import GuardedApp, console
from recall_lab.config import read_toml
from recall_lab.generators.errors import RecallLabError


def audit_table(rows: list) -> Table:
    """The audit for the terminal: one row per mixer (audit.md has every column and why)."""
    from recall_lab.experiments.audit import state_verdict

    table = Table(title="field audit (audit.md: every column, and why each failed or did not "
                  "run)")
    for col in ("mixer", "status", "correctness rows", "declared state", "state"):
        table.add_column(col)
    for r in rows:
        table.add_row(*(escape(c) for c in (r.path, r.status_text(), r.correctness_text(),
                                             r.declared_text(), state_verdict(r))))
    return table


def _audit(package: str, kwargs_file: str | None, out: Path | None, learning: bool,
           speed: bool, force: bool) -> int:
    """`check --all`: the field audit (recall_lab/experiments/audit.py)."""
    import shlex
    import sys

    from recall_lab.checkpoint import write_json
    from recall_lab.experiments.audit import audit, audit_markdown
    from recall_lab.mixers.kwargs_files import kwargs_file as resolve
    from recall_lab.runs import refuse_overwrite

    spec = read_toml(resolve(kwargs_file)) if kwargs_file is not None else {}
    if out is not None:
        for name in ("audit.md", "audit.json"):
            refuse_overwrite(out / name, force)
    rows = audit(package, spec, learning=learning, speed=speed,
                 progress=lambda p: console.print(f"checking {p}", markup=False,
                                                  highlight=False))
    meta = {**spec.get("source", {}), "package": package,
            "command": "recall-lab " + shlex.join(sys.argv[1:])}
    text = audit_markdown(rows, meta)
    console.print(audit_table(rows))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "audit.md").write_text(text)
        write_json(out / "audit.json", {**meta, "mixers": [r.to_json() for r in rows]})
        console.print(f"written to {out / 'audit.md'} and {out / 'audit.json'}", markup=False)
    return 1 if any(r.failed() for r in rows) else 0


def register(app: GuardedApp) -> None:
    @app.command()
    def check(
        target: str = typer.Argument(None, help="A mixer (import path pkg.module:Class, or a "
                                     "name from `recall-lab models`) or a built-in model."),
        kwargs: str = typer.Option(None, "--kwargs", help="The mixer's keyword arguments as a "
                                   "JSON object."),
        json_out: Path = typer.Option(None, "--json", help="Also write the rows to this JSON "
                                      "file."),
        require_learning: bool = typer.Option(False, "--require-learning", help="Fail (exit 1) "
                                              "when the learning gate fails too."),
        learning: bool = typer.Option(True, "--learning/--no-learning", help="Run the learning "
                                      "gate (about a minute of one core)."),
        speed: bool = typer.Option(True, "--speed/--no-speed", help="Time forward + backward "
                                   "beside the lab's mamba."),
        dtype: str = typer.Option(None, "--dtype", help="Compare a mixer's outputs in float32 "
                                  "(tolerance 1e-4) instead of float64, for a mixer that casts "
                                  "to float32 inside (its rounding is no leak)."),
        strict_state: bool = typer.Option(False, "--strict-state", help="Fail (exit 1) when a "
                                          "mixer's state_size differs from the recurrent state "
                                          "its step cache carries (else a finding)."),
        all_in: str = typer.Option(None, "--all", help="Audit every mixer of a package (a "
                                   "module name such as zoology.mixers, or its folder): each "
                                   "class that declares state_size, checked unchanged; one "
                                   "table (docs/mixers.md, 'Field audit')."),
        kwargs_file: str = typer.Option(None, "--kwargs-file", help="With --all: a TOML "
                                        "file of each mixer's kwargs, the paper's formula of "
                                        "its state and the lab's count of the same family, or "
                                        "a shipped file's name (zoology); for one mixer, its "
                                        "entry (--kwargs wins key by key)."),
        out: Path = typer.Option(None, "--out", help="With --all: write audit.md and "
                                 "audit.json into this folder."),
        force: bool = typer.Option(False, help="Overwrite --json (or --out's audit files) if "
                                   "it exists."),
    ) -> int:
        """Check a mixer or model with the lab's generic harness: forward, causality, padding
        and length, finite gradients, determinism and decode = parallel (exit 1 if one
        fails), the state (declared state_size against the measured decode cache), then the
        learning gate (small MQAR within a fixed budget), parameters and speed. One row per
        check with its measured value; an exception in the code under test fails its own row
        only. Exit 2 when the mixer cannot be built at all."""
        import torch
        from rich.table import Table

        from recall_lab.checkpoint import write_json
        from recall_lab.commands.training import set_threads
        from recall_lab.runs import mixer_kwargs_json, refuse_overwrite
        from recall_lab.testing import fails, resolve_target, result_word, run_checks

        set_threads(1)
        if all_in is not None:
            if target is not None or kwargs is not None or json_out is not None:
                raise RecallLabError("--all PACKAGE checks every mixer of a package: give it "
                                     "without a TARGET, --kwargs or --json (--kwargs-file and "
                                     "--out instead)")
            return _audit(all_in, kwargs_file, out, learning, speed, force)
        if target is None:
            raise RecallLabError("give a mixer or model to check, or --all PACKAGE")
        if out is not None:
            raise RecallLabError("--out goes with --all PACKAGE (for one mixer: --json)")
        if json_out is not None:
            refuse_overwrite(json_out, force)
        if dtype not in (None, "float32", "float64"):
            raise RecallLabError(f"--dtype {dtype}: float32 or float64")
        args = mixer_kwargs_json(kwargs, "--kwargs")
        if kwargs_file is not None:  # the file's entry for this mixer; --kwargs wins
            from recall_lab.mixers.kwargs_files import mixer_kwargs
            from recall_lab.mixers.registry import resolve_mixer

            args = {**mixer_kwargs(kwargs_file, resolve_mixer(target)), **(args or {})}
        subject = resolve_target(target, args,
                                 None if dtype is None else getattr(torch, dtype))
        console.print(f"checking {escape(subject.name)}"
                      + (f" ({escape(subject.info['path'])})" if "path" in subject.info else ""),
                      highlight=False)
        rows = run_checks(subject, learning=learning, speed=speed, strict_state=strict_state)
        table = Table(title=escape(f"recall-lab check {subject.name}"))
        for col in ("check", "result", "value", "detail"):
            table.add_column(col)
        for r in rows:
            word = result_word(r, require_learning)
            style = {"pass": "green", "FAIL": "bold red", "finding": "yellow"}.get(word)
            table.add_row(escape(r.name), f"[{style}]{word}[/]" if style else word,
                          escape(r.value), escape(r.detail))
        console.print(table)
        failed = [r for r in rows if fails(r, require_learning)]
        if json_out is not None:
            write_json(json_out, {"target": subject.name, **subject.info,
                                  "passed": not failed, "rows": [r.to_json() for r in rows]})
            console.print(f"written to {json_out}", markup=False)
        if failed:
            console.print(f"{len(failed)} check(s) failed: "
                          f"{', '.join(r.name for r in failed)}", markup=False)
        return 1 if failed else 0
