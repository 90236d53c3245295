"""CLI of verification: `verify` (re-train a sample of a placement record's runs here and check
them against the record). The body only parses, calls `experiments/verify.py` and prints."""

from __future__ import annotations

from pathlib import Path

import typer

from recall_lab.commands.shell import GuardedApp, console


def register(app: GuardedApp) -> None:
    @app.command()
    def verify(
        record: Path = typer.Argument(..., help="A placement's record.json, or its folder."),
        runs: int = typer.Option(None, "--runs", help="Re-train this many runs, those nearest "
                                 "the solve threshold first (default: one seed at each "
                                 "boundary table)."),
        table: list[float] = typer.Option(None, "--table", help="Re-train every cell run of "
                                          "this table (repeatable), e.g. to replay whole "
                                          "cells after a kernel changed."),
        threads: int = typer.Option(1, help="torch threads."),
        out: Path = typer.Option(None, help="Folder for verify-DATE-NAME/ (default: beside the "
                                 "record's folder; never inside it)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Check the record, its config "
                                     "and data hashes, and print the runs it would train "
                                     "with an estimated wall time; nothing is trained or "
                                     "written."),
        estimate: bool = typer.Option(True, "--estimate/--no-estimate", help="With --dry-run: "
                                      "time a probe; --no-estimate skips it."),
    ) -> int:
        """Re-train a sample of a placement record's runs on this machine and check the
        record: its schema and content hash, each run's config hash, the data's first batch,
        and each re-trained run's solved outcome ("outcome reproduced k/k")."""
        from recall_lab.experiments import verify as vf
        from recall_lab.experiments.estimate import estimate_lines

        def say(line: str) -> None:
            console.print(line, markup=False, highlight=False)

        if dry_run:
            p = vf.plan(record, runs, threads, estimate=estimate, only=table or None)
            r = p["record"]
            say(f"{r['evaluation_id']}: record checked (schema {r['schema_version']}, content "
                f"hash {r['dedupe_identity']['content_hash'][:16]})")
            say(f"config hashes: {p['hashes']['configs']} of {p['hashes']['configs']} rebuilt "
                f"equal; data hashes: {p['hashes']['data']} of {p['hashes']['data']} tables "
                "equal")
            for x in p["runs"]:
                say(f"would train {x['name']}: table {x['table']:g}, seed {x['seed']}")
                say(f"  recorded: test accuracy {x['test_acc']:.4f}, "
                    f"{'solved' if x['solved'] else 'not solved'}")
            if p["estimate"]:
                for line in estimate_lines(p["estimate"], "; a run stops early at stop_at"):
                    say(line)
            return 0
        v = vf.verify(record, runs, threads, out, say=say, only=table or None)
        say(f"config hashes {v['checked']['config_hashes']} equal, data hashes "
            f"{v['checked']['data_hashes']} equal")
        say(vf.outcome_line(v))
        say(f"written: {v['folder']}")
        return 0 if v["reproduced"] == v["of"] else 1
