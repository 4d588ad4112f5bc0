"""The datasets the benchmark commands measure on: the quick default and the realistic one (config/realistic.yaml's
frames: 2 cameras at 480x640, AV1 g=2 crf=30 as LeRobot records, camera-like content, episodes of 10-20 s)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from dlbench.synth import Camera, SynthConfig, synthesize

QUICK = SynthConfig(
    episodes=24,
    length_min=60,
    length_max=150,
    cameras=(Camera("observation.images.front", 96, 128), Camera("observation.images.wrist", 96, 128)),
)
REALISTIC = SynthConfig(
    episodes=10,
    length_min=300,
    length_max=600,
    codec="av1",
    content="camera",
    tasks=3,
    cameras=(Camera("observation.images.front", 480, 640), Camera("observation.images.wrist", 480, 640)),
)


def v21(work: Path, realistic: bool, episodes: int | None = None) -> Path:
    """A synthetic v2.1 dataset under `work`, written once and reused (realistic: about 50 s per episode on 2
    cores)."""
    cfg = REALISTIC if realistic else QUICK
    if episodes is not None:
        cfg = replace(cfg, episodes=episodes)
    out = work / f"v21-{'realistic' if realistic else 'quick'}-{cfg.episodes}"
    if not (out / "meta/info.json").exists():
        t0 = time.perf_counter()
        synthesize(cfg, out, overwrite=True, progress=False)
        print(f"synthesized {cfg.episodes} episodes in {time.perf_counter() - t0:.0f} s: {out}")
    return out


def v30(work: Path, realistic: bool, episodes: int | None = None) -> Path:
    """The same dataset converted to v3.0 (also reused)."""
    from dlbench.convert.run import run as convert

    src = v21(work, realistic, episodes)
    out = src.with_name(src.name.replace("v21", "v30"))
    if not (out / "meta/info.json").exists():
        convert(str(src), out, workers=2, progress=False)
    return out
