"""SE-Attn written out from its definitions (Expansion Span Eq. 1-7), one query at a time.

Readable and slow (Python loops over batch, head, query, block): the oracle that the index
pattern plus ``sparse_attention`` is tested against. For every query p: chunk start cs(p), the
candidate blocks (ending before cs(p)), each block's summary by explicit non-causal attention
inside the block, the relevance scores, the paper's masked softmax (Eq. 6), the top-k blocks,
then dense softmax attention of q_p over the chunk's keys cs(p)..p and the retrieved blocks'
keys. Returns the outputs and, per query, the set of keys it read.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _summary(q: Tensor, k: Tensor, x: Tensor, landmark: Tensor | None) -> Tensor:
    """c_j of one block (``q, k: [S, d]``, ``x: [S, dx]``)."""
    d = k.shape[-1]
    if landmark is None:
        rows = [torch.softmax(q[t] @ k.T / d**0.5, -1) @ x for t in range(k.shape[0])]
        return torch.stack(rows).mean(0)
    return torch.softmax(landmark @ k.T / d**0.5, -1) @ x


def seattn_reference(q: Tensor, k: Tensor, v: Tensor, *, chunk: int, block: int, topk: int,
                     scoring: str = "prefix", summary: str = "value", retrieval: str = "relevance",
                     landmark: Tensor | None = None, random_scores: Tensor | None = None
                     ) -> tuple[Tensor, list]:
    """``q, k: [B, H, L, d]``, ``v: [B, H, L, dv]`` -> (out ``[B, H, L, dv]``, keys[b][h][p]).

    ``landmark [H, d]`` switches to landmark pooling; ``random_scores [H, L, U]`` are used as
    the scores for ``retrieval="random"``.
    """
    b_, h_, length, d = q.shape
    out = torch.zeros(b_, h_, length, v.shape[-1], dtype=v.dtype)
    keys: list = []
    n_blocks = length // block
    for b in range(b_):
        keys.append([])
        for h in range(h_):
            keys[b].append([])
            x = v[b, h] if summary == "value" else k[b, h]
            c = [
                _summary(q[b, h, j * block:(j + 1) * block], k[b, h, j * block:(j + 1) * block],
                         x[j * block:(j + 1) * block],
                         None if landmark is None else landmark[h])
                for j in range(n_blocks)
            ]
            for p in range(length):
                cs = p // chunk * chunk
                cand = [j for j in range(n_blocks) if (j + 1) * block <= cs]
                chosen: list[int] = []
                if retrieval != "none" and cand and topk:
                    if retrieval == "random":
                        r = torch.stack([random_scores[h, p, j] for j in cand])
                    else:
                        if scoring == "prefix":
                            s = q[b, h, cs:p + 1].sum(0)
                        elif scoring == "token":
                            s = q[b, h, p]
                        else:
                            s = q[b, h, cs:min(cs + chunk, length)].sum(0)
                        r = torch.stack([s @ c[j] for j in cand])
                    probs = torch.softmax(r, 0)  # Eq. 6 over the unmasked blocks
                    order = torch.argsort(probs, descending=True)[:topk]
                    chosen = [cand[int(i)] for i in order]
                sel = [t for j in chosen for t in range(j * block, (j + 1) * block)]
                sel += list(range(cs, p + 1))
                keys[b][h].append(set(sel))
                ix = torch.tensor(sel)
                a = torch.softmax(k[b, h, ix] @ q[b, h, p] / d**0.5, 0)
                out[b, h, p] = a @ v[b, h, ix]
    return out, keys
