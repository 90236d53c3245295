"""SE-Attn (Expansion Span Sec. 3.2-3.3, Eq. 1-7; conference version Sec. 3) as a key-index pattern.

The sequence is cut into chunks of M tokens (chunk start ``cs(p) = floor(p / M) * M``) and into
memory blocks of S tokens (block j = positions ``jS .. jS+S-1``; only full blocks exist). Query p
attends, through the one ``sparse_attention`` op, to

* its own chunk causally: keys ``cs(p) .. p`` (Eq. 3's ``K_i``; within-chunk causality is
  unstated in the paper, needed for an LM), and
* the tokens of the top-k memory blocks retrieved for it (the "expansion span", Eq. 1-2), chosen
  among the blocks that end before its chunk starts (``(j+1) S <= cs(p)``; a block straddling
  the chunk start is never a candidate, so retrieved and own keys never overlap).

Retrieval (Eq. 5-7): each block has a summary ``c_j`` = row mean of ``softmax(Q_j K_j^T /
sqrt(d)) X_j`` (non-causal attention inside the block; ``X = V`` for ``summary="value"``, the
paper's choice, or ``X = K`` for ``summary="key"``, used where v is wider than q, e.g. the hybrid
branch, so that ``q . c_j`` is defined). ``pool="landmark"`` (the paper's SE-Attn-LM ablation,
Sec. 8, lab approximation) replaces the block's own queries by one fixed, non-learnable query
vector per head (seeded N(0, 1)): ``c_j = softmax(l K_j^T / sqrt(d)) X_j``. The relevance of
block j for query p is ``r_{p,j} = s_p . c_j`` where

* ``scoring="prefix"`` (default, causal): ``s_p = sum_{t=cs(p)}^{p} q_t``, the chunk's queries
  up to p (so p's blocks depend on tokens <= p only);
* ``scoring="token"``: ``s_p = q_p``;
* ``scoring="chunk"`` (the paper's Eq. 5, NOT causal): ``s_p = sum over the whole chunk of p``,
  so p's retrieved set depends on up to M-1 later queries; kept for fidelity and labelled.

The paper's softmax over the masked scores (Eq. 6) is monotone, so it does not change the top-k
and is skipped here (the loop reference in ``seattn_reference`` applies it). Top-k passes no
gradient: retrieval is learned only through W_Q, W_K, W_V. ``retrieval="random"`` (SE-Attn-Random)
ranks candidates by a hash of (seed, head, chunk start, block), ``"none"`` (SE-Attn-NoMem) keeps
only the chunk. Ties (probability 0 with real inputs) go to either block.

Chunk size: fixed ``chunk`` M in evaluation; in training with ``chunk_choices`` one M is drawn per
forward from torch's global generator (seeded by the run, saved by resume), as the paper's random
chunk size per forward (Sec. 4.5). It never depends on L. Random retrieval draws its hash seed the
same way in training and uses ``seed`` in evaluation.

Output ``idx: int32 [B or 1, H, L, k*S + M]``: retrieved block tokens first, then the chunk.

Cost (conference version, App. H: O(d (L S + L M + L^2 / S))): summaries O(L S d); prefix/token
scoring O(L U d) with U = L // S blocks, tiled over queries so memory stays O(tile * U); chunk
scoring O((L/M) U d); top-k O(L U); indices O(L (M + k S)); attention O(L (M + k S) d).
"""

from __future__ import annotations

import torch
from torch import Tensor

from recall_lab.attention.decode import Decoder, FullDecoder, Keys, SlotDecoder, gather_keys
from recall_lab.generators.errors import RecallLabError

SCORINGS = ("prefix", "token", "chunk")
SUMMARIES = ("value", "key")
POOLS = ("attention", "landmark")
RETRIEVALS = ("relevance", "random", "none")
# Scores of one query tile: B*H*tile*U elements at most (2^22 fp32 = 16 MiB).
_TILE_ELEMS = 1 << 22

__all__ = [
    "SCORINGS", "SUMMARIES", "POOLS", "RETRIEVALS", "chunk_starts", "landmark_queries",
    "block_summaries", "query_sums", "random_scores", "seattn_indices", "SEAttnPattern",
]


def chunk_starts(length: int, chunk: int, device=None) -> Tensor:
    """``cs(p) = floor(p / M) * M`` for p < L (int64 [L])."""
    pos = torch.arange(length, device=device, dtype=torch.int64)
    return pos // chunk * chunk


