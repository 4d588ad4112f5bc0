"""How well a loader shuffles: the distinct episodes per batch, normalized so that sequential order scores 0 and a
uniform sampler 1.

A batch of n items read in order holds one episode (1/n distinct per item); n items drawn uniformly at random from
the dataset hold, on average, sum_e 1 - (1 - p_e)^n distinct episodes, where p_e is episode e's share of the items.
The score of a run is (d - 1/n) / (u - 1/n), with d its mean distinct episodes per item over its batches and u the
uniform expectation per item. Loaders that keep a few episodes live at a time (streaming) land in between; a score
above 1 means batches are more diverse than random draws (sampling without replacement across episodes).

Distinct episodes miss one thing a training step feels: two items of one episode in a batch may be neighbouring
frames, near duplicates, or seconds apart. `spread_score` measures it: over every pair of items of one episode that
share a batch, the mean distance between their frames over what two frames drawn uniformly from that episode are
apart on average ((L^2 - 1) / 3L for L frames). Neighbours score near 0, uniform draws 1 (capped at 1); batches
with no two items of one episode score 1. Both are diagnostics: what a batch is worth to training is
`checks.effective`'s effective batch size; these two say why it is low (few episodes a batch, or neighbours).
"""

from __future__ import annotations

import numpy as np


def uniform_distinct(episode_lengths: np.ndarray, n: int) -> float:
    """Expected distinct episodes in n items drawn uniformly (with replacement) from episodes of these lengths."""
    p = np.asarray(episode_lengths, dtype=np.float64)
    p = p / p.sum()
    return float(np.sum(1.0 - (1.0 - p) ** n))


def shuffle_score(distinct: list[int], sizes: list[int], episode_lengths: np.ndarray) -> float:
    """The normalized shuffle randomness of batches with `distinct[i]` episodes among `sizes[i]` items."""
    distinct, sizes = np.asarray(distinct, dtype=np.float64), np.asarray(sizes, dtype=np.float64)
    scores, counted = [], 0
    for n in np.unique(sizes):
        pick = sizes == n
        floor = 1.0 / n
        top = uniform_distinct(episode_lengths, int(n)) / n
        if top - floor <= 1e-12:  # one-item batches, or a single episode: order cannot be told from batches
            continue
        scores.append((np.mean(distinct[pick] / n) - floor) / (top - floor) * pick.sum())
        counted += pick.sum()
    return float(np.sum(scores) / counted) if counted else float("nan")


def spread_score(batches: list[np.ndarray], ep_from: np.ndarray, ep_to: np.ndarray) -> float:
    """How far apart in time the items of one episode in a batch are (module docstring): `batches` holds each
    batch's global rows (`index`); `ep_from`/`ep_to` the episodes' row spans. 1.0 where no episode has two items in
    a batch; NaN without batches."""
    if not batches:
        return float("nan")
    ep_from, ep_to = np.asarray(ep_from, np.int64), np.asarray(ep_to, np.int64)
    total, pairs = 0.0, 0
    for rows in batches:
        rows = np.sort(np.asarray(rows, np.int64))
        eps = np.searchsorted(ep_from, rows, side="right") - 1
        for ep in np.unique(eps):
            r = rows[eps == ep]
            k = len(r)
            if k < 2:
                continue
            length = float(ep_to[ep] - ep_from[ep])
            uniform = (length * length - 1.0) / (3.0 * length)
            # sum over pairs of |r_i - r_j| for sorted r: sum_i r_i (2i - k + 1)
            gaps = float(np.sum(r * (2 * np.arange(k) - k + 1)))
            total += gaps / uniform if uniform > 0 else 0.0
            pairs += k * (k - 1) // 2
    return 1.0 if pairs == 0 else float(min(1.0, total / pairs))
