"""Place one mixer on the recall-against-state frontier: the reference's protocol run for it
(`recall-lab place`, `rl.place`), claims written before its first run, cells stopped once their
verdicts are settled, and the answer set beside the reference's rows.

The protocol is the reference's (`reference.py`: by default the zoo-frontier's shipped records):
its tables with their step budgets, width, recipe, evaluation, seeds and solve threshold, its lr
pilot's written rule and its cut rule. Everything runs through the lab's one way to run an
experiment: two experiments built here as tables and run by the sweep engine into the placement
folder (`OUT/place-LABEL-HASH/`): `pilot/` (the pilot's lrs at its table and seed) and `cells/`
(every table x seed at the picked lr). A run's config is the reference experiment's base tables
with the model table replaced by the mixer's, so a reference row placed again gets the same
configs and hashes as its archived runs (trained afresh in its own folder).

Order of work, each step resumable (finished runs are skipped, interrupted ones resume):
1. Bad input is refused before anything is written: a mixer its class does not build with the
   kwargs, an unknown table, a reference folder without records or protocol, a mixer that
   cannot run forward and backward at the longest table's length (`try_longest`, in
   `--dry-run` too); and (unless `check=False`) a mixer that fails a correctness row of
   `recall-lab check`.
2. The plan and its claims are written (`place.json`) and recorded (`claims.json`, as `sweep`
   records them) before the pilot's first run. Per table, the mixer's seeds solved against the
   reference rows nearest below and above it in recurrent state per layer (`state.run_state`),
   among the rows with finished cells at that table; a mixer whose state grows with the sequence
   (or is unknown) against the rows whose state grows (attention). Each is a three-way verdict
   (`verdicts.three_way`): more, fewer (one-sided Fisher at the protocol's level), or not
   separable. The frontier (largest table solved in at least half the seeds) with its Wilson
   range against the same neighbours' (`verdicts.frontier_compare`).
3. The pilot picks the lr by the rule; then the cells run in rounds. Before each round a cell
   stops launching seeds once none of its claims is open (`three_way` settled: no outcome of
   its remaining seeds changes any verdict) and, at the table the cut rule reads, the cut is
   decided; a table the cut rule skips runs only once the mixer's count allows it. Each round
   launches the next seeds of every open cell (at least `workers` runs in all).
4. The answer (`write_answer`): report.md, place.json, the row in the reference table's format,
   two figures (`place_plots.py`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from recall_lab import checkpoint as ck
from recall_lab.experiments import claims as prereg
from recall_lab.experiments import stats
from recall_lab.experiments.engine import Monitor, read_index, run_sweep
from recall_lab.experiments.grid import (
    Experiment,
    expand,
    flatten,
    format_value,
    group_label,
)
from recall_lab.experiments.lr_rules import PILOT_SEEDS, boundary_table, pilot_lines, pilot_rule_2
from recall_lab.experiments.memory import row_memory
from recall_lab.experiments.place_plots import place_figures
from recall_lab.experiments.records import write_placement_record
from recall_lab.experiments.reference import (
    SHIPPED,
    SHIPPED_REFERENCES,
    Protocol,
    open_reference,
    pick_lr,
    read_protocol,
)
from recall_lab.experiments.report import Group, RunRecord, aggregate, load_runs, run_binding
from recall_lab.experiments.state import LayerState, common_state, run_state
from recall_lab.experiments.timing import time_text, total_time
from recall_lab.experiments.verdicts import (
    NOT_DECIDABLE,
    censored_ranges,
    free_tables,
    frontier_compare,
    frontier_points,
    range_verdict,
    table_size,
    three_way,
)
from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers import mixer_label
from recall_lab.models.registry import build_model, listed_models
from recall_lab.runs import run_config_from_json
from recall_lab.testing import resolve_target, run_checks

PLAN = "place.json"
ANSWER = "answer.json"
ROW_KEY = "place.row"
ATTENTION = "attention (state grows with the sequence)"


@dataclass
class Row:
    """One reference row: its cells by table size, its state per layer, its lr."""

    label: str
    cells: dict[float, Group] = field(default_factory=dict)
    state: LayerState | None = None
    lr: float | None = None
    mixer: bool = False
    # its state at each table: one count for a fixed state; a "log L" row's grows with the
    # table's length (`state` is then its count at the longest table it ran)
    states: dict[float, LayerState] = field(default_factory=dict)
    kwargs: dict = field(default_factory=dict)  # its mixer's kwargs (a mixer row's), as run

    @property
    def name(self) -> str:
        """The row as claims and dry runs name it: its label with every kwarg of its mixer that
        the label leaves out (a label names only what varies among the reference's rows), so
        each row reads as "rwkv7 / head_size=4", "deltanet / expand_k=0.25 / num_heads=4"."""
        have = {part.split("=", 1)[0] for part in self.label.split(" / ")[1:]}
        extra = [f"{k.rsplit('.', 1)[-1]}={format_value(v)}"
                 for k, v in flatten(self.kwargs).items() if k.rsplit(".", 1)[-1] not in have]
        return " / ".join([self.label, *extra])

    def state_at(self, size: float | None) -> LayerState | None:
        return self.state if size is None else self.states.get(size, self.state)

    def finished(self, size: float) -> bool:
        g = self.cells.get(size)
        return g is not None and g.solved.n > 0 and not g.counts["missing"]


def _flat(cfg: dict) -> dict[str, Any]:
    out = flatten({t: cfg.get(t) or {} for t in ("model", "train", "task")})
    out["task_name"] = cfg.get("task_name")
    return out


def state_json(s: LayerState) -> dict:
    return {"numbers": s.numbers, "growth": s.growth, "text": s.text()}


# ---- the reference ------------------------------------------------------------------------------

def reference_rows(folder: Path, protocol: Protocol) -> tuple[list[Row], list[Group]]:
    """The reference's rows (the groups of its report less the table) and all its groups; each
    run's config gains the row's label under `place.row` (what the claims select)."""
    runs, _ = load_runs([folder])
    _, groups = aggregate(runs, None, protocol.metric, protocol.solve_at)
    rows: dict[str, Row] = {}
    for g in groups:
        size = protocol.size_of(g.runs[0].config)
        rest = {f: v for f, v in g.values.items()
                if f not in ("task.levels", "train.steps", *protocol.table_fields)}
        label = group_label(rest)
        row = rows.setdefault(label, Row(label))
        if size is not None:
            row.cells[size] = g
            g.size = size
            g.label = f"{label} at {size:g}"  # as the claims' details name it
        for r in g.runs:
            r.config[ROW_KEY] = label
        if row.lr is None:
            row.lr = g.best_lr
        if not row.kwargs and g.runs and isinstance(g.runs[0].tables, dict):
            row.kwargs = dict((g.runs[0].tables.get("model") or {}).get("mixer_kwargs") or {})
    for row in rows.values():
        row.states = {s: common_state(r.tables for r in g.runs) for s, g in
                      sorted(row.cells.items())}
        states = set(row.states.values())
        if len(states) == 1:
            row.state = states.pop()
        elif states and all(st.growth == "log L" for st in states):
            row.state = row.states[max(row.states)]  # as a placement's answer gives it
        else:
            row.state = LayerState(None, None)
    return list(rows.values()), groups


def state_class(state: LayerState | None) -> str:
    """How a row's state is compared: "fixed" (a count), "log L" (a count at its run's length
    that grows by a constant per doubling: log-linear attention), "grows" (no count: attention)
    or "unknown". `neighbours` reads a "log L" count as it reads a fixed one, at the length
    its runs were counted at."""
    if state is None or (state.numbers is None and not state.grows):
        return "unknown"
    if state.numbers is None:
        return "grows"
    return "log L" if state.growth == "log L" else "fixed"


def neighbours(rows: list[Row], state: LayerState, size: float | None) -> list[Row]:
    """The rows nearest below (or at) and above `state` in recurrent state per layer, among the
    rows with a finished cell at table `size` (None: the rows finished at every table they
    ran); for a state that grows or is unknown, the rows whose state grows."""
    pool = [r for r in rows if (r.finished(size) if size is not None
                                else r.cells and all(r.finished(s) for s in r.cells))]
    if state.numbers is None:
        return [r for r in pool if r.state is not None and r.state.grows]
    # a row's count at this table (a "log L" row's at the table's length; at the longest
    # table it ran for the frontier's neighbours)
    count = {r.label: st.numbers for r in pool
             if (st := r.state_at(size)) is not None and st.numbers is not None}
    fixed = [r for r in pool if r.label in count]
    below = [count[r.label] for r in fixed if count[r.label] <= state.numbers]
    above = [count[r.label] for r in fixed if count[r.label] > state.numbers]
    want = {max(below)} if below else set()
    want |= {min(above)} if above else set()
    return sorted((r for r in fixed if count[r.label] in want),
                  key=lambda r: (count[r.label], r.label))


# ---- the mixer ----------------------------------------------------------------------------------

def mixer_table(mixer: str, kwargs: dict | None) -> dict:
    """The mixer's model table: a built-in model's name (with mixer_kwargs for a zoo mixer), or
    an import path / plug-in as `mixer`."""
    table: dict[str, Any] = {"name": mixer} if mixer in listed_models() else {"mixer": mixer}
    if kwargs:
        table["mixer_kwargs"] = dict(kwargs)
    return table


def mixer_row_label(mixer: str, kwargs: dict | None) -> str:
    name = mixer if mixer in listed_models() or (":" not in mixer and "." not in mixer) \
        else mixer_label(mixer)
    parts = [name] + [f"{k}={format_value(v)}" for k, v in flatten(kwargs or {}).items()]
    return " / ".join(parts)


def cell_model(protocol: Protocol, table: dict) -> dict:
    base = dict(protocol.base["model"])
    if "name" not in table:
        base.pop("name", None)
    return {**base, **table}


def cells_experiment(protocol: Protocol, table: dict, sizes: list[float], seeds: list[int],
                     lr: float) -> Experiment:
    data = {"name": "cells", "model": cell_model(protocol, table),
            "train": {**protocol.base["train"], "lr": lr}, "task": dict(protocol.base["task"]),
            "grid": {"train.seed": seeds},
            "link": [protocol.link(sizes)],
            "report": {"metric": protocol.metric, "solve_at": protocol.solve_at}}
    return expand(data, "cells")


def pilot_experiment(protocol: Protocol, table: dict, lrs: list[float] | None = None
                     ) -> Experiment:
    """The pilot's runs: its lrs (`lrs`: a grid pilot rule 2 extended) at its table and seed;
    under pilot rule 2 its seeds are an axis too (rule 1's runs keep their configs)."""
    p = protocol.pilot
    grid: dict[str, list] = {"train.lr": list(lrs or p["lrs"])}
    if p.get("rule", 1) == 2:
        grid["train.seed"] = list(p["seeds"])
    data = {"name": "pilot", "model": cell_model(protocol, table),
            "train": {**protocol.base["train"], "steps": p["steps"], "seed": p["seed"]},
            "task": protocol.task_of(p["size"]),
            "grid": grid,
            "report": {"metric": "valid.acc", "solve_at": protocol.solve_at}}
    return expand(data, "pilot")


def records(exp: Experiment, root: Path) -> list[RunRecord]:
    """The experiment's runs as report records, from what is on disk (no index needed): done
    (summary.json), failed (the index says so) or missing."""
    folder = Path(root) / exp.name
    index = read_index(folder) or {}
    entries = {e.get("name"): e for e in index.get("runs", []) if isinstance(e, dict)}
    out = []
    for run in exp.runs:
        path = folder / run.name
        summary = (ck.read_json(path / ck.SUMMARY, "run summary")
                   if (path / ck.SUMMARY).is_file() else None)
        e = entries.get(run.name, {})
        status = "done" if summary else "failed" if e.get("status") == "failed" else "missing"
        cfg = run.config.to_json()
        out.append(RunRecord(run.name, path, status, _flat(cfg), summary, e.get("error"),
                             e.get("registration"), e.get("launched"), cfg, run_binding(path)))
    return out


# ---- claims -------------------------------------------------------------------------------------

def table_name(size: float, protocol: Protocol) -> str:
    t = protocol.table(size)
    if t.name is not None:
        return t.name
    return f"{size:g} pairs" if t.levels is not None and len(t.levels) == 1 else f"table {size:g}"


def _who(row: Row, size: float | None = None) -> str:
    state = row.state_at(size)
    return f"{row.name} ({state.text() if state else '-'} per layer)"


def make_claims(label: str, state: LayerState, rows: list[Row], sizes: list[float],
                protocol: Protocol, states: dict[float, LayerState] | None = None
                ) -> list[dict]:
    """The claims, as data, before any run: per table, the mixer's seeds solved against each
    neighbour (three-way), and the frontier's range against the frontier neighbours'. `state`
    is the mixer's state at the longest table; a state that grows as log L (`states`: its
    count at each table's length) meets, at each table, the fixed-state rows nearest its count
    at that table's length, and the frontier's neighbours at the longest table's count."""
    me = f"placed: {label}"
    claims = []
    log_l = state_class(state) == "log L" and states is not None
    for size in sizes:
        here = states.get(size, state) if log_l else state
        for nb in neighbours(rows, here, size):
            if state.numbers is None:
                where = ("beside (both grow with the sequence)" if state.grows else
                         "whose state grows (attention: this mixer's state is unknown), beside")
            else:
                where = ("at or below" if nb.state_at(size).numbers <= here.numbers
                         else "above")
            mine = (f"{here.text()} per layer, its count at this table's length"
                    if log_l else f"{state.text()} per layer")
            claims.append({
                "claim": (f"at {table_name(size, protocol)}: seeds solved by {label} "
                          f"({mine}) against {_who(nb, size)}, the nearest row "
                          f"{where} it in recurrent state: more, fewer (one-sided Fisher at "
                          f"{protocol.level:g}) or not separable"),
                "kind": "solved", "size": size, "a": {ROW_KEY: me}, "b": {ROW_KEY: nb.label},
                "at": protocol.at(size), "level": protocol.level})
    for nb in neighbours(rows, state, None):
        claims.append({
            "claim": (f"frontier (largest table solved in at least half the seeds) of "
                      f"{label}"
                      + (f" ({state.text()} per layer at the longest table)" if log_l else "")
                      + f", the range its seeds' Wilson intervals allow, against "
                      f"{_who(nb)}'s: beyond, short of, or not separable"),
            "kind": "frontier", "a": {ROW_KEY: me}, "b": {ROW_KEY: nb.label}})
    return claims


DECIDABLE = "decidable with these tables"


def _outcomes(n: int) -> list[stats.SolveRate]:
    """The outcomes of a cell of `n` seeds as the frontier reads them (its Wilson interval at or
    above half, across it, below it): one seed count of each class that `n` seeds can reach."""
    found: dict[tuple[bool, bool], stats.SolveRate] = {}
    for k in range(n + 1):
        r = stats.wilson(k, n)
        found.setdefault((r.lo >= 0.5, r.hi >= 0.5), r)
    return list(found.values())


def _frontier_verdicts(sizes: list[float], unrun: list[float], b_range: tuple[float, float],
                       n: int) -> set[str]:
    """The verdicts against a row of frontier range `b_range` that some outcome of `n` seeds at
    each of `sizes` decides, whatever the `unrun` tables would have given."""
    import itertools

    found: set[str] = set()
    for combo in itertools.product(_outcomes(n), repeat=len(sizes)):
        pts = list(zip(sizes, combo, strict=True))
        verdicts = {range_verdict(r, b_range)
                    for r in censored_ranges(pts, free_tables(pts, unrun))}
        if len(verdicts) == 1:
            found |= verdicts
    return found


def decidability(claim: dict, rows: list[Row], protocol: Protocol, sizes: list[float],
                 seeds: int) -> str:
    """Before any run: whether the placement's tables (`sizes`, `seeds` each) can decide the
    claim. A claim at one table is decidable (the mixer runs there; a table the cut rule skips
    only where the rule runs it). A frontier claim is decidable where some outcome of the
    tables that run gives one verdict whatever the tables not run would give
    (`verdicts.frontier_compare`'s rule); "only as ..." where some verdicts need more tables;
    "not decidable with these tables" where none can be reached."""
    if claim["kind"] == "solved":
        cut = protocol.cut
        if cut and claim["size"] in cut["skip"]:
            return (f"{DECIDABLE} if the cut rule runs {table_name(claim['size'], protocol)} "
                    f"(at least {cut['at_least']} of the seeds solve "
                    f"{table_name(cut['size'], protocol)})")
        return DECIDABLE
    row = next((r for r in rows if r.label == claim["b"][ROW_KEY]), None)
    if row is None:
        return NOT_DECIDABLE
    b_range = stats.frontier_range(frontier_points(list(row.cells.values())))
    every = [t.size for t in protocol.tables]
    unrun = [s for s in every if s not in sizes]
    here = _frontier_verdicts(sizes, unrun, b_range, seeds)
    if not here:
        return NOT_DECIDABLE
    full = _frontier_verdicts(every, [], b_range, seeds) if unrun else here
    if here >= full:
        return DECIDABLE
    order = ("beyond", "not separable", "short of")
    return (f"{DECIDABLE} only as {' or '.join(v for v in order if v in here)} "
            f"({' or '.join(v for v in order if v in full - here)} needs table"
            f"{'s' if len(unrun) > 1 else ''} {', '.join(f'{u:g}' for u in unrun)})")


def reference_name(reference: str | Path | None, protocol: Protocol) -> str:
    """What the placement is against, as a user named it: a shipped reference's name (the
    default's too), or a folder with the protocol's experiment name."""
    if reference is None:
        return SHIPPED
    if str(reference) in SHIPPED_REFERENCES and not Path(reference).is_dir():
        return str(reference)
    return f"{reference} ({protocol.name})"


# ---- settlement: which cells still launch seeds -------------------------------------------------

@dataclass
class Cell:
    size: float
    group: Group | None
    status: str  # "open", "settled", "complete", "cut", "waiting" (for the cut)
    reason: str
    verdicts: list[dict]
    todo: list[int]  # seeds not yet run


def _cut_decision(protocol: Protocol, cells: dict[float, Group]) -> str | None:
    """"run", "cut" or None (not decided yet) for the tables the cut rule skips."""
    cut = protocol.cut
    if cut is None:
        return "run"
    g = cells.get(cut["size"])
    if g is None:
        return None
    k, missing = g.solved.k, g.counts["missing"]
    if k >= cut["at_least"]:
        return "run"
    if k + missing < cut["at_least"]:
        return "cut"
    return None


def evaluate(mine: list[RunRecord], ref_groups: list[Group], claims: list[dict],
             protocol: Protocol, label: str, sizes: list[float] | None = None
             ) -> tuple[dict[float, Cell], list[dict], str | None]:
    """Every cell's state and every claim's verdict from the runs on disk. `sizes`: the tables
    this placement runs (None: every table of the protocol); a protocol table left out censors
    the mixer's frontier there (`verdicts.frontier_compare`'s `unrun`)."""
    for r in mine:
        r.config[ROW_KEY] = f"placed: {label}"
    runs = [r for r in mine]
    cut = None
    if runs:
        _, groups = aggregate(runs, protocol.table_fields, protocol.metric, protocol.solve_at)
    else:
        groups = []
    by_size = {protocol.size_of(g.runs[0].config): g for g in groups}
    for s, g in by_size.items():
        g.size = s
    cut = _cut_decision(protocol, by_size)
    skip = set(protocol.cut["skip"]) if protocol.cut else set()
    gates = bool(skip & set(by_size))  # a table the cut rule gates is in the plan
    if cut == "cut":  # the skipped tables' runs leave the evaluation, as the reference's did
        by_size = {s: g for s, g in by_size.items() if s not in skip}
    for s, g in by_size.items():
        g.label = f"{label} at {s:g}"
    pool = ref_groups + list(by_size.values())
    verdicts = []
    for c in claims:
        if c["kind"] == "solved":
            if c["size"] not in by_size:
                v = {"claim": c["claim"], "verdict": "not run", "settled": False,
                     "final": False, "detail": "the cut rule left this table out",
                     "missing": 0}
            else:
                v = three_way(pool, c)
            verdicts.append({**v, "kind": "solved", "size": c["size"], "b": c["b"][ROW_KEY]})
        else:
            b = [g for g in ref_groups if g.runs[0].config.get(ROW_KEY) == c["b"][ROW_KEY]]
            a = [by_size[s] for s in sorted(by_size)]
            v = (frontier_compare(a, b, unrun_tables(protocol, sizes, cut)) if a and b
                 else {"verdict": "cannot check"})
            verdicts.append({"claim": c["claim"], "kind": "frontier", "b": c["b"][ROW_KEY],
                             "verdict": v["verdict"], "settled": v.get("settled", False),
                             "final": v.get("final", False), "a_frontier": v.get("a"),
                             "b_frontier": v.get("b")})
    cells = {}
    for s, g in sorted(by_size.items()):
        # seeds not run yet, and failed ones (retried once per call: `next_round`'s `tried`)
        todo = sorted(r.config["train.seed"] for r in g.runs if r.status != "done")
        mine_v = [v for v in verdicts if v["kind"] == "solved" and v["size"] == s]
        open_claims = [v for v in mine_v if v["verdict"] == "open"]
        reads_cut = gates and s == protocol.cut["size"] and cut is None
        if s in skip and cut is None:
            status, reason = "waiting", (f"waits for the cut rule (the {protocol.cut['size']:g} "
                                         "table's count)")
        elif not todo:
            status, reason = "complete", "every seed ran"
        elif open_claims or reads_cut or not mine_v:
            status = "open"
            reason = ("the cut rule's count is not decided" if reads_cut and not open_claims
                      else "no claim to settle" if not mine_v
                      else f"{len(open_claims)} of its {len(mine_v)} claims open")
        else:
            status = "settled"
            reason = (f"stopped after {g.solved.n} of {g.solved.n + len(todo)} seeds: every "
                      f"claim at this table ({len(mine_v)}) has the same verdict for every "
                      f"outcome of the {len(todo)} seeds not run"
                      + (" and the cut rule's count is decided" if protocol.cut and
                         s == protocol.cut["size"] else ""))
        cells[s] = Cell(s, g, status, reason, mine_v, todo)
    if cut == "cut":
        for s in skip:
            if protocol.cut and any(s == t.size for t in protocol.tables):
                read = by_size[protocol.cut["size"]].solved
                cells[s] = Cell(s, None, "cut", (
                    f"the cut rule: {read.k} of {read.n} seeds solved at table "
                    f"{protocol.cut['size']:g}, fewer than the {protocol.cut['at_least']} it "
                    "needs"), [], [])
    return cells, verdicts, cut


def unrun_tables(protocol: Protocol, sizes: list[float] | None, cut: str | None
                 ) -> list[float]:
    """The protocol's tables this placement does not run (`--tables`); a table the cut rule
    left out is read as not solved (as the reference's rows were), not as unrun."""
    if sizes is None:
        return []
    skipped = set(protocol.cut["skip"]) if protocol.cut and cut == "cut" else set()
    return [t.size for t in protocol.tables if t.size not in sizes and t.size not in skipped]


def next_round(cells: dict[float, Cell], tried: set[tuple[float, int]],
               workers: int) -> dict[tuple[int, ...], list[float]]:
    """The next round: the next `workers` seeds of each open cell, grouped by their seeds (one
    sweep call per group: its --only is a product of tables and seeds). A round waits for its
    slowest run; `workers` seeds a table (not one) keep the workers busy beside a long run of
    the largest table, at the cost of at most `workers - 1` runs past a table's settlement
    (replayed over the archived deltanet runs, scripts/place_replay.py: 3,955 s of rounds on 2
    workers and 32 runs, against about 4,800 s and 29 runs with one seed a table)."""
    open_cells = [c for c in cells.values() if c.status == "open"]
    todo = {c.size: [s for s in c.todo if (c.size, s) not in tried] for c in open_cells}
    groups: dict[tuple[int, ...], list[float]] = {}
    for size, seeds in todo.items():
        if seeds:
            groups.setdefault(tuple(seeds[:max(1, workers)]), []).append(size)
    return groups


def round_slices(protocol: Protocol, sizes: list[float], seeds: tuple[int, ...]) -> list[dict]:
    """The sweep calls (`--only` slices) of one round: one for task.levels tables (a product
    of tables and seeds); one per table where the tables are whole task tables, since a
    product of their fields' alternatives could pick a table the round did not name."""
    seed = seeds[0] if len(seeds) == 1 else tuple(seeds)
    if not protocol.whole_task:
        levels = [protocol.table(s).levels for s in sizes]
        return [{"task.levels": levels[0] if len(levels) == 1 else tuple(levels),
                 "train.seed": seed}]
    return [{**protocol.at(s), "train.seed": seed} for s in sizes]


# ---- the whole placement ------------------------------------------------------------------------

def refuse_failing_check(target: Any, label: str, say: Callable[[str], None],
                         anyway: str) -> None:
    """The correctness rows of `recall-lab check` before anything trains: the first failing row
    as one line (`--no-check` then `anyway`: "places it anyway", "runs it anyway")."""
    say(f"checking {label} (correctness rows of `recall-lab check`) ...")
    failed = [c for c in run_checks(target, learning=False, speed=False)
              if c.correctness and c.passed is False]
    if failed:
        c = failed[0]
        why = " ".join(f"{c.value}{' (' + c.detail + ')' if c.detail else ''}".split())
        raise RecallLabError(f"{label} fails the check row '{c.name}': {why}; nothing "
                             f"trained (--no-check {anyway})")


def protocol_seeds(protocol: Protocol, n: int | None) -> list[int]:
    seeds = list(protocol.seeds)
    if n is None:
        return seeds
    if n < 1:
        raise RecallLabError(f"--seeds must be >= 1, got {n}")
    while len(seeds) < n:
        seeds.append(max(seeds) + 1)
    return seeds[:n]


def _sizes(protocol: Protocol, tables: list[float] | None) -> list[float]:
    known = [t.size for t in protocol.tables]
    if not tables:
        return known
    for t in tables:
        if t not in known:
            raise RecallLabError(f"unknown table {t:g}: the reference's tables are "
                                 f"{', '.join(f'{k:g}' for k in known)}")
    sizes = [k for k in known if k in set(tables)]
    cut = protocol.cut
    if cut and any(s in cut["skip"] for s in sizes) and cut["size"] not in sizes:
        raise RecallLabError(f"table {cut['skip'][0]:g} runs only after the cut rule reads "
                             f"table {cut['size']:g}: add it to --tables")
    return sizes


LENGTH_KWARGS = ("l_max", "max_len", "max_seq_len", "max_length", "seq_len",
                 "max_position_embeddings")  # a mixer's kwargs that bound the length it takes


def try_longest(exp: Experiment, protocol: Protocol, label: str, kwargs: dict | None) -> None:
    """Build the model of the placement's longest table and run it forward and backward once
    at that table's length, before anything is spent: a mixer that cannot take the length
    (zoology's Hyena with `l_max` below it) ends here in one line naming the table and the
    exception, not minutes into the pilot."""
    run = max(exp.runs, key=lambda r: protocol.size_of(flatten(r.config.to_json())))
    size = protocol.size_of(flatten(run.config.to_json()))
    cfg = run_config_from_json(run.config.to_json(), "the placement's longest table").model
    length = cfg.max_len
    where = f"the {table_name(size, protocol)} table's {length} tokens"
    short = [(k, v) for k, v in (kwargs or {}).items()
             if k in LENGTH_KWARGS and isinstance(v, int) and v < length]
    if short:
        k, v = short[0]
        raise RecallLabError(f"{label}: {k} = {v} is shorter than {where}")
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = build_model(cfg)
            ids = torch.randint(3, cfg.vocab_size, (1, length))
            model(ids).logits.float().square().mean().backward()
    except RecallLabError as exc:
        raise RecallLabError(f"{label} cannot run {where}: {exc}") from None
    except Exception as exc:
        raise RecallLabError(f"{label} cannot run {where} (a forward and backward): "
                             f"{type(exc).__name__}: {' '.join(str(exc).split())}") from None


def folder_name(label: str, table: dict, protocol_id: str) -> str:
    digest = hashlib.sha256(json.dumps([table, protocol_id], sort_keys=True).encode())
    slug = re.sub(r"[^A-Za-z0-9+._=-]", "_", label.replace(" / ", "-"))
    return f"place-{slug}-{digest.hexdigest()[:8]}"


def protocol_id(folder: Path, protocol: Protocol) -> str:
    """What identifies the reference for the placement folder's name: its protocol file and
    experiment file's text (and pilot rule 2, a different protocol, where it is used)."""
    spec = (folder / "place.toml").read_text()
    ident = hashlib.sha256(spec.encode() + json.dumps(
        [protocol.base, [t.size for t in protocol.tables]], sort_keys=True).encode()).hexdigest()
    if protocol.pilot.get("rule", 1) != 1:
        ident = hashlib.sha256(f"{ident} pilot rule {protocol.pilot['rule']}".encode()
                               ).hexdigest()
    return ident


def _folder_name(label: str, table: dict, ref: Path, protocol: Protocol) -> str:
    """`folder_name`, with "-pilot2" where the placement runs pilot rule 2."""
    name = folder_name(label, table, protocol_id(ref, protocol))
    return name + ("-pilot2" if protocol.pilot.get("rule", 1) == 2 else "")


def _pilot_rule_2(exp: Experiment, root: Path, tie: float) -> dict:
    """Pilot rule 2 on the pilot's runs (`lr_rules.pilot_rule_2`): every lr's held-out
    accuracies by seed, their means, the pick, and the lr that extends the grid at an edge."""
    accs: dict[float, list[float | None]] = {}
    for r in sorted(records(exp, root), key=lambda r: r.config["train.seed"]):
        accs.setdefault(r.config["train.lr"], []).append(
            r.metric("valid.acc") if r.status == "done" else None)
    return pilot_rule_2(accs, tie)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _pilot_lr(exp: Experiment, root: Path, tie: float) -> tuple[float | None, dict]:
    accs: dict[float, float | None] = {}
    for r in records(exp, root):
        accs[r.config["train.lr"]] = r.metric("valid.acc") if r.status == "done" else None
    return pick_lr(accs, tie), accs


def place(mixer: str, kwargs: dict | None = None, *, tables: list[float] | None = None,
          seeds: int | None = None, workers: int = 1, threads: int = 1, engine: str = "local",
          address: str | None = None, reference: str | Path | None = None, check: bool = True,
          out: str | Path = "runs", monitor: Callable[[str], Monitor] | None = None,
          say: Callable[[str], None] | None = None, plots: bool = True,
          dry_run: bool = False, memory: bool = False, pilot_rule: int = 1) -> dict:
    """Place `mixer` (a built-in name, a zoo mixer, an import path or a plug-in; `kwargs` for
    its class) against the reference (default: the shipped zoo-frontier). Returns the answer
    (also answer.json in the placement folder); with `dry_run`, the plan only (state,
    claims, runs), nothing checked, trained or written. `memory`: also measure the layer as a
    memory (experiments/memory.py; minutes), where the mixer offers `memory_spec()`.
    `pilot_rule` 2: the pilot runs 2 seeds per lr, ranks the lrs by their mean held-out
    accuracy and extends its grid at an edge (`lr_rules.pilot_rule_2`); a different protocol,
    so the placement gets its own folder (`...-pilot2`)."""
    say = say or (lambda _text: None)
    started = time.perf_counter()
    if pilot_rule not in (1, 2):
        raise RecallLabError(f"--pilot-rule must be 1 or 2, got {pilot_rule}")
    with open_reference(reference) as ref:
        if not Path(ref).is_dir():
            raise RecallLabError(f"reference folder {ref} does not exist")
        protocol = read_protocol(ref)
        if pilot_rule == 2:
            protocol = dataclasses.replace(protocol, pilot={**protocol.pilot, "rule": 2,
                                                            "seeds": list(PILOT_SEEDS)})
        rows, ref_groups = reference_rows(ref, protocol)
        sizes = _sizes(protocol, tables)
        seed_list = protocol_seeds(protocol, seeds)
        target = resolve_target(mixer, kwargs)  # a rejected kwarg or path ends here
        table = mixer_table(mixer, kwargs)
        label = mixer_row_label(mixer, kwargs)
        probe = cells_experiment(protocol, table, sizes, seed_list, protocol.pilot["lrs"][0])
        states = {protocol.size_of(flatten(r.config.to_json())):
                  run_state(r.config.to_json()) for r in probe.runs}
        state = states[max(states)]
        claims = make_claims(label, state, rows, sizes, protocol, states)
        for c in claims:  # what these tables can decide, said before any run
            c["decidable"] = decidability(c, rows, protocol, sizes, len(seed_list))
        ref_name = reference_name(reference, protocol)
        try_longest(probe, protocol, label, kwargs)  # in --dry-run too: check before spending
        if dry_run:
            return {"dry_run": True, "label": label, "model": table, "state": state_json(state),
                    "reference": ref_name, "tables": sizes, "seeds": seed_list,
                    "claims": claims,
                    "pilot_runs": len(pilot_experiment(protocol, table).runs),
                    "cell_runs": len(probe.runs),
                    "experiments": [pilot_experiment(protocol, table), probe],  # the estimate's
                    "folder": str(Path(out) / _folder_name(label, table, Path(ref), protocol))}
        if check:
            refuse_failing_check(target, label, say, "places it anyway")
        folder = Path(out) / _folder_name(label, table, Path(ref), protocol)
        folder.mkdir(parents=True, exist_ok=True)
        plan_path = folder / PLAN
        plan = ck.read_json(plan_path, "placement plan") if plan_path.is_file() else {}
        plan = {**plan, "mixer": mixer, "kwargs": kwargs or None, "label": label,
                "model": table, "state": state_json(state),
                "reference": {"name": ref_name, "folder": None if reference is None
                              else str(reference), "cells": sum(len(r.cells) for r in rows)},
                "tables": sizes, "seeds": seed_list, "level": protocol.level,
                "solve_at": protocol.solve_at, "pilot": protocol.pilot, "cut": protocol.cut,
                "claims": claims, "written": plan.get("written") or _now()}
        ck.write_json(plan_path, plan)
        # the claims are recorded before the pilot's first run (as `sweep` records its own)
        reg = prereg.register(folder, [_spec(c) for c in claims])
        bound = prereg.binding(folder, reg)  # every run of the pilot and cells stores its hash
        for line in prereg.binding_lines(bound):
            say(line)

        pilot = pilot_experiment(protocol, table)
        say(f"lr pilot: {len(pilot.runs)} runs at table {protocol.pilot['size']:g}, seed "
            + (f"{protocol.pilot['seed']}" if protocol.pilot.get("rule", 1) == 1 else
               f"s {', '.join(map(str, protocol.pilot['seeds']))} (pilot rule 2)"))
        sweep = _sweeper(folder, workers, threads, engine, address, monitor, bound)
        sweep(pilot, None)
        rule_2 = None
        while protocol.pilot.get("rule", 1) == 2:  # an edge winner extends the grid
            rule_2 = _pilot_rule_2(pilot, folder, protocol.pilot["tie"])
            if rule_2["extend"] is None:
                break
            say(f"pilot: {rule_2['note']}")
            pilot = pilot_experiment(protocol, table, sorted([*rule_2["means"],
                                                              rule_2["extend"]]))
            sweep(pilot, None)
        lr, accs = ((rule_2["lr"], rule_2["means"]) if rule_2 is not None
                    else _pilot_lr(pilot, folder, protocol.pilot["tie"]))
        if lr is None:
            raise RecallLabError(f"no pilot run of {label} finished (see {folder / 'pilot'} "
                                 "sweep.json for the errors)")
        say(f"lr {lr:g} (pilot held-out accuracy: "
            + ", ".join(f"{k:g}: {'-' if v is None else f'{v:.3f}'}" for k, v in accs.items())
            + ")")
        exp = cells_experiment(protocol, table, sizes, seed_list, lr)
        tried: set[tuple[float, int]] = set()
        rounds = 0
        while True:
            cells, verdicts, cut = evaluate(records(exp, folder), ref_groups, claims, protocol,
                                            label, sizes)
            batch = next_round(cells, tried, workers)
            if not batch:
                break
            rounds += 1
            for seed_group, group_sizes in batch.items():
                say(f"round {rounds}: tables {', '.join(f'{s:g}' for s in group_sizes)}, seeds "
                    f"{', '.join(map(str, seed_group))}")
                tried |= {(s, x) for s in group_sizes for x in seed_group}
                for only in round_slices(protocol, group_sizes, seed_group):
                    sweep(exp, only)
        answer = build_answer(folder, plan, protocol, rows, ref_groups, exp, pilot, lr, accs,
                              cells, verdicts, cut, label, state, memory)
        if rule_2 is not None:  # every seed's accuracy, the means, interior or not
            answer["pilot_rule"] = {**rule_2, **{k: {f"{lr_:g}": v for lr_, v in rule_2[k].items()}
                                                 for k in ("accs", "means")}}
        answer["wall_s_this_call"] = time.perf_counter() - started
        answer["folder"] = str(folder)
        write_answer(answer, folder, rows, plots=plots)
        write_placement_record(folder, threads)  # record.json: what verify and the leaderboard read
        return answer


def _sweeper(folder: Path, workers: int, threads: int, engine: str, address: str | None,
             monitor: Callable[[str], Monitor] | None, bound: dict | None = None
             ) -> Callable[[Experiment, dict | None], dict]:
    """One sweep of the placement's experiments (the lab's one way to run them), with a fresh
    monitor per call (closed after it, where it has `close`); its runs bound to the placement's
    claims (`bound`: `claims.binding`)."""
    def sweep(exp: Experiment, only: dict | None) -> dict:
        mon = monitor(exp.name) if monitor else None
        try:
            return run_sweep(exp, folder, workers=workers, threads=threads, engine=engine,
                             address=address, monitor=mon, only=only, registration=bound)
        finally:
            if mon is not None and hasattr(mon, "close"):
                mon.close()
    return sweep


def _spec(claim: dict) -> dict:
    """A claim as registered: its text and the groups and tables it reads."""
    return {k: v for k, v in claim.items() if k in ("claim", "kind", "a", "b", "at", "level")}


# ---- the answer ---------------------------------------------------------------------------------

def rate_json(r: stats.SolveRate) -> dict:
    return {"k": r.k, "n": r.n, "lo": r.lo, "hi": r.hi, "text": r.text()}


def row_frontier(cells: list[Group], unrun: list[float] = ()) -> dict:
    """A row's frontier and range over its finished seeds; `censored`: the unrun tables that
    could still move it (`verdicts.free_tables`), `ran_to`: the largest table it ran."""
    pts = [(table_size(g), g.solved) for g in cells if g.solved.n]
    lo, hi = stats.frontier_range(pts)
    return {"frontier": stats.frontier(pts) or 0.0, "range": [lo, hi],
            "censored": free_tables(pts, list(unrun)),
            "ran_to": max((size for size, _ in pts), default=0.0)}


def frontier_text(f: dict) -> str:
    """"8 [4, 8]"; censored by tables not run: "at least 8 [4+, 8+] (tables above 8 not run)",
    a "+" on each end an unrun table could still raise."""
    free = f.get("censored") or []
    lo, hi = f["range"]
    if not free:
        return f"{f['frontier']:g} [{lo:g}, {hi:g}]"

    def end(x: float) -> str:
        return f"{x:g}+" if any(u > x for u in free) else f"{x:g}"

    where = (f"tables above {f['ran_to']:g} not run" if min(free) > f["ran_to"]
             else f"tables {', '.join(f'{u:g}' for u in free)} not run")
    point = (f"at least {f['frontier']:g}" if any(u > f["frontier"] for u in free)
             else f"{f['frontier']:g}")
    return f"{point} [{end(lo)}, {end(hi)}] ({where})"


def build_answer(folder: Path, plan: dict, protocol: Protocol, rows: list[Row],
                 ref_groups: list[Group], exp: Experiment, pilot: Experiment, lr: float,
                 accs: dict, cells: dict[float, Cell], verdicts: list[dict], cut: str | None,
                 label: str, state: LayerState, memory: bool = False) -> dict:
    mine = records(exp, folder)
    done = [r for r in mine if r.status == "done"]
    failed = [r for r in mine if r.status == "failed"]
    pilot_done = [r for r in records(pilot, folder) if r.status == "done"]
    planned = len(exp.runs)
    took = total_time(r.summary or {} for r in done + pilot_done)  # every segment of each run
    launched_runs = [r for r in mine + records(pilot, folder) if r.launched]
    cell_rows = []
    for size in sorted(cells):
        c = cells[size]
        g = c.group
        n_failed = sum(1 for r in (g.runs if g else []) if r.status == "failed")
        cell_rows.append({"size": size, "table": table_name(size, protocol),
                          "status": c.status, "reason": c.reason,
                          "solved": rate_json(g.solved) if g is not None else None,
                          "not_run": len(c.todo) - n_failed, "failed": n_failed})
    frontier = row_frontier([cells[s].group for s in sorted(cells)
                              if cells[s].group is not None],
                             unrun_tables(protocol, plan["tables"], cut))
    compared = sorted({v["b"] for v in verdicts})
    # the layer as a memory: "n/a" unless the mixer offers `memory_spec()` (docs/mixers.md)
    mem = row_memory(next((r.tables for r in done if r.tables), None), measure=memory)
    return {"mixer": plan["mixer"], "kwargs": plan["kwargs"], "label": label,
            "memory": {"random": mem.cell("random"), "designed": mem.cell("designed"),
                       "information_bound": mem.bound},
            "state": state_json(state), "reference": plan["reference"], "lr": lr,
            "pilot": {f"{k:g}": v for k, v in accs.items()}, "cells": cell_rows,
            "claims": verdicts, "cut": cut, "frontier": frontier,
            "neighbours": {r.label: {"state": state_json(r.state), "lr": r.lr,
                                     "cells": {f"{s:g}": rate_json(g.solved)
                                               for s, g in sorted(r.cells.items())},
                                     **row_frontier(list(r.cells.values()))}
                           for r in rows if r.label in compared},
            "runs": {"planned": planned, "trained": len(done), "failed": len(failed),
                     "saved": planned - len(done) - len(failed), "pilot": len(pilot_done),
                     "training_s": took["loop_s"], "time": took},
            "registration": prereg.run_bindings(launched_runs, prereg.read_registry(folder)),
            "ran": {"tables": plan["tables"], "seeds": plan["seeds"]},
            "protocol": {"name": protocol.name, "tables": [t.size for t in protocol.tables],
                         "names": {f"{t.size:g}": table_name(t.size, protocol)
                                   for t in protocol.tables},
                         "seeds": plan["seeds"], "solve_at": protocol.solve_at,
                         "level": protocol.level,
                         # whole task tables: the fields that pick each table's runs
                         **({"at": {f"{t.size:g}": protocol.at(t.size)
                                    for t in protocol.tables}} if protocol.whole_task else {})},
            "figures": []}


def row_line(answer: dict, protocol_sizes: list[float], table_names: dict[float, str]) -> tuple[
        str, str]:
    """The mixer's row in the reference README's table format (header, row)."""
    head = ("| row (state per layer, numbers) | lr | "
            + " | ".join(table_names[s] for s in protocol_sizes) + " | frontier [range] |")
    by = {c["size"]: c for c in answer["cells"]}
    texts = []
    for s in protocol_sizes:
        c = by.get(s)
        if c is None or c["solved"] is None:
            texts.append("-")
        else:
            t = c["solved"]["text"]
            texts.append(t + (f" (stopped, {c['not_run']} not run)"
                              if c["status"] == "settled" else ""))
    row = (f"| `{answer['label']}` ({answer['state']['text']}) | {answer['lr']:g} | "
           + " | ".join(texts) + f" | {frontier_text(answer['frontier'])} |")
    return head + "\n|" + " --- |" * (len(protocol_sizes) + 3), row


def _markdown(answer: dict, sizes: list[float], names: dict[float, str]) -> str:
    head, row = row_line(answer, sizes, names)
    nb_lines = []
    for label, n in answer["neighbours"].items():
        cells = [n["cells"].get(f"{s:g}", {}).get("text", "-") for s in sizes]
        nb_lines.append(f"| `{label}` ({n['state']['text']}) | "
                        f"{'-' if n['lr'] is None else format(n['lr'], 'g')} | "
                        + " | ".join(cells)
                        + f" | {frontier_text(n)} |")
    r = answer["runs"]
    reg = answer["registration"]
    ran = answer.get("ran") or {"tables": sizes, "seeds": answer["protocol"]["seeds"]}
    left = [s for s in sizes if s not in ran["tables"]]
    lines = [
        f"# Placement: {answer['label']}", "",
        f"Against the reference `{answer['reference']['name']}` "
        f"({answer['reference']['cells']} cells of its rows). This placement ran tables "
        + ", ".join(names[s] for s in ran["tables"]) + f" with seeds {_seeds_text(ran)}"
        + (f" (the protocol's tables {', '.join(names[s] for s in left)} not run: its frontier "
           "is censored where they could move it)" if left else "")
        + f"; solved = test accuracy >= {answer['protocol']['solve_at']:g}. Recurrent state per "
        f"layer: {answer['state']['text']} (`state.run_state`). lr {answer['lr']:g} by the "
        "pilot's rule (held-out accuracy per lr: "
        + ", ".join(f"{k}: {'-' if v is None else f'{v:.3f}'}" for k, v in
                    answer["pilot"].items()) + ").", "", *_pilot_rule_lines(answer),
        "## The row", "",
        "Seeds solved with a Wilson 95% interval; \"stopped\": the cell stopped launching seeds "
        "once its verdicts were settled (below); \"-\": not run (the cut rule, or not asked "
        "for). Below it, the reference rows its claims compare it with.", "",
        head, row, *nb_lines, "", *_memory_lines(answer),
        "## Claims and verdicts", "",
        prereg.registration_text(reg) + " Seeds solved: more / fewer = one-sided Fisher "
        "below the level in that direction, "
        "else not separable; \"settled\": some seeds did not run and every outcome of theirs "
        "gives the same verdict. Frontier: beyond / short of = the ranges the seeds' Wilson "
        "intervals allow do not overlap.", "",
        "| # | claim | verdict | what the runs say |", "| --- | --- | --- | --- |"]
    for i, v in enumerate(answer["claims"], 1):
        word = v["verdict"] + (" (settled)" if v.get("settled") else "")
        if v["kind"] == "frontier" and v["verdict"] == "open":
            word = "not settled (cells stopped before it was)"
        if v["kind"] == "frontier":
            a, b = v.get("a_frontier"), v.get("b_frontier")
            detail = "" if not (a and b) else (
                f"frontier: {answer['label']} {frontier_text(a)} vs {v['b']} "
                f"{frontier_text(b)} (seeds run)")
        else:
            detail = v.get("detail", "")
        lines.append(f"| {i} | {v['claim']} | **{word}** | {detail} |")
    lines += ["", "## Cells: why each stopped", "",
              "| table | seeds solved | status | why |", "| --- | --- | --- | --- |"]
    for c in answer["cells"]:
        lines.append(f"| {c['table']} | {c['solved']['text'] if c['solved'] else '-'} | "
                     f"{c['status']} | {c['reason']} |")
    lines += ["", f"Runs: {r['trained']} trained of the {r['planned']} the tables x seeds "
              f"plan, {r['saved']} saved (stopped cells and the cut rule), {r['failed']} "
              f"failed; {r['pilot']} pilot runs. " + time_text(r.get("time") or {
                  "loop_s": r["training_s"], "runs": r["trained"] + r["pilot"],
                  "segments": r["trained"] + r["pilot"], "resumed": 0, "untimed": 0}), ""]
    if answer["figures"]:
        lines += ["## Figures", ""] + [f"![{Path(p).stem}]({Path(p).name})"
                                       for p in answer["figures"]]
    return "\n".join(lines) + "\n"


def _pilot_rule_lines(answer: dict) -> list[str]:
    """Under pilot rule 2: every pilot accuracy and mean, whether the winner is interior, and
    where it is not the lr-window command at the boundary table (`lr_rules.pilot_lines`)."""
    p = answer.get("pilot_rule")
    if not p:
        return []
    cells = {c["size"]: stats.wilson(c["solved"]["k"], c["solved"]["n"])
             for c in answer["cells"] if c["solved"]}
    pilot = {**p, **{k: {float(x): v for x, v in p[k].items()} for k in ("accs", "means")}}
    return [f"- {line}" for line in pilot_lines(pilot, answer["mixer"], answer["kwargs"],
                                                 boundary_table(cells))] + [""]


def _memory_lines(answer: dict) -> list[str]:
    """The layer measured as a memory outside training (experiments/memory.py), or why not."""
    mem = answer.get("memory")
    if not mem:
        return []
    if mem["random"] == "n/a":
        return ["The layer as a memory (no-decay construction): n/a; the mixer offers no "
                "`memory_spec()` hook (docs/mixers.md), so its update rule is not known here.",
                ""]
    if mem["random"] == "not measured":
        return ["The layer as a memory (no-decay construction): not measured; the mixer offers "
                "`memory_spec()`, and `recall-lab place --memory` measures it (minutes).", ""]
    return [f"The layer as a memory (no-decay construction, 20 seeds of 512 tables, exploratory; "
            f"neither key set is a ceiling): random keys {mem['random']}, designed keys "
            f"{mem['designed']} pairs; information bound at 32 bits a number "
            f"{mem['information_bound'] if mem['information_bound'] is not None else '-'}.", ""]


def _seeds_text(protocol: dict) -> str:
    s = protocol["seeds"]
    return f"{s[0]}-{s[-1]}" if s == list(range(s[0], s[-1] + 1)) and len(s) > 1 \
        else ", ".join(map(str, s))


def write_answer(answer: dict, folder: Path, rows: list[Row], plots: bool = True) -> list[Path]:
    """report.md, answer.json, row.md and the figures into the placement folder."""
    sizes = answer["protocol"]["tables"]
    names = {s: answer["protocol"]["names"][f"{s:g}"] for s in sizes}
    if plots:
        answer["figures"] = [str(p) for p in place_figures(answer, rows, folder)]
    head, row = row_line(answer, sizes, names)
    (folder / "row.md").write_text(head + "\n" + row + "\n")
    ck.write_json(folder / ANSWER, answer)
    (folder / "report.md").write_text(_markdown(answer, sizes, names))
    return [folder / "report.md", folder / ANSWER, folder / "row.md",
            *map(Path, answer["figures"])]
