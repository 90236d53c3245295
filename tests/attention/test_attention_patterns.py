"""Patterns vs brute-force dense-mask definitions of the same causal semantics; invariants."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from recall_lab import native
from recall_lab.attention import (
    PATTERNS,
    bucket_window_indices,
    causal_topk_indices,
    dilation_for,
    ks_ranking_loss,
    lsh_bins,
    lsh_indices,
    make_pattern,
    sample_planes,
    union_indices,
)
from recall_lab.attention.patterns import (
    bucket_window_indices_torch,
    causal_topk_indices_torch,
    union_indices_torch,
)
from recall_lab.generators.errors import RecallLabError


def to_mask(idx: torch.Tensor, length: int, shape=None) -> torch.Tensor:
    """Count matrix [.., L, L]: how often key j is listed for query i (checks duplicates too)."""
    idx = idx.long()
    if shape is not None:
        idx = idx.expand(*shape[:2], length, idx.shape[-1])
    cnt = torch.zeros(*idx.shape[:-1], length + 1, dtype=torch.long)
    cnt.scatter_add_(-1, torch.where(idx < 0, length, idx), torch.ones_like(idx))
    return cnt[..., :length]


def most_recent(cand: torch.Tensor, n: int) -> torch.Tensor:
    """Keep, per row, the n right-most True entries (brute force, loop)."""
    out = torch.zeros_like(cand)
    for r in itertools_rows(cand):
        cols = torch.nonzero(cand[r]).flatten().tolist()
        for j in cols[-n:] if n else []:
            out[r + (j,)] = True
    return out


def itertools_rows(t: torch.Tensor):
    import itertools

    return itertools.product(*(range(s) for s in t.shape[:-1]))


def causal(length: int) -> torch.Tensor:
    return torch.ones(length, length, dtype=torch.bool).tril()


def dense_fixed(name: str, length: int, n: int, max_len: int = 2048) -> torch.Tensor:
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    c = j <= i
    if name == "sw":
        return c & (i - j < n)
    if name == "sink":
        return c & (j < n)
    if name == "d":
        g = math.ceil(max_len / n)  # fixed by the config, not by this sequence's length
        return most_recent(c & (j % g == g - 1), n)
    if name == "full":
        return c
    half, rest = n // 2, n - n // 2
    if name == "a":
        return dense_fixed("sw", length, rest) | dense_fixed("sink", length, half)
    if name == "sw+d":
        return dense_fixed("sw", length, rest) | dense_fixed("d", length, half, max_len)
    raise AssertionError(name)


def brute_center(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x, dtype=torch.float32)
    for i in range(x.shape[-2]):
        v = x[..., i, :].float() - x[..., : i + 1, :].float().mean(-2)
        out[..., i, :] = v / v.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return out


def brute_bins(x: torch.Tensor, planes: torch.Tensor, rule: str) -> torch.Tensor:
    proj = x @ planes
    h = planes.shape[-1]
    if rule == "argmax":
        return proj.argmax(-1)
    code = torch.zeros(proj.shape[:-1], dtype=torch.long)
    for jj in range(1, h + 1):  # Eq. 7 literally: bit of plane j weighs 2^(h-j)
        code += (proj[..., jj - 1] > 0).long() * 2 ** (h - jj)
    return code


def dense_lsh(q, k, n, planes, rule):
    bq = brute_bins(brute_center(q), planes, rule)
    bk = brute_bins(brute_center(k), planes, rule)
    length = q.shape[-2]
    same = bq[..., :, None] == bk[..., None, :]
    return most_recent(same & causal(length), n)


def dense_topk(scores: torch.Tensor, n: int) -> torch.Tensor:
    length = scores.shape[-1]
    out = torch.zeros(*scores.shape, length, dtype=torch.bool)
    for r in itertools_rows(scores):
        for i in range(length):
            top = torch.argsort(scores[r][: i + 1], descending=True)[:n]
            out[r + (i,)][top] = True
    return out


def assert_valid_topk(mask: torch.Tensor, scores: torch.Tensor, n: int) -> None:
    """Each row i selects min(n, i+1) keys <= i, none scoring below an unselected one (ties ok)."""
    length = scores.shape[-1]
    for r in itertools_rows(scores):
        for i in range(length):
            sel = mask[r + (i,)][: i + 1]
            assert int(sel.sum()) == min(n, i + 1)
            x = scores[r][: i + 1]
            if bool((~sel).any()):
                assert float(x[sel].min()) >= float(x[~sel].max())


def check_invariants(idx: torch.Tensor, length: int, budget: int, shape) -> torch.Tensor:
    assert idx.dtype == torch.int32 and idx.shape[-2] == length
    pos = torch.arange(length)[:, None]
    assert bool(((idx < 0) | (idx.long() <= pos)).all()), "a key after its query"
    assert bool((idx >= -1).all())
    cnt = to_mask(idx, length, shape)
    assert int(cnt.max()) <= 1, "duplicate key in a row"
    assert int(cnt.sum(-1).max()) <= budget, "budget exceeded"
    return cnt.bool()


@given(st.sampled_from(["sw", "sink", "d", "a", "sw+d", "full"]), st.integers(1, 40),
       st.integers(2, 12), st.integers(1, 60))
def test_fixed_patterns_match_dense_definition(name, length, n, max_len):
    q = torch.zeros(1, 1, length, 4)
    opts = {"max_len": max_len} if name in ("d", "sw+d") else {}
    idx, aux = make_pattern(name, n, **opts)(q, q)
    assert aux is None
    mask = check_invariants(idx, length, length if name == "full" else n, (1, 1))
    assert torch.equal(mask[0, 0], dense_fixed(name, length, n, max_len))


def test_dilation_rules():
    assert dilation_for(32, "auto", max_len=1058) == 34  # ceil(1058 / 32)
    assert dilation_for(32, "auto") == 2048 // 32
    assert dilation_for(32, "release", max_len=1058) == 33  # 1058 // 32
    assert dilation_for(32, "release") == 2048 // 32
    assert dilation_for(32, 7) == 7
    # release rule at L > 2048 would list more than n keys: we keep the n most recent.
    idx, _ = make_pattern("d", 4, dilation="release", max_len=16)(torch.zeros(1, 1, 40, 2),
                                                                   torch.zeros(1, 1, 40, 2))
    assert idx[0, 0, 39].sort().values.tolist() == [27, 31, 35, 39]
    assert idx[0, 0, 38].sort().values.tolist() == [23, 27, 31, 35]
    with pytest.raises(RecallLabError):
        dilation_for(2, "weird")
    with pytest.raises(RecallLabError):
        dilation_for(2, "auto", max_len=0)


def test_dilated_keys_do_not_depend_on_the_sequence_length():
    """The same query reads the same keys in a sequence of 20 and of 2000 tokens."""
    pat = make_pattern("d", 4, max_len=40)  # gap ceil(40 / 4) = 10: keys 9, 19, 29, ...
    short = pat(torch.zeros(1, 1, 20, 2), torch.zeros(1, 1, 20, 2))[0]
    long = pat(torch.zeros(1, 1, 2000, 2), torch.zeros(1, 1, 2000, 2))[0]
    assert torch.equal(short[0, 0], long[0, 0, :20])
    assert sorted(k for k in long[0, 0, 19].tolist() if k >= 0) == [9, 19]
    assert sorted(long[0, 0, 1999].tolist()) == [1969, 1979, 1989, 1999]


@given(st.integers(1, 30), st.integers(1, 8), st.integers(1, 5), st.integers(0, 10**6),
       st.sampled_from(["sign", "argmax"]))
def test_lsh_matches_dense_definition(length, n, h, seed, rule):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 2, length, 3, generator=g)
    k = torch.randn(2, 2, length, 3, generator=g)
    pat = make_pattern("lsh", n, h=h, rule=rule, seed=seed).eval()
    idx, aux = pat(q, k)
    assert aux is None
    mask = check_invariants(idx, length, n, q.shape)
    planes = sample_planes(3, h, 2, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(mask, dense_lsh(q, k, n, planes, rule))


@given(st.integers(1, 40), st.integers(1, 6), st.integers(1, 5), st.integers(0, 10**6))
def test_bucket_window_matches_brute_force(length, n_bins, n, seed):
    g = torch.Generator().manual_seed(seed)
    bq = torch.randint(0, n_bins, (3, length), generator=g)
    bk = torch.randint(0, n_bins, (3, length), generator=g)
    idx = bucket_window_indices(bq, bk, n)
    mask = check_invariants(idx, length, n, None)
    same = (bq[:, :, None] == bk[:, None, :]) & causal(length)
    assert torch.equal(mask, most_recent(same, n))


@pytest.mark.skipif(not native.available(), reason=f"no native kernels: {native.load()[1]}")
@given(st.integers(1, 60), st.integers(1, 300), st.integers(1, 9), st.integers(0, 10**6))
def test_native_bucket_window_equals_the_torch_path(length, n_bins, n, seed):
    """Same lists in the same slot order (newest first), with broadcasting lead dims."""
    g = torch.Generator().manual_seed(seed)
    bq = torch.randint(0, n_bins, (2, 1, length), generator=g)
    bk = torch.randint(0, n_bins, (1, 3, length), generator=g)
    assert torch.equal(bucket_window_indices(bq, bk, n), bucket_window_indices_torch(bq, bk, n))


def test_lsh_planes_fresh_in_training_fixed_in_eval():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 64, 8, generator=g), torch.randn(1, 2, 64, 8, generator=g)
    pat = make_pattern("lsh", 4, h=4, seed=3)
    pat.eval()
    a, _ = pat(q, k)
    b, _ = pat(q, k)
    assert torch.equal(a, b)
    planes = sample_planes(8, 4, 2, generator=torch.Generator().manual_seed(3))
    from recall_lab.attention import causal_center

    assert torch.equal(a, lsh_indices(causal_center(q), causal_center(k), 4, planes, "sign"))
    pat.train()
    torch.manual_seed(1)
    c, _ = pat(q, k)
    d, _ = pat(q, k)
    assert not torch.equal(c, d)


@given(st.integers(1, 45), st.integers(1, 9), st.integers(0, 10**6))
def test_causal_topk_matches_brute_force(length, n, seed):
    scores = torch.randn(2, 3, length, generator=torch.Generator().manual_seed(seed))
    idx = causal_topk_indices(scores, n)
    mask = check_invariants(idx, length, n, None)
    assert torch.equal(mask, dense_topk(scores, n))


@given(st.integers(1, 30), st.integers(2, 10), st.integers(0, 10**6))
def test_ks_and_hax_match_dense_definition(length, n, seed):
    torch.manual_seed(seed)
    q, k = torch.randn(1, 2, length, 4), torch.randn(1, 2, length, 4)
    ks = make_pattern("ks", n, dim=4).eval()
    idx, aux = ks(q, k)
    assert aux is None
    mask = check_invariants(idx, length, n, q.shape)
    with torch.no_grad():
        x = ks.scores(q, k)
    # An untrained ReLU scorer can tie (dead units); any valid top-n is then correct.
    assert_valid_topk(mask, x, n)
    if bool((x.sort(-1).values.diff(dim=-1) > 0).all()):
        assert torch.equal(mask, dense_topk(x, n))

    hax = make_pattern("hax", n, dim=4, h=3, seed=seed).eval()
    idx, _ = hax(q, k)
    mask = check_invariants(idx, length, n, q.shape)
    lsh, kss = hax.parts
    planes = sample_planes(4, 3, 2, generator=torch.Generator().manual_seed(seed))
    ks_idx, _ = kss(q, k)
    ks_mask = to_mask(ks_idx, length, q.shape).bool()
    with torch.no_grad():
        assert_valid_topk(ks_mask, kss.scores(q, k), n // 2)
    assert torch.equal(mask, dense_lsh(q, k, n - n // 2, planes, "sign") | ks_mask)


def test_union_counts_a_key_once():
    a = torch.tensor([[[[0, 1, -1], [2, 1, 0]]]], dtype=torch.int32)
    b = torch.tensor([[[[1, -1], [0, 3]]]], dtype=torch.int32)
    u = union_indices(a, b)
    assert u.shape[-1] == 5
    assert to_mask(u, 4).tolist() == [[[[1, 1, 0, 0], [1, 1, 1, 1]]]]


def _random_part(lead, length, n, gen):
    """Duplicate-free random key lists with empty slots (the pattern contract)."""
    out = torch.full((*lead, length, n), -1, dtype=torch.int32)
    flat = out.view(-1, length, n)
    for r in range(flat.shape[0]):
        for i in range(length):
            keys = torch.randperm(length, generator=gen)[:n]
            keep = torch.rand(len(keys), generator=gen) > 0.3
            flat[r, i, : len(keys)] = torch.where(keep, keys, -1).to(torch.int32)
    return out


@given(length=st.integers(1, 9), na=st.integers(1, 5), nb=st.integers(1, 5),
       nc=st.integers(0, 3), seed=st.integers(0, 10**6))
def test_union_is_the_or_of_the_masks(length, na, nb, nc, seed):
    """Against the brute-force OR of the parts' masks, with broadcasting lead dims: every key
    occurs once and the slot count is the sum of the parts'."""
    gen = torch.Generator().manual_seed(seed)
    parts = [_random_part((1, 1), length, na, gen), _random_part((2, 3), length, nb, gen)]
    if nc:
        parts.append(_random_part((2, 1), length, nc, gen))
    u = union_indices(*parts)
    assert u.shape == (2, 3, length, na + nb + nc) and u.dtype == torch.int32
    want = torch.zeros(2, 3, length, length, dtype=torch.bool)
    for p in parts:
        want |= to_mask(p, length).bool()
    assert torch.equal(to_mask(u, length), want.long())


