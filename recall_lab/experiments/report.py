"""The report over run folders: the papers' protocol (best lr on validation, test mean +/- std over
seeds), the experiment's claims checked, and the tables and figures written to files.

Runs are read from folders only: a sweep folder (its `sweep.json` lists the grid's runs, failed
and unfinished ones included, and carries the experiment's `[report]` and `[reference]` tables)
or any folder of run folders (`config.json` + `summary.json` each).

Protocol (seed 004 Sec. 5.1, zoology): runs are grouped by every config field that varies except
`train.lr` and `train.seed` (or by the fields given with `by`); fields that only follow others
(`model.arch` follows `model.name`), and fields a run's model does not have (None), are left out of
the label. In each group the lr with the best mean validation metric over its finished seeds is
chosen (highest accuracy, lowest loss), and the test metric at that lr is reported as mean and
sample standard deviation (n - 1) over seeds, with the number of seeds, and the group's unfinished
(`missing`) and `failed` runs. The validation metric of a run is its best checkpoint's
(`summary.json` "valid"), the test metric that checkpoint's on the test set.

Claims (`[[report.expect]]` in the experiment file), checked by `report --check`:

    [[report.expect]]
    claim = "HAX beats the base at the largest table"     # optional text
    a = { "model.name" = "mamba+hax" }      # selects exactly one group (after `at`)
    b = { "model.name" = "mamba" }          # ... or `value = 0.9` instead of b
    op = ">="                               # >=, >, <=, < (default >=)
    margin = 0.2                            # a op b + margin (default 0)
    at = { "task.levels" = "max" }          # optional: restrict both to a value, or max / min
                                            # (task.levels by table size)

`[report]` may also set `metric` (default "test.acc") and `by` (a list of dotted fields).
"""

from __future__ import annotations

import csv
import io
import json
import math
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generators.errors import RecallLabError
from recall_lab import checkpoint as ck
from recall_lab.config import run_tables
from recall_lab.experiments.engine import INDEX
from recall_lab.experiments.grid import _fmt, flatten

SKIP_FIELDS = ("train.lr", "train.seed")
OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


@dataclass
class RunRecord:
    name: str
    folder: Path
    status: str  # done, failed or missing (not finished)
    config: dict[str, Any]  # flat: "model.name" -> value
    summary: dict | None = None
    error: str | None = None

    def metric(self, path: str) -> float | None:
        node: Any = self.summary
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return float(node) if isinstance(node, (int, float)) else None


@dataclass
class Group:
    key: tuple
    values: dict[str, Any]  # group-by field -> value
    label: str
    runs: list[RunRecord] = field(default_factory=list)
    lrs: dict[float, float | None] = field(default_factory=dict)  # lr -> mean valid metric
    best_lr: float | None = None
    selected: list[RunRecord] = field(default_factory=list)  # finished runs at the best lr
    mean: float | None = None
    std: float | None = None
    valid_mean: float | None = None

    @property
    def counts(self) -> dict[str, int]:
        st = [r.status for r in self.runs]
        return {"seeds": len(self.selected), "missing": st.count("missing"),
                "failed": st.count("failed")}


def _flat_config(cfg: dict) -> dict[str, Any]:
    out = flatten({t: cfg.get(t) or {} for t in ("model", "train", "task")})
    out["task_name"] = cfg.get("task_name")
    return out


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


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


