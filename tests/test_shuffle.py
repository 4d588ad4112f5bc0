"""The shuffle measures on constructed orders: effective batch size (uniform draws 1, alike items less), distinct
frames, and the diagnostics (distinct episodes per batch, spread)."""

import numpy as np
import pytest
import torch

from dlbench.bench.checks.effective import BatchMoments, batch_features, distinct_frames, effective_ratio
from dlbench.bench.checks.shuffle import shuffle_score, spread_score

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


# features of each row: an episode's own look, where in its task the frame is (the phase), and noise
RNG = np.random.default_rng(5)
PHASE = np.concatenate([np.arange(n) / n for n in LENGTHS])
FEATURES = (
    RNG.normal(size=(len(LENGTHS), 6))[EPISODE]
    + np.outer(np.sin(np.pi * PHASE), RNG.normal(size=6)) * 2
    + RNG.normal(size=(len(EPISODE), 6)) * 0.5
)


def effective(batches, window=1):
    moments = BatchMoments()
    for rows in batches:
        moments.add({"observation.state": torch.from_numpy(FEATURES[rows]), "index": torch.from_numpy(rows)})
    return moments.effective(window)["numeric"]


def lockstep(live: int, batches: int, rng) -> list[np.ndarray]:
    """A stream of `live` episodes read side by side from their starts, each batch 16 items of them at the same
    moment: what a pool that reads its episodes forward gives."""
    eps = rng.choice(len(LENGTHS), live, replace=False)
    out = []
    for b in range(batches):
        t = (b * 16 // live) / 100
        out.append(np.array([STARTS[e] + int(t * LENGTHS[e]) % LENGTHS[e] for e in rng.choice(eps, 16)]))
    return out


def test_effective_batch_is_one_for_uniform_draws_and_low_for_alike_items():
    rng = np.random.default_rng(3)
    uniform = [rng.choice(len(EPISODE), 16, replace=False) for _ in range(400)]
    assert effective(uniform) == pytest.approx(1.0, abs=0.15)
    assert effective(uniform, 10) == pytest.approx(1.0, abs=0.25)
    alike = lockstep(8, 400, rng)
    assert effective(alike) < 0.5  # 16 items of 8 episodes at one moment: about 3 independent ones
    assert effective(alike, 10) < 0.5 * effective(alike)  # ten batches in a row hold the same moments
    # the same episodes, their items at random moments: worth more
    scattered = [np.array([STARTS[e] + rng.integers(LENGTHS[e]) for e in rng.choice(24, 16)]) for _ in range(400)]
    assert effective(scattered) > 0.7


def test_effective_batch_needs_batches_and_features_that_vary():
    mu, second = np.zeros(3), np.ones(3)
    assert np.isnan(effective_ratio(np.zeros((5, 3)), mu, second, 16))  # too few batches
    assert np.isnan(effective_ratio(np.zeros((40, 3)), mu, mu, 16))  # nothing varies
    assert np.isnan(effective_ratio(np.zeros((12, 3)), mu, second, 16, window=10))  # too few windows


def test_batch_features_read_frames_and_numeric_features_only():
    frames = torch.randint(0, 255, (4, 3, 48, 64), dtype=torch.uint8)
    window = torch.rand(4, 8, 3, 48, 64)
    batch = {"observation.images.a": frames, "observation.images.b": window, "observation.state": torch.rand(4, 6),
             "action": torch.rand(4, 2, 3), "index": torch.arange(4), "timestamp": torch.rand(4),
             "action_is_pad": torch.zeros(4, 2, dtype=torch.bool), "task": ["x"] * 4}  # fmt: skip
    f = batch_features(batch)
    assert f["pixels"].shape == (4, 64 + 8 * 64) and f["numeric"].shape == (4, 6 + 6)
    # the thumbnail of a uniform grey frame is that grey
    grey = batch_features({"c": torch.full((2, 3, 40, 40), 7, dtype=torch.uint8)})["pixels"]
    assert np.all(grey == 7)


def test_distinct_frames_counts_frames_that_windows_share():
    starts, ends = np.array([0, 1000]), np.array([1000, 2000])
    assert distinct_frames([np.arange(0, 160, 10)], {"c": [0]}, starts, ends) == 1.0
    sarm = {"c": [-210, -180, -150, -120, -90, -60, -30, 0]}
    # two rows a window's spacing apart share 7 of their 8 frames: 9 distinct of 16
    assert distinct_frames([np.array([500, 530])], sarm, starts, ends) == pytest.approx(9 / 16)
    assert distinct_frames([np.array([500, 501])], sarm, starts, ends) == 1.0
    # padding at an episode's start repeats the first frame inside one item only: counted once for it
    assert distinct_frames([np.array([1000])], sarm, starts, ends) == 1.0
    assert np.isnan(distinct_frames([], sarm, starts, ends))
