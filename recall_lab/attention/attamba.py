"""The Attamba key pattern: chunk-boundary keys plus a leading window (Attamba Eq. 5, 7, Fig. 5).

Attamba's keys and values come from SSMs that restart at every chunk start, so the key at a chunk
end summarises its chunk. Query i reads

    S(i) = {e in E : e <= i}  U  W(i)

where E are the chunk ends and W(i) the leading window: ``leading=l`` -> the last l tokens
``i-l+1 .. i`` (Fig. 5; l = 0: none), ``leading="chunk"`` -> i's own partial chunk, from its
chunk's start to i (Eq. 5's train mask). A union counts a key once.

Chunk ends (``chunking``):
* ``uniform``: E_o = {e : (e + o) mod P = P - 1} with offset o (``offset``, default 0). With
  o = 0 the ends are exactly ``dilated_indices(L, ceil(L/P), P)``.
* ``cyclic`` (App. A.1.1): layer l of n uses o_l = min(P - 1, l * floor(P / n)) (the release's
  rule): every layer cuts the sequence at different places.
* ``random`` (App. A.1): chunk sizes i.i.d. uniform in {1, .., 2P - 1} (mean P), drawn in blocks
  of 256 from a seeded stream, so the boundaries up to i never depend on the sequence length (the
  paper's sizes summing to n would tie every boundary to the padded length: not causal). Fresh
  sizes on every training-mode call (global RNG), fixed ones in eval mode (``seed``, layer).

``eval_chunking`` / ``eval_chunk`` replace chunking and P in eval mode (the paper's test-time
flexibility: train uniform, test random or another P).

Indices: ``int32 [1, 1, L, |E| + w]`` (w = l, or the longest chunk for "chunk"), broadcast over
batch and heads; cost O(L (L/P + l)) memory and time, the attention over them O(L (L/P + l) d).
"""

from __future__ import annotations

import torch
from torch import Tensor

from recall_lab.attention.base import Pattern, check_qk, union_indices
from recall_lab.attention.decode import Decoder, FullDecoder, Keys
from recall_lab.attention.fixed import sliding_window_indices
from recall_lab.generators.errors import RecallLabError

CHUNKINGS = ("uniform", "cyclic", "random")
_RANDOM_BLOCK = 256  # sizes drawn per generator call: the stream's prefix is length-independent

__all__ = [
    "CHUNKINGS",
    "AttambaPattern",
    "attamba_indices",
    "chunk_ends",
    "chunk_starts",
    "cyclic_offset",
    "indices_from_ends",
    "random_chunk_ends",
]


