"""A mixer's learning-rate window at one table of a reference protocol (`recall-lab lr-window`,
`rl.lr_window`): seeds over an lr ladder, each run's config a placement cell's but for its lr,
the lrs whose seeds solved cannot be told from the best lr's, and fresh seeds at the best lr to
confirm it.

The protocol is the reference's (`reference.py`; default the zoo-frontier's recipe, budgets,
seeds and solve threshold). A run at lr x and seed s is the run `place` trains for the same
mixer at that table and seed when its pilot picks x (`place.cells_experiment`: same config,
same hash), so finished records at that config anywhere the window looks (the shipped
references' archives, which hold the zoo-frontier's rows and the placed 2025-26 families'
cells, and every `records` folder given) count as that lr's seeds and are copied in, not
retrained. Everything runs through the sweep engine into `OUT/lr-window-LABEL-TABLE-HASH/`:
`window/` (ladder x seeds) and `confirm/` (the confirmation seeds).

The window, per lr of the ladder (statistics from `stats`, verdicts from `verdicts.three_way`):
- seeds solved (protocol metric >= solve_at) with a Wilson 95% interval, each seed's held-out
  (test) accuracy;
- the best lr: the largest share of seeds solved; ties go to the higher mean held-out
  (validation) accuracy, then to the smaller lr;
- the window: the best lr and every lr whose seeds solved are not separable from the best's
  (the one-sided Fisher test "the best lr solves more" not below the protocol's level, 0.05);
  its width in decades, log10(largest / smallest lr in it);
- an edge flag when the best lr is at either end of the ladder. The ladder then grows by half
  a decade on that side (1e-3 -> 3e-4 -> 1e-4; 3e-2 -> 1e-1), never past BOUNDS (1e-4, 1e-1):
  a bound that stops it is said.

Seeds run in rounds: each round gives the next seeds to every lr whose comparison with the
current best is still open (`three_way` "open": some outcome of the seeds not yet run could
change it), and to the best lr while any comparison is open; an lr whose comparison is settled
gets no more. An interrupted window resumes: finished runs are skipped by the engine.

RULE (selection kept apart from confirmation), written in the plan and recorded with the claims
before the first run: the window's seeds choose the lr and never confirm it. The verdict "at
the best lr" reads only `confirm` fresh seeds (CONFIRM_FROM, CONFIRM_FROM + 1, ...: seeds no
window run used) trained at the best lr once the window is settled; the window's own count at
that lr is reported as selected, not as a verdict. Fresh seeds were chosen over a Bonferroni
correction across the lrs tried: the best lr's window count is biased upward by its selection,
and a correction of the p-value does not remove that bias from the count a comparison reads.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from recall_lab import checkpoint as ck
from recall_lab.experiments import claims as prereg
from recall_lab.experiments import place as pl
from recall_lab.experiments import stats
from recall_lab.experiments.archive import RUN_FILES
from recall_lab.experiments.engine import Monitor, run_sweep
from recall_lab.experiments.grid import Experiment, expand
from recall_lab.experiments.lr_rules import (
    BOUNDS,
    LADDER,
    PILOT_SEEDS,
    beyond,
    boundary_table,
    check_ladder,
    grow,
    half_decade,
    pilot_lines,
    pilot_rule_2,
)
from recall_lab.experiments.reference import (
    SHIPPED_REFERENCES,
    Protocol,
    open_reference,
    read_protocol,
)
from recall_lab.experiments.report import RunRecord, aggregate
from recall_lab.experiments.verdicts import three_way
from recall_lab.generators.errors import RecallLabError
from recall_lab.testing import resolve_target

CONFIRM = 8  # fresh seeds at the best lr, by default
CONFIRM_FROM = 100  # the first confirmation seed; window seeds stay below it
PLAN = "lr-window.json"
ANSWER = "window.json"
REUSED = "reused.json"
FIGURE = "lr-window.png"
WINDOW, CONFIRMATION = "window", "confirm"
RULE = ("Selection kept apart from confirmation: the window's seeds choose the best lr and "
        "never confirm it. A verdict at the best lr reads only the confirmation seeds, fresh "
        "seeds (from {first} up) that no window run used, trained at the best lr after the "
        "window settled; the window's count at the best lr is reported as selected, not as a "
        "verdict.")


def planned_line(mixer: str, kwargs: dict | None) -> str:
    """What `place --lr-window` adds to a placement, for its dry run: the table is known only
    once the cells have run."""
    kw = f" --kwargs '{json.dumps(kwargs)}'" if kwargs else ""
    return (f"then the lr window (--lr-window), once the cells finish: at the boundary table "
            f"(the largest some but not all seeds solve; known only then), ladder "
            f"{', '.join(f'{x:g}' for x in LADDER)} (grown by half a decade at an edge, within "
            f"{BOUNDS[0]:g} and {BOUNDS[1]:g}), up to the reference's seeds per lr, then {CONFIRM} "
            f"fresh seeds at the best lr; its estimate for a table T: recall-lab lr-window "
            f"{mixer}{kw} --table T --dry-run")


# ---- the ladder ---------------------------------------------------------------------------------

def window_seeds(protocol: Protocol, n: int | None) -> list[int]:
    """The window's seeds: the protocol's, extended or cut to `n` (`place`'s rule), all below
    the confirmation seeds."""
    seeds = pl.protocol_seeds(protocol, n)
    if max(seeds) >= CONFIRM_FROM:
        raise RecallLabError(f"--seeds {n} reaches seed {CONFIRM_FROM}, where the confirmation "
                             f"seeds start: at most {CONFIRM_FROM - min(seeds)}")
    return seeds


MAX_CONFIRM = 100


def confirm_seeds(n: int) -> list[int]:
    if not 0 <= n <= MAX_CONFIRM:
        raise RecallLabError(f"--confirm must be between 0 and {MAX_CONFIRM}, got {n}")
    return list(range(CONFIRM_FROM, CONFIRM_FROM + n))


# ---- the runs -----------------------------------------------------------------------------------

def check_table(protocol: Protocol, size: float) -> float:
    known = [t.size for t in protocol.tables]
    if size not in known:
        raise RecallLabError(f"unknown table {size:g}: the reference's tables are "
                             f"{', '.join(f'{k:g}' for k in known)}")
    return float(size)


def window_experiment(protocol: Protocol, table: dict, size: float, lrs: list[float],
                      seeds: list[int], name: str = WINDOW) -> Experiment:
    """lrs x seeds at one table: each run's config is `place.cells_experiment`'s for that table,
    seed and lr (tests check the hashes)."""
    data = {"name": name, "model": pl.cell_model(protocol, table),
            "train": dict(protocol.base["train"]), "task": dict(protocol.base["task"]),
            "grid": {"train.lr": list(lrs), "train.seed": list(seeds)},
            "link": [protocol.link([size])],  # as place's
            "report": {"metric": protocol.metric, "solve_at": protocol.solve_at}}
    return expand(data, name)


def _bare(cfg: dict) -> dict:
    """A run's tables without what a window varies (lr, seed) or a run stores of its launch."""
    out = {t: dict(cfg.get(t) or {}) for t in ("model", "train", "task")}
    for k in ("lr", "seed"):
        out["train"].pop(k, None)
    return out


def _first_difference(a: Any, b: Any, where: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{where}.{k}" if where else k)
    return f"{where} {json.dumps(b)} where this window has {json.dumps(a)}"


def check_records(folders: list[Path], want: dict) -> None:
    """Each records folder must hold finished runs of this window's config (lr and seed aside);
    one that holds none, or only another config's, is one clear line."""
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            raise RecallLabError(f"records folder {folder} does not exist")
        configs = sorted(folder.rglob(ck.CONFIG))
        if not configs:
            raise RecallLabError(f"records folder {folder} holds no run records (config.json)")
        mine = _bare(want)
        seen = None
        for p in configs:
            got = _bare(ck.read_json(p, "run config"))
            if got == mine:
                break
            seen = seen or (p.parent.name, got)
        else:
            name, got = seen
            raise RecallLabError(f"records folder {folder} belongs to another config (run "
                                 f"{name}: {_first_difference(mine, got)})")


def _index(sources: list[tuple[str, Path]]) -> dict[str, list[tuple[str, str, Path]]]:
    """Finished run folders of `sources` by their hash suffix: (source label, the run's path in
    it, its folder)."""
    out: dict[str, list[tuple[str, str, Path]]] = {}
    for label, root in sources:
        for p in sorted(Path(root).rglob(ck.SUMMARY)):
            run = p.parent
            if (run / ck.CONFIG).is_file():
                out.setdefault(run.name.rsplit("-", 1)[-1], []).append(
                    (label, str(run.relative_to(root)), run))
    return out


def find_reusable(exp: Experiment, sources: list[tuple[str, Path]]
                  ) -> dict[str, tuple[str, str, Path]]:
    """The runs of `exp` with a finished record at the same config in `sources`: run name ->
    (source label, the record's path in it, its folder). Matched by hash and confirmed on the
    record's config.json."""
    index = _index(sources)
    found = {}
    for run in exp.runs:
        want = run.config.to_json()
        for label, rel, folder in index.get(run.hash, []):
            on_disk = ck.read_json(folder / ck.CONFIG, "run config")
            if all(on_disk.get(t) == want.get(t) for t in want):
                found[run.name] = (label, rel, folder)
                break
    return found


def copy_reused(exp: Experiment, root: Path, found: dict[str, tuple[str, str, Path]]) -> dict:
    """Copy each reusable record (config, summary, metrics; no weights) into its run folder
    where the run has not finished there; returns and updates `reused.json` (run name ->
    where it came from)."""
    path = Path(root) / REUSED
    reused = ck.read_json(path, "reused records") if path.is_file() else {}
    for run in exp.runs:
        if run.name not in found:
            continue
        dest = Path(root) / exp.name / run.name
        if (dest / ck.SUMMARY).is_file():
            continue
        label, rel, src = found[run.name]
        dest.mkdir(parents=True, exist_ok=True)
        for f in RUN_FILES:
            if (src / f).is_file():
                shutil.copyfile(src / f, dest / f)
        reused[run.name] = f"{label}: {rel}"
    if reused:
        ck.write_json(path, reused)
    return reused


# ---- the window from the records ----------------------------------------------------------------

def _acc(r: RunRecord, metric: str) -> float | None:
    return r.metric(metric) if r.status == "done" else None


def assess(recs: list[RunRecord], ladder: list[float], protocol: Protocol,
           reused: dict | None = None) -> dict:
    """The window from the window's runs on disk (`place.records`: done, failed or missing):
    per lr its seeds, seeds solved, verdict against the best lr and whether it still takes
    seeds; the best lr, the window, its width and the edge flag."""
    reused = reused or {}
    metric, solve_at, level = protocol.metric, protocol.solve_at, protocol.level
    valid = f"valid.{metric.partition('.')[2]}"
    # the window's seeds only: a confirmation seed never chooses the lr (the rule)
    recs = [r for r in recs if r.config.get("train.lr") in ladder
            and r.config.get("train.seed", 0) < CONFIRM_FROM]
    groups = aggregate(recs, ["train.lr"], metric, solve_at, survival=False)[1] if recs else []
    by_lr = {g.values["train.lr"]: g for g in groups}
    for lr, g in by_lr.items():
        g.label = f"lr {lr:g}"
    ran = [lr for lr in ladder if lr in by_lr and by_lr[lr].solved.n]

    def rank(lr: float) -> tuple:
        g = by_lr[lr]
        return (g.solved.k / g.solved.n, g.valid_mean if g.valid_mean is not None else -1.0,
                -lr)

    best = max(ran, key=rank) if ran else None
    rungs = []
    for lr in ladder:
        g = by_lr.get(lr)
        runs = sorted(g.runs if g else [], key=lambda r: r.config.get("train.seed", 0))
        seeds = [{"seed": r.config.get("train.seed"), "acc": _acc(r, metric),
                  "valid": _acc(r, valid),
                  "solved": stats.is_solved(_acc(r, metric), solve_at),
                  "reused": reused.get(r.name)} for r in runs if r.status == "done"]
        rate = g.solved if g else stats.wilson(0, 0)
        todo = [r.config.get("train.seed") for r in runs if r.status != "done"]
        rung = {"lr": lr, "solved": pl.rate_json(rate), "seeds": seeds, "todo": todo,
                "failed": sum(r.status == "failed" for r in runs), "p_best_more": None,
                "verdict": "open", "detail": "no finished seed yet"}
        if lr == best:
            rung.update(verdict="best", detail="the largest share of seeds solved")
        elif best is not None and rate.n:
            v = three_way(groups, {"claim": f"lr {best:g} against lr {lr:g}",
                                   "a": {"train.lr": best}, "b": {"train.lr": lr},
                                   "level": level})
            rung["p_best_more"] = stats.fisher(by_lr[best].solved, rate, "greater")
            rung["verdict"] = {"more": "outside", "not separable": "in window",
                               "fewer": "in window"}.get(v["verdict"], "open")
            rung["detail"] = v["detail"]
        rungs.append(rung)
    open_any = any(r["verdict"] == "open" for r in rungs)
    for r in rungs:
        if not r["todo"]:
            r["status"] = "complete"
        elif r["verdict"] == "open" or (r["verdict"] == "best" and open_any):
            r["status"] = "open"
        else:
            r["status"] = "settled"
    inside = [r["lr"] for r in rungs if r["verdict"] in ("best", "in window")]
    idx = [ladder.index(x) for x in inside]
    solved_any = any(r["solved"]["k"] for r in rungs)
    return {"ladder": list(ladder), "rungs": rungs, "best": best, "window": inside,
            "width_decades": (math.log10(max(inside) / min(inside)) if inside else None),
            "contiguous": idx == list(range(min(idx), max(idx) + 1)) if idx else True,
            "edge": best is not None and best in (ladder[0], ladder[-1]),
            "reaches_end": bool(inside) and (ladder[0] in inside or ladder[-1] in inside),
            "settled": not any(r["status"] == "open" for r in rungs),
            "solved_any": solved_any}


def next_seeds(state: dict, tried: set[tuple[float, int]],
               workers: int) -> dict[tuple[int, ...], list[float]]:
    """The next round: the next `workers` seeds (at least one) of each open lr, grouped by their
    seeds (one sweep call per group: its --only is a product of lrs and seeds)."""
    groups: dict[tuple[int, ...], list[float]] = {}
    for r in state["rungs"]:
        if r["status"] != "open":
            continue
        seeds = [s for s in r["todo"] if (r["lr"], s) not in tried][:max(1, workers)]
        if seeds:
            groups.setdefault(tuple(seeds), []).append(r["lr"])
    return groups


def confirmation(recs: list[RunRecord], lr: float | None, protocol: Protocol,
                 reused: dict | None = None) -> dict | None:
    """The confirmation seeds at `lr` (only these: the rule), seeds solved with a Wilson
    interval; None where none is planned."""
    if lr is None:
        return None
    reused = reused or {}
    mine = [r for r in recs if r.config.get("train.lr") == lr
            and r.config.get("train.seed", -1) >= CONFIRM_FROM]
    done = [r for r in mine if r.status == "done"]
    k = sum(stats.is_solved(_acc(r, protocol.metric), protocol.solve_at) for r in done)
    return {"lr": lr, "solved": pl.rate_json(stats.wilson(k, len(done))),
            "planned": len(mine), "failed": sum(r.status == "failed" for r in mine),
            "seeds": [{"seed": r.config["train.seed"], "acc": _acc(r, protocol.metric),
                       "solved": stats.is_solved(_acc(r, protocol.metric), protocol.solve_at),
                       "reused": reused.get(r.name)} for r in sorted(
                           done, key=lambda r: r.config["train.seed"])]}


# ---- claims -------------------------------------------------------------------------------------

def make_claims(label: str, size_name: str, level: float, n_confirm: int) -> list[dict]:
    """What the window will state, written before its first run."""
    claims = [
        {"claim": f"{label} at {size_name}: the best lr of the ladder is the one with the "
                  "largest share of seeds solved (ties: the higher mean held-out accuracy, "
                  "then the smaller lr)", "kind": "best"},
        {"claim": f"{label} at {size_name}: the window is the best lr and every lr whose seeds "
                  f"solved are not separable from the best's (one-sided Fisher at {level:g}: "
                  "the best lr solves more), its width in decades", "kind": "window",
         "level": level},
        {"claim": f"{label} at {size_name}: the best lr sits inside the ladder, not at an end "
                  f"(the ladder grows by half a decade at an end, within {BOUNDS[0]:g} and "
                  f"{BOUNDS[1]:g})", "kind": "edge"}]
    if n_confirm:
        claims.append({"claim": f"{label} at {size_name}: {n_confirm} fresh seeds "
                                f"({CONFIRM_FROM}-{CONFIRM_FROM + n_confirm - 1}) at the best "
                                "lr, seeds solved with a Wilson 95% interval; a verdict at the "
                                "best lr reads these seeds only", "kind": "confirmation"})
    return claims


# ---- the whole window ---------------------------------------------------------------------------

def folder_name(label: str, table: dict, size: float, protocol_id: str) -> str:
    digest = hashlib.sha256(json.dumps([table, size, protocol_id], sort_keys=True).encode())
    slug = re.sub(r"[^A-Za-z0-9+._=-]", "_", label.replace(" / ", "-"))
    return f"lr-window-{slug}-t{size:g}-{digest.hexdigest()[:8]}"


def _sources(ref: Path, reference: str | Path | None, records: list[Path],
             stack: ExitStack) -> list[tuple[str, Path]]:
    """Where finished records are looked for: the reference, every shipped reference where the
    reference is shipped (their archives hold the zoo-frontier's rows and the placed families'
    cells), and the records folders."""
    out = [(f"reference {reference or 'zoo-frontier'}", Path(ref))]
    if reference is None or (str(reference) in SHIPPED_REFERENCES
                             and not Path(reference).is_dir()):
        for name in SHIPPED_REFERENCES:
            if name != (reference or "zoo-frontier"):
                out.append((f"reference {name}", stack.enter_context(open_reference(name))))
    return out + [(str(p), Path(p)) for p in records]


def _sweeper(folder: Path, workers: int, threads: int, engine: str,
             monitor: Callable[[str], Monitor] | None, bound: dict
             ) -> Callable[[Experiment, dict | None], dict]:
    def sweep(exp: Experiment, only: dict | None) -> dict:
        mon = monitor(exp.name) if monitor else None
        try:
            return run_sweep(exp, folder, workers=workers, threads=threads, engine=engine,
                             monitor=mon, only=only, registration=bound)
        finally:
            if mon is not None and hasattr(mon, "close"):
                mon.close()
    return sweep


def _only(lrs: list[float], seeds: tuple[int, ...]) -> dict:
    return {"train.lr": lrs[0] if len(lrs) == 1 else tuple(lrs),
            "train.seed": seeds[0] if len(seeds) == 1 else tuple(seeds)}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def lr_window(mixer: str, kwargs: dict | None = None, *, table: float,
              lrs: list[float] | None = None, seeds: int | None = None,
              confirm: int = CONFIRM, records: list[str | Path] = (), workers: int = 1,
              threads: int = 1, engine: str = "local", reference: str | Path | None = None,
              check: bool = True, out: str | Path = "runs",
              monitor: Callable[[str], Monitor] | None = None,
              say: Callable[[str], None] | None = None, plots: bool = True,
              dry_run: bool = False) -> dict:
    """Measure `mixer`'s lr window at table `table` of the reference's protocol (module
    docstring). Returns the answer (window.json); with `dry_run`, the plan (ladder, seeds, the
    records that count, the runs at most) without checking, training or writing anything."""
    say = say or (lambda _text: None)
    started = time.perf_counter()
    # what needs no reference is checked before one is unpacked
    ladder = check_ladder(list(lrs) if lrs is not None else list(LADDER))
    n_confirm = int(confirm)
    c_seeds = confirm_seeds(n_confirm)
    if workers < 1 or threads < 1:
        raise RecallLabError(f"--workers and --threads must be >= 1, got {workers}, {threads}")
    if seeds is not None and not 1 <= seeds < CONFIRM_FROM:
        raise RecallLabError(f"--seeds must be >= 1, got {seeds}" if seeds < 1 else
                             f"--seeds {seeds} reaches the confirmation seeds (from "
                             f"{CONFIRM_FROM}): at most {CONFIRM_FROM - 1}")
    records = [Path(p) for p in records]
    for p in records:
        if not p.is_dir():
            raise RecallLabError(f"records folder {p} does not exist")
    target = resolve_target(mixer, kwargs)  # a rejected kwarg or path ends here
    with ExitStack() as stack:
        ref = stack.enter_context(open_reference(reference))
        if not Path(ref).is_dir():
            raise RecallLabError(f"reference folder {ref} does not exist")
        protocol = read_protocol(ref)
        seed_list = window_seeds(protocol, seeds)
        size = check_table(protocol, float(table))
        model = pl.mixer_table(mixer, kwargs)
        label = pl.mixer_row_label(mixer, kwargs)
        size_name = pl.table_name(size, protocol)
        exp = window_experiment(protocol, model, size, ladder, seed_list)
        pl.try_longest(exp, protocol, label, kwargs)  # in --dry-run too
        check_records(records, exp.runs[0].config.to_json())
        sources = _sources(Path(ref), reference, records, stack)
        claims = make_claims(label, size_name, protocol.level, n_confirm)
        rule = RULE.format(first=CONFIRM_FROM)
        pid = pl.protocol_id(Path(ref), protocol)
        folder = Path(out) / folder_name(label, model, size, pid)
        # the ladder as far as it can grow: the runs a dry run counts at most
        widest = list(ladder)
        for side in (-1, 1):
            while True:
                nxt = half_decade(widest[0] if side < 0 else widest[-1], side)
                if beyond(nxt):
                    break
                widest = [nxt, *widest] if side < 0 else [*widest, nxt]
                if len(widest) > 40:
                    break
        if dry_run:
            wide = window_experiment(protocol, model, size, widest, seed_list)
            found = find_reusable(wide, sources)
            conf = window_experiment(protocol, model, size, [ladder[0]], c_seeds,
                                     CONFIRMATION).runs if c_seeds else []
            reused_by = {lr: sum(1 for r in wide.runs if r.name in found
                                 and r.config.train.lr == lr) for lr in widest}
            return {"dry_run": True, "label": label, "model": model, "table": size,
                    "table_name": size_name, "reference": protocol.name, "ladder": ladder,
                    "widest": widest, "bounds": list(BOUNDS), "seeds": seed_list,
                    "confirm_seeds": c_seeds, "rule": rule, "claims": claims,
                    "reused": {f"{lr:g}": n for lr, n in reused_by.items()},
                    "reused_from": sorted({label for label, _, _ in found.values()}),
                    "runs_ladder": len(ladder) * len(seed_list)
                    - sum(reused_by[lr] for lr in ladder),
                    "runs_growth": (len(widest) - len(ladder)) * len(seed_list)
                    - sum(reused_by[lr] for lr in widest if lr not in ladder),
                    "runs_confirm": len(c_seeds), "folder": str(folder),
                    # the runs the estimate times: the window's to train, then the confirmation
                    "phases": [[r for r in wide.runs if r.name not in found], conf]}
        plan_path = folder / PLAN
        key = {"model": model, "table": size, "protocol": pid}
        if plan_path.is_file():
            old = ck.read_json(plan_path, "lr-window plan")
            if old.get("config") != key:
                raise RecallLabError(f"{folder} belongs to another config "
                                     f"({_first_difference(key, old.get('config') or {})})")
        if check:
            pl.refuse_failing_check(target, label, say, "runs it anyway")
        folder.mkdir(parents=True, exist_ok=True)
        plan = ck.read_json(plan_path, "lr-window plan") if plan_path.is_file() else {}
        ladder = sorted(set(ladder) | set(plan.get("ladder") or []))  # a grown ladder stays
        plan = {**plan, "config": key, "mixer": mixer, "kwargs": kwargs or None,
                "label": label, "model": model, "table": size, "table_name": size_name,
                "reference": {"name": protocol.name,
                              "folder": None if reference is None else str(reference)},
                "ladder": ladder, "bounds": list(BOUNDS), "seeds": seed_list,
                "confirm_seeds": c_seeds, "rule": rule, "claims": claims,
                "level": protocol.level, "solve_at": protocol.solve_at,
                "metric": protocol.metric, "records": [str(p) for p in records],
                "growth": plan.get("growth") or [], "written": plan.get("written") or _now()}
        ck.write_json(plan_path, plan)
        # the rule and claims are recorded before the first run; every run stores their hash
        reg = prereg.register(folder, [{**c, "rule": rule} for c in claims])
        bound = prereg.binding(folder, reg)
        for line in prereg.binding_lines(bound):
            say(line)
        sweep = _sweeper(folder, workers, threads, engine, monitor, bound)
        tried: set[tuple[float, int]] = set()
        rounds = 0
        while True:
            exp = window_experiment(protocol, model, size, ladder, seed_list)
            reused = copy_reused(exp, folder, find_reusable(exp, sources))
            state = assess(pl.records(exp, folder), ladder, protocol, reused)
            grown, note = grow(ladder, state["best"])
            if note and note not in plan["growth"]:
                plan["growth"].append(note)
                say(note)
            if grown != ladder:
                ladder = plan["ladder"] = grown
                ck.write_json(plan_path, plan)
                continue
            batch = next_seeds(state, tried, workers)
            if not batch:
                break
            rounds += 1
            for seed_group, group_lrs in batch.items():
                say(f"round {rounds}: lr {', '.join(f'{x:g}' for x in group_lrs)}, seeds "
                    f"{', '.join(map(str, seed_group))}")
                tried |= {(x, s) for x in group_lrs for s in seed_group}
                sweep(exp, _only(group_lrs, seed_group))
        conf, exps = None, [exp]
        if c_seeds and state["best"] is not None and state["settled"]:
            best = state["best"]
            if plan.get("confirmed_lr") not in (None, best):
                say(f"the best lr is now {best:g}, not the {plan['confirmed_lr']:g} confirmed "
                    "before: its own confirmation seeds run")
            plan["confirmed_lr"] = best
            ck.write_json(plan_path, plan)
            conf_exp = window_experiment(protocol, model, size, [best], c_seeds, CONFIRMATION)
            reused = copy_reused(conf_exp, folder, find_reusable(conf_exp, sources))
            say(f"confirmation: {len(c_seeds)} fresh seeds at lr {best:g}")
            sweep(conf_exp, None)
            conf = confirmation(pl.records(conf_exp, folder), best, protocol, reused)
            exps.append(conf_exp)
        answer = build_answer(folder, plan, state, conf, exps, protocol)
        answer["wall_s_this_call"] = time.perf_counter() - started
        write_answer(answer, folder, plots=plots)
        return answer


def build_answer(folder: Path, plan: dict, state: dict, conf: dict | None,
                 exps: list[Experiment], protocol: Protocol) -> dict:
    """The answer: the plan's rule and claims, the window (`assess`), the confirmation, and
    every finished run of the window's and the confirmation's experiments."""
    reused = ck.read_json(folder / REUSED, "reused records") if (folder / REUSED).is_file() \
        else {}
    runs, launched = [], []
    for exp in exps:
        for r in pl.records(exp, folder):
            if r.launched:
                launched.append(r)
            if r.status != "done":
                continue
            acc = r.metric(protocol.metric)
            runs.append({"experiment": exp.name, "name": r.name, "lr": r.config["train.lr"],
                         "seed": r.config["train.seed"], "acc": acc,
                         "solved": stats.is_solved(acc, protocol.solve_at),
                         "stopped_at": (r.summary or {}).get("stopped_at"),
                         "reused": reused.get(r.name), "launched": r.launched})
    return {"label": plan["label"], "mixer": plan["mixer"], "kwargs": plan["kwargs"],
            "table": plan["table"], "table_name": plan["table_name"],
            "reference": plan["reference"], "rule": plan["rule"], "claims": plan["claims"],
            "level": plan["level"], "solve_at": plan["solve_at"], "metric": plan["metric"],
            "bounds": plan["bounds"], "growth": plan["growth"], "seeds": plan["seeds"],
            **state, "confirmation": conf, "runs": runs, "folder": str(folder),
            "registration": prereg.run_bindings(launched, prereg.read_registry(folder)),
            "figures": []}


def after_placement(answer: dict, **kw: Any) -> dict | None:
    """`place --lr-window`: the lr window of a finished placement's mixer at its boundary table
    (`boundary_table` of its cells), with `kw` as `lr_window`'s (workers, reference, out, ...);
    its answer, or None where every table was solved in every seed (no boundary). The
    placement's own cells at that table count as their lr's seeds; the mixer passed its check
    before the placement trained, so it is not checked again."""
    cells = {c["size"]: stats.wilson(c["solved"]["k"], c["solved"]["n"])
             for c in answer["cells"] if c["solved"]}
    table = boundary_table(cells)
    say = kw.get("say") or (lambda _text: None)
    if table is None:
        say("lr window: no boundary table (every table solved in every seed)")
        return None
    say(f"lr window at the boundary table, {table:g}")
    records = [*kw.pop("records", []), answer["folder"]]  # the placement's cells count
    return lr_window(answer["mixer"], answer["kwargs"], table=table, check=False,
                     records=records, **kw)


# ---- the answer in words ------------------------------------------------------------------------

def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def window_text(a: dict) -> str:
    """"1e-3 to 3e-3 (0.5 decades)", with "(edge)" and the caveats."""
    if a["best"] is None:
        return "no finished seed"
    if not a["solved_any"]:
        return "none: no seed solved at any lr"
    w = a["window"]
    text = (f"{_g(min(w))} to {_g(max(w))} ({a['width_decades']:.1f} decades)" if len(w) > 1
            else f"{_g(w[0])} alone")
    if a["edge"]:
        text += " (best at the ladder's edge)"
    if not a["contiguous"]:
        text += " (not contiguous)"
    if not a["settled"]:
        text += " (open: seeds still to run)"
    return text


def lines(a: dict) -> list[str]:
    """The answer in sentences (what the command prints)."""
    out = [f"{a['label']} at {a['table_name']}: best lr {_g(a['best'])}; window "
           f"{window_text(a)}"]
    for r in a["rungs"]:
        p = "" if r["p_best_more"] is None else f", best more p = {r['p_best_more']:.3g}"
        out.append(f"lr {_g(r['lr'])}: {r['solved']['text']} solved, {r['verdict']}{p}; "
                   f"{r['status']}")
    out += a["growth"]
    c = a.get("confirmation")
    if c:
        out.append(f"confirmation at lr {_g(c['lr'])} (fresh seeds only): "
                   f"{c['solved']['text']} solved")
    return out


def markdown(a: dict) -> str:
    reg = a["registration"]
    ladder = a["ladder"]
    out = [f"# lr window: {a['label']} at {a['table_name']}", "",
           f"Reference protocol `{a['reference']['name']}` at its {a['table_name']} table: "
           f"every run's config is a placement cell's but for its lr; solved = "
           f"{a['metric']} >= {a['solve_at']:g}. Ladder {', '.join(map(_g, ladder))} "
           f"(half-decade steps; it grows by half a decade where the best lr is at an end, "
           f"within {_g(a['bounds'][0])} and {_g(a['bounds'][1])}); up to {len(a['seeds'])} "
           "seeds per lr, in rounds, an lr stopping once its comparison with the best is "
           "settled.", "", "## The rule", "", a["rule"], "",
           "## Claims (recorded before the first run)", "",
           prereg.registration_text(reg), ""]
    out += [f"{i}. {c['claim']}" for i, c in enumerate(a["claims"], 1)]
    out += ["", "## The window", "",
            f"Best lr: **{_g(a['best'])}**. Window: **{window_text(a)}**. Edge: "
            f"{'**yes**' if a['edge'] else 'no'}.", ""]
    out += [f"- {g}" for g in a["growth"]]
    if a["reaches_end"] and not a["edge"]:
        out.append("- the window reaches an end of the ladder: its width there is a lower "
                   "bound")
    out += ["", "| lr | seeds solved [Wilson 95%] | against the best | status | held-out "
            "accuracy per seed (* reused record) |", "| ---: | --- | --- | --- | --- |"]
    for r in a["rungs"]:
        p = "" if r["p_best_more"] is None else f" (best more: p = {r['p_best_more']:.3g})"
        accs = ", ".join(f"{s['seed']}: {s['acc']:.3f}{'*' if s['reused'] else ''}"
                         for s in r["seeds"] if s["acc"] is not None) or "-"
        out.append(f"| {_g(r['lr'])} | {r['solved']['text']} | {r['verdict']}{p} | "
                   f"{r['status']} | {accs} |")
    c = a.get("confirmation")
    out += ["", "## Confirmation at the best lr", ""]
    if c:
        out.append(f"{c['solved']['text']} of fresh seeds solved at lr {_g(c['lr'])} "
                   f"({', '.join(str(s['seed']) for s in c['seeds']) or 'none finished'}); "
                   "the only count a verdict at the best lr reads.")
    else:
        out.append("Not run (no confirmation seeds asked for, or the window is not settled): "
                   "the best lr's count above chose it and carries no verdict.")
    out += ["", "## Every run", "", "| experiment | run | lr | seed | held-out accuracy | "
            "solved | from |", "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    for r in sorted(a["runs"], key=lambda r: (r["experiment"] != WINDOW, r["lr"], r["seed"])):
        acc = "-" if r["acc"] is None else f"{r['acc']:.3f}"
        out.append(f"| {r['experiment']} | {r['name']} | {_g(r['lr'])} | {r['seed']} | {acc} | "
                   f"{'yes' if r['solved'] else 'no'} | "
                   f"{r['reused'] or 'trained here'} |")
    if a["figures"]:
        out += ["", f"![lr window]({Path(a['figures'][0]).name})"]
    return "\n".join(out) + "\n"


def write_answer(answer: dict, folder: Path, plots: bool = True) -> list[Path]:
    if plots:
        from recall_lab.experiments.lr_window_plot import window_figure

        answer["figures"] = [str(window_figure([answer], folder / FIGURE)[0])]
    ck.write_json(folder / ANSWER, answer)
    (folder / "report.md").write_text(markdown(answer))
    return [folder / ANSWER, folder / "report.md", *map(Path, answer["figures"])]


__all__ = ["BOUNDS", "CONFIRM", "CONFIRM_FROM", "LADDER", "PILOT_SEEDS", "RULE",
           "after_placement", "assess", "boundary_table", "check_ladder", "confirmation", "grow",
           "half_decade", "lr_window", "next_seeds", "pilot_lines", "pilot_rule_2",
           "window_experiment"]
