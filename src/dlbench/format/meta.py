"""Read and write LeRobot metadata, v2.1 and v3.0.

Readers take a dataset root that is a local path or any fsspec URL; writers take a local directory and write
atomically. `info` stays a plain dict so that keys dlbench does not know survive a read-write round trip.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import atomic
from ..errors import UserError, no_range_requests
from . import paths


# --------------------------------------------------------------------------------------------- generic helpers
def open_file(root: str, relpath: str, mode: str = "rb"):
    """Open a file of a dataset (local or fsspec URL); a missing or unreadable file is a `UserError` naming it."""
    url = paths.join(str(root), relpath)
    try:
        if not paths.is_remote(url):  # local: no fsspec import (~80 ms of every converter and worker start)
            return open(paths.local_path(url), mode)
        import fsspec

        return fsspec.open(url, mode).open()
    except (FileNotFoundError, NotADirectoryError):
        raise _missing(str(root), url) from None
    except (IsADirectoryError, PermissionError) as e:
        raise UserError(f"{url}: cannot read it ({e.strerror}); check the file and its permissions") from None


def _missing(root: str, url: str) -> UserError:
    """The error for a dataset file that is not there, naming the root itself when that is what is missing."""
    where = Path(paths.local_path(root))
    if not paths.is_remote(root) and not where.is_dir():
        what = "a file, not a directory" if where.exists() else "no such directory"
        return UserError(f"{root}: {what}; give the root of a LeRobot dataset (the directory holding meta/)")
    return UserError(f"{url}: file not found; is {root} a complete LeRobot dataset?")


def exists(root: str, relpath: str) -> bool:
    url = paths.join(str(root), relpath)
    if not paths.is_remote(url):
        return Path(paths.local_path(url)).exists()
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs.exists(path)


def read_json(root: str, relpath: str) -> Any:
    with open_file(root, relpath) as f:
        try:
            return json.load(f)
        except ValueError as e:  # not JSON, or not text at all (UnicodeDecodeError)
            raise UserError(f"{paths.join(str(root), relpath)}: not valid JSON ({e})") from None


def iter_jsonl(root: str, relpath: str) -> Iterator[dict]:
    """Stream the rows of a JSON-lines file without holding it whole."""
    with open_file(root, relpath) as f:  # bytes: a line that is not UTF-8 is reported as one that is not JSON
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError as e:  # not JSON, or not text at all (UnicodeDecodeError)
                    raise UserError(f"{paths.join(str(root), relpath)}:{lineno}: not valid JSON ({e})") from None


def to_jsonable(obj: Any) -> Any:
    """Numpy arrays and scalars to plain lists and numbers (for JSON and parquet)."""
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


# ------------------------------------------------------------------------------------------------------ info
def read_info(root: str) -> dict:
    info = read_json(root, paths.INFO_PATH)
    if not isinstance(info, dict):
        raise UserError(
            f"{paths.join(str(root), paths.INFO_PATH)}: holds a JSON {type(info).__name__}, not the object of a "
            f"LeRobot info.json; restore the file from the dataset's source"
        )
    return info


def write_info(root: str | Path, info: dict) -> None:
    atomic.write_json(Path(root) / paths.INFO_PATH, to_jsonable(info), indent=4)


INFO_REQUIRED = ("fps", "features")  # what every reader of either version needs from info.json
TOLERANCE_S = 1e-4  # LeRobot's tolerance_s: a frame's timestamp may differ from its index / fps by this much


def require_version(root: str, expected: str) -> dict:
    """Read info.json and check `codebase_version`; the error says which command converts the dataset."""
    info = read_info(root)
    found = info.get("codebase_version")
    if found != expected:
        hint = ""
        if expected == paths.V30 and found == paths.V21:
            hint = f"; convert it first: dlbench convert run {root} <destination>"
        elif expected == paths.V21 and found == paths.V30:
            hint = "; it is already v3.0: use it as it is (dlbench validate checks it), nothing to convert"
        raise UserError(
            f"{paths.join(str(root), paths.INFO_PATH)}: codebase_version is {found!r}, expected {expected!r}{hint}"
        )
    missing = [k for k in INFO_REQUIRED if k not in info]
    if missing or not isinstance(info["features"], dict):
        what = f"has no {', '.join(missing)}" if missing else "has features that are not a map"
        raise UserError(
            f"{paths.join(str(root), paths.INFO_PATH)}: {what}; the file is damaged: restore it from the dataset's "
            f"source"
        )
    return info


def video_keys(info: dict) -> list[str]:
    """Camera keys (features of dtype video), sorted."""
    return sorted(k for k, ft in info["features"].items() if ft.get("dtype") == "video")


def image_keys(info: dict) -> list[str]:
    """Cameras stored as images in the data files (features of dtype image), sorted."""
    return sorted(k for k, ft in info["features"].items() if ft.get("dtype") == "image")


def is_depth_map(feature: dict) -> bool:
    """LeRobot's test for a depth-map feature (`LeRobotDatasetMetadata.depth_keys`): video or images."""
    info, video_info = feature.get("info") or {}, feature.get("video_info") or {}
    return bool(info.get("is_depth_map") or info.get("video.is_depth_map") or video_info.get("video.is_depth_map"))


