"""The decoder's share of a ratio: torchcodec of dlbench's environment against LeRobot's (the peer environment) on
the same files, the same frames, one thread each, decode only (no loader).

    python -m benchmarks decoders --workdir /tmp/perf --sets many100_240 phases16_480 h264_720p16

Each set's first camera, its first video file: N frames at seeded random places (each a seek, as a map-style
loader asks) and N consecutive ones from a seeded place (as a stream reads), timed in each interpreter in turn,
rounds interleaved so that the machine's drift falls on both; medians of the rounds. Where the peer environment is
missing the command says so and measures dlbench's alone.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from .common import Report, parser
from .model import FRONTIER, SETS, dataset

# run in each interpreter: prints {"torchcodec", "random_ms", "in_order_ms"} (ms per frame) for one file
INNER = r"""
import json, sys, time
import torch, torchcodec
from torchcodec.decoders import VideoDecoder
torch.set_num_threads(1)
path, picks, start, count = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
dec = VideoDecoder(path, num_ffmpeg_threads=1, seek_mode="exact")
dec.get_frame_at(0)  # the decoder's first frame and its buffers: not part of either figure
t = time.perf_counter()
for i in picks:
    dec.get_frame_at(i)
random_ms = (time.perf_counter() - t) * 1e3 / len(picks)
dec = VideoDecoder(path, num_ffmpeg_threads=1, seek_mode="exact")
dec.get_frame_at(start)
t = time.perf_counter()
for i in range(start + 1, start + 1 + count):
    dec.get_frame_at(i)
in_order_ms = (time.perf_counter() - t) * 1e3 / count
print(json.dumps({"torchcodec": torchcodec.__version__, "torch": torch.__version__,
                  "random_ms": random_ms, "in_order_ms": in_order_ms}))
"""


def _first_video(v30: Path) -> Path:
    return sorted((v30 / "videos").rglob("*.mp4"))[0]


def _frames(path: Path) -> int:
    from torchcodec.decoders import VideoDecoder

    return int(VideoDecoder(str(path), seek_mode="exact").metadata.num_frames)


def measure(python: str, path: Path, picks: list[int], start: int, count: int) -> dict:
    out = subprocess.run(
        [python, "-c", INNER, str(path), json.dumps(picks), str(start), str(count)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    import numpy as np

    from dlbench.peer import peer_python

    ap = parser(__doc__, sets=["many100_240", "phases16_480", "h264_720p16"], choices=list(SETS))
    ap.add_argument("--frames", type=int, default=200, help="frames a measure decodes (random and in order)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per interpreter, interleaved")
    args = ap.parse_args(argv)
    envs = {"dlbench": sys.executable}
    peer = peer_python()
    if peer is None:
        print("# the LeRobot peer environment is missing (make peer): dlbench's decoder alone", flush=True)
    else:
        envs["lerobot"] = str(peer)
    cols = ["set", "env", "torchcodec", "random ms/frame", "in order ms/frame", "random x dlbench's", "in order x"]
    report = Report(args, cols, "decoders")
    for name in args.sets:
        if name not in FRONTIER and name not in SETS:
            continue
        path = _first_video(dataset(Path(args.workdir), name))
        total = _frames(path)
        rng = np.random.default_rng(0)
        count = min(args.frames, total - 2)
        picks = [int(i) for i in rng.integers(0, total, count)]
        start = int(rng.integers(0, total - count - 1))
        got: dict[str, list[dict]] = {k: [] for k in envs}
        for _ in range(args.rounds):
            for env, python in envs.items():
                got[env].append(measure(python, path, picks, start, count))
        keys = ("random_ms", "in_order_ms")
        med = {env: {k: statistics.median(r[k] for r in rs) for k in keys} for env, rs in got.items()}
        for env, m in med.items():
            report.row(**{
                "set": name, "env": env, "torchcodec": got[env][0]["torchcodec"],
                "random ms/frame": round(m["random_ms"], 2), "in order ms/frame": round(m["in_order_ms"], 2),
                "random x dlbench's": round(m["random_ms"] / med["dlbench"]["random_ms"], 2),
                "in order x": round(m["in_order_ms"] / med["dlbench"]["in_order_ms"], 2),
            })  # fmt: skip
    report.close()


if __name__ == "__main__":
    main()
