"""A sliding window of n keys decodes on the n - 1 keys before the current token (the current
one arrives with the input, as a short convolution keeps kernel - 1 columns): at every step the
keys it reads are exactly SW(n)'s row of `sliding_window_indices`, with the inputs' k and v, and
it holds n - 1 slots, never n."""

from __future__ import annotations

import pytest
import torch

from recall_lab.attention import make_pattern
from recall_lab.attention.decode import make_decoder
from recall_lab.attention.fixed import sliding_window_indices
from recall_lab.mixers.state import cache_parts


@pytest.mark.parametrize("n", [1, 2, 5])
def test_window_decoder_reads_the_window_from_n_minus_1_slots(n):
    b, h, d, dv, length = 2, 3, 4, 6, 13
    gen = torch.Generator().manual_seed(n)
    q, k = (torch.randn(length, b, h, d, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(length, b, h, dv, generator=gen, dtype=torch.float64)
    rows = sliding_window_indices(length, n)[0, 0]
    dec = make_decoder(make_pattern("sw", n))
    for t in range(length):
        keys = dec.step(q[t], k[t], v[t])
        want = sorted(int(j) for j in rows[t] if j >= 0)
        pos = keys.pos.expand(b, h, -1)
        for bi in range(b):
            for hi in range(h):
                got = pos[bi, hi]
                assert sorted(int(j) for j in got if j >= 0) == want
                for slot, j in enumerate(got.tolist()):
                    if j >= 0:
                        assert torch.equal(keys.k[bi, hi, slot], k[j, bi, hi])
                        assert torch.equal(keys.v[bi, hi, slot], v[j, bi, hi])
    assert cache_parts(dec)["recurrent"].numbers == b * h * (n - 1) * (d + dv)
