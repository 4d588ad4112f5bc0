"""What a dataset's encoding costs and gives, per camera: bytes per frame, the decode cost in order and at random
access (one FFmpeg thread, as a DataLoader worker decodes), and, for a re-encoded dataset, its quality against the
source (PSNR and SSIM by FFmpeg's filters) and what encoding took. One row per camera in results/tables/encodings.csv.
"""

from __future__ import annotations

import re
import subprocess
import time
from typing import TYPE_CHECKING

import numpy as np

from ..decode.codecs import EXACT_SEEK_CODECS
from ..errors import UserError
from ..format import meta
from ..format.mp4 import read_track
from .reencode import _episode_files

if TYPE_CHECKING:
    import pandas as pd

IN_ORDER_FRAMES = 90  # decoded from a file's start: a stream's access pattern
RANDOM_FRAMES = 60  # decoded one at a time at random indices: a map-style loader's


def _decode_rates(root: str, files: dict[str, int], seed: int) -> tuple[float, float]:
    """Frames/s of one decoder thread: in order from the first file's start, and at random frames of every file."""
    import torch
    from torchcodec.decoders import VideoDecoder

    torch.set_num_threads(1)
    decoders = {}
    for rel in files:
        with meta.open_file(root, rel) as fh:
            data = fh.read()
        probe = VideoDecoder(data, seek_mode="approximate", num_ffmpeg_threads=1)
        mode = "exact" if probe.metadata.codec in EXACT_SEEK_CODECS else "approximate"
        decoders[rel] = VideoDecoder(data, seek_mode=mode, num_ffmpeg_threads=1)
    first = next(iter(files))
    n = min(IN_ORDER_FRAMES, files[first])
    t0 = time.perf_counter()
    decoders[first].get_frames_in_range(0, n)
    in_order = n / (time.perf_counter() - t0)
    rng = np.random.default_rng(seed)
    picks = [(rel, int(rng.integers(files[rel]))) for rel in rng.choice(list(files), RANDOM_FRAMES)]
    t0 = time.perf_counter()
    for rel, i in picks:
        decoders[rel].get_frame_at(i)
    return in_order, RANDOM_FRAMES / (time.perf_counter() - t0)


def _keyframe_interval(root: str, files: dict[str, int]) -> float:
    frames = keys = 0
    for rel in files:
        with meta.open_file(root, rel) as fh:
            track = read_track(fh, rel)
        frames += track.frames
        keys += track.frames if track.sync is None else len(track.sync)
    return frames / max(keys, 1)


def quality(path: str, reference: str, every: int = 1, size: tuple[int, int] | None = None) -> tuple[float, float]:
    """(PSNR dB, SSIM) of video `path` against `reference`, over every `every`-th frame, by FFmpeg's psnr and ssim
    filters (all planes; `path` scaled to the reference's `size` (width, height) first where given)."""
    pick = f"select='not(mod(n\\,{every}))'"
    scale = f",scale={size[0]}:{size[1]}:flags=bicubic" if size else ""
    graph = f"[0:v]{pick}{scale},split[a][b];[1:v]{pick},split[c][d];[a][c]psnr;[b][d]ssim"
    cmd = ["ffmpeg", "-nostdin", "-hide_banner", "-i", path, "-i", reference, "-lavfi", graph, "-f", "null", "-"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    psnr = re.search(r"PSNR .*average:(\S+)", proc.stderr)
    ssim = re.search(r"SSIM .*All:(\S+)", proc.stderr)
    if proc.returncode or not psnr or not ssim:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"{path}: FFmpeg could not compare it with {reference}: {last}")
    return float("inf") if psnr.group(1) == "inf" else float(psnr.group(1)), float(ssim.group(1))


def measure(root: str, name: str, reference: str | None = None, record: dict | None = None, every: int = 10,
            seed: int = 0) -> list[dict]:  # fmt: skip
    """One row per camera of the dataset at `root`; quality against `reference` (the dataset it was re-encoded
    from, local) over every `every`-th frame, and the encode's cost from its `record` (`reencode`'s)."""
    info = meta.read_info(root)
    rows = []
    for cam, files in _episode_files(root, info).items():
        video = info["features"][cam].get("info", {})
        sizes = {rel: _size(root, rel) for rel in files}
        frames = sum(files.values())
        in_order, random = _decode_rates(root, files, seed)
        row = {
            "dataset": name,
            "root": root,
            "camera": cam,
            "codec": video.get("video.codec"),
            "pix_fmt": video.get("video.pix_fmt"),
            "width": video.get("video.width"),
            "height": video.get("video.height"),
            "keyframe_interval": _keyframe_interval(root, files),
            "frames": frames,
            "bytes_per_frame": sum(sizes.values()) / frames,
            "decode_in_order_frames_per_s": in_order,
            "decode_random_frames_per_s": random,
            "psnr_db": None,
            "ssim": None,
            "encode_frames_per_s": None,
            "barcodes_unreadable": None,
            "label": None,
            "reference": None,
        }
        if reference is not None:
            ref_info = meta.read_info(reference)["features"][cam]["info"]
            size = (ref_info["video.width"], ref_info["video.height"])
            scores = [quality(f"{root}/{rel}", f"{reference}/{rel}", every, size) for rel in files]
            weights = np.array([files[rel] for rel in files], float)
            row["psnr_db"] = float(np.average([s[0] for s in scores], weights=weights))
            row["ssim"] = float(np.average([s[1] for s in scores], weights=weights))
            row["reference"] = reference
        if record is not None:
            units = [u for u in record["units"] if u["camera"] == cam]
            row["encode_frames_per_s"] = sum(u["frames"] for u in units) / sum(u["encode_s"] for u in units)
            row["barcodes_unreadable"] = sum(u["barcodes_unreadable"] for u in units)
            from .options import Encoding

            row["label"] = Encoding(**record["encoding"]).label()
        rows.append(row)
    return rows


def _size(root: str, rel: str) -> int:
    with meta.open_file(root, rel) as fh:
        return fh.seek(0, 2)


def table(rows_per_dataset: list[list[dict]]) -> pd.DataFrame:
    """encodings.csv: every row, each re-encoded one beside its source's (same camera): its bytes and decode rates
    as ratios to the source's."""
    import pandas as pd

    df = pd.DataFrame([r for rows in rows_per_dataset for r in rows])
    if df.empty:
        return df
    source = df["label"].isna()
    df.loc[source, "label"] = [
        f"{c} g{k:.0f}" for c, k in zip(df.loc[source, "codec"], df.loc[source, "keyframe_interval"])
    ]
    compared = ["bytes_per_frame", "decode_in_order_frames_per_s", "decode_random_frames_per_s"]
    ref = df[["root", "camera", *compared]].rename(columns={"root": "reference"})
    df = df.merge(ref, on=["reference", "camera"], how="left", suffixes=("", "_source"))
    df["bytes_vs_source"] = df["bytes_per_frame"] / df["bytes_per_frame_source"]
    df["random_decode_vs_source"] = df["decode_random_frames_per_s"] / df["decode_random_frames_per_s_source"]
    df["in_order_decode_vs_source"] = df["decode_in_order_frames_per_s"] / df["decode_in_order_frames_per_s_source"]
    return df.drop(columns=[f"{c}_source" for c in compared])
