"""The scans on CUDA against the lab's references (recall_lab/ssm/reference.py): mamba-ssm's
kernels through the lab's dispatch (recall_lab/ssm/backend.py) and the lab's own torch
implementations (`scan_impl="torch"`: what runs on CUDA where mamba-ssm is not installed), each on
the gated path, chunk resets (Attamba, passed to the SSD kernel as `seq_idx`), decimated
(gathered) inputs (DeciMamba) and step mode against the parallel forward.

The references run on the CPU in float64, the kernels on CUDA in float32: errors are judged
relative to the reference's largest entry (mamba-ssm's SSD uses tl.dot, TF32 on Ampere and
later, hence the looser SSD tolerance; the torch implementations are held to the same bounds).
Inputs come from the CPU tests' helpers (tests/ssm/ssm_inputs.py). A mamba-ssm case skips where
its kernel does not load (`pip install -e '.[cuda]'`); the torch cases always run.
"""

from __future__ import annotations

import pytest
import torch

from recall_lab.ssm import Mamba2Mixer, MambaMixer, backend, selective_scan_ref, ssd_ref
from recall_lab.ssm.decimation import Decimate
from recall_lab.ssm.scan import selective_scan_torch
from recall_lab.ssm.ssd import ssd_torch
from tests.ssm.ssm_inputs import scan_inputs, ssd_inputs

pytestmark = pytest.mark.cuda

DEV = "cuda"
SCAN_TOL, SSD_TOL = 1e-3, 5e-3
IMPLS = ["mamba-ssm", "torch"]


def _kernel(op: str, impl: str = "mamba-ssm") -> None:
    if impl == "torch":
        return
    fn, why = backend._mamba_kernel(op)
    if fn is None:
        pytest.skip(f"mamba-ssm's {op} kernel does not load: {why}")
    name = backend.MAMBA_SCAN if op == "selective_scan" else backend.MAMBA_SSD
    assert backend.scan_backend(DEV, op) == name  # the dispatch really picks it


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _with_grads(fn, inp: dict, device: str, dtype) -> list[torch.Tensor]:
    """fn(**inp) on `device` in `dtype`, then the gradient of every input for a fixed cotangent."""
    leaves = {k: v.detach().to(device, dtype).requires_grad_() for k, v in inp.items()}
    y = fn(**leaves)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    y.backward(g.to(device, dtype))
    return [y] + [leaves[k].grad for k in inp]


def _agree(fast: list, ref: list, tol: float) -> None:
    names = ["out", *range(len(ref) - 1)]
    errs = {n: _rel(a, b) for n, a, b in zip(names, fast, ref, strict=True)}
    assert max(errs.values()) <= tol, errs


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("groups", [0, 2])
def test_selective_scan_gated(groups, impl):
    """selective_scan_fn with z (the fused gate), delta_bias and softplus, B/C plain or grouped."""
    _kernel("selective_scan", impl)
    scan = backend.selective_scan if impl == "mamba-ssm" else selective_scan_torch
    inp = scan_inputs(2, 64, 16, 300, groups, delta_scale=0.5)
    fast = _with_grads(lambda **t: scan(**t, delta_softplus=True), inp, DEV, torch.float32)
    ref = _with_grads(lambda **t: selective_scan_ref(**t, delta_softplus=True), inp, "cpu",
                      torch.float64)
    _agree(fast, ref, SCAN_TOL)


def test_selective_scan_with_resets_runs_torch_on_cuda():
    """selective_scan_fn has no reset input: the dispatch must route resets to the torch path."""
    inp = scan_inputs(2, 32, 8, 200, 0, delta_scale=0.5)
    reset = torch.rand(2, 200, generator=torch.Generator().manual_seed(2)) < 0.05
    fast = _with_grads(lambda **t: backend.selective_scan(**t, delta_softplus=True,
                                                          reset=reset.to(DEV)),
                       inp, DEV, torch.float32)
    ref = _with_grads(lambda **t: selective_scan_ref(**t, delta_softplus=True, reset=reset),
                      inp, "cpu", torch.float64)
    _agree(fast, ref, SCAN_TOL)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("with_reset", [False, True])
def test_ssd_gated_and_seq_idx_resets(with_reset, impl):
    """mamba_chunk_scan_combined with z and dt_bias; resets become seq_idx (segment ids)."""
    _kernel("ssd", impl)
    run = backend.ssd if impl == "mamba-ssm" else ssd_torch
    inp = ssd_inputs(2, 256, 4, 16, 1, 16, dt_scale=0.5)
    inp.pop("initial_states")  # seq_idx and initial states together are not the Attamba path
    reset = None
    if with_reset:
        reset = torch.rand(2, 256, generator=torch.Generator().manual_seed(3)) < 0.03
        reset[:, 100] = True  # one inside a chunk of 64 for sure
    kw = dict(chunk_size=64, dt_softplus=True)
    fast = _with_grads(lambda **t: run(**t, **kw, reset=None if reset is None
                                       else reset.to(DEV)), inp, DEV, torch.float32)
    ref = _with_grads(lambda **t: ssd_ref(**t, **kw, reset=reset), inp, "cpu", torch.float64)
    _agree(fast, ref, SSD_TOL)


def _mixer(kind: str, impl: str):
    torch.manual_seed(0)
    if kind == "mamba":
        return MambaMixer(64, d_state=16, scan_impl=impl)
    return Mamba2Mixer(64, d_state=16, headdim=16, chunk_size=64, scan_impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", ["mamba", "mamba2"])
def test_decimated_inputs(kind, impl):
    """DeciMamba gathers the kept tokens after the conv: the kernel sees gathered, strided
    inputs. Same weights, same device, so the selection is the same: kernel vs the recurrence."""
    _kernel("selective_scan" if kind == "mamba" else "ssd", impl)
    fast = _mixer(kind, "auto" if impl == "mamba-ssm" else "torch").to(DEV)
    ref = _mixer(kind, "ref").to(DEV)
    x = torch.randn(3, 200, 64, generator=torch.Generator().manual_seed(1)).to(DEV)
    dec = Decimate(torch.tensor([40, 90, 150], device=DEV),
                   torch.tensor([100, 120, 150], device=DEV))
    (y, kept), (y_ref, kept_ref) = fast(x, decimate=dec), ref(x, decimate=dec)
    assert torch.equal(kept.idx, kept_ref.idx) and torch.equal(kept.valid, kept_ref.valid)
    assert _rel(y, y_ref) <= (SCAN_TOL if kind == "mamba" else SSD_TOL)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", ["mamba", "mamba2"])
def test_step_equals_parallel(kind, impl):
    """Token-by-token decoding (torch math) equals the parallel forward (the kernel)."""
    _kernel("selective_scan" if kind == "mamba" else "ssd", impl)
    m = _mixer(kind, "auto" if impl == "mamba-ssm" else "torch").to(DEV)
    x = torch.randn(2, 96, 64, generator=torch.Generator().manual_seed(4)).to(DEV)
    with torch.no_grad():
        y = m(x)
        state = m.allocate_state(2)
        steps = []
        for t in range(x.shape[1]):
            y_t, state = m.step(x[:, t], state)
            steps.append(y_t)
    assert _rel(torch.stack(steps, 1), y) <= (SCAN_TOL if kind == "mamba" else SSD_TOL)
