"""The report over run folders: the papers' protocol (best lr on validation, test mean +/- std over
seeds), the experiment's claims checked, and the tables and figures written to files.

Runs are read from folders only: a sweep folder (its `sweep.json` lists the grid's runs, failed
and unfinished ones included, and carries the experiment's `[report]` and `[reference]` tables)
or any folder of run folders (`config.json` + `summary.json` each).

Protocol (the joint-recall paper's Sec. 5.1, zoology): runs are grouped by every config field that
varies except `train.lr` and `train.seed` (or by the fields given with `by`); fields that only
follow others (`model.arch` follows `model.name`), and fields a run's model does not have (None),
are left out of the label. In each group the lr with the best mean validation metric over its
finished seeds is chosen (highest accuracy, lowest loss), and the test metric at that lr is reported
as mean and sample standard deviation (n - 1) over seeds, with the number of seeds, and the group's
unfinished (`missing`) and `failed` runs. The validation metric of a run is its best checkpoint's
(`summary.json` "valid"), the test metric that checkpoint's on the test set. Each group's recurrent
state per layer in numbers (experiments/state.py: `recall-lab models`' count over the layers,
from its runs' configs; each layer's count where the layers differ; a log L count with its
length; none where it grows with the sequence) is a column of the tables and the x axis of the
figures against state; the convolution caches are a column beside it.

Claims (`[[report.expect]]` in the experiment file), checked by `report --check` (evaluated and
settled in verdicts.py, which `place` shares):

    [[report.expect]]
    claim = "HAX beats the base at the largest table"     # optional text
    a = { "model.name" = "mamba+hax" }      # selects exactly one group (after `at`)
    b = { "model.name" = "mamba" }          # ... or `value = 0.9` instead of b
    op = ">="                               # >=, >, <=, < (default >=)
    margin = 0.2                            # a op b + margin (default 0)
    at = { "task.levels" = "max" }          # optional: restrict both to a value, or max / min
                                            # (task.levels by table size)
    stat = "mean"                           # or "solved", "frontier", or "logrank": steps
                                            # to solve, unsolved seeds censored at their
                                            # last step; op "<" = a solves sooner than b
                                            # (log-rank test at `level`, default 0.05)

For stat = "solved" the named ops say what they test: "more" / "fewer" (one-sided Fisher, as
">" / "<"), "as many" with a `margin` (non-inferiority: the Newcombe interval of a's rate minus
b's stays above -margin), "rate at least" / "rate at most" with a `value` (the Wilson bounds, as
">=" / "<=" with a value). Each claim's line says in words what its op tests and then what was
required and what was found (verdicts.describe).

Each group's held-out overlap (the largest share of its valid and test samples also trained on,
`summary.json`'s `held_out_in_training`; experiments/overlap.py) is the tables' last column,
with a warning line above the tables for a group above 1%.

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

import pandas as pd

from recall_lab import checkpoint as ck
from recall_lab.config import run_tables
from recall_lab.experiments import claims as prereg
from recall_lab.experiments import overlap as held_out
from recall_lab.experiments import stats
from recall_lab.experiments.best_of_lr import best_of_lr as one_seed_points
from recall_lab.experiments.best_of_lr import markdown as best_of_lr_markdown
from recall_lab.experiments.best_of_lr import to_json as best_of_lr_json
from recall_lab.experiments.engine import INDEX
from recall_lab.experiments.grid import flatten, format_value, group_label, numeric
from recall_lab.experiments.memory import memory_json, memory_lines, memory_rows
from recall_lab.experiments.state import UNKNOWN, LayerState, common_state
from recall_lab.experiments.verdicts import check_expectations, claim_groups  # noqa: F401
from recall_lab.generators.errors import RecallLabError
from recall_lab.models.archs import ARCH_TABLE, SSM_FIELDS

SKIP_FIELDS = ("train.lr", "train.seed")


@dataclass
class RunRecord:
    name: str
    folder: Path
    status: str  # done, failed or missing (not finished)
    config: dict[str, Any]  # flat: "model.name" -> value
    summary: dict | None = None
    error: str | None = None
    registration: str | None = None  # the claims in force when the sweep launched it
    launched: str | None = None  # when the sweep launched it (ISO UTC), where recorded
    tables: dict | None = None  # its config as written (config.json): rebuilds its model
    bound: str | None = None  # the registration hash its config.json stores (claims.py)

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
    solved: stats.SolveRate = field(default_factory=lambda: stats.wilson(0, 0))
    solve_steps: list[int | None] = field(default_factory=list)  # per selected seed
    # steps to solve as time to event: per selected seed its solve step, or (unsolved) its last
    # step, right-censored; the Kaplan-Meier estimate over them
    durations: list[float] = field(default_factory=list)
    events: list[bool] = field(default_factory=list)
    survival: stats.Survival | None = None
    lr_solved: dict[float, stats.SolveRate] = field(default_factory=dict)  # every lr's seeds
    state: LayerState = UNKNOWN  # state per layer in numbers (experiments/state.py)
    # held-out overlap: the largest shares of valid / test samples also trained on over its
    # finished runs (overlap.combine); None where no run recorded it
    overlap: dict | None = None
    # its table's size where a protocol names its tables (`place`: a whole-task table);
    # None: read from task.levels (`verdicts.table_size`)
    size: float | None = None

    @property
    def steps_q(self) -> tuple[float, float, float] | None:
        return stats.quantiles([s for s in self.solve_steps if s is not None])

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


def run_binding(folder: Path) -> str | None:
    """The registration hash a run stores in its own config.json (`claims.py`: written at its
    launch), or None (a run recorded before binding, or not started)."""
    path = Path(folder) / ck.CONFIG
    if not path.is_file():
        return None
    data = ck.read_json(path, "run config")
    reg = data.get("registration") if isinstance(data, dict) else None
    return reg.get("sha256") if isinstance(reg, dict) else None


def load_runs(dirs: list[str | Path]) -> tuple[list[RunRecord], dict]:
    """Every run under `dirs` and the experiment tables found in their sweep.json files."""
    runs: list[RunRecord] = []
    meta: dict = {"report": {}, "reference": {}, "experiments": [],
                  "registry": {"registrations": []}}
    for d in map(Path, dirs):
        if not d.is_dir():
            raise RecallLabError(f"runs folder {d} does not exist")
        index = d / INDEX
        if index.is_file():
            data = ck.read_json(index, "sweep index")
            meta["experiments"].append(data.get("experiment"))
            meta["report"] = meta["report"] or data.get("report") or {}
            meta["reference"] = meta["reference"] or data.get("reference") or {}
            meta["registry"]["registrations"] += prereg.read_registry(d)["registrations"]
            for e in data.get("runs", []):
                folder = d / e["name"]
                summary = (ck.read_json(folder / ck.SUMMARY, "run summary")
                           if (folder / ck.SUMMARY).is_file() else None)
                status = "done" if summary else ("failed" if e.get("status") == "failed"
                                                 else "missing")
                runs.append(RunRecord(e["name"], folder, status, _flat_config(e["config"]),
                                      summary, e.get("error"), e.get("registration"),
                                      e.get("launched"), e["config"], run_binding(folder)))
            continue
        folders = [d] if (d / ck.CONFIG).is_file() else sorted(
            p for p in d.iterdir() if (p / ck.CONFIG).is_file())
        for folder in folders:
            cfg = ck.read_json(folder / ck.CONFIG, "run config")
            run_tables(cfg, f"corrupt run config {folder / ck.CONFIG}")  # shape, before fields
            summary = (ck.read_json(folder / ck.SUMMARY, "run summary")
                       if (folder / ck.SUMMARY).is_file() else None)
            runs.append(RunRecord(folder.name, folder, "done" if summary else "missing",
                                  _flat_config(cfg), summary, tables=cfg))
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


def _read_fields(values: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """`values` with the SSM fields set to None where the run's model never reads them (a
    transformer's or a contract mixer's d_state is the base config's, not the model's)."""
    row = ARCH_TABLE.get(config.get("model.arch"))
    if row is None or row.ssm:
        return values
    unread = {f"model.{x}" for x in SSM_FIELDS}
    return {f: None if f in unread else v for f, v in values.items()}


def _mean_std(xs: list[float]) -> tuple[float | None, float | None]:
    if not xs:
        return None, None
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return mean, None
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def check_metric(runs: list[RunRecord], metric: str) -> None:
    """A metric is test.X or valid.X that at least one finished run has (else one error line
    naming what the runs do have)."""
    split, _, leaf = metric.partition(".")
    if split not in ("test", "valid") or not leaf:
        raise RecallLabError(f"metric must be test.X or valid.X (e.g. test.acc), got {metric!r}")
    done = [r for r in runs if r.status == "done"]
    if done and all(r.metric(metric) is None for r in done):
        have = sorted({f"{sp}.{k}" for r in done for sp in ("test", "valid")
                       for k, v in ((r.summary or {}).get(sp) or {}).items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)})
        raise RecallLabError(f"unknown metric {metric!r}: no finished run has it (they have "
                             f"{', '.join(have) or 'none'})")


def aggregate(runs: list[RunRecord], by: list[str] | None = None,
              metric: str = "test.acc", solve_at: float = stats.SOLVE_AT, *,
              survival: bool = True) -> tuple[list[str], list[Group]]:
    """Groups with their best lr (on the validation twin of `metric`), test mean/std, seeds
    solved (metric >= solve_at; <= for a loss) with a Wilson interval, and steps to solve;
    `survival=False` leaves the Kaplan-Meier estimate out (a caller that reads only the counts,
    round after round: `lr_window.assess`)."""
    check_metric(runs, metric)
    split, _, leaf = metric.partition(".")
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
            values = _read_fields({f: r.config.get(f) for f in fields}, r.config)
            groups[key] = Group(key, values, group_label(values))
        groups[key].runs.append(r)
    for g in groups.values():
        g.overlap = held_out.combine(r.summary for r in g.runs if r.status == "done")
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
        lower = leaf == "loss"
        for lr, rs in by_lr.items():
            g.lr_solved[lr] = stats.wilson(
                sum(stats.is_solved(r.metric(metric), solve_at, lower) for r in rs), len(rs))
        if g.best_lr is not None:
            g.selected = sorted(by_lr[g.best_lr], key=lambda r: r.config.get("train.seed", 0))
            xs = [r.metric(metric) for r in g.selected if r.metric(metric) is not None]
            g.mean, g.std = _mean_std(xs)
            g.solved = g.lr_solved[g.best_lr]
            g.solve_steps = [
                stats.steps_to_solve(r.folder, solve_at, (r.summary or {}).get("best_step"))
                if stats.is_solved(r.metric(metric), solve_at, lower) else None
                for r in g.selected]
            for r, step in zip(g.selected, g.solve_steps, strict=True):
                solved = stats.is_solved(r.metric(metric), solve_at, lower)
                g.events.append(solved)
                g.durations.append(float(step if step is not None else last_step(r)))
            try:
                g.survival = stats.kaplan_meier(g.durations, g.events) if survival else None
            except stats.NoLifelines:  # no lifelines here: the KM columns stay empty ("-")
                g.survival = None
    return fields, list(groups.values())


def last_step(r: RunRecord) -> int:
    """The last step a run trained (its summary's `stopped_at`, else its step count): where an
    unsolved run is censored."""
    summary = r.summary or {}
    for value in (summary.get("stopped_at"), summary.get("steps"), r.config.get("train.steps")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    raise RecallLabError(f"run {r.name}: no last step in its summary or config")


def runs_frame(dirs: list[str | Path], solve_at: float = stats.SOLVE_AT,
               metric: str = "test.acc") -> pd.DataFrame:
    """Every run under `dirs` as one row of a pandas DataFrame: name, status, the flattened
    config (dotted columns), the summary's valid.* / test.* numbers, `solved` (metric >=
    solve_at, <= for a loss) and `steps_to_solve` / `samples_to_solve` (None when not solved)."""
    runs, _ = load_runs(dirs)
    lower = metric.endswith(".loss")
    rows = []
    for r in runs:
        row: dict[str, Any] = {"name": r.name, "status": r.status, "folder": str(r.folder)}
        row.update({f: (_key(v) if isinstance(v, (list, dict)) else v)
                    for f, v in r.config.items()})
        for split in ("valid", "test"):
            for k, v in ((r.summary or {}).get(split) or {}).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    row[f"{split}.{k}"] = float(v)
        for k in ("best_step", "stopped", "stopped_at"):
            row[k] = (r.summary or {}).get(k)
        solved = r.status == "done" and stats.is_solved(r.metric(metric), solve_at, lower)
        step = (stats.steps_to_solve(r.folder, solve_at, row["best_step"]) if solved else None)
        row.update({"solved": solved, "steps_to_solve": step,
                    "samples_to_solve": (step * r.config["train.batch_size"]
                                         if step is not None
                                         and r.config.get("train.batch_size") else None)})
        rows.append(row)
    return pd.DataFrame(rows)


# ---- files --------------------------------------------------------------------------------------

def _num(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _steps_text(steps: list[float | None]) -> str:
    """Steps to solve over the solved seeds: median [IQR]; one solved seed has no spread, so
    its step alone with "(1 seed)"."""
    solved = [s for s in steps if s is not None]
    if len(solved) == 1:
        return f"{solved[0]:g} (1 seed)"
    q = stats.quantiles(solved)
    return "-" if q is None else f"{q[1]:g} [{q[0]:g}, {q[2]:g}]"


def slice_means(g: Group, metric: str) -> dict[str, dict]:
    """Per slice label (a task's slices, e.g. zoology's number of pairs): the metric's mean and
    sample std over the group's selected seeds, and how many seeds had the slice. Empty when the
    runs' summaries hold no slices (every task before slices existed)."""
    split, _, name = metric.partition(".")
    per: dict[str, list[float]] = {}
    for r in g.selected:
        slices = ((r.summary or {}).get(split) or {}).get("slices") or {}
        for label, scores in slices.items():
            if isinstance(scores, dict) and isinstance(scores.get(name), (int, float)):
                per.setdefault(str(label), []).append(float(scores[name]))
    out = {}
    for label in sorted(per, key=lambda x: (len(x), x)):  # 2 before 10
        mean, std = _mean_std(per[label])
        out[label] = {"mean": mean, "std": std, "seeds": len(per[label])}
    return out


