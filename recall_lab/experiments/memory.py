"""A report row's layer measured as a memory, outside training (`report --memory`, `place`): its
constructed capacities (mixers/memory.py's no-decay construction, random and designed keys)
with the frontier's Wilson range, and the information bound of Cor. 3.1 for the whole model.

- **Which layer**: the row's model is rebuilt from its config (as `state.py` does); every block
  must offer `memory_spec()` (mixers/memory.py) and carry no sparse branch. Blocks whose layer
  holds no pair at query time (a short window: `memory_spec()` is None) are passed over, so
  Based's row is its Taylor layer. The blocks left must share one spec. Otherwise the row is
  "n/a" (a layer with no hook, a branch's slots, layers that differ) or, where the state grows
  with the sequence, "-" (attention).
- **Capacity**: per n, 20 seeds of 512 tables each; a seed is solved at mean accuracy >= 0.95;
  the capacity is the largest n with >= 10 of 20 seeds solved, its range the largest n whose
  seeds' Wilson 95% interval lies at or above one half, and the largest whose interval reaches
  it (as the trained frontier's range, `stats.frontier_range`). Each is found by doubling then
  bisection on n (`largest_passing`), which assumes the seeds solved fall as n grows; at each n
  the seeds run in order only until the question asked there is settled (10 solved, or too few
  left to reach 10); the counts so evaluated are kept in `Capacity.counts`.
- **Information bound**: the largest n with b >= n log2 |V|, b = the whole model's state (every
  layer's recurrent state and convolution caches, as Cor. 3.1 counts it) times `BITS` bits a
  number. At float32 it is loose: it counts every bit as usable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from recall_lab.experiments import stats
from recall_lab.experiments.grid import format_value, group_label, numeric
from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.memory import KEY_SETS, MemorySpec, solved_seeds, spec_of
from recall_lab.models.registry import build_model
from recall_lab.models.state import state_count
from recall_lab.runs import run_config_from_json

SEEDS = 20
TABLES = 512
N_VALUES = 16
BITS = 32  # bits per number in the information bound (float32)
N_MAX = 4096  # the largest table searched


def largest_passing(passes: Callable[[int], bool], start: int, n_max: int,
                    resolution: int = 1) -> tuple[int, bool]:
    """The largest n in [1, n_max] with passes(n), by doubling from `start` then bisection;
    exact when passes is a step function (true up to some n, false after) and `resolution` is 1
    (else within 1/resolution of n, relative, below it). Returns (n, censored): censored when
    n_max itself passes. passes(1) is taken as true."""
    lo, hi = 1, max(2, min(start, n_max))
    while passes(hi):
        lo = hi
        if hi >= n_max:
            return n_max, True
        hi = min(n_max, 2 * hi)
    while hi - lo > (max(1, lo // resolution) if resolution > 1 else 1):  # passes(lo) only
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return lo, False


@dataclass
class Capacity:
    """One key set's constructed capacity: the largest n with >= half the seeds solved (0: not
    even n = 1), its Wilson range, and the seeds solved at every n evaluated."""

    keys: str
    n: int
    lo: int
    hi: int
    censored: bool  # n_max itself solved: n is a lower bound
    hi_censored: bool = False  # likewise for the range's upper end
    seeds: int = SEEDS
    # n -> [seeds solved, seeds evaluated]: seeds run in order only until the search's question
    # at n is settled, so fewer than `seeds` may have run there
    counts: dict[int, list[int]] = field(default_factory=dict)

    def text(self) -> str:
        more, hi_more = (">" if self.censored else ""), (">" if self.hi_censored else "")
        return f"{more}{self.n} [{self.lo}, {hi_more}{self.hi}]"


def capacity(spec: MemorySpec, keys: str = "random", seeds: int = SEEDS, tables: int = TABLES,
             n_max: int = N_MAX) -> Capacity:
    """The construction's capacity under `spec` with `keys` (module docstring)."""
    if keys not in KEY_SETS:
        raise RecallLabError(f"keys must be one of {list(KEY_SETS)}, got {keys!r}")
    outcomes: dict[int, list[bool]] = {}  # per n, the seeds evaluated so far, in seed order

    def at_least(n: int, need: int) -> bool:
        """Do >= `need` of the seeds solve n? Seeds run in order until the answer is known."""
        done = outcomes.setdefault(n, [])
        while sum(done) < need <= sum(done) + seeds - len(done):
            with torch.random.fork_rng(devices=[]):
                done.append(solved_seeds(spec, n, keys, 1, tables, first=len(done))[0])
        return sum(done) >= need

    def search(need: int, start: int) -> tuple[int, bool]:
        if not at_least(1, need):
            return 0, False
        return largest_passing(lambda n: at_least(n, need), start, n_max)

    # the seeds solved that the three questions need: >= half; a Wilson interval at or above
    # one half; one that reaches it
    rates = [stats.wilson(k, seeds) for k in range(seeds + 1)]
    half = math.ceil(seeds / 2)
    k_lo = next((k for k, r in enumerate(rates) if r.lo >= 0.5), seeds + 1)
    k_hi = next((k for k, r in enumerate(rates) if r.hi >= 0.5), seeds + 1)
    n, censored = search(half, max(2, spec.heads * spec.key_width))
    lo, _ = search(k_lo, max(2, n))
    hi, hi_censored = search(k_hi, max(2, n))
    counts = {m: [sum(o), len(o)] for m, o in sorted(outcomes.items())}
    return Capacity(keys, n, lo, hi, censored, hi_censored, seeds, counts)


