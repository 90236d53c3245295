"""The run layer: what a run is, between the models below and training / evaluation above.

It owns building a run's `RunConfig` (from TOML tables and command-line flags, or from a run's
config.json), run-folder names, the one overwrite guard ("exists; pass --force"), creating a
run folder for a new run and finding the step a run resumes from, and loading a run's config and
model with one rule for its weights ("best" = best.safetensors, "last" = model.safetensors).

`checkpoint.py` below it only reads and writes files; `config.py` only defines the data models;
the model registry turns names into `ModelConfig`s.
"""

from __future__ import annotations

import glob
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from torch import nn

from recall_lab import checkpoint as ck
from recall_lab.config import (
    RUN_TABLES,
    RunConfig,
    TrainConfig,
    read_toml,
    resolve_task,
    run_tables,
    task_from_table,
)
from recall_lab.data import LabelledReader
from recall_lab.generators import PRESETS
from recall_lab.generators.dataset import manifest_spec, read_manifest
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.folders import read_marker, write_marker
from recall_lab.generators.foreign import is_foreign
from recall_lab.generators.joint_recall import check_samples_fit
from recall_lab.mixers import mixer_label
from recall_lab.models import build_model
from recall_lab.models.adapters import apply_finetune, merge_adapters
from recall_lab.models.decimation import parse_decimate
from recall_lab.models.registry import check_model_name, model_config

# The one rule for a run's weights.
WEIGHTS = {"best": ck.BEST, "last": ck.MODEL}


# ---- run configs --------------------------------------------------------------------------------

def run_config_from_tables(data: dict, where: str = "config") -> RunConfig:
    """RunConfig from the `[model]`, `[train]`, `[task]` tables of a run config (a TOML file's
    content, with command-line flags already merged in). `train.data` (a dataset folder) fixes
    the task: a `[task]` table beside it must describe the same task. `where` names the source
    in error messages."""
    unknown = set(data) - set(RUN_TABLES)
    if unknown:
        raise RecallLabError(f"{where}: unknown table [{sorted(unknown)[0]}]; "
                             "expected [model], [train], [task]")
    run_tables(data, where)  # each one a table, before any field is read
    model_tab = dict(data.get("model") or {})
    if "vocab_size" in model_tab:
        raise RecallLabError(f"{where}: [model] vocab_size is set by the task's vocabulary; "
                             "remove it")
    name = model_tab.pop("name", None)
    if name is None and isinstance(model_tab.get("mixer"), str):
        name = mixer_label(model_tab["mixer"])  # a mixer model is named by its class
    if name is None:
        raise RecallLabError(f"{where}: no model given: set model.name or pass --model NAME "
                             "(see `recall-lab models`)")
    train_tab = dict(data.get("train") or {})
    if train_tab.get("data") is not None and not isinstance(train_tab["data"], str):
        raise RecallLabError(f"{where}: train.data must be a dataset folder (a string), got "
                             f"{type(train_tab['data']).__name__} {train_tab['data']!r}")
    if train_tab.get("data") is not None:
        # recorded resolved: the run resumes, evaluates and reports from any working folder
        train_tab["data"] = str(Path(train_tab["data"]).expanduser().resolve())
        if is_foreign(train_tab["data"]):  # another tool's data: its task is read from it
            spec, task_name = foreign_task(train_tab["data"], data.get("task"), where), None
        else:
            manifest = read_manifest(Path(train_tab["data"]))
            spec, task_name = manifest_spec(manifest), manifest.get("preset")
            if data.get("task") and task_from_table(data["task"])[0] != spec:
                raise RecallLabError(f"{where}: its [task] is not the task of dataset "
                                     f"{train_tab['data']}")
    elif data.get("task"):
        spec, task_name = task_from_table(data["task"])
    else:
        raise RecallLabError(f"{where}: no task given: a [task] table, --task PRESET_OR_TOML "
                             "or --data DATASET_DIR")
    mcfg = model_config(name, spec.vocab().size, **model_tab)
    return RunConfig(model=mcfg, train=TrainConfig.model_validate(train_tab), task=spec,
                     task_name=task_name)


