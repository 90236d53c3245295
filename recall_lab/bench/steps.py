"""The capacity experiment's training step, old code against new, side by side in one run.

    python recall_lab/bench/steps.py --old /path/to/old/tree [--new .] [--reps 3]
        [--warmup 5] [--steps 20] [--models a,b,...]

For each of `mamba`, `mamba2`, `transformer`, `mamba+hax`, `mamba2+hax` at the capacity config
(d_model 64, state 4, k 8, MQAR 8 pairs, batch 32, lr 3e-3), `--reps` rounds, each of which
starts one fresh process per tree (old and new, which goes first alternating), with PYTHONPATH
set to that tree, one torch thread, and glibc's freed-memory retention as `recall-lab train`
and sweep workers set it. A child (``--case a,b,...``: this file run by path, so it needs only
the public API that both trees have) builds every model, trains `--warmup` steps, then
`--steps` steps on fixed batches, the models' steps interleaved round-robin, and reports their
medians: wall ms and CPU ms (process time: what the process computed, without the time it
waited for a core; on a shared machine its ratios are the steadier ones). The table gives the
median and the minimum over rounds and old / new of each, and each hybrid's speed as a
fraction of its base's, taken per process (the two were interleaved there) and then the
median over rounds. Only the ratios of one run mean anything on a shared machine; absolute
figures move with the load (on this lab's 2-core VM, by +-20% between processes).

    python recall_lab/bench/steps.py --compile [--reps 1]

puts `torch.compile` (inductor, ``dynamic=False``, the model's forward compiled; the native
kernels are custom ops in it) beside eager in the same tree: one fresh process per model and
round, with an empty inductor cache (a cold compile), trains an eager and a compiled copy of the
same model, first one step each (the compiled one's is the compile: CPU seconds of the process
and the compiler's children), then 5 + 20 steps alternating which goes first, and reports the
medians, the graph breaks of the forward (`torch._dynamo.explain`) and the steps after which the
compile has paid for itself.

    python recall_lab/bench/steps.py --grouped [--groups 2,4,8] [--reps 2] [--rounds 8]

asks whether training G seeds of one config in one process would pay: the most it could give on
one thread is one model stepping a batch of G x 32 samples against G separate steps of batch 32
(the same FLOPs; a real grouped model would have per-seed weights, i.e. batched matmuls and scan
kernels with per-seed parameters, and gain less). One fresh process per model and rep holds a
copy of the model (with its own AdamW) per batch size 32 and 32 x G, warms each up 2 steps, then
for `--rounds` rounds times 3 steps of each copy per round, rotating which copy goes first. Per
G it reports CPU ms per step at both batches (median and min over rounds), samples/s, and the
upper bound G x ms(32) / ms(32 G): per round (paired) with its median and range, and from the
fastest rounds.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = ("mamba", "mamba2", "transformer", "mamba+hax", "mamba2+hax")
BATCH = 32  # the capacity config's batch: one seed's step
GROUPS = (2, 4, 8)
HYBRID_BASE = {"mamba+hax": "mamba", "mamba2+hax": "mamba2"}


def setup_case(name: str):
    """(config, model, its fixed batches) of the capacity config; torch imported here so that the
    parent process, which only starts children, does not pay for it."""
    import torch

    torch.set_num_threads(1)
    try:  # as `recall-lab train` and sweep workers do (trees from before it: glibc defaults)
        from recall_lab.ssm.cpu_malloc import retain_freed_memory
        retain_freed_memory()
    except ImportError:
        pass
    from recall_lab.data import DataSource
    from recall_lab.runs import build_run_model, run_config_from_tables

    cfg = run_config_from_tables({
        "model": {"name": name, "d_state": 4, "k": 8},
        "train": {"batch_size": 32, "lr": 3e-3, "device": "cpu"},
        "task": {"levels": [[8, 8]], "values": 16}})
    torch.manual_seed(0)
    model = build_run_model(cfg)
    data = DataSource.for_run(cfg)
    return cfg, model, [data.batch(s, 32, torch.device("cpu")) for s in range(4)]


def step_optimizer(model, cfg):
    """(optimizer, its step after backward) as the tree's own training loop makes them: trees
    from before `make_optimizer` built AdamW per tensor and clipped in a loop."""
    import torch

    try:
        from recall_lab.train import make_optimizer, optimizer_step
    except ImportError:
        opt = torch.optim.AdamW(model.param_groups(cfg.train.weight_decay), lr=cfg.train.lr,
                                betas=cfg.train.betas)

        def finish() -> None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
            opt.step()
        return opt, finish
    opt = make_optimizer(model, cfg.train.weight_decay, cfg.train.lr, cfg.train.betas)
    return opt, lambda: optimizer_step(model, opt, cfg.train.grad_clip)


def _case(names: str, steps: int = 20, warmup: int = 5) -> dict:
    """Per model of the comma-separated `names`: median wall and CPU ms of `steps` steps after
    `warmup`, the models' steps interleaved (round-robin) in this one process, so that a slower
    or faster spell of a shared machine falls on all of them alike."""
    runs = []
    for name in names.split(","):
        cfg, model, batches = setup_case(name)  # first: it sets the thread count
        runs.append((name, cfg, model, batches, *step_optimizer(model, cfg)))
    from recall_lab.train import objective

    times: dict = {name: ([], []) for name in names.split(",")}
    for i in range(warmup + steps):
        for name, cfg, model, batches, opt, finish in runs:
            x, y = batches[i % len(batches)]
            t0, c0 = time.perf_counter(), time.process_time()
            loss = objective(model(x), y, cfg.train.alpha)[0]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            finish()
            if i >= warmup:
                times[name][0].append(time.perf_counter() - t0)
                times[name][1].append(time.process_time() - c0)
    return {name: {"wall_ms": statistics.median(w) * 1e3, "cpu_ms": statistics.median(c) * 1e3}
            for name, (w, c) in times.items()}


def _cpu_with_children() -> float:
    """CPU seconds of this process and its finished children (inductor's C++ compiler runs)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _compile_case(name: str, steps: int = 20) -> dict:
    """Eager against compiled, one copy of the model each, interleaved in this process."""
    cfg, model, batches = setup_case(name)
    import torch

    from recall_lab.train import objective

    breaks = torch._dynamo.explain(model)(batches[0][0]).graph_break_count
    torch._dynamo.reset()  # explain's traces must not stand in for the compile timed below
    sides = {}
    for side in ("eager", "compiled"):
        m = copy.deepcopy(model)
        fwd = torch.compile(m, dynamic=False) if side == "compiled" else m
        opt, finish = step_optimizer(m, cfg)
        sides[side] = {"model": m, "fwd": fwd, "opt": opt, "finish": finish, "wall": [],
                       "cpu": []}

    def step(s: dict, i: int) -> None:
        x, y = batches[i % len(batches)]
        loss = objective(s["fwd"](x), y, cfg.train.alpha)[0]
        s["opt"].zero_grad(set_to_none=True)
        loss.backward()
        s["finish"]()

    first = {}
    for side, s in sides.items():
        t0, c0 = time.perf_counter(), _cpu_with_children()
        step(s, 0)
        first[side] = (time.perf_counter() - t0, _cpu_with_children() - c0)
    order = list(sides)
    for i in range(1, 6 + steps):
        for side in order if i % 2 else order[::-1]:  # neither side always runs first
            t0, c0 = time.perf_counter(), time.process_time()
            step(sides[side], i)
            if i > 5:
                sides[side]["wall"].append(time.perf_counter() - t0)
                sides[side]["cpu"].append(time.process_time() - c0)
    out = {f"{side}_{key}_ms": statistics.median(s[key]) * 1e3
           for side, s in sides.items() for key in ("wall", "cpu")}
    return {**out, "compile_wall_s": first["compiled"][0] - first["eager"][0],
            "compile_cpu_s": first["compiled"][1] - first["eager"][1], "graph_breaks": breaks}


def _grouped_case(name: str, groups: tuple[int, ...] = GROUPS, rounds: int = 8,
                  steps: int = 3, warmup: int = 2) -> dict:
    """One copy of the model per batch size (BATCH and BATCH x G for G in `groups`), each with
    its own AdamW and 2 fixed batches, interleaved in this process: `warmup` steps each, then
    `rounds` rounds of `steps` steps per copy, the copy that goes first rotating. Per group size
    (as a string key; "1" is the separate step): the batch, the samples it stepped in all, and
    per round the median CPU and wall ms of its steps."""
    cfg, model, _ = setup_case(name)
    import torch

    from recall_lab.data import DataSource
    from recall_lab.train import objective

    data = DataSource.for_run(cfg)
    arms = {}
    for g in (1, *groups):
        m = copy.deepcopy(model)
        opt, finish = step_optimizer(m, cfg)
        arms[g] = {"model": m, "opt": opt, "finish": finish, "samples": 0, "cpu": [], "wall": [],
                   "batches": [data.batch(s, BATCH * g, torch.device("cpu")) for s in range(2)]}

    def step(a: dict, i: int) -> None:
        x, y = a["batches"][i % 2]
        loss = objective(a["model"](x), y, cfg.train.alpha)[0]
        a["opt"].zero_grad(set_to_none=True)
        loss.backward()
        a["finish"]()
        a["samples"] += x.shape[0]

    for a in arms.values():
        for i in range(warmup):
            step(a, i)
    order = list(arms)
    for r in range(rounds):
        for g in order[r % len(order):] + order[:r % len(order)]:
            a, wall, cpu = arms[g], [], []
            for i in range(steps):
                t0, c0 = time.perf_counter(), time.process_time()
                step(a, i)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            a["cpu"].append(statistics.median(cpu) * 1e3)
            a["wall"].append(statistics.median(wall) * 1e3)
    return {str(g): {"batch": a["batches"][0][0].shape[0], "samples": a["samples"],
                     "cpu_ms": a["cpu"], "wall_ms": a["wall"]} for g, a in arms.items()}


def grouped_gain(ms_separate: float, ms_grouped: float, g: int) -> float:
    """Samples/s of one step of batch G x 32 over those of G separate steps of batch 32."""
    return g * ms_separate / ms_grouped


def samples_per_s(ms: float, batch: int) -> float:
    return batch * 1e3 / ms


def summarise_grouped(rounds: dict, key: str = "cpu_ms") -> dict:
    """From `_grouped_case`'s per-round figures (rounds of several reps concatenated in the same
    order for every G), per G: ms per step at batch 32 and 32 x G (median, min), samples/s of
    each (from the medians), the upper bound per round paired (median, min, max) and from the
    fastest rounds."""
    sep = rounds["1"][key]
    out = {}
    for gs, r in rounds.items():
        g = int(gs)
        if g == 1:
            continue
        paired = [grouped_gain(a, b, g) for a, b in zip(sep, r[key], strict=True)]
        med1, medg = statistics.median(sep), statistics.median(r[key])
        out[g] = {"batch": r["batch"], "ms_32": med1, "ms_g": medg, "min_ms_32": min(sep),
                  "min_ms_g": min(r[key]), "sps_32": samples_per_s(med1, BATCH),
                  "sps_g": samples_per_s(medg, r["batch"]), "gain": statistics.median(paired),
                  "gain_lo": min(paired), "gain_hi": max(paired),
                  "gain_min": grouped_gain(min(sep), min(r[key]), g), "rounds": len(paired)}
    return out


def compare_grouped(tree: str, reps: int, models: tuple[str, ...], groups: tuple[int, ...],
                    rounds: int) -> dict:
    """Per model: `summarise_grouped` over `reps` fresh processes (models alternating) of
    `_grouped_case`, for CPU and for wall ms."""
    got: dict = {m: None for m in models}
    args = ["--groups", ",".join(map(str, groups)), "--rounds", str(rounds)]
    for _ in range(reps):
        for m in models:
            r = _child(tree, m, "--grouped-case", extra=args)
            if got[m] is None:
                got[m] = r
            else:
                for g, v in r.items():
                    for key in ("cpu_ms", "wall_ms"):
                        got[m][g][key] += v[key]
    return {m: {"cpu": summarise_grouped(r, "cpu_ms"), "wall": summarise_grouped(r, "wall_ms")}
            for m, r in got.items()}


def _print_grouped(table: dict) -> None:
    print("CPU ms per step (median over rounds), samples/s from them, and the grouped upper "
          "bound G x ms(32) / ms(32G): median of the paired rounds [range], from the fastest "
          "rounds, and from wall time")
    print(f"{'model':<12} {'G':>2} {'ms b32':>7} {'ms b32G':>8} {'sps sep':>8} {'sps grp':>8} "
          f"{'bound':>6} {'[range]':>13} {'fastest':>7} {'wall':>6}")
    for m, sides in table.items():
        for g, r in sides["cpu"].items():
            w = sides["wall"][g]
            print(f"{m:<12} {g:>2} {r['ms_32']:7.1f} {r['ms_g']:8.1f} {r['sps_32']:8.0f} "
                  f"{r['sps_g']:8.0f} {r['gain']:5.2f}x [{r['gain_lo']:4.2f}-{r['gain_hi']:4.2f}]x "
                  f"{r['gain_min']:6.2f}x {w['gain']:5.2f}x")
    print(json.dumps(table))


def _child(tree: str, name: str, flag: str = "--case", env: dict | None = None,
           extra: list[str] | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree), "OMP_NUM_THREADS": "1",
           **(env or {})}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), flag, name, *(extra or [])],
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare_compile(tree: str, reps: int, models: tuple[str, ...]) -> dict:
    """Per model: medians over `reps` fresh processes of `_compile_case`, each with an empty
    inductor cache, and the steps after which the compile has paid for itself (None: never)."""
    table = {}
    for m in models:
        rows = []
        for _ in range(reps):
            # one compile thread: the compile is then this process's and its compilers' CPU time
            with tempfile.TemporaryDirectory() as cache:
                rows.append(_child(tree, m, "--compile-case", {
                    "TORCHINDUCTOR_CACHE_DIR": cache, "TORCHINDUCTOR_COMPILE_THREADS": "1"}))
        row = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        row["speedup_cpu"] = row["eager_cpu_ms"] / row["compiled_cpu_ms"]
        saved_ms = row["eager_cpu_ms"] - row["compiled_cpu_ms"]
        row["break_even_steps"] = (round(row["compile_cpu_s"] * 1e3 / saved_ms)
                                   if saved_ms > 0 else None)
        table[m] = row
    return table


