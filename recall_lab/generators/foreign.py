"""Rows with their own labels: a lab dataset of a generator task, or data made by another tool.

Foreign data (`train.data` / `--data`): a Parquet file, a folder of Parquet files, or a folder
written by HF `datasets`' `save_to_disk` (a `Dataset` or a `DatasetDict`), with two columns of
integer lists, `input_ids` and `labels` (-100 = not scored; labels are used as given, never
recomputed). Splits come by name (Parquet files or subfolders whose name starts with `train`,
`valid`/`validation`/`dev` or `test`; a `DatasetDict`'s splits) or, for data with one split (or
a held-out split missing), by the fractions and seed stated in the task (`valid`, `test`,
`split_seed`, default 0.1, 0.1, 0: a seeded permutation of the rows, the first `test` share to
test, the next `valid` share to valid, the rest to train).

The run's task is `GeneratorTask(generator="dataset", kwargs={vocab_size, max_len, ...})`: the
vocabulary is the largest id + 1, the length the longest row. Every file's sha256 is recorded
(`files`), so a run can refuse data that changed under it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recall_lab.generators.dataset import check_shard
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.interop import decode_column
from recall_lab.generators.tasks import IGNORE, task_generator

SPLIT_NAMES = {"train": "train", "valid": "valid", "validation": "valid", "dev": "valid",
               "test": "test"}
DEFAULT_FRACTIONS = {"valid": 0.1, "test": 0.1, "split_seed": 0}


@dataclass
class LabelledSplit:
    """A split's rows end to end: ids and labels (int64, flat), each row's length and start, and
    its slice labels (None when the data gives none)."""

    ids: np.ndarray
    labels: np.ndarray
    lengths: np.ndarray
    slices: np.ndarray | None = None

    @property
    def starts(self) -> np.ndarray:
        out = np.zeros(len(self.lengths), dtype=np.int64)
        np.cumsum(self.lengths[:-1], out=out[1:])
        return out

    def take(self, index: np.ndarray) -> LabelledSplit:
        starts, lengths = self.starts[index], self.lengths[index]
        pos = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths, strict=True)]) \
            if len(index) else np.zeros(0, dtype=np.int64)
        return LabelledSplit(self.ids[pos], self.labels[pos], lengths.copy(),
                             None if self.slices is None else self.slices[index])

    def padded(self, index: np.ndarray, width: int | None = None) -> tuple[np.ndarray,
                                                                             np.ndarray]:
        """(inputs, targets) int64 of rows `index`, right-padded with 0 / -100 to `width` (the
        longest of these rows when None)."""
        index = np.asarray(index, dtype=np.int64)
        lengths = self.lengths[index]
        width = width or int(lengths.max(initial=1))
        cols = np.arange(width)[None, :]
        mask = cols < lengths[:, None]
        src = (self.starts[index][:, None] + cols)[mask]
        x = np.zeros((len(index), width), dtype=np.int64)
        y = np.full((len(index), width), IGNORE, dtype=np.int64)
        x[mask], y[mask] = self.ids[src], self.labels[src]
        return x, y


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def files_hash(files: dict[str, str]) -> str:
    """One sha256 over every file's name and sha256 (the dataset's content hash)."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def is_foreign(path: str | Path) -> bool:
    """Whether `path` is data of another tool (not a folder `recall-lab generate` wrote)."""
    p = Path(path)
    return p.is_file() or (p.is_dir() and not (p / "manifest.json").is_file())


def _split_of(name: str) -> str | None:
    low = name.lower()
    for prefix, split in SPLIT_NAMES.items():
        if low == prefix or low.startswith(prefix + "-") or low.startswith(prefix + "_") \
                or low.startswith(prefix + "."):
            return split
    return None


