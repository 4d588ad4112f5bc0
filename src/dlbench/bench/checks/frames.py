"""What a benchmark checks about the frames it was handed: are they the frames the items claim to be?

Both checks work from the dataset's own metadata, not from the loader under test: an item's `episode_index` and
`index` (and the frame mode's window) say which frame of which episode each delivered frame must be.
- `BarcodeCheck` (synthetic datasets): every delivered frame's barcode must read (episode, frame, camera).
- `DecodeCheck` (any dataset): a sample of delivered frames, spread over the steady window, is compared with an
  independent decode: a fresh torchcodec decoder in this process, opened on the same file and asked for the frame's
  own timestamp (`from_timestamp + frame / fps`). Exact on the CPU; NVDEC's colour conversion differs from
  FFmpeg's by a few grey levels, so GPU-decoded frames pass within `NVDEC_TOLERANCE`. Depth maps are decoded afresh
  by a new PyAV reader at those timestamps and must be equal; images stored in the data files, against their rows'
  bytes found by `index`.
"""

from __future__ import annotations

import numpy as np
import torch

from ... import barcode
from ...format.meta import TOLERANCE_S
from ...loader.dataset_meta import DatasetMeta, resolve_windows

NVDEC_TOLERANCE = 8.0  # mean absolute difference, grey levels, of an NVDEC frame from FFmpeg's CPU decode


def _as_uint8(frames: torch.Tensor) -> torch.Tensor:
    if frames.is_floating_point():  # a loader returning floats in [0, 1], as LeRobotDataset does by default
        return (frames * 255).round().clamp(0, 255).to(torch.uint8)
    return frames


def _copy_uint8(frame: torch.Tensor, depth: bool = False) -> torch.Tensor:
    """One frame copied out as uint8 by numpy, on this thread: torch's copy runs on its intra-op threads, which spin
    waiting for a core the DataLoader workers hold (4 ms a 96x128 frame on 2 busy cores, against 0.03 ms), and the
    reservoir copies most of its frames early in a run, so a short pass measured the checks at 4x a run's cost."""
    a = frame.cpu().numpy()
    if depth:  # float32 millimetres (or metres): kept as they are
        return torch.from_numpy(a.copy())
    if np.issubdtype(a.dtype, np.floating):
        return torch.from_numpy(np.clip(np.rint(a * 255), 0, 255).astype(np.uint8))
    return torch.from_numpy(a.copy())


class _Expected:
    """For each camera of a batch: its frames as (N, C, H, W) and the (episode, frame in episode) each must be."""

    def __init__(self, dmeta: DatasetMeta, mode: str, deltas: dict | None = None):
        self.meta = dmeta
        self.windows = resolve_windows(mode, deltas, dmeta)

    def frames(self, batch: dict, cam: str) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        eps = batch["episode_index"].cpu().numpy().astype(np.int64)
        rows = batch["index"].cpu().numpy().astype(np.int64)
        frames = batch[cam]
        if cam in self.windows:
            offsets = self.windows[cam]
            q = rows[:, None] + offsets[None, :]
            lo, hi = self.meta.ep_from[eps][:, None], self.meta.ep_to[eps][:, None] - 1
            frame = (np.clip(q, lo, hi) - lo).reshape(-1)  # steps outside the episode repeat its edge frame
            return frames.reshape(-1, *frames.shape[-3:]), np.repeat(eps, len(offsets)), frame
        return frames, eps, rows - self.meta.ep_from[eps]


class BarcodeCheck:
    """Checks every delivered frame's barcode (synthetic datasets only)."""

    def __init__(self, dmeta: DatasetMeta, mode: str, deltas: dict | None = None):
        self.expected = _Expected(dmeta, mode, deltas)
        self.checked = self.wrong = 0

    def check(self, batch: dict) -> None:
        for cam_index, cam in enumerate(self.expected.meta.cameras):
            frames, expect_ep, expect_frame = self.expected.frames(batch, cam)
            ep, fr, cam_read, valid = barcode.read_batch(_as_uint8(frames))
            ok = valid & (ep == expect_ep) & (fr == expect_frame) & (cam_read == cam_index)
            self.checked += len(ok)
            self.wrong += int((~ok).sum())


