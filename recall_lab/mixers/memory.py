"""A layer written as a memory, outside training: the no-decay construction of a zoo row's layer.

A mixer may describe its recurrence as an associative memory through one optional method,
``memory_spec() -> MemorySpec | None`` (None: the layer holds no pair at query time, as a short
sliding window). A mixer without the method has no constructed capacity ("n/a"). The lab's zoo
offers it; docs/mixers.md documents it for users' mixers.

The construction (docs/results/memory-theory/README.md writes it out for numpy), per seed:

- **keys**: n distinct raw keys per head, k_i^h ~ N(0, I_{d_k}) ("random"), or a frame of low
  coherence per head ("designed": orthonormal while n <= d_k, else unit vectors spread apart by
  `low_coherence_frame`), times sqrt(d_k) so that both sets have the Gaussian keys' mean square
  norm. A `shared_keys` spec (Mamba2: B in R^{d_state} shared by the heads) draws one key set
  for all heads. Keys pass the layer's key path
  (`key_map`); queries are the same raw keys through the query path (the map, times
  `query_scale`);
- **values**: y_i uniform over the |V| = 16 values (repeats happen, as in MQAR), through a
  codebook E [16, heads * d_v] with orthonormal rows: v_i = E[y_i], split into heads;
- **write**: the n pairs in a random order per table, every decay at 1: superposed outer
  products (``rule = "sum"``: S = sum_i phi(k_i) v_i^T, and the normaliser z = sum_i phi(k_i))
  or the delta rule with beta = 1 (``rule = "delta"``: S <- S + k (v - S^T k)^T);
- **read**: o_j = S^T q_j per head after the layer's normaliser ("z": divided by z^T q_j + eps;
  "rms_head": RMSNorm per head without gain; "rms_all": RMSNorm over the concatenation, which
  leaves the argmax unchanged), concatenated over heads; the prediction is argmax_c <o_j, E_c>;
- **score**: the mean accuracy over the n queries of each of `tables` tables (fresh values and
  order, the seed's keys); the seed is solved at a mean >= 0.95, as a trained run is.

Order matters only to the delta rule. Its final state is computed in closed form (the WY form of
`deltanet.py`): with the keys in write order, U solves (I + tril(K K^T, -1)) U = V and S = K^T U.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from recall_lab.generators.errors import RecallLabError

RULES = ("sum", "delta")
KEY_MAPS = ("identity", "l2", "elu", "taylor")
NORMALISERS = ("z", "rms_head", "rms_all", "none")
KEY_SETS = ("random", "designed")
N_VALUES = 16
SOLVE_AT = 0.95
_EPS = 1e-6


@dataclass(frozen=True)
class MemorySpec:
    """A layer's recurrence as a memory (module docstring): its rule, heads, raw key and value
    widths per head, key path, query scale, normaliser, and whether the heads share keys."""

    rule: str
    heads: int
    key_width: int
    value_width: int
    key_map: str = "identity"
    query_scale: float = 1.0
    normaliser: str = "none"
    shared_keys: bool = False

    def __post_init__(self) -> None:
        for name, value, choices in (("rule", self.rule, RULES),
                                     ("key_map", self.key_map, KEY_MAPS),
                                     ("normaliser", self.normaliser, NORMALISERS)):
            if value not in choices:
                raise RecallLabError(f"memory spec: {name} must be one of {list(choices)}, "
                                     f"got {value!r}")
        if min(self.heads, self.key_width, self.value_width) < 1:
            raise RecallLabError("memory spec: heads and widths must be >= 1")

    @property
    def state(self) -> int:
        """Numbers in the memory (the normaliser's sum included), per layer."""
        feats = phi_width(self.key_map, self.key_width)
        return self.heads * feats * (self.value_width + int(self.normaliser == "z"))


def phi_width(key_map: str, width: int) -> int:
    return 1 + width + width * width if key_map == "taylor" else width


def phi(key_map: str, x: torch.Tensor) -> torch.Tensor:
    """The key path over the last axis (mixers/_linear.py's maps, and the delta rules' L2 norm)."""
    if key_map == "identity":
        return x
    if key_map == "l2":
        return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + _EPS)
    if key_map == "elu":
        return torch.nn.functional.elu(x) + 1.0
    d = x.shape[-1]
    x2 = (x[..., :, None] * x[..., None, :]).flatten(-2) / (math.sqrt(2.0) * math.sqrt(d))
    return torch.cat([torch.ones_like(x[..., :1]), x / d ** 0.25, x2], dim=-1)


def spec_of(mixer: object) -> MemorySpec | None | str:
    """A mixer's memory: its `memory_spec()`; "n/a" when it offers none."""
    hook = getattr(mixer, "memory_spec", None)
    if not callable(hook):
        return "n/a"
    spec = hook()
    if spec is not None and not isinstance(spec, MemorySpec):
        raise RecallLabError(f"{type(mixer).__name__}.memory_spec() returned "
                             f"{type(spec).__name__}, expected MemorySpec or None")
    return spec


