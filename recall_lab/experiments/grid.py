"""An experiment file -> the list of runs it stands for (pure: nothing is trained or written).

An experiment is a TOML file: a base run config (the `[model]`, `[train]`, `[task]` tables that
`recall-lab train -c` reads, or `base = "other.toml"`, a run config whose tables this file's
tables override key by key) and a `[grid]` of axes over config fields named by dotted path:

    name = "tiny"                        # optional: the folder under runs/ (default: file stem)
    base = "mini-mqjr.toml"              # optional, relative to this file

    [train]
    steps = 300

    [grid]                               # the cross product of every axis ...
    "model.name" = ["mamba", "mamba+hax"]
    "train.lr" = [1e-3, 3e-3]
    "train.seed" = [0, 1]
    # model.d_state = [8, 16]            # (dotted keys without quotes work too)

    [[link]]                             # ... where linked axes move together (zip):
    "task.seq_len" = [256, 512]          # equal lengths; the pair is one axis of the product
    "train.batch_size" = [32, 16]

    [[exclude]]                          # drop every run matching all of these fields
    "model.name" = "mamba"               # (a list matches any of its values; a field inside
    "train.lr" = 3e-3                    # a swept whole table, e.g. model.d_state under a
                                         # linked "model" axis, matches where that table sets it)

    [reference]                          # optional: published numbers, drawn beside ours
    source = "joint-recall paper Table 1"          # by `recall-lab report` (keys: group labels)
    task = "paper-mqjr"                  # optional: the task those numbers were measured on
    values = { "mamba" = 0.31, "mamba+hax" = 0.92 }

    [[report.expect]]                    # optional: claims checked by `report --check`
    a = { "model.name" = "mamba+hax" }
    b = { "model.name" = "mamba" }
    margin = 0.2                         # test mean of a >= test mean of b + margin

An axis may also name a whole table (`"model" = [{ name = "attamba", attamba = { chunk = 4 } },
{ name = "transformer" }]`): each value is merged into that table, so rows that need different
fields (one model's sub-config, a baseline without it) can share one grid or link.

Fields are those of `ModelConfig`, `TrainConfig` and `TaskSpec` (`task.preset` too): `model.name`,
`model.d_model`, `model.d_state`, `model.k`, `train.lr`, `train.seed`, `train.steps`,
`task.levels`, and fields of typed sub-configs (`model.decimation.beta`). Every run is validated
here, so a typo or a bad value is one error line before anything runs. A run is named from its
swept values (`mamba+hax-lr0.001-s0`) plus the first 8 hex digits of the SHA-256 of its full
config (`RunConfig.to_json`, sorted keys): its folder is `runs/<experiment>/<name>-<hash>/`, so
changing any value gives a new run and an unchanged one is found again, also when a grid edit
(a new or reordered axis) changes its name: `sweep` finds it by the hash and renames its folder.
(A new field in a config
class, or a changed default, also changes every hash: runs made before such a code change are not
found again by the sweep; they stay on disk and `sweep` counts them as outside the grid.) Model
names are checked against the model registry (through the run layer, which imports torch).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from recall_lab.config import RUN_TABLES, ModelConfig, RunConfig, TrainConfig, read_toml
from recall_lab.experiments.shipped import (
    is_shipped_name,
    shipped_files,
    shipped_path,
    study,
)
from recall_lab.generators import TaskSpec
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.tasks import GeneratorTask
from recall_lab.runs import run_config_from_tables

TOP_LEVEL = {"name", "base", "description", *RUN_TABLES, "grid", "link", "exclude", "report",
             "reference"}
SHORT = {"model.name": "", "train.lr": "lr", "train.seed": "s", "train.data_seed": "ds"}


@dataclass(frozen=True)
class Run:
    """One run of an experiment: its config, the swept values that name it, and its folder."""

    config: RunConfig
    values: dict[str, Any]  # dotted field -> value, for every axis of the grid
    label: str  # readable part of the name, from `values`
    hash: str  # first 8 hex digits of the SHA-256 of the full config

    @property
    def name(self) -> str:
        return f"{self.label}-{self.hash}" if self.label else self.hash


@dataclass(frozen=True)
class Experiment:
    name: str
    source: Path | None
    runs: list[Run]
    axes: list[str]  # dotted fields that the grid sweeps, in file order
    report: dict = field(default_factory=dict)  # the raw [report] table
    reference: dict = field(default_factory=dict)  # the raw [reference] table


def config_hash(cfg: RunConfig) -> str:
    text = json.dumps(cfg.to_json(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def flatten(table: dict, prefix: str = "") -> dict[str, Any]:
    """{"model": {"name": x}} or {"model.name": x} -> {"model.name": x} (dicts are descended,
    anything else is a leaf)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def _fields() -> dict[str, set[str]]:
    return {"model": set(ModelConfig.model_fields), "train": set(TrainConfig.model_fields),
            # a generator task's fields too: `task.kwargs.input_seq_len` is an axis
            "task": set(TaskSpec.model_fields) | set(GeneratorTask.model_fields) | {"preset"}}


