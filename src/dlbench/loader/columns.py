"""The parquet side of a dataset: its data files' columns read into numpy arrays, with no torch imported, so that
processes which only read columns (a bench job's parent, counting the bytes an ideal reader fetches) start quickly."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pyarrow as pa

from ..errors import UserError, no_range_requests
from ..format import meta, paths
from .dataset_meta import DatasetMeta

INDEX_COLUMNS = ("index", "episode_index", "frame_index", "timestamp", "task_index")


def read_table(dmeta: DatasetMeta, rel: str, columns: list[str]) -> pa.Table:
    """`columns` of one data file (a relative path), as read from its storage."""
    url = paths.join(dmeta.data_root, rel)
    try:
        if paths.is_remote(url):
            with meta.open_file(dmeta.data_root, rel) as f:
                return meta.read_parquet(f, columns)
        return meta.read_parquet(paths.local_path(url), columns, memory_map=True)
    except (pa.ArrowInvalid, OSError, ValueError) as e:
        raise no_range_requests(url, e) or UserError(f"{url}: cannot read parquet ({e})") from None


class HeldTables:
    """The data files' tables a process has read, kept up to `max_bytes` (least recently used first out): a
    streaming worker is dealt other episodes each epoch, and re-reads no file it still holds."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self._tables, self._bytes = max_bytes, OrderedDict(), 0
        self.reads = 0  # files read from storage

    def get(self, dmeta: DatasetMeta, rel: str, columns: list[str]) -> pa.Table:
        table = self._tables.pop(rel, None)
        if table is None:
            table, self.reads = read_table(dmeta, rel, columns), self.reads + 1
            self._bytes += table.nbytes
        self._tables[rel] = table
        while len(self._tables) > 1 and self._bytes > self.max_bytes:
            self._bytes -= self._tables.popitem(last=False)[1].nbytes
        return table


def read_columns(
    dmeta: DatasetMeta, rel_files: list[str], columns: list[str], held: HeldTables | None = None
) -> dict[str, np.ndarray]:
    """Concatenate `columns` of the given data files into numpy arrays (fixed-size lists become 2-D); `held`: the
    tables a process keeps, read from storage only where it holds none."""
    table = pa.concat_tables(
        [held.get(dmeta, rel, columns) if held else read_table(dmeta, rel, columns) for rel in rel_files]
    )
    out = {}
    for name in columns:
        col = table.column(name).combine_chunks()
        if _nested(col.type):  # language columns: per row a list of messages, kept as LeRobot returns them
            out[name] = np.empty(len(col), dtype=object)
            out[name][:] = col.to_pylist()
        elif pa.types.is_fixed_size_list(col.type) or pa.types.is_list(col.type):
            width = col.type.list_size if pa.types.is_fixed_size_list(col.type) else None
            flat = _numpy(col.flatten())
            out[name] = flat.reshape(len(col), width if width else -1)
        else:
            out[name] = _numpy(col)
    return out


def _nested(t: pa.DataType) -> bool:
    """A list of structs (LeRobot's language columns), not a vector of numbers."""
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_struct(t.value_type)


# pyarrow's to_numpy imports pandas (~0.35 s, most of a loader's open on a small dataset); plain numbers need not
_NUMPY_TYPES = {pa.float32(): np.float32, pa.float64(): np.float64, pa.int64(): np.int64, pa.int32(): np.int32}


def _numpy(arr: pa.Array) -> np.ndarray:
    """A column as numpy: primitive columns without nulls by their buffer (a view), others through pyarrow."""
    dtype = _NUMPY_TYPES.get(arr.type)
    if dtype is None or arr.null_count:
        return arr.to_numpy(zero_copy_only=False)
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * np.dtype(dtype).itemsize)


def data_columns(dmeta: DatasetMeta) -> list[str]:
    """Parquet columns an item carries: the numeric features plus the index columns."""
    cols = [
        k
        for k, ft in dmeta.info["features"].items()
        if ft.get("dtype") not in ("video", "image", "string") and k not in INDEX_COLUMNS
    ]
    return cols + list(INDEX_COLUMNS)
