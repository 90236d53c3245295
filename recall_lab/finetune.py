"""Fine-tuning runs (Expansion Span Sec. 3.4, 4.6): the config of a new run that starts from a
finished one with another attention and an adapter.

A fine-tune run is an ordinary run (same trainer, same directory layout) whose `train.finetune`
names its base run; `recall_lab.runs.build_run_model` builds it (the base run's weights, then the
adapter). The attention swap is the model registry's `with_attention`; every pattern is
parameter-free, so the base weights fit the new model unchanged.
"""

from __future__ import annotations

from pathlib import Path

from recall_lab.config import FinetuneConfig, RunConfig
from recall_lab.evaluate import fit_vocab
from recall_lab.generators.errors import RecallLabError
from recall_lab.models.registry import with_attention
from recall_lab.runs import load_run_config


def finetune_config(base_run: Path, task, task_name: str | None, attention: str, adapter: str,
                    rank: int = 8, alpha: float | None = None, train_over: dict | None = None
                    ) -> RunConfig:
    """The config of a fine-tune run of `base_run` on `task` (a TaskSpec, re-expressed in the
    base run's vocabulary), with `attention` and `adapter`; `train_over` overrides train fields
    (steps, lr, ...). Other train settings are the base run's."""
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
