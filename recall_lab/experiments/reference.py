"""The frontier a mixer is placed against (`recall-lab place`): a reference folder and the
protocol it was run under.

A reference is a sweep's records without weights (`recall-lab archive`: sweep.json, claims.json,
each run's config.json, summary.json and metrics.jsonl) plus `place.toml`, which says how to run
the same protocol for a new mixer:

    experiment = "zoo-frontier.toml"     # the experiment file the records came from, beside it:
                                         # its [model], [train], [task] tables, its tables with
                                         # their step budgets ([[link]] over task.levels), its
                                         # seeds ([grid] train.seed), [report] metric, solve_at
    [pilot]                              # the lr pilot's written rule
    "task.levels" = [[16, 16]]           # the table it runs at
    lrs = [1e-3, 3e-3, 1e-2]
    seed = 30
    tie = 0.01                           # best held-out accuracy; a difference below `tie` is
                                         # a tie, and a tie goes to the smaller lr
    rule = 2                             # optional: pilot rule 2 (2 seeds per lr, an edge
                                         # winner extends the grid; docs/place.md), as
                                         # `place --pilot-rule 2`; default 1
    [cut]                                # the cut rule (optional)
    "task.levels" = [[16, 16]]           # the table whose count decides
    at_least = 5                         # seeds solved there for a row to run ...
    skip = [[[32, 32]]]                  # ... these tables

An experiment whose tables are whole task tables (a [[link]] over "task", e.g. a generator's
kwargs: the overwrite tables) names each table's size and name in place.toml, since no field
holds a number of entries; its pilot and cut rule then name tables by size:

    [tables]
    sizes = [12, 16]                     # one per task table, in the link's order; the
    names = ["8 live, 12 written", ...]  # frontier reads them as sizes (larger = harder)
    [pilot]
    table = 16                           # instead of "task.levels"

The lab ships two references as package data, each a compressed archive in
`recall_lab/experiments/reference_data/` that `open_reference` unpacks into a temporary folder:
- `zoo-frontier` (the default): the zoo-frontier's 570 runs (about 0.4 MB for 12 MB of
  records), built by `pack_reference` (sorted members, no owners or times: the same files give
  the same bytes);
- `frontier-2026`: the same records plus the cells of the 2025-26 families' placements
  (docs/results/frontier-2026/), built by `pack_combined` (`scripts/frontier_2026.py`). Its
  place.toml is the zoo-frontier's protocol with its own header, so a placement against it
  gets its own folder (`place.protocol_id` reads the file's text);
- `overwrite-2026`: the overwrite frontier's forgetting tables (8 live keys with 12 and 16
  writes; docs/results/overwrite/), whole task tables sized by their writes, built by
  `pack_reference` with `keep` (`scripts/overwrite_page.py --reference`).
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from recall_lab import checkpoint as ck
from recall_lab.config import RUN_TABLES, read_toml
from recall_lab.experiments.archive import RUN_FILES
from recall_lab.experiments.claims import CLAIMS
from recall_lab.experiments.engine import INDEX
from recall_lab.experiments.grid import flatten, numeric
from recall_lab.generators.errors import RecallLabError

PLACE = "place.toml"
PILOT_SEEDS = (30, 31)  # pilot rule 2: two seeds per pilot lr (30 is rule 1's one seed)
SHIPPED = "zoo-frontier"  # the default reference
SHIPPED_REFERENCES = ("zoo-frontier", "frontier-2026", "overwrite-2026")
DATA = "reference_data"


@dataclass(frozen=True)
class Table:
    levels: list | None  # task.levels as written, e.g. [[16, 16]]; None for a whole-task table
    steps: int  # its step budget
    size: float  # `grid.numeric`: the number of entries (place.toml's [tables] sizes)
    task: dict | None = None  # a whole-task table as the link writes it ([tables] protocols)
    name: str | None = None  # place.toml's [tables] names


@dataclass(frozen=True)
class Protocol:
    """How the reference's rows were run, for one new row."""

    name: str  # the reference experiment's name
    base: dict  # {"model", "train", "task"}: the experiment's base tables
    tables: list[Table]
    seeds: list[int]
    metric: str
    solve_at: float
    pilot: dict  # {"levels", "steps", "lrs", "seed", "tie"}
    cut: dict | None  # {"levels", "size", "at_least", "skip": [sizes]}
    level: float = 0.05

    def table(self, size: float) -> Table:
        return next(t for t in self.tables if t.size == size)

    @property
    def whole_task(self) -> bool:
        """Whether the tables are whole task tables (a link over "task"), not task.levels."""
        return any(t.task is not None for t in self.tables)

    @property
    def table_fields(self) -> list[str]:
        """The flat fields that tell the tables apart: task.levels, or those of the task
        tables' fields whose values differ between them (a single table: all its fields)."""
        if not self.whole_task:
            return ["task.levels"]
        flats = [flatten({"task": t.task}) for t in self.tables]
        keys = sorted({k for f in flats for k in f})
        if len(flats) == 1:
            return keys
        return [k for k in keys if len({_text(f.get(k)) for f in flats}) > 1]

    def at(self, size: float) -> dict:
        """The flat fields (and values) that pick table `size`'s runs: a claim's `at`."""
        t = self.table(size)
        if t.task is None:
            return {"task.levels": t.levels}
        flat = flatten({"task": t.task})
        return {k: flat.get(k) for k in self.table_fields}

    def size_of(self, config: dict) -> float | None:
        """The table of a run's flat config: its size, or None for none of the tables (a
        task.levels protocol reads any levels' size, as `grid.numeric` does)."""
        if not self.whole_task:
            return numeric("task.levels", config.get("task.levels"))
        return match_table(config, {t.size: self.at(t.size) for t in self.tables})

    def link(self, sizes: list[float]) -> dict:
        """The [[link]] over the tables of `sizes` and their step budgets (a cell's grid)."""
        tabs = [self.table(s) for s in sizes]
        if not self.whole_task:
            return {"task.levels": [t.levels for t in tabs], "train.steps": [t.steps for t in tabs]}
        return {"task": [dict(t.task) for t in tabs], "train.steps": [t.steps for t in tabs]}

    def task_of(self, size: float) -> dict:
        """The [task] table of one table's runs (the pilot's)."""
        t = self.table(size)
        return dict(t.task) if t.task is not None else {**self.base["task"], "levels": t.levels}


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def match_table(config: dict, ats: dict[float, dict]) -> float | None:
    """The table (of `ats`: size -> the fields that pick it, `Protocol.at`) whose fields a run's
    flat config has, or None."""
    for size, at in ats.items():
        if all(_text(config.get(k)) == _text(v) for k, v in at.items()):
            return float(size)
    return None


