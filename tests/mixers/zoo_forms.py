"""Helpers of the zoo's tests: tie a mixer's chunked forward, its recurrent reference loop and its
decode `step`, values and every gradient (the input's and each parameter's), in float64."""

from __future__ import annotations

import torch
from torch import nn


def _run(mixer: nn.Module, x: torch.Tensor, cotangent: torch.Tensor, decode: bool):
    x = x.clone().requires_grad_(True)
    if decode:
        cache = mixer.allocate_cache(x.shape[0], x.shape[1])
        y = torch.stack([mixer.step(x[:, t], cache) for t in range(x.shape[1])], dim=1)
    else:
        y = mixer(x)
    (y * cotangent).sum().backward()
    grads = {name: p.grad.clone() for name, p in mixer.named_parameters()}
    return y.detach(), x.grad, grads


def forms_agree(cls, fast: str, reference: str = "recurrent", *, length: int = 37,
                d_model: int = 16, batch: int = 2, seed: int = 0, rtol: float = 1e-9,
                **options) -> None:
    """cls(d_model, impl=fast), cls(d_model, impl=reference) and the step loop of the first give
    the same outputs and the same gradients (for a random cotangent) in float64; and every
    parameter gets a gradient that is not all zero, so the tie covers every parameter."""
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, length, d_model, generator=gen, dtype=torch.float64)
    cotangent = torch.randn(batch, length, d_model, generator=gen, dtype=torch.float64)
    runs = {}
    for name, impl, decode in (("fast", fast, False), ("reference", reference, False),
                               ("step", fast, True)):
        torch.manual_seed(seed)
        mixer = cls(d_model, impl=impl, **options).double()
        runs[name] = _run(mixer, x, cotangent, decode)
    y, gx, grads = runs["fast"]
    assert torch.isfinite(y).all() and y.abs().max() > 0
    scale = 1.0 + y.abs().max().item()
    for name in ("reference", "step"):
        y2, gx2, grads2 = runs[name]
        torch.testing.assert_close(y2, y, rtol=rtol, atol=rtol * scale, msg=f"{name}: output")
        torch.testing.assert_close(gx2, gx, rtol=rtol, atol=rtol * scale,
                                   msg=f"{name}: input gradient")
        assert grads2.keys() == grads.keys()
        for p, g in grads.items():
            torch.testing.assert_close(grads2[p], g, rtol=rtol,
                                       atol=rtol * (1.0 + g.abs().max().item()),
                                       msg=f"{name}: gradient of {p}")
    dead = [p for p, g in grads.items() if not g.abs().max() > 0]
    assert not dead, f"parameters without a gradient: {dead}"


def recurrent(cache) -> int:
    """Numbers of recurrent state in a zoo mixer's decode cache, by hand: its tensor fields but
    the short convolution's window (`conv`) and the per-token caches its class marks "conv" in
    `state_parts` (Mamba-3's previous k and x, its angle), which the convention counts apart."""
    apart = {"conv"} | {n for n, part in getattr(type(cache), "state_parts", {}).items()
                        if part == "conv"}
    return sum(t.numel() for name, t in vars(cache).items()
               if isinstance(t, torch.Tensor) and name not in apart)


def fla_naive(op: str):
    """FLA's `fla/ops/<op>/naive.py` (plain torch loops: the oracle), loaded by itself: importing
    the `fla` package runs its layers' and models' imports (transformers, Triton), about 30 s on
    the CI machine, for functions that need only torch and einops. Skips where FLA is missing."""
    import importlib.util
    from pathlib import Path

    import pytest

    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("flash-linear-attention (the oracle) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "ops" / op / "naive.py"
    if not path.is_file():
        pytest.skip(f"this flash-linear-attention has no {path}")
    module_spec = importlib.util.spec_from_file_location(f"fla_naive_{op}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def fla_function(relpath: str, name: str):
    """One top-level torch function of an FLA module (`fla/<relpath>`), compiled by itself from
    its source: the modules that hold FLA's torch references of RWKV-7's layer pieces import
    Triton and the `fla` package (about 35 s here) for functions that need only torch. Its
    decorators are dropped. Skips where FLA or the function is missing."""
    import ast
    import importlib.util
    from pathlib import Path

    import pytest

    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("flash-linear-attention (the oracle) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / relpath
    found = [node for node in (ast.parse(path.read_text()).body if path.is_file() else [])
             if isinstance(node, ast.FunctionDef) and node.name == name]
    if not found:
        pytest.skip(f"this flash-linear-attention has no {name} in {path}")
    found[0].decorator_list = []
    namespace = {"torch": torch}
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]
