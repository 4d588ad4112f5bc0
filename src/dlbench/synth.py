"""Synthetic LeRobot v2.1 datasets with real encoded video whose every frame can be verified.

`synthesize(SynthConfig(...), out_dir)` writes a complete v2.1 dataset: parquet per episode, one MP4 per episode
per camera (encoded with torchcodec/FFmpeg), and all metadata, with stats computed from the data. Every frame
carries its (episode, frame, camera) as a barcode (see `dlbench.barcode`). The same seed gives the same parquet
and metadata bytes.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import barcode, io
from .errors import UserError
from .format import meta, paths

# codec name in config -> (FFmpeg encoder, codec name recorded in info.json, default crf, default GOP)
CODECS = {
    "h264": ("libx264", "h264", 23, 30),
    "hevc": ("libx265", "hevc", 28, 30),
    "av1": ("libsvtav1", "av1", 30, 2),  # LeRobot's recording defaults: libsvtav1, g=2, crf=30
}


@dataclass(frozen=True)
class Camera:
    key: str
    height: int
    width: int


@dataclass(frozen=True)
class SynthConfig:
    """What to generate. Lengths are drawn uniformly from [length_min, length_max] with `seed`."""

    episodes: int = 10
    length_min: int = 30
    length_max: int = 90
    cameras: tuple[Camera, ...] = field(
        default_factory=lambda: (Camera("observation.images.front", 96, 128), Camera("observation.images.wrist", 96, 128))
    )
    fps: int = 30
    codec: str = "h264"
    gop: int | None = None  # default per codec (see CODECS)
    crf: int | None = None
    preset: str | int | None = None
    tasks: int = 2
    state_dim: int = 6
    action_dim: int = 6
    seed: int = 0
    chunks_size: int = paths.DEFAULT_CHUNK_SIZE
    robot_type: str = "dlbench_synthetic"  # marks datasets whose frames carry barcodes (see validate.py)
    noise: int = 0  # +/- this much random noise per pixel: the encoder cannot compress it, so files get real-sized

    def validate(self) -> None:
        if self.codec not in CODECS:
            raise UserError(f"synth codec {self.codec!r} is unknown; choose one of {sorted(CODECS)}")
        if self.episodes < 1:
            raise UserError("synth episodes must be >= 1")
        if not 1 <= self.length_min <= self.length_max:
            raise UserError(f"synth lengths must satisfy 1 <= length_min <= length_max (got {self.length_min}, {self.length_max})")
        if not self.cameras:
            raise UserError("synth needs at least one camera")
        if len({c.key for c in self.cameras}) != len(self.cameras):
            raise UserError("synth camera keys must be unique")
        for cam in self.cameras:
            if min(cam.height, cam.width) < barcode.GRID * barcode.MIN_CELL_PX or cam.height % 2 or cam.width % 2:
                raise UserError(
                    f"synth camera {cam.key}: {cam.height}x{cam.width} is not allowed; use even sizes of at least "
                    f"{barcode.GRID * barcode.MIN_CELL_PX} px"
                )
            if self.codec == "av1" and min(cam.height, cam.width) < 64:
                raise UserError(f"synth camera {cam.key}: the av1 encoder (libsvtav1) needs frames of at least 64x64")
        if not 0 <= self.noise <= 127:
            raise UserError(f"synth noise must be within 0..127 (got {self.noise})")
        if self.tasks < 1 or self.state_dim < 1 or self.action_dim < 1 or self.fps < 1 or self.chunks_size < 1:
            raise UserError("synth tasks, state_dim, action_dim, fps and chunks_size must be >= 1")

    @property
    def encoder(self) -> str:
        return CODECS[self.codec][0]

    @property
    def effective_gop(self) -> int:
        return self.gop if self.gop is not None else CODECS[self.codec][3]

    @property
    def effective_crf(self) -> int:
        return self.crf if self.crf is not None else CODECS[self.codec][2]


def episode_lengths(cfg: SynthConfig) -> np.ndarray:
    return np.random.default_rng(cfg.seed).integers(cfg.length_min, cfg.length_max + 1, size=cfg.episodes)


def camera_keys(cfg: SynthConfig) -> list[str]:
    """Camera keys in barcode camera-index order (sorted, like `format.video_keys`)."""
    return sorted(c.key for c in cfg.cameras)


# ---------------------------------------------------------------------------------------------------- video
def render_frames(cam: Camera, camera_index: int, episode: int, length: int, noise: int = 0) -> np.ndarray:
    """(T, H, W, 3) uint8: moving colour stripes (so the encoder has real work), `noise` (seeded by episode and
    camera), plus the barcode."""
    t = np.arange(length, dtype=np.float32)[:, None, None]
    y = np.arange(cam.height, dtype=np.float32)[None, :, None]
    x = np.arange(cam.width, dtype=np.float32)[None, None, :]
    phase = (episode * 0.7 + camera_index * 1.3) % (2 * np.pi)
    chans = [
        128 + 90 * np.sin((x + 0.5 * y + 3.0 * t) / (7.0 + k) + phase + k) for k in range(3)
    ]
    frames = np.stack(chans, axis=-1)
    if noise:
        rng = np.random.default_rng([episode, camera_index])
        frames += rng.integers(-noise, noise + 1, size=frames.shape, dtype=np.int16)
    frames = frames.clip(0, 255).astype(np.uint8)
    for i in range(length):
        barcode.paint(frames[i], episode, i, camera_index)
    return frames


def encode_video(frames_thwc: np.ndarray, path: Path, cfg: SynthConfig) -> None:
    """Encode frames to an MP4 with torchcodec (FFmpeg), atomically."""
    import torch
    from torchcodec.encoders import VideoEncoder

    tensor = torch.from_numpy(np.ascontiguousarray(frames_thwc)).permute(0, 3, 1, 2).contiguous()
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only
    options = {"g": cfg.effective_gop}
    if cfg.codec == "hevc":
        options["x265-params"] = "log-level=error"
    with io.atomic_path(path.with_suffix(".mp4")) as tmp:
        tmp_mp4 = tmp.with_name(tmp.name + ".mp4")  # the container is chosen from the extension
        try:
            VideoEncoder(tensor, frame_rate=cfg.fps).to_file(
                tmp_mp4, codec=cfg.encoder, pixel_format="yuv420p", crf=cfg.effective_crf, preset=cfg.preset,
                extra_options=options,
            )
            os.replace(tmp_mp4, tmp)
        finally:
            if tmp_mp4.exists():
                tmp_mp4.unlink()


@functools.lru_cache(maxsize=None)
def encoder_works(codec: str) -> bool:
    """True if this machine's FFmpeg (as torchcodec sees it) can encode `codec`; tried on a tiny clip."""
    with tempfile.TemporaryDirectory() as d:
        cfg = SynthConfig(codec=codec, cameras=(Camera("probe", 64, 64),))
        try:
            encode_video(np.zeros((8, 64, 64, 3), np.uint8), Path(d) / "probe.mp4", cfg)
            return True
        except Exception:
            return False


