"""Fine-tuning runs (seed 001 Sec. 3.4, 4.6): the model of a run, and the config of a new run that
starts from a finished one with another attention and an adapter.

A fine-tune run is an ordinary run (same trainer, same directory layout) whose `train.finetune`
names its base run; `build_run_model` is the one place that builds any run's model: for a
fine-tune run it loads the base run's weights (training start) and applies the adapter, so its
own checkpoints (LoRA factors beside the frozen base weights, safetensors) load back into the
same structure for `eval`.

Attention swaps (`with_attention`), for a branch model (`mamba2+full`, ...) and for the layer
hybrid (`mamba2-attn`): `full`, `sw`, `se` (SE-Attn, causal prefix scoring), `se-paper` (the
paper's chunk-level scoring, not causal), `se-nomem`, `se-random`; `keep` leaves it. Every
pattern is parameter-free, so the base weights fit the new model unchanged.
"""

from __future__ import annotations

import glob
from pathlib import Path

import torch
from torch import nn

from generators.errors import RecallLabError
from recall_lab import checkpoint as ck
from recall_lab.config import FinetuneConfig, ModelConfig, RunConfig, SEAttnConfig
from recall_lab.models import build_model
from recall_lab.models.adapters import apply_finetune

ATTENTIONS = ("keep", "full", "sw", "se", "se-paper", "se-nomem", "se-random")
_BRANCH = {"full": "full", "sw": "sw", "se": "seattn", "se-paper": "seattn",
           "se-nomem": "seattn-nomem", "se-random": "seattn-random"}


def with_attention(m: ModelConfig, attention: str) -> ModelConfig:
    """`m` with its attention replaced (see the module docstring); the name follows."""
    if attention not in ATTENTIONS:
        raise RecallLabError(f"unknown attention {attention!r}; choose from "
                             f"{', '.join(ATTENTIONS)}")
    if attention == "keep":
        return m
    se = m.seattn or SEAttnConfig()
    se = se.model_copy(update={"scoring": "chunk" if attention == "se-paper" else "prefix"})
    if m.arch == "mamba2-attn":
        retrieval = {"se-nomem": "none", "se-random": "random"}.get(attention)
        kind = "se" if attention.startswith("se") else attention
        layers = m.attention_layers.model_copy(update={"attention": kind})
        name = "mamba2-attn" + ("" if kind == "full" else f"-{kind}")
        update = {"attn_layers": layers, "name": name}
        if kind == "se":
            update["seattn"] = se.model_copy(update={"retrieval": retrieval})
        return ModelConfig.model_validate({**m.model_dump(), **update})
    if m.arch not in ("mamba", "mamba2") or m.pattern is None:
        raise RecallLabError(f"{m.name} has no attention to swap (a hybrid branch model such as "
                             "mamba2+full, or mamba2-attn)")
    pattern = _BRANCH[attention]
    update = {"pattern": pattern, "name": f"{m.arch}+{pattern}",
              "seattn": se if pattern.startswith("seattn") else m.seattn}
    return ModelConfig.model_validate({**m.model_dump(), **update})


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


def build_run_model(cfg: RunConfig, load_base: bool = True) -> nn.Module:
    """The model of a run. For a fine-tune run: the base run's weights (if `load_base`: at the
    start of training; a checkpoint of the fine-tune run itself holds them too) and the adapter
    applied (its factors and the trainable set)."""
    model = build_model(cfg.model)
    ft = cfg.train.finetune
    if ft is None:
        return model
    if load_base:
        base = resolve_base_run(ft.base_run)
        ck.load_weights(base / (ck.BEST if ft.checkpoint == "best" else ck.MODEL), model)
    apply_finetune(model, ft.adapter, ft.rank, ft.alpha)
    return model


def finetune_config(base_run: Path, task, task_name: str | None, attention: str, adapter: str,
                    rank: int = 8, alpha: float | None = None, train_over: dict | None = None
                    ) -> RunConfig:
    """The config of a fine-tune run of `base_run` on `task` (a TaskSpec, re-expressed in the
    base run's vocabulary), with `attention` and `adapter`; `train_over` overrides train fields
    (steps, lr, ...). Other train settings are the base run's."""
    from recall_lab.checkpoint import load_run_config
    from recall_lab.evaluate import fit_vocab

    base = load_run_config(base_run)
    if base.train.finetune is not None and Path(base.train.finetune.base_run) == Path(base_run):
        raise RecallLabError(f"{base_run} names itself as its base run")
    ft = FinetuneConfig(base_run=str(base_run), adapter=adapter, rank=rank,
                        alpha=2.0 * rank if alpha is None else alpha)
    train = base.train.model_copy(update={
        **{k: v for k, v in (train_over or {}).items() if v is not None},
        "finetune": ft, "data": None})
    task = fit_vocab(task, base.task)
    return RunConfig(model=with_attention(base.model, attention), train=train, task=task,
                     task_name=task_name)


def base_task(cfg: RunConfig):
    """The task a run's lengths are measured against: its base run's for a fine-tune run."""
    from recall_lab.checkpoint import load_run_config

    if cfg.train.finetune is None:
        return cfg.task
    return load_run_config(resolve_base_run(cfg.train.finetune.base_run)).task


def length_tests(model: nn.Module, cfg: RunConfig, batch_size: int, device: torch.device,
                 autocast: bool) -> tuple[dict, dict]:
    """`train.test_length_factors` (see `TrainConfig`): (valid, test) dicts keyed "x{f}" and
    "x{f}-full", each the held-out metrics of `model`'s current weights at that length."""
    from recall_lab.evaluate import evaluate, fit_vocab, held_out

    t = cfg.train
    valid: dict = {}
    test: dict = {}
    if not t.test_length_factors:
        return valid, test
    models = {"": model}
    try:
        full_cfg = cfg.model_copy(update={"model": with_attention(cfg.model, "full")})
    except RecallLabError:  # no attention to swap (plain SSM, Samba, ...)
        full_cfg = None
    if full_cfg is not None and full_cfg.model != cfg.model:
        full = build_run_model(full_cfg, load_base=False).to(device)
        full.load_state_dict(model.state_dict())
        models["-full"] = full
    elif full_cfg is not None:  # already full attention: "-full" is the run's own
        models["-full"] = model
    base = base_task(cfg)
    for f in t.test_length_factors:
        spec = fit_vocab(base.at_length(f), cfg.task)
        sets = {"valid": held_out(spec, t.eval_samples, t.data_seed, "valid"),
                "test": held_out(spec, t.test_samples, t.data_seed, "test")}
        for suffix, m in models.items():
            for split, out in (("valid", valid), ("test", test)):
                out[f"x{f}{suffix}"] = evaluate(m, *sets[split], batch_size, device, autocast)
    return valid, test