def v21_info_to_v30(info: dict, data_files_size_in_mb: int, video_files_size_in_mb: int) -> dict:
    """The v3.0 info.json of a converted v2.1 dataset, as LeRobot's converter writes it."""
    new = {k: v for k, v in info.items() if k not in ("total_chunks", "total_videos")}
    new["codebase_version"] = paths.V30
    new["data_files_size_in_mb"] = data_files_size_in_mb
    new["video_files_size_in_mb"] = video_files_size_in_mb
    new["data_path"] = paths.V30_DATA_PATH
    new["video_path"] = paths.V30_VIDEO_PATH if info.get("video_path") is not None else None
    new["fps"] = int(info["fps"])
    new["features"] = {
        k: (dict(ft) if ft.get("dtype") == "video" else {**ft, "fps": new["fps"]}) for k, ft in info["features"].items()
    }
    return new


# ---------------------------------------------------------------------------------------------------- v2.1
def iter_episodes_v21(root: str) -> Iterator[dict]:
    return iter_jsonl(root, paths.EPISODES_JSONL_PATH)


def iter_episodes_stats_v21(root: str) -> Iterator[dict]:
    return iter_jsonl(root, paths.EPISODES_STATS_JSONL_PATH)


def read_tasks_v21(root: str) -> list[str]:
    """Task strings indexed by task_index."""
    rows = sorted(iter_jsonl(root, paths.TASKS_JSONL_PATH), key=lambda r: r["task_index"])
    if [r["task_index"] for r in rows] != list(range(len(rows))):
        raise UserError(f"{paths.join(str(root), paths.TASKS_JSONL_PATH)}: task_index values are not 0..N-1")
    return [r["task"] for r in rows]


def write_v21_meta(
    root: str | Path, info: dict, episodes: Iterable[dict], tasks: list[str], episodes_stats: Iterable[dict]
) -> None:
    root = Path(root)
    write_info(root, info)
    atomic.write_jsonl(root / paths.EPISODES_JSONL_PATH, (to_jsonable(e) for e in episodes))
    atomic.write_jsonl(root / paths.TASKS_JSONL_PATH, ({"task_index": i, "task": t} for i, t in enumerate(tasks)))
    atomic.write_jsonl(root / paths.EPISODES_STATS_JSONL_PATH, (to_jsonable(s) for s in episodes_stats))


# ---------------------------------------------------------------------------------------------------- v3.0
# pyarrow imports pandas (~0.35 s) the first time `pa.array` converts Python or numpy values; the builders below
# make arrays and tables another way, which keeps pandas out of the converter entirely.
def int64_array(values: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def large_string_array(values: list[str]) -> pa.Array:
    data = [v.encode() for v in values]
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in data], dtype=np.int64)]).astype(np.int64)
    return pa.Array.from_buffers(
        pa.large_string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
    )


def table_from_rows(rows: list[dict], schema: pa.Schema | None = None) -> pa.Table:
    """`pa.Table.from_pylist(rows, schema)` through pyarrow's JSON reader (same types, no pandas import)."""
    from pyarrow import json as pa_json

    try:
        text = "\n".join(json.dumps(r, allow_nan=False) for r in rows).encode()
    except ValueError:  # NaN or infinity (say, in stats): JSON cannot carry them
        return pa.Table.from_pylist(rows, schema=schema)
    options = pa_json.ParseOptions(explicit_schema=schema) if schema is not None else None
    return pa_json.read_json(pa.BufferReader(text), parse_options=options).select(list(rows[0]))


def _pandas_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pandas")
    except PackageNotFoundError:
        return "3.0.0"


def tasks_table_v30(tasks: list[str]) -> pa.Table:
    """meta/tasks.parquet's table as LeRobot writes it: a pandas frame indexed by the task string (index name
    `task`), i.e. what `pa.Table.from_pandas` makes of it, pandas metadata included, built without pandas."""
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "str",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {"name": "task", "field_name": "task", "pandas_type": "object", "numpy_type": "str", "metadata": None},
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": _pandas_version(),
    }
    table = pa.Table.from_arrays(
        [int64_array(np.arange(len(tasks))), large_string_array(tasks)], names=["task_index", "task"]
    )
    return table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)})


def write_tasks_v30(root: str | Path, tasks: list[str]) -> None:
    with atomic.file(Path(root) / paths.TASKS_PARQUET_PATH) as tmp:
        pq.write_table(tasks_table_v30(tasks), tmp)


