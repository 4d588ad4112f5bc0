"""Writing a synthetic v2.1 dataset: parquet, videos, stats and metadata per episode, in parallel (`synthesize`)."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa

from .. import atomic
from ..errors import UserError, needs_extra
from ..format import meta, paths
from .content import render_frames
from .encode import check_encoder, encode_video
from .spec import CODECS, SynthConfig, camera_keys, episode_lengths


def _features(cfg: SynthConfig) -> dict:
    """info.json's features: the state and action vectors, one video per camera, and the index columns."""
    feats = {
        "observation.state": {
            "dtype": "float32",
            "shape": [cfg.state_dim],
            "names": [f"joint_{i}" for i in range(cfg.state_dim)],
        },
        "action": {
            "dtype": "float32",
            "shape": [cfg.action_dim],
            "names": [f"joint_{i}" for i in range(cfg.action_dim)],
        },
    }
    for cam in sorted(cfg.cameras, key=lambda c: c.key):
        feats[cam.key] = {
            "dtype": "video",
            "shape": [cam.height, cam.width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.fps": float(cfg.fps),
                "video.height": cam.height,
                "video.width": cam.width,
                "video.channels": 3,
                "video.codec": CODECS[cfg.codec].name,
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "has_audio": False,
            },
        }
    for name, dtype in (
        ("timestamp", "float32"),
        ("frame_index", "int64"),
        ("episode_index", "int64"),
        ("index", "int64"),
        ("task_index", "int64"),
    ):
        feats[name] = {"dtype": dtype, "shape": [1], "names": None}
    return feats


def _arrow_schema(cfg: SynthConfig) -> pa.Schema:
    """The parquet schema with Hugging Face `datasets` features in its metadata, as LeRobot writes it."""
    try:
        from datasets import Features, List, Value
    except ImportError as e:  # only the workflow extra installs it
        raise needs_extra("datasets") from e

    return Features(
        {
            "observation.state": List(Value("float32"), length=cfg.state_dim),
            "action": List(Value("float32"), length=cfg.action_dim),
            "timestamp": Value("float32"),
            "frame_index": Value("int64"),
            "episode_index": Value("int64"),
            "index": Value("int64"),
            "task_index": Value("int64"),
        }
    ).arrow_schema


def _vector_stats(x: np.ndarray) -> dict:
    """min/max/mean/std/count over axis 0 of (N, D)."""
    x = x.astype(np.float64)
    return {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0), "count": [len(x)]}


def _image_stats(frames_thwc: np.ndarray) -> dict:
    """Per-channel stats of frames scaled to [0, 1], shaped (3, 1, 1) as LeRobot stores them."""
    f = frames_thwc.reshape(-1, 3).astype(np.float64) / 255.0
    shape = lambda v: np.asarray(v).reshape(3, 1, 1)  # noqa: E731
    return {
        "min": shape(f.min(0)),
        "max": shape(f.max(0)),
        "mean": shape(f.mean(0)),
        "std": shape(f.std(0)),
        "count": [len(frames_thwc)],
    }


def _write_episode(cfg: SynthConfig, root: Path, episode: int, length: int, start_index: int, task_index: int) -> dict:
    """Write one episode's parquet and videos; return its stats (JSON-ready)."""
    rng = np.random.default_rng([cfg.seed, episode])
    state = np.cumsum(rng.normal(0, 0.05, size=(length, cfg.state_dim)), axis=0).astype(np.float32)
    action = (
        np.roll(state, -1, axis=0)[:, : cfg.action_dim]
        if cfg.action_dim <= cfg.state_dim
        else rng.normal(0, 0.05, size=(length, cfg.action_dim))
    ).astype(np.float32)
    action += rng.normal(0, 0.01, size=action.shape).astype(np.float32)
    frame_index = np.arange(length, dtype=np.int64)
    columns = {
        "observation.state": state,
        "action": action,
        "timestamp": (frame_index / cfg.fps).astype(np.float32),
        "frame_index": frame_index,
        "episode_index": np.full(length, episode, np.int64),
        "index": start_index + frame_index,
        "task_index": np.full(length, task_index, np.int64),
    }
    schema = _arrow_schema(cfg)
    arrays = []
    for fld in schema:
        col = columns[fld.name]
        if col.ndim == 2:
            arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(col.reshape(-1)), col.shape[1]))
        else:
            arrays.append(pa.array(col))
    table = pa.Table.from_arrays(arrays, schema=schema)
    meta.write_parquet(root / paths.v21_data_path(episode, cfg.chunks_size), table)

    stats = {k: _vector_stats(columns[k]) for k in ("observation.state", "action")}
    for k in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        stats[k] = _vector_stats(columns[k].reshape(-1, 1))
    for cam_index, key in enumerate(camera_keys(cfg)):
        cam = next(c for c in cfg.cameras if c.key == key)
        frames = render_frames(cam, cam_index, episode, length, cfg.noise, content=cfg.content, seed=cfg.seed)
        encode_video(frames, root / paths.v21_video_path(episode, key, cfg.chunks_size), cfg)
        stats[key] = _image_stats(frames)
    return meta.to_jsonable(stats)


