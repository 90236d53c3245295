"""zoology's block (`[model] block = "zoology"`, issue 66) against a stand-in written here from
zoology's model code (zoology/model.py `TransformerBlock` with `state_mixer` identity, its
`LMBackbone` and tied `LanguageModel`; zoology/mixers/attention.py `MHA`): the stand-in keeps
zoology's data flow (each block returns its norm2 output and the residual, the next one adds
them), so the test ties the lab's `x += attn(norm1(x)); x += norm2(x)` to it. The check against
zoology's own code is scripts/zoology_fidelity.py (docs/results/zoology-fidelity/)."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError
from torch import nn

from recall_lab.config import RunConfig, TrainConfig
from recall_lab.models import build_model, model_config

ZOOLOGY = {"init": "zoology", "mlp_mult": 0, "positions": "learned", "norm": "layer",
           "n_heads": 1}


class _StandInMHA(nn.Module):
    """zoology's MHA: Wqkv (bias) -> (three h d) -> softmax(q k^T / sqrt(d) + causal -1e4)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.Wqkv = nn.Linear(d, 3 * d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.Wqkv(x).view(b, n, 3, self.heads, self.hd).unbind(2)
        s = torch.einsum("bthd,bshd->bhts", q, k / math.sqrt(self.hd))
        s = s + torch.triu(torch.full((n, n), -10000.0, dtype=s.dtype), 1)
        o = torch.einsum("bhts,bshd->bthd", torch.softmax(s, -1), v)
        return self.out_proj(o.reshape(b, n, -1))


class _StandInBlock(nn.Module):
    def __init__(self, d: int, heads: int, norm2: bool) -> None:
        super().__init__()
        self.norm1, self.sequence_mixer = nn.LayerNorm(d), _StandInMHA(d, heads)
        self.norm2 = nn.LayerNorm(d) if norm2 else None

    def forward(self, hidden, residual):
        residual = hidden if residual is None else hidden + residual
        hidden = self.sequence_mixer(self.norm1(residual))
        residual = hidden + residual
        if self.norm2 is None:  # the lab's block before issue 66: the identity is nothing
            return torch.zeros_like(residual), residual
        return self.norm2(residual), residual  # state_mixer identity of norm2's output


