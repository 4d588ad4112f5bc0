"""Effective batch size: how many independent samples of the dataset a loader's batches are worth to training,
judged against the dataset itself (`checks.reference`), not against what the run happened to deliver.

Kish's design effect: the mean of B items drawn independently and uniformly from the dataset differs from the
dataset's mean by a variance of the items' variance over B. Items that are alike (neighbouring frames, one
episode's frames, windows sharing frames) or drawn from part of the dataset only (a stream holding a few episodes)
make batch means stray further, as if the batch held fewer items. On each of the reference's leading components c
(standardized features projected and whitened, `Reference.project`: unit variance for one item), with p_ic the
component of batch i's mean:

    effective batch size = 1 / (mean_c mean_i p_ic^2 - 1 / n_ref)

the second term being the reference's own sampling error (n_ref items; none where it holds the whole dataset).
The same over the mean of K consecutive batches is what an optimizer's momentum averages (`WINDOW_BATCHES`): an
average of K batches of independent items is worth K x B. Both are reported over the nominal size (B, K x B): 1
for uniform independent draws, less where the loader's order makes items alike or leaves part of the dataset out.

Features are what training sees (`item_features`): each camera's frame as an 8 x 8 grey thumbnail of area means
(the synthetic barcodes left out: their check bits change every frame) and every numeric feature; a window's
item is judged by its anchor (the frame and row nearest its own time). Pixels and numeric features are kept
apart: the reported value is the lower of the two groups. Leading components only (`reference.VAR_SHARE` of the
variance): sensor noise and flicker change every frame and would make neighbours look independent.

A figure needs batches: fewer than `MIN_SPANS` disjoint spans (of 1 or K batches) give NaN ("not shown"), and
each figure comes with its 90% interval from the spread over disjoint spans. Ranks are pooled into the global
batch (`pooled`): rank r's batch i and the other ranks' batch i are one optimizer step.

`distinct_frames` is the batch's distinct frames over the frames its items hold: windows of rows a window's spacing
apart share all but one of their frames, which training then sees twice in one step.
"""

from __future__ import annotations

import numpy as np

WINDOW_BATCHES = 10  # consecutive batches over which the window measure is taken (an optimizer's momentum horizon)
# disjoint spans a figure needs, over one batch and over WINDOW_BATCHES: fewer and it is not shown
MIN_SPANS = {1: 16, WINDOW_BATCHES: 4}
Z90 = 1.645  # a two-sided 90% interval
MAX_RATIO = 4.0  # batches closer to the dataset's mean than independent draws (without replacement): shown as this
THUMB = 8  # a thumbnail of THUMB x THUMB grey area means per frame
SAMPLES_PER_CELL = 4  # a thumbnail cell averages at least this many pixels on a side, strided beyond that: a
# full-frame mean of a batch of 2 x 240x320 takes ~80 ms of the main process on these cores, this ~2 ms
BARCODE_MARGIN_PX = 2  # the barcode's edges smear under lossy codecs
# integer and bookkeeping columns: not features a model learns from
NOT_FEATURES = ("index", "episode_index", "frame_index", "task_index", "timestamp")


def min_batches(window: int) -> int:
    """The batches a figure over `window` consecutive batches needs to be shown."""
    return MIN_SPANS.get(window, MIN_SPANS[WINDOW_BATCHES]) * window


def anchors(windows: dict) -> dict[str, int]:
    """Per windowed key (`resolve_windows`: frame offsets), the index of its anchor: the offset nearest 0, the
    earlier of two as near."""
    return {k: int(np.argmin(np.abs(np.asarray(v, np.int64)))) for k, v in windows.items() if len(v)}


