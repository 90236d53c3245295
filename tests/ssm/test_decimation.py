"""DeciMamba decimation: selection against brute force, kept outputs against the plain scan on the
kept subsequence, batched against a per-row loop, and the model-level invariants."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from recall_lab.generators.errors import RecallLabError
from recall_lab.ssm import Mamba2Mixer, MambaMixer, selective_scan_ref, ssd_ref
from recall_lab.ssm.decimation import (
    Decimate,
    decimate_indices,
    decimate_indices_loop,
    decimation_scores,
    first_sep,
    keep_count,
)


@st.composite
def selections(draw):
    b, length = draw(st.integers(1, 4)), draw(st.integers(1, 24))
    # few distinct values: many ties
    score = torch.tensor(
        draw(st.lists(st.integers(0, 4), min_size=b * length, max_size=b * length)),
        dtype=torch.float64,
    ).view(b, length)
    keep_from = torch.tensor(draw(st.lists(st.integers(0, length), min_size=b, max_size=b)))
    n_keep = torch.tensor(draw(st.lists(st.integers(0, length + 2), min_size=b, max_size=b)))
    return score, n_keep, keep_from


@settings(max_examples=200, deadline=None)
@given(sel=selections())
def test_batched_selection_equals_loop_and_brute_force(sel):
    score, n_keep, keep_from = sel
    fast, ref = decimate_indices(score, n_keep, keep_from), decimate_indices_loop(*sel)
    assert torch.equal(fast.valid, ref.valid)
    assert torch.equal(fast.idx[fast.valid], ref.idx[ref.valid])
    length = score.shape[1]
    for r in range(score.shape[0]):
        kept = fast.idx[r][fast.valid[r]].tolist()
        kf = int(keep_from[r])
        p = min(int(n_keep[r]), kf)
        assert kept == sorted(set(kept)), "strictly increasing"
        assert len(kept) == p + length - kf
        assert kept[p:] == list(range(kf, length)), "everything from the first SEP is kept"
        # brute force: the kept context is a best p-subset, and among equal scores the earliest
        ctx = [t for t in kept if t < kf]
        best = max(
            itertools.combinations(range(kf), p),
            key=lambda c: (sorted((float(score[r, t]) for t in c), reverse=True),
                           [-t for t in c]),
        ) if kf <= 10 else None
        if best is not None:
            assert ctx == list(best)
        valid_tail = fast.valid[r, len(kept):]
        assert not valid_tail.any(), "ragged padding only at the end"


def test_keep_count_formula():
    n_ctx = torch.tensor([5, 40, 100, 1000])
    # P_s = max(min_len, floor(L_base beta^s)), at most n_ctx (Eq. 11, min_len from App. A.1)
    assert keep_count(n_ctx, 0, 64, 0.5, 20).tolist() == [5, 40, 64, 64]
    assert keep_count(n_ctx, 1, 64, 0.5, 20).tolist() == [5, 32, 32, 32]
    assert keep_count(n_ctx, 2, 64, 0.5, 20).tolist() == [5, 20, 20, 20]  # 16 -> floor 20
    assert keep_count(n_ctx, 1, 100, 0.83, 0).tolist() == [5, 40, 83, 83]
    # Top-K%: a fraction of the row's context (ceil), floor min_len
    assert keep_count(n_ctx, 0, 64, top_k=0.5, min_len=3).tolist() == [3, 20, 50, 500]
    with pytest.raises(RecallLabError):
        keep_count(n_ctx, 0, 64, top_k=1.5)


def test_scores_by_hand():
    delta = torch.tensor([[[1.0, 3.0], [3.0, 4.0]]])  # [b=1, c=2, l=2]
    xc = torch.tensor([[[3.0, 0.0], [4.0, 1.0]]])
    assert decimation_scores(delta, "mean").tolist() == [[2.0, 3.5]]
    assert torch.allclose(decimation_scores(delta, "l2"), torch.tensor([[10**0.5, 5.0]]))
    assert decimation_scores(delta, "xnorm", xc).tolist() == [[5.0, 1.0]]
    r8 = decimation_scores(torch.zeros(3, 2, 8), "random")
    r5 = decimation_scores(torch.zeros(1, 2, 5), "random")
    assert torch.equal(r8[0], r8[2]) and torch.equal(r8[0, :5], r5[0])  # per position, prefix
    with pytest.raises(RecallLabError, match="xc"):
        decimation_scores(delta, "xnorm")
    with pytest.raises(RecallLabError, match="one of"):
        decimation_scores(delta, "max")


def test_first_sep():
    ids = torch.tensor([[1, 5, 2, 6, 2], [1, 5, 6, 7, 0]])
    assert first_sep(ids, 2).tolist() == [2, 5]


def _mamba(seed=0):
    torch.manual_seed(seed)
    return MambaMixer(8, d_state=4, d_conv=3).double()


def _mamba2(seed=0):
    torch.manual_seed(seed)
    return Mamba2Mixer(8, d_state=4, headdim=4, chunk_size=4).double()


@pytest.mark.parametrize("score", ["mean", "l2", "xnorm", "random"])
def test_mamba_kept_outputs_equal_plain_scan_on_kept_tokens(score):
    mixer = _mamba()
    x = torch.randn(3, 17, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    dec = Decimate(torch.tensor([4, 9, 20]), torch.tensor([10, 12, 17]), score)
    out, kept = mixer(x, decimate=dec)
    _, p = mixer(x, return_params=True)  # full-length conv, Delta, B, C
    z = mixer.in_proj(x).transpose(1, 2).chunk(2, dim=1)[1]
    s = decimation_scores(p.delta, score, p.x)
    ref = decimate_indices_loop(s, dec.n_keep, dec.keep_from)
    assert torch.equal(kept.valid, ref.valid)
    assert torch.equal(kept.idx[kept.valid], ref.idx[ref.valid])
    for r in range(3):
        idx = ref.idx[r][ref.valid[r]]
        dt_raw = mixer._ssm_inputs(p.x)[0]
        y = selective_scan_ref(p.x[r:r + 1, :, idx], dt_raw[r:r + 1, :, idx], p.A,
                               p.B[r:r + 1, :, idx], p.C[r:r + 1, :, idx], p.D,
                               z=z[r:r + 1, :, idx], delta_bias=mixer.dt_proj.bias,
                               delta_softplus=True)
        want = mixer.out_proj(y.transpose(1, 2))[0]
        torch.testing.assert_close(out[r, : len(idx)], want, rtol=1e-10, atol=1e-10)


def test_mamba2_kept_outputs_equal_plain_ssd_on_kept_tokens():
    mixer = _mamba2()
    x = torch.randn(2, 15, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    dec = Decimate(torch.tensor([3, 6]), torch.tensor([9, 15]))
    out, kept = mixer(x, decimate=dec)
    _, p = mixer(x, return_params=True)
    z, _, dt = mixer._split(mixer.in_proj(x))
    ref = decimate_indices_loop(p.delta.mean(1), dec.n_keep, dec.keep_from)
    assert torch.equal(kept.idx[kept.valid], ref.idx[ref.valid])
    for r in range(2):
        idx = ref.idx[r][ref.valid[r]]
        y = ssd_ref(p.x[r:r + 1, idx], dt[r:r + 1, idx], p.A, p.B[r:r + 1, idx],
                    p.C[r:r + 1, idx], D=p.D, dt_bias=mixer.dt_bias, dt_softplus=True)
        y = y.reshape(1, len(idx), mixer.d_inner)
        want = mixer.out_proj(mixer.norm(y, z[r:r + 1, idx]))[0]
        torch.testing.assert_close(out[r, : len(idx)], want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("make", [_mamba, _mamba2])
def test_batched_equals_per_sample_loop(make):
    mixer = make()
    x = torch.randn(4, 16, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    n_keep, keep_from = torch.tensor([2, 5, 16, 0]), torch.tensor([6, 11, 16, 3])
    out, kept = mixer(x, decimate=Decimate(n_keep, keep_from))
    for r in range(4):
        o, k = mixer(x[r:r + 1], decimate=Decimate(n_keep[r:r + 1], keep_from[r:r + 1]))
        n = int(kept.valid[r].sum())
        assert o.shape[1] == n
        assert torch.equal(k.idx[0], kept.idx[r, :n])
        torch.testing.assert_close(out[r, :n], o[0], rtol=1e-12, atol=1e-12)


def test_decimation_and_reset_are_refused_together():
    with pytest.raises(RecallLabError, match="cannot be combined"):
        _mamba()(torch.zeros(1, 4, 8, dtype=torch.float64), reset=torch.zeros(4, dtype=bool),
                 decimate=Decimate(torch.tensor([1]), torch.tensor([2])))


def test_scores_read_full_length_delta():
    """Alg. 1: Delta (and the conv) are computed on the full sequence before any gather, so the
    kept set equals the top-P of the plain forward's Delta."""
    mixer = _mamba(4)
    x = torch.randn(1, 12, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    _, kept = mixer(x, decimate=Decimate(torch.tensor([3]), torch.tensor([8])))
    _, p = mixer(x, return_params=True)
    top = torch.topk(p.delta.mean(1)[0, :8], 3).indices.sort().values
    assert kept.idx[0].tolist() == top.tolist() + [8, 9, 10, 11]
    assert F.softplus(torch.tensor(0.0)) > 0  # Delta > 0 always: scores are never degenerate
