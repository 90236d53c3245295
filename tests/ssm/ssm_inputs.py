"""Random inputs for scan tests (shared helper, not a test module)."""

from __future__ import annotations

import torch


def scan_inputs(b, d, n, length, groups, dtype=torch.float64, seed=0, delta_scale=1.0):
    """Inputs for selective_scan in mamba-ssm layouts; B/C grouped when groups > 0."""
    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    bc = (b, n, length) if groups == 0 else (b, groups, n, length)
    return dict(
        u=r(b, d, length),
        delta=r(b, d, length) * delta_scale,
        A=-torch.rand(d, n, generator=gen, dtype=dtype) * 2 - 0.1,
        B=r(*bc),
        C=r(*bc),
        D=r(d),
        z=r(b, d, length),
        delta_bias=r(d) * 0.5,
    )


def ssd_inputs(b, length, h, p, g, n, dtype=torch.float64, seed=0, dt_scale=1.0):
    """Inputs for ssd in mamba-ssm layouts (dt is raw; use dt_softplus=True)."""
    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    return dict(
        x=r(b, length, h, p),
        dt=r(b, length, h) * dt_scale,
        A=-torch.rand(h, generator=gen, dtype=dtype) * 4 - 0.1,
        B=r(b, length, g, n),
        C=r(b, length, g, n),
        D=r(h),
        z=r(b, length, h, p),
        dt_bias=r(h) * 0.5,
        initial_states=r(b, h, p, n),
    )
