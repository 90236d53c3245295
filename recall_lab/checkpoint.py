"""Run-directory files and checkpoints: safetensors for tensors, JSON for everything else.

File handling only: what a run is (its config, its model, creating and naming its folder) is the
run layer's (`recall_lab.runs`).

Nothing is ever unpickled: weights, optimizer moments and RNG states are safetensors; optimizer
hyper-parameters, the step counter and bookkeeping are JSON (in the safetensors metadata of the
resume file). Every file is written to a temporary name and moved into place with `os.replace`, so
a killed process leaves either the old or the new file, never half of one.

Layout of a run directory:
    config.json          RunConfig (model, train, task) + versions
    metrics.jsonl        one JSON row per evaluation (train means since the last one, held-out)
    model.safetensors    weights at the last checkpoint
    best.safetensors     weights with the best held-out accuracy so far
    resume.safetensors   model + optimizer + RNG tensors, metadata = step/param groups/best (JSON);
                         the single commit point of a checkpoint
    summary.json         final: best step, held-out and test metrics of the best weights, speed
    .lock                held (an OS lock, `RunLock`) by the process training into the folder
    .recall-lab          the marker `{"kind": "run", ...}` (generators/folders.py): --force
                         deletes only in a folder that holds a run

A write that fails (disk full, permissions) ends in one `RecallLabError` naming the file; its
temporary file is removed and the previous version of the file stays in place.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save_file

from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.folders import MARKER, FolderLock

CONFIG, METRICS, MODEL, BEST, RESUME, SUMMARY = (
    "config.json", "metrics.jsonl", "model.safetensors", "best.safetensors",
    "resume.safetensors", "summary.json",
)
RUN_FILES = (CONFIG, METRICS, MODEL, BEST, RESUME, SUMMARY)
LOCK = ".lock"
# Files the lab writes into a run folder besides RUN_FILES: `eval` results and temporary files;
# folders: `analysis/` (mean-distance / attention-map outputs).
LAB_PATTERNS = ("eval-*.json",)
LAB_DIRS = ("analysis",)
_TMP_NAME = re.compile(r"\..+\.tmp\d+")


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


@contextmanager
def _writing(path: Path, tmp: Path | None = None):
    """Turn an I/O failure (ENOSPC, EACCES, ...) into one line naming `path`; drop `tmp`."""
    try:
        yield
    except (OSError, SafetensorError) as exc:
        if tmp is not None:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
        raise RecallLabError(f"cannot write {path}: {_reason(exc)}") from None


def write_json(path: Path, data: Any) -> None:
    path = Path(path)
    tmp = _tmp(path)
    with _writing(path, tmp):
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
        os.replace(tmp, path)


def write_lines(path: Path, rows: list[dict]) -> None:
    path = Path(path)
    tmp = _tmp(path)
    with _writing(path, tmp):
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, path)


def append_line(path: Path, row: dict) -> None:
    # Appending a whole line is the only non-replace write; resume rewrites the file keeping
    # only rows up to the checkpoint step, so a torn last line never survives a resume.
    with _writing(path), open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


# ---- run folders: lock, lab-written files -------------------------------------------------------

class RunLock(FolderLock):
    """The OS lock on RUN/.lock (`recall_lab.generators.folders.FolderLock`), held while a
    process trains into RUN: a second `train` (new, --force or --resume) on a run in use is
    refused with one line; the kernel drops the lock when its holder dies (kill -9 included)."""

    def __init__(self, run: Path) -> None:
        super().__init__(Path(run) / LOCK, Path(run))
        self.new_run = False  # set by train: this process began a new run in the folder


def is_lab_file(name: str) -> bool:
    """Whether a run folder's entry `name` is one recall-lab writes (what --force may delete)."""
    return (name in RUN_FILES or name in (LOCK, MARKER) or bool(_TMP_NAME.fullmatch(name))
            or any(fnmatch.fnmatchcase(name, p) for p in LAB_PATTERNS))


def remove_temporaries(run: Path) -> None:
    """Delete `.NAME.tmpPID` files a killed process left in `run` (call it holding the lock:
    then no other process is writing there)."""
    for entry in Path(run).iterdir():
        if _TMP_NAME.fullmatch(entry.name) and entry.is_file():
            entry.unlink(missing_ok=True)


def clear_run(run: Path) -> None:
    """Delete the files recall-lab wrote in `run` (not the lock), keeping everything else."""
    for entry in Path(run).iterdir():
        lab_dir = entry.name in LAB_DIRS and entry.is_dir() and not entry.is_symlink()
        if not lab_dir and not (entry.name != LOCK and entry.is_file() and is_lab_file(entry.name)):
            continue
        try:
            if lab_dir:
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError as exc:
            raise RecallLabError(f"cannot delete {entry}: {_reason(exc)}") from None


