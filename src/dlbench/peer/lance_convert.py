"""Convert a v3.0 dataset to the Lance layout with lerobot-lancedb's own converter, timed (run in the peer
environment: `python -m dlbench.peer.lance_convert SRC DST [--record JSON] [--name NAME]`).

The copy is written beside DST under a temporary name and renamed into place when complete, so a killed conversion
leaves no DST that looks done. The record holds the seconds, the bytes and files in and out, and the host, as the
v2.1 -> v3.0 conversion's record does.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import socket
import sys
import time
from importlib.metadata import version
from pathlib import Path


def _tree(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def convert(src: Path, dst: Path) -> float:
    """lerobot-lancedb's `convert` of `src` into `dst` (which must not exist); its seconds."""
    from lerobot_lancedb.convert import convert as lance_convert

    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as said:  # its progress lines go to our log, after the timing
        lance_convert(tmp, root=src)
    seconds = time.perf_counter() - t0
    sys.stderr.write(said.getvalue())
    os.replace(tmp, dst)
    return seconds


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--record", type=Path, default=None)
    p.add_argument("--name", default=None)
    a = p.parse_args(argv)
    if not (a.src / "meta" / "info.json").is_file():
        sys.exit(f"{a.src}: not a LeRobot dataset (no meta/info.json); give the root of a v3.0 dataset")
    if a.dst.exists():
        sys.exit(f"{a.dst} exists; remove it to convert again")
    a.dst.parent.mkdir(parents=True, exist_ok=True)
    start_unix = time.time()
    seconds = convert(a.src, a.dst)
    info = json.loads((a.dst / "meta" / "info.json").read_text())
    files_in, bytes_in = _tree(a.src)
    files_out, bytes_out = _tree(a.dst)
    record = {
        "dataset": a.name or a.src.resolve().name,
        "src": str(a.src),
        "dst": str(a.dst),
        "converter": f"lerobot-lancedb {version('lerobot-lancedb')}",
        "seconds": seconds,
        "episodes": info["total_episodes"],
        "frames": info["total_frames"],
        "input_files": files_in,
        "input_bytes": bytes_in,
        "output_files": files_out,
        "output_bytes": bytes_out,
        "host": socket.gethostname(),
        "window_start_unix": start_unix,
        "window_end_unix": start_unix + seconds,
    }
    if a.record:
        from dlbench import atomic

        atomic.write_json(a.record, record)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