def load_runs(dirs: list[str | Path]) -> tuple[list[RunRecord], dict]:
    """Every run under `dirs` and the experiment tables found in their sweep.json files."""
    runs: list[RunRecord] = []
    meta: dict = {"report": {}, "reference": {}, "experiments": []}
    for d in map(Path, dirs):
        if not d.is_dir():
            raise RecallLabError(f"runs folder {d} does not exist")
        index = d / INDEX
        if index.is_file():
            data = ck.read_json(index, "sweep index")
            meta["experiments"].append(data.get("experiment"))
            meta["report"] = meta["report"] or data.get("report") or {}
            meta["reference"] = meta["reference"] or data.get("reference") or {}
            for e in data.get("runs", []):
                folder = d / e["name"]
                summary = (ck.read_json(folder / ck.SUMMARY, "run summary")
                           if (folder / ck.SUMMARY).is_file() else None)
                status = "done" if summary else ("failed" if e.get("status") == "failed"
                                                 else "missing")
                runs.append(RunRecord(e["name"], folder, status, _flat_config(e["config"]),
                                      summary, e.get("error")))
            continue
        folders = [d] if (d / ck.CONFIG).is_file() else sorted(
            p for p in d.iterdir() if (p / ck.CONFIG).is_file())
        for folder in folders:
            cfg = ck.read_json(folder / ck.CONFIG, "run config")
            run_tables(cfg, f"corrupt run config {folder / ck.CONFIG}")  # shape, before fields
            summary = (ck.read_json(folder / ck.SUMMARY, "run summary")
                       if (folder / ck.SUMMARY).is_file() else None)
            runs.append(RunRecord(folder.name, folder, "done" if summary else "missing",
                                  _flat_config(cfg), summary))
    if not runs:
        raise RecallLabError(f"no runs found in {', '.join(map(str, dirs))}")
    return runs, meta


def _partition(runs: list[RunRecord], fields: list[str]) -> int:
    return len({tuple(_key(r.config.get(f)) for f in fields) for r in runs})


def group_fields(runs: list[RunRecord]) -> list[str]:
    """The fields that vary across runs, except lr and seed, leaving out those that only follow
    fields already chosen (model.name first, then task, model and train fields)."""
    fields = sorted({f for r in runs for f in r.config})
    varying = [f for f in fields if f not in SKIP_FIELDS and _partition(runs, [f]) > 1]
    order = {"model.name": 0, "task": 1, "model": 2, "train": 3}
    varying.sort(key=lambda f: (order.get(f, order.get(f.split(".")[0], 4)), f))
    chosen: list[str] = []
    for f in varying:
        if _partition(runs, [*chosen, f]) > _partition(runs, chosen):
            chosen.append(f)
    return chosen


def group_label(values: dict[str, Any]) -> str:
    parts = [_fmt(v) if f == "model.name" else f"{f.rsplit('.', 1)[1]}={_fmt(v)}"
             for f, v in values.items() if v is not None]  # None: a field the model lacks
    return " / ".join(parts) or "all"


def _mean_std(xs: list[float]) -> tuple[float | None, float | None]:
    if not xs:
        return None, None
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return mean, None
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def aggregate(runs: list[RunRecord], by: list[str] | None = None,
              metric: str = "test.acc") -> tuple[list[str], list[Group]]:
    """Groups with their best lr (on the validation twin of `metric`) and test mean/std."""
    split, _, leaf = metric.partition(".")
    if split not in ("test", "valid") or not leaf:
        raise RecallLabError(f"metric must be test.X or valid.X (e.g. test.acc), got {metric!r}")
    select = f"valid.{leaf}"
    better = operator.lt if leaf == "loss" else operator.gt
    fields = list(by) if by else group_fields(runs)
    known = {f for r in runs for f in r.config}
    for f in fields:
        if f not in known:
            raise RecallLabError(f"--by {f!r}: no run has this field (e.g. model.name, "
                                 "task.levels, model.d_state)")
    groups: dict[tuple, Group] = {}
    for r in runs:
        key = tuple(_key(r.config.get(f)) for f in fields)
        if key not in groups:
            values = {f: r.config.get(f) for f in fields}
            groups[key] = Group(key, values, group_label(values))
        groups[key].runs.append(r)
    for g in groups.values():
        by_lr: dict[float, list[RunRecord]] = {}
        for r in g.runs:
            if r.status == "done" and r.metric(select) is not None:
                by_lr.setdefault(r.config.get("train.lr"), []).append(r)
        for lr in sorted({r.config.get("train.lr") for r in g.runs}):
            vals = [r.metric(select) for r in by_lr.get(lr, [])]
            g.lrs[lr] = _mean_std(vals)[0]
        for lr, mean in g.lrs.items():
            if mean is not None and (g.valid_mean is None or better(mean, g.valid_mean)):
                g.best_lr, g.valid_mean = lr, mean
        if g.best_lr is not None:
            g.selected = sorted(by_lr[g.best_lr], key=lambda r: r.config.get("train.seed", 0))
            xs = [r.metric(metric) for r in g.selected if r.metric(metric) is not None]
            g.mean, g.std = _mean_std(xs)
    return fields, list(groups.values())