def check_field(path: str, where: str, values: Any = None) -> None:
    """One clear line for a dotted name that is no config field (a bare table name is an axis of
    whole tables: `values` must then be tables of its fields)."""
    table, _, key = path.partition(".")
    if not key and table in RUN_TABLES and isinstance(values, list):
        for v in values:
            if not isinstance(v, dict):
                raise RecallLabError(f"{where}: axis {path!r} takes tables of {path} fields, "
                                     f"got {v!r}")
            for k in v:
                check_field(f"{table}.{k}", where)
        return
    fields = _fields()
    if table not in fields or not key:
        raise RecallLabError(f"{where}: {path!r} is not a config field; use model.X, train.X or "
                             "task.X (e.g. model.name, train.lr, task.levels)")
    if key.split(".")[0] not in fields[table]:
        raise RecallLabError(f"{where}: unknown field {path!r}; {table} fields are "
                             f"{', '.join(sorted(fields[table]))}")


def _axis(values: Any, path: str, where: str) -> list:
    if not isinstance(values, list) or not values:
        raise RecallLabError(f"{where}: axis {path!r} must be a non-empty list of values, got "
                             f"{values!r}")
    return values


def format_value(value: Any) -> str:
    if isinstance(value, dict):  # a whole-table value: its name first, then key + value
        parts = [format_value(value["name"])] if "name" in value else []
        parts += [f"{k.rsplit('.', 1)[-1]}{format_value(v)}" for k, v in flatten(
            {k: v for k, v in value.items() if k != "name"}).items()]
        return "-".join(parts)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        if len(value) == 2 and all(isinstance(v, int) for v in value) and value[0] != value[1]:
            return f"{value[0]}-{value[1]}"  # a (lo, hi) size range
        if len(value) == 2 and all(isinstance(v, int) for v in value):
            return str(value[0])
        return "x".join(format_value(v) for v in value)
    return str(value)


def group_label(values: dict[str, Any]) -> str:
    """A group's label in reports and figures: the model name bare, other fields as
    name=value, fields a model lacks (None) left out."""
    parts = [format_value(v) if f == "model.name" or "." not in f  # or a whole-table axis
             else f"{f.rsplit('.', 1)[1]}={format_value(v)}"
             for f, v in values.items() if v is not None]
    return " / ".join(parts) or "all"


def run_label(values: dict[str, Any]) -> str:
    """mamba+hax-lr0.001-s0-d_state8: each swept value with a short prefix, filesystem-safe."""
    parts = []
    for path, value in values.items():
        prefix = SHORT.get(path, path.rsplit(".", 1)[-1] if "." in path else "")
        parts.append(f"{prefix}{format_value(value)}")
    return re.sub(r"[^A-Za-z0-9+._=-]", "_", "-".join(p for p in parts if p))


