"""The field's other recall tasks, through the task contract (recall_lab/generators/tasks.py).

- `zoology_mqar`: zoology's multi-query associative recall (`multiquery_ar`), with its parameter
  names and defaults: keys from the lower half of the vocabulary (ids 1 .. vocab_size/2 - 1),
  values from the upper half, each distinct within a row; the key-value pairs first, then every
  key queried once at gap g (position 2 * num_kv_pairs + 2g) with the gaps drawn without
  replacement with probability proportional to `power_a * i ** (power_a - 1)`, i = 1 .. space;
  the target at a queried key is its value; every other position a uniform random token
  (`random_non_queries`) or 0. `num_kv_pairs` may be a list: each row draws one (its slice).
- `selective_copy`: Mamba's selective copying (the S4 repository's `torch_copying_data` with
  `variable=True`): `num_tokens` data tokens (ids 1 .. vocab_size - 2) at sorted random places
  among `seq_len + num_tokens` positions (blank = 0), then `num_tokens` markers (vocab_size - 1);
  at the k-th marker the target is the k-th data token.
- `mad_recall` / `mad_noisy_recall`: MAD's (noisy) in-context recall, scored as MAD scores its
  test instances: (seq_len / 2 - 1) slots, each a key-value pair (a key from the lower half of
  the non-special ids, its value fixed within the row) or, with probability `frac_noise`, two
  noise tokens; then a copy prefix (vocab_size - 1), a presented key and its value; the one
  target is that value, at the probe key.

Every draw is vectorised numpy from the one SeedSequence, so rows depend only on (n, seed,
kwargs).
"""

from __future__ import annotations

import numpy as np

from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.tasks import IGNORE, task_generator


def _check(cond: bool, task: str, what: str) -> None:
    if not cond:
        raise RecallLabError(f"task {task}: {what}")