def landmark_queries(n_heads: int, dim: int, seed: int, device=None) -> Tensor:
    """The fixed, non-learnable landmark query of each head: ``[H, d]`` ~ N(0, 1), seeded."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n_heads, dim, generator=gen).to(device)


def block_summaries(q: Tensor, k: Tensor, v: Tensor | None, block: int, summary: str = "value",
                    pool: str = "attention", landmark: Tensor | None = None) -> Tensor:
    """Eq. 7: ``c_j`` of every full block of ``block`` tokens: ``[B, H, L // block, d_x]``.

    ``pool="attention"``: row mean of softmax(Q_j K_j^T / sqrt(d)) X_j; ``"landmark"``:
    softmax(l K_j^T / sqrt(d)) X_j with ``landmark`` l of shape [H, d].
    """
    x = v if summary == "value" else k
    n_blocks = q.shape[-2] // block
    d = q.shape[-1]
    kb = k[..., : n_blocks * block, :].unflatten(-2, (n_blocks, block))
    xb = x[..., : n_blocks * block, :].unflatten(-2, (n_blocks, block))
    if pool == "attention":
        qb = q[..., : n_blocks * block, :].unflatten(-2, (n_blocks, block))
        w = torch.softmax(qb @ kb.transpose(-1, -2) * d**-0.5, dim=-1).mean(-2)  # [B,H,U,S]
    else:
        lq = landmark.to(k.dtype)[None, :, None, None, :]  # [1, H, 1, 1, d]
        w = torch.softmax((lq * kb).sum(-1) * d**-0.5, dim=-1)
    return (w[..., None] * xb).sum(-2)


def query_sums(q: Tensor, chunk: int, scoring: str) -> Tensor:
    """``s_p`` of the module docstring, ``[B, H, L, d]``; sums stay inside one chunk (no
    subtraction of long prefix sums, so no cancellation)."""
    if scoring == "token":
        return q
    length = q.shape[-2]
    n_chunks = -(-length // chunk)
    pad = n_chunks * chunk - length
    qc = torch.nn.functional.pad(q, (0, 0, 0, pad)).unflatten(-2, (n_chunks, chunk))
    if scoring == "prefix":
        s = qc.cumsum(-2)
    else:  # "chunk": the whole chunk (as far as the sequence goes), non-causal
        s = qc.sum(-2, keepdim=True).expand_as(qc)
    return s.flatten(-3, -2)[..., :length, :]


def _hash(x: Tensor) -> Tensor:
    # 32-bit integer mixing (xorshift-multiply) in int64, products stay below 2^63.
    for mult in (0x045D9F3B, 0x045D9F3B):
        x = ((x >> 16) ^ x) * mult & 0xFFFFFFFF
    return (x >> 16) ^ x


def random_scores(n_heads: int, starts: Tensor, n_blocks: int, seed: int) -> Tensor:
    """SE-Attn-Random: a pseudo-random score per (head, chunk start, block) in [0, 1),
    ``[1, H, L, U]``; a pure function of its arguments, so it does not depend on L or on the
    batch, and every query of a chunk shares one draw (the paper retrieves per chunk)."""
    h = torch.arange(n_heads, device=starts.device, dtype=torch.int64)[:, None, None]
    j = torch.arange(n_blocks, device=starts.device, dtype=torch.int64)[None, None, :]
    key = _hash(_hash(_hash(torch.full_like(h, seed & 0xFFFFFFFF) ^ h) ^ starts[None, :, None])
                ^ j)
    return (key & 0xFFFFFF).to(torch.float32)[None] / float(1 << 24)


def seattn_indices(q: Tensor, k: Tensor, v: Tensor | None, *, chunk: int, block: int, topk: int,
                   scoring: str = "prefix", summary: str = "value", pool: str = "attention",
                   retrieval: str = "relevance", seed: int = 0,
                   landmark: Tensor | None = None) -> Tensor:
    """SE-Attn key indices (see the module docstring); a plain function, no randomness beyond
    ``seed``. ``q, k: [B, H, L, d]``, ``v: [B, H, L, dv]`` (needed for ``summary="value"``)."""
    b, h, length, d = q.shape
    dev = q.device
    starts = chunk_starts(length, chunk, dev)
    t = torch.arange(chunk, device=dev, dtype=torch.int64)
    own = starts[:, None] + t[None, :]
    own = torch.where(own <= torch.arange(length, device=dev)[:, None], own, -1)[None, None]
    n_blocks = length // block
    n = min(topk, n_blocks)
    if retrieval == "none" or n == 0:
        return own.to(torch.int32)
    blk_end = (torch.arange(n_blocks, device=dev, dtype=torch.int64) + 1) * block
    cand = blk_end[None, :] <= starts[:, None]  # [L, U]
    if retrieval == "random":
        scores = random_scores(h, starts, n_blocks, seed).masked_fill(~cand, float("-inf"))
        top = scores.topk(n, dim=-1)
        blocks = torch.where(torch.isfinite(top.values), top.indices, -1)
    else:
        dt = torch.promote_types(q.dtype, torch.float32)
        qf, kf = q.detach().to(dt), k.detach().to(dt)
        vf = v.detach().to(dt) if v is not None else None
        c = block_summaries(qf, kf, vf, block, summary, pool, landmark)  # [B, H, U, d]
        s = query_sums(qf, chunk, scoring)
        blocks = torch.empty(b, h, length, n, dtype=torch.int64, device=dev)
        tile = max(1, _TILE_ELEMS // max(1, b * h * n_blocks))
        for lo in range(0, length, tile):
            hi = min(length, lo + tile)
            r = (s[..., lo:hi, :] @ c.transpose(-1, -2)).masked_fill(~cand[lo:hi], float("-inf"))
            top = r.topk(n, dim=-1)
            blocks[..., lo:hi, :] = torch.where(torch.isfinite(top.values), top.indices, -1)
    offs = torch.arange(block, device=dev, dtype=torch.int64)
    toks = torch.where(blocks[..., None] >= 0, blocks[..., None] * block + offs, -1).flatten(-2)
    lead = toks.shape[:2]
    return torch.cat([toks, own.expand(*lead, length, chunk)], dim=-1).to(torch.int32)


def _check_int(name: str, x, low: int = 1) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < low:
        raise RecallLabError(f"seattn {name} must be an int >= {low}, got {x!r}")
    return x


class SEAttnPattern(torch.nn.Module):
    """SE-Attn as a pattern module: ``forward(q, k, v=None) -> (idx, None)``.

    Budget (most keys per query) = M_max + topk * block. Defaults from the total budget k:
    chunk k//2, block max(1, k//8), topk (k - chunk) // block (k = 64: 32 + 4 x 8).
    """

    def __init__(self, name: str, k: int, *, chunk: int | None = None, block: int | None = None,
                 topk: int | None = None, chunk_choices: tuple[int, ...] | list[int] | None = None,
                 scoring: str = "prefix", summary: str = "value", pool: str = "attention",
                 retrieval: str = "relevance", seed: int = 0) -> None:
        super().__init__()
        for opt, val, allowed in (("scoring", scoring, SCORINGS), ("summary", summary, SUMMARIES),
                                  ("pool", pool, POOLS), ("retrieval", retrieval, RETRIEVALS)):
            if val not in allowed:
                raise RecallLabError(f"seattn {opt} must be one of {', '.join(allowed)}, "
                                     f"got {val!r}")
        chunk = _check_int("chunk", max(1, k // 2) if chunk is None else chunk)
        block = _check_int("block", max(1, k // 8) if block is None else block)
        topk = _check_int("topk", max(0, (k - chunk) // block) if topk is None else topk, 0)
        choices = tuple(_check_int("chunk_choices entry", c) for c in (chunk_choices or ()))
        self.name, self.chunk, self.block, self.topk = name, chunk, block, topk
        self.chunk_choices, self.scoring, self.summary = choices, scoring, summary
        self.pool, self.retrieval, self.seed = pool, retrieval, int(seed)
        self.budget = max((chunk, *choices)) + (0 if retrieval == "none" else topk * block)

    def current_chunk(self) -> int:
        """M of this forward: a draw from ``chunk_choices`` in training, else ``chunk``."""
        if self.training and self.chunk_choices:
            i = int(torch.randint(len(self.chunk_choices), ()))
            return self.chunk_choices[i]
        return self.chunk

    def forward(self, q: Tensor, k: Tensor, v: Tensor | None = None) -> tuple[Tensor, None]:
        if q.dim() != 4 or q.shape != k.shape:
            raise RecallLabError(f"seattn expects q, k of one shape [B, H, L, d]; got "
                                 f"{tuple(q.shape)}, {tuple(k.shape)}")
        needs_v = self.summary == "value" and self.retrieval == "relevance"
        if needs_v and (v is None or v.shape[:3] != q.shape[:3] or v.shape[-1] != q.shape[-1]):
            raise RecallLabError("seattn summary='value' needs v of q's shape (q . c_j must be "
                                 "defined); use summary='key' where v is wider than q")
        chunk = self.current_chunk()
        seed = self.seed
        if self.training and self.retrieval == "random":
            seed = int(torch.randint(2**31 - 1, ()))
        landmark = None
        if self.pool == "landmark":
            landmark = landmark_queries(q.shape[1], q.shape[-1], self.seed, q.device)
        with torch.no_grad():
            idx = seattn_indices(q, k, v, chunk=chunk, block=self.block, topk=self.topk,
                                 scoring=self.scoring, summary=self.summary, pool=self.pool,
                                 retrieval=self.retrieval, seed=seed, landmark=landmark)
        return idx, None

    def decoder(self) -> Decoder:
        if self.retrieval == "none":  # NoMem reads its own chunk only: a bounded state
            return NoMemDecoder(self.chunk)
        return SEAttnDecoder(self)

    def extra_repr(self) -> str:
        return (f"name={self.name!r}, chunk={self.chunk}, block={self.block}, topk={self.topk}, "
                f"chunk_choices={self.chunk_choices}, scoring={self.scoring!r}, "
                f"summary={self.summary!r}, pool={self.pool!r}, retrieval={self.retrieval!r}")


class NoMemDecoder(SlotDecoder):
    """Decode state of SE-Attn-NoMem (eval mode): the keys of the query's own chunk only, in M
    slots (position t writes slot t mod M), emptied when a chunk starts; memory does not grow
    with L."""

    def __init__(self, chunk: int) -> None:
        super().__init__(chunk, lambda t: t % chunk)
        self.chunk = chunk

    def _step(self, q: Tensor, k: Tensor, v: Tensor) -> Keys:
        if self.t % self.chunk == 0 and self.slots.pos is not None:
            self.slots.pos.fill_(-1)  # the previous chunk's keys are never read again
        return super()._step(q, k, v)


class SEAttnDecoder(FullDecoder):
    """Decode state of SE-Attn (eval mode): every q, k, v (any full block before the query's
    chunk may be retrieved, so memory grows as L), the summary of each block once it is full,
    and the query sum of the current chunk; per token O(L/S d) scoring plus the k S + M keys.
    ``scoring="chunk"`` reads later queries of the chunk and cannot decode."""

    def __init__(self, pattern: SEAttnPattern) -> None:
        super().__init__()
        if pattern.scoring == "chunk":
            raise RecallLabError("seattn scoring='chunk' is not causal: it cannot decode token "
                                 "by token (use scoring='prefix')")
        self.pattern, self.keep_q = pattern, True
        self.summaries: list[Tensor] = []
        self.qsum: Tensor | None = None

    def _step(self, q: Tensor, k: Tensor, v: Tensor) -> Keys:
        p, t = self.pattern, self.t
        self.append(q, k, v)
        chunk, block = p.chunk, p.block
        cs = t // chunk * chunk
        dt = torch.promote_types(q.dtype, torch.float32)
        qt = q.detach().to(dt)
        self.qsum = qt if t == cs or p.scoring == "token" else self.qsum + qt
        relevance = p.retrieval == "relevance" and p.topk > 0
        if relevance and (t + 1) % block == 0:  # block j is full: its summary is fixed now
            lo = t + 1 - block
            qb, kb, vb = (x[..., lo:t + 1, :].detach().to(dt) for x in (self.q, self.k, self.v))
            landmark = (landmark_queries(q.shape[1], q.shape[-1], p.seed, q.device)
                        if p.pool == "landmark" else None)
            self.summaries.append(block_summaries(qb, kb, vb, block, p.summary, p.pool,
                                                  landmark))
        n_cand = cs // block  # blocks that end before the chunk starts
        own = torch.arange(cs, cs + chunk, device=k.device)
        own = torch.where(own <= t, own, -1)[None, None].expand(*k.shape[:2], chunk)
        n = min(p.topk, n_cand)
        if p.retrieval == "none" or n == 0:
            pos = own
        else:
            if p.retrieval == "random":
                starts = torch.tensor([cs], device=k.device)
                r = random_scores(q.shape[1], starts, n_cand, p.seed)[:, :, 0]  # [1, H, U]
                r = r.expand(k.shape[0], -1, -1)
            else:
                c = torch.cat(self.summaries[:n_cand], dim=-2)  # [B, H, U, dx]
                r = (c @ self.qsum.unsqueeze(-1)).squeeze(-1)
            blocks = r.topk(n, dim=-1).indices  # [B, H, n]
            offs = torch.arange(block, device=k.device)
            toks = (blocks[..., None] * block + offs).flatten(-2)
            pos = torch.cat([toks, own], dim=-1)
        m = t + 1
        return gather_keys(pos, self.k[..., :m, :], self.v[..., :m, :])


VARIANTS = {
    "seattn": {},
    "seattn-nomem": {"retrieval": "none"},
    "seattn-random": {"retrieval": "random"},
    "seattn-landmark": {"pool": "landmark"},
}
OPTIONS = {"chunk", "block", "topk", "chunk_choices", "scoring", "summary", "pool", "retrieval",
           "seed"}


def make_seattn(name: str, k: int, **opts) -> SEAttnPattern:
    """One of :data:`VARIANTS` with budget k; options as :class:`SEAttnPattern`. A variant's own
    setting (e.g. ``retrieval`` of ``seattn-random``) cannot be passed again."""
    fixed = VARIANTS[name]
    clash = set(fixed) & set(opts)
    if clash:
        raise RecallLabError(f"pattern {name!r} fixes {sorted(clash)[0]!r}; use 'seattn' to set it")
    return SEAttnPattern(name, k, **fixed, **opts)