def read_lines(path: Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # torn last line of a killed run
    return rows


def read_json(path: Path, what: str = "file") -> Any:
    path = Path(path)
    if not path.is_file():
        raise RecallLabError(f"missing {what}: {path}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RecallLabError(f"corrupt {what}: {path} is not valid JSON") from None


def save_tensors(path: Path, tensors: dict[str, torch.Tensor], meta: dict | None = None) -> None:
    path = Path(path)
    tmp = _tmp(path)
    clean, storages = {}, set()
    for k, v in tensors.items():
        t = v.detach().to("cpu").contiguous()
        # safetensors refuses tensors that share memory (a mixer's tied weights, a buffer that
        # views a parameter): each later one is written as its own copy, and loading a state
        # dict fills a tied parameter from either key alike
        ptr = t.untyped_storage().data_ptr()
        clean[k] = t.clone() if ptr in storages else t
        storages.add(ptr)
    with _writing(path, tmp):
        save_file(clean, str(tmp),
                  metadata={"json": json.dumps(meta)} if meta is not None else None)
        os.replace(tmp, path)


def load_tensors(path: Path, what: str = "checkpoint") -> tuple[dict[str, torch.Tensor], Any]:
    """Tensors and JSON metadata of a safetensors file; one clear error when missing/corrupt."""
    path = Path(path)
    if not path.is_file():
        raise RecallLabError(f"missing {what}: {path}")
    try:
        tensors = load_file(str(path))
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        return tensors, json.loads(meta["json"]) if "json" in meta else None
    except (SafetensorError, OSError, ValueError, KeyError) as exc:
        raise RecallLabError(f"corrupt {what}: {path} ({str(exc).splitlines()[0]})") from None


def save_weights(path: Path, model: torch.nn.Module) -> None:
    save_tensors(path, model.state_dict())


def load_weights(path: Path, model: torch.nn.Module) -> None:
    tensors, _ = load_tensors(path, "checkpoint")
    _load_state(model, tensors, path)


def _load_state(model: torch.nn.Module, tensors: dict, path: Path) -> None:
    try:
        model.load_state_dict(tensors, strict=True)
    except RuntimeError as exc:
        raise RecallLabError(
            f"checkpoint {path} does not fit this model ({str(exc).splitlines()[0]})"
        ) from None


# ---- full training state ------------------------------------------------------------------------

def save_resume(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, info: dict
) -> None:
    """Model, optimizer moments and RNG states in one file; `info` (JSON) rides in metadata."""
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    opt = optimizer.state_dict()
    for pid, state in opt["state"].items():
        for name, value in state.items():
            if not torch.is_tensor(value):
                value = torch.tensor(value)
            tensors[f"optim.{pid}.{name}"] = value
    tensors["rng.cpu"] = torch.get_rng_state()
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    meta = {**info, "param_groups": opt["param_groups"]}
    save_tensors(path, tensors, meta)


def _resume_error(path: Path, what: str) -> RecallLabError:
    return RecallLabError(f"corrupt resume checkpoint: {path} {what}")


def check_resume_info(path: Path, meta: Any) -> dict:
    """The JSON half of a resume checkpoint, its keys and types checked before any is used."""
    if not isinstance(meta, dict) or not isinstance(meta.get("param_groups"), list):
        raise _resume_error(path, "has no training state (param_groups)")
    step = meta.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise _resume_error(path, f"has no valid 'step' (got {step!r})")
    best = meta.get("best")
    if not isinstance(best, dict) or not {"acc", "loss", "step"} <= set(best):
        raise _resume_error(path, "has no valid 'best' (acc, loss, step)")
    return meta


def load_resume(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict:
    """Restore what `save_resume` wrote (RNG included) and return its `info`. Every key and
    tensor shape is checked before anything is used: one line naming the file and the field."""
    tensors, meta = load_tensors(path, "resume checkpoint")
    meta = check_resume_info(path, meta)
    rng = tensors.get("rng.cpu")
    if rng is None or rng.dtype != torch.uint8 or rng.dim() != 1:
        raise _resume_error(path, "has no valid 'rng.cpu' (the CPU random state)")
    _load_state(model, {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, path)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, pid, name = key.split(".", 2)
            if not pid.isdigit() or int(pid) >= len(params):
                raise _resume_error(path, f"has optimizer state {key!r} for no parameter")
            if name in ("exp_avg", "exp_avg_sq") and value.shape != params[int(pid)].shape:
                raise _resume_error(path, f"has optimizer state {key!r} of shape "
                                    f"{tuple(value.shape)}; its parameter is "
                                    f"{tuple(params[int(pid)].shape)}")
            state.setdefault(int(pid), {})[name] = value
    try:
        optimizer.load_state_dict({"state": state, "param_groups": meta.pop("param_groups")})
    except (ValueError, KeyError, RuntimeError, TypeError) as exc:
        raise _resume_error(path, f"({exc})") from None
    torch.set_rng_state(rng)
    if torch.cuda.is_available():
        keys = [t for t in tensors if t.startswith("rng.cuda.")]
        cuda = [tensors[k] for k in sorted(keys, key=lambda t: int(t.rsplit(".", 1)[1]))]
        if cuda:
            torch.cuda.set_rng_state_all(cuda)
    return meta


def read_metrics(path: Path) -> list[dict]:
    """A run's metrics.jsonl, each row checked to be an object with an integer `step` (a torn
    last line of a killed run is dropped, as `read_lines` does)."""
    rows = read_lines(path)
    for i, row in enumerate(rows, 1):
        step = row.get("step") if isinstance(row, dict) else None
        if isinstance(step, bool) or not isinstance(step, int):
            raise RecallLabError(f"corrupt metrics: {path} line {i} has no integer 'step'")
    return rows
