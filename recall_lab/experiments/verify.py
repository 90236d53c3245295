"""`recall-lab verify RECORD`: re-train a sample of a placement record's runs on this machine and
check them against the record.

Before anything trains, the record is read and checked (`records.read_record`: it exists, its
schema version is known, it follows the schema, its content hash matches), its mixer must
import (the import path is named where it does not), and two checks run over every cell run:
- config hashes: each run's config rebuilt from the record (its table's config with its seed
  and lr) hashes to the run's recorded config hash, the hash its folder is named by;
- data hashes: each table's first training batch, generated here, hashes to the recorded one.
A mismatch ends there, in one line. Then the sample trains, one run at a time with `threads`
torch threads, into `verify-DATE-NAME/` beside the record's folder (or under `out`), never into
the record's folder, and each run's outcome (solved: test accuracy at least the protocol's
threshold) is compared with the record's. The standard is the outcome, not the accuracy:
accuracies are not bit-identical across CPU models (place-deltanet's reproduction on a second
CPU model gave 35 of 35 outcomes equal while the numbers drifted).

The sample: by default one seed at each boundary table (a table some but not all of whose
seeds solved; where there is none, the largest table run), the seed whose recorded test
accuracy is nearest the threshold (the closest call); `runs` = N takes the N runs nearest the
threshold, the boundary tables' first; `tables` = [S, ...] takes every cell run of those tables
(a replay of whole cells, e.g. after a kernel changed: the same runs must give the same
outcomes).
"""

from __future__ import annotations

import importlib
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from recall_lab.experiments import records as rec
from recall_lab.experiments.estimate import estimate as time_runs
from recall_lab.generators.errors import RecallLabError
from recall_lab.models.registry import listed_models
from recall_lab.runs import run_config_from_json
from recall_lab.train import train_run, versions

VERIFY = "verify.json"


def import_mixer(record: dict) -> None:
    """The record's mixer imports here, or one line naming its import path."""
    path = record["model_info"]["id"]
    if ":" not in path:
        if path not in listed_models():
            raise RecallLabError(f"the record's model {path!r} is not a model of this lab")
        return
    module, _, name = path.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # noqa: BLE001 - any failure to import is the same refusal
        raise RecallLabError(f"cannot import the record's mixer {path}: {type(exc).__name__}: "
                             f"{' '.join(str(exc).split())[:120]}") from None


def tables(record: dict) -> dict[float, dict]:
    """The record's tables that ran: table size -> its evaluation result."""
    return {r["table"]: r for r in record["evaluation_results"] if r.get("status") != "cut"
            and r.get("seeds_run")}


def cell_config(record: dict, run: dict) -> dict:
    return rec.rebuild(tables(record)[run["table"]]["config"], run["seed"], run["lr"])


def check_hashes(record: dict) -> dict:
    """Config and data hashes rebuilt here against the record (one line at the first
    mismatch). Returns {"configs": n checked, "data": tables checked}."""
    cells = [r for r in record["runs"] if r["role"] == "cell"]
    for run in cells:
        got = rec.config_hash_of(cell_config(record, run))
        if got != run["config_hash"]:
            raise RecallLabError(f"config hash mismatch: run {run['name']} rebuilds to {got}, "
                                 f"the record says {run['config_hash']}")
    for size, t in sorted(tables(record).items()):
        first = min((r for r in cells if r["table"] == size), key=lambda r: r["seed"])
        got = rec.first_batch_sha256(cell_config(record, first))
        if got != t["first_batch_sha256"]:
            raise RecallLabError(f"data hash mismatch at table {size:g}: the first batch "
                                 f"hashes to {got[:16]} here, {t['first_batch_sha256'][:16]} in "
                                 "the record (a changed data generator?)")
    return {"configs": len(cells), "data": len(tables(record))}


def boundary(record: dict) -> list[float]:
    ts = tables(record)
    mixed = [s for s, t in ts.items() if 0 < len(t["seeds_solved"]) < len(t["seeds_run"])]
    return sorted(mixed) or [max(ts)]


