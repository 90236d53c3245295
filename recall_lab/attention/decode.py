"""Decode state of a pattern: which keys one new query reads, kept in bounded memory where the
pattern allows it (the joint-recall paper's inference case; docs/decoding.md).

A `Decoder` takes one token's ``q, k: [B, H, d]`` and ``v: [B, H, dv]`` at position ``t`` (its own
counter) and returns the `Keys` query t attends to: their positions and their keys and values.
`attend` is the one softmax over them (the step form of `sparse_attention`: a row without keys
gives zeros). Every pattern module gets its decoder from `make_decoder(pattern)`:
``pattern.decoder()`` where the family defines one (next to its index function: fixed.py, lsh.py,
ks.py, seattn.py, attamba.py; `UnionPattern` unites its parts'), else `PrefixDecoder`, which keeps
every q, k, v and re-runs the pattern on the prefix: exact for any causal pattern (row t reads
tokens <= t only), with memory and time growing as L. So a new pattern decodes without any decoder
of its own; a bounded one is an optimisation that the generic decode test ties to the parallel form.

Why a bounded state is exact here (the joint-recall paper's patterns): every key's eligibility is
fixed when it arrives: SW keeps the n - 1 positions before the current one (which arrives with
the input), D the n latest dilated positions, Sink the first n, LSH the n latest keys of each
bin (a key's bin comes from its centred key, which never changes later), KS the top-n scores so
far (a score is fixed at its position, so a key that drops out of the top-n
never returns).

`growth` of a decoder: how its memory grows with the context length L ("constant", "L/P", "L";
"log L" is a contract mixer's class, measured by `mixers/state.py` `cache_growth`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

GROWTH_ORDER = ("constant", "log L", "L/P", "L")


@dataclass
class Keys:
    """The keys one query reads: pos int64 [B|1, H|1, n] (-1 = empty slot), k [B, H, n, d],
    v [B, H, n, dv]."""

    pos: Tensor
    k: Tensor
    v: Tensor


def attend(q: Tensor, keys: Keys, scale: float) -> Tensor:
    """softmax(scale q . k_s) over the non-empty slots, times v: ``[B, H, dv]`` (zeros without
    any key, as `sparse_attention`)."""
    if keys.k.shape[-2] == 0:
        return q.new_zeros(*q.shape[:-1], keys.v.shape[-1])
    s = (keys.k @ q.unsqueeze(-1)).squeeze(-1) * scale  # [B, H, n]
    valid = (keys.pos >= 0).expand_as(s)
    s = s.masked_fill(~valid, float("-inf"))
    m = s.amax(-1, keepdim=True)
    w = torch.exp(s - torch.where(torch.isfinite(m), m, 0.0))
    den = w.sum(-1, keepdim=True)
    w = torch.where(den > 0, w / den.clamp_min(torch.finfo(w.dtype).tiny), 0.0)
    return (w.unsqueeze(-2) @ keys.v).squeeze(-2)


def tensor_bytes(obj, seen: set | None = None, count: bool = False) -> int:
    """Bytes of every tensor reachable from obj (dataclasses, plain objects, lists, dicts);
    `count`: their numbers of elements instead."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if torch.is_tensor(obj):
        return obj.numel() * (1 if count else obj.element_size())
    if isinstance(obj, dict):
        return sum(tensor_bytes(v, seen, count) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v, seen, count) for v in obj)
    if isinstance(obj, torch.nn.Module):  # parameters are not decode state
        return 0
    if hasattr(obj, "__dict__"):
        return sum(tensor_bytes(v, seen, count) for v in vars(obj).values())
    return 0


class Decoder:
    """Base: ``step(q, k, v) -> Keys`` for the token at position ``self.t``, then t += 1."""

    growth = "L"

    def __init__(self) -> None:
        self.t = 0

    def step(self, q: Tensor, k: Tensor, v: Tensor) -> Keys:
        keys = self._step(q, k, v)
        self.t += 1
        return keys

    def _step(self, q: Tensor, k: Tensor, v: Tensor) -> Keys:
        raise NotImplementedError

    def nbytes(self) -> int:
        return tensor_bytes(self)