class _StandInLM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, length: int, heads: int = 1,
                 norm2: bool = True) -> None:
        super().__init__()
        self.word, self.pos = nn.Embedding(vocab, d), nn.Embedding(length, d)
        self.layers = nn.ModuleList(_StandInBlock(d, heads, norm2) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden, residual = self.word(ids) + self.pos.weight[: ids.shape[1]], None
        for layer in self.layers:
            hidden, residual = layer(hidden, residual)
        return self.ln_f(hidden + residual) @ self.word.weight.t()  # tied head


def _copy(lab: nn.Module, ref: _StandInLM) -> None:
    """The stand-in's weights from the lab's model, by name."""
    src = dict(lab.named_parameters())
    with torch.no_grad():
        ref.word.weight.copy_(src["embed.weight"])
        ref.pos.weight.copy_(src["pos.weight"][: ref.pos.num_embeddings])
        ref.ln_f.weight.copy_(src["norm.weight"])
        ref.ln_f.bias.copy_(src["norm.bias"])
        for i, layer in enumerate(ref.layers):
            pairs = [(layer.norm1, "norm1"), (layer.sequence_mixer.Wqkv, "attn.qkv"),
                     (layer.sequence_mixer.out_proj, "attn.out")]
            pairs += [(layer.norm2, "norm2")] if layer.norm2 is not None else []
            for mod, name in pairs:
                for p in ("weight", "bias"):
                    getattr(mod, p).copy_(src[f"blocks.{i}.{name}.{p}"])


def _lab(**kw):
    torch.manual_seed(0)
    return build_model("transformer", 64, d_model=16, max_len=12, **{**ZOOLOGY, **kw}).double()


def test_zoology_block_equals_the_stand_in_in_float64_with_biases_trained_away_from_zero():
    lab = _lab(block="zoology")
    with torch.no_grad():  # biases start at zero (zoology's init): make them count
        for name, p in lab.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
    ref = _StandInLM(64, 16, 2, 12).double()
    _copy(lab, ref)
    x = torch.randint(0, 64, (3, 12))
    lab.eval()
    torch.testing.assert_close(lab(x).logits, ref(x), rtol=0, atol=1e-12)
    # the lab's block without the norm2 residual is a different model
    plain = _lab(block="zoology", norm2_residual=False).eval()
    plain.load_state_dict({k: v for k, v in lab.state_dict().items() if "norm2" not in k})
    assert (plain(x).logits - lab(x).logits).abs().max() > 1e-3


def test_the_lab_block_is_the_stand_in_without_norm2():
    lab = _lab(attn_bias=True)
    ref = _StandInLM(64, 16, 2, 12, norm2=False).double()
    _copy(lab, ref)
    x = torch.randint(0, 64, (2, 12))
    torch.testing.assert_close(lab.eval()(x).logits, ref(x), rtol=0, atol=1e-12)


def test_parameter_count_at_figure_2s_first_cell_equals_zoologys():
    # V 8,192, d_model 64, 2 layers, positions for 64 tokens: zoology's LanguageModel has
    # 562,304 (counted from its code: embeddings 528,384, per layer 2 LayerNorms of 128 and
    # MHA 12,480 + 4,160 with biases, ln_f 128); without the biases 561,792, without norm2 too
    # 561,536
    kw = {**ZOOLOGY, "d_model": 64, "max_len": 64}
    count = [build_model("transformer", 8192, **kw, **b).n_params() for b in (
        {"block": "zoology"}, {"block": "zoology", "attn_bias": False}, {})]
    assert count == [562_304, 561_792, 561_536]


def test_block_fills_its_parts_and_each_can_be_turned_off():
    m = model_config("transformer", 64, mlp_mult=0, block="zoology")
    assert (m.norm, m.norm2_residual, m.attn_bias) == ("layer", True, True)
    m = model_config("transformer", 64, mlp_mult=0, block="zoology", attn_bias=False,
                     norm2_residual=False)
    assert (m.norm2_residual, m.attn_bias) == (False, False)
    spec = {"generator": "zoology-mqar", "kwargs": {"vocab_size": 64, "input_seq_len": 16,
                                                     "num_kv_pairs": 2}}
    plain = RunConfig(model=model_config("transformer", 64, mlp_mult=0), train=TrainConfig(),
                      task=spec).to_json()["model"]
    assert not {"block", "norm2_residual", "attn_bias"} & set(plain)  # out of config.json


@pytest.mark.parametrize("name, kw, needle", [
    ("transformer", {"block": "zoology"}, "needs mlp_mult 0"),
    ("mamba", {"block": "zoology"}, "block 'zoology' is an option of the transformer"),
    ("transformer+sw", {"attn_bias": True, "mlp_mult": 0},
     "attn_bias is an option of the transformer"),
])
def test_the_block_where_it_does_not_fit_is_one_clear_error(name, kw, needle):
    with pytest.raises(ValidationError, match=needle):
        model_config(name, 64, **kw)


def test_zoology_block_decodes_as_its_parallel_forward():
    m = _lab(block="zoology").eval()
    x = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        par = m(x).logits
        cache = m.allocate_cache(2, 12)
        stepped = torch.stack([m.step(x[:, t], cache) for t in range(12)], 1)
    torch.testing.assert_close(stepped, par, rtol=1e-9, atol=1e-9)


def test_float64_logits_keep_float64_in_the_loss():
    """The fidelity check against zoology's code trains in float64: the loss must not round
    through float32 there (it did: gradients differed by 3e-8 relative); float32 is unchanged."""
    import torch.nn.functional as F

    from recall_lab.evaluate import batch_metrics

    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7, dtype=torch.float64) * 10
    y = torch.tensor([[1, -100, 3, 4, -100], [0, 6, -100, 2, 5]])
    want = F.cross_entropy(logits.reshape(-1, 7), y.reshape(-1), ignore_index=-100,
                           reduction="sum")
    got = batch_metrics(logits, y)["ce_sum"]
    assert got.dtype == torch.float64 and abs(got.item() - want.item()) < 1e-12
    assert batch_metrics(logits.float(), y)["ce_sum"].dtype == torch.float32
