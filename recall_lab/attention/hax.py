"""HAX (paper 004 Eq. 19-20): LSH u KS, the context-dependent pair; k is split n - n//2 for LSH
and n//2 for KS (32 + 32 at the paper's k = 64)."""

from __future__ import annotations

from recall_lab.attention.base import UnionPattern
from recall_lab.attention.ks import KSPattern
from recall_lab.attention.lsh import LSHPattern

LSH_OPTIONS = frozenset({"h", "rule", "seed"})
KS_OPTIONS = frozenset({"dim", "hidden", "scale"})


def hax_pattern(k: int, **opts) -> UnionPattern:
    lsh = {o: v for o, v in opts.items() if o in LSH_OPTIONS}
    ks = {o: v for o, v in opts.items() if o in KS_OPTIONS}
    return UnionPattern("hax", [LSHPattern(k - k // 2, **lsh), KSPattern(k // 2, **ks)])