def information_bound(numbers: float, bits: int = BITS, values: int = N_VALUES) -> int:
    """The largest n with numbers * bits >= n log2 |V| (Cor. 3.1's b >= n log2 |V|)."""
    return int(numbers * bits // math.log2(values))


def model_memory(model: torch.nn.Module) -> MemorySpec | str:
    """The one memory the model's layers write (module docstring), or why there is none:
    "n/a" (no hook, layers that differ), "excluded" (a sparse branch) or "holds no pair"."""
    specs = []
    for block in getattr(model, "blocks", []):
        mixer = getattr(block, "mixer", None)
        if getattr(block, "branch", None) is not None:
            return "excluded"  # a sparse branch's slots grow with what it keeps, not a memory
        if mixer is None:
            return "n/a"
        try:
            spec = spec_of(mixer)
        except RecallLabError:
            return "n/a"
        if isinstance(spec, str):
            return spec
        if spec is not None:
            specs.append(spec)
    if not specs:
        return "holds no pair"
    return specs[0] if len(set(specs)) == 1 else "n/a"


@dataclass
class RowMemory:
    """A row's layer as a memory: its spec (or why none), capacities, information bound."""

    spec: MemorySpec | None
    why: str | None  # "n/a", "excluded", "holds no pair", "-" (grows) where spec is None
    capacities: dict[str, Capacity] = field(default_factory=dict)
    bound: int | None = None  # the information bound over the whole model's state

    def cell(self, keys: str) -> str:
        if self.spec is None:
            return self.why or "n/a"
        return self.capacities[keys].text() if keys in self.capacities else "not measured"

    def to_json(self) -> dict:
        return {"spec": None if self.spec is None else self.spec.__dict__, "why": self.why,
                "information_bound": self.bound, "bits_per_number": BITS,
                "capacities": {k: c.__dict__ for k, c in self.capacities.items()}}


# (model table, task table) as written -> its row: a spec is measured once per report
_CACHE: dict[str, RowMemory] = {}
_SPECS: dict[MemorySpec, dict[str, Capacity]] = {}


def row_memory(tables: dict | None, seeds: int = SEEDS, tables_per_seed: int = TABLES,
               measure: bool = True) -> RowMemory:
    """A run config's (config.json's tables) layer as a memory; cached per model. Without
    `measure`, only its spec and bound (capacities "not measured"): seconds, not minutes."""
    if not isinstance(tables, dict) or not isinstance(tables.get("model"), dict):
        return RowMemory(None, "n/a")
    key = json.dumps([tables.get("model"), tables.get("task"), seeds, tables_per_seed, measure],
                     sort_keys=True, default=str)
    if key not in _CACHE:
        _CACHE[key] = _measure(tables, seeds, tables_per_seed, measure)
    return _CACHE[key]


def _measure(tables: dict, seeds: int, per_seed: int, measure: bool = True) -> RowMemory:
    try:
        cfg = run_config_from_json(tables, "run config").model
        with torch.random.fork_rng(devices=[]):
            model = build_model(cfg)
            count = state_count(model, cfg.max_len or 2048)
    except RecallLabError:
        return RowMemory(None, "n/a")
    if count.recurrent is None:
        return RowMemory(None, "-" if count.growth not in (None, "constant") else "n/a")
    found = model_memory(model)
    if isinstance(found, str):
        return RowMemory(None, found)
    numbers = count.recurrent.numbers + (count.conv.numbers if count.conv else 0)
    return RowMemory(found, None, spec_capacities(found, seeds, per_seed) if measure else {},
                     information_bound(numbers))


def spec_capacities(spec: MemorySpec, seeds: int = SEEDS, tables: int = TABLES
                    ) -> dict[str, Capacity]:
    """Both key sets' capacities of one spec (cached: rows of one layer share them)."""
    if (seeds, tables) != (SEEDS, TABLES):
        return {k: capacity(spec, k, seeds, tables) for k in KEY_SETS}
    if spec not in _SPECS:
        _SPECS[spec] = {k: capacity(spec, k) for k in KEY_SETS}
    return _SPECS[spec]


# ---- the report's section (`report --memory`) ----------------------------------------------------

NOTE = ("Each fixed-state row's layer written as a memory outside training, with no decay "
        "(`recall-lab report --memory`; the construction is defined in "
        "docs/results/memory-theory/README.md): n pairs of the row's key width and heads, values "
        "from 16 orthonormal codes, argmax readout; 20 seeds of 512 tables; a seed solves at mean "
        "accuracy >= 0.95; capacity: the largest n solved by >= 10 of 20 seeds, in brackets the "
        "Wilson range (as the trained frontier's). Random keys: Gaussian; designed keys: a "
        "low-coherence frame per head (orthonormal while n <= d_k). A trained model can learn "
        "better keys than either set, so neither is a ceiling. Information bound: the largest n "
        f"with b >= n log2 16 for the whole model's state (every layer's recurrent state and "
        f"convolution caches) at {BITS} bits a number; at float32 it is loose. n/a: a layer "
        "with no `memory_spec` hook, a sparse branch's slots, or layers that differ. Any reading "
        "of these rows is exploratory: the construction was added after the runs.")


def memory_rows(rep: dict) -> list[dict]:
    """One entry per fixed-state row of a table sweep (a group's values less task.levels): its
    state, trained frontier [range] (None while open), and `row_memory` of its runs' config."""
    rows: dict[str, list] = {}
    for g in rep["groups"]:
        size = numeric("task.levels", g.values.get("task.levels"))
        if size is None or g.state.numbers is None:
            continue
        rest = {f: v for f, v in g.values.items() if f != "task.levels"}
        rows.setdefault(group_label(rest), []).append((size, g))
    out = []
    for label, sized in rows.items():
        groups = [g for _, g in sized]
        pts = [(x, g.solved) for x, g in sized]
        open_ = any(g.counts["missing"] or not g.solved.n for g in groups)
        lo, hi = stats.frontier_range(pts)
        tables = next((r.tables for g in groups for r in g.runs if r.tables), None)
        family = format_value(groups[0].values.get("model.name", label))
        out.append({"row": label, "state": groups[0].state.text(), "family": family,
                    "state_numbers": groups[0].state.numbers,
                    "frontier": None if open_ else (stats.frontier(pts) or 0, lo, hi),
                    "memory": row_memory(tables)})
    return out


def _ratio(frontier: tuple | None, mem: RowMemory, keys: str) -> str:
    if frontier is None or mem.spec is None or not mem.capacities[keys].n:
        return "-"
    return f"{frontier[0] / mem.capacities[keys].n:.2g}"


def memory_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    head = ["row", "recurrent state per layer", "trained frontier [range]",
            "constructed, random keys [range]", "constructed, designed keys [range]",
            f"information bound ({BITS}-bit)", "trained / random", "trained / designed"]
    lines = []
    for r in rows:
        f, mem = r["frontier"], r["memory"]
        lines.append([r["row"], r["state"], "open" if f is None else f"{f[0]:g} [{f[1]:g}, "
                      f"{f[2]:g}]", mem.cell("random"), mem.cell("designed"),
                      "-" if mem.bound is None else f"{mem.bound:,}",
                      _ratio(f, mem, "random"), _ratio(f, mem, "designed")])
    return head, lines


def memory_lines(rep: dict) -> list[str]:
    """report.md's section, where the report was asked for it."""
    if not rep.get("memory"):
        return []
    head, lines = memory_table(rep["memory"])
    return ["", "## The layer as a memory (exploratory)", "", NOTE, "",
            "| " + " | ".join(head) + " |", "|" + " --- |" * len(head),
            *("| " + " | ".join(line) + " |" for line in lines)]


def memory_json(rows: list[dict]) -> list[dict]:
    return [{"row": r["row"], "state": r["state"], "state_per_layer": r["state_numbers"],
             "frontier": r["frontier"],
             **r["memory"].to_json()} for r in rows]