def shipped_archive(name: str = SHIPPED) -> Path:
    return Path(str(resources.files("recall_lab.experiments") / DATA / f"{name}.tar.xz"))


def _extract(archive: Path, dest: Path) -> None:
    with tarfile.open(archive, "r:xz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Python before 3.11.4
            for m in tar.getmembers():
                if m.name.startswith(("/", "..")) or ".." in Path(m.name).parts:
                    raise RecallLabError(f"{archive}: unsafe member {m.name}")
            tar.extractall(dest)


@contextlib.contextmanager
def open_reference(folder: str | Path | None = None) -> Iterator[Path]:
    """The reference folder: `folder` itself, or a shipped reference's name (None: the default,
    zoo-frontier) unpacked into a temporary folder that lives as long as the context. A folder
    that exists wins over a shipped name."""
    if folder is not None and (Path(folder).is_dir() or str(folder) not in SHIPPED_REFERENCES):
        yield Path(folder)
        return
    archive = shipped_archive(SHIPPED if folder is None else str(folder))
    if not archive.is_file():
        raise RecallLabError(f"this installation of recall-lab carries no reference records "
                             f"({archive} is missing): pass --reference FOLDER")
    with tempfile.TemporaryDirectory(prefix="recall-lab-reference-") as tmp:
        _extract(archive, Path(tmp))
        yield Path(tmp)


def _levels_table(data: dict, where: str) -> tuple[list, list, list | None]:
    """(levels, steps, tasks) of the experiment's tables: the [[link]] (or [grid] axis) over
    task.levels, with train.steps linked to it or the base budget; or a [[link]] over whole
    "task" tables (`tasks`: those tables, levels None)."""
    steps = (data.get("train") or {}).get("steps")
    for link in (data.get("link") or []) + [data.get("grid") or {}]:
        if isinstance(link, dict) and isinstance(link.get("task"), list):
            tasks = link["task"]
            budget = link.get("train.steps", [steps] * len(tasks))
            if not isinstance(budget, list) or len(budget) != len(tasks) \
                    or not all(isinstance(t, dict) for t in tasks):
                break
            return [None] * len(tasks), budget, tasks
        flat = flatten(link) if isinstance(link, dict) else {}
        if "task.levels" in flat:
            levels = flat["task.levels"]
            budget = flat.get("train.steps", [steps] * len(levels))
            if not isinstance(budget, list) or len(budget) != len(levels):
                break
            return levels, budget, None
    levels = (data.get("task") or {}).get("levels")
    if levels is None or steps is None:
        raise RecallLabError(f"{where}: no tables (task.levels) with a step budget")
    return [levels], [steps], None


def _tables(spec: dict, data: dict, path: Path, where: str) -> list[Table]:
    """The experiment's tables; whole task tables take their sizes (and names) from
    place.toml's [tables]."""
    levels, budgets, tasks = _levels_table(data, where)
    if tasks is None:
        tables = []
        for lv, st in zip(levels, budgets, strict=True):
            size = numeric("task.levels", lv)
            if size is None or not isinstance(st, int):
                raise RecallLabError(f"{where}: table {lv!r} with budget {st!r} is not a table")
            tables.append(Table(lv, st, size))
        return tables
    named = spec.get("tables") or {}
    sizes, names = named.get("sizes"), named.get("names", [None] * len(tasks))
    if not isinstance(sizes, list) or len(sizes) != len(tasks) \
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in sizes) \
            or len(set(sizes)) != len(sizes) or not isinstance(names, list) \
            or len(names) != len(tasks):
        raise RecallLabError(f"{path}: the experiment's tables are whole task tables: [tables] "
                             f"needs sizes (and names), {len(tasks)} distinct numbers in the "
                             "link's order")
    if not all(isinstance(st, int) for st in budgets):
        raise RecallLabError(f"{where}: the tables' budgets {budgets!r} are not step counts")
    return [Table(None, st, float(sz), dict(task), None if nm is None else str(nm))
            for task, st, sz, nm in zip(tasks, budgets, sizes, names, strict=True)]


