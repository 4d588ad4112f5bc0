"""Runs in the peer environment: record a small v3.0 dataset with LeRobot 0.6.1's own recorder.

    python -m dlbench.peer.lerobot_record ROOT [--episodes N] [--fps 30] [--cameras front=64x96,wrist=64x96]
                                               [--image-cameras top=32x48] [--depth-cameras depth=48x64]
                                               [--depth-image-cameras depth_top=32x48] [--seed S]

ROOT must not exist yet (LeRobot creates it). The dataset is what a LeRobot recording loop writes:
`LeRobotDataset.create(..., use_videos=True)`, then per episode `add_frame` for every frame and `save_episode`,
and `finalize` at the end; videos in LeRobot's default codec (libsvtav1, AV1). Per frame: `observation.state` and
`action`, float32 vectors of dimension 6, and one camera-like image per camera (`observation.images.<name>`,
HEIGHTxWIDTH, uint8 HWC): a smooth random texture, a bright square moving across it, and per-frame noise.
`--image-cameras` adds cameras of dtype "image", which LeRobot stores as PNG bytes in the data files, not as video.
`--depth-cameras` adds depth maps (uint16 millimetres, one channel, marked `is_depth_map`), which LeRobot's depth
encoder quantizes to 12 bits and writes as lossless HEVC video in gray12le: a tilted floor 0.5 to 3 m away and a
near box moving across it, with sensor noise. `--depth-image-cameras` adds depth maps stored as images (16-bit TIFF
in the data files), as LeRobot stores a depth feature of dtype "image".
Episode lengths vary from 10 to 25 frames; everything is drawn from `--seed`. Prints one JSON line describing
the result (root, episodes, frames, cameras and their shapes).
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO_ID = "local/recorded"
ROBOT_TYPE = "dlbench_recorded"  # not dlbench's "dlbench_synthetic": these frames carry no barcodes
STATE_DIM = 6
LENGTH_MIN, LENGTH_MAX = 10, 25
TASKS = ("pick up the cube", "put the cube in the box")
JOINTS = [f"joint_{i}" for i in range(STATE_DIM)]


def parse_cameras(spec: str, required: bool = True) -> dict[str, tuple[int, int]]:
    """ "front=64x96,wrist=64x96" -> {"observation.images.front": (64, 96), ...} (height x width)."""
    cams = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, size = part.partition("=")
        h, _, w = size.lower().partition("x")
        if not name or not h.isdigit() or not w.isdigit():
            raise SystemExit(f"--cameras: {part!r} is not NAME=HEIGHTxWIDTH")
        cams[f"observation.images.{name}"] = (int(h), int(w))
    if not cams and required:
        raise SystemExit("--cameras: at least one camera is needed")
    return cams


def features(
    cameras: dict[str, tuple[int, int]],
    image_cameras: dict[str, tuple[int, int]],
    depth_cameras=None,
    depth_images=None,
) -> dict:
    feats = {
        "observation.state": {"dtype": "float32", "shape": (STATE_DIM,), "names": JOINTS},
        "action": {"dtype": "float32", "shape": (STATE_DIM,), "names": JOINTS},
    }
    for key, (h, w) in cameras.items():
        feats[key] = {"dtype": "video", "shape": (h, w, 3), "names": ["height", "width", "channels"]}
    for key, (h, w) in image_cameras.items():
        feats[key] = {"dtype": "image", "shape": (h, w, 3), "names": ["height", "width", "channels"]}
    for key, (h, w) in (depth_cameras or {}).items():  # as LeRobot's hw_to_dataset_features marks a depth camera
        feats[key] = {"dtype": "video", "shape": (h, w, 1), "names": ["height", "width", "channels"],
                      "info": {"is_depth_map": True}}  # fmt: skip
    for key, (h, w) in (depth_images or {}).items():
        feats[key] = {"dtype": "image", "shape": (h, w, 1), "names": ["height", "width", "channels"],
                      "info": {"is_depth_map": True}}  # fmt: skip
    return feats


def render_depth(rng: np.random.Generator, h: int, w: int, length: int) -> np.ndarray:
    """(length, h, w, 1) uint16 millimetres: a floor receding from 0.5 to 3 m, a box 0.3-0.6 m away moving across
    it, and per-frame sensor noise of a few millimetres."""
    floor = np.linspace(3000, 500, h, dtype=np.float32)[:, None] + rng.uniform(-200, 200) * np.linspace(-1, 1, w)
    side = max(4, min(h, w) // 4)
    start, end = rng.uniform([0, 0], [h - side, w - side]), rng.uniform([0, 0], [h - side, w - side])
    near = rng.uniform(300, 600)
    frames = np.empty((length, h, w, 1), np.uint16)
    for t in range(length):
        img = floor.copy()
        y, x = (start + (end - start) * (t / max(1, length - 1))).round().astype(int)
        img[y : y + side, x : x + side] = near
        img += rng.normal(0, 3, size=img.shape).astype(np.float32)
        frames[t, :, :, 0] = img.clip(1, 65535).astype(np.uint16)
    return frames


def smooth_texture(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A smooth random RGB background (float32 in [0, 255]): coarse noise upsampled bilinearly."""
    gh, gw = max(2, h // 16 + 2), max(2, w // 16 + 2)
    coarse = rng.uniform(40, 200, size=(gh, gw, 3)).astype(np.float32)
    ys, xs = np.linspace(0, gh - 1, h), np.linspace(0, gw - 1, w)
    y0, x0 = np.floor(ys).astype(int).clip(0, gh - 2), np.floor(xs).astype(int).clip(0, gw - 2)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    top = coarse[y0][:, x0] * (1 - fx) + coarse[y0][:, x0 + 1] * fx
    bottom = coarse[y0 + 1][:, x0] * (1 - fx) + coarse[y0 + 1][:, x0 + 1] * fx
    return (top * (1 - fy) + bottom * fy).astype(np.float32)


def render_episode(rng: np.random.Generator, h: int, w: int, length: int) -> np.ndarray:
    """(length, h, w, 3) uint8: texture + a bright square moving along a line + per-frame noise."""
    background = smooth_texture(rng, h, w)
    side = max(4, min(h, w) // 5)
    start = rng.uniform([0, 0], [h - side, w - side])
    end = rng.uniform([0, 0], [h - side, w - side])
    color = rng.uniform(220, 255, size=3).astype(np.float32)
    frames = np.empty((length, h, w, 3), np.uint8)
    for t in range(length):
        img = background.copy()
        y, x = (start + (end - start) * (t / max(1, length - 1))).round().astype(int)
        img[y : y + side, x : x + side] = color
        img += rng.normal(0, 4, size=img.shape).astype(np.float32)
        frames[t] = img.clip(0, 255).astype(np.uint8)
    return frames


def record(
    root: str,
    episodes: int,
    fps: int,
    cameras: dict[str, tuple[int, int]],
    seed: int,
    image_cameras: dict[str, tuple[int, int]] | None = None,
    depth_cameras: dict[str, tuple[int, int]] | None = None,
    depth_images: dict[str, tuple[int, int]] | None = None,
) -> dict:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if Path(root).exists():
        raise SystemExit(f"{root} exists; LeRobot creates the dataset root itself")
    rng = np.random.default_rng(seed)
    image_cameras, depth_cameras, depth_images = image_cameras or {}, depth_cameras or {}, depth_images or {}
    ds = LeRobotDataset.create(
        repo_id=REPO_ID,
        fps=fps,
        root=root,
        robot_type=ROBOT_TYPE,
        features=features(cameras, image_cameras, depth_cameras, depth_images),
        use_videos=True,
    )
    lengths = rng.integers(LENGTH_MIN, LENGTH_MAX + 1, size=episodes)
    for ep, length in enumerate(lengths):
        length = int(length)
        videos = {key: render_episode(rng, h, w, length) for key, (h, w) in {**cameras, **image_cameras}.items()}
        videos.update(
            {key: render_depth(rng, h, w, length) for key, (h, w) in {**depth_cameras, **depth_images}.items()}
        )
        # a smooth joint trajectory; the action leads the state by one step
        phase = rng.uniform(0, 2 * np.pi, size=STATE_DIM)
        t = np.arange(length + 1, dtype=np.float32)[:, None] / fps
        traj = np.sin(2 * np.pi * 0.5 * t + phase) + 0.01 * rng.normal(size=(length + 1, STATE_DIM))
        traj = traj.astype(np.float32)
        for i in range(length):
            frame = {"observation.state": traj[i], "action": traj[i + 1], "task": TASKS[ep % len(TASKS)]}
            frame.update({key: v[i] for key, v in videos.items()})
            ds.add_frame(frame)
        ds.save_episode()
    ds.finalize()
    return {
        "root": str(root),
        "episodes": episodes,
        "frames": int(lengths.sum()),
        "lengths": [int(n) for n in lengths],
        "fps": fps,
        "cameras": {key: [h, w, 3] for key, (h, w) in cameras.items()},
        "image_cameras": {key: [h, w, 3] for key, (h, w) in image_cameras.items()},
        "depth_cameras": {key: [h, w, 1] for key, (h, w) in {**depth_cameras, **depth_images}.items()},
    }


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m dlbench.peer.lerobot_record", description=__doc__.split("\n")[0])
    p.add_argument("root")
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--fps", type=int, default=30)
    p.add_argument("--cameras", default="front=64x96,wrist=64x96", help="NAME=HEIGHTxWIDTH,...")
    p.add_argument("--image-cameras", default="", help="NAME=HEIGHTxWIDTH,... stored as images (PNG in parquet)")
    p.add_argument("--depth-cameras", default="", help="NAME=HEIGHTxWIDTH,... depth maps (12-bit HEVC video)")
    p.add_argument("--depth-image-cameras", default="", help="NAME=HEIGHTxWIDTH,... depth maps stored as TIFF images")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.episodes < 1:
        raise SystemExit("--episodes must be at least 1")
    # a dataset of image-stored cameras only (as simulation sets are) needs no video camera
    cameras = parse_cameras(a.cameras, required=not (a.image_cameras or a.depth_cameras or a.depth_image_cameras))
    images, depth = parse_cameras(a.image_cameras, required=False), parse_cameras(a.depth_cameras, required=False)
    depth_images = parse_cameras(a.depth_image_cameras, required=False)
    print(json.dumps(record(a.root, a.episodes, a.fps, cameras, a.seed, images, depth, depth_images)))


if __name__ == "__main__":
    main(sys.argv[1:])
