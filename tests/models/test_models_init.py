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
