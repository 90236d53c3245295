"""Dataset files: Parquet shards + `manifest.json`, deterministic whatever the sharding.

Determinism: split s, block b (BLOCK_SIZE samples) is drawn from
`SeedSequence(seed, spawn_key=(s, b))`, so the data depends only on (task, seed, counts), never on
shard size or worker count; shard sizes are whole numbers of blocks.

Disjoint splits: every row is hashed (two independent 64-bit weighted sums over its ids taken as
uint32 pairs, invariant to right padding, see `row_hashes`); rows of valid that also occur in
test, and rows of train that occur in valid or test, are redrawn from
`SeedSequence(seed, spawn_key=(s, b, attempt))` until none is left. The count of redrawn rows
goes to the manifest.

A shard (Parquet, zstd level 1) holds one row per sample: `input_ids`, the unpadded token ids as raw
bytes (Arrow `binary`: little-endian `uint8|uint16|uint32`, the manifest's `id_dtype`), `labels`,
the unpadded targets as raw bytes (`int8|int16|int32`, `label_dtype`; -100 = ignored) and `sizes`
(the level sizes, fixed-size list<uint32>). Plain Parquet that pyarrow, pandas and HF `datasets`
read as they are (`np.frombuffer(row, dtype)` decodes a row); the manifest's `layout` says so.
Format version 1 stored `list<...>` columns instead: Parquet's list encoding made writing them
about 30x slower than raw bytes; version-1 folders still load.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.folders import MARKER, FolderLock, read_marker, write_marker
from recall_lab.generators.joint_recall import (
    GENERATOR_VERSION,
    IGNORE,
    build_rows,
    row_lengths,
    sep_positions,
    smallest_dtype,
    value_targets,
)
from recall_lab.generators.spec import TaskSpec
from recall_lab.generators.tasks import GeneratorTask, task_from_json

FORMAT = "recall-lab-dataset"
FORMAT_VERSION = 2
READABLE_FORMATS = (1, 2)  # version 1: list<...> columns (still read)
BLOCK_SIZE = 8192
SPLITS = ("train", "valid", "test")
_SPLIT_INDEX = {"test": 0, "valid": 1, "train": 2}
_HASH_W = np.random.default_rng(0x5EED).integers(1, 2**63, size=(2, 1 << 16), dtype=np.uint64) | 1


def row_hashes(inputs: np.ndarray) -> np.ndarray:
    """Two 64-bit hashes per row ([n, 2] uint64): sum of random odd weights times the row's ids
    taken as uint32 pairs (one uint64 word per two ids), mod 2^64. PAD (0) contributes nothing,
    so right padding does not change a row's hash, and the ids' dtype does not either."""
    return np.stack([_hash(inputs, h) for h in range(2)], axis=1)


_HASH_ROWS = 1024  # rows per step: temporaries stay small (heap-reused, no fresh pages per call)


def _hash(inputs: np.ndarray, h: int) -> np.ndarray:
    """Hash number `h` of every row (see `row_hashes`)."""
    inputs = np.asarray(inputs)
    n, width = inputs.shape
    words = (width + 1) // 2
    if words > _HASH_W.shape[1]:
        raise RecallLabError(f"rows longer than {2 * _HASH_W.shape[1]} tokens cannot be hashed")
    out = np.empty(n, dtype=np.uint64)
    pairs = np.zeros((min(n, _HASH_ROWS), 2 * words), dtype="<u4")
    prod = np.empty((len(pairs), words), dtype="<u8")
    for start in range(0, n, _HASH_ROWS):
        k = min(_HASH_ROWS, n - start)
        pairs[:k, :width] = inputs[start : start + k]
        with np.errstate(over="ignore"):
            np.multiply(pairs[:k].view("<u8"), _HASH_W[h, :words], out=prod[:k])
            prod[:k].sum(axis=1, out=out[start : start + k])
    return out


def _in_held_out(inputs: np.ndarray, held: np.ndarray) -> np.ndarray:
    """Which rows' keys (both hashes) occur in `held` (keys sorted by (a, b)). The first hash
    alone is computed for every row and looked up by binary search; rows it matches are
    confirmed on both hashes (same answer as comparing full keys, at about half the work)."""
    a = _hash(inputs, 0)
    first = held["a"]
    at = np.minimum(np.searchsorted(first, a), len(first) - 1)
    dup = first[at] == a
    if dup.any():
        rows = np.flatnonzero(dup)
        keys = np.empty(len(rows), dtype=held.dtype)
        keys["a"], keys["b"] = a[rows], _hash(inputs[rows], 1)
        dup[rows] = np.isin(keys, held)
    return dup


def _hash_keys(h: np.ndarray) -> np.ndarray:
    return h.view([("a", np.uint64), ("b", np.uint64)]).reshape(-1)


def row_keys(inputs: np.ndarray) -> np.ndarray:
    """One comparable key per row (its two hashes; right padding does not change it)."""
    return _hash_keys(row_hashes(inputs))


@dataclass(frozen=True)
class ShardJob:
    split: str
    index: int
    first_block: int
    n_rows: int
    path: str


def _block_rows(
    spec: TaskSpec, seed: int, split: str, block: int, n: int, held_out: np.ndarray | None,
    dtype: np.dtype, label_dtype: np.dtype | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """Block `block` of `split`: padded inputs, sizes, targets (in `label_dtype`, when given) and
    the count of rows redrawn because they occur in `held_out` (hash keys sorted by (a, b))."""
    s = _SPLIT_INDEX[split]
    ss = np.random.SeedSequence(seed, spawn_key=(s, block))
    inputs, sizes, targets = _rows_and_targets(spec, n, ss, dtype, label_dtype)
    redrawn = 0
    if held_out is not None and len(held_out):
        for attempt in range(1, 1001):
            dup = _in_held_out(inputs, held_out)
            if not dup.any():
                break
            k = int(dup.sum())
            redrawn += k
            ss = np.random.SeedSequence(seed, spawn_key=(s, block, attempt))
            new_inputs, new_sizes, new_targets = _rows_and_targets(spec, k, ss, dtype,
                                                                   label_dtype)
            rows = np.flatnonzero(dup)
            inputs[rows] = 0
            inputs[rows, : new_inputs.shape[1]] = new_inputs
            sizes[rows] = new_sizes
            if targets is not None:
                targets[rows] = IGNORE
                targets[rows, : new_targets.shape[1]] = new_targets
        else:
            raise RecallLabError(
                f"cannot make {split} disjoint from the held-out splits: the task has too few "
                "distinct samples for the requested counts"
            )
    return inputs, sizes, targets, redrawn


def _rows_and_targets(
    spec: TaskSpec, n: int, ss: np.random.SeedSequence, dtype: np.dtype,
    label_dtype: np.dtype | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    if isinstance(spec, GeneratorTask):  # any task: rows of max_len (0 / -100 on the right),
        r = spec.rows(n, ss)  # its slice labels (0 without) in place of the level sizes
        inputs = np.zeros((n, spec.max_len), dtype=dtype)
        inputs[:, : r.inputs.shape[1]] = r.inputs
        slices = r.slices if r.slices is not None else np.zeros(n, dtype=np.int64)
        if label_dtype is None:
            return inputs, slices[:, None], None
        targets = np.full(inputs.shape, IGNORE, dtype=label_dtype)
        targets[:, : r.targets.shape[1]] = r.targets
        return inputs, slices[:, None], targets
    inputs, sizes, targets = build_rows(spec, n, ss, dtype, label_dtype)
    if label_dtype is not None and targets is None:  # filler: targets from the final rows
        targets = value_targets(inputs, sep_positions(inputs), spec.vocab(), label_dtype)
    return inputs, sizes, targets


def _label_dtype(vocab_size: int) -> np.dtype:
    for dt in (np.int8, np.int16, np.int32):
        if vocab_size <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.int64)


def _bytes_column(flat: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Rows stored end to end in `flat` as an Arrow `binary` array (each row's raw bytes)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths * flat.dtype.itemsize, out=offsets[1:])
    data = np.ascontiguousarray(flat).view(np.uint8)
    return pa.Array.from_buffers(pa.binary(), len(lengths),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _little_endian(dtype: np.dtype) -> np.dtype:
    return np.dtype(dtype).newbyteorder("<")


def layout(spec: TaskSpec) -> dict:
    """What a shard's columns hold (written into the manifest)."""
    vocab = spec.vocab()
    if isinstance(spec, GeneratorTask):
        return {
            "input_ids": f"binary: the row's {spec.max_len} token ids as little-endian "
                         f"{smallest_dtype(vocab).name}",
            "labels": f"binary: the row's targets as little-endian {_label_dtype(vocab.size).name}"
                      f"; {IGNORE} = no target",
            "slices": "int64: the row's slice label (0 when the task gives none)",
            "id_dtype": smallest_dtype(vocab).name,
            "label_dtype": _label_dtype(vocab.size).name,
        }
    return {
        "input_ids": f"binary: the row's token ids, unpadded, as little-endian "
                     f"{smallest_dtype(vocab).name} (numpy: np.frombuffer(row, '<"
                     f"{smallest_dtype(vocab).str[1:]}'))",
        "labels": f"binary: the row's targets, unpadded, as little-endian "
                  f"{_label_dtype(vocab.size).name}; {IGNORE} = no target",
        "sizes": "fixed-size list<uint32>: the sample's level sizes",
        "id_dtype": smallest_dtype(vocab).name,
        "label_dtype": _label_dtype(vocab.size).name,
    }


