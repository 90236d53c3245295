"""Learning check: a model that decimates during training (L_base below the context, seed 002
App. A.2) still learns a passkey task within its training length.

Task: one key-value pair among 14 filler tokens (context 17 tokens before SEP), 8 values. The last
layer keeps only 4 of the 17 context tokens, so an answer is possible only if the layer learns to
give the value token a large Delta, or carry the value to a kept token in layer 0; chance is 1/8.
Measured with the model initialisation of 4d470ba (CPU, 1 thread): validation accuracy 1.0 by step
100 / 150 / 100 for seeds 0 / 1 / 2, test accuracy 1.0 for all three at 300 steps; run for 200
steps, the threshold 0.9 leaves a margin.
"""

import torch

from recall_lab.analysis.runs import load_run
from recall_lab.config import RunConfig, TrainConfig
from recall_lab.evaluate import held_out
from recall_lab.generators import IGNORE, TaskSpec
from recall_lab.models import model_config
from recall_lab.train import train_run


def test_mamba_deci_learns_passkey_while_decimating(tmp_path):
    spec = TaskSpec(levels=((1, 1),), values=8, pools=(4,), filler=(14, 14), filler_ids=8)
    m = model_config("mamba+deci", spec.vocab().size, d_model=32, d_state=8,
                     decimation={"L_base": 4, "min_len": 1})
    t = TrainConfig(steps=200, batch_size=32, lr=1e-2, warmup=20, eval_every=50,
                    eval_samples=64, test_samples=256, device="cpu", seed=0)
    summary = train_run(RunConfig(model=m, train=t, task=spec), tmp_path / "r")
    assert summary["test"]["acc"] >= 0.9

    model, _ = load_run(tmp_path / "r", "best")
    x, y = held_out(spec, 256, t.data_seed, "test")
    with torch.no_grad():
        out = model(torch.from_numpy(x))
    sep = 1 + 2 + 14
    assert (out.kept[:, :sep].sum(1) == 4).all()  # it did decimate: 4 of 17 context tokens
    assert out.kept[torch.from_numpy(y != IGNORE)].all()  # every target has its logits
    # Measured, not asserted: the kept 4 often miss the value token itself (kept in 43% / 57% /
    # 21% of test samples for seeds 0 / 1 / 2 at 300 steps, at 1.0 accuracy): layer 0 runs on
    # the full sequence, so its outputs at kept positions already carry the value.
