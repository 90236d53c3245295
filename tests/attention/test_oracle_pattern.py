"""The oracle pattern (attention/oracle.py): hand-built rows, a loop reference on random ids (both
search paths), causality in the ids (change after t, cut, pad), what it lists on generated MQAR and
joint recall, and its errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.attention import PATTERN_TABLE, make_pattern
from recall_lab.attention import lsh as lsh_module
from recall_lab.attention.oracle import oracle_indices
from recall_lab.config import TASK_KEY_PATTERNS
from recall_lab.generators import TaskSpec
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.joint_recall import generate_rows, targets_for


def rows(idx: torch.Tensor) -> list[list[list[int]]]:
    """[B, 1, L, n] -> per batch row, per query: its listed positions, sorted (slot order carries
    no meaning)."""
    return [[sorted(p for p in r if p >= 0) for r in b[0].tolist()] for b in idx]


def reference(ids: list[int], n: int, keys: tuple[int, int] | None) -> list[list[int]]:
    """The definition, literally: for each i, the positions j + 1 <= i with ids[j] == ids[i] and
    ids[j] a key, the n largest."""
    out = []
    for i, x in enumerate(ids):
        is_key = keys is None or keys[0] <= x < keys[1]
        cand = [j + 1 for j in range(i) if is_key and ids[j] == x]
        out.append(sorted(cand[-n:]) if n else [])
    return out


# BOS k10 v3 k11 v4 k10 v5 SEP k10 v3 k11 k11 v7 k10; keys = ids 10..12, values 3..9
HAND = [1, 10, 3, 11, 4, 10, 5, 2, 10, 3, 11, 11, 7, 10]


def test_hand_built_rows_with_key_filter():
    idx = oracle_indices(torch.tensor([HAND]), 2, keys=(10, 13))
    assert idx.shape == (1, 1, len(HAND), 2) and idx.dtype == torch.int32
    expected = [
        [], [], [], [],   # BOS, first k10, v3, first k11: no earlier occurrence / not keys
        [],               # 4: v4
        [2],              # 5: k10 -> after the k10 at 1
        [], [],           # 6: v5, 7: SEP
        [2, 6],           # 8: k10 -> after the k10s at 1 and 5
        [],               # 9: v3 repeats the v3 at 2, but values are not keys
        [4],              # 10: k11 -> after the k11 at 3
        [4, 11],          # 11: k11 right after k11: its own position 11 counts (j + 1 = i)
        [],               # 12: v7
        [6, 9],           # 13: k10 at 1, 5, 8: n = 2 keeps the two latest, 2 is dropped
    ]
    assert rows(idx) == [expected]
    assert int((idx == -1).sum()) == 2 * len(HAND) - sum(len(r) for r in expected)


def test_hand_built_rows_without_key_filter():
    idx = oracle_indices(torch.tensor([HAND]), 2)  # keys=None: every id is a key
    got = rows(idx)[0]
    assert got[9] == [3]  # v3 now finds the position after the earlier v3
    assert got[13] == [6, 9] and got[8] == [2, 6] and got[2] == [] and got[0] == []


@pytest.mark.parametrize("native", [True, False], ids=["native", "torch"])
@given(length=st.integers(1, 40), n=st.integers(1, 6), n_ids=st.integers(1, 6),
       filtered=st.booleans(), seed=st.integers(0, 10**6))
def test_matches_the_loop_reference(native, length, n, n_ids, filtered, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, n_ids, (3, length), generator=g)
    keys = (1, max(2, n_ids - 1)) if filtered else None
    with pytest.MonkeyPatch.context() as mp:
        if not native:  # the torch search instead of the native kernel
            mp.setattr(lsh_module.native, "available", lambda: False)
        idx = oracle_indices(ids, n, keys)
    assert rows(idx) == [reference(r, n, keys) for r in ids.tolist()]
    # every row fills min(n, matches) slots and leaves the rest -1
    for b, r in enumerate(ids.tolist()):
        for i, want in enumerate(reference(r, n, keys)):
            assert int((idx[b, 0, i] == -1).sum()) == n - len(want)


def test_reference_cases_include_truncation_and_empty_rows():
    """The random test above exercises n below the number of matches and -1 slots."""
    ids = torch.randint(0, 3, (3, 40), generator=torch.Generator().manual_seed(0))
    full = [reference(r, 40, None) for r in ids.tolist()]
    assert any(len(row) > 2 for b in full for row in b)  # more matches than n = 2
    assert rows(oracle_indices(ids, 2)) == [reference(r, 2, None) for r in ids.tolist()]


@given(length=st.integers(2, 40), n=st.integers(1, 5), seed=st.integers(0, 10**6),
       data=st.data())
def test_rows_up_to_t_ignore_later_ids_cutting_and_padding(length, n, seed, data):
    t = data.draw(st.integers(0, length - 2), label="t")
    pad = data.draw(st.integers(1, 30), label="pad")
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 5, (2, length), generator=g)
    other = ids.clone()
    other[:, t + 1:] = torch.randint(0, 5, (2, length - t - 1), generator=g)
    padded = torch.cat([ids, torch.zeros(2, pad, dtype=ids.dtype)], 1)  # PAD = 0
    for keys in (None, (1, 4)):
        a = oracle_indices(ids, n, keys)
        assert torch.equal(a[..., : t + 1, :], oracle_indices(other, n, keys)[..., : t + 1, :])
        assert torch.equal(a[..., : t + 1, :], oracle_indices(ids[:, : t + 1], n, keys))
        assert torch.equal(a, oracle_indices(padded, n, keys)[..., :length, :])
    # the later ids do matter for the later rows (the test can fail)
    same = torch.full((1, length), 3)
    assert oracle_indices(same, n)[0, 0, -1, 0] == length - 1


@pytest.mark.parametrize("spec", [
    TaskSpec(levels=((4, 8),), values=16),
    TaskSpec(levels=((2, 2), (4, 4)), values=8),
    TaskSpec(levels=((2, 3), (3, 4)), values=8, filler=(0, 10), filler_ids=3),
], ids=["mqar", "joint-2x4", "joint-filler"])
def test_on_generated_tasks_every_inquiry_key_lists_its_answer(spec):
    """The docstring's claims, on generated samples: an inquiry key's list holds the position of
    its answer (its target); in MQAR that is all it holds; a non-key lists nothing."""
    vocab = spec.vocab()
    keys = vocab.level_range(vocab.n_levels - 1)
    x, _ = generate_rows(spec, 64, seed=1)
    targets = targets_for(x, vocab)
    contexts = 1
    for _, hi in spec.levels[:-1]:
        contexts *= hi
    n = 2 * contexts  # at most 2 * contexts - 1 earlier copies of a key: nothing is dropped
    ids = torch.from_numpy(x)
    idx = oracle_indices(ids, n, keys)[:, 0]
    asked = torch.from_numpy(targets >= 0)
    assert int(asked.sum()) > 0
    for b, i in asked.nonzero().tolist():
        listed = [p for p in idx[b, i].tolist() if p >= 0]
        assert int(targets[b, i]) in x[b, listed].tolist()
        assert len(listed) <= 2 * contexts - 1
        if spec.n_levels == 1:
            assert len(listed) == 1
    non_key = ~((ids >= keys[0]) & (ids < keys[1]))
    assert bool((idx[non_key] == -1).all())


def test_the_pattern_module():
    pat = make_pattern("oracle", 2, keys=(10, 13))
    assert pat.takes_ids and pat.budget == 2
    q = k = torch.randn(1, 2, len(HAND), 4)
    idx, aux = pat(q, k, q, ids=torch.tensor([HAND]))
    assert aux is None
    assert torch.equal(idx, oracle_indices(torch.tensor([HAND]), 2, (10, 13)))
    assert not list(pat.parameters())
    with pytest.raises(RecallLabError, match="token ids"):
        pat(q, k, q)
    with pytest.raises(RecallLabError, match="do not fit"):
        pat(q, k, q, ids=torch.tensor([HAND[:-1]]))
    for bad in ((3, 3), (5,), "1-4", (-1, 4), (1.0, 4)):
        with pytest.raises(RecallLabError, match="oracle keys"):
            make_pattern("oracle", 2, keys=bad)
    with pytest.raises(RecallLabError, match="takes no option"):
        make_pattern("oracle", 2, dim=4)


def test_task_key_patterns_are_the_rows_with_a_keys_option():
    assert set(TASK_KEY_PATTERNS) == {n for n, row in PATTERN_TABLE.items()
                                      if "keys" in row.options}
