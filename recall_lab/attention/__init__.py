"""Sparse attention: patterns that return key indices, and the op that consumes them.

One file per pattern family (fixed.py, lsh.py, ks.py, hax.py, seattn.py, attamba.py, oracle.py:
the control that reads token ids; shared parts in base.py), one registry table (patterns.py:
`PATTERN_TABLE`, `make_pattern`), native kernel calls only in native.py.

```python
from recall_lab.attention import sparse_attention, make_pattern, PATTERNS
pattern = make_pattern("hax", 64, dim=16)      # nn.Module
idx, aux_loss = pattern(q, k)                  # idx int32 [B, H, L, slots], -1 = empty slot
out = sparse_attention(q, k, v, idx)           # [B, H, L, dv]
```

Plain functions for other areas (no module state): ``lsh_indices`` (+ ``causal_center``,
``lsh_bins``, ``sample_planes``), ``causal_topk_indices``, ``union_indices``, ``seattn_indices``
(SE-Attn; its dense loop reference is :mod:`recall_lab.attention.seattn_reference`). The dense
release-semantics reference lives in :mod:`recall_lab.attention.release_reference` (non-causal,
for comparison only). Nothing here imports Triton at import time.
"""

from recall_lab.attention.attamba import AttambaPattern, attamba_indices, chunk_starts
from recall_lab.attention.patterns import (
    LSH_RULES,
    PATTERN_TABLE,
    PATTERNS,
    Pattern,
    PatternRow,
    bucket_window_indices,
    causal_center,
    causal_topk_indices,
    dilated_indices,
    dilation_for,
    full_indices,
    ks_ranking_loss,
    lsh_bins,
    lsh_indices,
    make_pattern,
    register_pattern,
    sample_planes,
    sink_indices,
    sliding_window_indices,
    union_indices,
)
from recall_lab.attention.seattn import SEAttnPattern, seattn_indices
from recall_lab.attention.sparse import default_backend, sparse_attention, triton_available

__all__ = [
    "AttambaPattern",
    "attamba_indices",
    "chunk_starts",
    "default_backend",
    "LSH_RULES",
    "PATTERNS",
    "PATTERN_TABLE",
    "Pattern",
    "PatternRow",
    "SEAttnPattern",
    "bucket_window_indices",
    "causal_center",
    "causal_topk_indices",
    "dilated_indices",
    "dilation_for",
    "full_indices",
    "ks_ranking_loss",
    "lsh_bins",
    "lsh_indices",
    "make_pattern",
    "register_pattern",
    "sample_planes",
    "seattn_indices",
    "sink_indices",
    "sliding_window_indices",
    "sparse_attention",
    "triton_available",
    "union_indices",
]
