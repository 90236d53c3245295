"""Prop. 3.2 / C.1: the explicit overwrite-SSM + sign-bit-LSH model, and ways it must fail."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.proofs import construction as con
from recall_lab.proofs.construction import (
    ConstructionConfig,
    codebook,
    fit_exponent,
    forward,
    level_sizes,
    overwrite_scan,
    overwrite_scan_ref,
    sample,
    solve,
)


@given(st.integers(1, 60), st.integers(1, 6), st.floats(0.0, 0.95), st.integers(0, 2**31 - 1))
def test_vectorised_scan_matches_loop(length, width, p_zero, seed):
    gen = torch.Generator().manual_seed(seed)
    e = torch.randn(length, width, generator=gen)
    e[torch.rand(length, width, generator=gen) < p_zero] = 0.0
    assert torch.equal(overwrite_scan(e), overwrite_scan_ref(e))


def test_scan_carries_across_chunks(monkeypatch):
    monkeypatch.setattr(con, "_ROWS", 7)
    e = torch.zeros(50, 3)
    e[3, 0], e[20, 1], e[49, 2] = 1.0, -2.0, 3.0
    assert torch.equal(overwrite_scan(e), overwrite_scan_ref(e))


def test_codebook_unit_norm_no_zero_entry_distinct():
    _, _, vocab = sample((3, 5, 7), 16, 0)
    table, layout = codebook(vocab)
    for level, sl in enumerate(layout.slices):
        lo, hi = vocab.level_range(level)
        block = table[lo:hi, sl]
        assert torch.allclose(block.norm(dim=1), torch.ones(hi - lo))
        assert (block != 0).all()
        assert torch.unique(block, dim=0).shape[0] == hi - lo
        assert layout.slices[level].stop - layout.slices[level].start == math.ceil(
            math.log2(vocab.pools[level])) + 2
    vlo, vhi = vocab.value_range
    assert torch.unique(table[vlo:vhi, layout.value], dim=0).shape[0] == 16
    assert (table[vlo:vhi, layout.is_v] == 1).all()


@pytest.mark.parametrize("sizes", [(64,), (8, 12), (4, 5, 6), (3, 3, 4, 5), (20, 50)])
def test_solves_every_entry(sizes):
    res = solve(sizes)
    assert res.queries == math.prod(sizes)
    assert res.accuracy == 1.0
    assert res.match_in_window == 1.0 and 0 <= res.worst_match_slot < res.window


@pytest.mark.parametrize(
    "cfg",
    [
        ConstructionConfig(query_layout="key"),  # query marks itself a non-value: wrong keys win
        ConstructionConfig(n_planes=1),  # 2 bins: the window fills with unrelated keys
        ConstructionConfig(pattern="sw"),  # context-independent window of the same k
        ConstructionConfig(window=1, hash_center=False, plane_factor=0.5),
    ],
)
def test_corrupted_constructions_fall_short(cfg):
    assert solve((20, 50), config=cfg).accuracy < 0.9


@given(st.integers(0, 2**31 - 1), st.sampled_from([(6,), (3, 4), (2, 2, 3)]), st.data())
def test_output_is_causal(seed, sizes, data):
    """With a fixed plane count, changing tokens after position i leaves outputs <= i alone."""
    inputs, _, vocab = sample(sizes, 8, seed)
    cut = data.draw(st.integers(0, len(inputs) - 2))
    other = inputs.copy()
    rng = np.random.default_rng(seed)
    other[cut + 1:] = rng.integers(0, vocab.size, size=len(inputs) - cut - 1)
    cfg = ConstructionConfig(n_planes=12, seed=seed % 7)
    a, b = forward(inputs, vocab, cfg), forward(other, vocab, cfg)
    assert torch.equal(a.out[: cut + 1], b.out[: cut + 1])
    assert torch.equal(a.idx[: cut + 1], b.idx[: cut + 1])
    assert (a.idx.max(dim=1).values <= torch.arange(len(inputs))).all()


@given(st.integers(1, 10**6), st.integers(1, 4))
def test_level_sizes_multiply_to_n(n, w):
    sizes = level_sizes(n, w)
    assert len(sizes) == w and math.prod(sizes) == n


def test_fit_exponent_recovers_power():
    xs = [10.0, 100.0, 1000.0]
    assert fit_exponent(xs, [3 * x**1.5 for x in xs]) == pytest.approx(1.5)


@pytest.mark.slow
def test_check_small_passes_and_sliding_window_collapses():
    ev = con.check("small")
    assert ev.passed
    assert all(r["accuracy"] == 1.0 for r in ev.details["lsh"])
    sw = [r["accuracy"] for r in ev.details["sliding_window"]]
    assert sw[-1] < 0.5  # near chance (1/16) once the table is far behind the window
    dims = {r["n"]: r["state_dims"] for r in ev.details["lsh"] if r["w"] == 2}
    assert dims[10_000] > dims[100]  # state grows with n ...
    assert dims[10_000] <= 2 * (2 * math.log2(10_000) + 2) + 5  # ... as O(w log n)
