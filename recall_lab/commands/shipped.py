"""CLI: `recall-lab experiments list | show NAME | copy NAME DIR`, the experiment files the
package carries (`recall_lab.experiments.shipped`); `recall-lab sweep NAME` runs one by name."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from recall_lab.commands.shell import GuardedApp, OneLineGroup, console
from recall_lab.experiments.shipped import (
    by_study,
    copy_shipped,
    shipped_path,
    short,
    summary,
)


def register(app: GuardedApp) -> None:
    sub = typer.Typer(name="experiments", no_args_is_help=True, cls=OneLineGroup,
                      help="The experiment files shipped with recall-lab, one folder per "
                           "study: list them, print one, copy one to edit; `recall-lab sweep "
                           "NAME` runs one by name.")
    shell = GuardedApp(sub)

    @shell.command("list")
    def list_(
        long: bool = typer.Option(False, "--long", help="Each experiment's whole description "
                                  "(default: its first sentence, up to 100 characters)."),
    ) -> None:
        """Every shipped experiment, grouped by study (its folder of experiments/): its name,
        the runs of it committed under docs/results with their time (from the records), and
        what it is about."""
        from rich.table import Table

        from recall_lab.experiments.committed import committed_records, duration

        records = committed_records()
        table = Table("name", "runs", "time", "about",
                      title="shipped experiments by study (recall-lab sweep NAME)",
                      caption="runs: run records committed under docs/results, of the runs "
                              "its sweeps planned; time: the runs' own wall time summed (core "
                              "time), from their summary.json; --long: whole descriptions")
        for i, (folder, names) in enumerate(by_study().items()):
            if i:
                table.add_section()
            if folder:
                table.add_row(f"[bold]{escape(folder)}/[/bold]", "", "", "")
            for name in names:
                rec = records.get(name)
                about = summary(shipped_path(name))
                table.add_row(escape(f"  {name}" if folder else name),
                              f"{rec.runs} of {rec.planned}" if rec else "none",
                              duration(rec.run_s) if rec else "-",
                              escape(about if long else short(about)))
        console.print(table)
        if not records:
            console.print("no run records here (they are committed in the repository's "
                          "docs/results)", highlight=False)

    @shell.command("show")
    def show(
        name: str = typer.Argument(..., help="A shipped experiment's name, e.g. capacity."),
    ) -> None:
        """Print a shipped experiment file as it is."""
        console.print(shipped_path(name).read_text(encoding="utf-8"), markup=False,
                      highlight=False, soft_wrap=True, end="")

    @shell.command("copy")
    def copy(
        name: str = typer.Argument(..., help="A shipped experiment's name, e.g. capacity."),
        dest: Path = typer.Argument(..., help="Folder to copy it into (made if missing); the "
                                    "files its `base` key names come along."),
        force: bool = typer.Option(False, help="Overwrite files of the same name in DEST."),
    ) -> None:
        """Copy a shipped experiment (and its base files) into a folder, to edit and sweep."""
        written = copy_shipped(name, dest, force)
        console.print("written: " + ", ".join(str(p) for p in written), markup=False,
                      highlight=False)

    app.app.add_typer(sub)