def table_rows(fields: list[str], groups: list[Group], reference: dict,
               metric: str = "test.acc") -> list[dict]:
    ref = (reference or {}).get("values") or {}
    rows = []
    for g in groups:
        c, q = g.counts, g.steps_q
        rows.append({**{f: format_value(v) for f, v in g.values.items()}, "label": g.label,
                     "best_lr": g.best_lr, "valid": g.valid_mean, "mean": g.mean, "std": g.std,
                     "per_seed": [r.metric(metric) for r in g.selected],
                     "solved": g.solved.text(), "solved_k": g.solved.k, "solved_n": g.solved.n,
                     "solved_lo": g.solved.lo, "solved_hi": g.solved.hi,
                     "steps_to_solve": _steps_text(g.solve_steps),
                     "steps_median": None if q is None else q[1],
                     "solve_steps": g.solve_steps, **c, "reference": ref.get(g.label),
                     "state_per_layer": g.state.numbers, "state_growth": g.state.growth,
                     "state_text": g.state.text(), "conv_per_layer": g.state.conv,
                     "conv_text": g.state.conv_text(), "state_source": g.state.source,
                     "overlap_valid": None if g.overlap is None else g.overlap["valid"],
                     "overlap_test": None if g.overlap is None else g.overlap["test"],
                     "overlap_text": held_out.text(g.overlap),
                     "km_text": "-" if g.survival is None else g.survival.median_text(),
                     "rmst_text": "-" if g.survival is None else g.survival.rmst_text(),
                     **{f"km_{k}": getattr(g.survival, k, None)
                        for k in ("median", "median_lo", "median_hi", "rmst", "rmst_lo",
                                  "rmst_hi")}})
        slices = slice_means(g, metric)
        if slices:  # only where the task gives slices: earlier reports rebuild unchanged
            rows[-1]["slices"] = slices
    return rows


