"""Effective batch size: how many independent samples a loader's batches are worth to training, measured on what it
delivered.

Kish's design effect, per feature: a batch of B items drawn independently and uniformly has a mean whose variance is
the items' variance over B. Items that are alike (neighbouring frames, one episode's frames at one moment of the
task, windows that share frames) make batch means vary more, as if the batch held fewer items. So

    effective batch size = sum_d 1 / sum_d (var(batch means)_d / var(items)_d)

over standardized features d (each feature's variance over every delivered item; features that do not vary are
left out), and the same over the mean of K consecutive batches: what an optimizer's momentum averages
(`WINDOW_BATCHES`; an average over K batches of independent items is worth K x B). Both are reported over the
nominal size (B, K x B): 1 for uniform independent draws, less where the loader's order makes items alike.

Features are what training sees: a small grey thumbnail of every frame of every camera (strided pixels, as the
barcode reader samples them) and the numeric features (state, action), kept apart: the reported value is the lower
of the two groups. Only each batch's mean is kept (a few KB), never the frames.

The estimate needs batches: fewer than `MIN_BATCHES` (or K + `MIN_BATCHES` for the window) give NaN. Its noise at N
batches is about sqrt(2 / N) of the value for one feature, less over many; a uniform sampler measures about 1 +/- 0.2
over 40 batches.

`distinct_frames` is the batch's distinct frames over the frames its items hold: windows of rows a window's spacing
apart share all but one of their frames, which training then sees twice in one step.
"""

from __future__ import annotations

import numpy as np
import torch

WINDOW_BATCHES = 10  # consecutive batches over which the window measure is taken (an optimizer's momentum horizon)
MIN_BATCHES = 8  # fewer batches than this (beyond the window) give no estimate
WINDOW_SPANS = 3  # ... and fewer than this many windows' worth of batches none over a window
THUMB = 8  # a thumbnail of THUMB x THUMB grey pixels per frame
# integer and bookkeeping columns: not features a model learns from
NOT_FEATURES = ("index", "episode_index", "frame_index", "task_index", "timestamp")


def thumbnails(frames: torch.Tensor) -> np.ndarray:
    """(B, ..., C, H, W) frames (any dtype) -> (B, frames x THUMB^2) grey pixels sampled on a strided grid."""
    h, w = frames.shape[-2], frames.shape[-1]
    ys = torch.linspace(h / (2 * THUMB), h - h / (2 * THUMB), THUMB).long().clamp(0, h - 1)
    xs = torch.linspace(w / (2 * THUMB), w - w / (2 * THUMB), THUMB).long().clamp(0, w - 1)
    grid = frames.index_select(-2, ys.to(frames.device)).index_select(-1, xs.to(frames.device))
    grey = grid.float().mean(dim=-3)  # over channels
    return grey.reshape(frames.shape[0], -1).cpu().numpy().astype(np.float64)


def batch_features(batch: dict) -> dict[str, np.ndarray]:
    """The batch's features by group: 'pixels' (every camera's frames as thumbnails) and 'numeric' (floating
    features such as observation.state and action); a group the batch lacks is absent."""
    pixels, numeric = [], []
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor) or key in NOT_FEATURES or key.endswith("_is_pad"):
            continue
        if value.ndim >= 4:  # (B, C, H, W) or (B, T, C, H, W): frames
            pixels.append(thumbnails(value))
        elif value.ndim in (2, 3) and value.is_floating_point():
            numeric.append(value.reshape(value.shape[0], -1).cpu().numpy().astype(np.float64))
    out = {}
    if pixels:
        out["pixels"] = np.concatenate(pixels, axis=1)
    if numeric:
        out["numeric"] = np.concatenate(numeric, axis=1)
    return out


class BatchMoments:
    """Running sums over every item and each batch's mean, per feature group: all the measure needs."""

    def __init__(self):
        self.n = 0
        self.sums: dict[str, np.ndarray] = {}
        self.squares: dict[str, np.ndarray] = {}
        self.means: dict[str, list[np.ndarray]] = {}
        self.sizes: list[int] = []

    def add(self, batch: dict) -> None:
        feats = batch_features(batch)
        if not feats:
            return
        size = next(iter(feats.values())).shape[0]
        self.sizes.append(size)
        self.n += size
        for group, x in feats.items():
            if group in self.sums and self.sums[group].shape != x.shape[1:]:
                continue  # a batch of another shape (should not happen within one run): left out of its group
            self.sums[group] = self.sums.get(group, 0.0) + x.sum(axis=0)
            self.squares[group] = self.squares.get(group, 0.0) + (x * x).sum(axis=0)
            self.means.setdefault(group, []).append(x.mean(axis=0))

    def effective(self, window: int = 1) -> dict[str, float]:
        """Effective / nominal batch size per group over the mean of `window` consecutive batches (module
        docstring); NaN where too few batches, or no feature varies."""
        out = {}
        full = int(np.median(self.sizes)) if self.sizes else 0
        for group, means in self.means.items():
            keep = [m for m, s in zip(means, self.sizes) if s == full]  # a last short batch would weigh otherwise
            out[group] = effective_ratio(
                np.asarray(keep), self.sums[group] / self.n, self.squares[group] / self.n, full, window
            )
        return out


def effective_ratio(means: np.ndarray, mu: np.ndarray, second: np.ndarray, size: int, window: int = 1) -> float:
    """Effective / nominal size of `window` consecutive batches of `size` items, from each batch's feature means
    (N, D), and the items' mean `mu` and mean square `second` (D,). NaN with fewer than MIN_BATCHES windows."""
    if len(means) < max(window + MIN_BATCHES - 1, WINDOW_SPANS * window if window > 1 else 0) or size < 1:
        return float("nan")
    var = second - mu * mu
    varying = var > 1e-9 * max(1.0, float(np.max(np.abs(second))))
    if not varying.any():
        return float("nan")
    if window > 1:  # the mean of each run of `window` consecutive batches (sliding)
        cum = np.cumsum(np.vstack([np.zeros(means.shape[1]), means]), axis=0)
        means = (cum[window:] - cum[:-window]) / window
    spread = np.mean((means[:, varying] - mu[varying]) ** 2, axis=0)
    relative = float(np.sum(spread / var[varying]))
    if relative <= 0:
        return float("nan")
    return float(varying.sum() / relative / (size * window))


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
