"""Check a v2.1 source before its conversion is planned, so that a damaged source is refused before anything is
written rather than failing a worker halfway or converting into a v3.0 dataset that training trips over.

Checked: episode indices 0..N-1 in meta/episodes.jsonl; every episode's parquet file and camera videos exist and are
not empty; each parquet holds as many rows as the episode's length (its footer); each video is a whole MP4 that
declares at least that many frames (its box headers and moov, no decoding); no parquet under data/ and no video
under videos/ that no episode names (where the filesystem can list directories). All problems come back in one
`UserError`, one line each.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import UserError, no_range_requests
from ..format import listing, meta, mp4, paths

MAX_LISTED = 20
REMOTE_READERS = 16  # footers and moovs read at once from a remote source: each costs a round trip or two


def check_source(src: str, episodes: list[tuple[int, int]], cameras: list[str], chunks_size: int) -> dict[str, int]:
    """Check the v2.1 source at `src`, whose meta/episodes.jsonl lists `episodes` as (index, length) in index order;
    return the size in bytes of every file its episodes name, or raise `UserError` listing every problem."""
    problems = _index_problems(episodes)
    data = {paths.v21_data_path(e, chunks_size): (e, n) for e, n in episodes}
    videos = {paths.v21_video_path(e, cam, chunks_size): (e, n) for cam in cameras for e, n in episodes}
    files = {folder: listing.list_files(src, folder) for folder in ("data", "videos")}
    sizes = {**listing.file_sizes(src, data, files["data"]), **listing.file_sizes(src, videos, files["videos"])}
    problems += _presence_problems(sizes, {**data, **videos})
    problems += _orphan_problems(files["data"], data, ".parquet") + _orphan_problems(files["videos"], videos, ".mp4")
    whole = [rel for rel, size in sizes.items() if size]
    read = lambda rel: _content_problem(src, rel, *(data.get(rel) or videos[rel]))  # noqa: E731
    if paths.is_remote(src):
        with ThreadPoolExecutor(REMOTE_READERS) as pool:
            problems += [p for p in pool.map(read, whole) if p]
    else:
        problems += [p for p in map(read, whole) if p]
    if problems:
        more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise UserError(
            f"{src}: the v2.1 source has {len(problems)} problem(s); nothing was written. Restore the files, or "
            f"remove their episodes from meta/episodes.jsonl, then plan again:\n  "
            + "\n  ".join(problems[:MAX_LISTED])
            + more
        )
    return {rel: size for rel, size in sizes.items() if size is not None}


def _index_problems(episodes: list[tuple[int, int]]) -> list[str]:
    """meta/episodes.jsonl's episode indices listed twice (two episodes written under one index). Skipped indices
    are not a defect: episodes deleted from a recording are common, and the conversion renumbers them 0..N-1."""
    counts = Counter(e for e, _ in episodes)
    repeated = sorted(e for e, k in counts.items() if k > 1)
    if repeated:
        return [f"{paths.EPISODES_JSONL_PATH}: episode_index {_few(repeated)} listed more than once"]
    return []


def _presence_problems(sizes: dict[str, int | None], owners: dict[str, tuple[int, int]]) -> list[str]:
    """Files of listed episodes that are missing or empty."""
    problems = []
    for rel, size in sizes.items():
        if size is None:
            problems.append(f"{rel}: missing (episode {owners[rel][0]} of meta/episodes.jsonl)")
        elif size == 0:
            problems.append(f"{rel}: zero bytes (episode {owners[rel][0]})")
    return problems


def _orphan_problems(found: dict[str, int] | None, named: dict, suffix: str) -> list[str]:
    """Files under a folder that no listed episode names (none where the folder could not be listed)."""
    orphans = sorted(rel for rel in found or {} if rel.endswith(suffix) and rel not in named)
    if not orphans:
        return []
    return [f"{orphans[0]}{f' and {len(orphans) - 1} more' if len(orphans) > 1 else ''}: no episode of "
            f"meta/episodes.jsonl names it"]  # fmt: skip


def _content_problem(src: str, rel: str, episode: int, length: int) -> str | None:
    """A parquet file whose footer holds another row count than the episode's length, or a video that is not a
    whole MP4 or declares fewer frames than that."""
    try:
        with meta.open_file(src, rel) as fh:
            if rel.endswith(".parquet"):
                return _rows_problem(fh, rel, episode, length)
            return _frames_problem(fh, rel, episode, length)
    except ValueError as e:  # fsspec's HTTP file, where the server ignores range requests
        error = no_range_requests(paths.join(src, rel), e)
        if error is None:
            raise
        raise error from None


def _rows_problem(fh, rel: str, episode: int, length: int) -> str | None:
    try:
        rows = pq.ParquetFile(fh).metadata.num_rows
    except (pa.ArrowException, OSError) as e:
        return f"{rel}: not a readable parquet file ({str(e).splitlines()[0]})"
    return f"{rel}: {rows} rows, but episode {episode} has length {length}" if rows != length else None


def _frames_problem(fh, rel: str, episode: int, length: int) -> str | None:
    try:
        frames = mp4.declared_frames(fh, rel)
    except mp4.Damaged as e:
        return str(e)
    if frames is not None and frames < length:
        return f"{rel}: holds {frames} frames, but episode {episode} has length {length}"
    return None


def _few(values: list[int]) -> str:
    return ", ".join(map(str, values[:5])) + (f" and {len(values) - 5} more" if len(values) > 5 else "")
