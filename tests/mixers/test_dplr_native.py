"""The native DPLR kernel (recall_lab/native/dplr.c via mixers/dplr_native.py) against the torch
references: the recurrence's outputs, final state and every gradient equal `dplr_recurrent`'s
(float64 to 1e-12, float32 to 1e-5), at widths the kernel specialises and at others, lengths
below, at and across its checkpoint blocks; the delta rules' mappings equal their loops; each
mixer on the kernel equals itself on its torch chunked form; 20 float64 training steps of a
model on the kernel equal those on the torch form to 1e-10 (losses and parameters); results do
not depend on the thread count."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from recall_lab import native as kernels
from recall_lab.data import DataSource
from recall_lab.mixers import dplr_native
from recall_lab.mixers.deltanet import DeltaNet, GatedDeltaNet, delta_rule_recurrent
from recall_lab.mixers.deltaproduct import GatedDeltaProduct, deltaproduct_recurrent
from recall_lab.mixers.kda import KimiDeltaAttention, kda_recurrent
from recall_lab.mixers.rwkv7 import RWKV7, W_SCALE, dplr_recurrent
from recall_lab.models.lm import forward_scored
from recall_lab.runs import build_run_model, load_run_config
from recall_lab.train import lr_at, make_optimizer, objective, optimizer_step

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"

pytestmark = pytest.mark.skipif(not kernels.available(), reason="native kernels not built")


def _dplr_inputs(b, length, h, dk, dv, dtype, seed=0):
    """Token-major q, k, v, a = -kappa, b = kappa * rate, log w as RWKV-7 makes them."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, length, h, dk, generator=gen, dtype=dtype) for _ in range(2))
    v = torch.randn(b, length, h, dv, generator=gen, dtype=dtype)
    kappa = F.normalize(torch.randn(b, length, h, dk, generator=gen, dtype=dtype), dim=-1)
    rate = torch.rand(b, length, h, dk, generator=gen, dtype=dtype)
    logw = -W_SCALE * torch.rand(b, length, h, dk, generator=gen, dtype=dtype)
    return q, k, v, -kappa, kappa * rate, logw


def _grads(fn, inputs, cotangents):
    xs = [t.clone().requires_grad_(True) for t in inputs]
    outs = fn(*xs)
    sum((o * c).sum() for o, c in zip(outs, cotangents, strict=True)).backward()
    return [o.detach() for o in outs] + [x.grad for x in xs]


def _head_major(fn):
    """A head-major torch form as a token-major (o, state) function."""
    def run(*xs):
        o, state = fn(*(t.transpose(1, 2) for t in xs))
        return o.transpose(1, 2), state
    return run


# (b, length, heads, dk, dv): 4 x 4 and 4 x 16 are specialised widths (the lab's RWKV-7 and
# DeltaNet heads), 3 x 5 and 6 x 2 the generic path; 1, 15, 16, 17 and 40 tokens sit below, at
# and across the 16-token checkpoint blocks
SHAPES = [(2, 1, 2, 4, 4), (2, 15, 3, 4, 16), (1, 16, 2, 3, 5), (2, 17, 2, 4, 4),
          (2, 40, 2, 6, 2)]


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_state_and_every_gradient_equal_the_recurrent_loop(shape, dtype, tol):
    inputs = _dplr_inputs(*shape, dtype)
    b, _, h, dk, dv = shape
    gen = torch.Generator().manual_seed(7)
    cot = [torch.randn(*inputs[2].shape, generator=gen, dtype=dtype),
           torch.randn(b, h, dk, dv, generator=gen, dtype=dtype)]
    ours = _grads(dplr_native.dplr, inputs, cot)
    ref = _grads(_head_major(dplr_recurrent), inputs, cot)
    names = ["o", "state", "dq", "dk", "dv", "da", "db", "dg"]
    for name, x, y in zip(names, ours, ref, strict=True):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol, msg=name)


def test_an_unused_output_gets_no_gradient_work():
    """Training reads o only: the final state's gradient is None and the result equals the
    one with a zero cotangent on the state."""
    inputs = _dplr_inputs(2, 20, 2, 4, 4, torch.float64)
    cot = torch.randn(2, 20, 2, 4, dtype=torch.float64)
    xs = [t.clone().requires_grad_(True) for t in inputs]
    (dplr_native.dplr(*xs)[0] * cot).sum().backward()
    zero = torch.zeros(2, 2, 4, 4, dtype=torch.float64)
    ref = _grads(dplr_native.dplr, inputs, [cot, zero])[2:]
    for x, y in zip(xs, ref, strict=True):
        torch.testing.assert_close(x.grad, y, rtol=0, atol=0)


def _delta_inputs(dtype=torch.float64, b=2, h=3, length=19, dk=4, dv=6, n_h=None):
    gen = torch.Generator().manual_seed(3)
    extra = () if n_h is None else (n_h,)
    q = torch.randn(b, h, length, dk, generator=gen, dtype=dtype)
    k = F.normalize(torch.randn(b, h, length, *extra, dk, generator=gen, dtype=dtype), dim=-1)
    v = torch.randn(b, h, length, *extra, dv, generator=gen, dtype=dtype)
    beta = torch.rand(b, h, length, *extra, generator=gen, dtype=dtype)
    per_head = -0.5 * torch.rand(b, h, length, generator=gen, dtype=dtype)
    per_channel = -0.5 * torch.rand(b, h, length, dk, generator=gen, dtype=dtype)
    return q, k, v, beta, per_head, per_channel


