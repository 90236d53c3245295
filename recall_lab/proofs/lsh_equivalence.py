"""Appendix A: sign-bit binning (Eq. 7) equals argmax binning (Eq. 6) over 2^h signed prototypes.

The codebook (Eq. 21) has one column ``B_b = sum_j b_j H_j`` per sign vector ``b in {-1,+1}^h``;
column ``c`` carries ``b_j = +1`` exactly when bit ``h - j`` of ``c`` is set, so the argmax column
index and the sign-bit bin are the same integer when Eq. 23 holds.

`check()` measures, over random Gaussian inputs and planes for several ``(d, h)``:

- the agreement rate of sign-bit bins and argmax-over-codebook bins (float64 reference), which the
  appendix says is 1;
- the agreement of the project's `recall_lab.attention.lsh_bins` (sign rule, float32) with that
  reference;
- ties: the proof needs every projection ``<x, H_j>`` to be non-zero. On small-integer inputs (so
  that zero is hit exactly) it measures how often a projection is exactly 0, checks that the
  codebook argmax is non-unique exactly on those inputs, and reports how often first-index
  tie-breaking still lands on the sign-bit bin.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from recall_lab.attention import lsh_bins
from recall_lab.proofs.evidence import Evidence

Codebook = Callable[[torch.Tensor], torch.Tensor]  # planes [d, h] -> prototypes [d, 2^h]


def sign_matrix(h: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``S [h, 2^h]``: column c holds b with ``b_j = +1`` iff bit ``h - j`` (j from 1) of c is 1."""
    cols = torch.arange(2**h, dtype=torch.int64)
    shifts = torch.arange(h - 1, -1, -1, dtype=torch.int64)
    bits = (cols[None, :] >> shifts[:, None]) & 1
    return (2 * bits - 1).to(dtype)


def signed_prototypes(planes: torch.Tensor) -> torch.Tensor:
    """Eq. 21: the implicit matrix ``H~ [d, 2^h]`` of signed prototypes."""
    return planes @ sign_matrix(planes.shape[-1], planes.dtype)


def sign_bins(x: torch.Tensor, planes: torch.Tensor) -> torch.Tensor:
    """Eq. 7 in float64: sum_j 1[(x H)_j > 0] 2^(h-j)."""
    proj = x.double() @ planes.double()
    h = planes.shape[-1]
    weights = 2 ** torch.arange(h - 1, -1, -1, dtype=torch.int64)
    return ((proj > 0).to(torch.int64) * weights).sum(-1)


def argmax_bins(x: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """Eq. 6 over the expanded matrix, float64; ties resolve to the first maximal column."""
    return (x.double() @ codebook.double()).argmax(-1)


def agreement(x: torch.Tensor, planes: torch.Tensor, codebook_fn: Codebook = signed_prototypes
              ) -> float:
    """Fraction of rows of x whose sign-bit bin equals the argmax-over-codebook bin."""
    book = codebook_fn(planes.double())
    return float((sign_bins(x, planes) == argmax_bins(x, book)).double().mean())


def tie_statistics(n: int, d: int, h: int, generator: torch.Generator) -> dict[str, float]:
    """Small-integer inputs and planes, so that a projection can be exactly 0 (exact arithmetic)."""
    x = torch.randint(-2, 3, (n, d), generator=generator).double()
    planes = torch.randint(-2, 3, (d, h), generator=generator).double()
    zero = ((x @ planes) == 0).any(-1)
    scores = x @ signed_prototypes(planes)
    non_unique = (scores == scores.max(-1, keepdim=True).values).sum(-1) > 1
    same = sign_bins(x, planes) == argmax_bins(x, signed_prototypes(planes))
    n_zero = int(zero.sum())
    return {
        "inputs": n,
        "zero_projection_rate": n_zero / n,
        "non_unique_argmax_iff_zero_projection": bool(torch.equal(zero, non_unique)),
        "agreement_without_zero_projection": float(same[~zero].double().mean()),
        "agreement_with_zero_projection": float(same[zero].double().mean()) if n_zero else 1.0,
    }


CONFIGS = {"small": ((4, 3), (16, 6), (64, 8)), "large": ((4, 3), (16, 6), (64, 8), (128, 10))}


def check(scale: str = "small", seed: int = 0, codebook_fn: Codebook = signed_prototypes
          ) -> Evidence:
    """App. A: agreement of the two binning rules, plus the measured tie rate."""
    start = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    n = 20_000 if scale == "small" else 200_000
    rows = []
    for d, h in CONFIGS.get(scale, CONFIGS["small"]):
        x = torch.randn(n, d, generator=gen, dtype=torch.float64)
        x = x / x.norm(dim=-1, keepdim=True)
        planes = torch.randn(d, h, generator=gen, dtype=torch.float64)
        project = float((lsh_bins(x, planes, "sign") == sign_bins(x, planes)).double().mean())
        gaussian_zero = float(((x @ planes) == 0).any(-1).double().mean())
        rows.append({"d": d, "h": h, "inputs": n, "agreement": agreement(x, planes, codebook_fn),
                     "project_lsh_bins_agreement": project, "zero_projection_rate": gaussian_zero})
    ties = tie_statistics(n, 4, 6, gen)
    worst = min(r["agreement"] for r in rows)
    worst_project = min(r["project_lsh_bins_agreement"] for r in rows)
    passed = (worst == 1.0 and worst_project == 1.0
              and ties["non_unique_argmax_iff_zero_projection"]
              and ties["agreement_without_zero_projection"] == 1.0)
    return Evidence(
        name="lsh_equivalence",
        statement="App. A: sign-bit bins = argmax bins over the 2^h signed-prototype codebook",
        checked=(f"{len(rows)} (d, h) settings x {n:,} random unit vectors; project lsh_bins vs "
                 f"reference; {n:,} small-integer inputs for exact zero projections"),
        measured=(f"agreement {worst:.4f} (project op {worst_project:.4f}); zero-projection rate "
                  f"{ties['zero_projection_rate']:.3f} (integer inputs), "
                  f"{max(r['zero_projection_rate'] for r in rows):.0f} (Gaussian); "
                  f"argmax non-unique iff a projection is 0: "
                  f"{ties['non_unique_argmax_iff_zero_projection']}; first-index tie-break "
                  f"agrees on {ties['agreement_with_zero_projection']:.3f} of tied inputs"),
        passed=passed,
        details={"settings": rows, "ties": ties},
        seconds=time.perf_counter() - start,
    )
