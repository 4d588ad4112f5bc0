"""The shuffle measures on constructed orders: effective batch size (uniform draws 1, alike items less), distinct
frames, and the diagnostics (distinct episodes per batch, spread)."""

import numpy as np
import pytest
import torch

from dlbench.bench.checks.effective import (
    MAX_RATIO,
    BatchMeans,
    distinct_frames,
    effective_ratio,
    item_features,
    min_batches,
    pooled,
    thumbnails,
)
from dlbench.bench.checks.reference import fit, sample_rows
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


def reference_of(features, n=1024, seed=0):
    rows = sample_rows(len(features), n, seed)
    return fit({"numeric": {"observation.state": features[rows]}}, len(features), {})


REFERENCE = reference_of(FEATURES)


def effective(batches, window=1, ref=REFERENCE, features=FEATURES):
    moments = BatchMeans(ref)
    for rows in batches:
        moments.add({"observation.state": torch.from_numpy(features[rows]), "index": torch.from_numpy(rows)})
    return moments.effective(window)["numeric"][0]


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


def test_a_stream_holding_part_of_the_dataset_is_judged_against_the_dataset():
    """Batches drawn uniformly from 6 of 24 episodes look uniform against the items they delivered (the measure
    centred on its own items read near 1), but their means stray from the dataset's: over ten batches they are
    worth a fraction of 160 items."""
    rng = np.random.default_rng(4)
    held = np.flatnonzero(np.isin(EPISODE, rng.choice(len(LENGTHS), 6, replace=False)))
    biased = [rng.choice(held, 16, replace=False) for _ in range(400)]
    own = reference_of(FEATURES[held])  # the old measure's view: centred on what was delivered
    own_view = BatchMeans(own)
    for rows in biased:
        own_view.add({"observation.state": torch.from_numpy(FEATURES[rows])})
    assert own_view.effective(10)["numeric"][0] > 0.7
    assert effective(biased, 10) < 0.3
    assert effective(biased) < 0.8


def test_effective_batch_has_an_interval_and_is_not_shown_without_batches():
    rng = np.random.default_rng(6)
    uniform = [rng.choice(len(EPISODE), 16, replace=False) for _ in range(min_batches(10))]
    moments = BatchMeans(REFERENCE)
    for rows in uniform:
        moments.add({"observation.state": torch.from_numpy(FEATURES[rows])})
    value, low, high = moments.effective(10)["numeric"]
    assert low < value < high and low < 1.0 < high
    value, low, high = moments.effective(1)["numeric"]
    assert low < value < high and high - low < 0.6
    # one span short of what a figure needs: not shown, over one batch and over ten
    assert all(np.isnan(effective_ratio(np.zeros((min_batches(w) - 1, 3)), 16, w)).all() for w in (1, 10))
    assert effective_ratio(np.zeros((40, 3)), 16, 10)[0] == MAX_RATIO  # means exactly the dataset's


def test_reference_sampling_error_is_taken_out():
    """A reference of 200 items has a mean off by 1/200 of a variance: uniform batches of 16 over ten batches
    (1/160) would read 0.56 without the correction."""
    rng = np.random.default_rng(8)
    big = rng.normal(size=(200_000, 4))
    ref = reference_of(big, n=200, seed=1)
    assert ref.correction == pytest.approx(1 / 200, rel=0.01)
    uniform = [rng.choice(len(big), 16, replace=False) for _ in range(400)]
    assert effective(uniform, 10, ref, big) == pytest.approx(1.0, abs=0.3)


def test_ranks_pool_into_the_global_batch():
    """Two ranks, each drawing from its own half of the episodes: each rank's batches are worth little against the
    dataset, their global batch (both halves) is uniform."""
    rng = np.random.default_rng(9)
    halves = [np.flatnonzero(EPISODE < 12), np.flatnonzero(EPISODE >= 12)]
    ranks = []
    for half in halves:
        m = BatchMeans(REFERENCE)
        for _ in range(200):
            m.add({"observation.state": torch.from_numpy(FEATURES[rng.choice(half, 8, replace=False)])})
        ranks.append(m)
    alone = ranks[0].effective(10)["numeric"][0]
    both = pooled([{g: p.tolist() for g, p in r.kept().items()} for r in ranks], [8, 8])["numeric"]
    assert alone < 0.5 and effective_ratio(both, 16, 10)[0] > 0.6


def test_features_are_area_means_without_the_barcode_and_every_numeric_feature():
    frames = torch.randint(0, 255, (4, 3, 48, 64), dtype=torch.uint8)
    window = torch.rand(4, 8, 3, 48, 64)
    batch = {"observation.images.a": frames, "observation.images.b": window, "observation.state": torch.rand(4, 6),
             "action": torch.rand(4, 2, 3), "index": torch.arange(4), "timestamp": torch.rand(4),
             "grip": torch.rand(4), "mode_id": torch.randint(0, 3, (4,)),
             "action_is_pad": torch.zeros(4, 2, dtype=torch.bool), "task": ["x"] * 4}  # fmt: skip
    f = item_features(batch, anchors={"observation.images.b": 7, "action": 1})
    assert {k: v.shape for k, v in f["pixels"].items()} == {
        "observation.images.a": (4, 64),
        "observation.images.b": (4, 64),
    }
    assert f["numeric"]["action"].shape == (4, 3) and np.allclose(f["numeric"]["action"], batch["action"][:, 1])
    assert set(f["numeric"]) == {"observation.state", "action", "grip", "mode_id"}  # scalar and int features too
    assert np.allclose(f["pixels"]["observation.images.b"], thumbnails(window[:, 7]))
    # area means: a frame of uint8 grey 51 and its float twin read the same, 0.2
    grey = thumbnails(torch.full((2, 3, 40, 40), 51, dtype=torch.uint8))
    assert np.allclose(grey, 0.2) and np.allclose(thumbnails(torch.full((2, 3, 40, 40), 0.2)), 0.2)
    # a barcode square that changes every frame is left out: two frames alike but for it read the same
    a, b = torch.full((1, 3, 96, 128), 100, dtype=torch.uint8), torch.full((1, 3, 96, 128), 100, dtype=torch.uint8)
    a[..., :64, :64], b[..., :64, :64] = 0, 255
    assert not np.allclose(thumbnails(a), thumbnails(b))
    assert np.allclose(thumbnails(a, 66)[0][thumbnails(a, 66)[0] > 0], 100 / 255)
    assert np.allclose(thumbnails(a, 66), thumbnails(b, 66))


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
