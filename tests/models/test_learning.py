"""The learning gate (issue 16): each model family learns recall on a small task within a fixed
step budget, deterministically on CPU, through the real training loop (`train_run`).

Budgets and thresholds come from measured runs (README "Initialisation"; the curves are in the
comments); each budget leaves margin beyond the step where the measured run crossed its threshold.
`test_round_one_init_stays_on_the_plateau` shows the gate can fail: the same loop with round one's
initialisation (tied std-0.02 embedding) stays far below the threshold.
"""

from __future__ import annotations

import pytest

from recall_lab.config import RunConfig, TrainConfig
from recall_lab.generators import TaskSpec
from recall_lab.models import model_config, registered_models
from recall_lab.models.registry import mixer_models
from recall_lab.testing import GATE_STEPS, GATE_TASK, GATE_THRESHOLD, learning_gate
from recall_lab.train import train_run

# 2-4 key-value pairs, 8 values, 8 keys: at most 18 tokens (within every model's capacity)
SMALL = GATE_TASK
# the 4-8-pair MQAR (16 values): at most 34 tokens
MQAR_4_8 = TaskSpec(levels=((4, 8),), values=16)
ROUND_ONE_INIT = {"tie_embeddings": True, "embed_std": 0.02, "rescale_residual": False}


def _test_acc(tmp_path, name, spec, steps, *, d_model=32, batch=32, stop_at=None, **model_kw):
    model = model_config(name, spec.vocab().size, d_model=d_model, **model_kw)
    train = TrainConfig(steps=steps, batch_size=batch, lr=3e-3, warmup=100, eval_every=50,
                        eval_samples=256, test_samples=512, stop_at=stop_at, device="cpu")
    summary = train_run(RunConfig(model=model, train=train, task=spec), tmp_path / "run")
    return summary["test"]["acc"]


@pytest.mark.slow
def test_transformer_solves_mqar(tmp_path):
    # measured (d_model 64, batch 64, lr 3e-3): valid 0.23 at step 125, 0.991 at 250, 0.998 at 500
    acc = _test_acc(tmp_path, "transformer", MQAR_4_8, 500, d_model=64, batch=64, stop_at=0.995)
    assert acc >= 0.99


# measured on SMALL (d_model 32, batch 32, lr 3e-3, warm-up 100), valid acc at steps 100..600:
#   mamba       0.22 0.61 0.81 0.90 0.93 0.97      mamba2      0.34 0.82 1.00
#   mamba+hax   0.30 0.70 0.84 0.93 0.98 0.99      mamba2+hax  0.41 0.99 1.00
#   samba       0.45 0.69 0.83 0.95 1.00 1.00      transformer 0.40 0.73 1.00
GATES = [
    ("mamba", 600, 0.9, {}),
    ("mamba2", 400, 0.95, {}),
    ("mamba+hax", 600, 0.9, {"k": 8}),
    ("mamba2+hax", 400, 0.95, {"k": 8}),
    ("samba", 600, 0.9, {"k": 8}),
    # a registered model meets the gate of the SSMs (mamba's) with k = 8
    *((name, 600, 0.9, {"k": 8}) for name in registered_models()),
    # every named contract mixer (the lab's own, through its entry points) meets the same gate
    *((name, GATE_STEPS, GATE_THRESHOLD, {}) for name in mixer_models()),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,steps,threshold,kw", GATES, ids=[g[0] for g in GATES])
def test_model_learns_small_recall(tmp_path, name, steps, threshold, kw):
    """The gate of `recall-lab check` (recall_lab.testing.learning_gate: SMALL, hidden 32,
    batch 32, lr 3e-3, warm-up 100, k <= 8), at each family's measured budget."""
    row = learning_gate({"name": name, **kw}, tmp_path / "run", steps=steps, threshold=threshold)
    assert row.passed, f"{name}: {row.value} < {threshold} within {steps} steps"


@pytest.mark.slow
def test_round_one_init_stays_on_the_plateau(tmp_path):
    # measured: round one's init sat at 0.47 from step 250 to 3000 on this task (batch 64); with
    # this 300-step budget it ends at test 0.460, and today's init at 0.999 (2026-11-26)
    acc = _test_acc(tmp_path, "transformer", MQAR_4_8, 300, d_model=64, batch=64,
                    **ROUND_ONE_INIT)
    assert acc < 0.7
