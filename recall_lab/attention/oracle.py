"""The oracle key selection: the control for KS. Keys are chosen from the token
ids, not learned: query i reads the positions right after earlier occurrences of its own token,
when that token is a key. No scorer, no aux loss, no parameters.

Definition. For query position i with token ``x_i``: the positions ``p = j + 1 <= i`` with
``x_j == x_i`` and ``x_j`` a key id (``keys = (lo, hi)``: ``lo <= x_j < hi``; None = every id
counts as a key), the ``n`` most recent of them (largest p first), ``-1`` in the slots left. A
query whose token is not a key gets no keys (a zero branch output). Row i reads ``x_0 .. x_i``
only, so it is strictly causal and independent of L and of padding.

Why the position after the key (recall_lab/generators/joint_recall.py and vocab.py): every leaf
block of a component is ``key value``, and filler is only ever inserted between blocks, never
between a key and its value; so ``j + 1`` is the value of the earlier occurrence ``j`` of the
query's key, and the branch's value vector there (the SSM input xc, after the short conv) carries
that value token. Keys are the last level's ids (`Vocab.level_range(n_levels - 1)`); `RunConfig`
fills ``keys`` from the task (config.TASK_KEY_PATTERNS), so values, context tokens, filler, BOS
and SEP never select or get selected.

What it picks per task:

* MQAR (one level, ``BOS k v k v .. SEP k v k v ..``): each key occurs once per component, so an
  inquiry key's list is exactly the value of its own pair in the information component (the
  answer), plus nothing else; an information-component key has no earlier occurrence and reads
  nothing. With ``n >= 1`` the answer is always listed.
* Multi-level joint recall (``levels = [[2, 2], [4, 4]]``: contexts ``A B``, keys ``a..d``): keys
  are shared by all contexts, so an inquiry key ``a`` under context ``B`` lists the values after
  *every* earlier ``a``: one per context in the information component (``A``'s and ``B``'s, the
  answer among them) and the teacher-forced values after the ``a``s already asked in the inquiry
  (of other contexts). It does not pick the context's own value: telling ``B``'s ``a`` from
  ``A``'s is left to the branch's softmax over q . k and to the SSM, as it is for a learned
  selector. With ``n`` below the number of earlier occurrences the most recent ones are kept, so
  the information component's value can be dropped for a late inquiry; with ``n >=`` the number
  of contexts times 2 nothing is dropped.

Cost: one `bucket_window_indices` call (LSH's O(L log L + L n) sort / search, or its native
kernel), with bin ``x_i`` for query i and bin ``x_{p-1}`` for key position p. Decoding: no
bounded state of its own; the exact prefix decoder (attention/decode.py) keeps the ids as it
keeps q, k, v (grows as L; this is a control, not a memory claim).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from recall_lab.attention.base import Pattern, check_qk
from recall_lab.attention.lsh import bucket_window_indices
from recall_lab.generators.errors import RecallLabError

ORACLE_OPTIONS = frozenset({"keys"})

# Bins: token x -> x + 2; a key position after a non-key token gets 0, a non-key query 1, so they
# never match each other or a real token (and the bins do not depend on the largest id present).
_NO_KEY, _NO_QUERY, _SHIFT = 0, 1, 2


def check_keys(keys) -> tuple[int, int] | None:
    """The ``keys`` option: None, or a half-open id range ``(lo, hi)`` with ``0 <= lo < hi``."""
    if keys is None:
        return None
    ok = (isinstance(keys, (list, tuple)) and len(keys) == 2
          and all(isinstance(x, int) and not isinstance(x, bool) for x in keys)
          and 0 <= keys[0] < keys[1])
    if not ok:
        raise RecallLabError(f"oracle keys must be an id range [lo, hi) with 0 <= lo < hi, got "
                             f"{keys!r}")
    return int(keys[0]), int(keys[1])


def oracle_indices(ids: Tensor, n: int, keys: tuple[int, int] | None = None) -> Tensor:
    """Key positions of the oracle for token ids ``[B, L]``: int32 ``[B, 1, L, n]`` (see the
    module docstring; newest first, -1 = empty slot)."""
    if ids.dim() != 2 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise RecallLabError(f"oracle expects integer token ids [B, L], got {ids.dtype} "
                             f"{tuple(ids.shape)}")
    ids = ids.to(torch.int64)
    if ids.numel() and int(ids.min()) < 0:
        raise RecallLabError("oracle token ids must be >= 0")
    keys = check_keys(keys)
    is_key = torch.ones_like(ids, dtype=torch.bool) if keys is None else (
        (ids >= keys[0]) & (ids < keys[1]))
    bin_q = torch.where(is_key, ids + _SHIFT, _NO_QUERY)
    # key position p is "right after" p - 1: its bin is token p - 1's (position 0 has none)
    prev = F.pad(torch.where(is_key, ids + _SHIFT, _NO_KEY), (1, 0), value=_NO_KEY)[:, :-1]
    return bucket_window_indices(bin_q, prev, n)[:, None]


class OraclePattern(Pattern):
    """Oracle key selection from token ids: ``forward(q, k, v, ids=ids)`` with ``ids [B, L]``
    (the hybrid branch passes the LM's input ids to patterns with ``takes_ids``)."""

    takes_ids = True

    def __init__(self, n: int, keys=None) -> None:
        super().__init__()
        self.name, self.budget, self.keys = "oracle", n, check_keys(keys)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, keys={self.keys}"

    def forward(self, q: Tensor, k: Tensor, v: Tensor | None = None, ids: Tensor | None = None
                ) -> tuple[Tensor, None]:
        length = check_qk(q, k)
        if ids is None:
            raise RecallLabError("the oracle pattern needs the token ids: pattern(q, k, v, "
                                 "ids=ids [B, L]) (a hybrid branch passes the model's input ids)")
        if ids.dim() != 2 or ids.shape[-1] != length or ids.shape[0] not in (1, q.shape[0]):
            raise RecallLabError(f"oracle ids of shape {tuple(ids.shape)} do not fit q "
                                 f"{tuple(q.shape)} (expected [B, L])")
        return oracle_indices(ids.to(q.device), self.budget, self.keys), None