def mixer_kwargs_json(text: str | None, option: str = "--mixer-kwargs") -> dict | None:
    """A mixer's kwargs given on the command line as a JSON object."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecallLabError(f"{option} must be a JSON object, e.g. '{{\"heads\": 2}}': "
                             f"{exc}") from None
    if not isinstance(value, dict):
        raise RecallLabError(f"{option} must be a JSON object, got {type(value).__name__}")
    return value


def run_config_from_flags(model: str | None, task: str | None, config: Path | None,
                          k: int | None, d_model: int | None, train_over: dict,
                          decimate: str | None = None, *, mixer: str | None = None,
                          mixer_kwargs: str | None = None) -> RunConfig:
    """RunConfig from an optional TOML file, then command-line flags (flags win; None = not
    given). `mixer` (an import path or mixer name) and `mixer_kwargs` (JSON) build a contract
    mixer model; `model` then only names it."""
    data = read_toml(config) if config is not None else {}
    run_tables(data, str(config))  # [model], [train], [task] are tables, before any is read
    tables = {**data, **{t: dict(data.get(t) or {}) for t in ("model", "train", "task")}}
    if model is not None:
        tables["model"]["name"] = model
    if mixer is not None:
        tables["model"]["mixer"] = mixer
    if mixer_kwargs is not None:
        tables["model"]["mixer_kwargs"] = mixer_kwargs_json(mixer_kwargs)
    tables["model"].update({a: b for a, b in (("k", k), ("d_model", d_model)) if b is not None})
    tables["train"].update({a: b for a, b in train_over.items() if b is not None})
    if task is not None:
        if tables["train"].get("data") is not None:
            raise RecallLabError("give --task or --data, not both: the dataset fixes the task")
        tables["task"] = ({"preset": task} if task in PRESETS
                          else resolve_task(task)[0].model_dump(mode="json"))
    if decimate is not None:
        given = parse_decimate(decimate).model_dump(exclude_unset=True)
        tables["model"]["decimation"] = {**dict(tables["model"].get("decimation") or {}), **given}
    return run_config_from_tables(tables, str(config) if config is not None else "flags")


def run_config_from_json(data: Any, path: Path) -> RunConfig:
    """A run's config.json -> RunConfig: shape checked, and the model's name checked against the
    rest of its config (a hand-edited name would label one model's weights as another's)."""
    tables = run_tables(data, f"corrupt run config {path}")
    missing = [k for k in RUN_TABLES if k not in tables]
    if missing:
        raise RecallLabError(f"corrupt run config: {path} lacks '{missing[0]}'")
    if "tie_embeddings" not in tables["model"]:
        # written before round two's initialisation: its weights are a tied-output model
        tables["model"] = {**tables["model"], "tie_embeddings": True, "embed_std": 0.02,
                           "rescale_residual": False}
    try:
        cfg = RunConfig.model_validate({**tables, "task_name": data.get("task_name")})
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"])
        raise RecallLabError(f"corrupt run config {path}: {loc}: {e['msg']}") from None
    check_model_name(cfg.model, str(path))
    return cfg


def load_run_config(run: Path) -> RunConfig:
    run = Path(run)
    if not run.is_dir():
        raise RecallLabError(f"run directory {run} does not exist")
    return run_config_from_json(ck.read_json(run / ck.CONFIG, "run config"), run / ck.CONFIG)


# ---- run folders --------------------------------------------------------------------------------

def run_dir_name(cfg: RunConfig) -> Path:
    """Where `recall-lab train` puts a run without --out: runs/MODEL-TASK-sSEED, where TASK is
    the preset's name, or for a run on a dataset (`--data`) the dataset's name (its folder's or
    file's, `data/qa.parquet` -> `qa`), so runs on two datasets do not share a folder; for a
    task given inline (a `[task]` table), `task-` and the first 8 hex digits of its sha256."""
    task = cfg.task_name
    if cfg.train.data is not None:
        data = Path(cfg.train.data)
        task = data.stem if data.is_file() else data.name
    if not task:  # an inline task: named by its hash, so two tasks never share a folder
        text = json.dumps(cfg.to_json()["task"], sort_keys=True, separators=(",", ":"))
        task = f"task-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return Path("runs") / f"{cfg.model.name}-{task}-s{cfg.train.seed}"


def finetune_dir_name(run: Path, attention: str, adapter: str) -> Path:
    """Where `recall-lab finetune RUN` puts its run without --out: beside RUN."""
    return run.with_name(f"{run.name}-ft-{attention}-{adapter}")


def demo_dir_name() -> Path:
    """Where `recall-lab demo` writes without --out: a fresh folder each time."""
    return Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")


def refuse_overwrite(path: Path, force: bool, *, folder: bool = False,
                     resume: bool = False,
                     options: tuple[str, str] = ("--force", "--resume")) -> None:
    """The one overwrite guard: fail early (before any progress is shown) when `path` exists
    (a `folder`: exists and is not empty) and no --force was given. `resume` adds that --resume
    continues instead. `options`: how the caller spells force and resume (the Python API:
    `force=True`, `resume=True`)."""
    path = Path(path)
    if force or not path.exists() or (folder and not any(path.iterdir())):
        return
    hint = f" or {options[1]} to continue" if resume else ""
    raise RecallLabError(f"{path} {'already exists' if folder else 'exists'}; pass "
                         f"{options[0]} to overwrite it{hint}")


# A run folder written before the marker (`.recall-lab`) existed: its config.json has the run
# config's tables with these model fields, beside a file only a run writes. Another program's
# config.json (a Hugging Face model's `{"architectures": [...]}`) has none of them.
_LEGACY_MODEL_KEYS = ("name", "arch", "vocab_size")
_LEGACY_RUN_FILES = (ck.METRICS, ck.RESUME, ck.SUMMARY)


def is_lab_run(folder: Path) -> bool:
    """Whether `folder` holds a recall-lab run (what --force may clear): its marker says "run",
    or (a run from before the marker) its config.json is a run config (tables model, train,
    task; model.name, arch, vocab_size) and metrics.jsonl, resume.safetensors or summary.json
    is beside it."""
    folder = Path(folder)
    kind = read_marker(folder)
    if kind is not None:
        return kind == "run"
    try:
        data = json.loads((folder / ck.CONFIG).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    if not (isinstance(data, dict) and all(isinstance(data.get(t), dict) for t in RUN_TABLES)):
        return False
    if not all(k in data["model"] for k in _LEGACY_MODEL_KEYS):
        return False
    return any((folder / f).is_file() for f in _LEGACY_RUN_FILES)


def prepare_run_dir(out: Path, force: bool, lock: ck.RunLock | None = None) -> None:
    """Create `out` for a new run (and take its lock); refuse to overwrite an existing run
    without `force`. With `force`, only the files recall-lab wrote are deleted (a user's notes
    stay) and only in a folder that holds a run. Call it after every input has been checked."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RecallLabError(f"{out} exists and is not a folder")

    def replaceable() -> bool:
        if not out.is_dir() or not any(e.name != ck.LOCK for e in out.iterdir()):
            return False
        refuse_overwrite(out, force, folder=True, resume=True)
        if not is_lab_run(out):
            raise RecallLabError(
                f"{out} is not empty and is not a recall-lab run; refusing to delete it"
            )
        return True

    replaceable()  # refuse before creating anything (no lock file in a user's folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RecallLabError(f"cannot create {out}: {exc.strerror or exc}") from None
    if lock is not None:
        lock.acquire()
    if replaceable():  # checked again under the lock: another process may have written meanwhile
        ck.clear_run(out)
    write_marker(out, "run")


def drop_stub(out: Path) -> None:
    """Remove what a new run wrote before its first checkpoint, so no stub run is left."""
    ck.clear_run(out)
    if [e.name for e in out.iterdir()] == [ck.LOCK]:
        (out / ck.LOCK).unlink()
        out.rmdir()


def resume_step(out: Path) -> int:
    """The step a run in `out` resumes from (its last checkpoint)."""
    path = out / ck.RESUME
    _, meta = ck.load_tensors(path, "resume checkpoint")
    return ck.check_resume_info(path, meta)["step"]


def run_identity(cfg: RunConfig) -> dict:
    """What a run's resume checkpoint records of its config: all of it but `train.steps` (a
    resume may raise it). A resume whose config.json no longer matches it is refused."""
    data = cfg.to_json()
    data["train"] = {k: v for k, v in data["train"].items() if k != "steps"}
    return data


def first_difference(old: Any, new: Any, where: str = "") -> str | None:
    """The first dotted key at which two JSON values differ, with both values; None if equal."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            diff = first_difference(old.get(key), new.get(key), f"{where}.{key}" if where
                                    else str(key))
            if diff is not None:
                return diff
        return None
    return None if old == new else f"{where or 'value'} {old!r} -> {new!r}"


def check_resume_matches(out: Path, cfg: RunConfig, info: dict, data_sha256: str | None) -> None:
    """Refuse a resume whose config or data changed since the checkpoint (resume.safetensors
    records both), naming the difference. Checkpoints from before they were recorded pass."""
    recorded = info.get("config")
    if recorded is not None:
        diff = first_difference(recorded, run_identity(cfg))
        if diff is not None:
            raise RecallLabError(f"{out / ck.CONFIG} changed since the last checkpoint ({diff}); "
                                 "refusing to resume (start a new run)")
    if info.get("data_sha256") is not None and info["data_sha256"] != data_sha256:
        raise RecallLabError(f"dataset {cfg.train.data} changed since the run began (its "
                             "manifest's content hash differs: regenerated?); refusing to "
                             "resume (start a new run)")


def resume_config(out: Path | None, model: str | None, steps: int | None,
                  given: dict[str, Any] | None = None) -> tuple[RunConfig, Path, int]:
    """(config, folder, start step) of `train --resume --out OUT`: the run's own config; --steps
    may change the step count. Any other flag in `given` (flag -> value, None = not given) must
    agree with the run's config: a resume never trains on something else than the run began
    with, so a contradicting flag is refused, naming it."""
    if out is None:
        raise RecallLabError("--resume needs --out RUN_DIR")
    cfg = load_run_config(out)
    if model is not None and model != cfg.model.name:
        raise RecallLabError(f"{out} is a run of {cfg.model.name!r}, not {model!r}")
    for flag, value in (given or {}).items():
        if value is None:
            continue
        field = flag.lstrip("-").replace("-", "_")
        if flag == "--task":
            ours = resolve_task(str(value))[0]
            same, have = ours == cfg.task, cfg.task_name or cfg.task.describe()
        elif field in TrainConfig.model_fields:
            have = getattr(cfg.train, field)
            same = (Path(value).resolve() == Path(have).resolve()) if field == "data" and have \
                else value == have
        elif field in ("k", "d_model"):
            have = getattr(cfg.model, field)
            same = value == have
        else:  # --config, --decimate: a resume takes the run's own
            raise RecallLabError(f"--resume continues {out} with its own config; {flag} cannot "
                                 "change it (start a new run instead)")
        if not same:
            raise RecallLabError(f"--resume continues {out} with its own config: {flag} {value}"
                                 f" differs from the run's {have} (drop {flag}, or start a new "
                                 "run)")
    if steps is not None:
        cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"steps": steps})})
    return cfg, out, resume_step(out)


def eval_target(run: Path, task: str | None, n: int, batch_size: int, length_factor: int,
                decimate: str | None, attention: str | None, decode: bool = False
                ) -> tuple[RunConfig, Any, str, Any]:
    """What `recall-lab eval RUN` evaluates: (the run's config, the task spec, its label for
    the result file's name, the DeciMamba setting or None). The task is the run's own unless
    given; `length_factor` lengthens it with filler."""
    if n < 1:
        raise RecallLabError(f"--n must be >= 1, got {n}")
    if batch_size < 1:
        raise RecallLabError(f"--batch-size must be >= 1, got {batch_size}")
    cfg = load_run_config(run)
    spec, name = resolve_task(task) if task is not None else (cfg.task, cfg.task_name)
    label = name or (Path(task).stem if task else "task")
    if length_factor != 1:
        spec, label = spec.at_length(length_factor), f"{label}-x{length_factor}"
    check_samples_fit(spec, n, "--n")
    deci = None
    if decimate is not None:
        deci = "off" if decimate == "off" else parse_decimate(decimate)
        label += "-deci-" + decimate.replace(",", "-")
    if attention is not None:
        label += f"-attn-{attention}"
    if decode:
        label += "-decode"
    return cfg, spec, label, deci


# ---- a run's model ------------------------------------------------------------------------------

def weights_path(run: Path, which: str, option: str = "--checkpoint") -> Path:
    """The weights file of `which` ("best" or "last") in `run`; `option` names the flag in the
    error."""
    if which not in WEIGHTS:
        raise RecallLabError(f"{option} must be 'best' or 'last', got {which!r}")
    return Path(run) / WEIGHTS[which]


def resolve_base_run(base_run: str) -> Path:
    """The base run's folder. A glob (`runs/seattn-pretrain/s0-*`: a sweep's run, whose name
    ends in a config hash) must match exactly one folder."""
    if not any(c in base_run for c in "*?["):
        return Path(base_run)
    found = sorted(Path(p) for p in glob.glob(base_run) if Path(p).is_dir())
    if len(found) != 1:
        raise RecallLabError(f"base run {base_run!r} matches {len(found)} folders, not one"
                             + (f": {', '.join(map(str, found[:3]))}" if found else
                                " (run the base experiment first)"))
    return found[0]


def base_task(cfg: RunConfig):
    """The task a run's lengths are measured against: its base run's for a fine-tune run."""
    if cfg.train.finetune is None:
        return cfg.task
    return load_run_config(resolve_base_run(cfg.train.finetune.base_run)).task


def build_run_model(cfg: RunConfig, load_base: bool = True) -> nn.Module:
    """The model of a run, the one place any run's model is built. For a fine-tune run: the base
    run's weights (if `load_base`: at the start of training; a checkpoint of the fine-tune run
    itself holds them too) and the adapter applied (its factors and the trainable set), so its
    own checkpoints (LoRA factors beside the frozen base weights) load back into it."""
    model = build_model(cfg.model)
    ft = cfg.train.finetune
    if ft is None:
        return model
    if load_base:
        base = resolve_base_run(ft.base_run)
        ck.load_weights(weights_path(base, ft.checkpoint), model)
    apply_finetune(model, ft.adapter, ft.rank, ft.alpha)
    return model


def load_run_model(run: Path, which: str, cfg: RunConfig | None = None, *,
                   option: str = "--checkpoint", merge: bool = False) -> nn.Module:
    """A run's model with its `which` weights ("best" or "last"); `cfg` defaults to the run's
    config (pass one to load the weights into a variant, e.g. another attention). `merge` folds
    adapters into the weights and puts the model in eval mode (analysis)."""
    run = Path(run)
    cfg = cfg if cfg is not None else load_run_config(run)
    model = build_run_model(cfg, load_base=False)  # a fine-tune run: base + adapters
    ck.load_weights(weights_path(run, which, option), model)
    if merge:
        merge_adapters(model).eval()
    return model


def foreign_task(path: str, table: dict | None, where: str):
    """The task of foreign data at `path` (recall_lab/generators/foreign.py); a `[task]` table
    beside it may state only how data without named splits is split: `valid`, `test`,
    `split_seed`."""
    fractions = dict(table or {})
    fractions = dict(fractions.get("kwargs", fractions))
    fractions.pop("generator", None)
    for key in ("vocab_size", "max_len", "sha256"):
        fractions.pop(key, None)  # a run's own config.json restates them
    extra = sorted(set(fractions) - {"valid", "test", "split_seed"})
    if extra:
        raise RecallLabError(f"{where}: [task] {extra[0]} does not apply to data files; beside "
                             "train.data a [task] states only valid, test, split_seed")
    return LabelledReader(path, fractions=fractions).spec


def recorded_data_hash(out: Path) -> str | None:
    """The content hash of the data a run in `out` trained on, as its last checkpoint recorded
    it (None for a stream, or where it cannot be read: the resume itself then says why)."""
    try:
        _, meta = ck.load_tensors(Path(out) / ck.RESUME, "resume checkpoint")
    except RecallLabError:
        return None
    return meta.get("data_sha256") if isinstance(meta, dict) else None
