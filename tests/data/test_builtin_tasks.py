"""The built-in tasks: invariants of every row (Hypothesis), and zoology-mqar's distribution
against a port of zoology's own generator (its `multiquery_ar`, on numpy's Generator)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.generators.builtin import mad_noisy_recall, mad_recall, selective_copy, zoology_mqar
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.tasks import IGNORE, GeneratorTask

seeds = st.integers(0, 2**32 - 1)


def reference_mqar(rng, n, vocab_size, input_seq_len, num_kv_pairs, power_a):
    """zoology/data/multiquery_ar.py's logic, row by row, with `rng` for np.random (one pass,
    random_non_queries=False)."""
    L, k = input_seq_len, num_kv_pairs
    ctx = 2 * k
    half = vocab_size // 2
    space = (L - ctx) // 2
    p = power_a * np.arange(1, space + 1) ** (power_a - 1)
    p = p / p.sum()
    inputs, labels = [], []
    for _ in range(n):
        keys = rng.choice(np.arange(1, half), replace=False, size=k)
        values = rng.choice(np.arange(half, vocab_size), replace=False, size=k)
        kvs = np.zeros(ctx, dtype=np.int64)
        kvs[0::2], kvs[1::2] = keys, values
        gaps = rng.choice(np.arange(space), replace=False, p=p, size=k)
        queries = np.zeros(L - ctx + 1, dtype=np.int64)
        queries[gaps * 2] = keys
        example = np.concatenate([kvs, queries])
        label = np.full(L + 1, -100, dtype=np.int64)
        label[gaps * 2 + ctx + 1] = values
        inputs.append(example[:-1])
        labels.append(label[1:])
    return np.stack(inputs), np.stack(labels)


def _gaps(inputs, targets, k):
    pos = np.nonzero(targets != IGNORE)
    return (pos[1] - 2 * k) // 2


def test_zoology_mqar_matches_zoologys_distribution():
    n, V, L, k, a = 4000, 128, 64, 4, 0.01
    ours_x, ours_y, _ = zoology_mqar(n, np.random.SeedSequence(0), vocab_size=V,
                                     input_seq_len=L, num_kv_pairs=k, power_a=a,
                                     random_non_queries=False)
    ref_x, ref_y = reference_mqar(np.random.default_rng(1), n, V, L, k, a)
    space = (L - 2 * k) // 2
    for x, y in ((ours_x, ours_y), (ref_x, ref_y)):
        assert ((x[:, 0 : 2 * k : 2] >= 1) & (x[:, 0 : 2 * k : 2] < V // 2)).all()
        assert ((x[:, 1 : 2 * k : 2] >= V // 2) & (x[:, 1 : 2 * k : 2] < V)).all()
        assert ((y != IGNORE).sum(1) == k).all()
    h_ours = np.bincount(_gaps(ours_x, ours_y, k), minlength=space) / (n * k)
    h_ref = np.bincount(_gaps(ref_x, ref_y, k), minlength=space) / (n * k)
    # 16,000 gaps each: the histograms agree within sampling noise (a few hundredths per bin)
    assert np.abs(h_ours - h_ref).max() < 0.02
    assert np.abs(np.cumsum(h_ours) - np.cumsum(h_ref)).max() < 0.02
    # and the gaps do follow the power law (most mass on the nearest gaps for power_a = 0.01)
    assert h_ours[0] > 5 * h_ours[space // 2]
    # keys spread over the whole lower half, values over the upper half
    for x in (ours_x, ref_x):
        assert len(np.unique(x[:, 0 : 2 * k : 2])) > 0.9 * (V // 2 - 1)


@given(seeds, st.sampled_from([2, 4, 8]), st.sampled_from([32, 64]),
       st.sampled_from([0.01, 0.5, 1.0]), st.booleans())
def test_zoology_mqar_rows(seed, k, L, a, noise):
    V = 128
    x, y, s = zoology_mqar(6, np.random.SeedSequence(seed), vocab_size=V, input_seq_len=L,
                           num_kv_pairs=k, power_a=a, random_non_queries=noise)
    assert x.shape == y.shape == (6, L) and (s == k).all()
    assert ((x >= 0) & (x < V)).all()
    for row, tgt in zip(x, y, strict=True):
        keys, values = row[0 : 2 * k : 2], row[1 : 2 * k : 2]
        assert len(set(keys)) == k and len(set(values)) == k
        kv = dict(zip(keys.tolist(), values.tolist(), strict=True))
        asked = np.flatnonzero(tgt != IGNORE)
        assert sorted(row[asked].tolist()) == sorted(keys.tolist())  # every key asked once
        assert all(tgt[p] == kv[row[p]] for p in asked)  # its value is the target
        assert (asked >= 2 * k).all() and ((asked - 2 * k) % 2 == 0).all()
        if not noise:
            rest = np.ones(L, bool)
            rest[: 2 * k] = False
            rest[asked] = False
            assert (row[rest] == 0).all()


def test_zoology_mqar_mixed_sizes_slices_and_checks():
    _, y, s = zoology_mqar(200, np.random.SeedSequence(2), vocab_size=256, input_seq_len=64,
                           num_kv_pairs=[4, 8, 16])
    assert set(s.tolist()) == {4, 8, 16}
    assert np.array_equal((y != IGNORE).sum(1), s)
    with pytest.raises(RecallLabError, match="input_seq_len must be even"):
        zoology_mqar(1, 0, input_seq_len=63)
    with pytest.raises(RecallLabError, match="must exceed"):
        zoology_mqar(1, 0, vocab_size=64, input_seq_len=64)
    with pytest.raises(RecallLabError, match="num_kv_pairs"):
        zoology_mqar(1, 0, num_kv_pairs=17)


@given(seeds, st.integers(3, 20), st.integers(0, 40), st.integers(1, 8))
def test_selective_copy_rows(seed, V, L, M):
    x, y = selective_copy(5, np.random.SeedSequence(seed), vocab_size=V, seq_len=L,
                          num_tokens=M)
    assert x.shape == y.shape == (5, L + 2 * M)
    assert (x[:, L + M :] == V - 1).all() and (y[:, : L + M] == IGNORE).all()
    for row, tgt in zip(x, y, strict=True):
        data = row[: L + M]
        assert (data < V - 1).all()
        # the targets at the markers are the data tokens in the order they appear
        assert np.array_equal(data[data != 0], tgt[L + M :])
        assert ((tgt[L + M :] >= 1) & (tgt[L + M :] <= V - 2)).all()


@given(seeds, st.sampled_from([8, 16, 64]), st.sampled_from([0.0, 0.2, 0.6]))
def test_mad_recall_rows(seed, L, frac):
    x, y = mad_noisy_recall(6, np.random.SeedSequence(seed), vocab_size=32, seq_len=L,
                            noise_vocab_size=16, frac_noise=frac)
    usable = 32 - 1 - 16
    K = usable // 2
    assert x.shape == y.shape == (6, L)
    assert ((y != IGNORE).sum(1) == 1).all() and (y[:, -1] != IGNORE).all()
    assert (x[:, -2] == 31).all()  # the copy prefix, then the probe key
    for row, tgt in zip(x, y, strict=True):
        pairs = row[: L - 2].reshape(-1, 2)
        kv = {}
        for a, b in pairs:
            if a < K:  # a key-value pair: the value is the key's, the same every time
                assert K <= b < usable and kv.setdefault(a, b) == b
            else:  # noise: two noise ids
                assert usable <= a < 31 and usable <= b < 31
        assert row[-1] in kv and tgt[-1] == kv[row[-1]]


def test_mad_recall_defaults_and_through_the_contract():
    t = GeneratorTask(generator="mad-recall")
    r = t.rows(4, 0)
    assert r.inputs.shape == (4, 128) and t.vocab().size == 16
    x, _ = mad_recall(200, np.random.SeedSequence(1), seq_len=32)
    assert (x[:, :30] < 15).all()  # no noise without frac_noise
    x, _ = mad_noisy_recall(300, np.random.SeedSequence(1))
    share = (x[:, :126] >= 15).mean()
    assert 0.15 < share < 0.25  # MAD's frac_noise 0.2 of the pair slots


@given(seeds, st.sampled_from([8, 32]), st.sampled_from([0.0, 0.3]))
def test_mad_multi_query_rows(seed, L, frac):
    x, y = mad_noisy_recall(5, np.random.SeedSequence(seed), vocab_size=24, seq_len=L,
                            noise_vocab_size=8, frac_noise=frac, multi_query=True)
    usable, K = 24 - 8, (24 - 8) // 2
    assert x.shape == y.shape == (5, L - 1) and (y[:, -1] != IGNORE).all()
    for row, tgt in zip(x, y, strict=True):
        kv, shown = {}, set()
        for j in range(0, L - 2, 2):
            a, b = row[j], row[j + 1]
            if a < K:
                assert kv.setdefault(a, b) == b
                # scored exactly where the key was shown before, with its value
                assert (tgt[j] == b) if a in shown else (tgt[j] == IGNORE)
                shown.add(a)
            else:
                assert usable <= a < 24 and tgt[j] == IGNORE
            assert tgt[j + 1] == IGNORE
        assert row[-1] in kv and tgt[-1] == kv[row[-1]]


def _contains(seq: list, part: list) -> bool:
    return any(seq[i : i + len(part)] == part for i in range(len(seq) - len(part) + 1))


@given(seeds, st.integers(1, 3), st.integers(1, 3), st.sampled_from([0.0, 0.3]))
def test_mad_fuzzy_recall_rows(seed, km, vm, frac):
    from recall_lab.generators.builtin import mad_fuzzy_recall

    V, L, noise = 24, 48, (4 if frac else 0)
    x, y = mad_fuzzy_recall(4, np.random.SeedSequence(seed), vocab_size=V, seq_len=L,
                            k_motif_size=km, v_motif_size=vm, noise_vocab_size=noise,
                            frac_noise=frac)
    usable = V - 2 - noise
    K = usable // 2
    assert x.shape == y.shape == (4, L)
    for row, tgt in zip(x, y, strict=True):
        scored = np.flatnonzero(tgt != IGNORE)
        v = tgt[scored]
        assert 1 <= len(v) <= vm and np.array_equal(scored, np.arange(L - len(v), L))
        assert len(set(v.tolist())) == len(v) and ((v >= K) & (v < usable)).all()
        prefix = int(np.flatnonzero(row == V - 1)[-1])
        key = row[prefix + 1 : L - len(v) + 1]
        assert 1 <= len(key) <= km and ((key >= 0) & (key < K)).all()
        assert np.array_equal(row[L - len(v) + 1 :], v[:-1])  # the value, teacher-forced
        body = row[:prefix].tolist()
        pads = next((i for i, t in enumerate(body) if t != V - 2), len(body))
        assert V - 2 not in body[pads:] and V - 1 not in body  # pads only on the left
        assert _contains(body, [*key.tolist(), *v.tolist()])  # the pair was shown
        assert all(0 <= t < usable + noise for t in body[pads:])


def reference_kv_map(vocab_size: int, seed: int) -> dict:
    """MAD's `generate_kv_map` (motifs of one id), ported: every 1-permutation of the key ids and
    of the value ids, each list shuffled by one seeded generator, zipped."""
    from itertools import permutations

    rng = np.random.default_rng(seed)
    keys = list(permutations(np.arange(vocab_size // 2), 1))
    rng.shuffle(keys)
    values = list(permutations(np.arange(vocab_size // 2, vocab_size), 1))
    rng.shuffle(values)
    return {k[0]: v[0] for k, v in zip(keys, values, strict=False)}


@pytest.mark.parametrize("vocab_size, seed", [(255, 12345), (16, 0), (31, 7)])
def test_mad_memorization_map_is_mads(vocab_size, seed):
    from recall_lab.generators.builtin import mad_kv_map

    ours = mad_kv_map(vocab_size, seed)
    assert {int(k): int(v) for k, v in enumerate(ours)} == \
        {int(k): int(v) for k, v in reference_kv_map(vocab_size, seed).items()}


@given(seeds, st.sampled_from([4, 16, 32]), st.sampled_from([0.0, 0.4]))
def test_mad_memorization_rows(seed, L, frac):
    from recall_lab.generators.builtin import mad_kv_map, mad_memorization

    V, noise = 64, (8 if frac else 0)
    x, y = mad_memorization(5, np.random.SeedSequence(seed), vocab_size=V, seq_len=L,
                            noise_vocab_size=noise, frac_noise=frac)
    usable = V - 1 - noise
    value_of = mad_kv_map(usable, 12345)
    assert x.shape == y.shape == (5, L)
    keys, slots = x[:, 0::2], x[:, 1::2]
    real = slots == V - 1
    assert real.any(1).all() and (y[:, 0::2] == IGNORE).all()
    assert ((keys[real] >= 0) & (keys[real] < usable // 2)).all()
    assert np.array_equal(y[:, 1::2][real], value_of[keys[real]])  # the fixed map's values
    assert (y[:, 1::2][~real] == IGNORE).all()
    assert ((x[:, 0::2][~real] >= usable) & (x[:, 1::2][~real] >= usable)).all()


def test_zoology_mqar_num_passes_repeats_the_pairs():
    x, y, _ = zoology_mqar(50, np.random.SeedSequence(4), vocab_size=128, input_seq_len=64,
                           num_kv_pairs=4, num_passes=3, random_non_queries=False)
    assert np.array_equal(x[:, 0:8], x[:, 8:16]) and np.array_equal(x[:, 0:8], x[:, 16:24])
    asked = y != IGNORE
    assert (asked.sum(1) == 4).all() and not asked[:, :24].any()
    # the same gap law after the longer context: (64 - 24) / 2 = 20 places per query
    assert ((np.nonzero(asked)[1] - 24) % 2 == 0).all()
