"""One record per placement, `record.json`: what a placement measured and how, in a form anyone
can check (`recall-lab verify`) and a leaderboard can read, validated by the JSON Schema shipped
in the package (`recall_lab/schemas/placement-record.schema.json`).

`build_record(folder)` builds it from a placement folder's own records (place.json, answer.json,
claims.json, each run's config.json, summary.json and metrics.jsonl, the sweeps' sweep.json),
recomputing what they give (seeds solved per table with Wilson intervals, each run's config hash
and record hash, time over segments, how the runs are bound to the claims) and refusing a
folder whose answer.json disagrees with its runs. `write_record` writes it (place calls it at
the end of a placement; scripts/placement_records.py for the committed ones). `read_record`
checks a record before anything uses it: its schema version, its schema, and its content hash.

Field names follow Every Eval Ever's `eval.schema.json` (0.2.1) where they mean the same; the
schema's description lists where this record differs and why.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from recall_lab import checkpoint as ck
from recall_lab.data import DataSource
from recall_lab.experiments import claims as prereg
from recall_lab.experiments import stats
from recall_lab.experiments.grid import config_hash, flatten, numeric
from recall_lab.experiments.reference import match_table
from recall_lab.experiments.timing import total_time
from recall_lab.generators.errors import RecallLabError
from recall_lab.runs import run_config_from_json

RECORD = "record.json"
SCHEMA_VERSION = "1.0.0"
SCHEMA_VERSIONS = (SCHEMA_VERSION,)  # the versions this lab reads
SCHEMA_FILE = "placement-record.schema.json"
CANONICAL = "recall-lab-json/1: keys sorted, separators (',', ':'), UTF-8, no ASCII escaping"
RUN_FILES = (ck.CONFIG, ck.SUMMARY, ck.METRICS)  # what a run's record hash covers
BIND_NOTE = ("These runs store no hash of the claims: they were recorded before runs were bound "
             "to their claims, so they are bound by time only, to the second (claims.json's "
             "time against each run's launch time in sweep.json). The records show the claims "
             "were not written after the runs, not that they preceded them.")


# ---- hashing ------------------------------------------------------------------------------------

def canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str).encode()


def sha256(data: Any) -> str:
    return hashlib.sha256(canonical(data)).hexdigest()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_record_hash(folder: Path) -> str:
    """A run's record hash: SHA-256 of the canonical JSON {file name: its SHA-256} over its
    config.json, summary.json and metrics.jsonl (the files a placement folder keeps)."""
    return sha256({name: file_sha256(Path(folder) / name) for name in RUN_FILES
                   if (Path(folder) / name).is_file()})


def content_hash(record: dict) -> str:
    """The record's content hash: its canonical JSON less `dedupe_identity.content_hash`."""
    body = json.loads(json.dumps(record))
    body.get("dedupe_identity", {}).pop("content_hash", None)
    return sha256(body)


def first_batch_sha256(tables: dict) -> str:
    """SHA-256 of a run's first training batch (inputs then targets, int64 little-endian): the
    data generator's output for that config, checked by `verify` on another machine."""
    cfg = run_config_from_json(tables, "a record's config")
    x, y = DataSource.for_run(cfg).batch(0, cfg.train.batch_size, "cpu")
    h = hashlib.sha256()
    for t in (x, y):
        h.update(np.ascontiguousarray(t.numpy().astype("<i8")).tobytes())
    return h.hexdigest()


# ---- the schema ---------------------------------------------------------------------------------

@cache
def schema() -> dict:
    text = (resources.files("recall_lab") / "schemas" / SCHEMA_FILE).read_text()
    return json.loads(text)