def _slice_lines(rep: dict) -> list[str]:
    """The per-slice table of report.md: one row per group and slice label."""
    rows = [r for r in rep["rows"] if r.get("slices")]
    if not rows:
        return []
    lines = ["", "## Per slice", "", f"{rep['metric']} per slice of the task (e.g. the number "
             "of key-value pairs), at each group's best lr: mean +/- sample std over its seeds.",
             "", "| group | slice | mean +/- std | seeds |", "| --- | --- | --- | --- |"]
    for row in rows:
        for label, v in row["slices"].items():
            lines.append(f"| {row['label']} | {label} | {_num(v['mean'])} +/- {_num(v['std'])} "
                         f"| {v['seeds']} |")
    return lines


BY_TABLE_NOTE = ("Seeds solved [Wilson 95%] per row and table (\"(N to run)\": unfinished runs; "
                 "\"-\": not in the grid). Frontier: the largest table solved in >= half the "
                 "seeds; in brackets, the frontiers the seeds' intervals allow (from the largest "
                 "table whose interval lies at or above one half to the largest it reaches); "
                 "\"open\" while a table of the row has unfinished runs.")


def by_table(rep: dict) -> tuple[list[str], list[list[str]]] | None:
    """Seeds solved by row and table, where the groups sweep task.levels over two or more
    tables: the header and one line per row (a group's values less task.levels), one column per
    table with its seeds solved, and the row's frontier with the range its seeds' intervals
    allow (`stats.frontier_range`); "open" while a table of the row has unfinished runs (as a
    frontier claim would be). None where there is no such sweep."""
    sized = [(g, numeric("task.levels", g.values.get("task.levels"))) for g in rep["groups"]]
    sizes = sorted({size for _, size in sized if size is not None})
    if len(sizes) < 2:
        return None
    rows: dict[str, dict[float, Group]] = {}
    for g, size in sized:
        if size is not None:
            rest = {f: v for f, v in g.values.items() if f != "task.levels"}
            rows.setdefault(group_label(rest), {})[size] = g
    state = any(g.state.numbers is not None for g, _ in sized)
    head = ["row", *(["recurrent state per layer"] if state else []),
            *(f"table {x:g}" for x in sizes),
            "frontier [range]"]
    lines = []
    for name, by_size in rows.items():
        texts = []
        for x in sizes:
            g = by_size.get(x)
            missing = g.counts["missing"] if g else 0
            texts.append("-" if g is None else "not yet run" if not g.solved.n
                         else g.solved.text() + (f" ({missing} to run)" if missing else ""))
        if any(g.counts["missing"] or not g.solved.n for g in by_size.values()):
            front = "open"
        else:
            pts = [(x, g.solved) for x, g in by_size.items()]
            lo, hi = stats.frontier_range(pts)
            front = f"{stats.frontier(pts) or 0:g} [{lo:g}, {hi:g}]"
        states = " / ".join(dict.fromkeys(g.state.text() for g in by_size.values()))
        lines.append([name, *([states] if state else []), *texts, front])
    return head, lines


