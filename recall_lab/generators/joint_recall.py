"""Vectorised multi-level joint recall generator (joint-recall paper Sec. 3.2, App. C).

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

import math
from dataclasses import dataclass

import numpy as np

from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.limits import check_fits
from recall_lab.generators.spec import TaskSpec
from recall_lab.generators.vocab import Vocab

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


_IDX_BITS = 11  # rng.random() keeps the top 53 bits of each raw 64-bit draw: 11 are free


def _perms(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Uniform random permutations along the last axis of `shape`: the argsort of
    `rng.random(shape)`.

    With PCG64 (what `default_rng` and SeedSequences give) `rng.random()` is `(raw >> 11) *
    2**-53` of one raw 64-bit draw per value, so sorting `raw` with its low 11 bits replaced by
    the position orders exactly as the floats do (ties aside, probability 2**-53) and leaves the
    generator in the same state: the same permutations, about 30% faster than argsort (measured).
    """
    n = shape[-1]
    if not isinstance(rng.bit_generator, np.random.PCG64) or n > (1 << _IDX_BITS):
        return np.argsort(rng.random(shape), axis=-1)
    keys = rng.bit_generator.random_raw(math.prod(shape)).reshape(shape)
    keys &= np.uint64(~((1 << _IDX_BITS) - 1) & 0xFFFFFFFFFFFFFFFF)
    keys |= np.arange(n, dtype=np.uint64)
    keys.sort(axis=-1)
    keys &= np.uint64((1 << _IDX_BITS) - 1)
    return keys.astype(np.intp)


def _component(
    out: np.ndarray, tokens: list[np.ndarray], values: np.ndarray, rng: np.random.Generator,
    targets: np.ndarray | None = None,
) -> None:
    """Write one component of m samples of one size tuple into `out` [m, component_length]
    (a view), and the inquiry targets into `targets` (same shape) when given.

    Every parent's children are ordered by a random permutation, drawn bottom-up (leaves first;
    the level-l permutations have shape [m, s_0..s_l] and are indexed by the parent's identity).
    They are composed into each node's identity in output order (`ident[l]`: the node's flat index
    in the s_0 x .. x s_l grid), so every token is gathered once and written through strided views
    of `out` (block of a level-l node = its token, then its children's blocks)."""
    m, sizes = values.shape[0], values.shape[1:]
    w = len(sizes)
    perms = [np.empty(0, dtype=np.intp)] * w
    for level in range(w - 1, -1, -1):
        perms[level] = _perms(values.shape[: level + 2], rng)
    rows = np.arange(m)[:, None]
    ident = perms[0]  # [m, s_0]
    n_parent = sizes[0]
    children = [ident]  # children[l]: each level-l node's index among its siblings, output order
    for level in range(1, w):
        s = sizes[level]
        flat_rows = (rows * n_parent + ident.reshape(m, -1)).reshape(-1)
        child = perms[level].reshape(m * n_parent, s)[flat_rows].reshape(ident.shape + (s,))
        ident = ident[..., None] * s + child
        children.append(child)
        n_parent *= s
    # block widths: a leaf block is `key value`, a level-l block is its token + children's blocks
    width = [2] * w
    for level in range(w - 2, -1, -1):
        width[level] = 1 + sizes[level + 1] * width[level + 1]
    view = out.reshape((m, sizes[0], width[0]))
    tview = None if targets is None else targets.reshape((m, sizes[0], width[0]))
    for level in range(w):
        child = children[level]
        base = (rows * sizes[level]).reshape((m,) + (1,) * (child.ndim - 1))
        view[..., 0] = tokens[level].reshape(-1)[child + base]  # flat gathers: no index grids
        if level < w - 1:
            nxt = view.shape[:-1] + (sizes[level + 1], width[level + 1])
            view = view[..., 1:].reshape(nxt)
            if tview is not None:
                tview = tview[..., 1:].reshape(nxt)
    base = (rows * n_parent).reshape((m,) + (1,) * (ident.ndim - 1))
    view[..., 1] = values.reshape(-1)[ident + base]
    if tview is not None:  # the target at a key is the value that follows it
        tview[..., 0] = view[..., 1]


def _fixed_size_samples(
    sizes: tuple[int, ...], out: np.ndarray, vocab: Vocab, rng: np.random.Generator,
    targets: np.ndarray | None = None,
) -> None:
    """Fill `out` [m, length] with m complete samples (BOS .. inquiry) with the same level sizes,
    and the inquiry targets into `targets` when given."""
    m, dtype = out.shape[0], out.dtype
    tokens = []
    for level, n in enumerate(sizes):
        lo, _ = vocab.level_range(level)
        pool = vocab.pools[level]
        chosen = _perms((m, pool), rng)[:, :n]
        tokens.append((chosen + lo).astype(dtype))
    vlo, _ = vocab.value_range
    values = (rng.integers(0, vocab.n_values, size=(m,) + tuple(sizes)) + vlo).astype(dtype)
    comp = out.shape[1] // 2 - 1
    out[:, 0] = vocab.BOS
    _component(out[:, 1 : 1 + comp], tokens, values, rng)
    out[:, 1 + comp] = vocab.SEP
    inquiry_targets = None if targets is None else targets[:, 2 + comp :]
    _component(out[:, 2 + comp :], tokens, values, rng, inquiry_targets)


def value_targets(
    inputs: np.ndarray, sep_pos: np.ndarray, vocab: Vocab, dtype: type = np.int64
) -> np.ndarray:
    """The next token at every position after `sep_pos` whose next token is a value, IGNORE
    elsewhere (the dataset writer calls it with the separators it already found)."""
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
    return value_targets(inputs, sep_positions(inputs), vocab)