def validate(record: dict, where: str = "record") -> None:
    """The record against the shipped schema: one line naming the first field that fails."""
    import jsonschema

    errors = sorted(jsonschema.Draft7Validator(schema()).iter_errors(record),
                    key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        at = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        raise RecallLabError(f"{where} does not follow the placement-record schema at {at}: "
                             f"{' '.join(e.message.split())[:160]}")


def read_record(path: Path) -> dict:
    """A record.json (or a folder holding one), checked: it exists, it is JSON, its schema
    version is one this lab reads, it follows the schema, and its content hash matches."""
    path = Path(path)
    if path.is_dir():
        path = path / RECORD
    if not path.is_file():
        raise RecallLabError(f"no {RECORD} at {path}: a placement's record is written by "
                             "`recall-lab place` (or scripts/placement_records.py)")
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RecallLabError(f"{path} is not a JSON record: {exc}") from None
    version = record.get("schema_version") if isinstance(record, dict) else None
    if version not in SCHEMA_VERSIONS:
        raise RecallLabError(f"{path}: unknown schema version {version!r}; this lab reads "
                             f"{', '.join(SCHEMA_VERSIONS)}")
    validate(record, str(path))
    stored = record["dedupe_identity"]["content_hash"]
    if content_hash(record) != stored:
        raise RecallLabError(f"{path}: content hash mismatch (stored {stored[:16]}, its content "
                             f"gives {content_hash(record)[:16]}): the record was changed after "
                             "it was written")
    return record


# ---- building it --------------------------------------------------------------------------------

def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=20,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _runs(folder: Path, sub: str) -> list[dict]:
    """The runs of one of the placement's sweeps, as the index lists them, with their files."""
    index = ck.read_json(folder / sub / "sweep.json", "sweep index")
    out = []
    for e in index.get("runs", []):
        path = folder / sub / e["name"]
        if not (path / ck.SUMMARY).is_file():
            continue
        cfg = ck.read_json(path / ck.CONFIG, "run config")
        summary = ck.read_json(path / ck.SUMMARY, "run summary")
        out.append({"sub": sub, "entry": e, "path": path, "config": cfg, "summary": summary})
    return out


def _tables(cfg: dict) -> dict:
    return {k: cfg[k] for k in ("model", "train", "task", "task_name") if k in cfg}


def _shape(cfg: dict) -> dict:
    """A table's config: a run's tables less train.seed and train.lr (every seed of a table,
    and every lr of the pilot, shares it)."""
    return {"model": cfg["model"],
            "train": {k: v for k, v in cfg["train"].items() if k not in ("seed", "lr")},
            "task": cfg["task"], "task_name": cfg.get("task_name")}


def rebuild(shape: dict, seed: int, lr: float) -> dict:
    """A run's config tables from its table's config in the record and its seed and lr."""
    return {"model": shape["model"], "train": {**shape["train"], "seed": seed, "lr": lr},
            "task": shape["task"], "task_name": shape.get("task_name")}


def _size(task: dict, answer: dict) -> float:
    """A run's table: its task.levels' entries, or (whole task tables) the table whose fields
    the answer's protocol lists under "at"."""
    tables = answer["protocol"].get("at")
    if not tables:
        return float(numeric("task.levels", task["levels"]))
    size = match_table(flatten({"task": task}), tables)
    if size is None:
        raise RecallLabError(f"a run's task {task} is none of the placement's tables")
    return size


def _evaluation(task: dict) -> str:
    return str(task.get("generator") or "MQAR")


def mixer_source(model: dict) -> dict:
    """The mixer's import path and its module's file SHA-256 as it is now (where it imports)."""
    path = model.get("mixer") or model.get("name")
    out: dict[str, Any] = {"import_path": path, "module_file": None, "sha256": None}
    if not isinstance(path, str) or ":" not in path:
        return out
    try:
        import importlib
        import inspect

        module = importlib.import_module(path.split(":")[0])
        src = Path(inspect.getsourcefile(module) or "")
    except Exception:  # noqa: BLE001 - recorded as not importable here
        return out
    if src.is_file():
        root = Path(__file__).resolve().parents[2]
        try:
            shown = str(src.resolve().relative_to(root))
        except ValueError:
            shown = src.name
        out.update(module_file=shown, sha256=file_sha256(src))
    return out


def build_record(folder: Path, *, machine: dict | None = None,
                 commit: str | None = None) -> dict:
    """The placement record of `folder` from its records (see the module's docstring)."""
    folder = Path(folder)
    for name in ("place.json", "answer.json", "claims.json"):
        if not (folder / name).is_file():
            raise RecallLabError(f"{folder} is not a finished placement: no {name}")
    plan = ck.read_json(folder / "place.json", "placement plan")
    answer = ck.read_json(folder / "answer.json", "placement answer")
    registry = prereg.read_registry(folder)
    pilot, cells = _runs(folder, "pilot"), _runs(folder, "cells")
    if not cells:
        raise RecallLabError(f"{folder}: no finished cell run")
    solve_at = float(plan["solve_at"])
    shapes: dict[Any, dict] = {}
    runs = []
    by_table: dict[float, list[dict]] = {}
    for r in pilot + cells:
        cfg, summary = r["config"], r["summary"]
        tables = _tables(cfg)
        h = config_hash_of(tables)
        if not r["path"].name.endswith(h):
            raise RecallLabError(f"{r['path']}: its config hashes to {h}, not its folder's "
                                 "suffix (config.json changed?)")
        acc = (summary.get("test") or {}).get("acc")
        stored = cfg.get("registration") if isinstance(cfg.get("registration"), dict) else {}
        run = {"name": r["path"].name, "role": "pilot" if r["sub"] == "pilot" else "cell",
               "table": _size(cfg["task"], answer), "levels": cfg["task"].get("levels"),
               "steps": cfg["train"]["steps"], "seed": cfg["train"]["seed"],
               "lr": cfg["train"]["lr"], "config_hash": h,
               "record_sha256": run_record_hash(r["path"]),
               "test_acc": acc, "valid_acc": (summary.get("valid") or {}).get("acc"),
               "solved": bool(acc is not None and acc >= solve_at),
               "launched": r["entry"].get("launched"),
               "registration_sha256": stored.get("sha256")}
        runs.append(run)
        key = (run["role"], run["table"])
        if shapes.setdefault(key, _shape(cfg)) != _shape(cfg):
            raise RecallLabError(f"{r['path']}: its config departs from its table's other "
                                 "runs' beyond seed and lr")
        if run["role"] == "cell":
            by_table.setdefault(run["table"], []).append(run)
    lr = answer["lr"]
    results = []
    answered = {c["size"]: c for c in answer["cells"]}
    for size in sorted(by_table):
        rs = sorted(by_table[size], key=lambda x: x["seed"])
        k, n = sum(x["solved"] for x in rs), len(rs)
        rate = stats.wilson(k, n)
        given = (answered.get(size) or {}).get("solved") or {}
        if (given.get("k"), given.get("n")) != (k, n):
            raise RecallLabError(f"{folder}: answer.json gives {given.get('k')}/{given.get('n')} "
                                 f"at table {size:g}, its runs {k}/{n}")
        results.append({
            "evaluation_name": (f"{_evaluation(shapes[('cell', size)]['task'])} "
                                f"{answer['protocol']['names'].get(f'{size:g}', size)}"),
            "table": size, "levels": rs[0]["levels"], "steps": rs[0]["steps"],
            "metric_config": {"evaluation_description": (
                f"seeds solved: a seed solves the table when its test accuracy (best held-out "
                f"weights) is at least {solve_at:g}"), "lower_is_better": False,
                "score_type": "continuous", "min_score": 0, "max_score": 1},
            "score_details": {"score": k / n, "uncertainty": {
                "confidence_interval": {"lower": rate.lo, "upper": rate.hi,
                                        "confidence_level": rate.confidence,
                                        "method": "wilson"},
                "num_samples": n}},
            "seeds_run": [x["seed"] for x in rs],
            "seeds_solved": [x["seed"] for x in rs if x["solved"]],
            "status": (answered.get(size) or {}).get("status"),
            "config": shapes[("cell", size)],
            "first_batch_sha256": first_batch_sha256(rebuild(shapes[("cell", size)],
                                                             rs[0]["seed"], lr))})
    for c in answer["cells"]:
        if c.get("status") == "cut":
            results.append({"evaluation_name": f"MQAR {c['table']}", "table": c["size"],
                            "status": "cut", "reason": c["reason"], "seeds_run": [],
                            "seeds_solved": []})
    binding = prereg.run_bindings([_Run(x) for x in runs], registry)
    versions = cells[0]["config"].get("versions") or {}
    took = total_time(r["summary"] for r in pilot + cells)
    indexes = [ck.read_json(folder / s / "sweep.json", "sweep index") for s in ("pilot", "cells")]
    workers = {i.get("timing", {}).get("workers") for i in indexes} - {None}
    protocol = {"name": answer["protocol"]["name"], "tables": [
        {"size": s, "name": answer["protocol"]["names"].get(f"{s:g}")}
        for s in answer["protocol"]["tables"]], "ran": plan["tables"],
        "seeds": plan["seeds"], "solve_at": solve_at, "level": plan["level"],
        "pilot": plan["pilot"], "cut": plan["cut"],
        "pilot_config": next((v for (role, _), v in shapes.items() if role == "pilot"), None),
        "lr_rule": "the pilot's lr of best held-out accuracy, ties within its tie to the smaller"}
    protocol["sha256"] = sha256({k: v for k, v in protocol.items() if k != "sha256"})
    launched = [x["launched"] for x in runs if x["launched"]]
    model = dict(cells[0]["config"]["model"])  # the largest table's vocab and length differ
    cell0 = cells[0]["config"]
    record = {
        "schema_version": SCHEMA_VERSION,
        "evaluation_id": f"recall-lab/place/{folder.name}",
        "evaluation_timestamp": min(launched, key=prereg.when) if launched else None,
        "retrieved_timestamp": max((i.get("updated") for i in indexes if i.get("updated")),
                                   key=prereg.when),
        "dedupe_identity": {"run_fingerprint": sha256([protocol["sha256"], model]),
                            "hash_algorithm": "sha256", "canonicalization_version": CANONICAL},
        "eval_library": {"name": "recall-lab", "version": versions.get("recall_lab", "unknown"),
                         "commit": commit, "torch": versions.get("torch"),
                         "numpy": versions.get("numpy"),
                         "native_kernels": versions.get("native_kernels")},
        "model_info": {"name": answer["label"], "id": model.get("mixer") or model.get("name"),
                       "mixer": plan["mixer"],
                       "mixer_kwargs": plan.get("kwargs"),
                       "source": mixer_source(model)},
        "protocol": protocol,
        "source_data": {"generator": "recall_lab.data (the stream of train.data_seed)",
                        "parameters": {k: v for k, v in cell0["task"].items()
                                       if k not in ("levels", "pools")},
                        "data_seed": cell0["train"].get("data_seed"),
                        "first_batch": "per table: evaluation_results[].first_batch_sha256 "
                                       "(seed of its first run, batch 0)"},
        "state": {"per_layer": answer["state"]["numbers"], "growth": answer["state"]["growth"],
                  "text": answer["state"]["text"], "class": _state_class(answer["state"]),
                  "mixer_class": model.get("mixer") or model.get("name")},
        "lr": {"value": lr, "pilot": answer["pilot"]},
        "evaluation_results": results,
        "frontier": answer["frontier"],
        "runs": runs,
        "claims": {"file_sha256": file_sha256(folder / prereg.CLAIMS),
                   "registrations": [{"id": g["id"], "time": g["time"],
                                      "sha256": g.get("sha256"), "claims": len(g["claims"])}
                                     for g in registry["registrations"]],
                   "binding": ("hash" if binding["runs"] and binding["bound"] == binding["runs"]
                               else "time only" if not binding["bound"] else "partial"),
                   "runs_bound": binding["bound"], "runs": binding["runs"],
                   "claims_recorded": binding["claims_recorded"],
                   "first_run_launched": binding["first_run_launched"],
                   "verdicts": [{"claim": v["claim"], "kind": v["kind"], "against": v["b"],
                                 "verdict": v["verdict"], "settled": bool(v.get("settled"))}
                                for v in answer["claims"]]},
        "machine": {**{"cpu_model": None, "cores": None, "threads": None},
                    **(machine or {}), "workers": max(workers) if workers else None,
                    "device": cells[0]["summary"].get("device")},
        "time": took,
    }
    if not binding["bound"]:
        record["claims"]["note"] = BIND_NOTE
    record["dedupe_identity"]["content_hash"] = content_hash(record)
    return record


class _Run:
    """What `claims.run_bindings` reads of a run."""

    def __init__(self, run: dict) -> None:
        self.bound, self.launched = run["registration_sha256"], run["launched"]


def _state_class(state: dict) -> str:
    if state.get("numbers") is None:
        return "grows" if state.get("growth") in ("L", "L/P") else "unknown"
    return "log L" if state.get("growth") == "log L" else "fixed"


def config_hash_of(tables: dict) -> str:
    return config_hash(run_config_from_json(tables, "a run's config"))


def this_machine(threads: int | None = None) -> dict:
    """CPU model and cores of this machine (Linux /proc/cpuinfo, else the platform's name)."""
    import platform

    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_model": model or platform.processor() or None, "cores": os.cpu_count(),
            "threads": threads}


def write_record(folder: Path, record: dict) -> Path:
    validate(record, f"{folder}/{RECORD}")
    path = Path(folder) / RECORD
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def lab_commit() -> str | None:
    """The lab's git commit (HEAD of the checkout it runs from), where it runs from one."""
    return _git("rev-parse", "HEAD")


def write_placement_record(folder: Path, threads: int | None = None) -> Path:
    """record.json of a placement that just finished on this machine (`place` calls it): the
    machine's CPU model and cores, the torch threads per worker, and the lab's commit."""
    return write_record(folder, build_record(folder, machine=this_machine(threads),
                                             commit=lab_commit()))