def _by_table_lines(rep: dict) -> list[str]:
    """report.md's section of `by_table`."""
    table = by_table(rep)
    if table is None:
        return []
    head, rows = table
    return ["", "## Seeds solved by table", "", BY_TABLE_NOTE, "",
            "| " + " | ".join(head) + " |", "|" + " --- |" * len(head),
            *("| " + " | ".join(row) + " |" for row in rows)]


def build_report(dirs: list[str | Path], *, by: list[str] | None = None,
                 metric: str | None = None, experiment: dict | None = None,
                 solve_at: float | None = None, best_of_lr: bool = False,
                 memory: bool = False) -> dict:
    """Everything the report shows, as data (what report.json holds). `best_of_lr`: also what
    one seed at the best lr would have reported, seed by seed (experiments/best_of_lr.py).
    `memory`: also each fixed-state row's layer measured as a memory (experiments/memory.py;
    minutes)."""
    runs, meta = load_runs(dirs)
    if experiment is not None:
        meta["report"] = experiment.get("report") or {}
        meta["reference"] = experiment.get("reference") or {}
    metric = metric or meta["report"].get("metric") or "test.acc"
    by = by or meta["report"].get("by")
    if solve_at is None:
        solve_at = meta["report"].get("solve_at", stats.SOLVE_AT)
    if isinstance(solve_at, bool) or not isinstance(solve_at, (int, float)) \
            or not math.isfinite(solve_at):
        raise RecallLabError(f"solve_at must be a finite number, got {solve_at!r}")
    fields, groups = aggregate(runs, by, metric, float(solve_at))
    for g in groups:  # the figures' state axis and the table's column
        g.state = common_state(r.tables for r in g.runs)
    expects = meta["report"].get("expect") or []
    checks = check_expectations(groups, expects if isinstance(expects, list) else [expects],
                                meta["registry"])
    rep = {"metric": metric, "by": fields, "experiments": meta["experiments"],
           "reference": meta["reference"], "groups": groups, "solve_at": float(solve_at),
           "rows": table_rows(fields, groups, meta["reference"], metric), "checks": checks,
           "runs": len(runs)}
    if best_of_lr:
        rep["best_of_lr"] = one_seed_points(groups, metric, float(solve_at))
    if memory:
        rep["memory"] = memory_rows(rep)
    return rep


