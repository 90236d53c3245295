"""`hyena`: FFT convolution = direct loop = decode step (float64, values and gradients), the
filter depends on the position only (so lengthening a batch moves no earlier output), decoding
past the cache fails clearly. FLA has no Hyena op: the direct convolution loop is the reference."""

from __future__ import annotations

import pytest
import torch

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.hyena import Hyena, causal_conv_direct, causal_conv_fft
from tests.mixers.zoo_forms import forms_agree, recurrent


@pytest.mark.parametrize("options", [{"l_max": 64}, {"l_max": 16, "filter_order": 8}])
def test_fft_direct_and_step_agree(options):
    forms_agree(Hyena, "fft", **options)


def test_fft_convolution_is_the_causal_sum():
    u = torch.randn(2, 3, 17, dtype=torch.float64)
    h = torch.randn(3, 17, dtype=torch.float64)
    want = torch.stack([sum(h[:, j] * u[..., t - j] for j in range(t + 1)) for t in range(17)], -1)
    torch.testing.assert_close(causal_conv_fft(u, h), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(causal_conv_direct(u, h), want, rtol=1e-12, atol=1e-12)


def test_filter_is_a_function_of_position_only():
    """h_t at positions 0..9 is the same whether the filter is made for 10 or 40 positions (so a
    longer batch moves no earlier output), up to the matrix products' rounding."""
    m = Hyena(8, l_max=32).double()
    torch.testing.assert_close(m.filter(40)[:, :10], m.filter(10), rtol=1e-13, atol=1e-15)
    x = torch.randn(2, 40, 8, dtype=torch.float64)
    torch.testing.assert_close(m(x)[:, :10], m(x[:, :10]), rtol=1e-12, atol=1e-13)


def test_state_grows_with_length_and_counts_the_cache():
    m = Hyena(8)
    assert m.state_size(sequence_length=100) - m.state_size(sequence_length=50) == 8 * 50
    assert m.state_size(sequence_length=30) == recurrent(m.allocate_cache(1, 30))


def test_decoding_past_the_cache_is_one_clear_error():
    m = Hyena(8)
    cache = m.allocate_cache(1, 2)
    m.step(torch.randn(1, 8), cache)
    m.step(torch.randn(1, 8), cache)
    with pytest.raises(RecallLabError, match="max_len"):
        m.step(torch.randn(1, 8), cache)


@pytest.mark.parametrize("options", [{"emb_dim": 4}, {"l_max": 0}, {"impl": "direct"}])
def test_bad_options_are_one_clear_error(options):
    with pytest.raises(RecallLabError):
        Hyena(8, **options)


def test_state_dict_holds_no_shared_tensor():
    """The shared sine frequency is one parameter, so a checkpoint (safetensors) can hold it."""
    sd = Hyena(8).state_dict()
    ptrs = [t.data_ptr() for t in sd.values()]
    assert len(ptrs) == len(set(ptrs))
    assert [k for k in sd if k.endswith("freq")] == ["filter.act.freq"]