def find_files(path: str | Path) -> tuple[dict[str, list[Path]], str]:
    """The data files by split name ("all" when the data has no named splits) and the format
    ("parquet" or "arrow")."""
    root = Path(path)
    if not root.exists():
        raise RecallLabError(f"dataset {root} does not exist")
    if root.is_file():
        if root.suffix != ".parquet":
            raise RecallLabError(f"dataset {root}: expected a .parquet file, a folder of them "
                                 "or an HF datasets folder (save_to_disk)")
        return {"all": [root]}, "parquet"
    arrow = sorted(root.rglob("*.arrow"))
    parquet = sorted(root.rglob("*.parquet"))
    files, fmt = (arrow, "arrow") if arrow else (parquet, "parquet")
    if not files:
        raise RecallLabError(f"dataset {root} holds no .parquet or .arrow files")
    out: dict[str, list[Path]] = {}
    for f in files:
        rel = f.relative_to(root).parts
        split = _split_of(rel[0]) if len(rel) > 1 else _split_of(f.name)
        out.setdefault(split or "all", []).append(f)
    if "all" in out and len(out) > 1:
        raise RecallLabError(f"dataset {root}: {out['all'][0].name} belongs to no split (name "
                             "files or folders train*, valid*, test*)")
    return out, fmt


def _read_table(path: Path, fmt: str) -> pa.Table:
    try:
        if fmt == "parquet":
            return pq.read_table(path)
        with pa.memory_map(str(path)) as source:
            try:
                return pa.ipc.open_stream(source).read_all()
            except pa.ArrowInvalid:
                return pa.ipc.open_file(source).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise RecallLabError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None