def thumbnails(frames, barcode_px: int = 0) -> np.ndarray:
    """(B, C, H, W) frames (uint8 0..255 or floating 0..1) -> (B, THUMB^2) grey area means in 0..1; the top-left
    `barcode_px` square (a synthetic barcode, with its margin) left out of the means (a cell inside it reads 0).
    A grid of SAMPLES_PER_CELL samples a cell side is gathered first (on the GPU where the frames are, else by
    numpy), the means are numpy's: torch's threaded CPU kernels stall for ms on a busy host (0.8 ms a gather with a
    worker on the other core, against 0.02 in numpy), and this runs in the consumer once a batch."""
    h, w = frames.shape[-2], frames.shape[-1]
    step = max(1, min(h, w) // (THUMB * SAMPLES_PER_CELL))
    ys, xs = (np.arange(step // 2, n, step) for n in (h, w))
    if isinstance(frames, np.ndarray) or frames.device.type == "cpu":
        sub = np.asarray(frames)[..., ys[:, None], xs]  # a gather: views read slower
    else:
        import torch  # here: the report's side reads this module's figures without torch

        index = [torch.from_numpy(i).to(frames.device) for i in (ys, xs)]
        sub = frames.index_select(-2, index[0]).index_select(-1, index[1]).cpu().numpy()
    grey = sub.astype(np.float32).mean(axis=-3) / (1.0 if np.issubdtype(sub.dtype, np.floating) else 255.0)
    keep = np.ones(grey.shape[-2:], np.float32)
    if barcode_px:
        keep[: int((ys < barcode_px).sum()), : int((xs < barcode_px).sum())] = 0.0
    rows, cols = (np.floor(np.arange(THUMB) * n / THUMB).astype(np.int64) for n in grey.shape[-2:])

    def cells(x: np.ndarray) -> np.ndarray:
        return np.add.reduceat(np.add.reduceat(x, rows, axis=-2), cols, axis=-1)

    total, share = cells(grey * keep), cells(keep)
    means = np.where(share > 0, total / np.maximum(share, 1e-9), 0.0)
    return means.reshape(frames.shape[0], -1).astype(np.float64)


def item_features(
    batch: dict, anchors: dict[str, int] | None = None, barcode_px: dict[str, int] | None = None
) -> dict[str, dict[str, np.ndarray]]:
    """The batch's features by group and key: 'pixels' (each camera's anchor frame as a thumbnail) and 'numeric'
    (every numeric feature at the anchor row, bookkeeping and pads left out), each (B, D). `anchors`: per windowed
    key, the index of its anchor in the window's axis (1); `barcode_px`: per camera, the barcode square to leave
    out. A group the batch lacks is absent."""
    import torch

    anchors, barcode_px = anchors or {}, barcode_px or {}
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor) or key in NOT_FEATURES or key.endswith("_is_pad") or key[0] == "_":
            continue
        if value.dtype == torch.bool or value.ndim == 0:
            continue
        if value.ndim >= 4:  # (B, C, H, W) or (B, T, C, H, W): frames
            frames = value[:, anchors.get(key, 0)] if value.ndim == 5 else value
            out.setdefault("pixels", {})[key] = thumbnails(frames, barcode_px.get(key, 0))
        else:
            if key in anchors and value.ndim >= 2:  # (B, T, ...) of a windowed key: its anchor row
                value = value[:, anchors[key]]
            x = value.reshape(value.shape[0], -1).cpu().double().numpy()
            out.setdefault("numeric", {})[key] = x
    return out


class BatchMeans:
    """Each batch's mean projected on the reference's components (a few numbers a batch): all the measure needs."""

    def __init__(self, reference, anchors: dict[str, int] | None = None):
        self.reference = reference
        self.anchors = anchors or {}
        self.means: dict[str, list[np.ndarray]] = {}
        self.sizes: list[int] = []

    def add(self, batch: dict) -> None:
        if self.reference is None:
            return
        feats = item_features(batch, self.anchors, self.reference.barcode_px)
        projected = self.reference.project(feats)
        if not projected:
            return
        self.sizes.append(next(iter(projected.values())).shape[0])
        for group, p in projected.items():
            self.means.setdefault(group, []).append(p.mean(axis=0))

    def kept(self) -> dict[str, np.ndarray]:
        """Per group, the (N, k) means of the full-size batches (a last short batch would weigh otherwise)."""
        full = self.full_size()
        return {
            g: np.asarray([m for m, s in zip(means, self.sizes) if s == full])
            for g, means in self.means.items()
            if len(means) == len(self.sizes)
        }

    def full_size(self) -> int:
        return int(np.median(self.sizes)) if self.sizes else 0

    def effective(self, window: int = 1) -> dict[str, tuple[float, float, float]]:
        """(value, low, high) effective / nominal batch size per group over `window` consecutive batches."""
        c = self.reference.correction if self.reference is not None else 0.0
        return {g: effective_ratio(p, self.full_size(), window, c) for g, p in self.kept().items()}


def effective_ratio(means: np.ndarray, size: int, window: int = 1, correction: float = 0.0) -> tuple:
    """(value, low, high): effective / nominal size of `window` consecutive batches of `size` items, from each
    batch's mean projected on the reference's whitened components (N, k), with its 90% interval; NaNs with fewer
    than `min_batches(window)` batches. `correction`: the reference mean's own variance (1 / n_ref)."""
    nan = (float("nan"),) * 3
    means = np.asarray(means, np.float64)
    if means.ndim != 2 or size < 1 or len(means) < min_batches(window) or means.shape[1] == 0:
        return nan
    spans = len(means) // window
    disjoint = means[: spans * window].reshape(spans, window, -1).mean(axis=1)
    if window > 1:  # the point estimate over every run of `window` consecutive batches (sliding)
        cum = np.cumsum(np.vstack([np.zeros(means.shape[1]), means]), axis=0)
        sliding = (cum[window:] - cum[:-window]) / window
    else:
        sliding = means
    excess = float(np.mean(sliding**2)) - correction
    spread = float(np.std(np.mean(disjoint**2, axis=1), ddof=1)) / np.sqrt(spans)
    nominal = size * window

    def ratio(x: float) -> float:
        return MAX_RATIO if x <= 1.0 / (MAX_RATIO * nominal) else 1.0 / (nominal * x)

    return ratio(excess), ratio(excess + Z90 * spread), ratio(excess - Z90 * spread)


def pooled(per_rank: list[dict[str, list]], sizes: list[int]) -> dict[str, np.ndarray]:
    """The global batches' projected means from each rank's (`BatchMeans.kept`, as lists), rank r's batch i with
    the other ranks' batch i: the size-weighted mean over ranks, over the batches every rank has."""
    groups = set.intersection(*(set(r) for r in per_rank)) if per_rank else set()
    out = {}
    for g in groups:
        arrays = [np.asarray(r[g], np.float64) for r in per_rank]
        n = min(len(a) for a in arrays)
        if n == 0 or len({a.shape[1] for a in arrays}) != 1:
            continue
        weights = np.asarray(sizes, np.float64) / sum(sizes)
        out[g] = sum(w * a[:n] for w, a in zip(weights, arrays))
    return out


def lowest(figures: dict[str, tuple]) -> tuple:
    """The (value, low, high) of the group with the lowest value; NaNs where no group has a figure."""
    shown = [f for f in figures.values() if f[0] == f[0]]
    return min(shown, key=lambda f: f[0]) if shown else (float("nan"),) * 3


def distinct_frames(batches: list[np.ndarray], offsets: dict[str, list[int]], ep_from, ep_to) -> float:
    """Mean over batches of distinct frames over frames held (per camera: row + offset, held inside the row's
    episode, as LeRobot pads a window): 1 where no two items of a batch share a frame. `batches`: each batch's
    global rows; `offsets`: each camera's window in frames ([0] for a single frame). NaN without batches or
    cameras."""
    if not batches or not offsets:
        return float("nan")
    ep_from, ep_to = np.asarray(ep_from, np.int64), np.asarray(ep_to, np.int64)
    shares = []
    for rows in batches:
        rows = np.asarray(rows, np.int64)
        if not len(rows):
            continue
        eps = np.searchsorted(ep_from, rows, side="right") - 1
        lo, hi = ep_from[eps], ep_to[eps] - 1
        unique = total = 0
        for offs in offsets.values():
            frames = np.clip(rows[:, None] + np.asarray(offs, np.int64)[None, :], lo[:, None], hi[:, None])
            # a frame repeated inside one item (padding) is one frame to that item; count items holding each frame
            per_item = [np.unique(f) for f in frames]
            unique += len(np.unique(np.concatenate(per_item)))
            total += int(sum(len(f) for f in per_item))
        shares.append(unique / total if total else float("nan"))
    return float(np.nanmean(shares)) if shares else float("nan")