def _size(section: dict, key_levels: str, tables: list[Table]) -> float | None:
    """The table a [pilot] / [cut] names: by task.levels, or by size (`table`)."""
    if "table" in section:
        value = section["table"]
        return float(value) if isinstance(value, (int, float)) \
            and not isinstance(value, bool) else None
    return numeric("task.levels", section.get(key_levels))


def read_protocol(folder: Path) -> Protocol:
    """The protocol of the reference in `folder` (one clear line where it has none)."""
    path = Path(folder) / PLACE
    if not path.is_file():
        raise RecallLabError(f"reference folder {folder} has no {PLACE} (the protocol `place` "
                             "runs: see docs/place.md)")
    spec = read_toml(path)
    exp_path = Path(folder) / str(spec.get("experiment", ""))
    if not spec.get("experiment") or not exp_path.is_file():
        raise RecallLabError(f"{path}: `experiment` must name the experiment file beside it")
    data = read_toml(exp_path)
    where = str(exp_path)
    if "base" in data:
        raise RecallLabError(f"{where}: a reference experiment file must hold its own tables "
                             "(no `base`)")
    base = {t: dict(data.get(t) or {}) for t in RUN_TABLES}
    tables = _tables(spec, data, path, where)
    seeds = flatten(data.get("grid") or {}).get("train.seed")
    if not isinstance(seeds, list) or not seeds:
        raise RecallLabError(f"{where}: no [grid] train.seed list (the seeds per cell)")
    report = data.get("report") or {}
    pilot = spec.get("pilot") or {}
    need = ("task.levels" if "table" not in pilot else "table", "lrs", "seed")
    if any(k not in pilot for k in need):
        raise RecallLabError(f"{path}: [pilot] needs {', '.join(need)}")
    p_size = _size(pilot, "task.levels", tables)
    if p_size not in {t.size for t in tables}:
        raise RecallLabError(f"{path}: the pilot's table is none of the experiment's tables")
    p_table = next(t for t in tables if t.size == p_size)
    rule = pilot.get("rule", 1)
    if isinstance(rule, bool) or rule not in (1, 2):
        raise RecallLabError(f"{path}: [pilot] rule must be 1 or 2, got {rule!r}")
    cut = spec.get("cut")
    if cut is not None:
        c_size = _size(cut, "task.levels", tables)
        skip = [float(s) if "table" in cut and isinstance(s, (int, float)) else
                numeric("task.levels", s) for s in cut.get("skip") or []]
        sizes = {t.size for t in tables}
        if c_size not in sizes or not skip or any(s not in sizes for s in skip) \
                or not isinstance(cut.get("at_least"), int):
            raise RecallLabError(f"{path}: [cut] needs task.levels (or table) and skip among "
                                 "the experiment's tables, and an integer at_least")
        cut = {"levels": next(t for t in tables if t.size == c_size).levels, "size": c_size,
               "at_least": cut["at_least"], "skip": skip}
    return Protocol(name=str(data.get("name", exp_path.stem)), base=base, tables=tables,
                    seeds=[int(s) for s in seeds], metric=str(report.get("metric", "test.acc")),
                    solve_at=float(report.get("solve_at", 0.95)),
                    pilot={"levels": p_table.levels, "size": p_size, "steps": p_table.steps,
                           "lrs": [float(x) for x in pilot["lrs"]], "seed": int(pilot["seed"]),
                           "tie": float(pilot.get("tie", 0.01)),
                           # rule 2 only: a rule-1 protocol's pilot reads as it always did
                           **({"rule": 2, "seeds": list(PILOT_SEEDS)} if rule == 2 else {})},
                    cut=cut, level=float(spec.get("level", 0.05)))


