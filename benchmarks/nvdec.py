"""NVDEC against the CPU, file by file: what a GPU's video engines give per codec and resolution, every frame checked.

    python -m benchmarks.nvdec [--workdir /tmp/dlbench-nvdec] [--sets h264:480x640 hevc:720x1280 ...]
                               [--processes 1,4,16] [--phase-s 2] [--json OUT]

Writes camera-like synthetic datasets (3 episodes of 10 s at 30 fps, one camera; every frame barcoded) once into
the workdir, then for every video file and every decoder (`cpu`: FFmpeg with one thread, as in a DataLoader worker;
`ffmpeg` and `beta`: torchcodec's two NVDEC back-ends) measures:
  - sequential: one decoder reading every frame in order (frames/s);
  - random: single-frame requests at random places (ms a request, frames decoded before each included);
  - open: creating a decoder and getting its first frame (the first decoder of a process, with CUDA's set-up,
    is measured apart in the engines step);
  - memory: GPU memory one open decoder holds (the device's free memory before and after opening four);
  - engines: K processes decoding at once for `--phase-s` seconds each, in order and at random, frames/s in all,
    against one CPU process per core (what the machine's CPU gives).
Every decoded frame's barcode is compared with the CPU's decode of the same index; the wrong ones are listed
(file, index, the frame that came back). Without a CUDA device only the CPU rows are measured.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import Report, parser
from dlbench import barcode
from dlbench.decode.codecs import EXACT_SEEK_CODECS

DEFAULT_SETS = ["h264:480x640", "hevc:480x640", "av1:480x640", "h264:720x1280", "hevc:720x1280"]
CHUNK = 32  # frames asked for at once in order
RANDOM_REQUESTS = 40


def synth(workdir: Path, specs: list[str], episodes: int = 3, frames: int = 300) -> dict[str, Path]:
    """The datasets of `specs` (codec:HEIGHTxWIDTH), written at once (each episode its own process) where missing."""
    roots, procs = {}, []
    for spec in specs:
        codec, size = spec.split(":")
        roots[spec] = root = workdir / f"{codec}_{size}"
        if not (root / "meta" / "info.json").exists():
            cmd = [
                sys.executable,
                "-m",
                "dlbench",
                "-q",
                "synth",
                str(root),
                "--overwrite",
                "--episodes",
                str(episodes),
            ]
            cmd += ["--length-min", str(frames), "--length-max", str(frames), "--codec", codec, "--content", "camera"]
            procs.append(
                subprocess.Popen(cmd + ["--camera", f"observation.images.front={size}", "--workers", str(episodes)])
            )
    if any(p.wait() for p in procs):
        sys.exit("writing a dataset failed (above)")
    return roots


def decoder(path: str, kind: str, codec: str | None = None):
    from torchcodec.decoders import VideoDecoder

    seek = "exact" if codec in EXACT_SEEK_CODECS else "approximate"  # as dlbench's decoder cache opens them
    if kind == "cpu":
        return VideoDecoder(path, device="cpu", seek_mode=seek, num_ffmpeg_threads=1)
    from torchcodec.decoders import set_cuda_backend

    with set_cuda_backend(kind):
        return VideoDecoder(path, device="cuda", seek_mode=seek)


def codes(frames: torch.Tensor) -> np.ndarray:
    """(episode, frame) of each frame's barcode, (-1, -1) where it is unreadable; only the barcode's corner is
    copied off the device."""
    side = barcode.GRID * barcode.cell_px(frames.shape[-2], frames.shape[-1])
    ep, fr, _cam, valid = barcode.read_batch(frames[:, :, :side, :side].cpu())
    out = np.stack([ep, fr], axis=1)
    out[~valid] = -1
    return out


def sync(kind: str) -> None:
    if kind != "cpu":
        torch.cuda.synchronize()


def sequential(path: str, kind: str, codec: str, n: int) -> tuple[float, np.ndarray]:
    dec = decoder(path, kind, codec)
    got = []
    t0 = time.perf_counter()
    for start in range(0, n, CHUNK):
        got.append(codes(dec.get_frames_in_range(start, min(n, start + CHUNK)).data))
    sync(kind)
    return n / (time.perf_counter() - t0), np.concatenate(got)


def random_access(path: str, kind: str, codec: str, indices: list[int]) -> tuple[float, np.ndarray]:
    dec = decoder(path, kind, codec)
    dec.get_frames_at([0])  # opened and set up: what follows is the requests alone
    got = []
    t0 = time.perf_counter()
    for i in indices:
        got.append(codes(dec.get_frames_at([i]).data))
    sync(kind)
    return (time.perf_counter() - t0) * 1000 / len(indices), np.concatenate(got)


def open_cost(path: str, kind: str, codec: str, times: int = 3) -> float:
    """Mean ms to create a decoder and get its first frame, once the process has decoded on this device."""
    out = []
    for _ in range(times):
        t0 = time.perf_counter()
        decoder(path, kind, codec).get_frames_at([0])
        sync(kind)
        out.append(time.perf_counter() - t0)
    return statistics.mean(out) * 1000


def memory_per_decoder_mb(path: str, kind: str, codec: str, count: int = 4) -> float:
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    held = [decoder(path, kind, codec) for _ in range(count)]
    for d in held:
        d.get_frames_at([0])
    torch.cuda.synchronize()
    return (free0 - torch.cuda.mem_get_info()[0]) / count / 2**20


def wrong(reference: np.ndarray, got: np.ndarray, indices) -> list[tuple[int, list[int]]]:
    return [(int(i), [int(v) for v in g]) for i, r, g in zip(indices, reference, got) if (r != g).any()]


FILE_COLUMNS = ["file", "codec", "frames", "decoder", "seq_fps", "random_ms", "open_ms", "wrong_seq", "wrong_random",
                "gpu_mb_per_decoder", "error"]  # fmt: skip
ENGINE_COLUMNS = ["file", "codec", "decoder", "processes", "access", "frames_per_s", "setup_ms", "errors"]


def per_file(report: Report, files: list[tuple[str, str, int]], kinds: list[str], seed: int) -> list[dict]:
    rows = []
    for path, codec, n in files:
        ref_fps, reference = sequential(path, "cpu", codec, n)
        unreadable = int((reference < 0).any(axis=1).sum())
        rng = random.Random(seed)
        indices = [rng.randrange(n) for _ in range(RANDOM_REQUESTS)]
        for kind in kinds:
            row = {"file": path, "codec": codec, "frames": n, "decoder": kind, "reference_unreadable": unreadable}
            try:
                fps, got = (ref_fps, reference) if kind == "cpu" else sequential(path, kind, codec, n)
                ms, got_r = random_access(path, kind, codec, indices)
                row.update(
                    seq_fps=round(fps, 1), random_ms=round(ms, 2), open_ms=round(open_cost(path, kind, codec), 1)
                )
                row["wrong_seq"] = wrong(reference, got, range(n))
                row["wrong_random"] = wrong(reference[indices], got_r, indices)
                if kind != "cpu":
                    row["gpu_mb_per_decoder"] = round(memory_per_decoder_mb(path, kind, codec), 1)
            except Exception as e:  # a decoder that cannot take this codec is a finding, not the end of the run
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            rows.append(row)
            counts = {"wrong_seq": len(row.get("wrong_seq", [])), "wrong_random": len(row.get("wrong_random", []))}
            report.row(**{k: v for k, v in row.items() if not k.startswith("wrong")} | counts)
    return rows


def _engine_worker(kind, files, phase_s, seed, barrier, queue):
    if kind != "cpu":
        torch.cuda.init()
    t0 = time.perf_counter()
    decs = {p: decoder(p, kind, c) for p, c, _ in files}
    for d in decs.values():
        d.get_frames_at([0])
    sync(kind)
    first_open_s = time.perf_counter() - t0
    rng = random.Random(seed)
    for path, _codec, n in files:
        for access in ("sequential", "random"):
            barrier.wait()
            frames, errors, start, pos = 0, [], time.perf_counter(), rng.randrange(n)
            while time.perf_counter() - start < phase_s:
                try:
                    if access == "sequential":
                        stop = min(n, pos + CHUNK)
                        frames += len(decs[path].get_frames_in_range(pos, stop).data)
                        pos = 0 if stop == n else stop  # from the end back to the start, as a next epoch reads
                    else:
                        decs[path].get_frames_at([rng.randrange(n)])
                        frames += 1
                except RuntimeError as e:  # a finding (file, where, what): the decoder is opened again
                    errors.append(f"frames {pos}-{stop}: {str(e).splitlines()[0][:120]}")
                    decs[path], pos = decoder(path, kind, _codec), 0
            sync(kind)
            queue.put((path, access, frames, time.perf_counter() - start, first_open_s, errors))


def engines(report: Report, files: list[tuple[str, str, int]], kind: str, processes: int, phase_s: float) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(processes), ctx.Queue()
    procs = [
        ctx.Process(target=_engine_worker, args=(kind, files, phase_s, seed, barrier, queue))
        for seed in range(processes)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=600) for _ in range(processes * len(files) * 2)]
    for p in procs:
        p.join()
    rows = []
    for path, codec, _n in files:
        for access in ("sequential", "random"):
            mine = [r for r in results if r[0] == path and r[1] == access]
            rows.append({
                "file": path, "codec": codec, "decoder": kind, "processes": processes, "access": access,
                "frames_per_s": round(sum(r[2] / r[3] for r in mine), 1),
                "errors": [e for r in mine for e in r[5]][:5],
                "setup_ms": round(statistics.median(r[4] for r in mine) * 1000, 1),  # device set-up, every file opened
            })  # fmt: skip
            report.row(**rows[-1])
    return rows


def main(argv=None) -> None:
    ap = parser(__doc__, workdir="/tmp/dlbench-nvdec")
    ap.add_argument("--sets", nargs="+", default=DEFAULT_SETS, help="codec:HEIGHTxWIDTH")
    ap.add_argument("--engine-sets", nargs="+", default=["h264:480x640", "h264:720x1280", "hevc:720x1280"])
    ap.add_argument("--decoders", default="cpu,beta,ffmpeg")
    ap.add_argument("--processes", default="1,4,16", help="NVDEC processes at once in the engines step")
    ap.add_argument("--cpu-processes", type=int, default=os.cpu_count())
    ap.add_argument("--phase-s", type=float, default=2.0)
    ap.add_argument("--skip", default="", help="steps to leave out: files,engines")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import torchcodec

    cuda = torch.cuda.is_available()
    kinds = [k for k in args.decoders.split(",") if k == "cpu" or cuda]
    gpu = torch.cuda.get_device_name() if cuda else "none (CPU rows only)"
    report = Report(args, FILE_COLUMNS, "nvdec")
    report.line(f"torch {torch.__version__}, torchcodec {torchcodec.__version__}, CUDA: {gpu}, {os.cpu_count()} cores")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    wanted = (args.sets if "files" not in args.skip else []) + (args.engine_sets if "engines" not in args.skip else [])
    roots = synth(workdir, list(dict.fromkeys(wanted)))
    files = {}
    from torchcodec.decoders import VideoDecoder

    for spec, root in roots.items():
        paths = sorted(str(p) for p in root.glob("videos/**/*.mp4"))[:1]
        files[spec] = [(p, spec.split(":")[0], VideoDecoder(p).metadata.num_frames) for p in paths]
    if "files" not in args.skip:
        per_file(report, [f for s in args.sets for f in files[s]], kinds, args.seed)
    if "engines" not in args.skip:
        chosen = [files[s][0] for s in args.engine_sets]
        report.table(ENGINE_COLUMNS)
        engines(report, chosen, "cpu", args.cpu_processes, args.phase_s)
        for kind in kinds:
            if kind != "cpu":
                for k in map(int, args.processes.split(",")):
                    engines(report, chosen, kind, k, args.phase_s)
    report.close()


if __name__ == "__main__":
    main()
