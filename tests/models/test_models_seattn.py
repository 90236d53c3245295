"""SE-Attn models (seed 001): the hybrid branch `mamba2+seattn` and the layer hybrid
`mamba2-attn[-sw|-se]`; limits that tie them to full attention; config errors."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from generators.errors import RecallLabError
from recall_lab.models import SEATTN_MODELS, build_model, model_config

VOCAB = 23


def _logits(name: str, ids: torch.Tensor, **over) -> torch.Tensor:
    torch.manual_seed(0)
    model = build_model(name, VOCAB, d_model=16, d_state=8, n_heads=2, side_scale_init=1.0,
                        **over).eval()
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize("base, full", [("mamba2+seattn", "mamba2+full"),
                                        ("mamba+seattn", "mamba+full"),
                                        ("mamba2-attn-se", "mamba2-attn")])
def test_se_attn_retrieving_every_block_equals_full_attention(base, full):
    # S | M and top-k >= number of blocks: every earlier token is listed (MECHANISMS §3).
    ids = torch.randint(3, VOCAB, (2, 48), generator=torch.Generator().manual_seed(0))
    se = {"chunk": 8, "block": 4, "topk": 48}
    torch.testing.assert_close(_logits(base, ids, k=64, seattn=se), _logits(full, ids, k=64))
    # ...and a real budget does change the output (the test can fail).
    small = _logits(base, ids, k=64, seattn={"chunk": 8, "block": 4, "topk": 1})
    assert (small - _logits(full, ids, k=64)).abs().max() > 1e-4


def test_sw_layer_with_a_window_covering_the_sequence_equals_full():
    ids = torch.randint(3, VOCAB, (2, 30), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(_logits("mamba2-attn-sw", ids, k=30), _logits("mamba2-attn", ids))


def test_rows_and_typed_options_reach_the_patterns():
    m = build_model("mamba2+seattn", VOCAB, seattn={"chunk": 12, "block": 3, "topk": 2})
    pat = m.blocks[0].branch.pattern
    assert (pat.chunk, pat.block, pat.topk, pat.summary) == (12, 3, 2, "key")
    m = build_model("mamba2-attn-se", VOCAB, n_layers=3, attn_layers={"attention": "se",
                                                                        "after": [0, 2]})
    kinds = [type(b).__name__ for b in m.blocks]
    assert kinds == ["SSMBlock", "AttentionBlock", "SSMBlock", "SSMBlock", "AttentionBlock"]
    assert m.blocks[1].attn.pattern.summary == "value"  # the paper's, v has q's width per head
    assert build_model("mamba2+seattn-random", VOCAB).blocks[0].branch.pattern.retrieval == "random"
    assert set(SEATTN_MODELS) >= {"mamba+seattn", "mamba2+seattn-nomem", "mamba2-attn-se"}


def test_bad_configs_raise_one_clear_error():
    with pytest.raises(ValidationError, match="attn_layers is for arch mamba2-attn"):
        model_config("mamba2", VOCAB, attn_layers={"attention": "se"})
    with pytest.raises(ValidationError, match="lists layer 2"):
        model_config("mamba2-attn", VOCAB, attn_layers={"after": [2]})
    with pytest.raises(ValidationError):
        model_config("mamba2+seattn", VOCAB, seattn={"scoring": "future"})
    with pytest.raises(RecallLabError):
        model_config("mamba2-attn-xx", VOCAB)