@pytest.mark.skipif(not native.available(), reason=f"no native kernels: {native.load()[1]}")
@given(length=st.integers(1, 60), na=st.integers(1, 5), nb=st.integers(1, 5),
       seed=st.integers(0, 10**6))
def test_native_union_equals_the_torch_sort(length, na, nb, seed):
    """Both native paths: counts (keys <= 4 x slots) and the insertion sort (more keys)."""
    gen = torch.Generator().manual_seed(seed)
    a, b = _random_part((2, 1), length, na, gen), _random_part((2, 3), length, nb, gen)
    b[..., 0] = a[..., 0]  # some keys in both parts
    cat = torch.cat([a.expand(2, 3, length, na), b], -1)
    assert torch.equal(union_indices(a, b), union_indices_torch(cat))


@pytest.mark.skipif(not native.available(), reason=f"no native kernels: {native.load()[1]}")
@given(length=st.integers(1, 70), n=st.integers(1, 12), ties=st.booleans(),
       seed=st.integers(0, 10**6))
def test_native_causal_topk_selects_the_torch_paths_keys(length, n, ties, seed):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(3, length, generator=gen)
    if ties:  # few distinct values: any valid top-n, and the earlier key wins a tie
        scores = scores.round()
    got = causal_topk_indices(scores, n)
    mask = check_invariants(got, length, n, None)
    if ties:
        assert_valid_topk(mask.bool(), scores, n)
        # earlier wins: a selected key never has an unselected earlier key with the same score
        for r in range(3):
            for i in range(length):
                chosen = mask[r, i, : i + 1].bool()
                for j in range(i + 1):
                    if chosen[j]:
                        earlier = (scores[r, :j] == scores[r, j]) & ~chosen[:j]
                        assert not earlier.any()
    # both paths give ties to the earlier key: the same keys either way
    assert torch.equal(mask, to_mask(causal_topk_indices_torch(scores, n), length).bool())