def _int_lists(table: pa.Table, name: str, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(flat int64 values, row lengths) of a list-of-integers column; one line otherwise."""
    col = table.column(name).combine_chunks()
    t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or \
            not pa.types.is_integer(t.value_type):
        raise RecallLabError(f"dataset {path}: column {name} must be lists of integers, got {t}")
    if col.null_count or col.values.null_count:
        raise RecallLabError(f"dataset {path}: column {name} has missing values")
    col = col.cast(pa.large_list(pa.int64()))
    offsets = col.offsets.to_numpy()
    values = col.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]]
    return values.astype(np.int64), np.diff(offsets).astype(np.int64)


def read_labelled(path: Path, fmt: str) -> LabelledSplit:
    """One file's rows, its schema checked: `input_ids` and `labels` integer lists of equal
    length per row, ids >= 0, labels >= 0 or -100."""
    table = _read_table(path, fmt)
    missing = [c for c in ("input_ids", "labels") if c not in table.column_names]
    if missing:
        raise RecallLabError(f"dataset {path} has no {missing[0]} column (it needs input_ids "
                             f"and labels, lists of integers; it has "
                             f"{', '.join(table.column_names) or 'none'})")
    ids, lengths = _int_lists(table, "input_ids", path)
    labels, label_lengths = _int_lists(table, "labels", path)
    if not np.array_equal(lengths, label_lengths):
        row = int(np.flatnonzero(lengths != label_lengths)[0])
        raise RecallLabError(f"dataset {path}: row {row} has {lengths[row]} input_ids but "
                             f"{label_lengths[row]} labels")
    if ids.size and ids.min() < 0:
        raise RecallLabError(f"dataset {path}: input_ids must be >= 0, found {ids.min()}")
    if labels.size and ((labels < 0) & (labels != IGNORE)).any():
        raise RecallLabError(f"dataset {path}: labels must be ids >= 0 or {IGNORE}")
    return LabelledSplit(ids, labels, lengths)


def _concat(parts: list[LabelledSplit]) -> LabelledSplit:
    return LabelledSplit(np.concatenate([p.ids for p in parts]),
                         np.concatenate([p.labels for p in parts]),
                         np.concatenate([p.lengths for p in parts]))


def read_foreign(path: str | Path, fractions: dict | None = None
                 ) -> tuple[dict[str, LabelledSplit], dict[str, str], str]:
    """(splits, {file: sha256}, how the splits were made: "named" or "fraction") of foreign
    data; `fractions` ({"valid", "test", "split_seed"}) splits data that has no named splits."""
    root = Path(path)
    by_split, fmt = find_files(root)
    files = {}
    for group in by_split.values():
        for f in group:
            files[str(f.relative_to(root)) if f != root else f.name] = sha256_file(f)
    parts = {s: _concat([read_labelled(f, fmt) for f in group]) for s, group in by_split.items()}
    fr = {**DEFAULT_FRACTIONS, **(fractions or {})}
    if "all" in parts:
        splits, how = split_by_fraction(parts["all"], fr["valid"], fr["test"],
                                        fr["split_seed"]), "fraction"
    else:
        if "train" not in parts:
            raise RecallLabError(f"dataset {root} has splits {', '.join(parts)} but no train")
        splits, how = parts, "named"
        missing = [s for s in ("valid", "test") if s not in parts]
        if missing:  # a held-out split the data lacks is carved from train, as stated
            carved = split_by_fraction(parts["train"], fr["valid"] if "valid" in missing else 0,
                                       fr["test"] if "test" in missing else 0, fr["split_seed"])
            splits = {**parts, "train": carved["train"], **{s: carved[s] for s in missing}}
            how = "fraction"
    if not (splits["train"].labels != IGNORE).any():
        raise RecallLabError(f"dataset {root}: every training label is {IGNORE}: nothing to learn")
    return splits, files, how


def split_by_fraction(rows: LabelledSplit, valid: float, test: float,
                      seed: int) -> dict[str, LabelledSplit]:
    """A seeded permutation of the rows: the first `test` share to test, then `valid`, the rest
    to train (each held-out share at least one row when it is > 0 and rows allow)."""
    for name, f in (("valid", valid), ("test", test)):
        if not isinstance(f, (int, float)) or not 0 <= f < 1:
            raise RecallLabError(f"dataset split fraction {name} must lie in [0, 1), got {f!r}")
    if valid + test >= 1:
        raise RecallLabError(f"dataset split fractions valid {valid} + test {test} leave no "
                             "training rows")
    n = len(rows.lengths)
    order = np.random.default_rng(np.random.SeedSequence(int(seed))).permutation(n)
    n_test = int(np.ceil(test * n)) if test > 0 else 0
    n_valid = int(np.ceil(valid * n)) if valid > 0 else 0
    if n - n_test - n_valid < 1:
        raise RecallLabError(f"dataset of {n} rows is too small to split by fraction")
    return {"test": rows.take(np.sort(order[:n_test])),
            "valid": rows.take(np.sort(order[n_test : n_test + n_valid])),
            "train": rows.take(np.sort(order[n_test + n_valid :]))}


def shape_of(splits: dict[str, LabelledSplit]) -> tuple[int, int]:
    """(vocabulary size, longest row) over every split: largest id or label + 1, max length."""
    top, longest = 0, 1
    for s in splits.values():
        if s.ids.size:
            top = max(top, int(s.ids.max()))
        scored = s.labels[s.labels != IGNORE]
        if scored.size:
            top = max(top, int(scored.max()))
        longest = max(longest, int(s.lengths.max(initial=1)))
    return top + 1, longest


def _stated(name: str):
    def get(**kwargs) -> int:
        if name not in kwargs:
            raise RecallLabError("task 'dataset' is the task of data files: give them with "
                                 "--data (train.data), not as a task")
        return kwargs[name]
    return get


@task_generator(vocab_size=_stated("vocab_size"), max_len=_stated("max_len"))
def dataset(n, seed, **kwargs):
    """The task of foreign data: its rows come from its files (`train.data`), never drawn."""
    raise RecallLabError("this task is read from its data files (train.data); it draws no rows: "
                         "give the run's --data")


def read_lab_split(folder: Path, manifest: dict, split: str, verify: bool = True
                   ) -> LabelledSplit:
    """A split of a dataset `recall-lab generate` wrote for a generator task: its labels as
    stored, its slice labels."""
    lay = manifest["layout"]
    parts, slices = [], []
    for shard in manifest["splits"][split]:
        file = check_shard(folder, shard) if verify else Path(folder) / shard["file"]
        try:
            table = pq.read_table(file)
        except (pa.ArrowException, OSError) as exc:
            raise RecallLabError(f"cannot read shard {file}: {str(exc).splitlines()[0]}") from None
        cols = {}
        for name, dtype in (("input_ids", lay["id_dtype"]), ("labels", lay["label_dtype"])):
            arr = decode_column(table.column(name), dtype, file, name)
            cols[name] = (arr.values.to_numpy().astype(np.int64),
                          np.diff(arr.offsets.to_numpy()).astype(np.int64))
        parts.append(LabelledSplit(cols["input_ids"][0], cols["labels"][0], cols["input_ids"][1]))
        if "slices" in table.column_names:
            slices.append(table.column("slices").to_numpy().astype(np.int64))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return LabelledSplit(empty, empty, empty, empty)
    out = _concat(parts)
    out.slices = np.concatenate(slices) if len(slices) == len(parts) else None
    return out
