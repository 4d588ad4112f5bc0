"""The shuffle score on constructed orders: uniform sampling scores 1, reading in order 0, episode blocks between."""

import numpy as np
import pytest

from dlbench.bench.checks.shuffle import quality, shuffle_score, spread_score

pytestmark = pytest.mark.unit

LENGTHS = np.random.default_rng(0).integers(60, 151, size=24)  # the default synthetic dataset's shape
EPISODE = np.repeat(np.arange(len(LENGTHS)), LENGTHS)  # episode of each item, in order


def score(batches):
    return shuffle_score([len(np.unique(EPISODE[b])) for b in batches], [len(b) for b in batches], LENGTHS)


def test_uniform_scores_one_sequential_zero_blocks_between():
    rng = np.random.default_rng(1)
    n = 16
    uniform = [rng.choice(len(EPISODE), n, replace=False) for _ in range(2000)]
    sequential = [np.arange(s, s + n) for s in range(0, len(EPISODE) - n, n)]
    # a streaming loader with 3 live episodes: each batch draws from 3 random episodes
    starts = np.concatenate([[0], np.cumsum(LENGTHS)[:-1]])
    blocked = []
    for _ in range(2000):
        live = rng.choice(len(LENGTHS), 3, replace=False)
        blocked.append(np.concatenate([starts[e] + rng.integers(0, LENGTHS[e], n // 3 + 1) for e in live])[:n])
    assert score(uniform) == pytest.approx(1.0, abs=0.03)
    assert score(sequential) == pytest.approx(0.0, abs=0.05)  # a few batches straddle two episodes
    assert 0.1 < score(blocked) < 0.3


def test_batches_that_cannot_tell_order_give_no_score():
    assert np.isnan(shuffle_score([1, 1], [1, 1], LENGTHS))  # one-item batches
    assert np.isnan(shuffle_score([1], [16], np.array([500])))  # a single episode


STARTS = np.concatenate([[0], np.cumsum(LENGTHS)[:-1]])
ENDS = STARTS + LENGTHS


def test_spread_is_one_for_uniform_draws_and_near_zero_for_neighbouring_frames():
    rng = np.random.default_rng(2)
    uniform = [rng.choice(len(EPISODE), 16, replace=False) for _ in range(2000)]
    # a stream: 4 live episodes, 4 consecutive frames of each per batch
    runs = []
    for _ in range(500):
        eps = rng.choice(len(LENGTHS), 4, replace=False)
        runs.append(np.concatenate([STARTS[e] + rng.integers(0, LENGTHS[e] - 4) + np.arange(4) for e in eps]))
    # the same, each episode's 4 items a third of the episode apart
    apart = [
        np.concatenate([STARTS[e] + (np.arange(4) * LENGTHS[e]) // 4 for e in rng.choice(24, 4)]) for _ in range(500)
    ]
    assert spread_score(uniform, STARTS, ENDS) == pytest.approx(1.0, abs=0.05)
    assert spread_score(runs, STARTS, ENDS) < 0.08  # 1.7 frames apart in episodes of ~105
    assert 0.7 < spread_score(apart, STARTS, ENDS) <= 1.0
    assert spread_score([np.array([STARTS[0], STARTS[1], STARTS[2]])], STARTS, ENDS) == 1.0  # no two of one episode
    assert np.isnan(spread_score([], STARTS, ENDS))


def test_quality_is_the_weaker_measure():
    assert quality(0.9, 0.2) == 0.2 and quality(0.3, 1.0) == 0.3
    assert quality(float("nan"), 0.4) == 0.4 and np.isnan(quality(float("nan"), float("nan")))
