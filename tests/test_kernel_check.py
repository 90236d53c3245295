"""First-call self-checks of the GPU kernels (recall_lab/kernel_check.py), exercised on the CPU:
a fake "GPU kernel" (the real one wrapped to return wrong values, or the torch implementation
standing in for mamba-ssm) is injected into the dispatch, which must then fall back with one
warning, keep its verdict, and show it in `recall-lab info`."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from typer.testing import CliRunner

from recall_lab import kernel_check
from recall_lab.attention import sparse, sparse_attention, triton_available
from recall_lab.cli import app
from recall_lab.ssm import backend
from recall_lab.ssm.scan import selective_scan_torch
from recall_lab.ssm.ssd import ssd_torch
from tests.ssm.ssm_inputs import scan_inputs, ssd_inputs

needs_interpreter = pytest.mark.skipif(
    not triton_available() or os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs Triton and the interpreter (TRITON_INTERPRET=1, set by tests/conftest.py)",
)


@pytest.fixture(autouse=True)
def _fresh_verdicts(monkeypatch):
    """Each test starts as a fresh process would: no self-check has run."""
    monkeypatch.setattr(kernel_check, "_RESULTS", {})


def test_checked_runs_once_warns_once_and_records():
    calls = []

    def bad() -> float:
        calls.append(1)
        return 0.5

    with pytest.warns(kernel_check.KernelCheckWarning, match="fake kernel failed") as rec:
        assert kernel_check.checked("fake kernel", bad, 1e-3, fallback="torch") is False
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would raise here
        assert kernel_check.checked("fake kernel", bad, 1e-3, fallback="torch") is False
    assert len(calls) == 1
    assert kernel_check.results()["fake kernel"]["max_rel_err"] == 0.5
    assert kernel_check.checked("good kernel", lambda: 1e-6, 1e-3, fallback="torch") is True


def test_a_kernel_that_raises_or_gives_nan_fails():
    def boom() -> float:
        raise RuntimeError("no kernel image is available")

    with pytest.warns(kernel_check.KernelCheckWarning, match="no kernel image"):
        assert not kernel_check.checked("raising", boom, 1e-3, fallback="torch")
    with pytest.warns(kernel_check.KernelCheckWarning):
        assert not kernel_check.checked("nan", lambda: float("nan"), 1e-3, fallback="torch")
    assert kernel_check.results()["raising"]["error"].startswith("RuntimeError")


def test_compare_sees_gradients_not_only_outputs():
    x = {"a": torch.randn(4, 3)}
    same = kernel_check.compare(lambda a: a * 2, lambda a: a * 2, x)
    # equal outputs at this point, different gradient: only the gradient can tell them apart
    grad_only = kernel_check.compare(lambda a: a * 2, lambda a: a * 2 + (a - a.detach()), x)
    assert same == 0.0 and grad_only > 0.1


def test_errors_name_the_tensor_that_is_off_and_the_verdict_keeps_it():
    x = {"a": torch.randn(4, 3), "b": torch.randn(4, 3), "i": torch.arange(3)}
    errs = kernel_check.errors(lambda a, b, i: a * b, lambda a, b, i: a * b + (b - b.detach()), x)
    assert list(errs) == ["out", "da", "db"]  # no gradient entry for the integer input
    assert errs["out"] == errs["da"] == 0.0 and errs["db"] > 0.1
    assert kernel_check.compare(lambda a, b, i: a * b, lambda a, b, i: a * b + (b - b.detach()),
                                x) == errs["db"]
    with pytest.warns(kernel_check.KernelCheckWarning, match=r"0\.5 \(in dv\) > 0\.001"):
        assert not kernel_check.checked("per tensor", lambda: {"out": 1e-6, "dv": 0.5, "dq": 0.2},
                                        1e-3, fallback="torch")
    verdict = kernel_check.results()["per tensor"]
    assert verdict["worst"] == "dv" and verdict["max_rel_err"] == 0.5
    assert ("per tensor", "self-check FAILED (max rel err 0.5 in dv > 0.001): using torch") \
        in kernel_check.describe()
    with pytest.warns(kernel_check.KernelCheckWarning, match=r"\(in dk\)"):  # NaN beats 0.5
        assert not kernel_check.checked("nan grad", lambda: {"out": 0.5, "dk": float("nan")},
                                        1e-3, fallback="torch")
    assert kernel_check.checked("fine", lambda: {"out": 1e-6, "dv": 2e-6}, 1e-3, "torch")
    assert kernel_check.results()["fine"]["worst"] == "dv"


@needs_interpreter
def test_wrong_triton_kernel_falls_back_to_torch(monkeypatch):
    from recall_lab.attention import triton_sparse

    real = triton_sparse.forward
    monkeypatch.setattr(triton_sparse, "forward",
                        lambda *a: (lambda o, s: (o + 1.0, s))(*real(*a)))
    monkeypatch.setattr(sparse, "default_backend", lambda device: "triton")  # as on CUDA
    (q, k, v), idx = _case()
    with pytest.warns(kernel_check.KernelCheckWarning, match="triton sparse attention"):
        out = sparse_attention(q, k, v, idx)
    torch.testing.assert_close(out, sparse_attention(q, k, v, idx, backend="torch"))
    assert not torch.allclose(sparse_attention(q, k, v, idx, backend="triton"), out)
    verdict = kernel_check.results()[sparse.TRITON_CHECK]
    assert verdict["ok"] is False and verdict["max_rel_err"] > 0.1


@needs_interpreter
def test_right_triton_kernel_passes_and_runs(monkeypatch):
    from recall_lab.attention import triton_sparse

    calls = []
    real = triton_sparse.forward
    monkeypatch.setattr(triton_sparse, "forward", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(sparse, "default_backend", lambda device: "triton")
    (q, k, v), idx = _case()
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernel_check.KernelCheckWarning)
        out = sparse_attention(q, k, v, idx)
    assert kernel_check.results()[sparse.TRITON_CHECK]["ok"] is True
    assert len(calls) == 2  # the check's forward, then the call itself on triton
    torch.testing.assert_close(out, sparse_attention(q, k, v, idx, backend="torch"))


def _case():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 1, 6, 4, generator=gen) for _ in range(3))
    pos = torch.arange(6)
    idx = torch.where(pos[None, :] <= pos[:, None], pos[None, :], -1)  # every earlier key
    return (q, k, v), idx.to(torch.int32).view(1, 1, 6, 6)


def _fake_mamba(monkeypatch, op: str, fn) -> None:
    """Dispatch `op` as on a CUDA machine whose mamba-ssm kernel is `fn`."""
    name = backend.MAMBA_SCAN if op == "selective_scan" else backend.MAMBA_SSD
    monkeypatch.setattr(backend, "scan_backend", lambda device, o="selective_scan":
                        name if o == op else backend.TORCH_SCAN)
    monkeypatch.setattr(backend, "_mamba_kernel", lambda o: (fn, "ok"))


def test_wrong_mamba_scan_falls_back(monkeypatch):
    def wrong(*a, **kw):
        return selective_scan_torch(*a, **kw) * 1.5

    _fake_mamba(monkeypatch, "selective_scan", wrong)
    inp = scan_inputs(2, 4, 3, 9, 0, dtype=torch.float32)
    with pytest.warns(kernel_check.KernelCheckWarning, match=backend.MAMBA_SCAN):
        y = backend.selective_scan(**inp, delta_softplus=True)
    torch.testing.assert_close(y, selective_scan_torch(**inp, delta_softplus=True))
    assert kernel_check.results()[backend.MAMBA_SCAN]["ok"] is False


def test_right_mamba_ssd_passes_and_runs(monkeypatch):
    calls = []

    def right(*a, seq_idx=None, **kw):
        """mamba-ssm's contract: segment ids; read back as chunk starts for the torch path."""
        calls.append(seq_idx)
        reset = None
        if seq_idx is not None:
            reset = torch.ones(seq_idx.shape, dtype=torch.bool)
            reset[:, 1:] = seq_idx[:, 1:] != seq_idx[:, :-1]
        return ssd_torch(*a, reset=reset, **kw)

    _fake_mamba(monkeypatch, "ssd", right)
    inp = ssd_inputs(2, 10, 2, 4, 1, 3, dtype=torch.float32)
    inp.pop("initial_states")
    reset = torch.arange(10) % 4 == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernel_check.KernelCheckWarning)
        y = backend.ssd(**inp, chunk_size=4, dt_softplus=True, reset=reset)
    assert kernel_check.results()[backend.MAMBA_SSD]["ok"] is True
    assert len(calls) == 2 and calls[0] is None  # the check, then the call with its segment ids
    torch.testing.assert_close(y, ssd_torch(**inp, chunk_size=4, dt_softplus=True, reset=reset))


def test_info_shows_the_verdicts(monkeypatch):
    _fake_mamba(monkeypatch, "selective_scan", lambda *a, **kw: selective_scan_torch(*a, **kw) + 1)
    with pytest.warns(kernel_check.KernelCheckWarning):
        backend.selective_scan(**scan_inputs(1, 2, 2, 5, 0, dtype=torch.float32))
    r = CliRunner().invoke(app, ["info"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if backend.MAMBA_SCAN in x)
    assert "FAILED" in line and "torch" in line