def read_tasks_v30(root: str) -> list[str]:
    """Task strings indexed by task_index (accepts the early unnamed-index files too)."""
    table = read_dataset_parquet(root, paths.TASKS_PARQUET_PATH)  # plain pyarrow: pandas costs ~0.45 s to import
    names = table.column_names
    column = "task" if "task" in names else next((n for n in names if n.startswith("__index_level_")), None)
    if column is None or "task_index" not in names:
        raise UserError(f"{paths.join(root, paths.TASKS_PARQUET_PATH)}: no task or task_index column")
    pairs = sorted(zip(table.column("task_index").to_pylist(), table.column(column).to_pylist()))
    return [str(task) for _, task in pairs]


def write_stats(root: str | Path, stats: dict) -> None:
    atomic.write_json(Path(root) / paths.STATS_PATH, to_jsonable(stats), indent=4)


def read_stats(root: str) -> dict:
    return read_json(root, paths.STATS_PATH)


def flatten_stats(stats: dict, plain: bool = False) -> dict[str, Any]:
    """{feature: {stat: value}} -> {"stats/<feature>/<stat>": value} (the meta/episodes column names).

    `plain`: the values are already lists and numbers (parsed JSON), so they are used as they are."""
    convert = (lambda v: v) if plain else to_jsonable
    return {f"stats/{feat}/{name}": convert(v) for feat, d in stats.items() for name, v in d.items()}


def episodes_files_v30(root: str) -> list[str]:
    """Relative paths of the meta/episodes parquet files, in (chunk, file) order."""
    import fsspec

    fs, base = fsspec.core.url_to_fs(paths.join(str(root), "meta/episodes"))
    found = sorted(fs.glob(base.rstrip("/") + "/chunk-*/file-*.parquet"))
    if not found:
        raise UserError(f"{paths.join(str(root), 'meta/episodes')}: no episode metadata files; is this a v3.0 dataset?")
    return [f"meta/episodes/{Path(p).parent.name}/{Path(p).name}" for p in found]


def read_episodes_v30(root: str, columns: list[str] | None = None) -> pa.Table:
    """All meta/episodes rows (one per episode) in episode order, optionally projected to `columns`."""
    tables = [read_dataset_parquet(root, rel, columns) for rel in episodes_files_v30(root)]
    table = pa.concat_tables(tables)
    return table.sort_by("episode_index") if "episode_index" in table.column_names else table


def read_parquet(source, columns: list[str] | None = None, memory_map: bool = False) -> pa.Table:
    """A parquet file (a path or an open file) read whole, or `columns` of it. `pq.read_table` goes through the
    dataset scanner, which costs ~100 us and tens of KB per row group: 6x the time and 3x the memory of this on a
    LeRobot data file, which holds one row group per episode."""
    return pq.ParquetFile(source, memory_map=memory_map).read(columns=columns)


def read_dataset_parquet(root: str, relpath: str, columns: list[str] | None = None) -> pa.Table:
    """A parquet file of a dataset read whole (or `columns` of it); a damaged or truncated file is a `UserError`
    naming it."""
    url = paths.join(str(root), relpath)
    with open_file(root, relpath) as f:
        try:
            return read_parquet(f, columns)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise no_range_requests(url, e) or UserError(
                f"{url}: cannot read parquet ({e}); the file is damaged or not parquet: restore it from the "
                f"dataset's source"
            ) from None


def write_parquet(path: str | Path, table: pa.Table, **kwargs) -> None:
    with atomic.file(path) as tmp:
        pq.write_table(table, tmp, **kwargs)


# ---------------------------------------------------------------------------------------------------- stats
def aggregate_stats(stats_list: Iterable[dict]) -> dict:
    """Combine per-episode stats into dataset stats: count-weighted mean, parallel variance, min of min, max of max.

    Streams over `stats_list` keeping only running sums, so memory does not grow with the number of episodes.
    """
    acc: dict[str, dict[str, Any]] = {}
    for stats in stats_list:
        for feat, s in stats.items():
            n = float(np.asarray(s["count"]).reshape(-1)[0])
            mean, std = np.asarray(s["mean"], dtype=np.float64), np.asarray(s["std"], dtype=np.float64)
            a = acc.setdefault(feat, {"n": 0.0, "sum": 0.0, "sumsq": 0.0, "min": None, "max": None})
            a["n"] += n
            a["sum"] = a["sum"] + mean * n
            a["sumsq"] = a["sumsq"] + (std**2 + mean**2) * n
            mn, mx = np.asarray(s["min"], dtype=np.float64), np.asarray(s["max"], dtype=np.float64)
            a["min"] = mn if a["min"] is None else np.minimum(a["min"], mn)
            a["max"] = mx if a["max"] is None else np.maximum(a["max"], mx)
    out = {}
    for feat, a in acc.items():
        mean = a["sum"] / a["n"]
        var = np.maximum(a["sumsq"] / a["n"] - mean**2, 0.0)
        out[feat] = {
            "min": a["min"].tolist(),
            "max": a["max"].tolist(),
            "mean": mean.tolist(),
            "std": np.sqrt(var).tolist(),
            "count": [int(a["n"])],
        }
    return out
