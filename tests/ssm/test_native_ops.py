"""The native kernels as torch custom ops (recall_lab/ssm/native.py), the path a torch.compile'd
model takes: the same values and gradients as the autograd.Functions of the eager path, op
registrations that pass torch's own checks (schema, fake implementation, autograd), and
compiled mixers with no graph break that agree with eager ones."""

from __future__ import annotations

import pytest
import torch

from recall_lab import native as kernels
from recall_lab.ssm import Mamba2Mixer, MambaMixer, native

pytestmark = pytest.mark.skipif(not kernels.available(),
                                reason=f"native kernels not built here: {kernels.load()[1]}")


def _r(gen, *shape, scale=1.0):
    return torch.randn(*shape, generator=gen) * scale


def _cases():
    """(name, autograd.Function, custom op, inputs, output gradients), float32 (the kernels'
    only dtype: float64 goes to the torch paths); optional inputs both present and absent. The
    last input of scan and ssd is the keep mask (data: it takes no gradient)."""
    gen = torch.Generator().manual_seed(0)
    b, d, n, length = 3, 6, 4, 13
    A = -torch.rand(d, n, generator=gen) - 0.1
    keep = (torch.rand(b, length, generator=gen) > 0.2).float()
    scan = (_r(gen, b, d, length), _r(gen, b, d, length).abs(), A,
            _r(gen, b, 1, length, n), _r(gen, b, 1, length, n))
    out = [("scan", native._NativeScanCore, torch.ops.recall_lab.scan.default, (*scan, kp),
            (_r(gen, b, d, length), _r(gen, b, d, n))) for kp in (None, keep)]
    for opt in (True, False):
        s6f = (_r(gen, b, length, d), _r(gen, b, length, d, scale=4.0), _r(gen, d, scale=0.5), A,
               _r(gen, b, length, n), _r(gen, b, length, n), _r(gen, d) if opt else None,
               _r(gen, b, length, d) if opt else None, _r(gen, b, length, d) if opt else None)
        out.append(("s6f", native._NativeS6Fused, torch.ops.recall_lab.s6f.default, s6f,
                    (_r(gen, b, length, d), _r(gen, b, d, n))))
    r = 3  # the low-rank dt with dt_proj's weight
    s6f = (_r(gen, b, length, d), _r(gen, b, length, r), _r(gen, d, scale=0.5), A,
           _r(gen, b, length, n), _r(gen, b, length, n), _r(gen, d), _r(gen, b, length, d), None,
           _r(gen, d, r))
    out.append(("s6f", native._NativeS6Fused, torch.ops.recall_lab.s6f.default, s6f,
                (_r(gen, b, length, d), _r(gen, b, d, n))))
    h, p, g = 2, 4, 1
    ssd = (_r(gen, b, length, h, p), _r(gen, b, length, h).abs(), -torch.rand(h, generator=gen),
           _r(gen, b, length, g, n), _r(gen, b, length, g, n))
    out += [("ssd", native._NativeSSDCore, torch.ops.recall_lab.ssd.default, (*ssd, kp),
             (_r(gen, b, length, h, p), _r(gen, b, h, p, n))) for kp in (None, keep)]
    c, k = 5, 4
    out += [("conv", native._NativeConvSilu, torch.ops.recall_lab.conv_silu.default,
             (_r(gen, b, length, c), _r(gen, c, 1, k), _r(gen, c) if bias else None),
             (_r(gen, b, length, c),)) for bias in (True, False)]
    return out


CASES = _cases()
IDS = [f"{name}-{i}" for i, (name, *_) in enumerate(CASES)]


def _leaves(name, args):
    """Fresh leaves of the inputs; those that take gradients (all but a keep mask) require them."""
    takes_grad = [not (name in ("scan", "ssd") and i == 5) for i in range(len(args))]
    return [None if a is None else a.clone().requires_grad_(t)
            for a, t in zip(args, takes_grad, strict=True)]


def _values_and_grads(name, call, args, gouts):
    leaves = _leaves(name, args)
    outs = call(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(outs, gouts)
    return [o.detach() for o in outs] + [None if a is None else a.grad for a in leaves]


@pytest.mark.parametrize(("name", "fn", "op", "args", "gouts"), CASES, ids=IDS)
def test_custom_op_equals_the_autograd_function(name, fn, op, args, gouts):
    """Bitwise: both run the same C calls on the same inputs, so a difference would mean the
    op passed something else (a layout, a stride, a missing optional input)."""
    got = _values_and_grads(name, op, args, gouts)
    want = _values_and_grads(name, fn.apply, args, gouts)
    assert len(got) == len(want)
    for i, (a, w) in enumerate(zip(got, want, strict=True)):
        assert (a is None) == (w is None), (name, i)
        if a is not None:
            torch.testing.assert_close(a, w, rtol=0, atol=0, msg=f"{name}: output/grad {i}")


@pytest.mark.parametrize(("name", "fn", "op", "args", "gouts"), CASES, ids=IDS)
def test_custom_op_registration_passes_opcheck(name, fn, op, args, gouts):
    """torch's checks of a custom op: the schema (no hidden mutation or aliasing), the fake
    implementation against the real one (shapes, strides, dtypes), and the autograd formula's
    registration, eager and through AOT autograd."""
    torch.library.opcheck(op, tuple(_leaves(name, args)))


@pytest.mark.slow  # an inductor compile each: 20-30 s of CPU
@pytest.mark.parametrize(("cls", "kw"), [(MambaMixer, {}), (Mamba2Mixer, {"headdim": 8})])
def test_compiled_mixer_has_no_graph_break_and_matches_eager(cls, kw):
    """A compiled mixer traces its native kernels as ops (one graph), and its output and every
    parameter's gradient agree with the eager mixer's to float32 rounding (inductor fuses and
    reorders the element-wise work around the kernels)."""
    torch.manual_seed(0)
    mixer = cls(16, d_state=4, **kw)
    x = torch.randn(2, 11, 16)
    explained = torch._dynamo.explain(mixer)(x)
    assert explained.graph_break_count == 0, explained.break_reasons

    def grads(m):
        out = m(x)
        return [out.detach(), *torch.autograd.grad(out.square().sum(), list(mixer.parameters()))]

    compiled = torch.compile(mixer, dynamic=False)
    for a, w in zip(grads(compiled), grads(mixer), strict=True):
        torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-5)


def test_constant_marks_equal_torch_compilers_and_loading_imports_no_dynamo():
    """`available` and `constant` carry what `torch.compiler.assume_constant_result` would set
    (so a compiled model takes them as constants: the graph-break test above), but importing the
    kernels does not import torch._dynamo, which costs seconds in every CLI process."""
    import subprocess
    import sys

    reference = vars(torch.compiler.assume_constant_result(lambda: 0))
    assert reference and {k: vars(kernels.available).get(k) for k in reference} == reference
    assert {k: vars(kernels.constant).get(k) for k in reference} == reference
    code = ("import sys, recall_lab.native as k; k.available(); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