class Slots:
    """n preallocated (pos, k, v) slots per leading index ([B, H] or [B, H, bins]); allocated on
    the first write, so their size is fixed from then on."""

    def __init__(self, n: int, extra: tuple[int, ...] = ()) -> None:
        self.n, self.extra = n, extra
        self.pos: Tensor | None = None
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def ensure(self, k: Tensor, v: Tensor) -> None:
        if self.pos is None:
            lead = (*k.shape[:2], *self.extra, self.n)
            self.pos = torch.full(lead, -1, dtype=torch.int64, device=k.device)
            self.k = k.new_zeros(*lead, k.shape[-1])
            self.v = v.new_zeros(*lead, v.shape[-1])

    def write(self, slot: Tensor | int, t: int, k: Tensor, v: Tensor) -> None:
        """Write position t's k, v into `slot` (an int, or int64 [B, H] per row)."""
        self.ensure(k, v)
        if isinstance(slot, int):
            self.pos[..., slot] = t
            self.k[..., slot, :] = k
            self.v[..., slot, :] = v
            return
        idx = slot[..., None]
        self.pos.scatter_(-1, idx, torch.full_like(idx, t))
        self.k.scatter_(-2, idx[..., None].expand(*idx.shape, k.shape[-1]), k.unsqueeze(-2))
        self.v.scatter_(-2, idx[..., None].expand(*idx.shape, v.shape[-1]), v.unsqueeze(-2))

    def keys(self) -> Keys:
        return Keys(self.pos, self.k, self.v)


class SlotDecoder(Decoder):
    """Fixed patterns in n slots: `slot_of(t)` is the slot position t overwrites (None: the key is
    never read). SW: t mod n; Sink: t while t < n; D: the n latest dilated positions."""

    growth = "constant"

    def __init__(self, n: int, slot_of) -> None:
        super().__init__()
        self.slots, self.slot_of = Slots(n), slot_of

    def _step(self, q, k, v) -> Keys:
        self.slots.ensure(k, v)
        slot = self.slot_of(self.t)
        if slot is not None:
            self.slots.write(slot, self.t, k, v)
        return self.slots.keys()


class WindowDecoder(Decoder):
    """SW(n): the current token arrives with its q, k, v, so only the n - 1 keys before it are
    kept, in a ring (position t writes slot t mod (n - 1) after it is read), as a short
    convolution keeps kernel - 1 columns. The keys query t reads are those n - 1 slots and the
    current key."""

    growth = "constant"

    def __init__(self, n: int) -> None:
        super().__init__()
        self.past = Slots(n - 1)

    def _step(self, q, k, v) -> Keys:
        past = self.past
        past.ensure(k, v)
        b, h = k.shape[:2]
        here = torch.full((b, h, 1), self.t, dtype=torch.int64, device=k.device)
        keys = Keys(torch.cat([past.pos.expand(b, h, past.n), here], -1),
                    torch.cat([past.k, k.unsqueeze(-2)], -2),
                    torch.cat([past.v, v.unsqueeze(-2)], -2))
        if past.n:
            past.write(self.t % past.n, self.t, k, v)
        return keys


class FullDecoder(Decoder):
    """Every key (the Transformer's KV cache): capacity doubles, memory grows as L."""

    growth = "L"

    def __init__(self) -> None:
        super().__init__()
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self.q: Tensor | None = None
        self.keep_q = False

    def append(self, q: Tensor, k: Tensor, v: Tensor) -> None:
        t = self.t
        if self.k is None or t == self.k.shape[-2]:
            cap = max(16, 2 * t)
            grown = [x.new_zeros(*x.shape[:2], cap, x.shape[-1]) for x in (q, k, v)]
            for new, old in zip(grown, (self.q, self.k, self.v), strict=True):
                if old is not None:
                    new[..., :t, :] = old
            self.q, self.k, self.v = grown
            if not self.keep_q:
                self.q = None
        if self.keep_q:
            self.q[..., t, :] = q
        self.k[..., t, :] = k
        self.v[..., t, :] = v

    def _step(self, q, k, v) -> Keys:
        self.append(q, k, v)
        n = self.t + 1
        pos = torch.arange(n, device=k.device)[None, None]
        return Keys(pos, self.k[..., :n, :], self.v[..., :n, :])


