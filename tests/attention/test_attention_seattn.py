"""SE-Attn pattern vs its loop reference (seed 001 Eq. 1-7); causality, the paper's leak,
retrieval order, limits (no memory = block-diagonal, all blocks = full attention)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.attention import make_pattern, sparse_attention
from recall_lab.attention.seattn import (
    block_summaries,
    landmark_queries,
    random_scores,
    seattn_indices,
)
from recall_lab.attention.seattn_reference import seattn_reference
from recall_lab.generators.errors import RecallLabError


def key_sets(idx: torch.Tensor, b: int, h: int) -> list:
    idx = idx.expand(b, h, *idx.shape[2:])
    return [[[{int(j) for j in row if j >= 0} for row in idx[bi, hi]] for hi in range(h)]
            for bi in range(b)]


def inputs(seed: int, length: int, d: int = 4, dv: int | None = None, b: int = 2, h: int = 2):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, length, d, generator=gen, dtype=torch.float64)
    k = torch.randn(b, h, length, d, generator=gen, dtype=torch.float64)
    v = torch.randn(b, h, length, dv or d, generator=gen, dtype=torch.float64)
    return q, k, v


@given(length=st.integers(1, 40), chunk=st.integers(1, 9), block=st.integers(1, 5),
       topk=st.integers(0, 4), scoring=st.sampled_from(["prefix", "token", "chunk"]),
       summary=st.sampled_from(["value", "key"]), landmark=st.booleans(),
       seed=st.integers(0, 10**6))
def test_pattern_and_op_match_the_loop_reference(length, chunk, block, topk, scoring, summary,
                                                 landmark, seed):
    q, k, v = inputs(seed, length)
    lm = landmark_queries(2, 4, 7).double() if landmark else None
    pat = make_pattern("seattn", 64, chunk=chunk, block=block, topk=topk, scoring=scoring,
                       summary=summary, pool="landmark" if landmark else "attention",
                       seed=7).eval()
    idx, aux = pat(q, k, v)
    assert aux is None and idx.dtype == torch.int32
    ref_out, ref_keys = seattn_reference(q, k, v, chunk=chunk, block=block, topk=topk,
                                         scoring=scoring, summary=summary, landmark=lm)
    assert key_sets(idx, 2, 2) == ref_keys
    out = sparse_attention(q, k, v, idx, backend="torch")
    torch.testing.assert_close(out, ref_out, rtol=1e-9, atol=1e-9)


@given(length=st.integers(1, 40), chunk=st.integers(1, 9), block=st.integers(1, 5),
       topk=st.integers(1, 4), seed=st.integers(0, 2**30))
def test_random_retrieval_matches_the_reference_and_is_seeded(length, chunk, block, topk, seed):
    q, k, v = inputs(0, length)
    pat = make_pattern("seattn-random", 64, chunk=chunk, block=block, topk=topk,
                       seed=seed).eval()
    idx, _ = pat(q, k, v)
    starts = torch.arange(length) // chunk * chunk
    rs = random_scores(2, starts, length // block, seed)[0]
    _, ref_keys = seattn_reference(q, k, v, chunk=chunk, block=block, topk=topk,
                                   retrieval="random", random_scores=rs)
    assert key_sets(idx, 2, 2) == ref_keys
    # Independent of the data: other q, k, v give the same indices.
    idx2, _ = pat(*inputs(1, length))
    assert torch.equal(idx, idx2)


def test_random_retrieval_draws_differ_by_seed_and_per_training_step():
    q, k, v = inputs(0, 256)
    a, _ = make_pattern("seattn-random", 64, chunk=32, block=4, topk=2, seed=0).eval()(q, k, v)
    b, _ = make_pattern("seattn-random", 64, chunk=32, block=4, topk=2, seed=1).eval()(q, k, v)
    assert not torch.equal(a, b)
    pat = make_pattern("seattn-random", 64, chunk=32, block=4, topk=2).train()
    torch.manual_seed(3)
    t1, _ = pat(q, k, v)
    t2, _ = pat(q, k, v)
    torch.manual_seed(3)
    t3, _ = pat(q, k, v)
    assert not torch.equal(t1, t2) and torch.equal(t1, t3)


def test_random_retrieval_is_uniform_over_candidates():
    # Chunk starting at 64 with 16 candidate blocks of 4, top-2: each block chosen ~ 2/16.
    starts = torch.full((1,), 64)
    counts = torch.zeros(16)
    for seed in range(2000):
        s = random_scores(1, starts, 16, seed)[0, 0, 0]
        counts[s.topk(2).indices] += 1
    share = counts / 2000
    assert torch.allclose(share, torch.full((16,), 2 / 16), atol=0.03)


@given(length=st.integers(1, 50), chunk=st.integers(1, 10), seed=st.integers(0, 10**6))
def test_no_memory_is_block_diagonal_causal_attention(length, chunk, seed):
    q, k, v = inputs(seed, length)
    for idx in (make_pattern("seattn-nomem", 64, chunk=chunk)(q, k, v)[0],
                make_pattern("seattn", 64, chunk=chunk, topk=0)(q, k, v)[0]):
        i = torch.arange(length)[:, None]
        j = torch.arange(length)[None, :]
        mask = (j <= i) & (j // chunk == i // chunk)
        got = torch.zeros(length, length, dtype=torch.bool)
        for p in range(length):
            got[p, [int(x) for x in idx[0, 0, p] if x >= 0]] = True
        assert torch.equal(got, mask)


@given(length=st.integers(1, 60), block=st.integers(1, 6), mult=st.integers(1, 4),
       seed=st.integers(0, 10**6))
def test_all_blocks_retrieved_is_full_causal_attention(length, block, mult, seed):
    q, k, v = inputs(seed, length)
    chunk = block * mult  # S | M: every earlier token lies in a block ending before cs(p)
    idx, _ = make_pattern("seattn", 64, chunk=chunk, block=block, topk=length).eval()(q, k, v)
    dense = torch.softmax((q @ k.transpose(-1, -2) / 2.0).masked_fill(
        ~torch.ones(length, length, dtype=torch.bool).tril(), float("-inf")), -1) @ v
    torch.testing.assert_close(sparse_attention(q, k, v, idx, backend="torch"), dense)


@given(length=st.integers(2, 60), chunk=st.integers(1, 12), block=st.integers(1, 6),
       topk=st.integers(1, 5), seed=st.integers(0, 10**6))
def test_retrieved_blocks_end_before_the_chunk_and_count_is_min_k_candidates(
        length, chunk, block, topk, seed):
    q, k, v = inputs(seed, length)
    idx, _ = make_pattern("seattn", 64, chunk=chunk, block=block, topk=topk)(q, k, v)
    ret = idx[..., : topk * block] if length // block >= topk else idx[..., : (length // block)
                                                                        * block]
    for p in range(length):
        cs = p // chunk * chunk
        n_cand = sum(1 for j in range(length // block) if (j + 1) * block <= cs)
        row = ret[0, 0, p]
        got = row[row >= 0]
        assert bool((got < cs).all())
        assert len(got) == min(topk, n_cand) * block
        assert len(set(got.tolist())) == len(got)
        assert set((got // block).tolist()) == {int(x) // block for x in got}


def test_retrieval_picks_the_highest_scoring_blocks():
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 1, 96, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    chunk, block, topk = 32, 4, 3
    idx, _ = make_pattern("seattn", 64, chunk=chunk, block=block, topk=topk)(q, k, v)
    c = block_summaries(q, k, v, block)[0, 0]  # [24, 8], checked against the reference above
    for p in range(chunk, 96):
        cs = p // chunk * chunk
        r = q[0, 0, cs:p + 1].sum(0) @ c[: cs // block].T  # scores of the candidate blocks
        chosen = {int(x) // block for x in idx[0, 0, p, : topk * block]}
        assert len(chosen) == topk
        others = [j for j in range(cs // block) if j not in chosen]
        assert float(r[list(chosen)].min()) > float(r[others].max())


def test_summary_is_row_mean_of_in_block_attention():
    # Eq. 7 by hand for one block of two tokens.
    q = torch.tensor([[[[1.0, 0.0], [0.0, 2.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[1.0, 1.0], [0.0, 1.0]]]], dtype=torch.float64)
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]], dtype=torch.float64)
    s = 2 ** -0.5
    a0 = torch.softmax(torch.tensor([1.0 * s, 0.0]), 0)
    a1 = torch.softmax(torch.tensor([2.0 * s, 2.0 * s]), 0)
    want = ((a0 + a1) / 2).double()  # rows mean of A @ I
    torch.testing.assert_close(block_summaries(q, k, v, 2)[0, 0, 0], want)


@pytest.mark.parametrize("scoring", ["prefix", "token"])
@given(length=st.integers(2, 48), chunk=st.integers(1, 10), block=st.integers(1, 5),
       data=st.data())
def test_causal_scorings_are_causal_and_pad_invariant(scoring, length, chunk, block, data):
    t = data.draw(st.integers(0, length - 2), label="t")
    seed = data.draw(st.integers(0, 10**6), label="seed")
    q, k, v = inputs(seed, length)
    q2, k2, v2 = (x.clone() for x in (q, k, v))
    gen = torch.Generator().manual_seed(seed + 1)
    for x in (q2, k2, v2):
        x[..., t + 1:, :] = torch.randn(x[..., t + 1:, :].shape, generator=gen,
                                        dtype=x.dtype) * 5
    pat = make_pattern("seattn", 64, chunk=chunk, block=block, topk=2, scoring=scoring).eval()
    i1, _ = pat(q, k, v)
    i2, _ = pat(q2, k2, v2)
    assert key_sets(i1[..., : t + 1, :], 2, 2) == key_sets(i2[..., : t + 1, :], 2, 2)
    o1 = sparse_attention(q, k, v, i1)
    o2 = sparse_attention(q2, k2, v2, i2)
    torch.testing.assert_close(o1[..., : t + 1, :], o2[..., : t + 1, :], rtol=0, atol=0)
    # Pad invariance: the prefix alone gives the same keys and outputs.
    i3, _ = pat(q[..., : t + 1, :], k[..., : t + 1, :], v[..., : t + 1, :])
    assert key_sets(i3, 2, 2) == key_sets(i1[..., : t + 1, :], 2, 2)


def test_paper_chunk_scoring_reads_later_queries():
    # Blocks 0 and 1 (keys e1, e2) precede the chunk starting at 8. The chunk's first query
    # points at block 0; a later query of the same chunk points strongly at block 1.
    d, block, chunk = 2, 4, 8
    k = torch.zeros(1, 1, 12, d)
    k[..., 0:4, 0] = 1.0
    k[..., 4:8, 1] = 1.0
    q = torch.zeros(1, 1, 12, d)
    q[..., 8, 0] = 1.0
    q2 = q.clone()
    q2[..., 10, 1] = 10.0  # changes a token after position 8
    opts = {"chunk": chunk, "block": block, "topk": 1, "summary": "key"}
    first = {}
    for scoring in ("prefix", "chunk"):
        pat = make_pattern("seattn", 64, scoring=scoring, **opts)
        a, _ = pat(q, k)
        b, _ = pat(q2, k)
        first[scoring] = tuple({int(x) for x in t[0, 0, 8, :block]} for t in (a, b))
    assert first["prefix"] == ({0, 1, 2, 3}, {0, 1, 2, 3})  # causal: unaffected
    assert first["chunk"] == ({0, 1, 2, 3}, {4, 5, 6, 7})  # the paper's: position 8 saw 10


def test_training_draws_one_chunk_size_per_forward_from_the_choices():
    q, k, v = inputs(0, 64, b=1, h=1)
    pat = make_pattern("seattn", 64, chunk=8, chunk_choices=[4, 16], block=4, topk=1)
    assert pat.budget == 16 + 4
    seen = set()
    torch.manual_seed(0)
    for _ in range(20):
        idx, _ = pat.train()(q, k, v)
        seen.add(idx.shape[-1] - 4)
    assert seen == {4, 16}
    idx, _ = pat.eval()(q, k, v)
    assert idx.shape[-1] == 8 + 4
    torch.manual_seed(0)
    a = [pat.train()(q, k, v)[0].shape[-1] for _ in range(5)]
    torch.manual_seed(0)
    assert a == [pat.train()(q, k, v)[0].shape[-1] for _ in range(5)]


def test_defaults_from_the_budget_and_bad_options():
    pat = make_pattern("seattn", 64)
    assert (pat.chunk, pat.block, pat.topk, pat.budget) == (32, 8, 4, 64)
    assert make_pattern("seattn-nomem", 64).budget == 32
    q = torch.randn(1, 1, 300, 16)
    idx, _ = pat(q, q, q)
    assert idx.shape == (1, 1, 300, 64)
    with pytest.raises(RecallLabError, match="summary='value' needs v"):
        pat(q, q)
    with pytest.raises(RecallLabError, match="summary='value' needs v"):
        pat(q, q, torch.randn(1, 1, 300, 32))
    for bad in ({"scoring": "causal"}, {"chunk": 0}, {"block": 1.5}, {"summary": "mean"},
                {"retrieval": "lsh"}, {"chunk_choices": [0]}):
        with pytest.raises(RecallLabError):
            make_pattern("seattn", 64, **bad)
    with pytest.raises(RecallLabError, match="no option 'retrieval'"):
        make_pattern("seattn-random", 64, retrieval="none")
    with pytest.raises(RecallLabError):
        make_pattern("seattn", 64, h=3)


def test_no_gradient_through_retrieval():
    q, k, v = (x.float().requires_grad_() for x in inputs(0, 64, b=1, h=1))
    idx, _ = make_pattern("seattn", 64, chunk=16, block=4, topk=2)(q, k, v)
    assert not idx.requires_grad
    direct = seattn_indices(q.detach(), k.detach(), v.detach(), chunk=16, block=4, topk=2)
    assert torch.equal(idx, direct)
