"""`recall-lab bench ssm`: the peer rows (missing peers said in the table, ratios, same sizes)."""

from __future__ import annotations

import importlib.util
import io

import pytest
from rich.console import Console

from recall_lab.bench import ssm as bench_ssm


def _fake_measure(kind, impl, b, length, reps):
    missing = bench_ssm._missing(impl)
    if missing:
        return {"missing": missing}
    sec = {"ours": 0.5, "ours-malloc": 1.0, "ours-torch": 1.5, "ref": 4.0}[impl]  # s per step
    res = {"seconds": {"median": sec, "p20": sec, "p80": sec, "reps": reps},
           "tokens_per_s": b * length / sec, "peak_rss_rise_mib": 1.0,
           "loadavg_1min": [1.0, 1.0]}
    res["tokens_per_s_p20_p80"] = [res["tokens_per_s"]] * 2
    return res


def test_missing_peer_is_said_in_the_table(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("transformers", "mambapy")
                        else real(name, *a))
    monkeypatch.setattr(bench_ssm, "_measure", _fake_measure)
    console = Console(file=io.StringIO(), width=250, record=True)
    res = bench_ssm.run(console, quick=True)
    text = console.export_text()
    assert "peer missing: transformers not installed (pip install -e .[bench])" in text
    hf = [c for c in res["cases"] if c["implementation"].startswith("hf")]
    assert hf and all("transformers not installed" in c["missing"] for c in hf)
    # ratios: ours 0.5 s per step against 1.0 s, 1.5 s and 4.0 s
    by = {(c["mixer"], c["implementation"]): c for c in res["cases"]}
    assert by[("mamba", "ours-malloc")]["ours_over_this"] == pytest.approx(2.0)
    assert by[("mamba", "ours-torch")]["ours_over_this"] == pytest.approx(3.0)
    assert by[("mamba2", "ours-torch")]["ours_over_this"] == pytest.approx(3.0)
    assert by[("mamba2", "ref")]["ours_over_this"] == pytest.approx(8.0)
    assert "ours_over_this" not in by[("mamba2", "hf")]


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="transformers (the [bench] extra) not installed")
@pytest.mark.parametrize("kind", ["mamba", "mamba2"])
def test_hf_peer_case_runs_torch_paths_at_our_sizes(kind):
    from torch import nn

    from recall_lab.ssm import Mamba2Mixer, MambaMixer

    # a real (tiny) case, in its subprocess as the bench runs it
    res = bench_ssm._measure(kind, "hf", 2, 16, 1)
    assert "error" not in res, res
    assert set(res["hf_paths"].values()) == {"torch"}
    assert res["seconds"]["reps"] == 1 and res["tokens_per_s"] > 0
    cls = MambaMixer if kind == "mamba" else Mamba2Mixer
    cfg = bench_ssm.CONFIGS[kind]
    ours = sum(p.numel() for _ in range(2)
               for m in (cls(**cfg), nn.RMSNorm(64)) for p in m.parameters())
    # HF's model adds its (unused) 16-token embedding and a final RMSNorm
    assert res["parameters"] == ours + 16 * 64 + 64


def _hf_dispatch(use_kernel: bool):
    """Stand-in of transformers 5.x's `use_kernel_func_from_hub_with_fallback` wrapper: the
    chosen `implementation` and the `torch_function` in its closure, as HF keeps them."""
    def torch_function(x):
        return x

    implementation = (lambda x: x) if use_kernel else torch_function

    def wrapped(*args, **kwargs):
        return implementation(*args, **kwargs) if torch_function else None

    return wrapped


def _kernels_func_module(func):
    """Stand-in of the `kernels` package's `_create_func_module(func)()`: an nn.Module with no
    __name__ whose forward calls `func` (what transformers 5.25 hands out with kernels
    installed, where the bench's old `fn.__name__` raised AttributeError)."""
    from torch import nn

    class Func(nn.Module):
        def forward(self, *args, **kwargs):
            return func(*args, **kwargs)

    return Func()


@pytest.mark.parametrize("use_kernel, expected", [(False, "torch"), (True, "kernel")])
def test_hf_path_reads_the_choice_through_a_kernels_func_module(use_kernel, expected):
    wrapped = _hf_dispatch(use_kernel)
    assert bench_ssm.hf_path(wrapped) == expected
    module = _kernels_func_module(wrapped)
    assert not hasattr(module, "__name__")
    assert bench_ssm.hf_path(module) == expected
    assert bench_ssm.hf_path(lambda x: x) == "unknown"
    assert bench_ssm.hf_path(object()) == "unknown"