def _one_line(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "input"
        parts.append(f"{loc}: {str(e['msg']).removeprefix('Value error, ')}")
    return "; ".join(parts)


def _set(tables: dict, path: str, value: Any) -> None:
    """tables["model"]["decimation"]["beta"] = value for "model.decimation.beta" (sub-tables are
    copied, never shared between runs)."""
    if "." not in path:  # a whole-table axis: merge the value into the table
        tables[path] = {**tables[path], **value}
        return
    *parents, key = path.split(".")
    node = tables
    for part in parents:
        child = node.get(part)
        node[part] = dict(child) if isinstance(child, dict) else {}
        node = node[part]
    node[key] = value


_ABSENT = object()


def _swept_ancestor(path: str, names: list[str]) -> str | None:
    """The swept axis that holds `path`: the path itself, or a whole-table axis above it
    ("model" for model.name when rows are linked as whole model tables)."""
    parts = path.split(".")
    return next((".".join(parts[:i]) for i in range(len(parts), 0, -1)
                 if ".".join(parts[:i]) in names), None)


def _axis_value(values: dict[str, Any], path: str) -> Any:
    """A run's value of `path`: an axis' value, or a field inside a whole-table axis' value
    (absent when that table does not set it)."""
    if path in values:
        return values[path]
    axis = _swept_ancestor(path, list(values))
    node: Any = values.get(axis, _ABSENT) if axis else _ABSENT
    for key in path[len(axis or path) + 1:].split("."):
        if not isinstance(node, dict) or key not in node:
            return _ABSENT
        node = node[key]
    return node


def _matches(values: dict[str, Any], rule: dict[str, Any]) -> bool:
    for path, want in rule.items():
        have = _axis_value(values, path)
        if have is _ABSENT or not (have == want or (isinstance(want, list) and have in want)):
            return False
    return True


def parse_only(items: list[str] | None) -> dict[str, Any]:
    """`--only FIELD=VALUE` flags as {field: value}; a value is read as JSON where it parses
    (numbers, lists such as task.levels=[[16,16]]), else as text (model.name=transformer). A field
    given more than once selects any of its values: {field: (value, value, ...)} (a tuple, which
    JSON never yields, so a list value stays one value); different fields must all match."""
    out: dict[str, Any] = {}
    for item in items or []:
        field, sep, text = item.partition("=")
        if not sep or not field or not text:
            raise RecallLabError(f"--only takes FIELD=VALUE (e.g. model.name=transformer), "
                                 f"got {item!r}")
        check_field(field, "--only")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        if field in out:
            have = out[field]
            value = (*(have if isinstance(have, tuple) else (have,)), value)
        out[field] = value
    return out


def selected(run: Run, only: dict[str, Any]) -> bool:
    """Whether a run's full config has every field of `only` at its value (at one of them, for
    a tuple of alternatives: `parse_only`)."""
    flat = flatten(run.config.to_json())

    def same(a: Any, b: Any) -> bool:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

    return all(any(same(flat.get(f), w) for w in (v if isinstance(v, tuple) else (v,)))
               for f, v in only.items())


def _load_base(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """The run tables of `path`, with its own `base` chain applied (later files win)."""
    path = path.resolve()
    if path in seen:
        raise RecallLabError(f"{path}: base files form a cycle")
    data = read_toml(path)
    tables = {t: {} for t in RUN_TABLES}
    if "base" in data:
        tables = _load_base(path.parent / str(data["base"]), (*seen, path))
    for t in RUN_TABLES:
        tables[t].update(data.get(t) or {})
    return tables


def expand(data: dict, name: str, source: Path | None = None) -> Experiment:
    """The runs of an experiment given as parsed TOML (`source` resolves `base` and names the
    file in errors)."""
    where = str(source) if source is not None else "experiment"
    unknown = sorted(set(data) - TOP_LEVEL)
    if unknown:
        raise RecallLabError(f"{where}: unknown key or table {unknown[0]!r}; expected "
                             f"{', '.join(sorted(TOP_LEVEL))}")
    name = str(data.get("name", name))
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9+._-]*", name):
        raise RecallLabError(f"{where}: experiment name {name!r} must be a plain folder name")
    base: dict = {t: {} for t in RUN_TABLES}
    if "base" in data:
        root = source.parent if source is not None else Path.cwd()
        base = _load_base(root / str(data["base"]))
    for t in RUN_TABLES:
        if not isinstance(data.get(t, {}), dict):
            raise RecallLabError(f"{where}: {t} must be a table")
        base[t] = {**base[t], **(data.get(t) or {})}

    # the axes: plain ones, then linked groups; each entry is a list of {path: value} points
    axes: list[list[dict[str, Any]]] = []
    names: list[str] = []
    for path, values in flatten(data.get("grid") or {}).items():
        check_field(path, f"{where} [grid]", values)
        axes.append([{path: v} for v in _axis(values, path, f"{where} [grid]")])
        names.append(path)
    links = data.get("link") or []
    if isinstance(links, dict):
        links = [links]
    for i, link in enumerate(links):
        group = flatten(link)
        lengths = set()
        for path, values in group.items():
            check_field(path, f"{where} [[link]] {i + 1}", values)
            lengths.add(len(_axis(values, path, f"{where} [[link]] {i + 1}")))
        if len(lengths) > 1:
            raise RecallLabError(f"{where}: linked axes {', '.join(group)} have different "
                                 f"lengths ({', '.join(str(n) for n in sorted(lengths))})")
        if group:
            n = lengths.pop()
            axes.append([{p: vs[j] for p, vs in group.items()} for j in range(n)])
            names.extend(group)
    if len(set(names)) != len(names):
        dup = next(p for p in names if names.count(p) > 1)
        raise RecallLabError(f"{where}: field {dup!r} is swept twice")
    excludes = data.get("exclude") or []
    if isinstance(excludes, dict):
        excludes = [excludes]
    rules = [flatten(r) for r in excludes]
    for rule in rules:
        for path in rule:
            check_field(path, f"{where} [[exclude]]")
            if _swept_ancestor(path, names) is None:
                raise RecallLabError(f"{where}: [[exclude]] names {path!r}, which is not swept")

    runs: list[Run] = []
    seen: dict[str, str] = {}
    for point in itertools.product(*axes):
        values = {k: v for part in point for k, v in part.items()}
        values = {p: values[p] for p in names}  # file order
        if any(_matches(values, r) for r in rules):
            continue
        tables = {t: dict(base[t]) for t in RUN_TABLES}
        for path, value in values.items():
            _set(tables, path, value)
        label = run_label(values)
        try:
            cfg = run_config_from_tables(tables, f"{where}, run {label or name}")
        except ValidationError as exc:
            raise RecallLabError(f"{where}, run {label or name}: invalid configuration: "
                                 f"{_one_line(exc)}") from None
        run = Run(config=cfg, values=values, label=label, hash=config_hash(cfg))
        if run.hash in seen:
            raise RecallLabError(f"{where}: runs {seen[run.hash]} and {run.name} have the same "
                                 "config (a repeated axis value?)")
        seen[run.hash] = run.name
        runs.append(run)
    if not runs:
        raise RecallLabError(f"{where}: the grid has no runs left after exclusions")
    return Experiment(name=name, source=source, runs=runs, axes=names,
                      report=dict(data.get("report") or {}),
                      reference=dict(data.get("reference") or {}))


def load_experiment(path: str | Path) -> Experiment:
    """An experiment from its TOML file, or, where no such file exists, the shipped experiment of
    that name (`capacity` or `capacity.toml`; `recall-lab experiments list`)."""
    path = Path(path)
    if not path.exists() and is_shipped_name(str(path)):
        path = shipped_path(str(path))
    elif not path.exists() and path.suffix == ".toml":
        moved = _shipped_file(path.stem)
        if moved is not None:  # an old path, from before experiments/ had a folder per study
            where = "/".join(filter(None, ["experiments", study(moved), moved.name]))
            raise RecallLabError(f"experiment file {path} does not exist; `recall-lab sweep "
                                 f"{path.stem}` runs the shipped one ({where} in a checkout)")
    return expand(read_toml(path), path.stem, path)


def _shipped_file(stem: str) -> Path | None:
    """The shipped experiment file named `stem`, None where there is none (or no shipped
    files)."""
    try:
        return shipped_files().get(stem)
    except RecallLabError:
        return None


def numeric(field: str, value: Any) -> float | None:
    """A field's value as a number for axes and max/min: numbers themselves; `task.levels` as
    the table size, the product of the levels' upper sizes (entries of the largest table)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if field == "task.levels" and isinstance(value, (list, tuple)):
        size = 1
        for level in value:
            size *= level[1] if isinstance(level, (list, tuple)) else level
        return float(size)
    return None


def train_tokens(cfg: RunConfig) -> int:
    """Tokens a run trains on, counting padding (each batch is padded to its longest sample,
    so this is an upper bound): steps x batch size x the longest sample."""
    length = cfg.task.seq_len or cfg.task.max_len
    return cfg.train.steps * cfg.train.batch_size * length
