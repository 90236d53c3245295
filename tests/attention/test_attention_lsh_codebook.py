"""App. A: sign-bit binning (Eq. 7) equals argmax binning over the 2^h signed prototypes."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.attention import causal_center, lsh_bins, sample_planes


def codebook(planes: torch.Tensor) -> torch.Tensor:
    """Columns B_c = sum_j b_j H_j, b_j = +1 iff bit 2^(h-j) of c is set (Eq. 21), c = 0..2^h-1."""
    h = planes.shape[-1]
    c = torch.arange(2**h)[:, None]
    bits = (c >> torch.arange(h - 1, -1, -1)[None, :]) & 1  # [2^h, h], plane 1 = MSB
    signs = (2 * bits - 1).to(planes.dtype)
    return planes @ signs.T  # [d, 2^h]


@given(st.integers(1, 7), st.integers(1, 9), st.integers(1, 40), st.integers(0, 10**6))
def test_sign_bit_bins_equal_argmax_over_signed_codebook(h, d, length, seed):
    gen = torch.Generator().manual_seed(seed)
    x = causal_center(torch.randn(1, 1, length, d, generator=gen, dtype=torch.float64))
    planes = sample_planes(d, h, generator=gen).double()[0]
    sign = lsh_bins(x, planes, "sign")
    proj = x @ planes
    # Eq. 23 needs every projection nonzero (the first centred vector is exactly 0): skip those.
    ok = (proj != 0).all(-1)
    argmax = (x @ codebook(planes)).argmax(-1)
    assert torch.equal(sign[ok], argmax[ok])
    assert torch.equal(lsh_bins(x, codebook(planes), "argmax")[ok], sign[ok])
