"""Atomic local writes: a killed process never leaves a file that looks complete.

Every output is written to a hidden temporary name in the destination directory and renamed into place, so a
reader (or Snakemake) sees either the old state or the complete new file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import UserError


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once, at import: umask is process-wide and threads may be creating files later


@contextlib.contextmanager
def _creating(path: Path) -> Iterator[None]:
    """The OS refusing to create `path`'s directory or its temporary sibling (a file in the way, no permission, a
    read-only or full disk) is the user's to fix: a `UserError` naming the path."""
    try:
        yield
    except OSError as e:
        raise UserError(f"{path}: cannot write here ({e.strerror or e}); choose a writable location") from None


def make_dir(path: str | os.PathLike) -> Path:
    """Create directory `path` (and its parents) if missing; `UserError` naming it if that cannot be done."""
    path = Path(path)
    with _creating(path):
        path.mkdir(parents=True, exist_ok=True)
    return path


def tmp_path_for(path: str | os.PathLike) -> Path:
    """A unique temporary sibling of `path` (same directory, so the final rename is atomic)."""
    path = Path(path)
    with _creating(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600: outputs get the usual mode, readable on shared storage
    os.close(fd)
    return Path(tmp)


@contextlib.contextmanager
def file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path to write; on success it is renamed to `path`, on error it is removed."""
    tmp = tmp_path_for(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with file(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    write_text(path, json.dumps(obj, indent=indent) + "\n")


def write_jsonl(path: str | os.PathLike, rows) -> None:
    with file(path) as tmp, open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


@contextlib.contextmanager
def directory(path: str | os.PathLike, replace: bool = False) -> Iterator[Path]:
    """Build a directory under a temporary name and publish it at `path` with a rename.

    Readers see the old `path` (or none) until the new one is complete. An existing non-empty `path` is replaced
    only when `replace` is true (it is moved aside first and deleted after the new one is in place); otherwise
    `FileExistsError` is raised and the new content is discarded.
    """
    path = Path(path)
    with _creating(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    tmp.chmod(0o777 & ~_UMASK)  # mkdtemp makes 0700
    try:
        yield tmp
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
        if path.exists():
            if not replace:
                raise FileExistsError(f"{path} exists and is not empty")
            trash = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            os.rename(path, trash / path.name)
            os.rename(tmp, path)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
