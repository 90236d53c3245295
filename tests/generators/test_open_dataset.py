"""`open_dataset`: a dataset folder as a pandas DataFrame / HF `datasets.Dataset` with the
raw-bytes columns decoded, checked against the package's own reader (`DatasetReader`), for a
uint16-id dataset, a format-1 (list columns) folder and bad input."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recall_lab.data import DatasetReader, open_dataset
from recall_lab.generators import TaskSpec
from recall_lab.generators.dataset import sha256_file, write_dataset
from recall_lab.generators.errors import RecallLabError

SPEC = TaskSpec(levels=((2, 3), (2, 4)), values=300, seq_len=60)  # ids need uint16
COUNTS = {"train": 20, "valid": 30, "test": 10}


def _matches_reader(folder, split, ids, labels, sizes):
    x, y = DatasetReader(folder).arrays(split)
    assert len(ids) == len(labels) == len(sizes) == len(x) == COUNTS[split]
    for row_x, row_y, got_x, got_y in zip(x, y, ids, labels, strict=True):
        assert type(got_x) is list and all(type(t) is int for t in got_x)
        n = len(got_x)
        assert got_x == row_x[:n].tolist() and not row_x[n:].any()  # the rest is padding
        assert got_y == row_y[:n].tolist() and (row_y[n:] == -100).all()
    assert all(len(s) == SPEC.n_levels for s in sizes)


@pytest.mark.parametrize("fmt", ["pandas", "datasets"])
def test_open_dataset_equals_the_reader(tmp_path, fmt):
    pytest.importorskip(fmt)
    write_dataset(SPEC, tmp_path / "d", COUNTS, 4)
    got = open_dataset(tmp_path / "d", "valid", format=fmt)
    assert max(max(r) for r in got["input_ids"]) > 255  # the uint16 decoding is exercised
    _matches_reader(tmp_path / "d", "valid", list(got["input_ids"]), list(got["labels"]),
                    list(got["sizes"]))


def test_format_1_folder_reads_the_same(tmp_path):
    pytest.importorskip("pandas")
    m = write_dataset(SPEC, tmp_path / "d", COUNTS, 4)
    want = open_dataset(tmp_path / "d", "test")
    shard = m["splits"]["test"][0]
    path = tmp_path / "d" / shard["file"]
    t = pq.read_table(path)
    pq.write_table(pa.table({
        "input_ids": pa.array([np.frombuffer(r, "<u2").tolist()
                               for r in t.column("input_ids").to_pylist()],
                              pa.large_list(pa.uint16())),
        "labels": pa.array([np.frombuffer(r, "<i2").tolist()
                            for r in t.column("labels").to_pylist()], pa.large_list(pa.int16())),
        "sizes": t.column("sizes"),
    }), path)
    shard["sha256"] = sha256_file(path)
    m["format_version"] = 1
    del m["content_sha256"]  # a version-1 manifest predates the hash
    (tmp_path / "d" / "manifest.json").write_text(json.dumps(m))
    got = open_dataset(tmp_path / "d", "test")
    assert got.to_dict("list") == want.to_dict("list")


def test_bad_input_is_one_clear_error(tmp_path):
    m = write_dataset(SPEC, tmp_path / "d", COUNTS, 4)
    with pytest.raises(RecallLabError, match="unknown format 'numpy'"):
        open_dataset(tmp_path / "d", "test", format="numpy")
    with pytest.raises(RecallLabError, match="unknown split 'dev'"):
        open_dataset(tmp_path / "d", "dev")
    with pytest.raises(RecallLabError, match="no manifest.json"):
        open_dataset(tmp_path, "test")
    path = tmp_path / "d" / m["splits"]["test"][0]["file"]
    path.write_bytes(path.read_bytes()[:-1] + b"x")
    with pytest.raises(RecallLabError, match="does not match its sha256"):
        open_dataset(tmp_path / "d", "test")