# ---- claims -------------------------------------------------------------------------------------

def _select(groups: list[Group], selector: dict, what: str) -> Group:
    sel = flatten(selector)
    found = [g for g in groups
             if all(_key(g.runs[0].config.get(f)) == _key(v) for f, v in sel.items())]
    if len(found) != 1:
        raise RecallLabError(f"{what} {sel} matches {len(found)} groups, not one")
    return found[0]


def check_expectations(groups: list[Group], expects: list[dict]) -> list[dict]:
    """One result per claim: {"claim", "ok", "detail"}; a claim that cannot be evaluated (no
    such group, no finished run) fails."""
    results = []
    for i, e in enumerate(expects):
        claim = e.get("claim") or f"expectation {i + 1}"
        try:
            unknown = set(e) - {"claim", "a", "b", "value", "op", "margin", "at"}
            if unknown:
                raise RecallLabError(f"unknown key {sorted(unknown)[0]!r}")
            if ("b" in e) == ("value" in e):
                raise RecallLabError("give b (a group) or value (a number), not both")
            op = e.get("op", ">=")
            if op not in OPS:
                raise RecallLabError(f"op must be one of {', '.join(OPS)}, got {op!r}")
            pool = groups
            for f, want in flatten(e.get("at") or {}).items():
                vals = [g.runs[0].config.get(f) for g in pool]
                if want in ("max", "min"):  # by size for task.levels (the largest table)
                    ranked = [v for v in vals if numeric(f, v) is not None]
                    if not ranked:
                        raise RecallLabError(f"at: {f} has no numeric values for {want}")
                    want = (max if want == "max" else min)(ranked, key=lambda v: numeric(f, v))
                pool = [g for g, v in zip(pool, vals, strict=True) if _key(v) == _key(want)]
            a = _select(pool, e["a"], "a")
            if a.mean is None:
                raise RecallLabError(f"{a.label} has no finished run")
            margin = float(e.get("margin", 0.0))
            if "b" in e:
                b = _select(pool, e["b"], "b")
                if b.mean is None:
                    raise RecallLabError(f"{b.label} has no finished run")
                rhs, rhs_text = b.mean + margin, f"{b.label} {b.mean:.4f}"
            else:
                rhs, rhs_text = float(e["value"]) + margin, f"{float(e['value']):.4f}"
            ok = OPS[op](a.mean, rhs)
            detail = (f"{a.label} {a.mean:.4f} {op} {rhs_text}"
                      + (f" + {margin:g}" if margin else ""))
        except (RecallLabError, KeyError, TypeError, ValueError) as exc:
            ok, detail = False, f"cannot check: {exc}"
        results.append({"claim": claim, "ok": bool(ok), "detail": detail})
    return results


# ---- files --------------------------------------------------------------------------------------