def ordered_sample(rng: np.random.Generator, n: int, pool: int, k: int) -> np.ndarray:
    """[n, k] distinct indices from `range(pool)` per row, a uniformly random ordered k-subset
    (the k smallest of `pool` uniforms, in increasing order of their draw)."""
    out = np.empty((n, k), dtype=np.int64)
    step = max(1, (1 << 22) // max(pool, 1))
    for start in range(0, n, step):
        r = rng.random((min(step, n - start), pool))
        idx = np.argpartition(r, k - 1, axis=1)[:, :k] if k < pool else \
            np.tile(np.arange(pool), (len(r), 1))
        order = np.argsort(np.take_along_axis(r, idx, axis=1), axis=1)
        out[start : start + len(r)] = np.take_along_axis(idx, order, axis=1)
    return out


def power_law_gaps(rng: np.random.Generator, n: int, space: int, k: int,
                   power_a: float) -> np.ndarray:
    """[n, k] distinct gaps in `range(space)` drawn one after another without replacement with
    probability proportional to `power_a * i ** (power_a - 1)` (i = gap + 1), as zoology's
    `np.random.choice(..., replace=False, p=p)`: the k smallest exponential races E / p
    (Efraimidis-Spirakis), in order."""
    p = power_a * np.arange(1, space + 1, dtype=np.float64) ** (power_a - 1)
    p /= p.sum()
    race = rng.standard_exponential((n, space)) / p
    idx = np.argpartition(race, k - 1, axis=1)[:, :k] if k < space else \
        np.tile(np.arange(space), (n, 1))
    order = np.argsort(np.take_along_axis(race, idx, axis=1), axis=1)
    return np.take_along_axis(idx, order, axis=1)


def _pairs(num_kv_pairs) -> list[int]:
    return list(num_kv_pairs) if isinstance(num_kv_pairs, (list, tuple)) else [num_kv_pairs]


@task_generator(vocab_size=lambda vocab_size=8192, **_: vocab_size,
                max_len=lambda input_seq_len=64, **_: input_seq_len, length="input_seq_len")
def zoology_mqar(n: int, seed: np.random.SeedSequence, vocab_size: int = 8192,
                 input_seq_len: int = 64, num_kv_pairs: int | list[int] = 8,
                 power_a: float = 0.01, random_non_queries: bool = True, num_passes: int = 1):
    """Zoology's MQAR rows (module docstring); slices: each row's number of pairs.
    `num_passes` (zoology's, after JRT): the key-value pairs repeated that many times before
    the queries."""
    name = "zoology-mqar"
    sizes = _pairs(num_kv_pairs)
    L = input_seq_len
    _check(L % 2 == 0, name, f"input_seq_len must be even, got {L}")
    _check(vocab_size > L, name, f"vocab_size ({vocab_size}) must exceed input_seq_len ({L})")
    _check(0 < power_a <= 1, name, f"power_a must lie in (0, 1], got {power_a}")
    _check(num_passes >= 1, name, f"num_passes must be >= 1, got {num_passes}")
    for k in sizes:
        _check(k >= 1 and 2 * k * (num_passes + 1) <= L, name, f"num_kv_pairs {k} needs "
               f"2 * pairs * (num_passes + 1) <= input_seq_len ({L})")
        _check(k <= vocab_size // 2 - 1, name, f"num_kv_pairs {k} exceeds the key ids")
    rng = np.random.default_rng(seed)
    half = vocab_size // 2
    per_row = np.asarray(sizes, dtype=np.int64)[rng.integers(0, len(sizes), size=n)]
    inputs = np.zeros((n, L), dtype=np.int64)
    targets = np.full((n, L), IGNORE, dtype=np.int64)
    for k in sizes:  # rows of one size are drawn together, in the order the sizes are listed
        rows = np.flatnonzero(per_row == k)
        m, ctx = len(rows), 2 * k * num_passes
        if m == 0:
            continue
        keys = 1 + ordered_sample(rng, m, half - 1, k)
        values = half + ordered_sample(rng, m, vocab_size - half, k)
        gaps = power_law_gaps(rng, m, (L - ctx) // 2, k, power_a)
        block = np.zeros((m, L), dtype=np.int64)
        block[:, 0:ctx:2] = np.tile(keys, num_passes)
        block[:, 1:ctx:2] = np.tile(values, num_passes)
        np.put_along_axis(block, ctx + 2 * gaps, keys, axis=1)
        tblock = np.full((m, L), IGNORE, dtype=np.int64)
        np.put_along_axis(tblock, ctx + 2 * gaps, values, axis=1)
        inputs[rows], targets[rows] = block, tblock
    if random_non_queries:
        noise = rng.integers(0, vocab_size, size=(n, L))
        empty = inputs == 0
        inputs[empty] = noise[empty]
    return inputs, targets, per_row


# Based's MQAR training mixture (arXiv 2402.18668; zoology's `ar_extrapolate` configs): (length,
# pairs) segments and how many of zoology's 180,000 training examples each holds; its test
# segments run on to 256 pairs at length 1,024 (BASED_TEST)
BASED_TRAIN = ((64, 4), (128, 8), (256, 16), (256, 32), (256, 64))
BASED_WEIGHTS = (100_000, 20_000, 20_000, 20_000, 20_000)
BASED_TEST = ((64, 4), (64, 8), (64, 16), (128, 32), (256, 64), (512, 128), (1024, 256))


def _segments(segments) -> list[tuple[int, int]]:
    try:
        out = [(int(L), int(k)) for L, k in segments]
    except (TypeError, ValueError):
        raise RecallLabError(f"task zoology-mqar-mix: segments must be [length, pairs] pairs, "
                             f"got {segments!r}") from None
    _check(len(out) >= 1, "zoology-mqar-mix", "segments is empty")
    pairs = [k for _, k in out]
    _check(len(set(pairs)) == len(pairs), "zoology-mqar-mix", "two segments with the same "
           f"number of pairs ({pairs}): the pairs are each row's slice label")
    return out


@task_generator(vocab_size=lambda vocab_size=8192, **_: vocab_size,
                max_len=lambda segments=BASED_TRAIN, **_: max(L for L, _ in _segments(segments)))
def zoology_mqar_mix(n: int, seed: np.random.SeedSequence, vocab_size: int = 8192,
                     segments=BASED_TRAIN, weights=None, power_a: float = 0.01,
                     random_non_queries: bool = True):
    """Rows of several zoology MQAR settings mixed (Based's training mixture by default): each
    row draws a `[length, pairs]` segment with probability proportional to `weights` (default:
    Based's example counts when `segments` is Based's, else equal), is drawn as `zoology_mqar`
    draws a row of that setting, and is padded on the right to the longest segment with id 0
    and no target. A causal model's outputs at a row's own positions do not depend on what
    follows them, so the padding changes no score (it costs compute). Slices: each row's pairs."""
    name = "zoology-mqar-mix"
    segs = _segments(segments)
    if weights is None:
        weights = BASED_WEIGHTS if tuple(segs) == BASED_TRAIN else [1] * len(segs)
    w = np.asarray(weights, dtype=np.float64)
    _check(w.shape == (len(segs),) and bool(np.all(w >= 0)) and w.sum() > 0, name,
           f"weights must be {len(segs)} non-negative numbers, one per segment, not all 0")
    width = max(L for L, _ in segs)
    rng = np.random.default_rng(seed)
    which = rng.choice(len(segs), size=n, p=w / w.sum())
    child = rng.integers(0, 2**63 - 1, size=len(segs))  # one stream per segment
    inputs = np.zeros((n, width), dtype=np.int64)
    targets = np.full((n, width), IGNORE, dtype=np.int64)
    slices = np.zeros(n, dtype=np.int64)
    for i, (L, k) in enumerate(segs):
        rows = np.flatnonzero(which == i)
        if len(rows) == 0:
            continue
        x, y, _ = zoology_mqar(len(rows), np.random.SeedSequence(int(child[i])), vocab_size,
                               L, k, power_a, random_non_queries)
        inputs[rows, :L], targets[rows, :L], slices[rows] = x, y, k
    return inputs, targets, slices


@task_generator(vocab_size=lambda vocab_size=16, **_: vocab_size,
                max_len=lambda seq_len=4096, num_tokens=16, **_: seq_len + 2 * num_tokens,
                length="seq_len")
def selective_copy(n: int, seed: np.random.SeedSequence, vocab_size: int = 16,
                   seq_len: int = 4096, num_tokens: int = 16):
    """Mamba's selective copying rows (module docstring): length seq_len + 2 * num_tokens."""
    name = "selective-copy"
    _check(vocab_size >= 3, name, f"vocab_size must be >= 3, got {vocab_size}")
    _check(num_tokens >= 1 and seq_len >= 0, name, "num_tokens must be >= 1, seq_len >= 0")
    rng = np.random.default_rng(seed)
    M, span = num_tokens, seq_len + num_tokens
    tokens = rng.integers(1, vocab_size - 1, size=(n, M))
    places = np.sort(ordered_sample(rng, n, span, M), axis=1)
    inputs = np.zeros((n, span + M), dtype=np.int64)
    np.put_along_axis(inputs, places, tokens, axis=1)
    inputs[:, span:] = vocab_size - 1
    targets = np.full(inputs.shape, IGNORE, dtype=np.int64)
    targets[:, span:] = tokens
    return inputs, targets


def _mad_len(seq_len: int = 128, multi_query: bool = False, **_) -> int:
    return seq_len - 1 if multi_query else seq_len


@task_generator(vocab_size=lambda vocab_size=16, **_: vocab_size, max_len=_mad_len)
def mad_recall(n: int, seed: np.random.SeedSequence, vocab_size: int = 16, seq_len: int = 128,
               noise_vocab_size: int = 0, frac_noise: float = 0.0, multi_query: bool = False):
    """MAD's in-context recall rows (module docstring); noise as `mad_noisy_recall`.
    `multi_query` (MAD's flag): no copy prefix (the last id is then a key or value id too) and a
    target at every key shown before in the row as well; rows of seq_len - 1 tokens."""
    name = "mad-recall"
    _check(seq_len % 2 == 0 and seq_len >= 4, name, f"seq_len must be even and >= 4, "
           f"got {seq_len}")
    _check(0 <= frac_noise < 1, name, f"frac_noise must satisfy 0 <= frac_noise < 1, "
           f"got {frac_noise}")
    _check(frac_noise == 0 or noise_vocab_size > 0, name, "frac_noise > 0 needs "
           "noise_vocab_size > 0")
    usable = vocab_size - (0 if multi_query else 1) - noise_vocab_size  # the copy prefix last
    _check(usable >= 2, name, f"vocab_size {vocab_size} leaves {usable} key/value ids")
    K = usable // 2
    rng = np.random.default_rng(seed)
    P = seq_len // 2 - 1
    is_noise = rng.random((n, P)) < frac_noise
    is_noise[np.arange(n), rng.integers(0, P, size=n)] = False  # at least one pair per row
    keys = rng.integers(0, K, size=(n, P))
    table = rng.integers(K, usable, size=(n, K))  # each key's value within its row
    noise = rng.integers(usable, usable + max(noise_vocab_size, 1), size=(n, P, 2))
    pairs = np.stack([keys, np.take_along_axis(table, keys, axis=1)], axis=2)
    pairs[is_noise] = noise[is_noise]
    shown = np.zeros((n, K), dtype=bool)
    shown[np.nonzero(~is_noise)[0], keys[~is_noise]] = True
    pick = np.where(shown, rng.random((n, K)), -1.0).argmax(axis=1)  # uniform over shown keys
    if multi_query:  # MAD's multi-query rows: pairs, then the probe key; no copy prefix
        inputs = np.empty((n, 2 * P + 1), dtype=np.int64)
        inputs[:, : 2 * P] = pairs.reshape(n, 2 * P)
        inputs[:, 2 * P] = pick
        targets = np.full(inputs.shape, IGNORE, dtype=np.int64)
        seen = np.zeros((n, K), dtype=bool)
        rows = np.arange(n)
        for j in range(P):  # a key shown before in the row: its value is the target
            key, real = keys[:, j], ~is_noise[:, j]
            again = real & seen[rows, key]
            targets[again, 2 * j] = pairs[again, j, 1]
            seen[rows[real], key[real]] = True
        targets[:, 2 * P] = table[rows, pick]
        return inputs, targets
    inputs = np.empty((n, seq_len), dtype=np.int64)
    inputs[:, : 2 * P] = pairs.reshape(n, 2 * P)
    inputs[:, 2 * P] = vocab_size - 1
    inputs[:, 2 * P + 1] = pick
    targets = np.full(inputs.shape, IGNORE, dtype=np.int64)
    targets[:, 2 * P + 1] = table[np.arange(n), pick]
    return inputs, targets


@task_generator(vocab_size=lambda vocab_size=32, **_: vocab_size, max_len=_mad_len)
def mad_noisy_recall(n: int, seed: np.random.SeedSequence, vocab_size: int = 32,
                     seq_len: int = 128, noise_vocab_size: int = 16, frac_noise: float = 0.2,
                     multi_query: bool = False):
    """MAD's noisy in-context recall: `mad_recall` with MAD's noisy defaults."""
    return mad_recall(n, seed, vocab_size=vocab_size, seq_len=seq_len,
                      noise_vocab_size=noise_vocab_size, frac_noise=frac_noise,
                      multi_query=multi_query)


@task_generator(vocab_size=lambda vocab_size=16, **_: vocab_size,
                max_len=lambda seq_len=128, **_: seq_len)
def mad_fuzzy_recall(n: int, seed: np.random.SeedSequence, vocab_size: int = 16,
                     seq_len: int = 128, k_motif_size: int = 3, v_motif_size: int = 3,
                     noise_vocab_size: int = 0, frac_noise: float = 0.0):
    """MAD's fuzzy in-context recall (its training instances' distribution, scored on the probe):
    keys and values are motifs of 1 .. k_motif_size / v_motif_size distinct ids (keys from the
    lower half of the `vocab_size - 2 - noise_vocab_size` non-special ids, values from the upper
    half), each key's value fixed within the row; a probe pair sits at a random place; the row
    ends with the copy prefix (vocab_size - 1), the probe key and its value, and is left-padded
    with vocab_size - 2. The targets are the probe value's ids, each at the id before it. Unlike
    MAD's generator, the probe pair is always in the row."""
    name = "mad-fuzzy-recall"
    usable = vocab_size - 2 - noise_vocab_size
    K = usable // 2
    _check(K >= max(k_motif_size, 1) and usable - K >= max(v_motif_size, 1), name,
           f"vocab_size {vocab_size} is too small for motifs of {k_motif_size} / "
           f"{v_motif_size} distinct ids")
    _check(k_motif_size >= 1 and v_motif_size >= 1, name, "motif sizes must be >= 1")
    _check(seq_len > 3 * (k_motif_size + v_motif_size) + 1, name, f"seq_len {seq_len} is too "
           "short for its motifs")
    _check(0 <= frac_noise < 1 and (frac_noise == 0 or noise_vocab_size > 0), name,
           "frac_noise must lie in [0, 1) and needs noise_vocab_size > 0")
    rng = np.random.default_rng(seed)
    copy_prefix, pad = vocab_size - 1, vocab_size - 2
    inputs = np.full((n, seq_len), pad, dtype=np.int64)
    targets = np.full((n, seq_len), IGNORE, dtype=np.int64)

    slots = seq_len  # more than a row can hold: every draw of a row is made at once
    for r in range(n):
        k_size = int(rng.integers(1, k_motif_size + 1))
        v_size = int(rng.integers(1, v_motif_size + 1))
        k_probe = tuple(int(t) for t in rng.permutation(K)[:k_size])
        v_probe = tuple(int(t) + K for t in rng.permutation(usable - K)[:v_size])
        probe_len = k_size + v_size
        limit = seq_len - probe_len - (k_motif_size + v_motif_size)
        # MAD draws the place below seq_len - 2 * probe_len, past the last slot at times (the
        # row then lacks its probe pair); here it is always a slot the row reaches
        probe_at = int(rng.integers(0, max(1, limit - k_motif_size - v_motif_size + 1)))
        ks = rng.integers(1, k_motif_size + 1, size=slots)
        vs = rng.integers(1, v_motif_size + 1, size=slots)
        noisy = rng.random(slots) < frac_noise
        keys = np.argsort(rng.random((slots, K)), axis=1)[:, :k_motif_size]
        values = K + np.argsort(rng.random((slots, usable - K)), axis=1)[:, :v_motif_size]
        noise = rng.integers(usable, usable + max(noise_vocab_size, 1),
                             size=(slots, k_motif_size + v_motif_size))
        kv: dict[tuple[int, ...], tuple[int, ...]] = {}
        row: list[int] = []
        added = False
        for i in range(slots):
            if len(row) >= limit:
                break
            if len(row) >= probe_at and not added:
                row += [*k_probe, *v_probe]
                kv[k_probe], added = v_probe, True
                continue
            if noisy[i]:
                row += noise[i, : ks[i] + vs[i]].tolist()
                continue
            key = tuple(keys[i, : ks[i]].tolist())
            if key == k_probe:
                value, added = v_probe, True
            else:
                value = kv.setdefault(key, tuple(values[i, : vs[i]].tolist()))
            row += [*key, *value]
        row += [copy_prefix, *k_probe, *v_probe]
        full = [pad] * max(0, seq_len + 1 - len(row)) + row  # MAD pads on the left
        x = np.array(full[:-1], dtype=np.int64)[-seq_len:]
        y = np.full(len(full), IGNORE, dtype=np.int64)
        y[len(full) - v_size :] = v_probe
        inputs[r], targets[r] = x, y[1:][-seq_len:]
    return inputs, targets


def mad_kv_map(vocab_size: int, seed: int) -> np.ndarray:
    """MAD's fixed key -> value map of the memorization task (`generate_kv_map` with motifs of
    one id): keys `0 .. vocab_size/2 - 1` and values `vocab_size/2 .. vocab_size - 1`, each
    shuffled by one generator seeded with `seed`, paired in order. Returns value_of[key]."""
    rng = np.random.default_rng(seed)
    keys = rng.permutation(vocab_size // 2)
    values = vocab_size // 2 + rng.permutation(vocab_size - vocab_size // 2)
    out = np.empty(vocab_size // 2, dtype=np.int64)
    out[keys] = values[: len(keys)]  # there are at least as many values as keys
    return out


@task_generator(vocab_size=lambda vocab_size=256, **_: vocab_size,
                max_len=lambda seq_len=32, **_: 2 * (seq_len // 2))
def mad_memorization(n: int, seed: np.random.SeedSequence, vocab_size: int = 256,
                     seq_len: int = 32, noise_vocab_size: int = 0, frac_noise: float = 0.0,
                     kv_map_seed: int = 12345):
    """MAD's memorization: one key -> value map fixed for the whole task (`mad_kv_map` over the
    `vocab_size - 1 - noise_vocab_size` non-special ids, seeded by `kv_map_seed`, as MAD's);
    a row is seq_len / 2 slots, each `key, insert` (insert = vocab_size - 1; the target at the
    insert token is the key's value, which the row never shows) or, with probability
    `frac_noise`, two noise ids; one slot per row is always a key."""
    name = "mad-memorization"
    usable = vocab_size - 1 - noise_vocab_size
    _check(usable >= 2, name, f"vocab_size {vocab_size} leaves {usable} key/value ids")
    _check(seq_len >= 2, name, f"seq_len must be >= 2, got {seq_len}")
    _check(0 <= frac_noise < 1 and (frac_noise == 0 or noise_vocab_size > 0), name,
           "frac_noise must lie in [0, 1) and needs noise_vocab_size > 0")
    value_of = mad_kv_map(usable, kv_map_seed)
    rng = np.random.default_rng(seed)
    P = seq_len // 2
    is_noise = rng.random((n, P)) < frac_noise
    is_noise[np.arange(n), rng.integers(0, P, size=n)] = False
    keys = rng.integers(0, usable // 2, size=(n, P))
    noise = rng.integers(usable, usable + max(noise_vocab_size, 1), size=(n, P, 2))
    pairs = np.stack([keys, np.full_like(keys, vocab_size - 1)], axis=2)
    pairs[is_noise] = noise[is_noise]
    targets = np.full((n, P, 2), IGNORE, dtype=np.int64)
    targets[..., 1] = np.where(is_noise, IGNORE, value_of[keys])
    return pairs.reshape(n, 2 * P), targets.reshape(n, 2 * P)
