"""`dlbench reencode` (a dataset's videos in another encoding, every frame kept) and `dlbench encoding` (what an
encoding costs and gives: bytes, decode cost in order and at random, quality against the source)."""

from __future__ import annotations

import json
from pathlib import Path

from .. import atomic
from ..errors import UserError
from .common import command, out_option, say


def add(sub) -> None:
    p = command(sub, "reencode", help="re-encode a v3.0 dataset's videos (frames and timestamps kept)")
    p.add_argument("src", help="the v3.0 dataset (local path or URL)")
    p.add_argument("dst", help="where the re-encoded dataset goes (empty or missing)")
    p.add_argument("--codec", required=True, choices=["h264", "hevc", "av1"], help="the new codec")
    p.add_argument("--gop", type=int, default=None, help="frames between keyframes, at most (default: the codec's)")
    p.add_argument("--crf", type=int, default=None, help="quality: lower is better and larger (default: the codec's)")
    p.add_argument("--preset", default=None, help="the encoder's speed preset (default: its own)")
    p.add_argument("--pixel-format", default="yuv420p", help="yuv420p, yuv444p or yuv420p10le")
    p.add_argument("--height", type=int, default=None, help="with --width: a smaller size")
    p.add_argument("--width", type=int, default=None, help="with --height: a smaller size")
    p.add_argument("--no-faststart", dest="faststart", action="store_false", help="the index after the frames")
    p.add_argument("--fast-decode", action="store_true", help="leave out the tools that cost the decoder most")
    p.add_argument("--workers", type=int, default=1, help="FFmpeg processes at once")
    p.add_argument("--threads", type=int, default=None, help="threads of all of them together (default: the cores)")
    p.add_argument("--work", default=None, help="the work directory (default: a hidden sibling of DST; resumable)")
    out_option(p, "record", "write what re-encoding took, per video file (JSON)", "--record")
    p.set_defaults(func=reencode)

    p = command(sub, "encoding", help="an encoding's bytes, decode cost (in order, at random) and quality, per camera")
    p.add_argument("root", help="the v3.0 dataset")
    p.add_argument("--name", default=None, help="its name in the table (default: the directory's)")
    p.add_argument("--reference", default=None, help="the dataset it was re-encoded from: PSNR and SSIM against it")
    p.add_argument("--reencode-record", default=None, help="`dlbench reencode --out`: the encode's cost")
    p.add_argument("--every", type=int, default=10, help="compare every N-th frame (1: every frame)")
    p.add_argument("--out", required=True, help="the rows (JSON)")
    p.set_defaults(func=encoding)

    p = command(sub, "encodings-table", help="the rows of `dlbench encoding` as one CSV table and its plot")
    p.add_argument("rows", nargs="+", help="`dlbench encoding --out` files")
    p.add_argument("--out", required=True, help="the table (CSV)")
    p.add_argument("--plot", default=None, help="the plot (PNG)")
    p.set_defaults(func=encodings_table)


def reencode(a) -> None:
    from ..encoding.options import Encoding
    from ..encoding.reencode import reencode as run

    enc = Encoding(a.codec, a.gop, a.crf, a.preset, a.pixel_format, a.height, a.width, a.faststart, a.fast_decode)
    record = run(a.src, a.dst, enc, workers=a.workers, threads=a.threads, work_dir=a.work)
    if a.record:
        atomic.write_json(a.record, record)
    frames = sum(u["frames"] for u in record["units"])
    ratio = sum(u["bytes"] for u in record["units"]) / max(sum(u["source_bytes"] for u in record["units"]), 1)
    say(f"{a.dst}: {len(record['units'])} video file(s), {frames} frames as {enc.label()} in {record['wall_s']:.1f} s "
        f"({frames / record['wall_s']:.0f} frames/s); {ratio:.2f}x the source's bytes")  # fmt: skip
    if record["barcodes_unreadable"]:
        say(f"{a.dst}: {record['barcodes_unreadable']} frame(s) lost their barcode to {enc.label()}; its runs verify "
            f"frames against an independent decode only (a lower crf keeps the barcodes)")  # fmt: skip


def encoding(a) -> None:
    from ..encoding.cost import measure

    record = json.loads(Path(a.reencode_record).read_text()) if a.reencode_record else None
    rows = measure(a.root, a.name or Path(a.root).name, a.reference, record, every=a.every)
    atomic.write_json(a.out, rows)
    for r in rows:
        quality = f", PSNR {r['psnr_db']:.1f} dB, SSIM {r['ssim']:.3f}" if r["psnr_db"] is not None else ""
        say(f"{r['dataset']} {r['camera']}: {r['bytes_per_frame'] / 1024:.1f} KB/frame, decodes "
            f"{r['decode_in_order_frames_per_s']:.0f} frames/s in order, {r['decode_random_frames_per_s']:.0f} at "
            f"random{quality}")  # fmt: skip


def encodings_table(a) -> None:
    from ..encoding.cost import table

    rows = []
    for p in a.rows:
        rows.append(json.loads(Path(p).read_text()))
        if not isinstance(rows[-1], list) or not all(isinstance(r, dict) and "camera" in r for r in rows[-1]):
            raise UserError(f"{p}: not the rows of `dlbench encoding --out`; give those files only")
    df = table(rows)
    with atomic.file(a.out) as tmp:
        df.to_csv(tmp, index=False)
    if a.plot:
        from ..report.plots import plot_encodings

        plot_encodings(df, Path(a.plot))
    say(f"{a.out}: {len(df)} encoding x camera row(s)")
