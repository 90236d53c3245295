"""`log-linear-mamba2`: the chunked form = the Fenwick loop = decode step (float64, values and
gradients), both = FLA's `naive_log_linear_attn` (an O(T^2) masked-matrix form by the authors'
group: outputs only, it has no state), strong decays stay finite, the Fenwick levels partition
the prefix, the state grows by one state per head per doubling of L and equals the decode cache,
bad options fail clearly."""

from __future__ import annotations

import pytest
import torch

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.log_linear import (
    LogLinearMamba2,
    levels_for,
    log_linear_chunked,
    log_linear_recurrent,
)
from recall_lab.mixers.state import cache_growth
from tests.mixers.zoo_forms import fla_naive, forms_agree, recurrent


@pytest.mark.parametrize("options", [
    {"chunk_size": 8, "headdim": 8},  # 5 chunks (37 tokens): chunk-level levels 1..3
    {"chunk_size": 4, "headdim": 16, "conv_size": 0, "length": 70},  # 18 chunks, no conv
])
def test_chunked_recurrent_and_step_agree(options):
    forms_agree(LogLinearMamba2, "chunk", **options)


def _inputs(length=45, b=2, h=3, n=4, p=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, length, n, generator=gen) for _ in range(2))
    v = torch.randn(b, h, length, p, generator=gen)
    g = -torch.rand(b, h, length, generator=gen)  # log decay in (-1, 0)
    lam = torch.rand(b, h, length, levels_for(length) + 2, generator=gen)
    return q, k, v, g, lam


def test_loop_and_chunks_match_fla_naive_log_linear_attn():
    naive = fla_naive("log_linear_attn")
    q, k, v, g, lam = _inputs()
    # FLA's layout [B, T, H, .]; its level_scales [B, T, H, levels], scale 1 as the layer's
    ref = naive.naive_log_linear_attn(*(t.transpose(1, 2) for t in (q, k, v, g, lam)),
                                      scale=1.0)
    for o in (log_linear_recurrent(q, k, v, g, lam), log_linear_chunked(q, k, v, g, lam, 8),
              log_linear_chunked(q, k, v, g, lam, 64)):
        torch.testing.assert_close(o.transpose(1, 2), ref, rtol=1e-4, atol=1e-4)


def test_levels_partition_the_prefix_as_the_fenwick_tree():
    """With unit q . k, no decay and lambda one-hot on level l, o_t counts the tokens query t
    reads at level l: 1 at level 0, 2^(l-1) at level l where bit l - 1 of t is set, else 0."""
    length = 40
    ones = torch.ones(1, 1, length, 1, dtype=torch.float64)
    for level in range(levels_for(length)):
        lam = torch.zeros(1, 1, length, levels_for(length), dtype=torch.float64)
        lam[..., level] = 1.0
        want = torch.tensor([1.0 if level == 0 else float(2 ** (level - 1)) * (t >> (level - 1) & 1)
                             for t in range(length)], dtype=torch.float64)
        for o in (log_linear_recurrent(ones, ones, ones, ones[..., 0] * 0, lam),
                  log_linear_chunked(ones, ones, ones, ones[..., 0] * 0, lam, 8)):
            torch.testing.assert_close(o[0, 0, :, 0], want, rtol=0, atol=0)


def test_strong_decay_stays_finite_and_equals_the_loop():
    q, k, v, g, lam = (t.double() for t in _inputs(length=70))
    g = g * 60  # exp(-60) per token over 64-token chunks
    o = log_linear_chunked(q, k, v, g, lam, 64)
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o, log_linear_recurrent(q, k, v, g, lam), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("length", [1, 2, 34, 64, 130, 1024])
def test_state_size_counts_the_decode_cache_and_grows_as_log_l(length):
    """ceil(log2 L) + 1 states of d_state x headdim per head: 4 heads x 8 x 16 here."""
    m = LogLinearMamba2(32, d_state=8, expand=2, headdim=16)
    levels = 1 if length == 1 else (length - 1).bit_length() + 1
    assert m.state_size(sequence_length=length) == recurrent(m.allocate_cache(1, length)) \
        == 4 * 8 * 16 * levels
    assert cache_growth(m) == "log L"


def test_decoding_past_the_allocated_levels_adds_levels():
    torch.manual_seed(0)
    m = LogLinearMamba2(16, headdim=8, d_state=4).double().eval()
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    cache = m.allocate_cache(1, 2)  # 2 levels; 9 tokens read 5
    with torch.no_grad():
        y = torch.stack([m.step(x[:, t], cache) for t in range(9)], dim=1)
        torch.testing.assert_close(y, m(x), rtol=1e-9, atol=1e-9)
    assert cache.states.shape[2] == levels_for(9)


@pytest.mark.parametrize("options,named", [
    ({"chunk_size": 12}, "chunk_size"), ({"max_levels": 0}, "max_levels"),
    ({"headdim": 12}, "headdim"), ({"impl": "ssd"}, "impl"), ({"d_state": -1}, "d_state"),
])
def test_bad_options_are_one_clear_error_naming_the_option(options, named):
    with pytest.raises(RecallLabError, match=named):
        LogLinearMamba2(16, **options)


def test_a_sequence_longer_than_the_levels_is_refused():
    m = LogLinearMamba2(16, headdim=8, d_state=4, max_levels=3)  # up to 4 tokens
    m(torch.randn(1, 4, 16))
    with pytest.raises(RecallLabError, match="max_levels"):
        m(torch.randn(1, 5, 16))


def test_checks_state_row_counts_at_its_length_and_says_log_l():
    from recall_lab.testing import MixerSubject, check_state

    row = check_state(MixerSubject(lambda: LogLinearMamba2(16, headdim=8, d_state=4)), length=64)
    # 4 heads of 8 x 4 at 7 levels (64 tokens)
    assert row.passed is True and row.value.startswith("declared 896 = measured 896")
    assert "grows as log L" in row.detail
