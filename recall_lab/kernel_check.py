"""First-call self-checks of the GPU kernels, before the dispatchers trust them.

No GPU has run these kernels in this lab's CI (they are tested on CPU through the Triton
interpreter only), and a compiled kernel can be wrong where the interpreter is right (a Triton or
driver version, an unsupported shape). So the first time a process would dispatch to one, the
dispatcher (``attention/sparse.py`` for the Triton sparse-attention op, ``ssm/backend.py`` for
mamba-ssm's scans) runs one small case through the kernel and through the torch backend and calls
:func:`checked`: when the outputs or gradients differ by more than the kernel's tolerance (or the
kernel raises), the kernel is marked failed, one warning line says so, and the dispatcher uses
the torch backend for the rest of the process. Explicitly requested backends (``backend="triton"``)
are never checked or replaced: that is how the tests compare the kernel itself.

:func:`results` holds every verdict of this process; ``recall-lab info`` shows them.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["KernelCheckWarning", "checked", "compare", "errors", "results", "describe"]

_RESULTS: dict[str, dict] = {}


class KernelCheckWarning(RuntimeWarning):
    """A GPU kernel failed its first-call self-check; the torch backend runs instead."""


def _rel_err(a: Tensor, b: Tensor) -> float:
    """max |a - b| over max(1, max |b|): relative to the reference's scale, so a gradient with
    a few large entries is not judged by its smallest ones."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    if a.shape != b.shape:
        return math.inf
    if a.numel() == 0:
        return 0.0
    return float((a - b).abs().max() / b.abs().max().clamp_min(1.0))


def compare(fast: Callable[..., Tensor], ref: Callable[..., Tensor], inputs: dict[str, Tensor],
            seed: int = 0) -> float:
    """Largest relative error (see ``_rel_err``) between ``fast(**inputs)`` and
    ``ref(**inputs)``, over the output and the gradient of every floating input, for one shared
    random output gradient."""
    return max(errors(fast, ref, inputs, seed).values())


def errors(fast: Callable[..., Tensor], ref: Callable[..., Tensor], inputs: dict[str, Tensor],
           seed: int = 0) -> dict[str, float]:
    """:func:`compare`'s relative errors one by one: "out", then "d<name>" for the gradient of
    each floating input. A check that returns them lets its verdict name the tensor that is off
    (on the H200, FLA's ELU linear attention failed in bf16 and the verdict could not say where)."""
    def run(fn: Callable[..., Tensor]) -> list[Tensor]:
        leaves = {k: v.detach().clone().requires_grad_(v.is_floating_point())
                  for k, v in inputs.items()}
        out = fn(**leaves)
        gen = torch.Generator().manual_seed(seed)
        grad = torch.randn(out.shape, generator=gen, dtype=torch.float32).to(out)
        diff = [v for v in leaves.values() if v.requires_grad]
        grads = torch.autograd.grad(out, diff, grad, allow_unused=True)
        return [out] + [torch.zeros_like(v) if g is None else g
                        for v, g in zip(diff, grads, strict=True)]

    names = ["out"] + [f"d{n}" for n, v in inputs.items() if v.is_floating_point()]
    return {n: _rel_err(a, b) for n, a, b in zip(names, run(fast), run(ref), strict=True)}


@contextlib.contextmanager
def _plain_autograd():
    """The first dispatch often happens in evaluation (no_grad, inference mode) or under bf16
    autocast: the check turns them off, so it always builds a graph in the inputs' dtype."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.inference_mode(False))
        stack.enter_context(torch.enable_grad())
        stack.enter_context(torch.autocast("cpu", enabled=False))
        if torch.cuda.is_available():
            stack.enter_context(torch.autocast("cuda", enabled=False))
        yield


def checked(name: str, check: Callable[[], float | dict[str, float]], tol: float,
            fallback: str) -> bool:
    """Whether kernel `name` may run: its first call in this process runs `check()` (the
    kernel's relative error against the torch backend on one small case, see :func:`compare`,
    or each tensor's, see :func:`errors`: then the verdict's "worst" names the largest); an
    error above `tol`, a non-finite one or an exception marks it failed and warns once, naming
    `fallback`. Later calls return the recorded verdict without checking again."""
    if name not in _RESULTS:
        worst = None
        try:
            with _plain_autograd():
                got = check()
            if isinstance(got, dict):  # NaN first: max() would skip past it
                worst = next((n for n, e in got.items() if not math.isfinite(e)),
                             max(got, key=got.get))
                got = got[worst]
            err, reason = float(got), None
        except Exception as exc:  # a kernel that cannot run at all is a failed check too
            err, reason = None, (f"{type(exc).__name__}: {exc}".splitlines() or ["?"])[0][:200]
        ok = err is not None and math.isfinite(err) and err <= tol
        _RESULTS[name] = {"ok": ok, "max_rel_err": err, "tol": tol, "fallback": fallback,
                          "error": reason, "worst": worst}
        if not ok:
            where = f" (in {worst})" if worst else ""
            why = reason or (f"max relative error {err:.3g}{where} > {tol:g} against the torch "
                             "backend")
            warnings.warn(f"{name} failed its self-check ({why}); using {fallback} instead",
                          KernelCheckWarning, stacklevel=3)
    return _RESULTS[name]["ok"]


def results() -> dict[str, dict]:
    """Every self-check verdict of this process: name -> ok, max_rel_err, tol, fallback, error."""
    return {k: dict(v) for k, v in _RESULTS.items()}


def describe() -> list[tuple[str, str]]:
    """One (kernel, verdict) row per self-check run in this process, for ``recall-lab info``."""
    rows = []
    for name, r in _RESULTS.items():
        if r["ok"]:
            rows.append((name, f"self-check passed (max rel err {r['max_rel_err']:.1e} <= "
                               f"{r['tol']:g})"))
        else:
            where = f" in {r['worst']}" if r.get("worst") else ""
            why = r["error"] or f"max rel err {r['max_rel_err']:.3g}{where} > {r['tol']:g}"
            rows.append((name, f"self-check FAILED ({why}): using {r['fallback']}"))
    return rows