def check_encoder(codec: str) -> None:
    if codec not in CODECS:
        raise UserError(f"codec {codec!r} is unknown; choose one of {sorted(CODECS)}")
    if not encoder_works(codec):
        available = [c for c in sorted(CODECS) if encoder_works(c)]
        raise UserError(
            f"codec {codec!r} needs the FFmpeg encoder {CODECS[codec][0]}, which this FFmpeg cannot use; "
            f"codecs that work here: {available or 'none (is FFmpeg installed? see README)'}"
        )


# ---------------------------------------------------------------------------------------------------- data
def _features(cfg: SynthConfig) -> dict:
    feats = {
        "observation.state": {"dtype": "float32", "shape": [cfg.state_dim], "names": [f"joint_{i}" for i in range(cfg.state_dim)]},
        "action": {"dtype": "float32", "shape": [cfg.action_dim], "names": [f"joint_{i}" for i in range(cfg.action_dim)]},
    }
    for cam in sorted(cfg.cameras, key=lambda c: c.key):
        feats[cam.key] = {
            "dtype": "video",
            "shape": [cam.height, cam.width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.fps": float(cfg.fps), "video.height": cam.height, "video.width": cam.width,
                "video.channels": 3, "video.codec": CODECS[cfg.codec][1], "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False, "has_audio": False,
            },
        }
    for name, dtype in (("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"),
                        ("index", "int64"), ("task_index", "int64")):
        feats[name] = {"dtype": dtype, "shape": [1], "names": None}
    return feats