class DecodeCheck:
    """Compares a uniform sample of delivered frames (`per_camera` per camera) with an independent decode.

    `offer(batch)` during the run keeps a reservoir sample of every frame delivered (a uniform sample over the
    warm-up and the windows; a frame is copied only when it enters the sample); `finish()` decodes and compares.
    """

    def __init__(
        self,
        dmeta: DatasetMeta,
        mode: str,
        per_camera: int,
        gpu: bool = False,
        seed: int = 0,
        deltas: dict | None = None,
    ):
        self.expected = _Expected(dmeta, mode, deltas)
        self.per_camera, self.gpu = per_camera, gpu
        self.rng = np.random.default_rng(seed)
        self.offered = {cam: 0 for cam in dmeta.frame_keys}
        self.depth = set(dmeta.depth_keys)
        self.depth_unit = "mm"  # the unit the loader under test dequantizes to (`bench.run` sets it)
        self.kept: dict[str, list[tuple[int, int, torch.Tensor]]] = {cam: [] for cam in dmeta.frame_keys}
        self.checked = self.wrong = 0
        self.worst_mean_abs_diff = 0.0
        self.problems: list[str] = []

    def offer(self, batch: dict) -> None:
        if self.per_camera <= 0:
            return
        k = self.per_camera
        for cam in self.expected.meta.frame_keys:
            frames, eps, frame_in_ep = self.expected.frames(batch, cam)
            pos = self.offered[cam] + np.arange(len(eps))  # each frame's place in the window's stream of frames
            slots = np.where(pos < k, pos, (self.rng.random(len(eps)) * (pos + 1)).astype(np.int64))
            kept = self.kept[cam]
            for i in np.nonzero(slots < k)[0]:  # reservoir sampling: a uniform sample of every frame offered
                item = (int(eps[i]), int(frame_in_ep[i]), _copy_uint8(frames[i], cam in self.depth))
                if slots[i] == len(kept):
                    kept.append(item)
                else:
                    kept[slots[i]] = item
            self.offered[cam] += len(eps)

    def finish(self) -> None:
        """Decode every kept frame independently and count the ones that differ."""
        from torchcodec.decoders import VideoDecoder

        dmeta = self.expected.meta
        for cam, kept in self.kept.items():
            if cam in dmeta.image_cameras:
                self._check_images(cam, kept)
                continue
            if cam in self.depth:
                self._check_depth(cam, kept)
                continue
            by_file: dict[str, list[tuple[int, int, torch.Tensor]]] = {}
            for ep, frame, got in kept:
                by_file.setdefault(dmeta.video_url(cam, ep), []).append((ep, frame, got))
            for url, items in by_file.items():
                times = np.array([dmeta.video_from[cam][ep] + frame / dmeta.fps for ep, frame, _ in items])
                with _open(url) as source:
                    decoder = VideoDecoder(source, seek_mode="exact", device="cpu")
                    # the frame shown at its timestamp, allowing for the rounding of stored timestamps
                    reference = decoder.get_frames_played_at((times + TOLERANCE_S).tolist())
                off = np.abs(reference.pts_seconds.numpy() - times)
                for (ep, frame, got), want, err in zip(items, reference.data, off):
                    self.checked += 1
                    if err > TOLERANCE_S:
                        self._wrong(cam, ep, frame, f"the file has no frame at its timestamp (nearest {err:.6f} s off)")
                    elif got.shape != want.shape:
                        self._wrong(cam, ep, frame, f"shape {tuple(got.shape)} != {tuple(want.shape)}")
                        continue
                    diff = float((got.int() - want.int()).abs().float().mean())
                    self.worst_mean_abs_diff = max(self.worst_mean_abs_diff, diff)
                    if diff > (NVDEC_TOLERANCE if self.gpu else 0.0):
                        self._wrong(cam, ep, frame, f"mean |difference| {diff:.2f} grey levels")

    def _check_images(self, cam: str, kept: list[tuple[int, int, torch.Tensor]]) -> None:
        """An image-stored camera's kept frames against its rows' bytes, read afresh from each data file and found
        by their `index` column (not by the loader's row arithmetic), decoded by Pillow."""
        from ...loader.columns import read_table
        from ...loader.images import decode_image, depth_in_unit

        dmeta = self.expected.meta
        by_file: dict[str, list[tuple[int, int, torch.Tensor]]] = {}
        for ep, frame, got in kept:
            by_file.setdefault(dmeta.data_file[ep], []).append((ep, frame, got))
        for rel, items in by_file.items():
            table = read_table(dmeta, rel, ["index", cam])
            index = table.column("index").to_numpy()
            images = table.column(cam).combine_chunks()
            for ep, frame, got in items:
                self.checked += 1
                row = int(dmeta.ep_from[ep]) + frame
                at = np.flatnonzero(index == row)
                if not len(at):
                    self._wrong(cam, ep, frame, f"{rel} has no row with index {row}")
                    continue
                want = torch.from_numpy(decode_image(images[int(at[0])]["bytes"].as_py()).copy()).permute(2, 0, 1)
                if cam in self.depth:
                    want = depth_in_unit(want.float(), dmeta, cam, self.depth_unit)
                if got.shape != want.shape or not torch.equal(got, want):
                    self._wrong(cam, ep, frame, f"differs from the image in {rel} at index {row}")

    def _check_depth(self, cam: str, kept: list[tuple[int, int, torch.Tensor]]) -> None:
        """A depth camera's kept frames against a fresh PyAV reader's, at each frame's own timestamp
        (`from_timestamp + frame / fps`), dequantized alike: equal, to the bit."""
        from ...loader.depth import DepthReader

        dmeta = self.expected.meta
        if not kept:
            return
        reader = DepthReader(dmeta, self.depth_unit)
        eps = np.array([ep for ep, _, _ in kept], np.int64)
        times = np.array([[dmeta.video_from[cam][ep] + frame / dmeta.fps] for ep, frame, _ in kept])
        try:
            fresh = reader.frames(cam, times, eps)[:, 0]
        finally:
            del reader
        for (ep, frame, got), want in zip(kept, fresh):
            self.checked += 1
            if got.shape != want.shape:
                self._wrong(cam, ep, frame, f"shape {tuple(got.shape)} != {tuple(want.shape)}")
            elif not torch.equal(got, want):
                diff = float((got - want).abs().max())
                self._wrong(cam, ep, frame, f"depth differs by up to {diff:g} {self.depth_unit}")

    def _wrong(self, cam: str, ep: int, frame: int, what: str) -> None:
        self.wrong += 1
        if len(self.problems) < 5:
            self.problems.append(f"{cam} episode {ep} frame {frame}: {what}")


class _open:
    """A local path as itself, a URL as an fsspec file object (torchcodec reads either)."""

    def __init__(self, url: str):
        self.url, self.handle = url, None

    def __enter__(self):
        from ...format.paths import is_remote, local_path

        if not is_remote(self.url):
            return local_path(self.url)
        import fsspec

        self.handle = fsspec.open(self.url, "rb").open()
        return self.handle

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            self.handle.close()