def _num(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def table_rows(fields: list[str], groups: list[Group], reference: dict,
               metric: str = "test.acc") -> list[dict]:
    ref = (reference or {}).get("values") or {}
    rows = []
    for g in groups:
        c = g.counts
        rows.append({**{f: _fmt(v) for f, v in g.values.items()}, "label": g.label,
                     "best_lr": g.best_lr, "valid": g.valid_mean, "mean": g.mean, "std": g.std,
                     "per_seed": [r.metric(metric) for r in g.selected],
                     **c, "reference": ref.get(g.label)})
    return rows


def build_report(dirs: list[str | Path], *, by: list[str] | None = None,
                 metric: str | None = None, experiment: dict | None = None) -> dict:
    """Everything the report shows, as data (what report.json holds)."""
    runs, meta = load_runs(dirs)
    if experiment is not None:
        meta["report"] = experiment.get("report") or {}
        meta["reference"] = experiment.get("reference") or {}
    metric = metric or meta["report"].get("metric") or "test.acc"
    by = by or meta["report"].get("by")
    fields, groups = aggregate(runs, by, metric)
    expects = meta["report"].get("expect") or []
    checks = check_expectations(groups, expects if isinstance(expects, list) else [expects])
    return {"metric": metric, "by": fields, "experiments": meta["experiments"],
            "reference": meta["reference"], "groups": groups,
            "rows": table_rows(fields, groups, meta["reference"], metric), "checks": checks,
            "runs": len(runs)}


def _markdown(rep: dict) -> str:
    fields, metric = rep["by"], rep["metric"]
    ref = rep["reference"] or {}
    head = [*fields, "best lr", f"valid.{metric.split('.', 1)[1]}", f"{metric} mean +/- std",
            "per seed", "seeds", "missing", "failed"]
    if ref.get("values"):
        head.append(f"reference ({ref.get('source', 'reference')})")
    lines = [f"# Report: {', '.join(e for e in rep['experiments'] if e) or 'runs'}", "",
             f"{rep['runs']} runs; grouped by {', '.join(fields) or 'nothing'}; best lr per "
             f"group by the mean validation metric; {metric} as mean +/- sample std over "
             "seeds at that lr.", "",
             "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rep["rows"]:
        cells = [row[f] for f in fields]
        cells += ["-" if row["best_lr"] is None else f"{row['best_lr']:g}", _num(row["valid"]),
                  f"{_num(row['mean'])} +/- {_num(row['std'])}",
                  " / ".join(_num(x) for x in row["per_seed"]) or "-", str(row["seeds"]),
                  str(row["missing"]), str(row["failed"])]
        if ref.get("values"):
            cells.append(_num(row["reference"]))
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    if rep["checks"]:
        lines += ["", "## Claims", ""]
        lines += [f"- {'PASS' if c['ok'] else 'FAIL'}: {c['claim']} ({c['detail']})"
                  for c in rep["checks"]]
    if rep.get("figures"):
        lines += ["", "## Figures", ""]
        lines += [f"![{Path(p).stem}]({Path(p).name})" for p in rep["figures"]]
    return "\n".join(lines) + "\n"


def _csv(rep: dict) -> str:
    buf = io.StringIO()
    cols = [*rep["by"], "label", "best_lr", "valid", "mean", "std", "per_seed", "seeds",
            "missing", "failed", "reference"]
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rep["rows"]:
        w.writerow({k: ("" if v is None else " ".join(f"{x:g}" for x in v if x is not None)
                        if k == "per_seed" else v) for k, v in row.items()})
    return buf.getvalue()


def _json(rep: dict) -> dict:
    groups = []
    for g in rep["groups"]:
        groups.append({"label": g.label, "values": g.values, "best_lr": g.best_lr,
                       "valid_by_lr": {str(k): v for k, v in g.lrs.items()},
                       "valid": g.valid_mean, "mean": g.mean, "std": g.std, **g.counts,
                       "selected": [r.name for r in g.selected],
                       "per_seed": [r.metric(rep["metric"]) for r in g.selected],
                       "failed_runs": {r.name: r.error for r in g.runs if r.status == "failed"},
                       "missing_runs": [r.name for r in g.runs if r.status == "missing"]})
    return {"metric": rep["metric"], "by": rep["by"], "experiments": rep["experiments"],
            "runs": rep["runs"], "reference": rep["reference"], "groups": groups,
            "checks": rep["checks"], "figures": rep.get("figures", [])}


def write_report(rep: dict, out: str | Path, plots: bool = True) -> list[Path]:
    """report.md / .csv / .json (+ PNGs) into `out`; these files are the report's own and are
    replaced on every call, nothing else in `out` is touched."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rep["figures"] = []
    if plots:
        from recall_lab.experiments.plots import report_figures

        rep["figures"] = [str(p) for p in report_figures(rep, out)]
    paths = [out / "report.md", out / "report.csv", out / "report.json"]
    for path, text in zip(paths, (_markdown(rep), _csv(rep),
                                  json.dumps(_json(rep), indent=2) + "\n"), strict=True):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return paths + [Path(p) for p in rep["figures"]]
