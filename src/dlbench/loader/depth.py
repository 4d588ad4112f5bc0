"""Depth-map cameras: videos whose feature is marked `is_depth_map`, as LeRobot 0.6.1's depth encoder writes them.
Each frame is a 12-bit code per pixel (gray12le, lossless HEVC by default), a logarithmic (or linear) quantization
of depth between `video.depth_min` and `video.depth_max` metres. torchcodec hands out 8-bit RGB only, which would
drop four of the twelve bits, so these are decoded with PyAV (FFmpeg's decoders, as LeRobot decodes them) and
dequantized with LeRobot's arithmetic, step for step, to the same float32 values: millimetres (rounded, as LeRobot's
default `depth_output_unit="mm"`) or metres. Items hold them as LeRobot's do, float32 (1, H, W) a frame; they are
not divided by 255 and image transforms leave them alone."""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import torch

from ..errors import UserError
from .dataset_meta import DatasetMeta

DEPTH_QMAX = (1 << 12) - 1  # LeRobot's 12-bit codes
# LeRobot 0.6.1's defaults (lerobot.configs.video), used where a feature's info does not say
DEFAULTS = {"depth_min": 0.01, "depth_max": 10.0, "shift": 3.5, "use_log": True}
OPEN_FILES = 8  # containers a process keeps open
RESEEK_S = 0.5  # a wanted frame further ahead than this is sought, not decoded forward to
TOLERANCE_S = 1e-4  # a frame's timestamp within this of the wanted one (LeRobot's tolerance_s)


def quantization(feature: dict) -> dict:
    """The depth quantizer's parameters of a feature, from its info (`video.depth_min`, ...), else LeRobot's."""
    info = feature.get("info") or {}
    return {name: info.get(f"video.{name}", default) for name, default in DEFAULTS.items()}


def dequantize(codes: torch.Tensor, params: dict, unit: str) -> torch.Tensor:
    """12-bit codes (any integer dtype, (..., H, W)) to float32 depth in `unit` ("mm" or "m"), the same operations
    in the same order as LeRobot's `dequantize_depth`, so the floats agree bit for bit."""
    lo, hi, shift = float(params["depth_min"]), float(params["depth_max"]), float(params["shift"])
    if params["use_log"]:
        log_min, log_max = math.log(lo + shift), math.log(hi + shift)
        scale, offset = (log_max - log_min) / DEPTH_QMAX, log_min
    else:
        scale, offset = (hi - lo) / DEPTH_QMAX, lo
    buf = codes.to(dtype=torch.float32, copy=True)
    buf.mul_(scale).add_(offset)
    if params["use_log"]:
        buf.exp_().sub_(shift)
    buf.clamp_(lo, hi)
    if unit == "mm":
        buf.mul_(1000.0).round_().clamp_(0.0, 65535.0)
    return buf


class DepthReader:
    """The depth-map cameras of a dataset, decoded by timestamp. Picklable: a worker opens its own files."""

    def __init__(self, dmeta: DatasetMeta, unit: str = "mm"):
        self.dmeta, self.unit = dmeta, unit
        self.params = {cam: quantization(dmeta.info["features"][cam]) for cam in dmeta.depth_cameras}
        self.opened: OrderedDict[str, tuple] = OrderedDict()  # url -> (container, stream, file object or None)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "opened": OrderedDict()}

    def __del__(self) -> None:
        for container, _, handle in self.opened.values():
            container.close()
            if handle is not None:
                handle.close()

    def frames(self, cam: str, times: np.ndarray, eps: np.ndarray) -> torch.Tensor:
        """Camera `cam`'s depth at in-file `times` ((k, W) seconds: k items of W steps, each of episode `eps[i]`),
        as float32 (k, W, 1, H, W')."""
        codes: dict[tuple[str, float], np.ndarray] = {}
        urls = np.asarray([self.dmeta.video_url(cam, int(e)) for e in eps], dtype=object)
        for url in dict.fromkeys(urls.tolist()):
            wanted = np.unique(times[urls == url])
            for t, code in zip(wanted.tolist(), self._codes(url, wanted)):
                codes[url, t] = code
        stacked = np.stack([codes[url, t] for url, row in zip(urls.tolist(), times.tolist()) for t in row])
        out = dequantize(torch.from_numpy(stacked), self.params[cam], self.unit)
        return out.reshape(*times.shape, 1, *stacked.shape[-2:])

    def _open(self, url: str):
        import av

        from ..format.paths import is_remote, local_path

        if url in self.opened:
            self.opened.move_to_end(url)
            return self.opened[url][:2]
        handle = None
        try:
            if is_remote(url):
                import fsspec

                handle = fsspec.open(url, "rb").open()
                container = av.open(handle)
            else:
                container = av.open(local_path(url))
        except (OSError, av.FFmpegError) as e:
            raise UserError(f"{url}: cannot open the depth video ({e}); run `dlbench validate`") from None
        self.opened[url] = (container, container.streams.video[0], handle)
        while len(self.opened) > OPEN_FILES:
            old, _, old_handle = self.opened.popitem(last=False)[1]
            old.close()
            if old_handle is not None:
                old_handle.close()
        return self.opened[url][:2]

    def _codes(self, url: str, wanted: np.ndarray) -> list[np.ndarray]:
        """The 12-bit frames of `url` at the ascending times `wanted`: a seek to the keyframe before a wanted time
        (as LeRobot's PyAV decoder seeks), then decoding forward, across frames near enough to decode through."""
        import av

        container, stream = self._open(url)
        out, frames, current = [], None, None
        try:
            for t in wanted.tolist():
                if frames is None or current is None or t > current[0] + RESEEK_S:
                    container.seek(round(t / stream.time_base) - 1, backward=True, any_frame=False, stream=stream)
                    frames, current = container.decode(stream), None
                while current is None or current[0] < t - TOLERANCE_S:
                    frame = next(frames, None)
                    if frame is None:
                        break
                    if frame.pts is not None:
                        current = (float(frame.pts * stream.time_base), frame)
                if current is None or abs(current[0] - t) > TOLERANCE_S:
                    near = "none" if current is None else f"{current[0]:.6f} s"
                    raise UserError(
                        f"{url}: no depth frame at {t:.6f} s (nearest decoded: {near}); run `dlbench validate`"
                    )
                out.append(current[1].to_ndarray(format="gray12le"))
        except av.FFmpegError as e:
            raise UserError(f"{url}: the depth video does not decode ({e}); run `dlbench validate`") from None
        return out
