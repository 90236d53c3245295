"""The zoo mixers' dispatch to FLA's chunked kernels (recall_lab/mixers/fla_kernels.py), checked on
the CPU. FLA's Triton kernels need a GPU (tests/gpu/test_gpu_zoo.py runs them), but its plain-torch
`fla/ops/*/naive.py` references take the kernels' arguments (scale, normalisation flags, log-space
decays); put in the kernels' place as on a CUDA machine (`on_cuda` true, `kernel` returning them),
each mixer's forward goes through its mapping and the first-call self-check and must equal its
torch chunked form, output and every gradient (the input's and each parameter's), in float32 and
float64. A kernel with a wrong convention fails the self-check and the mixer falls back; on the
CPU, without the stand-in, FLA is never asked. Skips where FLA is not installed."""

from __future__ import annotations

import warnings

import pytest
import torch

from recall_lab import kernel_check
from recall_lab.mixers import fla_kernels
from recall_lab.mixers.based import Based
from recall_lab.mixers.deltanet import DeltaNet, GatedDeltaNet
from recall_lab.mixers.gla import GatedLinearAttention
from recall_lab.mixers.linear_attn import LinearAttention
from tests.mixers.zoo_forms import fla_naive

# (class, options, the FLA op it dispatches to); odd head widths exercise the even padding
CASES = {
    "linear-attn elu": (LinearAttention, {"num_heads": 2, "feature_dim": 5}, "linear_attn"),
    "linear-attn identity": (LinearAttention, {"num_heads": 2, "feature_map": "identity",
                                               "conv_size": 0}, "linear_attn"),
    "linear-attn taylor": (LinearAttention, {"num_heads": 2, "feature_map": "taylor",
                                             "feature_dim": 3}, "based"),
    "based": (Based, {"layer_idx": 1, "num_heads": 2, "feature_dim": 4}, "based"),
    "deltanet": (DeltaNet, {"num_heads": 2, "expand_k": 0.5}, "delta_rule"),
    "gated-deltanet": (GatedDeltaNet, {"num_heads": 2, "conv_size": 0}, "gated_delta_rule"),
    "gla": (GatedLinearAttention, {"num_heads": 2}, "gla"),
}


@pytest.fixture(autouse=True)
def _fresh_verdicts(monkeypatch):
    """Each test starts as a fresh process would: no self-check has run."""
    monkeypatch.setattr(kernel_check, "_RESULTS", {})


def _naive_kernels() -> dict:
    """FLA's naive references with the kernels' signatures: where a reference is head-first
    ([B, H, T, .] where the kernel takes [B, T, H, .]) or fixes the scale at K^-1/2, the
    adapter says so and converts; nothing else is changed."""
    la, based, delta, gated, gla = (fla_naive(op) for op in
                                    ("linear_attn", "based", "delta_rule", "gated_delta_rule",
                                     "gla"))

    def linear_attn(q, k, v, scale, normalize):
        return la.naive_recurrent_linear_attn(q, k, v, scale=scale, normalize=normalize)

    def fused_chunk_based(q, k, v, scale, use_norm):  # naive_parallel_based is head-first
        o = based.naive_parallel_based(*(t.transpose(1, 2) for t in (q, k, v)), scale=scale,
                                       use_norm=use_norm)
        return o.transpose(1, 2)

    def delta_rule(q, k, v, beta, scale):  # head-first, scale fixed at K^-1/2
        q = q * (scale * q.shape[-1] ** 0.5)
        o, _ = delta.delta_rule_recurrence(*(t.transpose(1, 2) for t in (q, k, v, beta)))
        return o.transpose(1, 2), None

    def gla_fn(q, k, v, g, scale):  # scale fixed at K^-1/2
        return gla.naive_recurrent_gla(q * (scale * q.shape[-1] ** 0.5), k, v, g)

    return {"linear_attn": linear_attn, "based": fused_chunk_based, "delta_rule": delta_rule,
            "gated_delta_rule": gated.naive_recurrent_gated_delta_rule, "gla": gla_fn}


def _as_on_cuda(monkeypatch, kernels: dict) -> list[str]:
    """Dispatch as on a CUDA machine whose FLA kernels are `kernels`; returns the log of calls."""
    calls: list[str] = []

    def counted(op):
        return lambda *a, **kw: calls.append(op) or kernels[op](*a, **kw)

    monkeypatch.setattr(fla_kernels, "on_cuda", lambda t: True)
    monkeypatch.setattr(fla_kernels, "kernel", lambda op: (counted(op), "ok"))
    # the naive loops take any float dtype (chunk_delta_rule's refusal of float32 is the
    # Triton kernel's; test_what_stays_on_the_torch_form keeps it)
    monkeypatch.setattr(fla_kernels, "DTYPES", {op: (torch.float32, torch.float64)
                                                for op in fla_kernels.KERNELS})
    return calls


def _run(mixer, x, cotangent):
    x = x.clone().requires_grad_(True)
    y = mixer(x)
    (y * cotangent).sum().backward()
    return y.detach(), x.grad, {n: p.grad.clone() for n, p in mixer.named_parameters()}


def _mixer(cls, options, dtype):
    torch.manual_seed(0)
    return cls(12, **options).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(CASES))