def _write_shard(
    spec: TaskSpec, seed: int, job: ShardJob, held_out: np.ndarray | None
) -> dict:
    cpu0 = time.process_time()
    vocab = spec.vocab()
    dtype = _little_endian(smallest_dtype(vocab))
    label_dtype = _little_endian(_label_dtype(vocab.size))
    ids, labels, parts_sizes, redrawn, tokens = [], [], [], 0, 0
    done, block = 0, job.first_block
    while done < job.n_rows:
        n = min(BLOCK_SIZE, job.n_rows - done)
        inputs, sizes, targets, r = _block_rows(spec, seed, job.split, block, n, held_out,
                                                dtype, label_dtype)
        lengths = row_lengths(inputs)
        if isinstance(spec, GeneratorTask):  # every id may be 0: rows are stored whole
            lengths = np.full(len(inputs), inputs.shape[1], dtype=np.int64)
        mask = np.arange(inputs.shape[1])[None, :] < lengths[:, None]
        # one Arrow chunk (and Parquet row group) per block: 32-bit offsets always suffice
        ids.append(_bytes_column(inputs[mask], lengths))
        labels.append(_bytes_column(targets[mask], lengths))
        parts_sizes.append(sizes)
        tokens += int(lengths.sum())
        redrawn += r
        done += n
        block += 1
    sizes = np.concatenate(parts_sizes)
    if isinstance(spec, GeneratorTask):
        last = pa.array(sizes.reshape(-1).astype(np.int64))
    else:
        last = pa.FixedSizeListArray.from_arrays(pa.array(sizes.reshape(-1).astype(np.uint32)),
                                                 spec.n_levels)
    table = pa.table({
        "input_ids": pa.chunked_array(ids, pa.binary()),
        "labels": pa.chunked_array(labels, pa.binary()),
        "slices" if isinstance(spec, GeneratorTask) else "sizes": last,
    })
    # no dictionary: token bytes do not repeat as whole values, so it only costs time
    # zstd level 1: a third smaller than lz4 on these bytes at about the same speed (measured)
    pq.write_table(table, job.path, compression="zstd", compression_level=1,
                   row_group_size=BLOCK_SIZE, use_dictionary=False, write_statistics=False)
    return {
        "split": job.split, "index": job.index, "file": os.path.basename(job.path),
        "rows": job.n_rows, "sha256": sha256_file(job.path), "redrawn": redrawn,
        "tokens": tokens, "pid": os.getpid(), "cpu_s": time.process_time() - cpu0,
    }


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def held_out_hashes(spec: TaskSpec, seed: int, counts: dict[str, int], upto: str) -> np.ndarray:
    """Row-hash keys of the test split (`upto="test"`) or of valid + test (`upto="valid"`),
    exactly as `write_dataset` draws them, sorted by (a, b)."""
    return _held_out(spec, seed, counts)[upto]


