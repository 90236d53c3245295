"""The native C selective scan (recall_lab/ssm/native.py) against the plain recurrence, and how it
is built, chosen and turned off."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ssm_inputs import scan_inputs

from recall_lab.ssm import backend, native, selective_scan, selective_scan_ref

KEYS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")

pytestmark = pytest.mark.skipif(not native.available(),
                                reason=f"native scan not built here: {native.load()[1]}")


def _run(fn, inp, gy, glast, reset=None):
    leaves = {k: v.detach().clone().requires_grad_() for k, v in inp.items()}
    y, last = fn(**leaves, delta_softplus=True, return_last_state=True, reset=reset)
    torch.autograd.backward([y, last], [gy, glast])
    return [y.detach(), last.detach()] + [leaves[k].grad for k in KEYS]


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 3),
    d=st.sampled_from([2, 4, 6]),
    n=st.sampled_from([1, 3, 4, 5, 8, 16, 32, 64]),  # specialised sizes and the generic loop
    length=st.integers(1, 40),
    groups=st.sampled_from([0, 1, 2]),
    with_reset=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_values_and_grads_match_the_recurrence(b, d, n, length, groups, with_reset, seed):
    inp = scan_inputs(b, d, n, length, groups, dtype=torch.float32, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    gy = torch.randn(b, d, length, generator=gen)
    glast = torch.randn(b, d, n, generator=gen)
    reset = torch.rand(b, length, generator=gen) < 0.2 if with_reset else None
    got = _run(native.selective_scan_native, inp, gy, glast, reset)
    ref64 = {k: v.double() for k, v in inp.items()}
    want = _run(selective_scan_ref, ref64, gy.double(), glast.double(), reset)
    for name, a, w in zip(("y", "last", *KEYS), got, want, strict=True):
        scale = max(1.0, w.abs().max().item())
        torch.testing.assert_close(a.double() / scale, w / scale, rtol=1e-4, atol=1e-4,
                                   msg=f"{name}")


def test_strong_decay_stays_finite_and_exact():
    inp = scan_inputs(2, 4, 16, 33, 0, dtype=torch.float32)
    inp["delta"] = inp["delta"].abs() * 60 + 1  # Delta * A of order -100 per step
    core = {k: inp[k] for k in ("u", "delta", "A", "B", "C", "D")}
    y = native.selective_scan_native(**core)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, selective_scan_ref(**core), rtol=1e-5, atol=1e-5)


def test_results_do_not_depend_on_the_thread_count():
    inp = scan_inputs(5, 6, 16, 29, 2, dtype=torch.float32, seed=3)
    gy, glast = torch.randn(5, 6, 29), torch.randn(5, 6, 16)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _run(native.selective_scan_native, inp, gy, glast)
        torch.set_num_threads(2)
        two = _run(native.selective_scan_native, inp, gy, glast)
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, two, strict=True):
        assert torch.equal(a, b)


def test_dispatch_sends_float32_on_cpu_to_the_native_core():
    assert backend.scan_backend("cpu") == backend.NATIVE_SCAN
    inp = scan_inputs(2, 4, 3, 11, 0, dtype=torch.float32)
    assert torch.equal(selective_scan(**inp), native.selective_scan_native(**inp))
    assert native.usable(inp["u"], inp["A"]) and not native.usable(inp["u"].double(), inp["A"])


def test_loading_leaves_denormals_alone():
    # a library linked with -ffast-math would turn on flush-to-zero for the whole process
    assert native.load()[0] is not None
    tiny = torch.tensor([1e-38]) / 1e3
    assert tiny.item() > 0


def test_a_failed_build_or_the_switch_falls_back_with_a_reason(tmp_path):
    code = ("from recall_lab.ssm import backend, native; "
            "print(backend.scan_backend('cpu')); print(native.load()[1])")
    env = {**os.environ, "RECALL_LAB_CACHE": str(tmp_path), "CC": "false"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == backend.TORCH_SCAN
    assert out[1].startswith("compiling selective_scan.c failed")
    env = {**os.environ, native.ENV_SWITCH: "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == [backend.TORCH_SCAN, f"disabled by {native.ENV_SWITCH}=0"]