def test_mixer_through_the_mapping_equals_its_torch_chunked_form(monkeypatch, case, dtype):
    cls, options, op = CASES[case]
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 37, 12, generator=gen).to(dtype)
    cotangent = torch.randn(2, 37, 12, generator=gen).to(dtype)
    y, gx, grads = _run(_mixer(cls, options, dtype), x, cotangent)  # the CPU: torch form
    calls = _as_on_cuda(monkeypatch, _naive_kernels())
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernel_check.KernelCheckWarning)
        y2, gx2, grads2 = _run(_mixer(cls, options, dtype), x, cotangent)
    assert calls == [op, op]  # the self-check, then the mixer's own call
    (verdict,) = kernel_check.results().values()
    assert verdict["ok"] and verdict["max_rel_err"] < 1e-4, verdict
    # the naive references compute in float32 whatever the inputs' dtype
    tol = 2e-5 if dtype == torch.float64 else 1e-4
    scale = 1.0 + y.abs().max().item()
    torch.testing.assert_close(y2, y, rtol=tol, atol=tol * scale, msg="output")
    torch.testing.assert_close(gx2, gx, rtol=tol, atol=tol * (1 + gx.abs().max().item()),
                               msg="input gradient")
    assert grads2.keys() == grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(grads2[name], g, rtol=tol,
                                   atol=tol * (1.0 + g.abs().max().item()),
                                   msg=f"gradient of {name}")


def test_a_kernel_with_a_wrong_convention_fails_the_check_and_falls_back(monkeypatch):
    """A kernel that ignores the scale it is given (FLA's default 1/sqrt(K) instead of the 1.0
    the mapping passes, q being scaled already): the check fails, the torch form runs."""
    la = fla_naive("linear_attn")
    kernels = {"linear_attn": lambda q, k, v, scale, normalize:
               la.naive_recurrent_linear_attn(q, k, v, normalize=normalize)}
    m = _mixer(LinearAttention, {"num_heads": 2}, torch.float32)
    x = torch.randn(2, 20, 12, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = m(x)
        calls = _as_on_cuda(monkeypatch, kernels)
        with pytest.warns(kernel_check.KernelCheckWarning, match="fla chunk_linear_attn"):
            y = m(x)
        y_again = m(x)  # the verdict is kept: no second check, no second warning
    assert calls == ["linear_attn"]  # the check only
    torch.testing.assert_close(y, ref, rtol=0, atol=0)
    torch.testing.assert_close(y_again, ref, rtol=0, atol=0)
    (verdict,) = kernel_check.results().values()
    assert verdict["ok"] is False and verdict["max_rel_err"] > 0.1


def test_what_stays_on_the_torch_form(monkeypatch):
    """CPU tensors never reach FLA (nothing imported, nothing checked); on CUDA, float32 DeltaNet
    (chunk_delta_rule refuses float32), the Taylor map beyond d' = 16 (fused_chunk_based's
    limit), Based's sliding-window layers and the recurrent impl stay on the torch forms."""
    asked = []
    monkeypatch.setattr(fla_kernels, "kernel", lambda op: asked.append(op) or (None, "no"))
    x = torch.randn(1, 9, 12)
    for cls, options, _ in CASES.values():
        _mixer(cls, options, torch.float32)(x)
    assert asked == [] and kernel_check.results() == {}

    def refuse(*a, **kw):
        raise AssertionError("FLA was called")

    monkeypatch.setattr(fla_kernels, "on_cuda", lambda t: True)
    monkeypatch.setattr(fla_kernels, "kernel", lambda op: (refuse, "ok"))
    for cls, options in ((DeltaNet, {"num_heads": 2}),
                         (LinearAttention, {"feature_map": "taylor", "feature_dim": 17}),
                         (Based, {"layer_idx": 0}),
                         (GatedLinearAttention, {"num_heads": 2, "impl": "recurrent"})):
        _mixer(cls, options, torch.float32)(x)
    assert kernel_check.results() == {}


def test_info_says_what_the_zoo_mixers_run(monkeypatch):
    """`recall-lab info`'s zoo row: the torch chunked forms on the CPU without importing FLA; on
    CUDA, FLA's kernels when they import, each op that does not import named with why."""
    from typer.testing import CliRunner

    from recall_lab.cli import app

    asked = []
    monkeypatch.setattr(fla_kernels, "kernel", lambda op: asked.append(op) or (None, "no"))
    r = CliRunner().invoke(app, ["info"])
    assert r.exit_code == 0, r.output
    assert "flash-linear-attention" in r.output
    line = next(x for x in r.output.splitlines() if "zoo mixers" in x)
    assert "torch chunked" in line and asked == []

    monkeypatch.setattr(fla_kernels, "kernel", lambda op: (print, "ok"))
    assert fla_kernels.describe(cuda=True).startswith("FLA")
    why = "ModuleNotFoundError: No module named 'fla'"
    monkeypatch.setattr(fla_kernels, "kernel", lambda op: (None, why))
    text = fla_kernels.describe(cuda=True)
    assert text.startswith("torch chunked") and why in text
    monkeypatch.setattr(fla_kernels, "kernel",
                        lambda op: (None, "ImportError: x") if op == "gla" else (print, "ok"))
    text = fla_kernels.describe(cuda=True)
    assert text.startswith("FLA") and "gla" in text and "ImportError: x" in text
