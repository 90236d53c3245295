"""`forgetting-mqar` against zoology's own generator (`zoology.data.forgetting_mqar`), on fixed
configurations: the marginal distributions (key and value ranges, updates per row, the gap
histogram and the mean gap of each key by its place in the original block), the label rule
applied example by example to both generators' rows, and the rates at which an update rewrites a
key's original value and a random filler id repeats a key of the row.

zoology is not a dependency of the lab. With a checkout of zoology on the path:

    PYTHONPATH=/path/to/zoology python -m recall_lab.generators.forgetting_audit --out DIR

writes `comparison.json` and `output.txt` (what it prints) into DIR; tests/generators/
test_forgetting_zoology.py runs the same comparison where zoology imports. zoology's generator
returns torch tensors; they are read as numpy arrays here (this module imports no torch).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from recall_lab.generators.forgetting import forgetting_mqar
from recall_lab.generators.tasks import IGNORE

# The configurations compared: zoology's defaults (ForgettingMQARConfig: 8 pairs, 4 updates) at
# its vocabulary and first training length, and the overwrite tables' two settings
CONFIGS = (
    {"vocab_size": 8192, "input_seq_len": 64, "num_kv_pairs": 8, "num_updates": 4},
    {"vocab_size": 64, "input_seq_len": 40, "num_kv_pairs": 8, "num_updates": 4},
    {"vocab_size": 64, "input_seq_len": 48, "num_kv_pairs": 8, "num_updates": 8},
)
POWER_A = 0.01


def label_rule(inputs: np.ndarray, num_kv_pairs: int, num_updates: int) -> np.ndarray:
    """The targets the task's rule gives rows drawn without random filler: at every non-zero id
    of the query region, the value written after that key's last occurrence among the writes;
    -100 elsewhere (and where the id is no key of the row)."""
    n, L = inputs.shape
    ctx = 2 * (num_kv_pairs + num_updates)
    out = np.full((n, L), IGNORE, dtype=np.int64)
    for r in range(n):
        last = {}
        for j in range(0, ctx, 2):
            last[int(inputs[r, j])] = int(inputs[r, j + 1])
        for p in range(ctx, L):
            t = int(inputs[r, p])
            if t != 0 and t in last:
                out[r, p] = last[t]
    return out


def marginals(inputs: np.ndarray, labels: np.ndarray, num_kv_pairs: int,
              num_updates: int, vocab_size: int) -> dict:
    """The distributions the comparison reads from rows of either generator."""
    k, m = num_kv_pairs, num_updates
    n, L = inputs.shape
    ctx = 2 * (k + m)
    space = (L - ctx) // 2
    keys, first = inputs[:, 0 : 2 * k : 2], inputs[:, 1 : 2 * k : 2]
    ukeys, new = inputs[:, 2 * k : ctx : 2], inputs[:, 2 * k + 1 : ctx : 2]
    rows, pos = np.nonzero(labels != IGNORE)
    gap = (pos - ctx) // 2
    per_row = np.bincount(rows, minlength=n)
    # each key's place in the original block, and its gap
    where = {(int(r), int(t)): i for r in range(n) for i, t in enumerate(keys[r])}
    place = np.array([where.get((int(r), int(inputs[r, p])), -1) for r, p in zip(rows, pos,
                                                                                strict=True)])
    mean_gap = [float(gap[place == i].mean()) if (place == i).any() else None for i in range(k)]
    orig_of = np.array([[first[r][list(keys[r]).index(t)] if t in keys[r] else -1
                         for t in ukeys[r]] for r in range(n)]).reshape(n, m)
    others = [[int(v) for i, v in enumerate(first[r]) if keys[r][i] != u]
              for r in range(n) for u in ukeys[r]]
    flat_new = new.reshape(-1)
    filler = np.zeros(inputs.shape, dtype=bool)
    filler[:, ctx:] = labels[:, ctx:] == IGNORE
    in_row = np.array([[bool(t in set(keys[r].tolist())) for t in inputs[r]] for r in range(n)])
    half = vocab_size // 2
    return {
        "rows": n,
        "key_range": [int(keys.min()), int(keys.max())],
        "update_key_range": [int(ukeys.min()), int(ukeys.max())] if m else None,
        "value_range": [int(first.min()), int(first.max())],
        "update_value_range": [int(new.min()), int(new.max())] if m else None,
        "keys_in_lower_half": bool(((keys >= 1) & (keys < half)).all()),
        "values_in_upper_half": bool(((first >= half) & (first < vocab_size)).all()
                                     and ((new >= half) & (new < vocab_size)).all()),
        "distinct_keys_per_row": bool(all(len(set(r)) == k for r in keys.tolist())),
        "distinct_original_values_per_row": bool(all(len(set(r)) == k
                                                     for r in first.tolist())),
        "updates_per_row": sorted({len(set(r)) for r in ukeys.tolist()}),
        "update_keys_are_row_keys": bool((orig_of >= 0).all()),
        "queries_per_row": sorted(set(per_row.tolist())),
        "gap_histogram": (np.bincount(gap, minlength=space) / n).round(4).tolist(),
        "mean_gap_by_key_place": [None if g is None else round(g, 3) for g in mean_gap],
        "update_equals_own_original": float((new == orig_of).mean()) if m else 0.0,
        "update_equals_another_keys_value": float(np.mean([int(v) in o for v, o in
                                                           zip(flat_new, others, strict=True)]))
        if m else 0.0,
        "filler_ids_that_are_row_keys": float(in_row[filler].mean()) if filler.any() else 0.0,
        "rows_with_a_filler_row_key": float((in_row & filler).any(axis=1).mean()),
    }


def draw_lab(config: dict, n: int, seed: int, random_non_queries: bool):
    x, y = forgetting_mqar(n, np.random.SeedSequence(seed), power_a=POWER_A,
                           random_non_queries=random_non_queries, **config)
    return x, y


def draw_zoology(fn: Callable, config: dict, n: int, seed: int, random_non_queries: bool):
    """zoology's rows: its own seeding (np.random.seed(seed)); its random filler comes from
    torch's global generator, which its `seed` does not set: seeded here through zoology's
    module (`fn.__globals__['torch']`) so the record repeats."""
    torch = fn.__globals__.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
    seg = fn(num_examples=n, seed=seed, power_a=POWER_A, random_non_queries=random_non_queries,
             **config)
    return np.asarray(seg.inputs, dtype=np.int64), np.asarray(seg.labels, dtype=np.int64)


def compare(zoology_fn: Callable, config: dict, n: int = 2000, seed: int = 0) -> dict:
    """Both generators on one configuration: their marginals (filler off, and the filler rates
    with it on), the label rule example by example, and the largest gap-histogram difference."""
    k, m = config["num_kv_pairs"], config["num_updates"]
    out: dict = {"config": {**config, "power_a": POWER_A}, "rows": n, "seed": seed}
    sides = {}
    for name, draw in (("lab", lambda r: draw_lab(config, n, seed, r)),
                       ("zoology", lambda r: draw_zoology(zoology_fn, config, n, seed, r))):
        x, y = draw(False)
        rule = label_rule(x, k, m)
        stats = marginals(x, y, k, m, config["vocab_size"])
        stats["label_rule_examples_equal"] = int((rule == y).all(axis=1).sum())
        xf, yf = draw(True)
        noisy = marginals(xf, yf, k, m, config["vocab_size"])
        stats["with_random_filler"] = {key: noisy[key] for key in
                                       ("filler_ids_that_are_row_keys",
                                        "rows_with_a_filler_row_key")}
        sides[name] = stats
    out.update(sides)
    h_lab = np.array(sides["lab"]["gap_histogram"])
    h_zoo = np.array(sides["zoology"]["gap_histogram"])
    out["gap_histogram_max_difference"] = round(float(np.abs(h_lab - h_zoo).max()), 4)
    g_lab = np.array(sides["lab"]["mean_gap_by_key_place"], dtype=float)
    g_zoo = np.array(sides["zoology"]["mean_gap_by_key_place"], dtype=float)
    out["mean_gap_by_key_place_max_difference"] = round(float(np.abs(g_lab - g_zoo).max()), 3)
    return out


# marginals that must be equal (the ranges' ends are sample extremes: printed, not compared)
SAME = ("keys_in_lower_half", "values_in_upper_half", "distinct_keys_per_row",
        "distinct_original_values_per_row", "updates_per_row", "update_keys_are_row_keys",
        "queries_per_row")


def render(results: list[dict]) -> str:
    """The comparison as plain lines (<= 100 columns)."""
    lines = []
    for res in results:
        c = res["config"]
        lines.append(f"vocab_size {c['vocab_size']}, input_seq_len {c['input_seq_len']}, "
                     f"num_kv_pairs {c['num_kv_pairs']}, num_updates {c['num_updates']}, "
                     f"power_a {c['power_a']}: {res['rows']} rows each (seed {res['seed']})")
        lab, zoo = res["lab"], res["zoology"]
        for key in SAME:
            mark = "" if lab[key] == zoo[key] else "   (differ)"
            lines.append(f"  {key}: lab {lab[key]}, zoology {zoo[key]}{mark}")
        for key in ("key_range", "update_key_range", "value_range", "update_value_range"):
            lines.append(f"  {key} (smallest, largest id drawn): lab {lab[key]}, "
                         f"zoology {zoo[key]}")
        lines.append(f"  label rule, examples equal: lab {lab['label_rule_examples_equal']}/"
                     f"{res['rows']}, zoology {zoo['label_rule_examples_equal']}/{res['rows']}")
        lines.append(f"  gap histogram: largest difference per gap "
                     f"{res['gap_histogram_max_difference']}")
        lines.append(f"  mean gap by key place: largest difference "
                     f"{res['mean_gap_by_key_place_max_difference']}")
        for key in ("update_equals_own_original", "update_equals_another_keys_value"):
            lines.append(f"  {key}: lab {lab[key]:.4f}, zoology {zoo[key]:.4f}")
        for key in ("filler_ids_that_are_row_keys", "rows_with_a_filler_row_key"):
            lines.append(f"  {key} (random filler): lab {lab['with_random_filler'][key]:.4f}, "
                         f"zoology {zoo['with_random_filler'][key]:.4f}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    from zoology.data.forgetting_mqar import forgetting_mqar as zoology_fn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--zoology-commit", default=None, help="recorded with the results")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    results = [compare(zoology_fn, c, args.rows, args.seed) for c in CONFIGS]
    text = render(results)
    if args.zoology_commit:
        text = f"zoology at commit {args.zoology_commit}\n" + text
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"zoology_commit": args.zoology_commit, "numpy": np.__version__,
              "comparisons": results}
    (args.out / "comparison.json").write_text(json.dumps(record, indent=1) + "\n")
    (args.out / "output.txt").write_text(text)
    print(text, end="")
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
