"""`recall-lab bench generate`: the vectorised generator vs. a per-token Python loop generator of
the same distribution, in one run; and (not --quick) the full `paper-mqjr` dataset written to a
temporary folder with 2 workers."""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path

from rich.table import Table

from recall_lab.bench.record import summarise, time_reps
from recall_lab.generators import IGNORE, TaskSpec, generate, get_preset, get_preset_entry
from recall_lab.generators.dataset import write_dataset
from recall_lab.generators.joint_recall import generate_rows, smallest_dtype


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


def _interleaved(cases: dict[str, tuple], reps: int) -> dict:
    """Time every case `reps` times, round-robin after one warm-up call each, so that a change of
    machine load hits all cases alike; per case the times are summarised (record.summarise) and
    samples/s comes from the median. `cases`: name -> (label, fn, samples)."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _, fn, _ in cases.values():
        fn()
    for _ in range(reps):
        for name, (_, fn, _) in cases.items():
            times[name] += time_reps(fn, 1)
    out = {}
    for name, (label, _, n) in cases.items():
        seconds = summarise(times[name])
        out[name] = {"method": label, "samples": n, "seconds": seconds,
                     "samples_per_s": n / seconds["median"]}
    return out


def run(console, quick: bool) -> dict:
    spec = get_preset("paper-mqjr")
    n_vec, n_loop, reps = (4096, 200, 3) if quick else (32768, 1000, 7)
    dtype = smallest_dtype(spec.vocab())
    cases = _interleaved({
        "loop": ("per-token Python loop (same output)",
                 lambda: loop_generate(spec, n_loop, 0), n_loop),
        "generate": ("generate(): int64 inputs + targets",
                     lambda: generate(spec, n_vec, 0), n_vec),
        "generate_rows": (f"generate_rows(): {dtype} rows (dataset path)",
                          lambda: generate_rows(spec, n_vec, 0, dtype), n_vec),
    }, reps)
    loop = cases["loop"]["samples_per_s"]
    for case in cases.values():
        case["ratio_vs_loop"] = case["samples_per_s"] / loop
    results: dict = {"task": "paper-mqjr", "processes": 1, "cases": cases}
    table = Table(title=f"generator, paper-mqjr, in memory, 1 process (s per call: median, "
                  f"p20-p80 of {reps}, interleaved)")
    for col in ("method", "samples", "median s", "p20-p80 s", "samples/s", "vs loop"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for case in cases.values():
        sec = case["seconds"]
        table.add_row(case["method"], f"{case['samples']:,}", f"{sec['median']:.3f}",
                      f"{sec['p20']:.3f}-{sec['p80']:.3f}", f"{case['samples_per_s']:,.0f}",
                      f"{case['ratio_vs_loop']:,.1f}x")
    console.print(table)
    if not quick:
        results["full_dataset"] = _full_dataset(console, spec)
    return results


def _full_dataset(console, spec) -> dict:
    """The full paper-mqjr dataset written with 2 workers: wall time, CPU time, and the CPU
    time of the parent plus that of the busiest worker's shards: an estimate of the wall time on
    an otherwise idle 2-core machine (worker start-up not included; on a shared machine the
    wall time is mostly waiting for a core, and CPU time itself grows with contention)."""
    entry = get_preset_entry("paper-mqjr")
    counts = {"train": entry.train, "valid": entry.valid, "test": entry.test}
    shards: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        load = os.getloadavg()[0]
        cpu0, own0 = _children_cpu(), time.process_time()
        start = time.perf_counter()
        write_dataset(spec, Path(tmp) / "d", counts, 0, workers=2, on_shard=shards.append)
        elapsed = time.perf_counter() - start
        own = time.process_time() - own0
        cpu = _children_cpu() - cpu0 + own
        size = sum(p.stat().st_size for p in (Path(tmp) / "d").iterdir())
    per_worker: dict[int, float] = {}
    for sh in shards:
        per_worker[sh["pid"]] = per_worker.get(sh["pid"], 0.0) + sh["cpu_s"]
    busiest = max(per_worker.values())
    total = sum(counts.values())
    out = {
        "workers": 2, "samples": total, "bytes": size, "shards": len(shards),
        "seconds": summarise([elapsed]), "cpu_seconds": cpu, "parent_cpu_seconds": own,
        "busiest_worker_shard_cpu_seconds": busiest,
        "idle_machine_estimate_seconds": own + busiest,
        "loadavg_1min_before": load, "loadavg_1min_after": os.getloadavg()[0],
    }
    console.print(
        f"full paper-mqjr dataset ({total:,} samples, {size / 1e6:,.0f} MB, {len(shards)} "
        f"shards, 2 workers): {elapsed:.1f} s wall ({total / elapsed:,.0f} samples/s), "
        f"{cpu:.1f} s CPU in all; parent {own:.1f} s + busiest worker {busiest:.1f} s CPU = "
        f"{own + busiest:.1f} s (estimated wall time on an idle machine); 1-min load average "
        f"{load:.1f} before, {out['loadavg_1min_after']:.1f} after (2 cores)"
    )
    return out


def _children_cpu() -> float:
    """CPU seconds of finished child processes (the dataset writer's workers)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


if __name__ == "__main__":  # pragma: no cover
    from rich.console import Console

    run(Console(), quick=True)
