"""Torch batches from the generators: streamed on the fly or read from dataset shards.

Streaming is resumable by construction: batch number `step` is drawn from
`SeedSequence(seed, spawn_key=(STREAM_KEY, step))`, so a run restarted at step s sees exactly the
batches it would have seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from generators import TaskSpec, generate
from generators.dataset import SPLITS, manifest_spec, read_manifest, read_split
from generators.errors import RecallLabError
from generators.joint_recall import targets_for

STREAM_KEY = 7  # keeps streamed batches apart from the dataset files' seed streams


def _to_torch(inputs: np.ndarray, targets: np.ndarray, device: str | torch.device):
    return (
        torch.from_numpy(np.ascontiguousarray(inputs)).to(device),
        torch.from_numpy(np.ascontiguousarray(targets)).to(device),
    )


def batch_at(spec: TaskSpec, batch_size: int, seed: int, step: int, device="cpu"):
    """The streamed batch number `step` (inputs, targets), LongTensor [B, L]."""
    b = generate(spec, batch_size, np.random.SeedSequence(seed, spawn_key=(STREAM_KEY, step)))
    return _to_torch(b.inputs, b.targets, device)


def stream_batches(
    spec: TaskSpec, batch_size: int, seed: int, device="cpu", start_step: int = 0
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches generated on the fly, forever; batch i depends only on (spec, seed, i)."""
    if batch_size < 1:
        raise RecallLabError(f"batch size must be >= 1, got {batch_size}")
    step = start_step
    while True:
        yield batch_at(spec, batch_size, seed, step, device)
        step += 1


class DatasetReader:
    """Reads a folder written by `recall-lab generate` (hashes verified on first read)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        self.spec = manifest_spec(self.manifest)
        self._cache: dict[str, np.ndarray] = {}

    def arrays(self, split: str) -> np.ndarray:
        if split not in self._cache:
            if split not in SPLITS:
                raise RecallLabError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
            parts = [x for x, _ in read_split(self.folder, split)]
            width = self.spec.seq_len or max((p.shape[1] for p in parts), default=0)
            out = np.zeros((sum(len(p) for p in parts), width), dtype=np.int64)
            row = 0
            for p in parts:
                out[row : row + len(p), : p.shape[1]] = p
                row += len(p)
            self._cache[split] = out
        return self._cache[split]

    def __len__(self) -> int:
        return sum(self.manifest["counts"].values())

    def batches(
        self, split: str, batch_size: int, shuffle_seed: int | None = None, device="cpu"
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One pass over `split` (shuffled when a seed is given); the last batch may be short.
        Each batch is trimmed to its longest row unless the task fixes `seq_len`."""
        if batch_size < 1:
            raise RecallLabError(f"batch size must be >= 1, got {batch_size}")
        data = self.arrays(split)
        order = np.arange(len(data))
        if shuffle_seed is not None:
            order = np.random.default_rng(shuffle_seed).permutation(len(data))
        vocab = self.spec.vocab()
        for start in range(0, len(data), batch_size):
            x = data[order[start : start + batch_size]]
            if self.spec.seq_len is None:
                x = x[:, : int((x != vocab.PAD).sum(axis=1).max(initial=1))]
            yield _to_torch(x, targets_for(x, vocab), device)
