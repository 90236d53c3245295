"""The `attamba` pattern against brute-force masks written from paper 003 Eq. 5 and Fig. 5."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.attention import dilated_indices, make_pattern, sparse_attention
from recall_lab.attention.attamba import (
    attamba_indices,
    chunk_ends,
    chunk_starts,
    cyclic_offset,
    indices_from_ends,
    random_chunk_ends,
)
from recall_lab.generators.errors import RecallLabError


def to_mask(idx: torch.Tensor, length: int) -> torch.Tensor:
    """[L, L] bool from int32 [1, 1, L, n]; asserts no duplicate key in a row."""
    rows = idx.reshape(length, -1).long()
    cnt = torch.zeros(length, length + 1, dtype=torch.int64)
    cnt.scatter_add_(1, torch.where(rows >= 0, rows, length), torch.ones_like(rows))
    assert int(cnt[:, :length].max()) <= 1, "duplicate key in a row"
    return cnt[:, :length].bool()


def eq5_mask(length: int, P: int, o: int) -> torch.Tensor:
    """Eq. 5 with the boundaries shifted by o: same chunk and j <= i, or j <= i a chunk end."""
    m = torch.zeros(length, length, dtype=torch.bool)
    for i in range(length):
        for j in range(i + 1):
            same = (j + o) // P == (i + o) // P
            end = (j + o) % P == P - 1
            m[i, j] = same or end
    return m


def fig5_mask(length: int, P: int, o: int, lead: int) -> torch.Tensor:
    """Fig. 5: the last `lead` tokens (incl. self) and every chunk end j <= i."""
    m = torch.zeros(length, length, dtype=torch.bool)
    for i in range(length):
        for j in range(i + 1):
            m[i, j] = i - j < lead or (j + o) % P == P - 1
    return m


@given(length=st.integers(1, 40), P=st.integers(1, 9), data=st.data())
def test_eq5_own_chunk_with_offset(length, P, data):
    o = data.draw(st.integers(0, P - 1))
    idx = attamba_indices(length, P, "chunk", offset=o)
    assert idx.dtype == torch.int32
    assert torch.equal(to_mask(idx, length), eq5_mask(length, P, o))


@given(length=st.integers(1, 40), P=st.integers(1, 9), lead=st.integers(0, 12), data=st.data())
def test_fig5_leading_tokens_with_offset(length, P, lead, data):
    o = data.draw(st.integers(0, P - 1))
    idx = attamba_indices(length, P, lead, offset=o)
    assert torch.equal(to_mask(idx, length), fig5_mask(length, P, o, lead))
    # slot count: ceil(L/P) ends + the window (the paper's L/P + l KV slots)
    assert idx.shape[-1] <= -(-length // P) + lead


@given(length=st.integers(1, 60), P=st.integers(1, 9))
def test_offset_zero_ends_are_the_dilated_pattern(length, P):
    ends = attamba_indices(length, P, 0)
    dil = dilated_indices(length, -(-length // P), P)
    assert torch.equal(to_mask(ends, length), to_mask(dil, length))


@pytest.mark.parametrize("lead", [0, 3])
def test_p1_equals_full_causal_attention(lead):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 17, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    idx, _ = make_pattern("attamba", 1, leading=lead)(q, k)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(sparse_attention(q, k, v, idx), ref)


@pytest.mark.parametrize("chunking", ["uniform", "cyclic", "random"])
@pytest.mark.parametrize("lead", [2, "chunk"])
def test_rows_do_not_depend_on_length(chunking, lead):
    """Query i's keys are the same at L = 30 and L = 300 (nothing is tied to L or padding)."""
    pat = make_pattern("attamba", 4, leading=lead, chunking=chunking, layer=1, n_layers=2).eval()
    q = torch.zeros(1, 1, 300, 4)
    short = to_mask(pat(q[..., :30, :], q[..., :30, :])[0], 30)
    long = to_mask(pat(q, q)[0], 300)
    assert torch.equal(short, long[:30, :30])


def test_random_ends_prefix_and_sizes():
    gen = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    a = random_chunk_ends(1000, 6, gen())
    b = random_chunk_ends(5000, 6, gen())
    assert torch.equal(a, b[:1000])
    sizes = torch.diff(torch.nonzero(b).flatten(), prepend=torch.tensor([-1]))
    assert int(sizes.min()) >= 1 and int(sizes.max()) <= 2 * 6 - 1
    assert abs(float(sizes.float().mean()) - 6) < 0.5  # mean P (~800 sizes; sd of mean ~0.1)


def test_random_chunking_is_fresh_in_training_and_fixed_in_eval():
    pat = make_pattern("attamba", 4, chunking="random", seed=5)
    pat.train()
    torch.manual_seed(0)
    a = pat.ends(200)
    torch.manual_seed(1)
    b = pat.ends(200)
    torch.manual_seed(0)
    assert torch.equal(pat.ends(200), a) and not torch.equal(a, b)
    pat.eval()
    assert torch.equal(pat.ends(200), pat.ends(200))
    other = make_pattern("attamba", 4, chunking="random", seed=5, layer=1, n_layers=2).eval()
    assert not torch.equal(pat.ends(200), other.ends(200))  # per-layer boundaries


@pytest.mark.parametrize("P,n_layers", [(8, 2), (8, 3), (4, 8), (1, 2)])
def test_cyclic_layer_ends(P, n_layers):
    for layer in range(n_layers):
        o = min(P - 1, layer * (P // n_layers))  # App. A.1.1 release rule, written out
        assert cyclic_offset(P, layer, n_layers) == o
        pat = make_pattern("attamba", P, chunking="cyclic", layer=layer, n_layers=n_layers)
        ends = pat.ends(50)
        assert torch.equal(ends, torch.tensor([(e + o) % P == P - 1 for e in range(50)]))


def test_eval_options_apply_in_eval_only():
    pat = make_pattern("attamba", 4, eval_chunk=8, eval_chunking="cyclic", layer=1, n_layers=2)
    assert torch.equal(pat.train().ends(32), chunk_ends(32, 4))
    assert torch.equal(pat.eval().ends(32), chunk_ends(32, 8, offset=4))


def test_chunk_starts_follow_the_ends():
    ends = torch.tensor([False, True, False, False, True, False])
    assert chunk_starts(ends).tolist() == [True, False, True, False, False, True]
    # random ends with the own-chunk window: the window never crosses a start
    e = random_chunk_ends(40, 3, torch.Generator().manual_seed(1))
    m = to_mask(indices_from_ends(e, "chunk"), 40)
    seg = chunk_starts(e).cumsum(0)
    for i in range(40):
        for j in range(i + 1):
            assert bool(m[i, j]) == bool(e[j] or seg[j] == seg[i])


def test_bad_options_raise_one_clear_error():
    for kw in ({"leading": -1}, {"leading": "all"}, {"chunking": "fattn"}, {"offset": 4},
               {"layer": 2, "n_layers": 2}, {"eval_chunk": 0}, {"sink": True}):
        with pytest.raises(RecallLabError):
            make_pattern("attamba", 4, **kw)
