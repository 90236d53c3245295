"""Chunk-reset scans and mixers (Attamba's key/value SSMs, MECHANISMS.md §2).

Oracles: a reset scan equals running every chunk on its own from a zero state (the reference
loop, sliced by hand); the fast paths equal the reference with resets, values and gradients.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ssm_inputs import scan_inputs, ssd_inputs

from recall_lab.generators.errors import RecallLabError
from recall_lab.ssm import (
    Mamba2Mixer,
    MambaMixer,
    selective_scan_ref,
    selective_scan_torch,
    ssd_ref,
    ssd_torch,
)

S6_KEYS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
SSD_KEYS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")


def _segments(reset: torch.Tensor) -> list[tuple[int, int]]:
    """[start, end) of every chunk; a chunk starts at 0 and at every reset."""
    starts = sorted({0, *torch.nonzero(reset).flatten().tolist()})
    return list(zip(starts, [*starts[1:], reset.numel()], strict=True))


def _random_reset(length: int, seed: int, p: float = 0.3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(length, generator=g) < p


@pytest.mark.parametrize("groups", [0, 2])
def test_s6_reference_reset_is_per_chunk_from_zero(groups):
    inp = scan_inputs(2, 4, 3, 17, groups)
    reset = _random_reset(17, 1)
    reset[[5, 6]] = True  # a chunk of one token
    y = selective_scan_ref(**inp, delta_softplus=True, reset=reset)
    for s, e in _segments(reset):
        part = {k: (v[..., s:e] if k in ("u", "delta", "z", "B", "C") else v)
                for k, v in inp.items()}
        torch.testing.assert_close(y[..., s:e], selective_scan_ref(**part, delta_softplus=True))
    # the flag must matter, or this test could not fail
    assert not torch.allclose(y, selective_scan_ref(**inp, delta_softplus=True))


def test_ssd_reference_reset_is_per_chunk_from_zero():
    inp = ssd_inputs(2, 15, 4, 3, 2, 5)
    reset = _random_reset(15, 2)
    reset[0] = True  # drops the initial state too
    y = ssd_ref(**inp, dt_softplus=True, reset=reset)
    no_init = {k: v for k, v in inp.items() if k != "initial_states"}
    for s, e in _segments(reset):
        part = {k: (v[:, s:e] if k in ("x", "dt", "z", "B", "C") else v)
                for k, v in no_init.items()}
        torch.testing.assert_close(y[:, s:e], ssd_ref(**part, dt_softplus=True))
    assert not torch.allclose(y, ssd_ref(**inp, dt_softplus=True))


def test_reset_batch_rows_are_independent():
    inp = scan_inputs(2, 4, 3, 12, 0)
    reset = torch.zeros(2, 12, dtype=torch.bool)
    reset[0, 4] = True
    reset[1, 7] = True
    y = selective_scan_torch(**inp, reset=reset, chunk=5)
    for row in range(2):
        one = {k: (v[row:row + 1] if v.dim() == 3 else v) for k, v in inp.items()}
        torch.testing.assert_close(y[row:row + 1], selective_scan_ref(**one, reset=reset[row]))


def _grads(fn, inp, grads):
    leaves = {k: v.detach().clone().requires_grad_() for k, v in inp.items()}
    outs = fn(**leaves)
    torch.autograd.backward(list(outs), grads)
    return [o.detach() for o in outs], {k: v.grad for k, v in leaves.items()}


def _assert_all_close(a, b, keys, tol):
    (oa, ga), (ob, gb) = a, b
    for x, y in zip(oa, ob, strict=True):
        torch.testing.assert_close(x, y, **tol)
    for k in keys:
        scale = max(1.0, gb[k].abs().max().item())
        torch.testing.assert_close(ga[k] / scale, gb[k] / scale, **tol, msg=f"grad of {k}")


@settings(max_examples=30, deadline=None)
@given(b=st.integers(1, 2), length=st.integers(1, 30), groups=st.sampled_from([0, 2]),
       chunk=st.sampled_from([None, 1, 4, 7]), p=st.sampled_from([0.0, 0.2, 0.6, 1.0]),
       seed=st.integers(0, 2**16))
def test_s6_fast_equals_reference_with_resets(b, length, groups, chunk, p, seed):
    inp = scan_inputs(b, 4, 3, length, groups, dtype=torch.float32, seed=seed)
    reset = _random_reset(length, seed, p)
    gen = torch.Generator().manual_seed(seed + 1)
    grads = [torch.randn(b, 4, length, generator=gen), torch.randn(b, 4, 3, generator=gen)]
    kw = dict(delta_softplus=True, return_last_state=True, reset=reset)
    fast = _grads(lambda **a: selective_scan_torch(**a, **kw, chunk=chunk), inp, grads)
    ref = _grads(lambda **a: selective_scan_ref(**a, **kw), inp, grads)
    _assert_all_close(fast, ref, S6_KEYS, dict(rtol=1e-4, atol=1e-4))


@settings(max_examples=30, deadline=None)
@given(b=st.integers(1, 2), length=st.integers(1, 30), chunk=st.sampled_from([1, 4, 8, 64]),
       p=st.sampled_from([0.0, 0.2, 0.6, 1.0]), seed=st.integers(0, 2**16))
def test_ssd_fast_equals_reference_with_resets(b, length, chunk, p, seed):
    inp = ssd_inputs(b, length, 4, 3, 2, 5, dtype=torch.float32, seed=seed)
    reset = _random_reset(length, seed, p)
    gen = torch.Generator().manual_seed(seed + 1)
    grads = [torch.randn(b, length, 4, 3, generator=gen), torch.randn(b, 4, 3, 5, generator=gen)]
    kw = dict(dt_softplus=True, return_final_states=True, reset=reset)
    fast = _grads(lambda **a: ssd_torch(**a, chunk_size=chunk, **kw), inp, grads)
    ref = _grads(lambda **a: ssd_ref(**a, **kw), inp, grads)
    _assert_all_close(fast, ref, SSD_KEYS, dict(rtol=1e-4, atol=1e-4))


def test_gradcheck_float64_with_resets():
    reset = torch.tensor([False, False, True, False, True, True, False, False, False])
    s6 = {k: v.requires_grad_() for k, v in scan_inputs(1, 2, 2, 9, 0).items()}
    assert torch.autograd.gradcheck(
        lambda *a: selective_scan_torch(*a, delta_softplus=True, return_last_state=True, chunk=4,
                                        reset=reset), [s6[k] for k in S6_KEYS])
    sd = {k: v.requires_grad_() for k, v in ssd_inputs(1, 9, 2, 2, 1, 3).items()}
    assert torch.autograd.gradcheck(
        lambda *a: ssd_torch(*a[:5], chunk_size=4, D=a[5], z=a[6], dt_bias=a[7],
                             initial_states=a[8], dt_softplus=True, return_final_states=True,
                             reset=reset), [sd[k] for k in SSD_KEYS])


@pytest.mark.parametrize("cls", [MambaMixer, Mamba2Mixer])
def test_mixer_reset_equals_each_chunk_alone(cls):
    torch.manual_seed(0)
    kw = dict(d_state=4, headdim=8) if cls is Mamba2Mixer else dict(d_state=4)
    mixer = cls(8, d_inner=16, scan_impl="torch", **kw)
    with torch.no_grad():
        mixer.conv1d.bias.normal_()  # a non-zero bias: why zero padding could not do this
    x = torch.randn(2, 21, 8)
    reset = torch.zeros(21, dtype=torch.bool)
    reset[[3, 4, 11, 13]] = True
    with torch.no_grad():
        y = mixer(x, reset=reset)
        for s, e in _segments(reset):
            torch.testing.assert_close(y[:, s:e], mixer(x[:, s:e]), rtol=1e-5, atol=1e-5)
        assert not torch.allclose(y, mixer(x), atol=1e-3)
        # the reference scan gives the same
        ref = cls(8, d_inner=16, scan_impl="ref", **kw)
        ref.load_state_dict(mixer.state_dict())
        torch.testing.assert_close(ref(x, reset=reset), y, rtol=1e-5, atol=1e-5)


def test_reset_must_be_bool_of_the_right_length():
    inp = scan_inputs(1, 2, 2, 6, 0)
    with pytest.raises(RecallLabError, match="bool"):
        selective_scan_torch(**inp, reset=torch.zeros(6))
    with pytest.raises(RecallLabError, match="reset must be"):
        selective_scan_torch(**inp, reset=torch.zeros(5, dtype=torch.bool))
