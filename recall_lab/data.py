"""A run's data: torch batches from the generators, streamed on the fly or read from dataset
shards, and the held-out sets; `DataSource` is the one object train and evaluate use for both.

Streaming is resumable by construction: batch number `step` is drawn from
`SeedSequence(seed, spawn_key=(STREAM_KEY, step))`, so a run restarted at step s sees exactly the
batches it would have seen.

Outside training, `open_dataset(path, split, format="pandas" | "datasets")` (from
recall_lab/generators/interop.py, re-exported here) gives a dataset folder's rows as a pandas
DataFrame or an HF `datasets.Dataset` with `input_ids` and `labels` decoded to lists of int.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from recall_lab.generators import TaskSpec
from recall_lab.generators.dataset import (
    SPLITS,
    manifest_hash,
    manifest_spec,
    pad_rows,
    read_manifest,
    read_split_flat,
    row_keys,
    row_starts,
    verify_split,
)
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.foreign import (
    DEFAULT_FRACTIONS,
    files_hash,
    is_foreign,
    read_foreign,
    read_lab_split,
    shape_of,
)
from recall_lab.generators.interop import open_dataset
from recall_lab.generators.joint_recall import smallest_dtype, targets_for
from recall_lab.generators.tasks import GeneratorTask
from recall_lab.generators.tasks import rows as task_rows

__all__ = ["DataSource", "DatasetReader", "batch_at", "held_out", "open_dataset",
           "stream_batches", "stream_overlap"]

STREAM_KEY = 7  # keeps streamed batches apart from the dataset files' seed streams
VALID_KEY, TEST_KEY = 1, 2  # spawn keys of the streamed runs' held-out sets
EPOCH_KEY = 8  # epoch orders of a dataset's training split
FIXED_KEY = 9  # the fixed training set of `train.train_examples`


def _to_torch(inputs: np.ndarray, targets: np.ndarray, device: str | torch.device):
    return (
        torch.from_numpy(np.ascontiguousarray(inputs)).to(device),
        torch.from_numpy(np.ascontiguousarray(targets)).to(device),
    )


def held_out_rows(spec, n: int, data_seed: int, split: str):
    """The fixed held-out set `split` ("valid" or "test") of a streamed run, any task: `Rows`
    (inputs, targets and the task's slice labels, if it gives them)."""
    key = {"valid": VALID_KEY, "test": TEST_KEY}[split]
    return task_rows(spec, n, np.random.SeedSequence(data_seed, spawn_key=(key,)))


def held_out(spec, n: int, data_seed: int, split: str):
    """The fixed held-out set `split` ("valid" or "test") of a streamed run: (inputs, targets)
    int64 arrays."""
    b = held_out_rows(spec, n, data_seed, split)
    return b.inputs, b.targets


def batch_at(spec: TaskSpec, batch_size: int, seed: int, step: int, device="cpu"):
    """The streamed batch number `step` (inputs, targets), LongTensor [B, L]."""
    b = task_rows(spec, batch_size, np.random.SeedSequence(seed, spawn_key=(STREAM_KEY, step)))
    return _to_torch(b.inputs, b.targets, device)


def stream_overlap(spec: TaskSpec, batch_size: int, seed: int, steps: int,
                   held: dict[str, np.ndarray], max_rows: int = 16384) -> dict:
    """How much of each held-out set also occurs in the training stream: the fraction of its
    rows found among the first min(steps * batch_size, ~max_rows) streamed training rows
    (regenerated; rows compared by padding-invariant hashes). Streamed held-out sets are drawn
    apart from the stream's seeds but not deduplicated against it (dataset folders are): on a
    task with few distinct samples they repeat training rows and measure memorisation too."""
    n_batches = max(1, min(steps, max_rows // max(batch_size, 1)))
    seen = np.concatenate([
        row_keys(task_rows(spec, batch_size,
                           np.random.SeedSequence(seed, spawn_key=(STREAM_KEY, step))).inputs)
        for step in range(n_batches)
    ])
    out: dict = {"train_rows_checked": int(len(seen))}
    for name, inputs in held.items():
        out[name] = float(np.isin(row_keys(inputs), seen).mean()) if len(inputs) else 0.0
    return out


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
    """Reads a folder written by `recall-lab generate` (hashes verified on first read).

    A split is held in memory as its flat token stream in the file's narrow dtype plus row
    offsets (the full `paper-mqjr` train split is about 0.7 GB this way, 12 GB padded as int64);
    padded batches are built on demand.
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        self.spec = manifest_spec(self.manifest)
        self.vocab = self.spec.vocab()
        self._splits: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._perm: tuple[int, int, np.ndarray] | None = None  # (seed, epoch, permutation)
        self._verified: set[str] = set()

    def verify(self, splits: tuple[str, ...] = SPLITS) -> None:
        """Check every shard of `splits` against its sha256 in the manifest now (a run calls it
        before creating its folder), so a corrupt file is found before any work, not after."""
        for split in splits:
            if split not in self._verified:
                verify_split(self.folder, self.manifest, split)
                self._verified.add(split)

    def _split(self, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if split not in self._splits:
            # filled in place (token counts are in the manifest): one copy of the split in memory
            tokens = sum(shard["tokens"] for shard in self.manifest["splits"][split])
            flat = np.zeros(tokens, dtype=smallest_dtype(self.vocab))
            lengths = np.zeros(self.count(split), dtype=np.int64)
            tok = row = 0
            shards = read_split_flat(self.folder, split, verify=split not in self._verified)
            for ids, lens, _ in shards:
                if tok + len(ids) > tokens or row + len(lens) > len(lengths):
                    raise RecallLabError(f"{self.folder}: the {split} shards hold more tokens or "
                                         "rows than the manifest says")
                flat[tok : tok + len(ids)] = ids
                lengths[row : row + len(lens)] = lens
                tok, row = tok + len(ids), row + len(lens)
            self._splits[split] = (flat, row_starts(lengths), lengths)
        return self._splits[split]

    def count(self, split: str) -> int:
        if split not in SPLITS:
            raise RecallLabError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
        return int(self.manifest["counts"][split])

    def rows(self, split: str, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets) int64 for the given row numbers, padded to the task's `seq_len` or
        to the longest of these rows."""
        flat, starts, lengths = self._split(split)
        index = np.asarray(index, dtype=np.int64)
        width = self.spec.seq_len or int(lengths[index].max(initial=1))
        x = pad_rows(flat, starts[index], lengths[index], width)
        return x, targets_for(x, self.vocab)

    def arrays(self, split: str, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The first n rows (all by default) of `split` as (inputs, targets)."""
        total = self.count(split)
        return self.rows(split, np.arange(total if n is None else min(n, total)))

    def batches(
        self, split: str, batch_size: int, shuffle_seed: int | None = None, device="cpu"
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One pass over `split` (shuffled when a seed is given); the last batch may be short."""
        if batch_size < 1:
            raise RecallLabError(f"batch size must be >= 1, got {batch_size}")
        n = self.count(split)
        order = np.arange(n)
        if shuffle_seed is not None:
            order = np.random.default_rng(shuffle_seed).permutation(n)
        for start in range(0, n, batch_size):
            yield _to_torch(*self.rows(split, order[start : start + batch_size]), device)

    def batch_at(
        self, split: str, batch_size: int, seed: int, step: int, device="cpu"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Training batch number `step`: the epoch-e order of the split is the permutation drawn
        from `SeedSequence(seed, (EPOCH_KEY, e))`, and batches walk through consecutive epochs,
        so batch `step` depends only on (dataset, seed, batch_size, step): resumable."""
        n = self.count(split)
        if n == 0:
            raise RecallLabError(f"the {split} split of {self.folder} is empty")
        pos = step * batch_size + np.arange(batch_size)
        epochs, offsets = np.divmod(pos, n)
        index = np.empty(batch_size, dtype=np.int64)
        for e in np.unique(epochs):
            sel = epochs == e
            index[sel] = self._epoch_perm(int(seed), int(e), n)[offsets[sel]]
        return _to_torch(*self.rows(split, index), device)

    def _epoch_perm(self, seed: int, epoch: int, n: int) -> np.ndarray:
        if self._perm is None or self._perm[:2] != (seed, epoch):
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(EPOCH_KEY, epoch)))
            self._perm = (seed, epoch, rng.permutation(n))
        return self._perm[2]


class LabelledReader(DatasetReader):
    """Rows with their own labels, used as given: a folder `recall-lab generate` wrote for a
    generator task, or foreign data (recall_lab/generators/foreign.py: Parquet or HF `datasets`
    files with `input_ids` and `labels`). Same interface as `DatasetReader`, plus each split's
    slices."""

    def __init__(self, path: str | Path, task: GeneratorTask | None = None,
                 fractions: dict | None = None):
        self.folder = Path(path)
        self._perm = None
        self._verified: set[str] = set()
        if is_foreign(self.folder):
            self.manifest = None
            kw = dict(task.kwargs) if task is not None and task.generator == "dataset" else {}
            kw.update(fractions or {})
            fractions = {k: kw[k] for k in ("valid", "test", "split_seed") if k in kw}
            self._splits, self.files, how = read_foreign(self.folder, fractions)
            self.fingerprint = files_hash(self.files)
            self.spec = dataset_task(self._splits, self.fingerprint,
                                     {**DEFAULT_FRACTIONS, **fractions} if how == "fraction"
                                     else None)
            self._verified = set(SPLITS)
        else:
            self.manifest = read_manifest(self.folder)
            self.spec = manifest_spec(self.manifest)
            self.fingerprint = manifest_hash(self.manifest)
            self._splits = {}
            self._has_slices = self.spec.rows(1, 0).slices is not None
        self.vocab = self.spec.vocab()

    def verify(self, splits: tuple[str, ...] = SPLITS) -> None:
        for split in splits:
            if split not in self._verified:
                self._split(split)  # reading a shard checks its sha256 first

    def _split(self, split: str):
        if split not in self._splits:
            part = read_lab_split(self.folder, self.manifest, split)
            if not self._has_slices:
                part.slices = None
            self._splits[split] = part
            self._verified.add(split)
        return self._splits[split]

    def count(self, split: str) -> int:
        if split not in SPLITS:
            raise RecallLabError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
        if self.manifest is not None:
            return int(self.manifest["counts"][split])
        return len(self._splits[split].lengths)

    def rows(self, split: str, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        part = self._split(split)
        index = np.asarray(index, dtype=np.int64)
        return part.padded(index, self.spec.max_len if self.manifest is not None else None)

    def overlap(self, held: dict[str, np.ndarray]) -> dict | None:
        """For data of another tool (its splits are not made disjoint): the fraction of each
        held-out set's rows whose ids also occur as a training row (padding-invariant row
        hashes, every training row); None for a lab dataset, disjoint by construction."""
        if self.manifest is not None:
            return None
        n = self.count("train")
        seen = np.concatenate([row_keys(self.rows("train", np.arange(s, min(s + 4096, n)))[0])
                               for s in range(0, n, 4096)] or [row_keys(np.zeros((0, 1)))])
        out: dict = {"train_rows_checked": int(n)}
        for name, inputs in held.items():
            out[name] = float(np.isin(row_keys(inputs), seen).mean()) if len(inputs) else 0.0
        return out

    def slices(self, split: str, n: int | None = None) -> np.ndarray | None:
        part = self._split(split)
        if part.slices is None:
            return None
        return part.slices[: self.count(split) if n is None else n]


class FixedSet(DatasetReader):
    """`train.train_examples`: the first n samples the task's generator draws from
    `SeedSequence(data_seed, spawn_key=(FIXED_KEY,))`, held in memory as the "train" split of a
    dataset and walked like one (`DatasetReader.batch_at`: a fresh seeded order every epoch,
    batches running on across epochs). zoology's 100,000 examples repeated for epochs."""

    def __init__(self, spec, n: int, data_seed: int):
        rows = task_rows(spec, n, np.random.SeedSequence(data_seed, spawn_key=(FIXED_KEY,)))
        self.spec, self.vocab = spec, spec.vocab()
        self._inputs, self._targets = rows.inputs, rows.targets
        self._perm = None
        self._verified = set(SPLITS)

    def count(self, split: str) -> int:
        return len(self._inputs) if split == "train" else 0

    def rows(self, split: str, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        index = np.asarray(index, dtype=np.int64)
        return self._inputs[index], self._targets[index]

    def verify(self, splits: tuple[str, ...] = SPLITS) -> None:
        return None  # generated here from its seed: nothing on disk to check

    def overlap(self, held: dict[str, np.ndarray]) -> dict:
        """The fraction of each held-out set's rows that are also rows of the fixed set (the
        held-out sets are drawn from other seeds, not deduplicated against it)."""
        seen = row_keys(self._inputs)
        out: dict = {"train_rows_checked": int(len(seen))}
        for name, inputs in held.items():
            out[name] = float(np.isin(row_keys(inputs), seen).mean()) if len(inputs) else 0.0
        return out


def dataset_task(splits: dict, sha256: str, fractions: dict | None) -> GeneratorTask:
    """The task of foreign data: its vocabulary and longest row, how it was split, its content
    hash (so a run's config names the data it was trained on)."""
    vocab_size, max_len = shape_of(splits)
    kwargs = {"vocab_size": vocab_size, "max_len": max_len, **(fractions or {}),
              "sha256": sha256}
    return GeneratorTask(generator="dataset", kwargs=kwargs)


def open_reader(data: str | Path, task=None, recorded: str | None = None) -> DatasetReader:
    """The reader of `train.data`: a lab dataset of the joint-recall family (labels recomputed
    from the ids, as always), or rows with their own labels (a generator task's dataset,
    foreign data). `recorded`: the content hash a run recorded, named when the data is gone."""
    if not Path(data).exists():
        sha = task.kwargs.get("sha256") if isinstance(task, GeneratorTask) else None
        sha = sha or recorded
        named = f" (the run's data has content sha256 {sha})" if sha else ""
        raise RecallLabError(f"dataset {data} does not exist{named}; moved or deleted? put it "
                             "back at that path")
    if is_foreign(data):
        return LabelledReader(data, task if isinstance(task, GeneratorTask) else None)
    if isinstance(manifest_spec(read_manifest(Path(data))), GeneratorTask):
        return LabelledReader(data)
    return DatasetReader(data)


class DataSource:
    """Where a run's data comes from, built once: the generator's stream (task + data seed) or a
    dataset folder from `recall-lab generate` (`train.data`). It gives training batch number
    `step` (a pure function of the source, seed, batch size and step: runs resume exactly), the
    held-out splits and the task; callers never branch on which kind it is."""

    def __init__(self, spec: TaskSpec, data_seed: int = 0, data: str | Path | None = None,
                 recorded: str | None = None, train_examples: int | None = None):
        self.spec, self.seed = spec, data_seed
        self.reader = open_reader(data, spec, recorded) if data is not None else None
        # `train.train_examples`: training batches from a fixed set, held-out sets streamed
        self.fixed = FixedSet(spec, train_examples, data_seed) if train_examples else None
        if self.reader is not None and self.reader.spec != spec:
            if isinstance(spec, GeneratorTask) and spec.generator == "dataset" and \
                    spec.kwargs.get("sha256") != self.reader.fingerprint:
                raise RecallLabError(f"dataset {data} is not the data of this run: its content "
                                     f"sha256 is {self.reader.fingerprint[:16]}, the run's "
                                     f"{str(spec.kwargs.get('sha256'))[:16]} (changed or "
                                     "replaced?)")
            raise RecallLabError(f"the run's task ({spec.describe()}) is not the task of "
                                 f"dataset {data} ({self.reader.spec.describe()})")

    @classmethod
    def for_run(cls, cfg, recorded: str | None = None) -> DataSource:
        """The source of a `RunConfig`: its task, `train.data_seed` and `train.data`
        (`recorded`: the data's content hash a resumed run recorded)."""
        return cls(cfg.task, cfg.train.data_seed, cfg.train.data, recorded,
                   getattr(cfg.train, "train_examples", None))

    @property
    def fingerprint(self) -> str | None:
        """The content hash of a dataset's manifest (None for a stream, which is its config)."""
        if self.reader is None:
            return None
        return getattr(self.reader, "fingerprint", None) or manifest_hash(self.reader.manifest)

    def verify(self) -> None:
        """Check a dataset's shards against their sha256 now (a run does it before it touches
        its folder); nothing to check for a stream."""
        if self.reader is not None:
            self.reader.verify()

    def batch(self, step: int, batch_size: int, device="cpu"):
        """Training batch number `step`: (inputs, targets) LongTensors [B, L]."""
        if self.fixed is not None:
            return self.fixed.batch_at("train", batch_size, self.seed, step, device)
        if self.reader is not None:
            return self.reader.batch_at("train", batch_size, self.seed, step, device)
        return batch_at(self.spec, batch_size, self.seed, step, device)

    def held_out(self, split: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The first n samples of the fixed "valid" or "test" set, as int64 arrays."""
        if self.reader is not None:
            return self.reader.arrays(split, n)
        return held_out(self.spec, n, self.seed, split)

    def slices(self, split: str, n: int) -> np.ndarray | None:
        """The slice label of each of those samples, where the task gives them (else None)."""
        if self.reader is not None:
            return self.reader.slices(split, n) if hasattr(self.reader, "slices") else None
        return held_out_rows(self.spec, n, self.seed, split).slices

    def overlap(self, batch_size: int, steps: int, held: dict[str, np.ndarray]) -> dict | None:
        """For a stream, how much of each held-out set the training stream also draws
        (`stream_overlap`); for another tool's data, how much of it is also a training row;
        None for a lab dataset, whose splits are disjoint by construction; for a fixed set,
        how much of each held-out set is also one of its rows."""
        if self.fixed is not None:
            return self.fixed.overlap(held)
        if self.reader is not None:
            return self.reader.overlap(held) if hasattr(self.reader, "overlap") else None
        return stream_overlap(self.spec, batch_size, self.seed, steps, held)
