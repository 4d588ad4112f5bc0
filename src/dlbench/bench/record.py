"""Result records: the resolved configuration, versions, host, rank and metrics of one benchmark rank.

The JSON record is the source of truth; the CSV is its flat view (one row: `config.*`, `versions.*`, `metrics.*`).
"""

from __future__ import annotations

import csv
import importlib.metadata
import io as _io
import json
import os
import platform
import socket
import subprocess
import time
from functools import cache
from pathlib import Path

from .. import __version__, atomic

SCHEMA_VERSION = 2  # 2: repeats (windows), PSS, batch intervals, normalized shuffle


@cache
def versions() -> dict:
    import torch
    import torchcodec

    ffmpeg = ""
    try:
        out = subprocess.run(["ffmpeg", "-hide_banner", "-version"], capture_output=True, text=True, timeout=10)
        ffmpeg = out.stdout.split()[2] if out.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired, IndexError):
        pass
    out = {
        "dlbench": __version__,
        "torch": torch.__version__,
        "torchcodec": torchcodec.__version__,
        "ffmpeg": ffmpeg,
        "python": platform.python_version(),
        "cores": len(os.sched_getaffinity(0)),  # what this rank may run on (`dlbench compare` names a difference)
    }
    try:  # the peer environment's LeRobot, for runs of its loaders
        out["lerobot"] = importlib.metadata.version("lerobot")
    except importlib.metadata.PackageNotFoundError:
        pass
    return out


def make_record(config: dict, metrics: dict, status: str = "ok", reason: str = "") -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "reason": reason,
        "config": config,
        "versions": versions(),
        "host": socket.gethostname(),
        "rank": config.get("rank", 0),
        "world_size": config.get("ranks", 1),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "metrics": metrics,
    }


BULKY = ("shuffle_batch_means",)  # in the JSON record only: each batch's projected mean, for pooling the ranks


def flatten(record: dict) -> dict:
    flat = {k: v for k, v in record.items() if not isinstance(v, dict)}
    for section in ("config", "versions", "metrics"):
        for k, v in record.get(section, {}).items():
            if k in BULKY:
                continue
            flat[f"{section}.{k}"] = json.dumps(v) if isinstance(v, (dict, list)) else v
    return flat


def write(record: dict, json_path: str | Path) -> None:
    """Write the record as JSON and, beside it, as a one-row CSV (same stem); both atomically, CSV first."""
    json_path = Path(json_path)
    flat = flatten(record)
    buf = _io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(flat))
    writer.writeheader()
    writer.writerow(flat)
    atomic.write_text(json_path.with_suffix(".csv"), buf.getvalue())
    atomic.write_json(json_path, record)


def read(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())
