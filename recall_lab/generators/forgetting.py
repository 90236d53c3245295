"""zoology's forgetting MQAR (`zoology/data/forgetting_mqar.py`, added in zoology's commit 6fcfd35
as `forgetting_ar.py`): multi-query associative recall in which some keys are written twice.

A row of `input_seq_len` tokens is

    K0 V0 K1 V1 ... K(n-1) V(n-1)   Ku1 Vu1' ... Kum Vum'   query region

- the `num_kv_pairs` (n) keys are distinct ids drawn from `1 .. vocab_size/2 - 1`, their original
  values distinct ids from `vocab_size/2 .. vocab_size - 1` (zoology's split of the vocabulary);
- the update block follows the originals: `num_updates` (m) distinct keys of the row, in a random
  order, each with a new value drawn uniformly from the value ids other than that key's original
  (so a key's last value always differs from its first; updated values may repeat other keys'
  values, as zoology's do);
- in the query region every key of the row is queried once, at position `2 (n + m) + 2g` for a
  gap g drawn without replacement with probability proportional to `power_a * i ** (power_a - 1)`
  (i = g + 1), as in zoology's MQAR; the target at a queried key is its last value (the update's
  where it was updated, else the original); nothing else is scored;
- every other position of the query region is 0, or with `random_non_queries` (zoology's meaning)
  a uniform random id of the whole vocabulary. Such a filler id can be one of the row's keys (or
  values): the key then occurs in the query region unscored, followed by another random id.

The sequence must hold `2 (n + m) + 2 n` tokens (zoology's bound); a shorter one, `num_updates`
outside `0 .. num_kv_pairs`, or a vocabulary too small for the keys and values ends in one line
naming what is needed. Every draw is vectorised numpy from the one SeedSequence, so rows depend
only on (n_rows, seed, kwargs).
"""

from __future__ import annotations

import numpy as np

from recall_lab.generators.builtin import ordered_sample, power_law_gaps
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.tasks import IGNORE, task_generator

NAME = "forgetting-mqar"


def needed_length(num_kv_pairs: int, num_updates: int) -> int:
    """The shortest `input_seq_len` zoology's generator accepts: the writes (2 tokens each) and
    one query slot of 2 tokens per live key."""
    return 2 * (num_kv_pairs + num_updates) + 2 * num_kv_pairs


def needed_vocab(num_kv_pairs: int, num_updates: int, input_seq_len: int) -> int:
    """The smallest `vocab_size` that holds the keys (ids 1 .. V/2 - 1), the distinct original
    values (ids V/2 .. V - 1), a second value for an update, and exceeds `input_seq_len`
    (zoology's assertion)."""
    need = max(2 * num_kv_pairs + 2, input_seq_len + 1)
    if num_updates > 0:
        need = max(need, 4)  # one key id and two value ids
    return need


def check_kwargs(vocab_size: int, input_seq_len: int, num_kv_pairs: int, num_updates: int,
                 power_a: float) -> None:
    """One line naming what is wrong (and what is needed) for a bad setting."""
    def bad(what: str) -> RecallLabError:
        return RecallLabError(f"task {NAME}: {what}")

    for label, v in (("vocab_size", vocab_size), ("input_seq_len", input_seq_len),
                     ("num_kv_pairs", num_kv_pairs), ("num_updates", num_updates)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise bad(f"{label} must be an integer, got {v!r}")
    if num_kv_pairs < 1:
        raise bad(f"num_kv_pairs must be >= 1, got {num_kv_pairs}")
    if num_updates < 0:
        raise bad(f"num_updates must be >= 0, got {num_updates}")
    if num_updates > num_kv_pairs:
        raise bad(f"num_updates ({num_updates}) must be <= num_kv_pairs ({num_kv_pairs}): each "
                  "update rewrites a different key of the row")
    if input_seq_len % 2:
        raise bad(f"input_seq_len must be even, got {input_seq_len}")
    need = needed_length(num_kv_pairs, num_updates)
    if input_seq_len < need:
        raise bad(f"input_seq_len {input_seq_len} is too short: {num_kv_pairs} pairs and "
                  f"{num_updates} updates need {need} tokens (2 per write, 2 per query)")
    vneed = needed_vocab(num_kv_pairs, num_updates, input_seq_len)
    if vocab_size < vneed:
        raise bad(f"vocab_size {vocab_size} is too small: {num_kv_pairs} keys and values at "
                  f"input_seq_len {input_seq_len} need vocab_size >= {vneed} (keys 1 .. "
                  "vocab_size/2 - 1, values above, vocab_size > input_seq_len)")
    if not 0 < power_a <= 1:
        raise bad(f"power_a must lie in (0, 1], got {power_a}")


def _max_len(vocab_size: int = 8192, input_seq_len: int = 64, num_kv_pairs: int = 8,
             num_updates: int = 4, power_a: float = 0.01, **_) -> int:
    """The row length, after checking the setting: a task table with a bad setting is refused
    where it is read (a run's config, a sweep's grid, `generate`), before anything is drawn."""
    check_kwargs(vocab_size, input_seq_len, num_kv_pairs, num_updates, power_a)
    return input_seq_len


@task_generator(vocab_size=lambda vocab_size=8192, **_: vocab_size, max_len=_max_len,
                length="input_seq_len")
def forgetting_mqar(n: int, seed: np.random.SeedSequence, vocab_size: int = 8192,
                    input_seq_len: int = 64, num_kv_pairs: int = 8, num_updates: int = 4,
                    power_a: float = 0.01, random_non_queries: bool = True):
    """zoology's forgetting MQAR rows (module docstring), zoology's parameter names and defaults
    (`num_updates` 4, `power_a` 0.01, `random_non_queries` true; vocabulary 8,192 and length 64
    as the lab's `zoology-mqar`)."""
    check_kwargs(vocab_size, input_seq_len, num_kv_pairs, num_updates, power_a)
    rng = np.random.default_rng(seed)
    V, L, k, m = int(vocab_size), int(input_seq_len), int(num_kv_pairs), int(num_updates)
    half = V // 2
    n_values = V - half
    rows = np.arange(n)[:, None]
    keys = 1 + ordered_sample(rng, n, half - 1, k)
    first = ordered_sample(rng, n, n_values, k)  # value offsets from `half`
    which = ordered_sample(rng, n, k, m) if m else np.zeros((n, 0), dtype=np.int64)
    old = first[rows, which]
    draw = rng.integers(0, n_values - 1, size=(n, m)) if m else np.zeros((n, 0), np.int64)
    new = draw + (draw >= old)  # uniform over the value ids other than the key's original
    last = first.copy()
    last[rows, which] = new
    ctx = 2 * (k + m)
    gaps = power_law_gaps(rng, n, (L - ctx) // 2, k, power_a)
    inputs = np.zeros((n, L), dtype=np.int64)
    inputs[:, 0 : 2 * k : 2] = keys
    inputs[:, 1 : 2 * k : 2] = half + first
    inputs[:, 2 * k : ctx : 2] = keys[rows, which]
    inputs[:, 2 * k + 1 : ctx : 2] = half + new
    np.put_along_axis(inputs, ctx + 2 * gaps, keys, axis=1)
    targets = np.full((n, L), IGNORE, dtype=np.int64)
    np.put_along_axis(targets, ctx + 2 * gaps, half + last, axis=1)
    if random_non_queries:
        noise = rng.integers(0, V, size=(n, L))
        empty = inputs == 0
        inputs[empty] = noise[empty]
    return inputs, targets