def sample(record: dict, runs: int | None = None,
           only: list[float] | None = None) -> list[dict]:
    """The runs to re-train (see the module's docstring)."""
    at = record["protocol"]["solve_at"]
    cells = [r for r in record["runs"] if r["role"] == "cell" and r["table"] in tables(record)]
    if only:
        if runs is not None:
            raise RecallLabError("--runs and --table choose the runs two ways: give one")
        ran = sorted(tables(record))
        for size in only:
            if float(size) not in ran:
                raise RecallLabError(f"--table {size:g}: the record has no such table (it ran "
                                     f"{', '.join(f'{x:g}' for x in ran)})")
        return sorted((r for r in cells if r["table"] in {float(x) for x in only}),
                      key=lambda r: (r["table"], r["seed"]))
    edge = boundary(record)

    def closeness(r: dict) -> tuple:
        acc = r["test_acc"] if r["test_acc"] is not None else -1.0
        return (r["table"] not in edge, abs(acc - at), r["table"], r["seed"])

    if runs is None:
        return [min((r for r in cells if r["table"] == s), key=closeness) for s in edge]
    if runs < 1 or runs > len(cells):
        raise RecallLabError(f"--runs must be from 1 to the record's {len(cells)} cell runs, "
                             f"got {runs}")
    return sorted(cells, key=closeness)[:runs]


def plan(path: Path, runs: int | None = None, threads: int = 1,
         estimate: bool = True, only: list[float] | None = None) -> dict:
    """Everything `verify` checks before training, and what it would train (with the probe's
    time estimate unless `estimate` is False). Nothing is written."""
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 4096:
        raise RecallLabError(f"--threads must be an integer from 1 to 4096, got {threads!r}")
    record = rec.read_record(path)
    chosen = sample(record, runs, only)
    import_mixer(record)
    hashes = check_hashes(record)
    out = {"record": record, "hashes": hashes, "runs": chosen, "estimate": None}
    if estimate:
        cfgs = [(f"table {r['table']:g}", run_config_from_json(cell_config(record, r), r["name"]))
                for r in chosen]
        out["estimate"] = time_runs([cfgs], workers=1, threads=threads)
    return out


def destination(path: Path, out: Path | None, now: datetime | None = None) -> Path:
    """verify-DATE-NAME/ beside the record's folder, or under `out`; never inside the record's
    folder, and never an existing folder."""
    path = Path(path)
    folder = (path if path.is_dir() else path.parent).resolve()
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    dest = (Path(out).resolve() if out is not None else folder.parent) / \
        f"verify-{stamp}-{folder.name}"
    if dest == folder or folder in dest.parents:
        raise RecallLabError(f"--out {out} is inside the record's folder {folder}: verify "
                             "never writes there")
    if dest.exists():
        raise RecallLabError(f"{dest} exists already")
    return dest


def verify(path: Path, runs: int | None = None, threads: int = 1, out: Path | None = None,
           say=None, only: list[float] | None = None) -> dict:
    """Check, then re-train the sample and compare outcomes; writes verify.json and the runs'
    folders into the destination. Returns the verification (what verify.json holds)."""
    say = say or (lambda _line: None)
    p = plan(path, runs, threads, estimate=False, only=only)
    record = p["record"]
    dest = destination(path, out)
    torch.set_num_threads(threads)
    at = record["protocol"]["solve_at"]
    results = []
    for r in p["runs"]:
        say(f"training {r['name']} (table {r['table']:g}, seed {r['seed']}; recorded test "
            f"accuracy {r['test_acc']:.4f}) ...")
        cfg = run_config_from_json(cell_config(record, r), r["name"])
        t0 = time.perf_counter()
        summary = train_run(cfg, dest / r["name"])
        acc = summary["test"]["acc"]
        results.append({"name": r["name"], "table": r["table"], "seed": r["seed"],
                        "recorded_test_acc": r["test_acc"], "test_acc": acc,
                        "recorded_solved": r["solved"], "solved": acc >= at,
                        "equal": (acc >= at) == r["solved"],
                        "wall_s": time.perf_counter() - t0})
    same = sum(x["equal"] for x in results)
    verdict = {"record": str(path), "content_hash": record["dedupe_identity"]["content_hash"],
               "evaluation_id": record["evaluation_id"],
               "checked": {"config_hashes": p["hashes"]["configs"],
                           "data_hashes": p["hashes"]["data"]},
               "machine": rec.this_machine(threads), "torch": torch.__version__,
               "versions": versions(),
               "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "runs": results, "reproduced": same, "of": len(results)}
    (dest / VERIFY).write_text(json.dumps(verdict, indent=2) + "\n")
    verdict["folder"] = str(dest)
    return verdict


def outcome_line(v: dict) -> str:
    if v["reproduced"] == v["of"]:
        return f"outcome reproduced {v['reproduced']}/{v['of']}"
    bad = next(x for x in v["runs"] if not x["equal"])
    word = "solved" if bad["recorded_solved"] else "not solved"
    return (f"outcome NOT reproduced ({v['reproduced']}/{v['of']}): {bad['name']} is {word} in "
            f"the record (test accuracy {bad['recorded_test_acc']:.4f}) and "
            f"{'solved' if bad['solved'] else 'not solved'} here ({bad['test_acc']:.4f})")
