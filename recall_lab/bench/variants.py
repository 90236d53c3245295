"""Where a hybrid's training step goes: the capacity config's step under variants of one model,
interleaved in one process.

    python recall_lab/bench/variants.py [--model mamba+hax] [--steps 220] [--warmup 20]

The hybrid (`mamba+hax` or `mamba2+hax`, built as `bench/steps.py` builds it: the capacity config,
one torch thread, glibc's freed-memory retention) and copies of it, each with its own AdamW, beside
its base model:

- ``hybrid``: the model as built.
- ``parts pattern``: each HAX pattern through `UnionPattern.forward` (LSH and KS on their own
  paths, then `union_indices`): what `HAXPattern`'s one native call replaced.
- ``cached pattern``: each branch's pattern returns the index list of its first call, and no
  ranking loss: the step without the pattern.
- ``scale only``: each branch returns ``xc * scale``: a branch that does nothing but exist (the
  product and its backward, the fused scan's side input and gradient).
- ``base``: the base model (`mamba` or `mamba2`).
- ``hybrid, batch 1`` and ``base, batch 1``: copies of those two stepping the first sample of each
  batch instead of all 32: the per-token work nearly gone, what is left is the step's floor
  (Python, autograd, the op dispatch and allocations, AdamW over the same parameters), which no
  faster kernel removes. Their line also gives that floor's share of the batch-32 step.

Every step goes round the variants, the one that goes first moving by one each step, so that a
slower or faster spell of a shared machine falls on all of them alike. Per variant: CPU ms per step
(process time) after `--warmup` steps, its median, 10th percentile and minimum, and the base's
median over its own. On this lab's 2-core VM the step moves by +-10-20% between processes, so only
the ratios of one run mean anything (docs/performance.md, "The HAX pattern in one call").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import types

from recall_lab.bench.steps import HYBRID_BASE as BASES  # hybrid -> its base model

VARIANTS = ("hybrid", "parts pattern", "cached pattern", "scale only", "base", "hybrid, batch 1",
            "base, batch 1")
ONE = ", batch 1"  # the suffix of the batch-1 copies


def _branches(model) -> list:
    return [m for m in model.modules() if type(m).__name__ == "SparseBranch"]


def _parts_pattern(branch) -> None:
    from recall_lab.attention.base import UnionPattern

    pattern = branch.pattern
    pattern.forward = types.MethodType(UnionPattern.forward, pattern)


def _cached_pattern(branch) -> None:
    import torch

    pattern, cache = branch.pattern, {}

    def forward(q, k, v=None, **ids):
        if "idx" not in cache:
            with torch.no_grad():
                cache["idx"] = pattern(q, k, v, **ids)[0]
        return cache["idx"], None

    # a plain function attribute: the module keeps its parameters (AdamW steps them, as in the
    # hybrid), only the call changes
    branch.__dict__["pattern"] = forward


def _scale_only(branch) -> None:
    def forward(self, xc, aux=None, ids=None):
        return xc * self.scale

    branch.forward = types.MethodType(forward, branch)


EDITS = {"parts pattern": _parts_pattern, "cached pattern": _cached_pattern,
         "scale only": _scale_only}


def variant_models(name: str) -> dict:
    """variant -> (config, model, its fixed batches), every hybrid variant a copy of one model."""
    import copy

    from recall_lab.bench.steps import setup_case

    if name not in BASES:
        raise SystemExit(f"--model must be one of {', '.join(BASES)}, got {name!r}")
    cfg, model, batches = setup_case(name)
    out = {"hybrid": (cfg, model, batches)}
    for variant, edit in EDITS.items():
        m = copy.deepcopy(model)
        for branch in _branches(m):
            edit(branch)
        out[variant] = (cfg, m, batches)
    out["base"] = setup_case(BASES[name])
    for v in ("hybrid", "base"):
        cfg, m, batches = out[v]
        out[v + ONE] = (cfg, copy.deepcopy(m), [(x[:1], y[:1]) for x, y in batches])
    return out


def run(name: str, steps: int = 220, warmup: int = 20) -> dict:
    """Per variant: CPU ms per step (median, p10, min over the timed steps) and base / this; a
    batch-1 copy also its share of its batch-32 model's median (`of_batch_32`)."""
    from recall_lab.bench.steps import step_optimizer
    from recall_lab.train import objective

    runs = {v: (cfg, m, b, *step_optimizer(m, cfg)) for v, (cfg, m, b) in
            variant_models(name).items()}
    times: dict = {v: [] for v in runs}
    order = list(runs)
    for i in range(warmup + steps):
        for v in order[i % len(order):] + order[:i % len(order)]:
            cfg, m, batches, opt, finish = runs[v]
            x, y = batches[i % len(batches)]
            c0 = time.process_time()
            loss = objective(m(x), y, cfg.train.alpha)[0]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            finish()
            if i >= warmup:
                times[v].append((time.process_time() - c0) * 1e3)
    base = statistics.median(times["base"])
    table = {}
    for v, ms in times.items():
        ms = sorted(ms)
        med = statistics.median(ms)
        table[v] = {"cpu_ms": med, "p10_ms": ms[len(ms) // 10], "min_ms": ms[0],
                    "base_over_this": base / med}
    for v in table:
        if v.endswith(ONE):
            table[v]["of_batch_32"] = table[v]["cpu_ms"] / table[v.removesuffix(ONE)]["cpu_ms"]
    return table


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mamba+hax", help=" or ".join(BASES))
    ap.add_argument("--steps", type=int, default=220, help="timed steps per variant")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps before them")
    args = ap.parse_args(argv)
    table = run(args.model, args.steps, args.warmup)
    print(f"{args.model}: CPU ms per step over {args.steps} steps, variants interleaved")
    print(f"{'variant':<16} {'median':>8} {'p10':>8} {'min':>8} {'base/this':>10} "
          f"{'of batch 32':>12}")
    for v, r in table.items():
        share = f"{r['of_batch_32']:11.1%}" if "of_batch_32" in r else f"{'-':>11}"
        print(f"{v:<16} {r['cpu_ms']:8.2f} {r['p10_ms']:8.2f} {r['min_ms']:8.2f} "
              f"{r['base_over_this']:9.3f}x {share}")
    print(json.dumps(table))


if __name__ == "__main__":
    main(sys.argv[1:])