def _claim_lines(checks: list[dict]) -> list[str]:
    """report.md's claims: verdict and claim, what its op tests, the numbers with what was
    required and what was found, and its registration."""
    return [f"- {c['verdict'].upper()}: {c['claim']}"
            + (f" (tests: {c['tests']})" if c.get("tests") else "")
            + f". {c['detail']}; {c['registered']['status']}: {c['registered']['text']}"
            for c in checks]


def overlap_recorded(rep: dict) -> bool:
    """Whether some group's runs recorded their held-out overlap (then the tables show it)."""
    return any(g.overlap is not None for g in rep["groups"])


def overlap_warnings(rep: dict) -> list[str]:
    """One line per group whose held-out overlap is above overlap.WARN_ABOVE, and what that
    means (report.md and the terminal print them above the tables)."""
    return held_out.warning_lines([(g.label, g.overlap) for g in rep["groups"]])


def _runs_text(rep: dict) -> str:
    """"40 runs", or "10 of 40 planned runs finished" while some are missing (not run yet)."""
    missing = sum(g.counts["missing"] for g in rep["groups"])
    return (f"{rep['runs']} runs" if not missing
            else f"{rep['runs'] - missing} of {rep['runs']} planned runs finished")


def terminal_warnings(rep: dict) -> list[str]:
    """Every warning of a report, for the terminal above its table (`report`, `demo`): the
    held-out overlap above WARN_ABOVE (as report.md has it) and each claim still open."""
    lines = overlap_warnings(rep)
    for c in rep.get("checks") or []:
        if c.get("verdict") == "open":
            lines.append(f"warning: claim open (a run of its rows is unfinished): {c['claim']}")
    return lines


