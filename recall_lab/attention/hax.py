"""HAX (HAX paper Eq. 19-20): LSH u KS, the context-dependent pair; k is split n - n//2 for LSH
and n//2 for KS (32 + 32 at the paper's k = 64)."""

from __future__ import annotations

from torch import Tensor

from recall_lab.attention import native
from recall_lab.attention.base import UnionPattern, check_qk
from recall_lab.attention.ks import KSPattern, sample_positions
from recall_lab.attention.lsh import LSHPattern, native_lsh_applies

LSH_OPTIONS = frozenset({"h", "rule", "seed"})
KS_OPTIONS = frozenset({"dim", "hidden", "scale"})


class HAXPattern(UnionPattern):
    """LSH u KS. Where both parts would take their native paths, `forward` builds the whole
    pattern in one native call (`native.hax_pattern`: LSH window, KS scores and top-n, the union,
    the ranking loss's targets) plus the loss's own (`native.ks_rank_loss`), drawing the same
    random numbers in the same order (LSH's planes, then KS's sampled keys). At the hybrids'
    training shapes the four calls' Python and dispatch cost was most of the pattern's time.
    `UnionPattern.forward` (each part, then `union_indices`) is its reference and runs everywhere
    else; tests/attention/test_hax_fast_paths.py compares the two."""

    def __init__(self, lsh: LSHPattern, ks: KSPattern) -> None:
        super().__init__("hax", [lsh, ks])

    def native_applies(self, q: Tensor, k: Tensor) -> bool:
        lsh, ks = self.parts
        return (native_lsh_applies(q, k, lsh.budget, lsh.h, lsh.rule) and ks.native_applies(q, k)
                and q.shape[-1] == ks.dim)

    def forward(self, q: Tensor, k: Tensor, v: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        check_qk(q, k)
        if not self.native_applies(q, k):
            return super().forward(q, k, v)
        lsh, ks = self.parts
        heads = max(q.shape[1], k.shape[1])
        planes = lsh.planes(q.shape[-1], heads, q.device)
        sel = (sample_positions((max(q.shape[0], k.shape[0]), heads, q.shape[-2]), ks.budget,
                                q.device) if ks.training else None)
        idx, inp, target = native.hax_pattern(q.detach(), k.detach(), planes, ks.mlp, lsh.budget,
                                              ks.budget, lsh.rule == "argmax", sel, ks.scale)
        if sel is None:
            return idx, None
        return idx, native.ks_rank_loss(inp, sel, target, ks.mlp)


def hax_pattern(k: int, **opts) -> HAXPattern:
    lsh = {o: v for o, v in opts.items() if o in LSH_OPTIONS}
    ks = {o: v for o, v in opts.items() if o in KS_OPTIONS}
    return HAXPattern(LSHPattern(k - k // 2, **lsh), KSPattern(k // 2, **ks))
