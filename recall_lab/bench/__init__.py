"""Side-by-side benchmarks (`recall-lab bench`): ratios measured in one run, never timed tests.

Each area has a module `recall_lab/bench/<name>.py` with
`run(console: rich.console.Console, quick: bool) -> dict` that prints its own rich table and
returns JSON-serialisable results, and optionally `PEERS`: the distributions it compares against
(their versions go into the machine record). `--json FILE` writes
`{"machine": record.machine_info(peers), "<name>": results, ...}`; timed cases use
`record.summarise` (median, p20, p80, reps).

`decode` also takes `--max-len` (the longest context it steps to).

`--device cuda` (DEVICE_BENCHES only) runs `cuda.run` instead: our GPU paths beside the GPU
peers (FlexAttention with its backward, dense SDPA, mamba-ssm); on the CPU nothing changes.
"""

from __future__ import annotations

import importlib
from typing import Any

BENCHES = ("generate", "ssm", "attention", "train", "analysis", "decode", "zoo", "head",
           "threads", "grid")
DEVICE_BENCHES = ("ssm", "attention", "train")


def run_bench(name: str, console: Any, quick: bool, device: str = "cpu",
              max_len: int | None = None) -> dict:
    if device != "cpu":
        from recall_lab.bench import cuda

        return cuda.run(name, console, quick, device)
    mod = importlib.import_module(f"recall_lab.bench.{name}")
    if name == "train":  # its subprocesses would take a visible GPU: tell them the device
        return mod.run(console, quick, device="cpu")
    if name == "decode":
        return mod.run(console, quick, max_len=max_len)
    return mod.run(console, quick)


def bench_peers(names: list[str]) -> list[str]:
    """The peer distributions named by the benches `names` (module attribute `PEERS`)."""
    peers: list[str] = []
    for name in names:
        mod = importlib.import_module(f"recall_lab.bench.{name}")
        peers += [p for p in getattr(mod, "PEERS", ()) if p not in peers]
    return peers
