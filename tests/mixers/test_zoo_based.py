"""`based`: each layer kind's chunked form = recurrent loop = decode step (float64, values and
gradients), the layer mix by `layer_idx`, the window's reach, the Taylor layer = FLA's
`naive_parallel_based`, state size = the decode cache."""

from __future__ import annotations

import pytest
import torch

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers._linear import feature_map, rope
from recall_lab.mixers.based import Based, window_attention_chunked, window_attention_recurrent
from tests.mixers.zoo_forms import fla_naive, forms_agree, recurrent


@pytest.mark.parametrize("options", [
    {"layer_idx": 0, "window": 5, "chunk_size": 8, "window_heads": 2},
    {"layer_idx": 0, "window": 16, "chunk_size": 8},  # window wider than a chunk
    {"layer_idx": 0, "window": 1, "chunk_size": 8},  # no past slot: the current key only
    {"layer_idx": 1, "feature_dim": 3, "chunk_size": 8},
    {"layer_idx": 1, "feature_dim": 3, "num_heads": 2},
])
def test_chunked_recurrent_and_step_agree(options):
    forms_agree(Based, "chunk", **options)


def test_layers_alternate_by_index():
    kinds = [Based(16, layer_idx=i).kind for i in range(4)]
    assert kinds == ["sliding", "linear", "sliding", "linear"]
    assert Based(16, layer_idx=1, layers=["linear"]).kind == "linear"


def test_window_attention_equals_masked_softmax_attention():
    """Against a dense L x L softmax with the band mask |t - s| < window, s <= t."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 23, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    window = 6
    t = torch.arange(23)
    band = (t[None, :] <= t[:, None]) & (t[:, None] - t[None, :] < window)
    dense = (q @ k.transpose(-1, -2)).masked_fill(~band, float("-inf")).softmax(-1) @ v
    for o in (window_attention_recurrent(q, k, v, window),
              window_attention_chunked(q, k, v, window, 8)):
        torch.testing.assert_close(o, dense, rtol=1e-12, atol=1e-12)


def test_sliding_layer_forgets_beyond_its_window():
    m = Based(16, layer_idx=0, window=4).double()
    x = torch.randn(1, 12, 16, dtype=torch.float64)
    x2 = x.clone()
    x2[:, 2] += 1.0  # token 2 is in the window of positions 2..5 only
    moved = (m(x2) - m(x)).abs().amax(-1)[0]
    assert (moved[2:6] > 1e-6).all() and (moved[6:] == 0).all() and (moved[:2] == 0).all()


def test_rope_scores_depend_on_offsets_only():
    q, k = torch.randn(2, 1, 1, 3, 8, dtype=torch.float64)
    a = rope(q, start=0) @ rope(k, start=0).transpose(-1, -2)
    b = rope(q, start=7) @ rope(k, start=7).transpose(-1, -2)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_taylor_layer_matches_fla_naive_parallel_based():
    naive = fla_naive("based")
    m = Based(16, layer_idx=1, feature_dim=4)
    x = torch.randn(2, 19, 16)
    q, k, v = (t.view(2, 19, 1, -1).transpose(1, 2) for t in m._split(m.qkv(x)))
    ref = naive.naive_parallel_based(q, k, v, use_norm=True)  # scale d'^-1/2, eps 1e-6
    torch.testing.assert_close(m(x), m.out_proj(ref.transpose(1, 2).reshape(2, 19, 16)),
                               rtol=1e-4, atol=1e-5)
    assert feature_map("taylor", q).shape[-1] == 1 + 4 + 4 * 5 // 2  # distinct products


@pytest.mark.parametrize("layer_idx", [0, 1])
def test_state_size_counts_the_decode_cache(layer_idx):
    m = Based(16, layer_idx=layer_idx, feature_dim=4, window=8)
    assert m.state_size(sequence_length=50) == recurrent(m.allocate_cache(1, 50))


@pytest.mark.parametrize("options", [{"layers": "linear"}, {"layers": ["conv"]}, {"layers": []},
                                     {"window": 0}, {"window_heads": 3}, {"impl": "flash"}])
def test_bad_options_are_one_clear_error(options):
    with pytest.raises(RecallLabError):
        Based(16, **options)
