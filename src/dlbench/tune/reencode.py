"""Re-encoding as a lever beside the loader's knobs: what the dataset's videos in an encoding made for random access
would give the answer, and what making it would cost.

A few seconds of each camera's video are re-encoded at the probe's candidates (`encoding.probe`: every frame or one
in two a keyframe, the decoder's costliest tools off) and decoded as each loader reads (a random frame for the map
loader, in order for the stream). A worker's decoding shrinks by that ratio (the calibrated worker's CPU per sample
less the probe's decode of the source for each of its frames) and the model predicts each loader's best again;
the answer's measured frames/s is scaled by the model's ratio for its loader (the model's own bias cancels). The
cost: FFmpeg's time for the clips, scaled to the dataset's frames, and the bytes against the source's. Predicted,
not proven: `dlbench reencode` then `dlbench tune` of the copy proves it.
"""

from __future__ import annotations

from dataclasses import replace

from ..encoding import probe
from ..errors import UserError
from .search import LOADERS, Candidate, ranked

WORTH = 1.2  # a re-encoding predicted below this gain over the answer is reported, not recommended


def lever(root: str, cal, proven: list[Candidate], constraints: dict, memory_mb: float | None, frames: int,
          frame_pixels: int) -> dict:  # fmt: skip
    """The re-encoding lever beside `proven` (the proofs that met the floor; the fastest is the answer): the
    encoding, its quality and bytes, the encode time, each dlbench loader's predicted gain, and each proven loader's
    best frames/s scaled by it; whether the best of those beats the answer by WORTH. A dict with `note` alone where
    nothing qualifies or the probe cannot read a video. `frame_pixels`: one frame of every camera, for the clip."""
    try:
        # a shorter clip for larger frames: the probe's cost (encodes, PSNR, random seeks) grows with the pixels
        probes = probe.probe(root, seconds=min(probe.CLIP_S, max(1.0, probe.CLIP_S * 3e5 / max(frame_pixels, 1))))
    except UserError as e:
        return {"note": f"not probed: {e}"}
    choice = probe.best(probes)
    if choice is None:
        return {"note": f"no candidate encoding keeps {probe.MIN_PSNR_DB:g} dB PSNR on every camera"}
    enc, _, size, psnr = choice
    mine = [p for p in probes if p.encoding == enc]
    gains = {lo: g for lo in LOADERS if (g := _gain(cal, lo, mine, constraints, memory_mb)) is not None}
    # FFmpeg's time per frame on the clip, every camera's frames: the whole dataset at one process
    encode_s = sum(p.encode_s / max(p.clip_frames, 1) for p in mine) * frames
    out = {
        "encoding": enc.label(),
        "reencode": {"codec": enc.codec, "gop": enc.gop, "crf": enc.crf, "fast_decode": enc.fast_decode},
        "psnr_db": round(psnr, 1),
        "bytes_vs_source": round(size, 2),
        "encode_s_one_process": round(encode_s),
        # a camera's frame, the source's and the candidate's
        "random_ms_per_frame": [round(_mean(mine, "source_ms_per_frame"), 2), round(_mean(mine, "ms_per_frame"), 2)],
        "order_ms_per_frame": [
            round(_mean(mine, "source_order_ms_per_frame"), 2),
            round(_mean(mine, "order_ms_per_frame"), 2),
        ],
        "predicted_gain": {lo: round(g, 2) for lo, g in gains.items()},
        "command": _command(root, enc),
    }
    best: dict[str, float] = {}
    for c in proven:
        if c.loader in gains:
            best[c.loader] = max(best.get(c.loader, 0.0), c.measured["frames_per_s_node"])
    if best:
        answer = max(best.values())
        after = {lo: fps * gains[lo] for lo, fps in best.items()}
        top = max(after, key=after.get)
        out["predicted_fps"] = {lo: round(v) for lo, v in after.items()}
        out["answer_fps"] = round(answer)
        out["best_after"] = top
        out["bigger_lever"] = after[top] >= WORTH * answer
    return out


def _gain(cal, loader: str, mine: list, constraints: dict, memory_mb: float | None) -> float | None:
    """The model's ratio of `loader`'s best predicted frames/s with its worker's decoding cut as the probe measured,
    to the same without; None where the loader is not calibrated."""
    cost = cal.cost(loader, constraints["mode"])
    if cost is None:
        return None
    # a map worker seeks to each frame; the stream decodes in reading order
    src, new = ("source_ms_per_frame", "ms_per_frame") if loader == "dlbench_map" else (
        "source_order_ms_per_frame", "order_ms_per_frame")  # fmt: skip
    src_ms, new_ms = _mean(mine, src), _mean(mine, new)
    if src_ms <= 0:
        return None
    decode_s = min(cost.frames_per_sample * src_ms / 1000, cost.worker_cpu_s * 0.95)  # never all of the worker
    lighter = replace(cal, costs=[c.lighter(decode_s * (1 - new_ms / src_ms)) if c is cost else c for c in cal.costs])
    args = (constraints["mode"], constraints["batch_size"], constraints["cores"], constraints["nodes"], memory_mb)
    before, after = ranked(cal, *args, loaders=(loader,)), ranked(lighter, *args, loaders=(loader,))
    if not before or not after:
        return None
    return after[0].predicted_fps / before[0].predicted_fps


def _mean(probes: list, field: str) -> float:
    return sum(getattr(p, field) for p in probes) / len(probes)


def _command(root: str, enc) -> str:
    name = f"{str(root).rstrip('/')}_{enc.codec}g{enc.gop}"
    fast = " --fast-decode" if enc.fast_decode else ""
    return (f"dlbench reencode {root} {name} --codec {enc.codec} --gop {enc.gop} --crf {enc.crf}{fast} --workers 2 "
            f"&& dlbench tune {name}")  # fmt: skip
