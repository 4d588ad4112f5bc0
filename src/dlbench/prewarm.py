"""The prewarm check: does a remote source behave warm (near the compute) before we measure it?

Storage buckets have no API that says whether prewarming took effect, so this measures it. It samples `files`
files spread evenly over the dataset (parquet and mp4), and for each measures time to first byte (a 1-byte range
read) and the throughput of a range read of up to `range_mb` MB, first read and then a repeated read. Throughput
is net of that file's time to first byte: latency is judged by TTFB alone, so small files (whose reads are mostly
the round trip) do not make a near, fast store look slow. The verdict is "warm" when the median first-read TTFB is
at most `ttfb_p50_ms_max` and the median first-read throughput at least `throughput_mbps_min` (megabits/s); the
report keeps every measurement (gross throughput too) as evidence.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import fsspec
import numpy as np

from . import atomic
from .errors import UserError
from .sources import _friendly


def sample_files(fs, root: str, files: int) -> list[str]:
    """Up to `files` paths spread evenly over the dataset's parquet and mp4 files (deterministic)."""
    found = sorted(p for p in fs.find(root) if p.endswith((".parquet", ".mp4")))
    if not found:
        raise FileNotFoundError(f"no parquet or mp4 files under {root}")
    picks = np.unique(np.linspace(0, len(found) - 1, num=min(files, len(found))).round().astype(int))
    return [found[i] for i in picks]


def _measure(fs, path: str, range_bytes: int) -> dict:
    fs.invalidate_cache()  # metadata caches would hide the round trip
    t0 = time.perf_counter()
    fs.cat_file(path, start=0, end=1)
    ttfb = time.perf_counter() - t0
    size = fs.size(path)
    n = min(size, range_bytes)
    t0 = time.perf_counter()
    data = fs.cat_file(path, start=0, end=n)
    secs = time.perf_counter() - t0
    net = max(secs - ttfb, 0.1 * secs)  # the transfer after the round trip; never less than a tenth of the read
    return {
        "ttfb_ms": ttfb * 1000,
        "bytes": len(data),
        "seconds": secs,
        "mbps": len(data) * 8 / 1e6 / net,
        "gross_mbps": len(data) * 8 / 1e6 / secs,
    }


def check(
    url: str, files: int = 8, range_mb: float = 4.0, ttfb_p50_ms_max: float = 50.0, throughput_mbps_min: float = 400.0
) -> dict:
    """Measure `url` (a dataset root) and return the report with its verdict."""
    if files < 1 or range_mb <= 0:
        raise UserError(f"prewarm check of {url}: files ({files}) must be at least 1 and range_mb ({range_mb}) above 0")
    t_start, start_unix = time.perf_counter(), time.time()
    try:
        fs, root = fsspec.core.url_to_fs(url)
        paths = sample_files(fs, root, files)
        rounds = {
            name: [dict(path=p, **_measure(fs, p, int(range_mb * 2**20))) for p in paths]
            for name in ("first", "repeat")
        }
    except Exception as e:
        raise _friendly(url, e) from None

    def summary(rows):
        ttfb = np.array([r["ttfb_ms"] for r in rows])
        mbps = np.array([r["mbps"] for r in rows])
        return {
            "ttfb_p50_ms": float(np.percentile(ttfb, 50)),
            "ttfb_p95_ms": float(np.percentile(ttfb, 95)),
            "throughput_mbps_p50": float(np.percentile(mbps, 50)),
        }

    first, repeat = summary(rounds["first"]), summary(rounds["repeat"])
    warm = first["ttfb_p50_ms"] <= ttfb_p50_ms_max and first["throughput_mbps_p50"] >= throughput_mbps_min
    return {
        "source": url,
        "verdict": "warm" if warm else "cold",
        "thresholds": {"ttfb_p50_ms_max": ttfb_p50_ms_max, "throughput_mbps_min": throughput_mbps_min},
        "first": first,
        "repeat": repeat,
        "files": len(rounds["first"]),
        "check_seconds": time.perf_counter() - t_start,
        "host": socket.gethostname(),  # the measuring window, to check that no other measurement overlapped it
        "window_start_unix": start_unix,
        "window_end_unix": time.time(),
        "evidence": rounds,
    }


def explain(report: dict) -> str:
    f, t = report["first"], report["thresholds"]
    return (
        f"{report['source']} measured {report['verdict']}: median first-byte {f['ttfb_p50_ms']:.1f} ms "
        f"(warm needs <= {t['ttfb_p50_ms_max']:g}), median throughput {f['throughput_mbps_p50']:.0f} Mbit/s "
        f"(warm needs >= {t['throughput_mbps_min']:g}) over {report['files']} files"
    )


def write(report: dict, out: str | Path) -> None:
    atomic.write_json(out, report)
