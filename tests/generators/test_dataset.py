"""Dataset files: determinism across sharding, disjoint splits, loader round trip, corruption."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from recall_lab.data import DatasetReader, batch_at, stream_batches
from recall_lab.generators import TaskSpec, generate, get_preset, targets_for
from recall_lab.generators.dataset import BLOCK_SIZE, write_dataset
from recall_lab.generators.errors import RecallLabError

SPEC = get_preset("mini-mqjr")


def _rows(folder: Path, split: str) -> list[tuple[int, ...]]:
    x, _ = DatasetReader(folder).arrays(split)
    return [tuple(r[r != 0].tolist()) for r in x]


def test_same_seed_same_bytes_whatever_the_sharding(tmp_path):
    counts = {"train": 2 * BLOCK_SIZE + 100, "valid": 64, "test": 64}
    a = write_dataset(SPEC, tmp_path / "a", counts, 3, shard_size=BLOCK_SIZE, workers=1)
    b = write_dataset(SPEC, tmp_path / "b", counts, 3, shard_size=BLOCK_SIZE, workers=2)
    c = write_dataset(SPEC, tmp_path / "c", counts, 3, shard_size=4 * BLOCK_SIZE, workers=2)
    assert len(a["splits"]["train"]) == 3 and len(c["splits"]["train"]) == 1
    # same layout, different worker counts: identical files
    def shas(m):
        return [s["sha256"] for s in m["splits"]["train"]]

    assert shas(a) == shas(b)
    for split in ("train", "valid", "test"):
        assert _rows(tmp_path / "a", split) == _rows(tmp_path / "c", split)
    write_dataset(SPEC, tmp_path / "d", counts, 4, shard_size=BLOCK_SIZE)
    assert _rows(tmp_path / "a", "test") != _rows(tmp_path / "d", "test")


def test_splits_disjoint_and_duplicates_redrawn(tmp_path):
    # 2 keys x 2 values: only 2 (token choice) * 4 (values) * 2 * 2 (orders) = 32 distinct samples
    spec = TaskSpec(levels=((2, 2),), values=2, pools=(2,))
    m = write_dataset(spec, tmp_path / "d", {"train": 40, "valid": 6, "test": 6}, 0)
    assert m["disjoint"]["redrawn_rows"] > 0
    rows = {s: _rows(tmp_path / "d", s) for s in ("train", "valid", "test")}
    assert not set(rows["train"]) & (set(rows["valid"]) | set(rows["test"]))
    assert not set(rows["valid"]) & set(rows["test"])
    assert len(rows["train"]) == 40


def test_impossible_disjointness_is_an_error(tmp_path):
    spec = TaskSpec(levels=((1, 1),), values=2, pools=(1,))  # 2 distinct samples in all
    with pytest.raises(RecallLabError, match="too few distinct samples"):
        write_dataset(spec, tmp_path / "d", {"train": 4, "valid": 1, "test": 1}, 0)
    assert not (tmp_path / "d").exists()


def test_loader_round_trip_equals_the_generator(tmp_path):
    m = write_dataset(SPEC, tmp_path / "d", {"train": 100, "valid": 50, "test": 70}, 9)
    assert json.loads((tmp_path / "d" / "manifest.json").read_text()) == m
    # test is drawn first and never redrawn: block 0 of split index 0
    expected = generate(SPEC, 70, np.random.SeedSequence(9, spawn_key=(0, 0)))
    reader = DatasetReader(tmp_path / "d")
    got_x, got_y = reader.arrays("test")
    assert (got_x == expected.inputs).all() and (got_y == expected.targets).all()
    def rows(batches):
        return [tuple(t for t in r if t) for x, _ in batches for r in x.tolist()]

    assert rows(reader.batches("test", 32)) == [tuple(t for t in r if t) for r in got_x.tolist()]

    shuffled = rows(reader.batches("test", 32, shuffle_seed=1))
    assert shuffled != rows(reader.batches("test", 32))
    assert sorted(shuffled) == sorted(rows(reader.batches("test", 32)))


def _decoded(rows, dtype: str) -> list[list[int]]:
    return [np.frombuffer(r, dtype=np.dtype(dtype).newbyteorder("<")).tolist() for r in rows]


def test_files_read_without_this_package_equal_the_generator(tmp_path):
    """pyarrow, pandas and HF datasets read a shard as it is; decoding the raw-bytes columns as
    the manifest's layout says gives generate()'s samples (test = block 0 of split 0, never
    redrawn), unpadded, and their targets."""
    spec = TaskSpec(levels=((2, 3), (2, 4)), values=300, seq_len=60)  # ids need uint16
    m = write_dataset(spec, tmp_path / "d", {"train": 20, "valid": 10, "test": 40}, 5)
    lay = m["layout"]
    assert (lay["id_dtype"], lay["label_dtype"]) == ("uint16", "int16")
    expected = generate(spec, 40, np.random.SeedSequence(5, spawn_key=(0, 0)))
    want_x = [r[r != 0].tolist() for r in expected.inputs]
    want_y = [y[: len(x)].tolist() for x, y in zip(want_x, expected.targets, strict=True)]
    want_sizes = expected.sizes.tolist()
    path = tmp_path / "d" / "test-00000.parquet"

    table = pq.read_table(path).to_pydict()
    assert _decoded(table["input_ids"], lay["id_dtype"]) == want_x
    assert _decoded(table["labels"], lay["label_dtype"]) == want_y
    assert table["sizes"] == want_sizes

    pd = pytest.importorskip("pandas")
    df = pd.read_parquet(path)
    assert _decoded(df["input_ids"], lay["id_dtype"]) == want_x
    assert _decoded(df["labels"], lay["label_dtype"]) == want_y
    assert [list(s) for s in df["sizes"]] == want_sizes

    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_parquet(str(path), cache_dir=str(tmp_path / "hf"))
    assert _decoded(ds["input_ids"], lay["id_dtype"]) == want_x
    assert _decoded(ds["labels"], lay["label_dtype"]) == want_y
    assert [list(s) for s in ds["sizes"]] == want_sizes


def test_format_1_datasets_still_load(tmp_path):
    """A folder written with format version 1 (list<...> columns) reads as the same samples."""
    import pyarrow as pa

    m = write_dataset(SPEC, tmp_path / "d", {"train": 30, "valid": 20, "test": 20}, 2)
    want = DatasetReader(tmp_path / "d").arrays("valid")
    shard = m["splits"]["valid"][0]
    path = tmp_path / "d" / shard["file"]
    t = pq.read_table(path)
    ids = [np.frombuffer(r, np.uint8) for r in t.column("input_ids").to_pylist()]
    labels = [np.frombuffer(r, np.int8) for r in t.column("labels").to_pylist()]
    pq.write_table(pa.table({
        "input_ids": pa.array([r.tolist() for r in ids], pa.large_list(pa.uint8())),
        "labels": pa.array([r.tolist() for r in labels], pa.large_list(pa.int8())),
        "sizes": t.column("sizes"),
    }), path)
    from recall_lab.generators.dataset import sha256_file

    shard["sha256"] = sha256_file(path)
    m["format_version"] = 1
    del m["content_sha256"]  # written since format 2's round three; a version-1 one has none
    (tmp_path / "d" / "manifest.json").write_text(json.dumps(m))
    got = DatasetReader(tmp_path / "d").arrays("valid")
    assert (got[0] == want[0]).all() and (got[1] == want[1]).all()
    m["format_version"] = 99
    (tmp_path / "d" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(RecallLabError, match="format version 99 is not supported"):
        DatasetReader(tmp_path / "d")


def test_row_hashes_match_a_plain_python_reference():
    """Each hash is sum_i W[h, i] * word_i mod 2^64 over the row's ids as uint32 pairs
    (word_i = id_2i + id_2i+1 * 2^32); right padding and the ids' dtype do not change it, and
    the row-chunked fast path agrees across chunk boundaries."""
    from recall_lab.generators.dataset import _HASH_ROWS, _HASH_W, row_hashes

    rng = np.random.default_rng(0)
    x = rng.integers(0, 300, size=(_HASH_ROWS + 7, 37)).astype(np.uint16)
    x[:, 30:] = 0
    x[5, 10:] = 0
    got = row_hashes(x)
    for i in (0, 5, _HASH_ROWS - 1, _HASH_ROWS, _HASH_ROWS + 6):
        r = x[i].tolist() + [0]
        words = [r[2 * j] + (r[2 * j + 1] << 32) for j in range(len(r) // 2)]
        for h in range(2):
            want = sum(int(_HASH_W[h, j]) * w for j, w in enumerate(words)) % 2**64
            assert int(got[i, h]) == want
    assert (row_hashes(x[:, :30].astype(np.int64)) == got).all()  # no padding, other dtype
    assert len({tuple(k) for k in got.tolist()}) == len({tuple(r) for r in x.tolist()})


def test_corrupted_shard_is_a_clear_error(tmp_path):
    write_dataset(SPEC, tmp_path / "d", {"train": 10, "valid": 10, "test": 10}, 0)
    shard = tmp_path / "d" / "valid-00000.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(RecallLabError, match="sha256"):
        DatasetReader(tmp_path / "d").arrays("valid")
    shard.unlink()
    with pytest.raises(RecallLabError, match="missing shard"):
        DatasetReader(tmp_path / "d").arrays("valid")


def test_force_replaces_and_refusal_keeps_existing(tmp_path):
    out = tmp_path / "d"
    write_dataset(SPEC, out, {"train": 10, "valid": 10, "test": 10}, 0)
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(RecallLabError, match="not empty"):
        write_dataset(SPEC, out, {"train": 10, "valid": 10, "test": 10}, 1)
    assert (out / "manifest.json").read_bytes() == before
    m = write_dataset(SPEC, out, {"train": 5, "valid": 5, "test": 5}, 1, force=True)
    assert m["seed"] == 1 and json.loads((out / "manifest.json").read_text())["seed"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]  # no temporary folders left


def test_stream_is_resumable_and_seeded():
    it = stream_batches(SPEC, 4, seed=2)
    first = [next(it) for _ in range(3)]
    resumed = next(stream_batches(SPEC, 4, seed=2, start_step=2))
    assert torch.equal(first[2][0], resumed[0]) and torch.equal(first[2][1], resumed[1])
    assert not torch.equal(first[0][0], first[1][0])
    assert torch.equal(batch_at(SPEC, 4, 2, 1)[0], first[1][0])


def test_training_batches_from_files_walk_epochs_and_resume(tmp_path):
    write_dataset(SPEC, tmp_path / "d", {"train": 10, "valid": 3, "test": 3}, 5)
    reader = DatasetReader(tmp_path / "d")
    all_x, _ = reader.arrays("train")
    rows = {tuple(r[r != 0].tolist()): i for i, r in enumerate(all_x)}

    def seen(step):
        x, y = reader.batch_at("train", 4, seed=1, step=step)
        assert torch.equal(y, torch.from_numpy(targets_for(x.numpy(), SPEC.vocab())))
        return [rows[tuple(t for t in r if t)] for r in x.tolist()]

    stream = [i for s in range(5) for i in seen(s)]  # 20 rows = two epochs of 10
    assert sorted(stream[:10]) == list(range(10)) and sorted(stream[10:]) == list(range(10))
    assert stream[:10] != stream[10:]  # each epoch has its own order
    fresh = DatasetReader(tmp_path / "d")
    x3, _ = fresh.batch_at("train", 4, seed=1, step=3)  # a resumed run, no history
    assert [rows[tuple(t for t in r if t)] for r in x3.tolist()] == stream[12:16]
    assert seen(0) != [rows[tuple(t for t in r if t)] for r in
                       reader.batch_at("train", 4, seed=2, step=0)[0].tolist()]
