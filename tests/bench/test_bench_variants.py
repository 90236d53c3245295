"""`bench/variants.py`: each variant of the hybrid does what its name says (checked by value),
and the timing run covers every variant."""

from __future__ import annotations

import pytest
import torch

from recall_lab import native
from recall_lab.attention.base import UnionPattern
from recall_lab.bench import variants


@pytest.fixture(scope="module")
def models():
    return variants.variant_models("mamba+hax")


def _branch(models, variant):
    return variants._branches(models[variant][1])[0]


def test_variants_are_copies_of_one_hybrid_and_its_base(models):
    assert tuple(models) == variants.VARIANTS
    ref = models["hybrid"][1].state_dict()
    for v in ("parts pattern", "cached pattern", "scale only"):
        sd = models[v][1].state_dict()
        assert sd.keys() == ref.keys() and all(torch.equal(sd[k], ref[k]) for k in ref)
    assert not variants._branches(models["base"][1])


@pytest.mark.skipif(not native.available(), reason="the one-call pattern needs the kernels")
def test_parts_pattern_runs_the_union_of_parts(models):
    q, k = torch.randn(2, 4, 1, 20, 4).unbind(0)
    fast, parts = _branch(models, "hybrid").pattern, _branch(models, "parts pattern").pattern
    assert type(fast).forward is not UnionPattern.forward
    torch.manual_seed(0)
    want = UnionPattern.forward(fast, q, k)
    torch.manual_seed(0)
    got = parts(q, k)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_cached_pattern_returns_its_first_lists_and_no_loss(models):
    pat = _branch(models, "cached pattern").pattern
    q, k = torch.randn(2, 4, 1, 20, 4).unbind(0)
    first, aux = pat(q, k)
    again, aux2 = pat(*torch.randn(2, 4, 1, 20, 4).unbind(0))
    assert aux is None and aux2 is None and again is first


def test_scale_only_branch_is_xc_times_scale(models):
    br = _branch(models, "scale only")
    xc = torch.randn(2, 5, br.scale.shape[0])
    assert torch.equal(br(xc, []), xc * br.scale)


def test_batch_one_copies_step_the_first_sample_of_each_batch(models):
    for v in ("hybrid", "base"):
        cfg, model, batches = models[v]
        cfg1, one, batches1 = models[v + variants.ONE]
        assert one is not model and cfg1 is cfg and len(batches1) == len(batches)
        ref, sd = model.state_dict(), one.state_dict()
        assert sd.keys() == ref.keys() and all(torch.equal(sd[k], ref[k]) for k in ref)
        for (x, y), (x1, y1) in zip(batches, batches1, strict=True):
            assert x.shape[0] == 32 and x1.shape[0] == 1
            assert torch.equal(x1, x[:1]) and torch.equal(y1, y[:1])


def test_run_times_every_variant_against_the_base():
    table = variants.run("mamba+hax", steps=2, warmup=1)
    assert tuple(table) == variants.VARIANTS
    assert table["base"]["base_over_this"] == 1.0
    for r in table.values():
        assert 0 < r["min_ms"] <= r["p10_ms"] <= r["cpu_ms"]
    for v in ("hybrid", "base"):
        share = table[v + variants.ONE]["of_batch_32"]
        assert share == table[v + variants.ONE]["cpu_ms"] / table[v]["cpu_ms"]
    assert not any("of_batch_32" in r for v, r in table.items() if not v.endswith(variants.ONE))


def test_only_the_hybrids_have_variants():
    with pytest.raises(SystemExit, match="--model must be one of"):
        variants.variant_models("transformer")