def _print_compile(table: dict) -> None:
    print(f"{'model':<12} {'eager cpu':>9} {'comp. cpu':>9} {'eager/c':>8} {'compile s':>9} "
          f"{'breaks':>6} {'pays after':>10}")
    for m, r in table.items():
        pays = "never" if r["break_even_steps"] is None else f"{r['break_even_steps']} steps"
        print(f"{m:<12} {r['eager_cpu_ms']:9.1f} {r['compiled_cpu_ms']:9.1f} "
              f"{r['speedup_cpu']:7.2f}x {r['compile_cpu_s']:9.1f} {r['graph_breaks']:6.0f} "
              f"{pays:>10}")
    print(json.dumps(table))


def compare(old: str, new: str, reps: int, models: tuple[str, ...], steps: int = 20,
            warmup: int = 5) -> dict:
    """Per model: medians over `reps` rounds, each round one fresh process per tree (which goes
    first alternates) that steps all `models` interleaved (`_case`). Besides old / new, each
    hybrid's speed as a fraction of its base's (`old_of_base`, `new_of_base`: the base's CPU ms
    over the hybrid's) per process, then the median: the two were interleaved there."""
    got: dict = {"old": [], "new": []}
    extra = ["--steps", str(steps), "--warmup", str(warmup)]
    for rep in range(reps):
        order = (("old", old), ("new", new)) if rep % 2 == 0 else (("new", new), ("old", old))
        for which, tree in order:
            got[which].append(_child(tree, ",".join(models), extra=extra))
    return summarise_compare(got, models)


