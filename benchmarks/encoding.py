"""Re-encodings of a dataset side by side: what each costs (bytes, encode time against FFmpeg alone) and gives
(dlbench_map's frames/s at random access, decode rates in order and at random, PSNR and SSIM against the source).

    python -m benchmarks.encoding [--workdir /tmp/dlbench-model] [--root V30] [--variants h264:1:20 h264:2:23 ...]

A variant is codec:gop:crf[:preset][:fastdecode]. By default the dataset is the realistic set of
`benchmarks.model` (480x640 AV1 g=2 crf 30, camera-like content, 2 cameras, 6 episodes of 10-15 s), written once
into the workdir. For each
variant: `dlbench reencode` (2 FFmpeg processes of 1 thread each on these cores) and, on the same files one after
the other, the plain `ffmpeg` command with the same options on every core: their frames/s and ratio. Then every
variant and the source are measured alike: `dlbench encoding` (every 10th frame compared) and dlbench_map bench runs
in mode single (random access, 2 workers, frames checked), every encoding once per round (medians of 3 rounds).
Prints one row per encoding, and writes encodings.csv and encodings.png into the workdir.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.common import Report, bench_run, dlbench, parser
from dlbench.encoding.options import Encoding

DEFAULT_VARIANTS = ["h264:1:20", "h264:1:20:fastdecode", "h264:2:20:fastdecode", "h264:10:23", "hevc:1:24:fast",
                    "av1:8:30"]  # fmt: skip


def plain_ffmpeg_s(root: Path, enc: Encoding) -> tuple[float, int]:
    """Seconds the `ffmpeg` command takes on every video file of `root`, one after another, on every core; and the
    frames it encoded."""
    from dlbench.format.mp4 import read_track

    seconds, frames = 0.0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for f in sorted(root.glob("videos/*/*/*.mp4")):
            with open(f, "rb") as fh:
                track = read_track(fh, str(f))
            out = Path(tmp) / "out.mp4"
            cmd = [
                "ffmpeg",
                "-nostdin",
                "-v",
                "error",
                "-i",
                str(f),
                *enc.ffmpeg_args(track.timescale, 0),
                "-y",
                str(out),
            ]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, env={**os.environ, "SVT_LOG": "1"})
            seconds += time.perf_counter() - t0
            frames += track.frames
    return seconds, frames


def bench_map(root: Path, out: Path, duration_s: float) -> float:
    shutil.rmtree(out, ignore_errors=True)
    rec = bench_run(out, root=root, loader="dlbench_map", mode="single", num_workers=2, duration_s=duration_s,
                    warmup_s=1, repeats=2, probe_samples=0)  # fmt: skip
    assert rec["metrics"]["frames_wrong"] == 0, rec["metrics"]
    return rec["metrics"]["frames_per_s_node"]


def main(argv=None) -> None:
    ap = parser(__doc__)
    ap.add_argument("--root", default=None, help="a v3.0 dataset (default: the realistic set, made once)")
    ap.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS)
    ap.add_argument("--duration-s", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3, help="bench runs of each encoding, alternating (median)")
    a = ap.parse_args(argv)
    work = Path(a.workdir)
    if a.root:
        root = Path(a.root)
    else:
        from benchmarks.model import dataset

        root = dataset(work, "realistic")
    out = work / "encodings"
    out.mkdir(parents=True, exist_ok=True)
    rows = [out / "source.json"]
    dlbench("encoding", str(root), "--name", "source", "--out", str(rows[0]))
    roots = {"source": root}
    report = Report(a, ["encoding", "dlbench frames/s", "ffmpeg frames/s", "ratio"], "encoding")
    for v in a.variants:
        codec, gop, crf, *rest = v.split(":")
        fast = "fastdecode" in rest
        preset = [p for p in rest if p != "fastdecode"]
        enc = Encoding(codec, int(gop), int(crf), preset[0] if preset else None, fast_decode=fast)
        name = enc.label().replace(" ", "_")
        dst = out / name
        shutil.rmtree(dst, ignore_errors=True)
        t0 = time.perf_counter()
        record = str(out / f"{name}.reencode.json")
        dlbench("reencode", str(root), str(dst), "--codec", codec, "--gop", gop, "--crf", crf,
                *(["--preset", preset[0]] if preset else []), *(["--fast-decode"] if fast else []),
                "--workers", "2", "--out", record)  # fmt: skip
        ours = time.perf_counter() - t0
        theirs, frames = plain_ffmpeg_s(root, enc)
        report.row(**{"encoding": enc.label(), "dlbench frames/s": frames / ours,
                      "ffmpeg frames/s": frames / theirs, "ratio": theirs / ours})  # fmt: skip
        rows.append(out / f"{name}.json")
        dlbench("encoding", str(dst), "--name", name, "--reference", str(root), "--reencode-record", record,
                "--out", str(rows[-1]))  # fmt: skip
        roots[name] = dst
    dlbench(
        "encodings-table", *map(str, rows), "--out", str(out / "encodings.csv"), "--plot", str(out / "encodings.png")
    )
    import pandas as pd

    table = pd.read_csv(out / "encodings.csv")
    report.table(["encoding", "KB/frame", "PSNR", "SSIM", "random fps", "in order", "dlbench_map frames/s",
                  "vs source"])  # fmt: skip
    rates = {name: [] for name in roots}
    for k in range(a.rounds):  # every encoding once per round, the source first: alternating, on the same cores
        for name, r in roots.items():
            rates[name].append(bench_map(r, out / "runs" / f"{name}-{k}", a.duration_s))
    base = statistics.median(rates["source"])
    for name in roots:
        fps = statistics.median(rates[name])
        t = table[table["dataset"] == name]
        psnr = f"{t['psnr_db'].mean():.1f}" if t["psnr_db"].notna().any() else "-"
        ssim = f"{t['ssim'].mean():.3f}" if t["ssim"].notna().any() else "-"
        report.row(**{"encoding": t["label"].iloc[0], "KB/frame": f"{t['bytes_per_frame'].mean() / 1024:.1f}",
                      "PSNR": psnr, "SSIM": ssim, "random fps": t["decode_random_frames_per_s"].mean(),
                      "in order": t["decode_in_order_frames_per_s"].mean(), "dlbench_map frames/s": fps,
                      "vs source": f"{fps / base:.2f}x"})  # fmt: skip
    report.line(f"{out / 'encodings.csv'}, {out / 'encodings.png'}")
    report.close()


if __name__ == "__main__":
    main()