def _episode_job(args):
    return _write_episode(*args)


def synthesize(
    cfg: SynthConfig, out_dir: str | Path, overwrite: bool = False, workers: int | None = None, progress: bool = True
) -> Path:
    """Write a v2.1 dataset to `out_dir`, published with one rename when complete.

    Refuses a non-empty `out_dir` unless `overwrite`; with `overwrite` the old content is replaced only after the
    new dataset is complete.
    """
    cfg.validate()
    _arrow_schema(cfg)  # fails before any work where the `datasets` package is missing
    check_encoder(cfg.codec)
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not overwrite:
        raise UserError(f"{out_dir} is not empty; choose an empty directory or pass --overwrite")
    lengths = episode_lengths(cfg)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    task_rng = np.random.default_rng([cfg.seed, 1_000_003])
    task_of = task_rng.integers(0, cfg.tasks, size=cfg.episodes)
    tasks = [f"synthetic task {i}: move the block to target {i}" for i in range(cfg.tasks)]
    info = {
        "codebase_version": paths.V21,
        "robot_type": cfg.robot_type,
        "total_episodes": cfg.episodes,
        "total_frames": int(lengths.sum()),
        "total_tasks": cfg.tasks,
        "total_videos": cfg.episodes * len(cfg.cameras),
        "total_chunks": (cfg.episodes - 1) // cfg.chunks_size + 1,
        "chunks_size": cfg.chunks_size,
        "fps": cfg.fps,
        "splits": {"train": f"0:{cfg.episodes}"},
        "data_path": paths.V21_DATA_PATH,
        "video_path": paths.V21_VIDEO_PATH,
        "features": _features(cfg),
    }
    # no more processes than cores this process may use (Snakemake's `threads` can exceed them): a spawned worker
    # costs seconds of imports (torch, torchcodec) before its first episode, which only a core of its own pays back
    cores = len(os.sched_getaffinity(0))
    workers = min(workers or cores, cores)
    with atomic.directory(out_dir, replace=overwrite) as tmp:
        jobs = [(cfg, tmp, ep, int(lengths[ep]), int(starts[ep]), int(task_of[ep])) for ep in range(cfg.episodes)]
        if workers > 1 and cfg.episodes > 1:
            # spawn: FFmpeg encoder threads started in this process (the probe) do not survive a fork
            with ProcessPoolExecutor(
                min(workers, cfg.episodes), mp_context=multiprocessing.get_context("spawn")
            ) as pool:
                stats = list(_progress(pool.map(_episode_job, jobs), cfg.episodes, progress))
        else:
            stats = list(_progress(map(_episode_job, jobs), cfg.episodes, progress))
        episodes = [
            {"episode_index": ep, "tasks": [tasks[task_of[ep]]], "length": int(lengths[ep])}
            for ep in range(cfg.episodes)
        ]
        ep_stats = [{"episode_index": ep, "stats": s} for ep, s in enumerate(stats)]
        meta.write_v21_meta(tmp, info, episodes, tasks, ep_stats)
    return out_dir


def _progress(it, total, enabled):
    if not enabled:
        return it
    from tqdm import tqdm

    return tqdm(it, total=total, desc="synth episodes", unit="ep", mininterval=1.0)