def _outputs_and_grads(fn, inputs):
    gen = torch.Generator().manual_seed(11)
    xs = [t.clone().requires_grad_(True) for t in inputs]
    o = fn(*xs)
    o = o[0] if isinstance(o, tuple) else o
    (o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum().backward()
    return [o.detach()] + [x.grad for x in xs]


@pytest.mark.parametrize("family", ["deltanet", "gated-deltanet", "kda", "gated-deltaproduct"])
def test_delta_rule_mappings_equal_their_loops(family):
    if family == "gated-deltaproduct":
        q, k, v, beta, g, _ = _delta_inputs(n_h=2)
        inputs, ours, ref = [q, k, v, beta, g], dplr_native.delta_product, deltaproduct_recurrent
    else:
        q, k, v, beta, per_head, per_channel = _delta_inputs()
        inputs = [q, k, v, beta] + {"deltanet": [], "gated-deltanet": [per_head],
                                    "kda": [per_channel]}[family]
        ref = {"deltanet": lambda *a: delta_rule_recurrent(*a, None),
               "gated-deltanet": delta_rule_recurrent, "kda": kda_recurrent}[family]
        ours = ((lambda *a: dplr_native.delta_rule(*a, None)) if family == "deltanet"
                else dplr_native.delta_rule)
    for x, y in zip(_outputs_and_grads(ours, inputs), _outputs_and_grads(ref, inputs),
                    strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


MIXERS = {
    "rwkv7": (RWKV7, {"head_size": 4}),
    "deltanet": (DeltaNet, {"num_heads": 4, "expand_k": 0.25}),
    "gated-deltanet": (GatedDeltaNet, {"num_heads": 4, "expand_k": 0.25}),
    "kda": (KimiDeltaAttention, {"num_heads": 4, "expand_k": 0.25}),
    "gated-deltaproduct": (GatedDeltaProduct, {"num_heads": 4, "expand_k": 0.25}),
}




@pytest.mark.parametrize("name", list(MIXERS))
def test_each_mixer_on_the_kernel_equals_its_torch_chunked_form(monkeypatch, name):
    cls, options = MIXERS[name]
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 37, 16, generator=gen, dtype=torch.float64)
    cot = torch.randn(2, 37, 16, generator=gen, dtype=torch.float64)

    def run():
        torch.manual_seed(0)
        mixer = cls(16, **options).double()
        xs = x.clone().requires_grad_(True)
        (mixer(xs) * cot).sum().backward()
        return [xs.grad] + [p.grad for p in mixer.parameters()]

    calls = []
    real = dplr_native.dplr
    monkeypatch.setattr(dplr_native, "dplr", lambda *a: calls.append(1) or real(*a))
    native = run()
    assert calls, "the mixer did not take the native kernel"
    calls.clear()
    with dplr_native.torch_forms():
        reference = run()
    assert not calls
    for x_, y_ in zip(native, reference, strict=True):
        torch.testing.assert_close(x_, y_, rtol=1e-10, atol=1e-12)


# the committed 16-pair cells of the placements these rows come from (seed 0)
CELLS = {"deltanet": "place-deltanet/cells/s0-levels16-steps2500-bbb8630a",
         "rwkv7": "frontier-2026/rwkv7/cells/s0-levels16-steps2500-c2c24e23"}


def _train(name: str, steps: int = 20) -> tuple[list[float], dict]:
    """`steps` float64 AdamW steps of a committed run's model, as the training loop takes them
    (its seed, objective, optimizer, schedule, clipping), on its batches cut to 4 rows."""
    cfg = load_run_config(RESULTS / CELLS[name])
    t = cfg.train
    torch.manual_seed(t.seed)
    model = build_run_model(cfg).double()
    opt = make_optimizer(model, t.weight_decay, t.lr, t.betas, t.decay)
    data = DataSource.for_run(cfg, None)
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, t)
        x, y = data.batch(step, 4, torch.device("cpu"))
        output, y_scored = forward_scored(model, x, y)
        loss = objective(output, y_scored, t.alpha)[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        optimizer_step(model, opt, t.grad_clip)
        losses.append(float(loss.detach()))
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("name", ["rwkv7", "deltanet"])
def test_twenty_float64_training_steps_equal_the_torch_forms(name):
    losses, params = _train(name)
    with dplr_native.torch_forms():
        ref_losses, ref_params = _train(name)
    assert losses == pytest.approx(ref_losses, abs=1e-10, rel=0)
    assert losses[-1] < losses[0]  # it trained
    for key, p in params.items():
        torch.testing.assert_close(p, ref_params[key], rtol=0, atol=1e-10, msg=key)


def test_results_do_not_depend_on_the_thread_count():
    inputs = _dplr_inputs(3, 33, 4, 4, 16, torch.float32)
    cot = [torch.ones(3, 33, 4, 16), torch.ones(3, 4, 4, 16)]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _grads(dplr_native.dplr, inputs, cot)
        torch.set_num_threads(2)
        two = _grads(dplr_native.dplr, inputs, cot)
    finally:
        torch.set_num_threads(before)
    for x, y in zip(one, two, strict=True):
        assert torch.equal(x, y)


def test_usable_only_where_the_kernel_applies():
    x = torch.zeros(1, 2, 1, 4)
    assert dplr_native.usable(x, x.double()) is False  # mixed dtypes
    assert dplr_native.usable(x.half()) is False
    assert dplr_native.usable(x, None) is True
    assert dplr_native.usable(x.double()) is True
    with dplr_native.torch_forms():
        assert dplr_native.usable(x) is False
    assert dplr_native.usable(x) is True
