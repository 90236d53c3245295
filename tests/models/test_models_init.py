"""The model's own initialisation and weight-decay rule (models/lm.py, issue 16)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from recall_lab.models import build_model


@pytest.mark.parametrize("name", ["mamba", "mamba2+hax", "transformer", "samba"])
def test_embedding_std_and_residual_scaling(name):
    torch.manual_seed(0)
    m = build_model(name, 64, d_model=32, k=8)
    assert abs(m.embed.weight.std().item() - 1.0) < 0.1
    per_layer = {"transformer": 2, "samba": 4}.get(m.config.arch, 1)  # residual writes / layer
    # the same module built without rescaling has weights larger by exactly sqrt(per * n_layers)
    torch.manual_seed(0)
    plain = build_model(name, 64, d_model=32, k=8, rescale_residual=False)
    ratio = math.sqrt(per_layer * m.config.n_layers)
    outs = [n for n, mod in m.named_modules()
            if isinstance(mod, nn.Linear) and n.rsplit(".", 1)[-1] in ("out_proj", "out", "w2")]
    assert len(outs) == per_layer * m.config.n_layers
    for n in outs:
        a = dict(m.named_parameters())[n + ".weight"]
        b = dict(plain.named_parameters())[n + ".weight"]
        torch.testing.assert_close(a * ratio, b)


def test_linear_biases_zero_but_dt_bias_kept():
    m = build_model("mamba", 40, d_model=16)
    dt = m.blocks[0].mixer.dt_proj.bias
    assert dt.abs().min() > 0  # inverse-softplus of dt in [1e-3, 1e-1]: never zero
    dt_vals = torch.nn.functional.softplus(dt)
    assert dt_vals.min() >= 1e-4 and dt_vals.max() <= 0.1 + 1e-6


@pytest.mark.parametrize("name", ["mamba", "mamba2", "mamba+hax"])
def test_weight_decay_rule(name):
    m = build_model(name, 40, d_model=16)
    decay, no_decay = m.param_groups(0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in m.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in no_decay["params"]}
    assert decayed.isdisjoint(kept) and decayed | kept == set(names.values())
    for n in kept:
        assert not n.endswith(("in_proj.weight", "out_proj.weight", "lm_head.weight"))
    for n in decayed:  # mamba-ssm never decays A, D, dt bias; norms and embedding not decayed
        assert not n.endswith(("A_log", "D", "dt_bias", "bias", "norm.weight", "embed.weight"))
    assert any(n.endswith("A_log") for n in kept)
    assert any(n.endswith("lm_head.weight") for n in decayed)


def test_round_one_run_still_loads(tmp_path):
    """A run written before round two (config without the init fields, weights of a tied-output
    model) is read as the tied model it is, with identical outputs."""
    import json

    from recall_lab import checkpoint as ck
    from recall_lab.analysis.runs import load_run
    from recall_lab.config import RunConfig, TrainConfig
    from recall_lab.generators import TaskSpec
    from recall_lab.models import model_config

    spec = TaskSpec(levels=((2, 2),), values=4)
    old = model_config("mamba", spec.vocab().size, d_model=16, tie_embeddings=True)
    cfg = RunConfig(model=old, train=TrainConfig(steps=1), task=spec).to_json()
    for key in ("tie_embeddings", "embed_std", "rescale_residual"):
        del cfg["model"][key]
    (tmp_path / ck.CONFIG).write_text(json.dumps(cfg))
    torch.manual_seed(0)
    model = build_model(old)
    ck.save_weights(tmp_path / ck.MODEL, model)
    loaded, run_cfg = load_run(tmp_path, "last")  # a round-one run kept only its last weights
    assert run_cfg.model.tie_embeddings and loaded.lm_head is None
    ids = torch.randint(0, spec.vocab().size, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(ids).logits, model.eval()(ids).logits)
