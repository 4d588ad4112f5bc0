"""`dlbench synth`: write a synthetic LeRobot v2.1 dataset with barcoded video."""

from __future__ import annotations

import argparse

from .common import command, say


def _camera(spec: str):
    from ..synth import Camera

    try:
        key, size = spec.rsplit("=", 1)
        h, w = size.lower().split("x")
        return Camera(key, int(h), int(w))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"camera {spec!r}: expected KEY=HEIGHTxWIDTH, e.g. observation.images.front=96x128"
        ) from None


def add(sub) -> None:
    from ..config import synth_defaults
    from ..synth.spec import CONTENTS

    sd = synth_defaults()
    p = command(sub, "synth", help="write a synthetic LeRobot v2.1 dataset with barcoded video")
    p.add_argument("out", help="directory to write (must be empty unless --overwrite)")
    p.add_argument("--episodes", type=int, default=sd["episodes"], help="(default: %(default)s)")
    p.add_argument("--length-min", type=int, default=sd["length_min"], help="frames (default: %(default)s)")
    p.add_argument("--length-max", type=int, default=sd["length_max"], help="frames (default: %(default)s)")
    p.add_argument(
        "--camera",
        type=_camera,
        action="append",
        help="KEY=HEIGHTxWIDTH, repeat for more cameras (default: "
        + ", ".join(f"{c['key']}={c['height']}x{c['width']}" for c in sd["cameras"])
        + ")",
    )
    p.add_argument("--fps", type=int, default=sd["fps"], help="(default: %(default)s)")
    p.add_argument("--codec", default=sd["codec"], choices=["h264", "hevc", "av1"], help="(default: %(default)s)")
    p.add_argument(
        "--content",
        default=sd["content"],
        choices=list(CONTENTS),
        help="stripes: quick flat content; camera: texture, motion and sensor noise, a scene per episode; phases: "
        "camera-like, one task whose look follows the episode's time (default: %(default)s)",
    )
    p.add_argument("--gop", type=int, default=None, help="keyframe interval (default: 30; av1: 2)")
    p.add_argument("--crf", type=int, default=None, help="(default: per codec: h264 23, hevc 28, av1 30)")
    p.add_argument("--preset", default=None, help="encoder preset (default: the encoder's)")
    p.add_argument("--tasks", type=int, default=sd["tasks"], help="(default: %(default)s)")
    p.add_argument("--state-dim", type=int, default=sd["state_dim"], help="(default: %(default)s)")
    p.add_argument("--action-dim", type=int, default=sd["action_dim"], help="(default: %(default)s)")
    p.add_argument("--seed", type=int, default=sd["seed"], help="(default: %(default)s)")
    p.add_argument("--chunks-size", type=int, default=1000, help="episodes per chunk directory (default: %(default)s)")
    p.add_argument("--workers", type=int, default=None, help="encoding processes (default: all cores)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    p.set_defaults(func=run)


def run(a) -> None:
    from ..config import synth_defaults
    from ..synth import Camera, SynthConfig, synthesize

    cameras = a.camera or [Camera(c["key"], c["height"], c["width"]) for c in synth_defaults()["cameras"]]
    cfg = SynthConfig(
        episodes=a.episodes,
        length_min=a.length_min,
        length_max=a.length_max,
        cameras=tuple(cameras),
        fps=a.fps,
        codec=a.codec,
        content=a.content,
        gop=a.gop,
        crf=a.crf,
        preset=a.preset,
        tasks=a.tasks,
        state_dim=a.state_dim,
        action_dim=a.action_dim,
        seed=a.seed,
        chunks_size=a.chunks_size,
    )
    out = synthesize(cfg, a.out, overwrite=a.overwrite, workers=a.workers, progress=a.bars)
    say(f"wrote v2.1 dataset {out}")
