"""How well a loader shuffles: the distinct episodes per batch, normalized so that sequential order scores 0 and a
uniform sampler 1.

A batch of n items read in order holds one episode (1/n distinct per item); n items drawn uniformly at random from
the dataset hold, on average, sum_e 1 - (1 - p_e)^n distinct episodes, where p_e is episode e's share of the items.
The score of a run is (d - 1/n) / (u - 1/n), with d its mean distinct episodes per item over its batches and u the
uniform expectation per item. Loaders that keep a few episodes live at a time (streaming) land in between; a score
above 1 means batches are more diverse than random draws (sampling without replacement across episodes).
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