def smallest_dtype(vocab: Vocab) -> np.dtype:
    """The narrowest unsigned integer dtype that holds every id of `vocab`."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if vocab.size <= np.iinfo(dt).max + 1:
            return np.dtype(dt)
    return np.dtype(np.int64)


# Bytes per token that `generate` holds at its peak: int64 inputs and targets, the narrow rows
# they are built from and value_targets' temporaries.
SAMPLE_BYTES_PER_TOKEN = 32


def check_samples_fit(spec: TaskSpec, n: int, what: str | None = None) -> None:
    """Refuse `n` samples of `spec` (padded to its longest) that the machine cannot hold: one
    line naming `what` (an option) instead of a huge allocation."""
    check_fits(n * spec.max_len * SAMPLE_BYTES_PER_TOKEN,
               f"{what or 'the samples'}: {n:,} samples of {spec.max_len} tokens")


def generate_rows(
    spec: TaskSpec,
    n: int,
    seed: int | np.random.Generator | np.random.SeedSequence,
    dtype: np.dtype | type = np.int64,
) -> tuple[np.ndarray, np.ndarray]:
    """Padded inputs [n, width] in `dtype` and level sizes [n, w]; the core of `generate`."""
    inputs, sizes, _ = build_rows(spec, n, seed, np.dtype(dtype), None)
    return inputs, sizes


def build_rows(
    spec: TaskSpec, n: int, seed: int | np.random.Generator | np.random.SeedSequence,
    dtype: np.dtype, target_dtype: np.dtype | None, out_dtype: np.dtype | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Inputs (in `out_dtype` when given, else `dtype`), sizes and (when `target_dtype` is given
    and the task has no filler) targets.

    Samples are built group by group (one group per distinct size tuple) in a small contiguous
    block each (written in place through views, cache-resident), then copied into their rows."""
    if n < 0:
        raise RecallLabError(f"sample count must be >= 0, got {n}")
    check_samples_fit(spec, n)
    rng = _as_rng(seed)
    vocab = spec.vocab()
    lo = np.array([a for a, _ in spec.levels], dtype=np.int64)
    hi = np.array([b for _, b in spec.levels], dtype=np.int64)
    sizes = rng.integers(lo, hi + 1, size=(n, spec.n_levels), dtype=np.int64)
    lengths = 2 + 2 * _component_length(sizes) if n else np.zeros(0, dtype=np.int64)
    width = int(lengths.max(initial=0))
    if spec.seq_len is not None and not spec.has_filler:
        width = spec.seq_len
    with_targets = target_dtype is not None and not spec.has_filler
    # blocks are built in `dtype`; without filler they are widened to `out_dtype` as they are
    # copied into their rows (no second pass over the padded array)
    wide = out_dtype if out_dtype is not None and not spec.has_filler else dtype
    inputs = np.zeros((n, width), dtype=wide)  # PAD = 0
    tgt = np.full((n, width), IGNORE, dtype=target_dtype) if with_targets else None
    if n:
        order, starts = _group_rows(sizes, hi)
        for g in range(len(starts) - 1):
            rows = order[starts[g] : starts[g + 1]]
            group = tuple(int(x) for x in sizes[rows[0]])
            length = 2 + 2 * int(_component_length(sizes[rows[:1]])[0])
            block = np.empty((len(rows), length), dtype=dtype)
            tblock = None if tgt is None else np.full(block.shape, IGNORE, dtype=target_dtype)
            _fixed_size_samples(group, block, vocab, rng, tblock)
            inputs[rows, :length] = block
            if tgt is not None:
                tgt[rows, :length] = tblock
    if spec.has_filler:
        inputs = _insert_filler(inputs, sizes, spec, vocab, rng)
    return inputs, sizes, tgt


def _group_rows(sizes: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by size tuple, groups in lexicographic order of the tuples (the order the
    draws follow), rows in their own order within a group: (order, group starts)."""
    spans = hi + 1
    if float(np.prod(spans.astype(np.float64))) < 2**62:
        # one integer per tuple (mixed radix, first level most significant): a 1-D stable sort
        code = np.zeros(len(sizes), dtype=np.int64)
        for level in range(sizes.shape[1]):
            code = code * spans[level] + sizes[:, level]
    else:  # pragma: no cover - astronomically many size tuples
        code = np.unique(sizes, axis=0, return_inverse=True)[1].reshape(-1)
    order = np.argsort(code, kind="stable")
    ordered = code[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1], True])
    return order, starts


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
    # built in the narrowest dtype (8x less memory traffic for small vocabularies), widened once;
    # targets are written with the inquiry (or derived from the inputs after filler insertion)
    int64 = np.dtype(np.int64)
    inputs, sizes, targets = build_rows(spec, n, seed, smallest_dtype(vocab), int64, int64)
    if targets is None:
        targets = value_targets(inputs, sep_positions(inputs), vocab, np.int64)
    return Batch(inputs=inputs.astype(np.int64, copy=False), targets=targets, sizes=sizes)


def _spec_of(**fields) -> TaskSpec:
    return TaskSpec.model_validate(fields)


def joint_recall(n: int, seed: np.random.SeedSequence, **fields) -> tuple[np.ndarray, np.ndarray]:
    """Multi-level joint recall through the task contract (tasks.py): the kwargs are
    `TaskSpec` fields; the rows are `generate`'s, byte for byte."""
    b = generate(_spec_of(**fields), n, seed)
    return b.inputs, b.targets


joint_recall.vocab_size = lambda **fields: _spec_of(**fields).vocab().size
joint_recall.max_len = lambda **fields: (lambda s: s.seq_len or s.max_len)(_spec_of(**fields))