def cyclic_offset(chunk: int, layer: int, n_layers: int) -> int:
    """App. A.1.1, release rule: o_l = min(P - 1, l * floor(P / n_layers))."""
    return min(chunk - 1, layer * (chunk // max(1, n_layers)))


def chunk_ends(length: int, chunk: int, offset: int = 0, device=None) -> Tensor:
    """bool [L]: position e is a chunk end iff (e + offset) mod P == P - 1."""
    pos = torch.arange(length, device=device)
    return (pos + offset) % chunk == chunk - 1


def random_chunk_ends(length: int, chunk: int, generator: torch.Generator, device=None) -> Tensor:
    """bool [L]: ends of i.i.d. chunk sizes uniform in {1, .., 2P-1}, truncated at L."""
    sizes: list[Tensor] = []
    total = 0
    while total < length:
        block = torch.randint(1, 2 * chunk, (_RANDOM_BLOCK,), generator=generator)
        sizes.append(block)
        total += int(block.sum())
    ends_at = torch.cat(sizes).cumsum(0) - 1 if sizes else torch.zeros(0, dtype=torch.int64)
    out = torch.zeros(length, dtype=torch.bool)
    out[ends_at[ends_at < length]] = True
    return out.to(device)


def chunk_starts(ends: Tensor) -> Tensor:
    """bool [L]: a chunk starts at 0 and right after every end (the SSMs' reset flags)."""
    starts = torch.zeros_like(ends)
    if ends.numel():
        starts[0] = True
        starts[1:] = ends[:-1]
    return starts


def _own_chunk_indices(ends: Tensor) -> Tensor:
    """Eq. 5's own partial chunk: slot s holds i - s while i - s >= start(i). [L, w]."""
    length = ends.numel()
    pos = torch.arange(length, device=ends.device)
    starts = chunk_starts(ends)
    start_of = torch.cummax(torch.where(starts, pos, 0), 0).values  # last start <= i
    width = int((pos - start_of).max()) + 1 if length else 1
    j = pos[:, None] - torch.arange(width, device=ends.device)[None, :]
    return torch.where(j >= start_of[:, None], j, -1)


def indices_from_ends(ends: Tensor, leading: int | str) -> Tensor:
    """Key indices ``int32 [1, 1, L, n]`` of the chunk ends (bool [L]) plus the leading window."""
    length = ends.numel()
    e = torch.nonzero(ends).flatten()  # [m], ascending
    pos = torch.arange(length, device=ends.device)
    end_part = torch.where(e[None, :] <= pos[:, None], e[None, :], -1)  # [L, m]
    if leading == "chunk":
        window = _own_chunk_indices(ends)[None, None]
    elif leading == 0:
        window = torch.full((1, 1, length, 0), -1, dtype=torch.int32, device=ends.device)
    else:
        window = sliding_window_indices(length, int(leading), ends.device)
    return union_indices(end_part[None, None].to(torch.int32), window)


def attamba_indices(length: int, chunk: int, leading: int | str, offset: int = 0,
                    device=None) -> Tensor:
    """Uniform chunking with offset: ``indices_from_ends(chunk_ends(L, P, o), leading)``."""
    return indices_from_ends(chunk_ends(length, chunk, offset, device), leading)


def _check_chunk(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RecallLabError(f"attamba {name} must be an int >= 1, got {value!r}")
    return value


class AttambaPattern(Pattern):
    """Chunk ends + leading window. ``k`` (the pattern budget argument) is the chunk size P.

    Use ``ends(L)`` once per forward and hand the same ends to the key/value SSMs (as
    ``chunk_starts(ends)``) and to ``indices_for(ends)``; ``forward(q, k)`` does both steps for
    callers that only need the indices.
    """

    name = "attamba"

    def __init__(self, chunk: int, leading: int | str | None = None, chunking: str = "uniform",
                 offset: int = 0, layer: int = 0, n_layers: int = 1, seed: int = 0,
                 eval_chunking: str | None = None, eval_chunk: int | None = None) -> None:
        super().__init__()
        self.chunk = _check_chunk("chunk size P", chunk)
        self.budget = self.chunk
        leading = self.chunk if leading is None else leading
        if leading != "chunk" and (isinstance(leading, bool) or not isinstance(leading, int)
                                   or leading < 0):
            raise RecallLabError(f"attamba leading must be an int >= 0 or 'chunk', got {leading!r}")
        for c in (chunking, eval_chunking):
            if c is not None and c not in CHUNKINGS:
                raise RecallLabError(f"attamba chunking must be one of {', '.join(CHUNKINGS)}, "
                                     f"got {c!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < chunk:
            raise RecallLabError(f"attamba offset must be an int in [0, P={chunk}), got {offset!r}")
        if not 0 <= layer < max(1, n_layers):
            raise RecallLabError(f"attamba layer {layer} is not in [0, n_layers={n_layers})")
        self.leading, self.chunking, self.offset = leading, chunking, offset
        self.layer, self.n_layers, self.seed = layer, n_layers, seed
        self.eval_chunking = eval_chunking
        self.eval_chunk = None if eval_chunk is None else _check_chunk("eval_chunk", eval_chunk)

    def setting(self) -> tuple[str, int]:
        """(chunking, P) in force now: the eval options apply in eval mode only."""
        if self.training:
            return self.chunking, self.chunk
        return self.eval_chunking or self.chunking, self.eval_chunk or self.chunk

    def ends(self, length: int, device=None) -> Tensor:
        """bool [L] chunk ends of this layer in the current mode."""
        chunking, chunk = self.setting()
        if chunking == "uniform":
            return chunk_ends(length, chunk, min(self.offset, chunk - 1), device)
        if chunking == "cyclic":
            return chunk_ends(length, chunk, cyclic_offset(chunk, self.layer, self.n_layers),
                              device)
        if self.training:  # fresh sizes per step, from the global (seedable) RNG
            gen = torch.Generator().manual_seed(int(torch.randint(0, 2**62, ())))
        else:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.layer)
        return random_chunk_ends(length, chunk, gen, device)

    def indices_for(self, ends: Tensor) -> Tensor:
        return indices_from_ends(ends, self.leading)

    def max_keys(self, length: int) -> int:
        """Most keys a query can get at length L under uniform chunking (the KV-cache size)."""
        window = self.chunk if self.leading == "chunk" else self.leading
        return -(-length // self.chunk) + window

    def forward(self, q: Tensor, k: Tensor, v: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        length = check_qk(q, k)
        return self.indices_for(self.ends(length, q.device)), None

    def decoder(self) -> AttambaDecoder:
        return AttambaDecoder(self)

    def extra_repr(self) -> str:
        return (f"P={self.chunk}, leading={self.leading!r}, chunking={self.chunking!r}, "
                f"offset={self.offset}, layer={self.layer}/{self.n_layers}")


class AttambaDecoder(Decoder):
    """Decode state of the attamba pattern (Eq. 6-7): the keys/values of the chunk ends so far
    plus the leading window, at most ceil(t/P) + leading (grows as L/P). The ends come from the
    pattern (the mode it is in) and are extended by doubling: they never depend on the length
    asked for (the pattern is causal), so a prefix of them is the decode's. Chunk ends are
    kept as the Transformer's KV cache keeps keys (`FullDecoder`: capacity doubles; a step costs
    one copy of them, no Python loop over them); the leading window's other keys sit in a small
    dict."""

    growth = "L/P"

    def __init__(self, pattern: AttambaPattern) -> None:
        super().__init__()
        self.pattern = pattern
        self.ends = torch.zeros(0, dtype=torch.bool)
        self.stored = FullDecoder()  # the chunk ends' keys and values, in arrival order
        self.end_pos = torch.zeros(0, dtype=torch.int64)  # their positions
        self.window: dict[int, tuple[Tensor, Tensor]] = {}  # in the leading window, not an end

    def is_end(self, t: int) -> bool:
        if t >= self.ends.numel():
            self.ends = self.pattern.ends(max(256, 2 * (t + 1))).cpu()
        return bool(self.ends[t])

    def starts_chunk(self, t: int) -> bool:
        """Position t starts a chunk (the key/value SSMs restart there)."""
        return t == 0 or self.is_end(t - 1)

    def _in_window(self, pos: int, t: int) -> bool:
        lead = self.pattern.leading
        if lead == "chunk":  # own partial chunk: no end in [pos, t)
            return all(not self.is_end(p) for p in range(pos, t))
        return t - int(lead) < pos <= t

    def _step(self, q: Tensor, k: Tensor, v: Tensor) -> Keys:
        t = self.t
        if self.is_end(t):
            self.stored.step(q, k, v)
            self.end_pos = self.ends[:t + 1].nonzero().flatten().to(k.device)
        else:
            self.window[t] = (k, v)
        for pos in [p for p in self.window if not self._in_window(p, t)]:
            del self.window[pos]  # out of the leading window and not an end: never read again
        n = self.stored.t
        ks = [self.stored.k[..., :n, :]] if n else []
        vs = [self.stored.v[..., :n, :]] if n else []
        ps = [self.end_pos] if n else []
        if self.window:
            ks.append(torch.stack([kv[0] for kv in self.window.values()], dim=-2))
            vs.append(torch.stack([kv[1] for kv in self.window.values()], dim=-2))
            ps.append(torch.tensor(list(self.window), dtype=torch.int64, device=k.device))
        if not ps:
            return Keys(torch.zeros(1, 1, 0, dtype=torch.int64, device=k.device),
                        k.new_zeros(*k.shape[:2], 0, k.shape[-1]),
                        v.new_zeros(*v.shape[:2], 0, v.shape[-1]))
        return Keys(torch.cat(ps)[None, None], torch.cat(ks, dim=-2), torch.cat(vs, dim=-2))
