"""LoRA / LoRA+ / HyLoRA / full (seed 001 Sec. 3.4): exact trainable sets (counted by hand from
the model's sizes), merged weights = base + (alpha / r) B A, and peft as an oracle."""

from __future__ import annotations

import copy

import pytest
import torch

from recall_lab.generators.errors import RecallLabError
from recall_lab.models import build_model
from recall_lab.models.adapters import (
    LoRALinear,
    apply_finetune,
    merge_adapters,
    trainable_names,
)

V, D, R, ALPHA = 30, 32, 4, 8.0
D_STATE, D_INNER = 8, 2 * D  # expand 2
CONV = D_INNER + 2 * D_STATE  # Mamba2 convolves x, B, C (ngroups 1)


def model(name: str = "mamba2-attn-se") -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(name, V, d_model=D, d_state=D_STATE, n_heads=2)


def hand_counts(name: str) -> dict:
    """Trainable parameters per adapter, from the architecture's sizes."""
    if name == "mamba2-attn-se":  # Mamba2, attention(qkv, out) + MLP, Mamba2
        lora = R * (D + 3 * D) + R * (D + D)
        norms = 3 * D + 2 * D_INNER + D + D  # block norms, mixer gated norms, attn/mlp, final
        scales = 0
    else:  # mamba2+seattn: two Mamba2 layers, each with a branch qk: d_inner -> 2 * d_state
        lora = 2 * R * (D_INNER + 2 * D_STATE)
        norms = 2 * D + 2 * D_INNER + D
        scales = 2 * D_INNER
    convs = 2 * (CONV * 4 + CONV)
    lora_plus = lora + V * D + norms + scales
    return {"lora": lora, "lora+": lora_plus, "hylora": lora_plus + convs}


@pytest.mark.parametrize("name", ["mamba2-attn-se", "mamba2+seattn"])
@pytest.mark.parametrize("adapter", ["lora", "lora+", "hylora", "full"])
def test_trainable_parameter_counts(name, adapter):
    m = model(name)
    total = sum(p.numel() for p in m.parameters())
    counts = apply_finetune(m, adapter, r=R, alpha=ALPHA)
    want = total if adapter == "full" else hand_counts(name)[adapter]
    assert counts["trainable"] == want
    assert sum(p.numel() for p in m.parameters() if p.requires_grad) == want
    names = trainable_names(m)
    if adapter != "full":
        assert counts["total"] == total + hand_counts(name)["lora"]
        assert not any("in_proj" in n or "out_proj" in n or "A_log" in n or "mlp.mlp" in n
                       for n in names)
        assert any(n.endswith("conv1d.weight") for n in names) == (adapter == "hylora")
        assert any(n.startswith("embed") for n in names) == (adapter != "lora")


def test_frozen_parameters_get_no_gradient_and_adapter_starts_at_base():
    base = model()
    m = copy.deepcopy(base)
    apply_finetune(m, "hylora", r=R, alpha=ALPHA)
    ids = torch.randint(3, V, (2, 24), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(m(ids).logits, base(ids).logits)  # B = 0 at the start
    m(ids).logits.square().mean().backward()
    for n, p in m.named_parameters():
        assert (p.grad is not None) == p.requires_grad, n


def _randomise_adapters(m: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)


def test_merged_model_equals_base_plus_adapters():
    base = model()
    m = copy.deepcopy(base)
    apply_finetune(m, "lora", r=R, alpha=ALPHA)
    _randomise_adapters(m, 1)
    ids = torch.randint(3, V, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        adapted = m(ids).logits
        qkv = m.blocks[1].attn.qkv
        assert isinstance(qkv, LoRALinear)
        want = base.blocks[1].attn.qkv.weight + (ALPHA / R) * qkv.lora_B @ qkv.lora_A
        merged = merge_adapters(m)
        torch.testing.assert_close(merged.blocks[1].attn.qkv.weight, want)
        assert set(merged.state_dict()) == set(base.state_dict())
        torch.testing.assert_close(merged(ids).logits, adapted)
        assert (adapted - base(ids).logits).abs().max() > 1e-4


def test_same_trainable_set_and_outputs_as_peft():
    peft = pytest.importorskip("peft")
    base = model()
    ours = copy.deepcopy(base)
    apply_finetune(ours, "hylora", r=R, alpha=ALPHA)
    cfg = peft.LoraConfig(r=R, lora_alpha=ALPHA, target_modules=["qk", "qkv", "out"],
                          modules_to_save=["conv1d", "norm", "norm1", "embed"])
    theirs = peft.get_peft_model(copy.deepcopy(base), cfg)

    def canon(name: str) -> str:
        name = name.removeprefix("base_model.model.").replace(".modules_to_save.default", "")
        return name.replace(".default.weight", "").replace(".base.", ".")

    assert sorted(canon(n) for n in trainable_names(theirs)) == sorted(
        canon(n) for n in trainable_names(ours))
    _randomise_adapters(ours, 2)
    with torch.no_grad():
        mine = dict(ours.named_parameters())
        for n, p in theirs.named_parameters():
            if p.requires_grad:
                key = next(k for k in mine if canon(k) == canon(n))
                p.copy_(mine[key])
        ids = torch.randint(3, V, (2, 24), generator=torch.Generator().manual_seed(0))
        torch.testing.assert_close(ours(ids).logits, theirs(ids).logits)


def test_bad_adapters_raise():
    with pytest.raises(RecallLabError, match="unknown adapter"):
        apply_finetune(model(), "loraplus")
    with pytest.raises(RecallLabError, match="no attention projections"):
        apply_finetune(model("mamba2"), "hylora")
    with pytest.raises(RecallLabError, match="rank"):
        apply_finetune(model(), "lora", r=0)