def pick_lr(results: dict[float, float | None], tie: float) -> float | None:
    """The pilot's written rule: the lr with the best held-out accuracy; a difference below
    `tie` is a tie, and a tie goes to the smaller lr. None when no run finished."""
    done = {lr: acc for lr, acc in results.items() if acc is not None}
    if not done:
        return None
    best = max(done.values())
    return min(lr for lr, acc in done.items() if best - acc < tie)


def _write_tar(members: list[tuple[str, bytes]], dest: Path) -> None:
    """`dest` (a .tar.xz) holding `members` sorted by name, owners and times zeroed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    Path(dest).write_bytes(buf.getvalue())


def _finished(records: Path) -> list[tuple[dict, Path]]:
    """(index entry, run folder) of every run in a sweep's records with a summary."""
    index = ck.read_json(Path(records) / INDEX, "sweep index")
    return [(e, Path(records) / e["name"]) for e in index.get("runs", [])
            if (Path(records) / e["name"] / ck.SUMMARY).is_file()]


def _run_members(name: str, run: Path) -> list[tuple[str, bytes]]:
    return [(f"{name}/{f}", (run / f).read_bytes()) for f in RUN_FILES if (run / f).is_file()]


def pack_reference(records: Path, files: list[Path], dest: Path,
                   keep: Callable[[dict], bool] | None = None) -> int:
    """Write `dest` (a .tar.xz) from a sweep archive `records` (its index, claims and each
    finished run's records) and `files` (place.toml, the experiment file) at its top. Members
    sorted, owners and times zeroed. `keep` (an index entry -> bool): only those runs, in the
    index too (the overwrite reference keeps its forgetting tables). Returns the number of
    runs."""
    members = [(p.name, p.read_bytes()) for p in files]
    names = (INDEX, CLAIMS) if keep is None else (CLAIMS,)
    members += [(name, (Path(records) / name).read_bytes()) for name in names
                if (Path(records) / name).is_file()]
    runs = _finished(records)
    if keep is not None:
        index = ck.read_json(Path(records) / INDEX, "sweep index")
        index = {**index, "runs": [e for e in index.get("runs", []) if keep(e)]}
        index.pop("timing", None)  # the whole sweep's last call, not this archive's
        members.append((INDEX, (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()))
        runs = [(e, run) for e, run in runs if keep(e)]
    for entry, run in runs:
        members += _run_members(entry["name"], run)
    _write_tar(members, dest)
    return len(runs)


def pack_combined(base: Path, placements: dict[str, Path], place_toml: str, dest: Path) -> int:
    """Write `dest` (a .tar.xz reference): the reference folder `base` (its experiment file,
    claims, index and runs) with `place_toml` as its protocol file, plus the finished cell runs
    of each placement (`placements`: a short name -> the placement folder, whose `cells/` are a
    sweep's records), each run as `NAME-RUN` in the index. The placements must have run the
    base's protocol: a cell whose task (all but its table) or batch size differs from the base
    experiment's is refused. Returns the number of runs added."""
    base = Path(base)
    index = ck.read_json(base / INDEX, "sweep index")
    protocol = read_protocol(base)
    members = [(PLACE, place_toml.encode())]
    spec = read_toml(base / PLACE)
    members.append((str(spec["experiment"]), (base / str(spec["experiment"])).read_bytes()))
    if (base / CLAIMS).is_file():
        members.append((CLAIMS, (base / CLAIMS).read_bytes()))
    for entry, run in _finished(base):
        members += _run_members(entry["name"], run)
    added = []
    for short, folder in sorted(placements.items()):
        for entry, run in _finished(Path(folder) / "cells"):
            cfg = entry["config"]
            base_task = {k: v for k, v in protocol.base["task"].items() if k != "levels"}
            if any(cfg["task"].get(k) != v for k, v in base_task.items()) \
                    or cfg["train"].get("batch_size") != protocol.base["train"].get("batch_size"):
                raise RecallLabError(f"{folder}: run {entry['name']} did not run the "
                                     f"{protocol.name} protocol")
            name = f"{short}-{entry['name']}"
            added.append({**entry, "name": name})
            members += _run_members(name, run)
    index = {**index, "runs": index.get("runs", []) + added}
    index.pop("timing", None)  # the base sweep's last call, not this archive's
    members.append((INDEX, (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()))
    _write_tar(members, dest)
    return len(added)


__all__ = ["PLACE", "SHIPPED_REFERENCES", "Protocol", "Table", "open_reference",
           "pack_combined", "pack_reference", "pick_lr", "read_protocol", "shipped_archive"]
