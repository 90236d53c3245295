"""Round one's vectorised generator (one permuted copy of the blocks per level, argsort of
uniform keys for every permutation), kept verbatim as the reference the fast path must equal
byte for byte: the same draws from the same stream in the same order."""

from __future__ import annotations

import numpy as np

from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.joint_recall import _as_rng, _component_length, _insert_filler
from recall_lab.generators.spec import TaskSpec
from recall_lab.generators.vocab import Vocab


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


def reference_rows(
    spec: TaskSpec,
    n: int,
    seed: int | np.random.Generator | np.random.SeedSequence,
    dtype: np.dtype | type = np.int64,
) -> tuple[np.ndarray, np.ndarray]:
    """Round one's generate_rows, unchanged."""
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
