"""Side-by-side benchmarks (`recall-lab bench`): ratios measured in one run, never timed tests.

Each area has a module `recall_lab/bench/<name>.py` with
`run(console: rich.console.Console, quick: bool) -> dict` that prints its own rich table and
returns JSON-serialisable results (written to `--out` by the CLI).
"""

from __future__ import annotations

import importlib
from typing import Any

BENCHES = ("generate", "ssm", "attention", "train", "analysis")


def run_bench(name: str, console: Any, quick: bool) -> dict:
    mod = importlib.import_module(f"recall_lab.bench.{name}")
    return mod.run(console, quick)