def _markdown(rep: dict) -> str:
    fields, metric = rep["by"], rep["metric"]
    ref = rep["reference"] or {}
    # only where some group has a fixed state (a table of attention rows alone would carry a
    # column of "grows as L"), and last: the columns before it keep their places
    state = any(row.get("state_per_layer") is not None for row in rep["rows"])
    head = [*fields, "best lr", f"valid.{metric.split('.', 1)[1]}", "solved [95% CI]",
            "steps to solve: median [IQR]", "steps to solve: KM median [95% CI]",
            "restricted mean steps [95% CI]", f"{metric} mean +/- std", "per seed", "seeds",
            "missing", "failed"]
    if ref.get("values"):
        head.append(f"reference ({ref.get('source', 'reference')})")
    if state:
        head += ["recurrent state per layer (numbers)", "conv caches per layer"]
    overlap = overlap_recorded(rep)
    if overlap:  # last: the columns before it keep their places
        head.append("held-out overlap (valid / test)")
    lines = [f"# Report: {', '.join(e for e in rep['experiments'] if e) or 'runs'}", "",
             f"{_runs_text(rep)}; grouped by {', '.join(fields) or 'nothing'}; best lr per "
             f"group by the mean validation metric. At that lr: seeds solved ({metric} "
             f"{'<=' if metric.endswith('.loss') else '>='} {rep['solve_at']:g}) out of seeds "
             "run with a Wilson 95% interval; steps to solve (first evaluation whose held-out "
             "accuracy reached the threshold) over the solved seeds; the same with unsolved "
             "seeds right-censored at their last step: Kaplan-Meier median (the first step at "
             "which fewer than half the seeds remain unsolved; >N: not reached by step N) with "
             "its log-log 95% interval, and the restricted mean steps to solve up to the last "
             "step followed, with a 95% interval; "
             f"{metric} as mean +/- sample std over seeds."
             + (" Recurrent state per layer: the numbers that carry information across the "
                "whole sequence (an SSM's expand x d_model x d_state, a linear-attention or "
                "delta-rule state with its normaliser, a window's or a sparse branch's key and "
                "value slots), per sequence, as `recall-lab models` counts them, divided by "
                "the layers (where the layers differ, each layer's count: '384 (layer 1) / "
                "2,925 (layer 2)'; a count that grows as log L, at its length: 'at 130 tokens "
                "(log L)'); 'grows as L' where the state grows with the sequence. The short "
                "convolutions' caches (kernel - 1 columns per channel) are counted apart."
                if state else "")
             + (" Held-out overlap: the largest share of a group's valid and test samples that "
                "also occur in its runs' training samples (`summary.json`'s "
                "`held_out_in_training`; \"not recorded\" where its runs predate it), "
                f"{held_out.checked_text(rep['groups'])}; above "
                f"{held_out.WARN_ABOVE:.0%} a warning."
                if overlap else " Held-out overlap: not recorded by these runs."), "",
             *(f"**{w}**" if w.startswith("warning") else w for w in overlap_warnings(rep)),
             *([""] if overlap_warnings(rep) else []),
             "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rep["rows"]:
        cells = [row[f] for f in fields]
        cells += ["-" if row["best_lr"] is None else f"{row['best_lr']:g}", _num(row["valid"]),
                  row["solved"], row["steps_to_solve"], row["km_text"], row["rmst_text"],
                  f"{_num(row['mean'])} +/- {_num(row['std'])}",
                  " / ".join(_num(x) for x in row["per_seed"]) or "-", str(row["seeds"]),
                  str(row["missing"]), str(row["failed"])]
        if ref.get("values"):
            cells.append(_num(row["reference"]))
        if state:
            cells += [row["state_text"], row["conv_text"]]
        if overlap:
            cells.append(row["overlap_text"])
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += _by_table_lines(rep)
    lines += memory_lines(rep)
    lines += _slice_lines(rep)
    if rep["checks"]:
        lines += ["", "## Claims", ""]
        lines += _claim_lines(rep["checks"])
    if rep.get("replication"):
        lines += ["", *replication_lines(rep["replication"])]
    if rep.get("figures"):
        lines += ["", "## Figures", ""]
        lines += [f"![{Path(p).stem}]({Path(p).name})" for p in rep["figures"]]
    return "\n".join(lines) + "\n"


def _seeds_text(seeds: list[int] | None) -> str:
    if not seeds:
        return "-"
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def replication_lines(r: dict) -> list[str]:
    """The replication section: each replicated claim's groups, original beside replication
    (seeds solved with Wilson 95%, Kaplan-Meier median steps with 95%), and both verdicts."""
    where = r["original"] or "not found beside the replication"
    lines = ["## Replication", "",
             f"Original sweep: {where} (seeds {_seeds_text(r.get('original_seeds'))}); "
             f"replication: seeds {_seeds_text(r.get('seeds'))}, its claims recorded before "
             "its first run.", ""]
    head = ["claim", "group", "original: solved [95% CI]", "replication: solved [95% CI]",
            "original: KM median steps", "replication: KM median steps"]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for c in r["claims"]:
        for g in c["groups"]:
            o = g["original"] or {"solved": "-", "km_median": "-"}
            lines.append(f"| {c['claim']} | {g['label']} | {o['solved']} | "
                         f"{g['replication']['solved']} | {o['km_median']} | "
                         f"{g['replication']['km_median']} |")
    lines.append("")
    for c in r["claims"]:
        for side in ("original", "replication"):
            v = c[side]
            if v is None:
                lines.append(f"- {side}: {c['claim']}: no original found")
                continue
            tests = f" (tests: {v['tests']})" if v.get("tests") else ""
            lines.append(f"- {side}: {v['verdict'].upper()}: {c['claim']}{tests}. {v['detail']}; "
                         f"{v['registered']}: {v['text']}")
    return lines


def _csv(rep: dict) -> str:
    buf = io.StringIO()
    cols = [*rep["by"], "label", "best_lr", "valid", "solved_k", "solved_n", "solved_lo",
            "solved_hi", "steps_median", "solve_steps", "mean", "std", "per_seed", "seeds",
            "missing", "failed", "reference", "km_median", "km_median_lo", "km_median_hi",
            "km_rmst", "km_rmst_lo", "km_rmst_hi", "state_per_layer", "state_growth",
            "conv_per_layer", "state_source", "overlap_valid", "overlap_test"]
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rep["rows"]:
        w.writerow({k: ("" if v is None else " ".join("-" if x is None else f"{x:g}" for x in v)
                        if k in ("per_seed", "solve_steps") else v) for k, v in row.items()})
    return buf.getvalue()


def _rate(r: stats.SolveRate) -> dict:
    return {"k": r.k, "n": r.n, "lo": r.lo, "hi": r.hi, "confidence": r.confidence}


def _survival(s: stats.Survival | None) -> dict | None:
    """A group's Kaplan-Meier numbers for report.json (None: not reached within the runs)."""
    if s is None:
        return None
    return {"n": s.n, "solved": s.events, "median": s.median, "median_lo": s.median_lo,
            "median_hi": s.median_hi, "horizon": s.horizon, "rmst": s.rmst, "rmst_se": s.rmst_se,
            "rmst_lo": s.rmst_lo, "rmst_hi": s.rmst_hi, "confidence": s.confidence,
            "curve": {"steps": list(s.times), "solved": list(s.solved), "lo": list(s.lo),
                      "hi": list(s.hi)}}


def _json(rep: dict) -> dict:
    groups = []
    for g in rep["groups"]:
        groups.append({"label": g.label, "values": g.values, "best_lr": g.best_lr,
                       "valid_by_lr": {str(k): v for k, v in g.lrs.items()},
                       "valid": g.valid_mean, "mean": g.mean, "std": g.std, **g.counts,
                       "solved": _rate(g.solved),
                       "solved_by_lr": {str(k): _rate(v) for k, v in g.lr_solved.items()},
                       "solve_steps": g.solve_steps,
                       "survival": _survival(g.survival),
                       "state_per_layer": g.state.numbers, "state_growth": g.state.growth,
                       "conv_per_layer": g.state.conv, "state_source": g.state.source,
                       "held_out_in_training": g.overlap,
                       "selected": [r.name for r in g.selected],
                       "per_seed": [r.metric(rep["metric"]) for r in g.selected],
                       **({"slices": sl} if (sl := slice_means(g, rep["metric"])) else {}),
                       "failed_runs": {r.name: r.error for r in g.runs if r.status == "failed"},
                       "missing_runs": [r.name for r in g.runs if r.status == "missing"]})
    return {"metric": rep["metric"], "by": rep["by"], "experiments": rep["experiments"],
            "runs": rep["runs"], "solve_at": rep["solve_at"], "reference": rep["reference"],
            "groups": groups, "checks": rep["checks"], "figures": rep.get("figures", []),
            **({"replication": rep["replication"]} if rep.get("replication") else {}),
            **({"memory": memory_json(rep["memory"])} if rep.get("memory") else {})}


def write_report(rep: dict, out: str | Path, plots: bool = True) -> list[Path]:
    """report.md / .csv / .json (+ PNGs) into `out`; these files are the report's own and are
    replaced on every call, nothing else in `out` is touched."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rep["figures"] = []
    if plots:
        # here, not at the top: matplotlib takes ~0.9 s to import, which `--no-plots` skips
        from recall_lab.experiments.plots import report_figures

        rep["figures"] = [str(p) for p in report_figures(rep, out)]
    paths = [out / "report.md", out / "report.csv", out / "report.json"]
    texts = [_markdown(rep), _csv(rep), json.dumps(_json(rep), indent=2) + "\n"]
    if rep.get("best_of_lr") is not None:  # its own files: report.md stays as it was
        paths += [out / "best-of-lr.md", out / "best-of-lr.json"]
        texts += [best_of_lr_markdown(rep["best_of_lr"], rep["metric"]),
                  json.dumps(best_of_lr_json(rep["best_of_lr"]), indent=2) + "\n"]
        if plots:
            from recall_lab.experiments.best_of_lr_plot import plot_best_of_lr

            rep["figures"].append(str(plot_best_of_lr(rep["best_of_lr"],
                                                      out / "best-of-lr.png",
                                                      rep["metric"])[0]))
    for path, text in zip(paths, texts, strict=True):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return paths + [Path(p) for p in rep["figures"]]