class PrefixDecoder(FullDecoder):
    """Any causal pattern, exactly: keep every q, k, v; row t of the pattern on the prefix 0..t.
    The default for a pattern without a decoder of its own (memory and time grow as L). For a
    pattern that `takes_ids` (the oracle) it keeps the token ids too: ``step(q, k, v, ids=ids_t)``
    with ids_t int [B], and the pattern sees ``ids=`` the prefix's ids [B, t+1]."""

    def __init__(self, pattern) -> None:
        super().__init__()
        self.pattern, self.keep_q = pattern, True
        self.takes_ids = bool(getattr(pattern, "takes_ids", False))
        self.ids: Tensor | None = None

    def step(self, q: Tensor, k: Tensor, v: Tensor, ids: Tensor | None = None) -> Keys:
        if self.takes_ids:
            if ids is None:
                raise ValueError(f"pattern {self.pattern.name!r} reads token ids: "
                                 "step(q, k, v, ids=ids_t)")
            ids = ids.reshape(-1, 1).to(torch.int64)
            self.ids = ids if self.ids is None else torch.cat([self.ids, ids], 1)
        return super().step(q, k, v)

    def _step(self, q, k, v) -> Keys:
        self.append(q, k, v)
        n = self.t + 1
        qs, ks, vs = (x[..., :n, :] for x in (self.q, self.k, self.v))
        extra = {"ids": self.ids} if self.takes_ids else {}
        idx, _ = self.pattern(qs, ks, vs, **extra)
        row = idx[..., -1, :].to(torch.int64)  # [B|1, H|1, slots]
        return gather_keys(row, ks, vs)


def gather_keys(pos: Tensor, k: Tensor, v: Tensor) -> Keys:
    """Keys at positions pos [B|1, H|1, n] (-1 empty) of k [B, H, L, d], v [B, H, L, dv]."""
    b, h = k.shape[:2]
    p = pos.clamp_min(0).expand(b, h, pos.shape[-1])
    ks = k.gather(-2, p[..., None].expand(*p.shape, k.shape[-1]))
    vs = v.gather(-2, p[..., None].expand(*p.shape, v.shape[-1]))
    return Keys(pos, ks, vs)


class UnionDecoder(Decoder):
    """OR of its parts' keys: a position listed by two parts counts once (the later slot is
    emptied), as `union_indices`."""

    def __init__(self, parts: list[Decoder]) -> None:
        super().__init__()
        self.parts = parts
        self.growth = max((p.growth for p in parts), key=GROWTH_ORDER.index)

    def _step(self, q, k, v) -> Keys:
        got = [p.step(q, k, v) for p in self.parts]
        b, h = k.shape[:2]
        pos = torch.cat([g.pos.expand(b, h, g.pos.shape[-1]) for g in got], -1)
        same = (pos[..., :, None] == pos[..., None, :]) & (pos[..., None, :] >= 0)
        earlier = torch.ones(same.shape[-1], same.shape[-1], dtype=torch.bool,
                             device=pos.device).tril(-1)
        dup = (same & earlier).any(-1)
        return Keys(pos.masked_fill(dup, -1), torch.cat([g.k for g in got], -2),
                    torch.cat([g.v for g in got], -2))


def make_decoder(pattern) -> Decoder:
    """The decode state of a pattern module: its own `decoder()`, else the exact prefix one."""
    build = getattr(pattern, "decoder", None)
    return build() if callable(build) else PrefixDecoder(pattern)


__all__ = ["GROWTH_ORDER", "Decoder", "FullDecoder", "Keys", "PrefixDecoder", "SlotDecoder",
           "Slots", "UnionDecoder", "WindowDecoder", "attend", "gather_keys", "make_decoder",
           "tensor_bytes"]