def low_coherence_frame(sets: int, n: int, d: int, generator: torch.Generator,
                        iterations: int = 300) -> torch.Tensor:
    """`sets` independent frames of n unit vectors in R^d: orthonormal when n <= d; else spread
    by tangent gradient steps on sum_{i != j} |<x_i, x_j>|^p, p raised 4, 8, 16, 32 (towards
    the largest inner product, the coherence), renormalised after each step (d = 1: signs).
    [sets, n, d], float64. Measured: six lines in the plane reach coherence 0.874-0.877 (the
    optimum is cos(pi / 6) = 0.866); 40 in R^32 0.090-0.094 (Welch's bound 0.080)."""
    if n <= d:
        q, _ = torch.linalg.qr(torch.randn(sets, d, d, generator=generator, dtype=torch.float64))
        return q[..., :n].transpose(-1, -2).contiguous()
    x = torch.randn(sets, n, d, generator=generator, dtype=torch.float64)
    x = x / x.norm(dim=-1, keepdim=True)
    if d == 1:
        return x.sign()
    off = 1.0 - torch.eye(n, dtype=torch.float64)
    powers = (4, 8, 16, 32)
    per = iterations // len(powers)
    for p in powers:
        for it in range(per):
            g = (x @ x.transpose(-1, -2)) * off
            grad = (g.abs() ** (p - 1) * g.sign()) @ x
            grad = grad - (grad * x).sum(-1, keepdim=True) * x  # along the sphere
            scale = grad.norm(dim=-1, keepdim=True).amax(dim=-2, keepdim=True) + 1e-300
            x = x - (0.1 * (1 - it / per) + 0.01) * grad / scale
            x = x / x.norm(dim=-1, keepdim=True)
    return x


def raw_keys(spec: MemorySpec, n: int, keys: str, generator: torch.Generator) -> torch.Tensor:
    """[heads, n, d_k] raw keys (one set repeated over the heads when they share keys)."""
    if keys not in KEY_SETS:
        raise RecallLabError(f"keys must be one of {list(KEY_SETS)}, got {keys!r}")
    sets = 1 if spec.shared_keys else spec.heads
    d = spec.key_width
    if keys == "random":
        k = torch.randn(sets, n, d, generator=generator, dtype=torch.float64)
    else:
        k = low_coherence_frame(sets, n, d, generator) * math.sqrt(d)
    return k.expand(spec.heads, n, d) if spec.shared_keys else k


def codebook(width: int, generator: torch.Generator) -> torch.Tensor:
    """[16, width] with orthonormal rows (width >= 16)."""
    if width < N_VALUES:
        raise RecallLabError(f"the value width ({width}) must hold {N_VALUES} orthonormal codes")
    q, _ = torch.linalg.qr(torch.randn(width, N_VALUES, generator=generator,
                                       dtype=torch.float64))
    return q.T.contiguous()


def read_out(spec: MemorySpec, k_raw: torch.Tensor, e: torch.Tensor, y: torch.Tensor,
             order: torch.Tensor | None = None) -> torch.Tensor:
    """The layer's outputs at the n queries, after its normaliser, heads concatenated:
    k_raw [h, n, d_k] raw keys, e [16, h * d_v] codes, y [t, n] values, `order` [t, n] the
    write order (the delta rule's; None: as given) -> [t, n, h * d_v], queries in key order."""
    tables, n = y.shape
    v = e[y].view(tables, n, spec.heads, spec.value_width).transpose(1, 2)  # [t, h, n, d_v]
    fk = phi(spec.key_map, k_raw)
    fq = phi(spec.key_map, k_raw) * spec.query_scale
    if spec.rule == "sum":  # order-free: one score matrix for every table
        a = fq @ fk.transpose(-1, -2)  # [h, n(query), n(key)]
        o = a @ v  # [t, h, n, d_v]
        z = a.sum(-1)[..., None]  # [h, n, 1]
    else:
        if order is None:
            order = torch.arange(n).expand(tables, n)
        ko = fk[:, order].transpose(0, 1)  # [t, h, n, d_k] in write order
        vo = torch.gather(v, 2, order[:, None, :, None].expand_as(v))
        kk = ko @ ko.transpose(-1, -2)
        u = torch.linalg.solve_triangular(kk, vo, upper=False, unitriangular=True)
        o = fq @ (ko.transpose(-1, -2) @ u)  # the state K^T U [t, h, d_k, d_v], read
        z = None
    if spec.normaliser == "z":
        o = o / (z + _EPS)
    elif spec.normaliser == "rms_head":
        o = o * torch.rsqrt((o * o).mean(-1, keepdim=True) + 1e-5)
    o = o.transpose(1, 2).reshape(tables, n, -1)
    if spec.normaliser == "rms_all":
        o = o * torch.rsqrt((o * o).mean(-1, keepdim=True) + 1e-5)
    return o


def seed_accuracy(spec: MemorySpec, n: int, keys: str = "random", tables: int = 512,
                  seed: int = 0) -> float:
    """The mean accuracy over `tables` tables of one seed (module docstring)."""
    gen = torch.Generator().manual_seed(seed)
    k_raw = raw_keys(spec, n, keys, gen).float()  # [h, n, d_k]
    e = codebook(spec.heads * spec.value_width, gen).float()  # [16, h * d_v]
    y = torch.randint(0, N_VALUES, (tables, n), generator=gen)
    order = None
    if spec.rule == "delta":
        order = torch.argsort(torch.rand(tables, n, generator=gen), dim=1)  # write order
    pred = (read_out(spec, k_raw, e, y, order) @ e.T).argmax(-1)
    return float((pred == y).double().mean())


def solved_seeds(spec: MemorySpec, n: int, keys: str = "random", seeds: int = 20,
                 tables: int = 512, solve_at: float = SOLVE_AT, first: int = 0) -> list[bool]:
    """Per seed first .. first + seeds - 1: is its mean accuracy at n pairs >= solve_at?"""
    return [seed_accuracy(spec, n, keys, tables, s) >= solve_at
            for s in range(first, first + seeds)]
