"""The one dispatch point: what runs where, and that the report says the same."""

from __future__ import annotations

import pytest

from recall_lab import native
from recall_lab.ssm import backend, backend_report, scan_backend


@pytest.mark.parametrize("op", backend.OPS)
def test_cpu_uses_native_or_torch_and_cuda_only_with_kernels(op):
    torch_name = backend.TORCH_SCAN if op == "selective_scan" else backend.TORCH_SSD
    mamba_name = backend.MAMBA_SCAN if op == "selective_scan" else backend.MAMBA_SSD
    native_name = backend.NATIVE_SCAN if op == "selective_scan" else backend.NATIVE_SSD
    cpu_name = native_name if native.available() else torch_name
    assert scan_backend("cpu", op) == cpu_name
    has_kernel = backend._mamba_kernel(op)[0] is not None
    assert scan_backend("cuda", op) == (mamba_name if has_kernel else torch_name)


def test_report_matches_dispatch():
    rep = backend_report()
    assert set(rep["mamba_ssm"]) == set(backend.OPS)
    assert rep["cpu"] == {op: scan_backend("cpu", op) for op in backend.OPS}
    assert rep["native"] == native.load()[1]
    with pytest.raises(ValueError):
        scan_backend("cpu", "attention")
