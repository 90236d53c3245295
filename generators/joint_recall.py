"""Vectorised multi-level joint recall generator (seed 004 Sec. 3.2, App. C).

A sample is `BOS, information component, SEP, inquiry component`. A component lists the whole
table as a tree: every level-l block starts with its level-l token and holds its children's blocks;
a leaf block is `key value`. Each component orders every block's children by its own random
permutation. Keys are shared by all contexts (the table is the full cartesian product), values are
i.i.d. uniform (the "uniform distribution" of Cor. 3.1). In the inquiry component values stay as
teacher-forced inputs; the target at each inquiry key position is the value that follows it.

Samples whose level sizes agree are built together with fixed-shape numpy ops (permutations are
argsorts of uniform keys), so a batch costs a handful of array operations per distinct size tuple.

Filler (`TaskSpec.filler`, `filler_gap`) is inserted afterwards, from the same generator but after
every draw of the table, so one seed gives the same tables whatever the amount of filler. The
`filler` tokens of a sample are spread over its slots (before every non-value token of the
information component, i.e. between blocks and never between a key and its value, and at its end)
as a uniformly random composition (stars and bars); `filler_gap` tokens follow, just before SEP.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from generators.errors import RecallLabError
from generators.spec import TaskSpec
from generators.vocab import Vocab

GENERATOR_VERSION = "1"
IGNORE = -100


@dataclass(frozen=True)
class Batch:
    inputs: np.ndarray  # int64 [n, L], PAD-padded on the right
    targets: np.ndarray  # int64 [n, L], IGNORE except at inquiry key positions
    sizes: np.ndarray  # int64 [n, w]

    @property
    def lengths(self) -> np.ndarray:
        return row_lengths(self.inputs)


def row_lengths(inputs: np.ndarray) -> np.ndarray:
    """Unpadded length of each row (PAD = 0 only ever pads on the right)."""
    return (np.asarray(inputs) != Vocab.PAD).sum(axis=1).astype(np.int64)


def sep_positions(inputs: np.ndarray) -> np.ndarray:
    """Index of the first SEP of each row (the row's width when it has none)."""
    inputs = np.asarray(inputs)
    is_sep = inputs == Vocab.SEP
    return np.where(is_sep.any(axis=1), np.argmax(is_sep, axis=1), inputs.shape[1])


def _component_length(sizes: np.ndarray) -> np.ndarray:
    prods = np.cumprod(sizes, axis=1)
    return prods.sum(axis=1) + prods[:, -1]


def _as_rng(seed: int | np.random.Generator | np.random.SeedSequence) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def _permute_blocks(blocks: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """blocks[..., perm[..., p], :] for every p: a 1-D row gather (much faster than
    take_along_axis, which builds broadcast index arrays for every axis)."""
    n, width = blocks.shape[-2:]
    lead = int(np.prod(blocks.shape[:-2]))
    idx = perm.reshape(lead, n) + (np.arange(lead) * n)[:, None]
    return blocks.reshape(lead * n, width)[idx.reshape(-1)].reshape(blocks.shape)


def _serialize(
    tokens: list[np.ndarray], values: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """One component for m samples of one size tuple: [m, component_length]."""
    m, sizes = values.shape[0], values.shape[1:]
    w = len(sizes)
    key_tok = tokens[-1].reshape((m,) + (1,) * (w - 1) + (sizes[-1],))
    blocks = np.stack([np.broadcast_to(key_tok, values.shape), values], axis=-1)
    # blocks[m, c_0..c_l, :] is the block of the level-l node (c_0..c_l); fold levels bottom-up.
    for level in range(w - 1, -1, -1):
        perm = np.argsort(rng.random(values.shape[: level + 2]), axis=-1)
        blocks = _permute_blocks(blocks, perm)
        blocks = blocks.reshape(blocks.shape[:-2] + (-1,))
        if level > 0:
            shape = (m,) + (1,) * (level - 1) + (sizes[level - 1], 1)
            parent_tok = tokens[level - 1].reshape(shape)
            parent_tok = np.broadcast_to(parent_tok, blocks.shape[:-1] + (1,))
            blocks = np.concatenate([parent_tok, blocks], axis=-1)
    return blocks


def _fixed_size_samples(
    sizes: tuple[int, ...], m: int, vocab: Vocab, rng: np.random.Generator, dtype: np.dtype
) -> np.ndarray:
    """m complete samples (BOS .. inquiry) with the same level sizes: [m, length]."""
    tokens = []
    for level, n in enumerate(sizes):
        lo, _ = vocab.level_range(level)
        pool = vocab.pools[level]
        chosen = np.argsort(rng.random((m, pool)), axis=1)[:, :n]
        tokens.append((chosen + lo).astype(dtype))
    vlo, _ = vocab.value_range
    values = (rng.integers(0, vocab.n_values, size=(m,) + tuple(sizes)) + vlo).astype(dtype)
    info = _serialize(tokens, values, rng)
    inquiry = _serialize(tokens, values, rng)
    bos = np.full((m, 1), vocab.BOS, dtype=dtype)
    sep = np.full((m, 1), vocab.SEP, dtype=dtype)
    return np.concatenate([bos, info, sep, inquiry], axis=1)


def _targets(
    inputs: np.ndarray, sep_pos: np.ndarray, vocab: Vocab, dtype: type = np.int64
) -> np.ndarray:
    nxt = np.zeros(inputs.shape, dtype=inputs.dtype)  # PAD past the end
    nxt[:, :-1] = inputs[:, 1:]
    keep = np.arange(inputs.shape[1])[None, :] > sep_pos[:, None]
    keep &= vocab.is_value(nxt)
    out = np.full(inputs.shape, IGNORE, dtype=dtype)
    np.copyto(out, nxt, where=keep, casting="unsafe")
    return out


def targets_for(inputs: np.ndarray, vocab: Vocab) -> np.ndarray:
    """Targets of padded inputs: the next token at every inquiry position followed by a value."""
    inputs = np.asarray(inputs)
    return _targets(inputs, sep_positions(inputs), vocab)


def smallest_dtype(vocab: Vocab) -> np.dtype:
    """The narrowest unsigned integer dtype that holds every id of `vocab`."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if vocab.size <= np.iinfo(dt).max + 1:
            return np.dtype(dt)
    return np.dtype(np.int64)


def generate_rows(
    spec: TaskSpec,
    n: int,
    seed: int | np.random.Generator | np.random.SeedSequence,
    dtype: np.dtype | type = np.int64,
) -> tuple[np.ndarray, np.ndarray]:
    """Padded inputs [n, width] in `dtype` and level sizes [n, w]; the core of `generate`."""
    if n < 0:
        raise RecallLabError(f"sample count must be >= 0, got {n}")
    rng = _as_rng(seed)
    vocab = spec.vocab()
    lo = np.array([a for a, _ in spec.levels], dtype=np.int64)
    hi = np.array([b for _, b in spec.levels], dtype=np.int64)
    sizes = rng.integers(lo, hi + 1, size=(n, spec.n_levels), dtype=np.int64)
    lengths = 2 + 2 * _component_length(sizes) if n else np.zeros(0, dtype=np.int64)
    width = int(lengths.max(initial=0))
    if spec.seq_len is not None and not spec.has_filler:
        width = spec.seq_len
    inputs = np.zeros((n, width), dtype=dtype)  # PAD = 0
    if n:
        groups, inverse = np.unique(sizes, axis=0, return_inverse=True)
        order = np.argsort(inverse.reshape(-1), kind="stable")
        starts = np.searchsorted(inverse.reshape(-1)[order], np.arange(len(groups) + 1))
        for g, group in enumerate(groups):
            rows = order[starts[g] : starts[g + 1]]
            block = _fixed_size_samples(
                tuple(int(s) for s in group), len(rows), vocab, rng, np.dtype(dtype)
            )
            inputs[rows, : block.shape[1]] = block
    if spec.has_filler:
        inputs = _insert_filler(inputs, sizes, spec, vocab, rng)
    return inputs, sizes


def _insert_filler(
    base: np.ndarray, sizes: np.ndarray, spec: TaskSpec, vocab: Vocab, rng: np.random.Generator
) -> np.ndarray:
    """Rows of `base` (no filler) with filler inserted (module docstring), padded to `seq_len` or
    to the longest row."""
    n, w0 = base.shape
    info = _component_length(sizes) if n else np.zeros(0, dtype=np.int64)
    sep0, len0 = 1 + info, 2 + 2 * info
    n_info = rng.integers(spec.filler[0], spec.filler[1] + 1, size=n)
    n_gap = rng.integers(spec.filler_gap[0], spec.filler_gap[1] + 1, size=n)
    cols = np.arange(w0)[None, :]
    slot = ((cols >= 1) & (cols < sep0[:, None]) & ~vocab.is_value(base)) | (cols == sep0[:, None])
    n_slots = slot.sum(axis=1)
    ins = np.zeros((n, w0), dtype=np.int64)  # filler tokens placed just before base column j
    if n and n_info.max() > 0:
        # stars and bars: n_slots - 1 bars among n_info + n_slots - 1 units, uniformly
        units = n_info + n_slots - 1
        width = int(units.max())
        r = rng.random((n, width))
        r[np.arange(width)[None, :] >= units[:, None]] = 2.0  # past the row's units: never a bar
        order = np.argsort(r, axis=1)
        take = np.arange(width)[None, :] < (n_slots - 1)[:, None]
        is_bar = np.zeros((n, width), dtype=bool)
        is_bar[np.nonzero(take)[0], order[take]] = True
        is_star = ~is_bar & (np.arange(width)[None, :] < units[:, None])
        slot_of_star = np.cumsum(is_bar, axis=1)  # bars before a star = its slot number
        s_max = int(n_slots.max())
        rows = np.nonzero(is_star)[0]
        counts = np.bincount(rows * s_max + slot_of_star[is_star], minlength=n * s_max)
        slot_rows, slot_cols = np.nonzero(slot)  # row-major: each row's slots in column order
        k = np.arange(len(slot_rows)) - np.searchsorted(slot_rows, slot_rows)
        ins[slot_rows, slot_cols] = counts.reshape(n, s_max)[slot_rows, k]
    ins[np.arange(n), sep0] += n_gap
    new_pos = cols + np.cumsum(ins, axis=1)
    new_len = len0 + n_info + n_gap
    out_width = spec.seq_len if spec.seq_len is not None else int(new_len.max(initial=0))
    out = np.zeros((n, out_width), dtype=base.dtype)
    live = np.arange(out_width)[None, :] < new_len[:, None]
    flo, fhi = vocab.filler_range
    out[live] = rng.integers(flo, fhi, size=int(live.sum())).astype(base.dtype)
    keep = cols < len0[:, None]
    out[np.nonzero(keep)[0], new_pos[keep]] = base[keep]
    return out


def generate(
    spec: TaskSpec, n: int, seed: int | np.random.Generator | np.random.SeedSequence
) -> Batch:
    """n samples of `spec`, padded to `spec.seq_len` (or to the longest sample when None)."""
    vocab = spec.vocab()
    # built in the narrowest dtype (8x less memory traffic for small vocabularies), widened once
    inputs, sizes = generate_rows(spec, n, seed, smallest_dtype(vocab))
    targets = _targets(inputs, sep_positions(inputs), vocab, np.int64)
    return Batch(inputs=inputs.astype(np.int64), targets=targets, sizes=sizes)