def brute_ranking_loss(scores, q, k, sel, scale):
    total, count = 0.0, 0
    for r in itertools_rows(sel):
        js = sel[r].tolist()
        y = [sum(torch.sigmoid(scale * q[r][i] @ k[r][j]).item()
                 for i in range(q.shape[-2]) if i >= j) for j in js]
        x = [scores[r][j].item() for j in js]
        for a in range(len(js)):
            for b in range(len(js)):
                t = 1.0 if y[a] > y[b] else (0.5 if y[a] == y[b] else 0.0)
                z = x[a] - x[b]
                total += -(t * math.log(torch.sigmoid(torch.tensor(z)).item())
                           + (1 - t) * math.log(torch.sigmoid(torch.tensor(-z)).item()))
                count += 1
    return total / count


def test_ks_ranking_loss_matches_eq_15_17():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 12, 3, generator=g, dtype=torch.float64), torch.randn(
        2, 1, 12, 3, generator=g, dtype=torch.float64)
    scores = torch.randn(2, 1, 12, generator=g, dtype=torch.float64)
    loss = ks_ranking_loss(scores, q, k, 5, 0.7, generator=torch.Generator().manual_seed(9))
    sel = torch.rand(scores.shape, generator=torch.Generator().manual_seed(9)).topk(5, -1).indices
    assert loss.item() == pytest.approx(brute_ranking_loss(scores, q, k, sel, 0.7), rel=1e-6)


