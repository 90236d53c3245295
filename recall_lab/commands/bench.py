"""`recall-lab bench`: side-by-side benchmarks, ratios in one run."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import typer

from recall_lab.bench import BENCHES, DEVICE_BENCHES, bench_peers, run_bench
from recall_lab.commands.shell import GuardedApp, console
from recall_lab.generators.errors import RecallLabError


def register(app: GuardedApp) -> None:
    @app.command()
    def bench(
        which: list[str] = typer.Argument(
            None, help=f"Benchmarks to run (default: all available): {', '.join(BENCHES)}."
        ),
        quick: bool = typer.Option(False, help="Smaller sizes, for a fast look."),
        out: Path = typer.Option(
            None, "--json", "--out",
            help="Write machine info and the results as JSON to this file (refuses to overwrite;"
            " --out is an alias).",
        ),
        force: bool = typer.Option(False, help="Overwrite the --json file if it exists."),
        device: str = typer.Option(
            "cpu", help=f"cpu, or cuda[:N] for {', '.join(DEVICE_BENCHES)}: our GPU paths beside "
            "FlexAttention (with backward), dense SDPA and mamba-ssm."),
        max_len: int = typer.Option(None, "--max-len", min=8, help="decode: the longest "
                                    "context stepped to (default 65536; --quick 2048)."),
    ) -> None:
        """Benchmark fast paths against their baselines in the same run and print ratios."""
        from recall_lab.device import resolve_device
        from recall_lab.progress import Running

        dev = resolve_device(device)  # one error line for a bad or absent device
        on_gpu = dev.type == "cuda"
        names = list(which) if which else [
            b for b in (DEVICE_BENCHES if on_gpu else BENCHES)
            if importlib.util.find_spec(f"recall_lab.bench.{b}") is not None
        ]
        unknown = [n for n in names if n not in BENCHES]
        if unknown:
            raise RecallLabError(
                f"unknown benchmark {unknown[0]!r}; choose from {', '.join(BENCHES)}"
            )
        no_gpu = [n for n in names if n not in DEVICE_BENCHES]
        if on_gpu and no_gpu:
            raise RecallLabError(f"bench {no_gpu[0]!r} has no --device cuda; the GPU benches "
                                 f"are {', '.join(DEVICE_BENCHES)}")
        if out is not None and out.exists() and not force:
            raise RecallLabError(f"{out} exists; pass --force to overwrite it")
        for name in names:
            if importlib.util.find_spec(f"recall_lab.bench.{name}") is None:
                raise RecallLabError(f"benchmark {name!r} is not implemented yet")
        from recall_lab.bench.record import machine_info

        results: dict = {"machine": machine_info(bench_peers(names))}
        if on_gpu:
            results["machine"]["bench_device"] = str(dev)
        for name in names:
            with Running(console, f"bench {name}"):  # plain lines when piped
                results[name] = run_bench(name, console, quick,
                                          str(dev) if on_gpu else "cpu", max_len=max_len)
        results["machine"]["loadavg_end"] = list(os.getloadavg())
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=2))
            console.print(f"results written to {out}")
