"""App. A: sign-bit bins equal argmax bins over the signed-prototype codebook."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.proofs.lsh_equivalence import (
    agreement,
    argmax_bins,
    check,
    sign_bins,
    sign_matrix,
    signed_prototypes,
    tie_statistics,
)


@given(st.integers(1, 32), st.integers(1, 8), st.integers(0, 2**31 - 1))
def test_sign_bits_equal_codebook_argmax(d, h, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(500, d, generator=gen, dtype=torch.float64)
    planes = torch.randn(d, h, generator=gen, dtype=torch.float64)
    assert torch.equal(sign_bins(x, planes), argmax_bins(x, signed_prototypes(planes)))


def test_sign_matrix_lists_every_sign_vector_once_msb_first():
    s = sign_matrix(3)
    assert s.shape == (3, 8)
    assert torch.unique(s.t(), dim=0).shape[0] == 8
    assert s[:, 0].tolist() == [-1, -1, -1] and s[:, 4].tolist() == [1, -1, -1]


def test_wrong_codebook_is_detected():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2000, 8, generator=gen, dtype=torch.float64)
    planes = torch.randn(8, 4, generator=gen, dtype=torch.float64)
    assert agreement(x, planes) == 1.0
    assert agreement(x, planes, lambda p: signed_prototypes(p.flip(-1))) < 0.5
    ev = check("small", codebook_fn=lambda p: signed_prototypes(p.flip(-1)))
    assert not ev.passed


def test_ties_happen_exactly_at_zero_projections():
    stats = tie_statistics(5000, 3, 4, torch.Generator().manual_seed(0))
    assert 0 < stats["zero_projection_rate"] < 1
    assert stats["non_unique_argmax_iff_zero_projection"]
    assert stats["agreement_without_zero_projection"] == 1.0


def test_check_small_passes():
    ev = check("small")
    assert ev.passed
    assert all(r["agreement"] == 1.0 for r in ev.details["settings"])