def _arrow_schema(cfg: SynthConfig) -> pa.Schema:
    from datasets import Features, List, Value

    return Features({
        "observation.state": List(Value("float32"), length=cfg.state_dim),
        "action": List(Value("float32"), length=cfg.action_dim),
        "timestamp": Value("float32"),
        "frame_index": Value("int64"),
        "episode_index": Value("int64"),
        "index": Value("int64"),
        "task_index": Value("int64"),
    }).arrow_schema


def _vector_stats(x: np.ndarray) -> dict:
    """min/max/mean/std/count over axis 0 of (N, D)."""
    x = x.astype(np.float64)
    return {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0), "count": [len(x)]}


def _image_stats(frames_thwc: np.ndarray) -> dict:
    """Per-channel stats of frames scaled to [0, 1], shaped (3, 1, 1) as LeRobot stores them."""
    f = frames_thwc.reshape(-1, 3).astype(np.float64) / 255.0
    shape = lambda v: np.asarray(v).reshape(3, 1, 1)  # noqa: E731
    return {"min": shape(f.min(0)), "max": shape(f.max(0)), "mean": shape(f.mean(0)), "std": shape(f.std(0)),
            "count": [len(frames_thwc)]}


def _write_episode(cfg: SynthConfig, root: Path, episode: int, length: int, start_index: int, task_index: int) -> dict:
    """Write one episode's parquet and videos; return its stats (JSON-ready)."""
    rng = np.random.default_rng([cfg.seed, episode])
    state = np.cumsum(rng.normal(0, 0.05, size=(length, cfg.state_dim)), axis=0).astype(np.float32)
    action = (np.roll(state, -1, axis=0)[:, : cfg.action_dim] if cfg.action_dim <= cfg.state_dim
              else rng.normal(0, 0.05, size=(length, cfg.action_dim))).astype(np.float32)
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
        frames = render_frames(cam, cam_index, episode, length, cfg.noise)
        encode_video(frames, root / paths.v21_video_path(episode, key, cfg.chunks_size), cfg)
        stats[key] = _image_stats(frames)
    return meta.to_jsonable(stats)


def _episode_job(args):
    return _write_episode(*args)


def synthesize(cfg: SynthConfig, out_dir: str | Path, overwrite: bool = False, workers: int | None = None,
               progress: bool = True) -> Path:
    """Write a v2.1 dataset to `out_dir`, published with one rename when complete.

    Refuses a non-empty `out_dir` unless `overwrite`; with `overwrite` the old content is replaced only after the
    new dataset is complete.
    """
    cfg.validate()
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
    workers = workers or os.cpu_count() or 1
    with io.atomic_dir(out_dir, replace=overwrite) as tmp:
        jobs = [(cfg, tmp, ep, int(lengths[ep]), int(starts[ep]), int(task_of[ep])) for ep in range(cfg.episodes)]
        if workers > 1 and cfg.episodes > 1:
            # spawn: FFmpeg encoder threads started in this process (the probe) do not survive a fork
            with ProcessPoolExecutor(min(workers, cfg.episodes), mp_context=multiprocessing.get_context("spawn")) as pool:
                stats = list(_progress(pool.map(_episode_job, jobs), cfg.episodes, progress))
        else:
            stats = list(_progress(map(_episode_job, jobs), cfg.episodes, progress))
        episodes = [{"episode_index": ep, "tasks": [tasks[task_of[ep]]], "length": int(lengths[ep])}
                    for ep in range(cfg.episodes)]
        ep_stats = [{"episode_index": ep, "stats": s} for ep, s in enumerate(stats)]
        meta.write_v21_meta(tmp, info, episodes, tasks, ep_stats)
    return out_dir


def _progress(it, total, enabled):
    if not enabled:
        return it
    from tqdm import tqdm

    return tqdm(it, total=total, desc="synth episodes", unit="ep", mininterval=1.0)
