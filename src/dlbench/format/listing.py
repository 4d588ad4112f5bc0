"""Which files a dataset holds, with their sizes, local or remote: one listing per folder where the filesystem can
list (a local disk, S3, the Hub), one stat per file where it cannot (plain HTTP has no directory listing)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from . import paths


def list_files(root: str, folder: str) -> dict[str, int] | None:
    """Every file under `folder` of the dataset at `root`, as {path relative to the root: size in bytes}; a missing
    folder lists as empty. None where the filesystem cannot list directories (plain HTTP) or names what it lists
    other than `root`/...: there, orphan files cannot be found, and sizes come from `file_sizes`."""
    if not paths.is_remote(root):  # local: no fsspec import, and no pathlib (4x the time of plain strings)
        return dict(_scan(paths.local_path(root).rstrip("/") + "/", folder))
    import fsspec

    fs, path = fsspec.core.url_to_fs(paths.join(root, folder))
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if {"http", "https"} & set(protocols):
        return None
    prefix = path.rstrip("/").removesuffix(folder).rstrip("/") + "/"
    try:
        found = fs.find(path, detail=True)
    except FileNotFoundError:
        return {}
    if any(not p.startswith(prefix) for p in found):
        return None
    return {p.removeprefix(prefix): int(d.get("size") or 0) for p, d in found.items() if d.get("type") != "directory"}


def _scan(base: str, rel: str) -> Iterator[tuple[str, int]]:
    """(path relative to `base`, size) of every file under base/rel."""
    try:
        entries = list(os.scandir(base + rel))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if entry.is_dir():
            yield from _scan(base, f"{rel}/{entry.name}")
        elif entry.is_file():
            yield f"{rel}/{entry.name}", entry.stat().st_size


def file_sizes(root: str, rels: Iterable[str], listing: dict[str, int] | None) -> dict[str, int | None]:
    """The size in bytes of each file `rels` names (relative to `root`), None for a missing one: looked up in
    `listing` (from `list_files` of the files' folder), or stat'ed one by one where there is none."""
    if listing is not None:
        return {rel: listing.get(rel) for rel in rels}
    if not paths.is_remote(root):
        base = Path(paths.local_path(root))
        return {rel: (base / rel).stat().st_size if (base / rel).is_file() else None for rel in rels}
    import fsspec

    fs, _ = fsspec.core.url_to_fs(root)
    sizes: dict[str, int | None] = {}
    for rel in rels:
        try:
            sizes[rel] = int(fs.info(fsspec.core.url_to_fs(paths.join(root, rel))[1]).get("size") or 0)
        except FileNotFoundError:
            sizes[rel] = None
    return sizes
