"""Writing a synthetic v2.1 dataset: parquet, videos, stats and metadata per episode, in parallel (`synthesize`)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa

from .. import atomic
from ..errors import UserError, needs_extra
from ..format import meta, paths
from .content import PHASE_FRAMES, render_frames
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
    if cfg.content == "phases":  # the task's one trajectory over the phase, each episode a little off it
        shared = np.random.default_rng([cfg.seed, 0x57A7E]).normal(0, 0.05, size=(PHASE_FRAMES, cfg.state_dim))
        at = np.round(np.arange(length) * (PHASE_FRAMES - 1) / max(length - 1, 1)).astype(int)
        state = (np.cumsum(shared, axis=0)[at] + 0.1 * state / max(np.abs(state).max(), 1e-9)).astype(np.float32)
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
    cores = len(os.sched_getaffinity(0))
    with atomic.directory(out_dir, replace=overwrite) as tmp:
        jobs = [(cfg, tmp, ep, int(lengths[ep]), int(starts[ep]), int(task_of[ep])) for ep in range(cfg.episodes)]
        startup_cpu_s, t0 = time.process_time(), time.perf_counter()
        stats = [_episode_job(jobs[0])]
        first_s, first_cpu_s = time.perf_counter() - t0, time.process_time() - startup_cpu_s
        encoders = pool_size(workers or cores, cores, len(jobs) - 1, first_s, first_cpu_s, startup_cpu_s)
        logging.getLogger("dlbench").info(
            f"synth: first episode in {first_s:.1f} s ({first_cpu_s:.1f} s of CPU) after {startup_cpu_s:.1f} s of "
            f"CPU starting up: the other {len(jobs) - 1} in {encoders} process(es)"
        )
        bar = _progress(cfg.episodes, progress)
        stats += _encode(jobs[1:], encoders - 1, bar.update)
        bar.close()
        episodes = [
            {"episode_index": ep, "tasks": [tasks[task_of[ep]]], "length": int(lengths[ep])}
            for ep in range(cfg.episodes)
        ]
        ep_stats = [{"episode_index": ep, "stats": s} for ep, s in enumerate(stats)]
        meta.write_v21_meta(tmp, info, episodes, tasks, ep_stats)
    return out_dir


def pool_size(workers: int, cores: int, rest: int, episode_s: float, episode_cpu_s: float, startup_cpu_s: float) -> int:
    """Encoding processes (this one and those it spawns) for the `rest` episodes after the first, which took
    `episode_s` here and `episode_cpu_s` of CPU (more than its wall time where the encoder runs threads): none past
    the cores this process may use (Snakemake's `threads` can exceed them), and a pool only where it pays. Each
    spawned worker first pays what this process paid to get here (`startup_cpu_s`: imports of torch, torchcodec,
    pyarrow); W encoders then take the rest in the longer of rest x episode / W and what the cores give (every
    encoder's CPU over them), against rest x episode here (1: here alone)."""
    w = min(workers, cores, rest)
    if w < 2:
        return 1
    pooled = max(startup_cpu_s + rest * episode_s / w, ((w - 1) * startup_cpu_s + rest * episode_cpu_s) / cores)
    return w if pooled < rest * episode_s else 1


def _encode(jobs: list, spawned: int, done: Callable[[int], object]) -> list:
    """Each job's stats, in order: this process takes jobs from the end while `spawned` spawned processes take them
    from the front, each handed its next as it finishes one (so none idles while jobs are left); 0: here alone."""
    out: list = [None] * len(jobs)
    if not spawned:
        for i, job in enumerate(jobs):
            out[i] = _episode_job(job)
            done(1)
        return out
    lock, ends, futures, errors = threading.Lock(), [0, len(jobs)], [], []

    def take(front: bool) -> int | None:
        with lock:
            if ends[0] >= ends[1]:
                return None
            if front:
                ends[0] += 1
                return ends[0] - 1
            ends[1] -= 1
            return ends[1]

    # spawn: FFmpeg encoder threads started in this process (the first episode's) do not survive a fork
    with ProcessPoolExecutor(spawned, mp_context=multiprocessing.get_context("spawn")) as executor:

        def hand_out() -> None:
            i = take(front=True)
            if i is None:
                return
            try:
                future = executor.submit(_episode_job, jobs[i])
            except Exception as e:  # a broken pool: said below, not lost in the executor's thread
                errors.append(e)
                return
            with lock:
                futures.append((i, future))
            future.add_done_callback(finished)

        def finished(_future) -> None:
            done(1)
            hand_out()

        for _ in range(spawned):
            hand_out()
        while (i := take(front=False)) is not None:
            out[i] = _episode_job(jobs[i])
            done(1)
        # every job is taken; wait for those handed out (a callback may still be handing out its last)
        while not errors:
            with lock:
                if len(futures) == ends[0] and all(f.done() for _, f in futures):
                    break
            time.sleep(0.05)
        if errors:
            raise errors[0]
        for i, future in futures:
            out[i] = future.result()
    return out


def _progress(total: int, enabled: bool):
    """A bar of episodes written (the first already), or a stand-in that counts nothing."""
    from tqdm import tqdm

    return tqdm(total=total, initial=1, desc="synth episodes", unit="ep", mininterval=1.0, disable=not enabled)