def summarise_compare(got: dict, models: tuple[str, ...]) -> dict:
    """`compare`'s table from its rounds: ``got = {"old"|"new": [{model: {"wall_ms", "cpu_ms"}}
    per process]}``."""
    table = {}
    for m in models:
        row = {}
        for which in ("old", "new"):
            for key in ("wall_ms", "cpu_ms"):
                vals = [r[m][key] for r in got[which]]
                row[f"{which}_{key}"] = statistics.median(vals)
                row[f"{which}_{key}_min"] = min(vals)
            base = HYBRID_BASE.get(m)
            if base in models:
                row[f"{which}_of_base"] = statistics.median(
                    r[base]["cpu_ms"] / r[m]["cpu_ms"] for r in got[which])
        row["speedup_wall"] = row["old_wall_ms"] / row["new_wall_ms"]
        row["speedup_cpu"] = row["old_cpu_ms"] / row["new_cpu_ms"]
        row["speedup_cpu_min"] = row["old_cpu_ms_min"] / row["new_cpu_ms_min"]
        table[m] = row
    return table


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case")
    ap.add_argument("--compile-case")
    ap.add_argument("--compile", action="store_true", help="eager against torch.compile")
    ap.add_argument("--grouped-case")
    ap.add_argument("--grouped", action="store_true",
                    help="batch 32 x G against G steps of batch 32 (grouped seeds' upper bound)")
    ap.add_argument("--groups", default=",".join(map(str, GROUPS)))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--old")
    ap.add_argument("--new", default=".")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--steps", type=int, default=20, help="timed steps per process")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before them")
    args = ap.parse_args(argv)
    if args.case:
        print(json.dumps(_case(args.case, args.steps, args.warmup)))
        return
    if args.compile_case:
        print(json.dumps(_compile_case(args.compile_case)))
        return
    groups = tuple(int(g) for g in args.groups.split(","))
    if args.grouped_case:
        print(json.dumps(_grouped_case(args.grouped_case, groups, args.rounds)))
        return
    models = tuple(args.models.split(","))
    if args.grouped:
        _print_grouped(compare_grouped(args.new, args.reps, models, groups, args.rounds))
        return
    if args.compile:
        _print_compile(compare_compile(args.new, args.reps, models))
        return
    if not args.old:
        ap.error("--old TREE is required (a checkout of the code to compare with)")
    table = compare(args.old, args.new, args.reps, models, args.steps, args.warmup)
    print(f"{'model':<12} {'old ms':>8} {'new ms':>8} {'old/new':>8}   {'old cpu':>8} "
          f"{'new cpu':>8} {'old/new':>8}   {'min old':>8} {'min new':>8} {'old/new':>8}")
    for m, r in table.items():
        print(f"{m:<12} {r['old_wall_ms']:8.1f} {r['new_wall_ms']:8.1f} {r['speedup_wall']:7.2f}x"
              f"   {r['old_cpu_ms']:8.1f} {r['new_cpu_ms']:8.1f} {r['speedup_cpu']:7.2f}x"
              f"   {r['old_cpu_ms_min']:8.1f} {r['new_cpu_ms_min']:8.1f}"
              f" {r['speedup_cpu_min']:7.2f}x")
    for side in ("old", "new"):
        for hyb, base in HYBRID_BASE.items():
            if f"{side}_of_base" in table.get(hyb, {}):
                print(f"{side}: {hyb} at {table[hyb][f'{side}_of_base']:.2f}x of {base} "
                      "(cpu ms, same process, median over rounds)")
    print(json.dumps(table))


if __name__ == "__main__":
    main(sys.argv[1:])
