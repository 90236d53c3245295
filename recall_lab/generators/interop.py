"""A dataset folder read as a pandas DataFrame or an HF `datasets.Dataset`, ids decoded.

On disk the `input_ids` and `labels` columns stay raw bytes (writing them as Parquet lists was
about 30x slower; dataset.py), so a plain `pd.read_parquet` / `load_dataset("parquet")`
gives bytes that only decode with the manifest's dtypes. :func:`open_dataset` does that decoding:

    from recall_lab.data import open_dataset  # or: from recall_lab.generators.interop import ...
    df = open_dataset("data/mini", "test")            # pandas.DataFrame
    ds = open_dataset("data/mini", "test", format="datasets")   # datasets.Dataset
    df.input_ids[0]   # [1, 37, 5, ...]: the row's token ids, unpadded, a list of int
    df.labels[0]      # [-100, -100, ..., 12, ...]: its targets (-100 = no target), same length
    df.sizes[0]       # [n_1, ..., n_w]: the sample's level sizes

Every shard is checked against its sha256 in the manifest first (`verify=False` skips it).
Format-1 folders (list columns) read the same. pandas and `datasets` are optional (the `interop`
extra); only the one asked for is imported.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recall_lab.generators.dataset import SPLITS, check_shard, layout, manifest_spec, read_manifest
from recall_lab.generators.errors import RecallLabError

__all__ = ["open_dataset", "decoded_table", "FORMATS"]

FORMATS = ("pandas", "datasets")
_COLUMNS = ("input_ids", "labels", "sizes")


def decode_column(col: pa.ChunkedArray, dtype: str, path: Path, name: str) -> pa.Array:
    """A raw-bytes column (little-endian `dtype`) or a list column -> list<int64>."""
    arr = col.combine_chunks()
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        dt = np.dtype(dtype).newbyteorder("<")
        _, off_buf, data_buf = arr.buffers()
        wide = pa.types.is_large_binary(arr.type)
        offsets = np.frombuffer(off_buf, np.int64 if wide else np.int32)[
            arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
        if np.any((offsets - offsets[0]) % dt.itemsize):
            raise RecallLabError(f"shard {path}: {name} bytes are not whole {dt.name} values")
        values = np.frombuffer(data_buf, np.uint8)[offsets[0] : offsets[-1]].view(dt)
        return pa.LargeListArray.from_arrays(pa.array((offsets - offsets[0]) // dt.itemsize),
                                             pa.array(values.astype(np.int64)))
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        return arr.cast(pa.large_list(pa.int64()))
    raise RecallLabError(f"shard {path}: {name} has unexpected type {arr.type}")


def decoded_table(path: str | Path, split: str, verify: bool = True) -> pa.Table:
    """The shards of `split` as one Arrow table: `input_ids`, `labels` (list<int64>, unpadded)
    and `sizes` (list<int64>)."""
    folder = Path(path)
    manifest = read_manifest(folder)
    if split not in SPLITS:
        raise RecallLabError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    lay = layout(manifest_spec(manifest))
    dtypes = {"input_ids": lay["id_dtype"], "labels": lay["label_dtype"]}
    last = "slices" if "slices" in lay else "sizes"  # a generator task's rows: slice labels
    parts = []
    for shard in manifest["splits"][split]:
        file = check_shard(folder, shard) if verify else folder / shard["file"]
        try:
            table = pq.read_table(file, columns=["input_ids", "labels", last])
        except (pa.ArrowException, OSError) as exc:
            raise RecallLabError(f"cannot read shard {file}: {str(exc).splitlines()[0]}") from None
        cols = {name: decode_column(table.column(name), dtypes[name], file, name)
                for name in dtypes}
        if last == "sizes":
            cols["sizes"] = table.column("sizes").combine_chunks().cast(
                pa.large_list(pa.int64()))
        else:
            cols["slices"] = table.column("slices").combine_chunks().cast(pa.int64())
        parts.append(pa.table(cols))
    if not parts:
        empty = pa.large_list(pa.int64())
        return pa.table({name: pa.array([], empty if name != "slices" else pa.int64())
                         for name in ("input_ids", "labels", last)})
    return pa.concat_tables(parts)


def open_dataset(path: str | Path, split: str, format: str = "pandas", verify: bool = True):
    """The rows of `split` ("train", "valid", "test") of the dataset folder `path` (written by
    `recall-lab generate`) as a pandas DataFrame (`format="pandas"`) or an HF
    `datasets.Dataset` (`format="datasets"`), one row per sample in file order, with columns
    `input_ids` and `labels` (lists of int, unpadded; -100 = no target) and `sizes` (the level
    sizes; a generator task's dataset has `slices`, one int per row, instead). See the module
    docstring for an example."""
    if format not in FORMATS:
        raise RecallLabError(f"unknown format {format!r}; choose from {', '.join(FORMATS)}")
    try:
        lib = importlib.import_module(format)
    except ImportError:
        raise RecallLabError(f"format {format!r} needs the {format} package "
                             "(pip install -e '.[interop]')") from None
    table = decoded_table(path, split, verify)
    if format == "datasets":
        return lib.Dataset(table)
    # pyarrow's to_pandas gives numpy arrays per cell: plain lists of int, as the docstring says
    return lib.DataFrame({name: table.column(name).to_pylist() for name in table.column_names})