def test_ks_aux_loss_trains_only_the_scorer():
    torch.manual_seed(0)
    q = torch.randn(1, 2, 20, 4, requires_grad=True)
    k = torch.randn(1, 2, 20, 4, requires_grad=True)
    pat = make_pattern("hax", 8, dim=4).train()
    _, aux = pat(q, k)
    aux.backward()
    assert q.grad is None and k.grad is None
    # The last bias cancels in the score differences (Eq. 16), so only the sum is checked.
    assert all(p.grad is not None for p in pat.parameters())
    assert sum(float(p.grad.abs().sum()) for p in pat.parameters()) > 0


@pytest.mark.parametrize("name", PATTERNS)
def test_budget_and_shapes_for_the_paper_setup(name):
    length = 300
    q, k = torch.randn(2, 1, length, 16), torch.randn(2, 1, length, 16)
    pat = make_pattern(name, 64, dim=16) if name in ("ks", "hax") else make_pattern(name, 64)
    # a pattern that reads token ids (the oracle) gets random ones with many repeats
    takes_ids = getattr(pat, "takes_ids", False)
    ids = {"ids": torch.randint(0, 3, (2, length))} if takes_ids else {}
    idx, _ = pat(q, k, torch.randn(2, 1, length, 16), **ids)
    # attamba's k is its chunk size: ceil(L/P) ends + a window of P
    budget = {"full": length, "attamba": -(-length // 64) + 64}.get(name, 64)
    check_invariants(idx, length, budget, q.shape)


def test_bad_arguments_raise_one_clear_error():
    with pytest.raises(RecallLabError):
        make_pattern("nope", 8)
    with pytest.raises(RecallLabError):
        make_pattern("sw", 0)
    with pytest.raises(RecallLabError):
        make_pattern("ks", 8)
    with pytest.raises(RecallLabError):
        make_pattern("sw", 8, h=3)
    with pytest.raises(RecallLabError):
        make_pattern("lsh", 8, rule="cosine")
    with pytest.raises(RecallLabError):
        make_pattern("sw", 4)(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))
    with pytest.raises(RecallLabError):
        lsh_bins(torch.zeros(3, 2), torch.zeros(2, 2), "bogus")


def test_ks_loss_rescoring_sampled_keys_equals_scoring_every_key():
    """KSPattern re-scores only the n sampled keys with autograd: same loss and scorer
    gradients as differentiating the scores of all L keys (the reference path)."""
    torch.manual_seed(0)
    q = torch.randn(2, 3, 40, 4, dtype=torch.float64)
    k = torch.randn(2, 3, 40, 4, dtype=torch.float64)
    ks = make_pattern("ks", 8, dim=4).double().train()
    torch.manual_seed(5)
    idx, aux = ks(q, k)
    aux.backward()
    fast = [p.grad.clone() for p in ks.parameters()]
    ks.zero_grad()
    torch.manual_seed(5)
    x = ks.scores(q, k)
    ref = ks_ranking_loss(x, q, k, 8, ks.scale)
    ref.backward()
    assert torch.equal(idx, causal_topk_indices(x.detach(), 8))
    torch.testing.assert_close(aux, ref)
    for a, p in zip(fast, ks.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad)
