"""File names and path templates of LeRobot datasets, v2.1 and v3.0.

This module is the only place in dlbench that knows how files inside a dataset are named. Everything else asks
it for a relative path (a POSIX string relative to the dataset root) and joins it to a root with `join`.
"""

from __future__ import annotations


def is_remote(url) -> bool:
    """A URL read through fsspec (s3://, hf://, https://...); plain paths and file:// URLs are local."""
    return "://" in str(url) and not str(url).startswith("file://")


def local_path(url) -> str:
    """A local dataset's path: `url` without its file:// prefix."""
    return str(url).removeprefix("file://")


V21 = "v2.1"
V30 = "v3.0"

INFO_PATH = "meta/info.json"

# v2.1 (one file per episode; chunks count *episodes*)
EPISODES_JSONL_PATH = "meta/episodes.jsonl"
TASKS_JSONL_PATH = "meta/tasks.jsonl"
EPISODES_STATS_JSONL_PATH = "meta/episodes_stats.jsonl"
V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"

# v3.0 (many episodes per file; chunks count *files*)
CHUNK_FILE_PATTERN = "chunk-{chunk_index:03d}/file-{file_index:03d}"
V30_DATA_PATH = "data/" + CHUNK_FILE_PATTERN + ".parquet"
V30_VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE_PATTERN + ".mp4"
V30_EPISODES_PATH = "meta/episodes/" + CHUNK_FILE_PATTERN + ".parquet"
TASKS_PARQUET_PATH = "meta/tasks.parquet"
STATS_PATH = "meta/stats.json"

DEFAULT_CHUNK_SIZE = 1000
DEFAULT_DATA_FILE_SIZE_IN_MB = 100
DEFAULT_VIDEO_FILE_SIZE_IN_MB = 200


def join(root: str, relpath: str) -> str:
    """Join a dataset root (local path or fsspec URL) and a relative POSIX path."""
    return root.rstrip("/") + "/" + relpath


def v21_data_path(episode_index: int, chunks_size: int) -> str:
    return V21_DATA_PATH.format(episode_chunk=episode_index // chunks_size, episode_index=episode_index)


def v21_video_path(episode_index: int, video_key: str, chunks_size: int) -> str:
    return V21_VIDEO_PATH.format(
        episode_chunk=episode_index // chunks_size, video_key=video_key, episode_index=episode_index
    )


def v30_data_path(chunk_index: int, file_index: int) -> str:
    return V30_DATA_PATH.format(chunk_index=chunk_index, file_index=file_index)


def v30_video_path(video_key: str, chunk_index: int, file_index: int) -> str:
    return V30_VIDEO_PATH.format(video_key=video_key, chunk_index=chunk_index, file_index=file_index)


def v30_episodes_path(chunk_index: int, file_index: int) -> str:
    return V30_EPISODES_PATH.format(chunk_index=chunk_index, file_index=file_index)


def chunk_file_of(ordinal: int, chunks_size: int) -> tuple[int, int]:
    """The (chunk_index, file_index) of the `ordinal`-th file of one stream (0-based), v3.0 numbering."""
    return ordinal // chunks_size, ordinal % chunks_size
