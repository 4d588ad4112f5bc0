"""Aggregate rank records into `summary.csv`: one row per run (a scenario and its run id).

Per-node figures are the mean over ranks; totals are the sum over ranks. A run passes when its per-node decoded
frames/s reaches the target of its mode.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pandas as pd

from . import io
from .bench import record as recordmod
from .errors import UserError

DEFAULT_TARGETS = {"single": 120.0, "sarm": 320.0}  # frames/s/node
REQUIRED_METRICS = (
    "frames_per_s_node", "samples_per_s", "first_batch_latency_s", "latency_p50_ms", "latency_p95_ms",
    "latency_p99_ms", "peak_rss_mb", "cache_hit_rate", "frames_verified", "frames_wrong",
)
RUN_KEYS = ("scenario", "source", "loader", "mode", "batch_size", "num_workers", "decode_device")


def run_id(config: dict) -> str:
    """The run id of a configuration: loader, mode, batch size, workers and decode device."""
    return (f"{config['loader']}-{config['mode']}-b{config['batch_size']}-w{config['num_workers']}-"
            f"{config['decode_device']}")


def load_record(path: str | Path) -> dict:
    """Read a rank record and check it has what aggregation needs; errors name the file."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: rank record missing; rerun the bench job that writes it")
    try:
        rec = recordmod.read(path)
    except ValueError as e:
        raise UserError(f"{path}: not a valid record ({e}); delete it and rerun its bench job") from None
    missing = [k for k in ("config", "metrics", "rank", "world_size") if k not in rec]
    if rec.get("status", "ok") == "ok":
        missing += [f"metrics.{k}" for k in REQUIRED_METRICS if k not in rec.get("metrics", {})]
    if missing:
        raise UserError(f"{path}: record lacks {missing}; delete it and rerun its bench job")
    return rec


def rank_files(path: str | Path) -> list[Path]:
    """The rank records of a run directory (as listed by its run.json), or `path` itself if it is a record."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    manifest = path / "run.json"
    if not manifest.exists():
        raise UserError(f"{manifest}: missing, so the run did not finish; rerun its bench job")
    return [path / name for name in json.loads(manifest.read_text())["ranks"]]


def aggregate(paths: list[str | Path], out: str | Path, targets: dict | None = None) -> pd.DataFrame:
    """One summary row per run from run directories (or rank record files); writes `out` (CSV)."""
    targets = {**DEFAULT_TARGETS, **(targets or {})}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for p in paths:
        for f in rank_files(p):
            rec = load_record(f)
            groups[(rec["config"]["scenario"], run_id(rec["config"]))].append(rec)
    rows = []
    for (scenario, rid), recs in sorted(groups.items()):
        cfg = recs[0]["config"]
        world = recs[0]["world_size"]
        ok = [r for r in recs if r.get("status", "ok") == "ok"]
        statuses = {r.get("status", "ok") for r in recs}
        status = "ok" if len(ok) == world else ("skipped" if statuses == {"skipped"} else "incomplete")
        row = {"scenario": scenario, "run_id": rid, **{k: cfg.get(k) for k in RUN_KEYS[1:]},
               "world_size": world, "ranks": len(recs), "status": status,
               "reason": "; ".join(sorted({r.get("reason", "") for r in recs if r.get("reason")}))}
        if ok:
            m = pd.DataFrame([r["metrics"] for r in ok]).drop(columns=["image_shape"], errors="ignore")
            m = m.apply(pd.to_numeric, errors="coerce")  # None (a loader without cache counters) -> NaN
            row.update({
                "frames_per_s_node": m["frames_per_s_node"].mean(),
                "samples_per_s_node": m["samples_per_s"].mean(),
                "frames_per_s_total": m["frames_per_s_node"].sum(),
                "samples_per_s_total": m["samples_per_s"].sum(),
                "first_batch_latency_s": m["first_batch_latency_s"].max(),
                "latency_p50_ms": m["latency_p50_ms"].mean(),
                "latency_p95_ms": m["latency_p95_ms"].mean(),
                "latency_p99_ms": m["latency_p99_ms"].max(),
                "peak_rss_mb": m["peak_rss_mb"].max(),
                "cache_hit_rate": m["cache_hit_rate"].mean(),
                "frames_verified": int(m["frames_verified"].sum()),
                "frames_wrong": int(m["frames_wrong"].sum()),
            })
        target = targets.get(cfg.get("mode"))
        row["target_frames_per_s_node"] = target
        row["pass"] = bool(status == "ok" and target is not None and row["frames_per_s_node"] >= target
                           and row["frames_wrong"] == 0)
        rows.append(row)
    df = pd.DataFrame(rows)
    with io.atomic_path(out) as tmp:
        df.to_csv(tmp, index=False)
    return df
