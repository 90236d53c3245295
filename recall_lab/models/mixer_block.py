"""The block around a contract mixer (arch "mixer"; recall_lab/mixers/contract.py):
x + Mixer(RMSNorm(x)), then with `block = "mlp"` x + SwiGLU(RMSNorm(x)) (zoology's
TransformerBlock with an MLP state mixer).

Decoding: through the mixer's own `allocate_cache` / `step` when it has them; otherwise by an
exact recompute over the prefix (the block keeps the normalised inputs so far and runs the
parallel forward on them at each step), whose state grows as L.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from recall_lab.config import ModelConfig
from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.contract import build_mixer, has_step, probe_mixer
from recall_lab.mixers.state import cache_growth
from recall_lab.models.blocks import MLPBlock
from recall_lab.ssm import RMSNorm


@dataclass
class PrefixCache:
    """Decode state of a mixer without `step`: its normalised inputs so far."""

    x: Tensor  # [b, max_len, d]
    t: int = 0


@dataclass
class MixerCache:
    """Decode state of a mixer with `step`: whatever its `allocate_cache` returned."""

    state: object


class MixerBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.path, kwargs = cfg.layer_mixer(layer)
        self.norm = RMSNorm(cfg.d_model, eps=1e-5)
        self.mixer = build_mixer(self.path, cfg.d_model, layer, kwargs)
        probe_mixer(self.mixer, self.path, cfg.d_model)
        self.mlp = MLPBlock(cfg) if cfg.block == "mlp" else None

    def _mix(self, h: Tensor) -> Tensor:
        y = self.mixer(h)
        if not isinstance(y, Tensor) or y.shape != h.shape:
            got = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
            raise RecallLabError(f"mixer {self.path!r}: forward returned {got}, expected "
                                 f"{tuple(h.shape)} (B, L, D)")
        return y

    def forward(self, x: Tensor, aux: list, params: list | None) -> Tensor:
        x = x + self._mix(self.norm(x))
        return x if self.mlp is None else self.mlp(x, aux, params)

    @property
    def growth(self) -> str:
        """How the mixer's decode state grows with max_len: "constant", "log L" (the same
        amount per doubling: log-linear attention's Fenwick levels) or "L", measured from
        caches allocated for three lengths (`mixers/state.py` `cache_growth`); "L" without
        `step` (the exact prefix recompute)."""
        if not has_step(self.mixer):
            return "L"
        return cache_growth(self.mixer)

    def allocate_cache(self, batch: int, max_len: int) -> MixerCache | PrefixCache:
        if has_step(self.mixer):
            return MixerCache(self.mixer.allocate_cache(batch, max_len))
        w = self.norm.weight
        return PrefixCache(w.new_zeros(batch, max_len, w.shape[0]))

    def step(self, x_t: Tensor, cache: MixerCache | PrefixCache) -> Tensor:
        h = self.norm(x_t)
        if isinstance(cache, PrefixCache):
            cache.x[:, cache.t] = h
            cache.t += 1
            y = self._mix(cache.x[:, : cache.t])[:, -1]
        else:
            y = self.mixer.step(h, cache.state)
            if isinstance(y, tuple):  # (y_t, new cache)
                y, cache.state = y
        x_t = x_t + y
        return x_t if self.mlp is None else self.mlp.step(x_t, None)


def mixer_blocks(cfg: ModelConfig) -> list[nn.Module]:
    return [MixerBlock(cfg, layer=i) for i in range(cfg.n_layers)]
