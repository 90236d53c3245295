"""`recall-lab bench generate`: the vectorised generator vs. a per-token Python loop generator of
the same distribution, in one run; and (not --quick) the full `paper-mqjr` dataset written to a
temporary folder with 2 workers."""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from rich.table import Table

from generators import IGNORE, TaskSpec, generate, get_preset, get_preset_entry
from generators.dataset import write_dataset
from generators.joint_recall import generate_rows, smallest_dtype


def _emit(rnd, spec, vlo, sizes, toks, table, level: int, path: tuple[int, ...], out: list[int]):
    order = list(range(sizes[level]))
    rnd.shuffle(order)
    for c in order:
        out.append(toks[level][c])
        if level == spec.n_levels - 1:
            key = path + (c,)
            if key not in table:
                table[key] = vlo + rnd.randrange(spec.values)
            out.append(table[key])
        else:
            _emit(rnd, spec, vlo, sizes, toks, table, level + 1, path + (c,), out)


def loop_generate(spec: TaskSpec, n: int, seed: int) -> tuple[list[list[int]], list[list[int]]]:
    """The straightforward baseline: one Python-level step per token."""
    rnd = random.Random(seed)
    vocab = spec.vocab()
    vlo, _ = vocab.value_range
    rows, targets = [], []
    for _ in range(n):
        sizes = [rnd.randint(lo, hi) for lo, hi in spec.levels]
        toks = [
            [vocab.level_range(lv)[0] + t for t in rnd.sample(range(vocab.pools[lv]), sizes[lv])]
            for lv in range(spec.n_levels)
        ]
        table: dict[tuple[int, ...], int] = {}
        seq = [vocab.BOS]
        _emit(rnd, spec, vlo, sizes, toks, table, 0, (), seq)
        seq.append(vocab.SEP)
        sep = len(seq) - 1
        _emit(rnd, spec, vlo, sizes, toks, table, 0, (), seq)
        tgt = [IGNORE] * len(seq)
        for pos in range(sep + 1, len(seq) - 1):
            if vlo <= seq[pos + 1] < vlo + spec.values:
                tgt[pos] = seq[pos + 1]
        width = spec.seq_len or len(seq)
        rows.append(seq + [vocab.PAD] * (width - len(seq)))
        targets.append(tgt + [IGNORE] * (width - len(seq)))
    return rows, targets


def _rate(fn, n: int, repeat: int = 2) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return n / best


def run(console, quick: bool) -> dict:
    spec = get_preset("paper-mqjr")
    n_vec, n_loop = (4096, 200) if quick else (32768, 1000)
    dtype = smallest_dtype(spec.vocab())
    loop = _rate(lambda: loop_generate(spec, n_loop, 0), n_loop, repeat=1)
    vec = _rate(lambda: generate(spec, n_vec, 0), n_vec)
    core = _rate(lambda: generate_rows(spec, n_vec, 0, dtype), n_vec)
    results = {
        "task": "paper-mqjr",
        "loop_samples_per_s": loop,
        "vectorised_samples_per_s": vec,
        "ratio": vec / loop,
        "core_samples_per_s": core,
        "core_ratio": core / loop,
    }
    table = Table(title="generator (paper-mqjr, in memory, 1 process)")
    for col in ("method", "samples", "samples/s", "ratio"):
        table.add_column(col, justify="right")
    table.add_row("per-token Python loop (same output)", f"{n_loop:,}", f"{loop:,.0f}", "1.0x")
    table.add_row("generate(): int64 inputs + targets", f"{n_vec:,}", f"{vec:,.0f}",
                  f"{vec / loop:,.0f}x")
    table.add_row(f"generate_rows(): {dtype} rows (dataset path)", f"{n_vec:,}", f"{core:,.0f}",
                  f"{core / loop:,.0f}x")
    console.print(table)
    if not quick:
        entry = get_preset_entry("paper-mqjr")
        counts = {"train": entry.train, "valid": entry.valid, "test": entry.test}
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            manifest = write_dataset(spec, Path(tmp) / "d", counts, 0, workers=2)
            elapsed = time.perf_counter() - start
            size = sum(p.stat().st_size for p in (Path(tmp) / "d").iterdir())
        total = sum(counts.values())
        results.update(full_dataset_seconds=elapsed, full_dataset_samples=total,
                       full_dataset_bytes=size,
                       full_dataset_shards=sum(len(v) for v in manifest["splits"].values()))
        console.print(
            f"full paper-mqjr dataset ({total:,} samples, {size / 1e6:,.0f} MB on disk, "
            f"2 workers): {elapsed:.1f} s ({total / elapsed:,.0f} samples/s)"
        )
    return results


if __name__ == "__main__":  # pragma: no cover
    from rich.console import Console

    run(Console(), quick=True)
