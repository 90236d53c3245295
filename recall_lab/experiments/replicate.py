"""Replication: a confirmatory sweep of an exploratory comparison, on seeds not yet run.

`recall-lab sweep EXP --replicate CLAIMS.toml --seeds N` reads the comparison(s) to confirm as
`[[report.expect]]` claims (the format of experiment files), finds the groups each claim compares
in the original sweep (`OUT/EXP`, grouped as its report groups them), and builds a new
experiment `EXP-replication` whose runs are those groups' configs at the lr the original report
chose for each, with `train.seed` replaced by N seeds beyond every seed of the original sweep.
`run_sweep` registers the claims in the replication's `claims.json` before its first run, so the
replication's verdicts are pre-registered; `sweep.json` records what it replicates (original
folder, claims, seeds, rows). `report` on the replication folder finds the original beside it
and shows both, each with its intervals (`replication_rows`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recall_lab import checkpoint as ck
from recall_lab.config import RunConfig, read_toml, run_tables
from recall_lab.experiments import report as rp
from recall_lab.experiments.claims import read_registry
from recall_lab.experiments.engine import INDEX, read_index
from recall_lab.experiments.grid import Experiment, Run, config_hash, run_label
from recall_lab.generators.errors import RecallLabError

SUFFIX = "-replication"


def read_claims(path: str | Path) -> list[dict]:
    """The `[[report.expect]]` claims of a TOML file (one clear line when there are none)."""
    data = read_toml(Path(path))
    expects = (data.get("report") or {}).get("expect") or []
    if isinstance(expects, dict):
        expects = [expects]
    if not expects or not all(isinstance(e, dict) and "a" in e for e in expects):
        raise RecallLabError(f"{path}: no [[report.expect]] claims with an `a` group to "
                             "replicate")
    return expects


def plan_replication(exp: Experiment, root: str | Path, claims: list[dict], seeds: int,
                     source: Path | None = None) -> tuple[Experiment, dict]:
    """The replication experiment of `claims` over the original sweep `root/<exp.name>`, and the
    record `sweep.json` keeps of it ({"experiment", "original", "claims", "seeds", "rows"})."""
    if seeds < 1:
        raise RecallLabError(f"--seeds must be >= 1, got {seeds}")
    original = Path(root) / exp.name
    if not (original / INDEX).is_file():
        raise RecallLabError(f"no sweep of {exp.name} at {original}: the comparison to replicate "
                             "comes from its runs")
    runs, meta = rp.load_runs([original])
    report = meta["report"] or exp.report
    metric = report.get("metric") or "test.acc"
    solve_at = float(report.get("solve_at", rp.stats.SOLVE_AT))
    fields, groups = rp.aggregate(runs, report.get("by"), metric, solve_at)
    used = sorted({int(r.config["train.seed"]) for r in runs
                   if isinstance(r.config.get("train.seed"), int)})
    first = (used[-1] + 1) if used else 0
    new_seeds = list(range(first, first + seeds))
    chosen: dict[str, rp.Group] = {}
    for i, claim in enumerate(claims):
        try:
            found = rp.claim_groups(groups, claim)
        except RecallLabError as exc:
            raise RecallLabError(f"claim {claim.get('claim') or i + 1}: {exc}") from None
        for g in found:
            if not g.selected:
                raise RecallLabError(f"claim {claim.get('claim') or i + 1}: {g.label} has no "
                                     "finished run in the original")
            chosen.setdefault(g.label, g)
    out: list[Run] = []
    rows = []
    for g in chosen.values():
        template = g.selected[0]
        cfg_json = _recorded_config(template)
        rows.append({"label": g.label, "values": g.values, "lr": g.best_lr,
                     "original_runs": [r.name for r in g.selected]})
        for seed in new_seeds:
            data: dict[str, Any] = {**cfg_json, "train": {**cfg_json["train"], "seed": seed}}
            cfg = RunConfig.model_validate(data)
            values = {**{f: v for f, v in g.values.items() if v is not None},
                      "train.lr": g.best_lr, "train.seed": seed}
            out.append(Run(config=cfg, values=values, label=run_label(values),
                           hash=config_hash(cfg)))
    axes = list(dict.fromkeys(k for r in out for k in r.values))
    derived = Experiment(name=f"{exp.name}{SUFFIX}", source=source, runs=out, axes=axes,
                         report={"expect": claims, "by": fields, "metric": metric,
                                 "solve_at": solve_at},
                         reference={})
    record = {"experiment": exp.name, "original": exp.name, "claims": claims,
              "seeds": new_seeds, "original_seeds": used, "rows": rows}
    return derived, record


def _recorded_config(r: rp.RunRecord) -> dict:
    """A run's config as its own folder records it (what ran), else as the index lists it."""
    path = r.folder / ck.CONFIG
    if not path.is_file():
        raise RecallLabError(f"run {r.name}: no config.json to replicate from")
    data = ck.read_json(path, "run config")
    # the config's own tables (config.json also records versions and the parameter count)
    return {**run_tables(data, f"run config {path}"), "task_name": data.get("task_name")}


def find_original(folder: Path, record: dict) -> Path | None:
    """The original sweep of a replication: the folder named in its record, beside it."""
    cand = Path(folder).parent / str(record.get("original", ""))
    return cand if (cand / INDEX).is_file() else None


def add_replication(rep: dict, dirs: list[str | Path]) -> dict | None:
    """When one of `dirs` is a replication sweep, `rep["replication"]`: per replicated claim its
    verdict and registration status in the original (grouped and thresholded as the
    replication) and in the replication, and per group compared the seeds solved (Wilson 95%)
    and the Kaplan-Meier median steps to solve on both sides. None when no folder is one."""
    for d in map(Path, dirs):
        index = read_index(d) if d.is_dir() else None
        record = (index or {}).get("replicates")
        if not record:
            continue
        claims = record["claims"]
        kw = {"by": rep["by"], "metric": rep["metric"], "solve_at": rep["solve_at"]}
        mine = rp.check_expectations(rep["groups"], claims, read_registry(d))
        orig_folder = find_original(d, record)
        original = None
        if orig_folder is not None:
            original = rp.build_report([orig_folder], experiment={"report": {
                "expect": claims, **kw}}, **kw)
        rows = []
        for i, claim in enumerate(claims):
            groups = []
            try:
                found = rp.claim_groups(rep["groups"], claim)
            except RecallLabError:
                found = []
            by_label = {g.label: g for g in (original or {}).get("groups", [])}
            for g in found:
                o = by_label.get(g.label)
                groups.append({"label": g.label, "original": None if o is None else _side(o),
                               "replication": _side(g)})
            rows.append({"claim": mine[i]["claim"], "replication": _verdict(mine[i]),
                         "original": None if original is None
                         else _verdict(original["checks"][i]), "groups": groups})
        rep["replication"] = {"original": None if orig_folder is None else str(orig_folder),
                              "seeds": record.get("seeds"),
                              "original_seeds": record.get("original_seeds"),
                              "claims": rows}
        return rep["replication"]
    return None


def _side(g: rp.Group) -> dict:
    return {"solved": g.solved.text(), "k": g.solved.k, "n": g.solved.n, "lo": g.solved.lo,
            "hi": g.solved.hi, "seeds": [r.config.get("train.seed") for r in g.selected],
            "km_median": "-" if g.survival is None else g.survival.median_text()}


def _verdict(c: dict) -> dict:
    return {"verdict": c["verdict"], "detail": c["detail"], "tests": c.get("tests"),
            "registered": c["registered"]["status"], "text": c["registered"]["text"]}