def _held_out(spec: TaskSpec, seed: int, counts: dict[str, int]) -> dict[str, np.ndarray]:
    """Hash keys of test ("test") and of valid + test ("valid"), drawn in one pass."""
    dtype = smallest_dtype(spec.vocab())
    held = np.zeros(0, dtype=[("a", np.uint64), ("b", np.uint64)])
    out = {}
    for split in ("test", "valid"):
        keys = []
        for block, first in enumerate(range(0, counts[split], BLOCK_SIZE)):
            n = min(BLOCK_SIZE, counts[split] - first)
            inputs, _, _, _ = _block_rows(spec, seed, split, block, n, held, dtype)
            keys.append(_hash_keys(row_hashes(inputs)))
        held = np.sort(np.concatenate(keys + [held]))  # by (a, b), for _in_held_out
        out[split] = held
    return out


def check_output_dir(out: Path, force: bool) -> None:
    """Refuse to write into a non-empty folder (without --force), into a folder that is not a
    recall-lab dataset (even with --force: it replaces only what the lab wrote), or an unwritable
    place."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RecallLabError(f"{out} exists and is not a folder")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise RecallLabError(f"{out} is not empty; pass --force to replace it")
        check_replaceable(out)
    parent = out.resolve().parent
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise RecallLabError(f"cannot write to {out}: {probe} is not writable")


def check_replaceable(out: Path) -> None:
    """`out` holds a recall-lab dataset and nothing else (its marker, manifest.json and its
    shards), so --force may replace it; anything else (a user's notes, another tool's files, a
    run) is refused. A dataset written before the marker existed is recognised by its manifest
    (`format` = "recall-lab-dataset", shape checked)."""
    kind = read_marker(out)
    try:
        if kind not in (None, "dataset"):
            raise RecallLabError("marked as another kind")
        manifest = read_manifest(out, check_hash=False)  # an edited manifest is still ours
    except RecallLabError:
        raise RecallLabError(f"{out} is not a recall-lab dataset; refusing to replace it "
                             "(--force only replaces a dataset this tool wrote)") from None
    ours = {"manifest.json", MARKER} | {sh["file"] for split in SPLITS
                                        for sh in manifest["splits"][split]}
    foreign = sorted(entry.name for entry in out.iterdir() if entry.name not in ours)
    if foreign:
        raise RecallLabError(f"{out} holds {foreign[0]!r}, which recall-lab did not write; "
                             "refusing to replace the folder")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def remove_stale_temporaries(out: Path) -> list[Path]:
    """Delete `.OUT.tmp-PID` / `.OUT.old-PID` folders left by a killed `generate` (PID dead)."""
    out = Path(out)
    removed = []
    if not out.parent.is_dir():
        return removed
    for entry in out.parent.glob(f".{out.name}.*-*"):
        kind, _, pid = entry.name[len(out.name) + 2:].rpartition("-")
        if kind in ("tmp", "old") and pid.isdigit() and entry.is_dir() \
                and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def die_with_parent(parent: int) -> None:
    """Pool-worker initializer: the worker dies with the process that started it, kill -9
    included (otherwise it waits forever on a queue nobody writes to). Linux: the kernel sends
    SIGKILL when the parent dies (prctl PR_SET_PDEATHSIG); elsewhere a thread polls the parent."""
    import signal
    import sys

    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0:  # 1 = PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(1)
            return
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def plan_shards(counts: dict[str, int], shard_size: int, tmp: Path) -> list[ShardJob]:
    if shard_size <= 0 or shard_size % BLOCK_SIZE:
        raise RecallLabError(f"shard size must be a positive multiple of {BLOCK_SIZE}")
    jobs = []
    for split in SPLITS:
        n = counts[split]
        for i, first in enumerate(range(0, n, shard_size)):
            jobs.append(ShardJob(split, i, first // BLOCK_SIZE, min(shard_size, n - first),
                                 str(tmp / f"{split}-{i:05d}.parquet")))
    return jobs


def _worker_ready() -> bool:
    return True


def _run_job(args: tuple) -> dict:
    spec_json, seed, job, held = args
    return _write_shard(task_from_json(json.loads(spec_json)), seed, job, held)


def write_dataset(
    spec: TaskSpec,
    out: Path,
    counts: dict[str, int],
    seed: int,
    *,
    preset: str | None = None,
    workers: int = 1,
    shard_size: int = 8 * BLOCK_SIZE,
    force: bool = False,
    on_shard: Callable[[dict], None] | None = None,
) -> dict:
    """Generate and write a dataset; returns the manifest. Writes into a temporary sibling folder
    and renames it into place at the end, so a failure never destroys an existing dataset."""
    for split in SPLITS:
        if counts.get(split, 0) < 0:
            raise RecallLabError(f"{split} count must be >= 0, got {counts[split]}")
    if seed < 0:
        raise RecallLabError(f"seed must be >= 0, got {seed}")
    if workers < 1:
        raise RecallLabError(f"workers must be >= 1, got {workers}")
    out = Path(out)
    counts = {s: int(counts.get(s, 0)) for s in SPLITS}
    plan_shards(counts, shard_size, out)  # the shard size is checked before anything is written
    check_output_dir(out, force)  # refuse early, before the lock file is made
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RecallLabError(f"cannot create {out.parent}: {exc.strerror or exc}") from None
    with FolderLock(out.parent / f".{out.name}.lock", out, unlink=True):
        # under the lock (a second `generate` into OUT is refused): checked again, since
        # another process may have written OUT between the first check and the lock
        check_output_dir(out, force)
        return _write_locked(spec, out, counts, seed, preset, workers, shard_size, on_shard)


def _write_locked(spec: TaskSpec, out: Path, counts: dict[str, int], seed: int,
                  preset: str | None, workers: int, shard_size: int,
                  on_shard: Callable[[dict], None] | None) -> dict:
    remove_stale_temporaries(out)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
    except OSError as exc:
        raise RecallLabError(f"cannot create {out}: {exc.strerror}") from None
    try:
        return _write_into(spec, out, tmp, counts, seed, preset, workers, shard_size, on_shard)
    except (OSError, pa.ArrowException) as exc:  # disk full, I/O error: one line, nothing left
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        reason = getattr(exc, "strerror", None) or str(exc).strip().splitlines()[0]
        raise RecallLabError(f"cannot write dataset {out}: {reason}{where}") from None
    except BrokenProcessPool:
        raise RecallLabError(f"cannot write dataset {out}: a worker process died "
                             "(out of memory?); try fewer --workers") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_into(spec: TaskSpec, out: Path, tmp: Path, counts: dict[str, int], seed: int,
                preset: str | None, workers: int, shard_size: int,
                on_shard: Callable[[dict], None] | None) -> dict:
    jobs = plan_shards(counts, shard_size, tmp)

    def job_args() -> list[tuple]:
        keys = _held_out(spec, seed, counts) if counts["valid"] or counts["train"] else {}
        held = {"test": None, "valid": keys.get("test"), "train": keys.get("valid")}
        return [(spec.model_dump_json(), seed, job, held[job.split]) for job in jobs]

    results = []
    if workers == 1 or len(jobs) <= 1:
        for a in job_args():
            results.append(_run_job(a))
            if on_shard:
                on_shard(results[-1])
    else:
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                 initializer=die_with_parent,
                                 initargs=(os.getpid(),)) as ex:
            # each submit starts one worker: they spawn and import while the held-out hashes
            # are drawn here (about a second each, otherwise one after the other)
            started = [ex.submit(_worker_ready) for _ in range(min(workers, len(jobs)))]
            args = job_args()
            for f in started:
                f.result()
            for r in ex.map(_run_job, args):
                results.append(r)
                if on_shard:
                    on_shard(r)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generator_version": GENERATOR_VERSION,
        "preset": preset,
        "task": json.loads(spec.model_dump_json()),
        "vocab": spec.vocab().to_json(),
        "seed": seed,
        "block_size": BLOCK_SIZE,
        "counts": counts,
        "splits": {
            s: [
                {k: r[k] for k in ("file", "rows", "tokens", "sha256")}
                for r in sorted(results, key=lambda r: r["index"]) if r["split"] == s
            ]
            for s in SPLITS
        },
        "disjoint": {
            "method": "two 64-bit row hashes (random odd weights x ids as uint32 pairs); "
                      "valid vs test, train vs valid+test",
            "redrawn_rows": sum(r["redrawn"] for r in results),
        },
        "ignore_index": IGNORE,
        "layout": layout(spec),
    }
    manifest["content_sha256"] = manifest_hash(manifest)
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
    write_marker(tmp, "dataset")
    if out.exists():
        if any(out.iterdir()):
            check_replaceable(out)  # again: the folder may have changed meanwhile
        trash = out.parent / f".{out.name}.old-{os.getpid()}"
        os.replace(out, trash)
        os.replace(tmp, out)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, out)
    return manifest


# ---- reading ----------------------------------------------------------------------------------

class _ShardEntry(BaseModel):
    model_config = ConfigDict(extra="allow")

    file: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a plain name inside the folder
    rows: int = Field(ge=0)
    tokens: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class _Manifest(BaseModel):
    """The shape `manifest.json` must have before any field is read (extra keys allowed)."""

    model_config = ConfigDict(extra="allow")

    task: dict
    counts: dict[Literal["train", "valid", "test"], int]
    splits: dict[Literal["train", "valid", "test"], list[_ShardEntry]]


def _manifest_error(path: Path, exc: ValidationError) -> RecallLabError:
    e = exc.errors()[0]
    loc = ".".join(str(x) for x in e["loc"]) or "top level"
    return RecallLabError(f"{path} is not a valid recall-lab manifest: {loc}: {e['msg']}")


def manifest_hash(manifest: dict) -> str:
    """sha256 of the manifest's content (canonical JSON, without its own `content_sha256`):
    written into the manifest, checked when it is read, and kept by a run trained on the
    dataset (a resume refuses a dataset that changed under it)."""
    body = {k: v for k, v in manifest.items() if k != "content_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def read_manifest(folder: Path, *, check_hash: bool = True) -> dict:
    """`folder/manifest.json`, its shape checked (format, counts, shard entries, counts = sum of
    the shards' rows) and its `content_sha256` (datasets written since it exists) against its
    content, so a manifest edited after its shards were written is refused: one clear line for
    anything else."""
    folder = Path(folder)
    path = folder / "manifest.json"
    if not folder.exists():
        raise RecallLabError(f"dataset {folder} does not exist")
    if not path.is_file():
        raise RecallLabError(f"{folder} is not a recall-lab dataset (no manifest.json)")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RecallLabError(f"{path} is not valid JSON") from None
    except OSError as exc:
        raise RecallLabError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise RecallLabError(f"{path} is not a recall-lab dataset manifest")
    if manifest.get("format_version") not in READABLE_FORMATS:
        raise RecallLabError(
            f"{path}: format version {manifest.get('format_version')} is not supported (this "
            f"version reads {', '.join(map(str, READABLE_FORMATS))}; regenerate the dataset)"
        )
    try:
        checked = _Manifest.model_validate(manifest)
    except ValidationError as exc:
        raise _manifest_error(path, exc) from None
    for split in SPLITS:
        if split not in checked.counts or split not in checked.splits:
            raise RecallLabError(f"{path} is not a valid recall-lab manifest: no {split} split")
        rows = sum(shard.rows for shard in checked.splits[split])
        if rows != checked.counts[split]:
            raise RecallLabError(f"{path}: the {split} shards hold {rows} rows, counts says "
                                 f"{checked.counts[split]}")
    try:
        manifest_spec(manifest)
    except ValidationError as exc:
        raise _manifest_error(path, exc) from None
    stored = manifest.get("content_sha256")
    if check_hash and stored is not None and stored != manifest_hash(manifest):
        raise RecallLabError(f"{path} was edited after its shards were written (its "
                             "content_sha256 does not match its content); regenerate the "
                             "dataset")
    return manifest


def manifest_spec(manifest: dict):
    """The manifest's task: a `TaskSpec` or a `GeneratorTask`."""
    return task_from_json(manifest["task"])


def check_shard(folder: Path, shard: dict) -> Path:
    """The shard's path, after checking it exists and matches its sha256 in the manifest."""
    path = Path(folder) / shard["file"]
    if not path.is_file():
        raise RecallLabError(f"missing shard {path}")
    try:
        digest = sha256_file(path)
    except OSError as exc:
        raise RecallLabError(f"cannot read shard {path}: {exc.strerror or exc}") from None
    if digest != shard["sha256"]:
        raise RecallLabError(f"shard {path} does not match its sha256 in the manifest "
                             "(corrupt or modified)")
    return path


def verify_split(folder: Path, manifest: dict, split: str) -> None:
    """Check every shard of `split` against the manifest's sha256 (reads the files once)."""
    if split not in SPLITS:
        raise RecallLabError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    for shard in manifest["splits"][split]:
        check_shard(folder, shard)


def read_split_flat(
    folder: Path, split: str, verify: bool = True
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield (flat ids in the file's narrow dtype, row lengths, sizes [n, w]) per shard, checking
    each shard's sha256 against the manifest first."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if split not in SPLITS:
        raise RecallLabError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    spec = manifest_spec(manifest)
    for shard in manifest["splits"][split]:
        path = folder / shard["file"]
        if verify:
            check_shard(folder, shard)
        elif not path.is_file():
            raise RecallLabError(f"missing shard {path}")
        try:
            table = pq.read_table(path, columns=["input_ids", "sizes"])
        except (pa.ArrowException, OSError) as exc:
            raise RecallLabError(f"cannot read shard {path}: {str(exc).splitlines()[0]}") from None
        if table.num_rows != shard["rows"]:
            raise RecallLabError(f"shard {path} has {table.num_rows} rows, manifest says "
                                 f"{shard['rows']}")
        flat, lengths = _decode_ids(table.column("input_ids"), spec, path)
        sizes = table.column("sizes").combine_chunks().values.to_numpy().astype(np.int64)
        yield flat, lengths, sizes.reshape(-1, spec.n_levels)


def _decode_ids(column: pa.ChunkedArray, spec: TaskSpec, path: Path) -> tuple[np.ndarray,
                                                                               np.ndarray]:
    """(flat ids in the narrow dtype, row lengths) of an `input_ids` column: raw bytes (format
    2) or a list column (format 1)."""
    col = column.combine_chunks()
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        dtype = _little_endian(smallest_dtype(spec.vocab()))
        _, offsets_buf, data_buf = col.buffers()
        offsets = np.frombuffer(offsets_buf, dtype=np.int64 if pa.types.is_large_binary(
            col.type) else np.int32)[col.offset : col.offset + len(col) + 1]
        data = np.frombuffer(data_buf, dtype=np.uint8)[offsets[0] : offsets[-1]]
        if data.size % dtype.itemsize:
            raise RecallLabError(f"shard {path}: input_ids bytes are not whole {dtype.name} ids")
        return data.view(dtype).astype(dtype.newbyteorder("="), copy=False), \
            np.diff(offsets).astype(np.int64) // dtype.itemsize
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        return col.values.to_numpy(), np.diff(col.offsets.to_numpy())
    raise RecallLabError(f"shard {path}: input_ids has unexpected type {col.type}")


def row_starts(lengths: np.ndarray) -> np.ndarray:
    """Start offset of each row in rows stored end to end."""
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts


def pad_rows(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
    """Rows `flat[starts[i] : starts[i] + lengths[i]]` as an int64 [n, width] array, PAD-filled."""
    cols = np.arange(width)[None, :]
    mask = cols < lengths[:, None]
    out = np.zeros((len(lengths), width), dtype=np.int64)
    out[mask] = flat[(starts[:, None] + cols)[mask]]
    return out
