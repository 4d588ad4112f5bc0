"""Map-style batches read remote video as planned from the files' sample tables (`decode.batch_fetch`): every frame
right, every read the decoders make inside the plan, fewer requests than reads as the decoders ask."""

import json
import math

import numpy as np
import pytest
import torch

from dlbench.decode import fetch
from dlbench.decode.batch_fetch import GAP_READ_THROUGH, BatchFetcher, _Held, merge_ranges, subtract_ranges
from dlbench.loader import DataLoader
from dlbench.loader.dataset_meta import DatasetMeta
from dlbench.loader.lookahead import AheadBatch
from dlbench.loader.map import LeRobotMapDataset
from dlbench.sources import apply_env

from .helpers import check_item, dlbench, isolate_s3_env, synth_cached, tiny_config, unbatch

pytestmark = pytest.mark.server  # the loopback S3 server (SeaweedFS)


def test_ranges_merge_when_close_and_held_bytes_are_not_fetched_again():
    assert merge_ranges([(50, 60), (0, 10), (12, 20), (5, 8)], gap=2) == [(0, 20), (50, 60)]
    assert merge_ranges([(0, 10), (13, 20)], gap=2) == [(0, 10), (13, 20)]
    held = _Held()
    held.add(10, b"x" * 10, stamp=1)  # [10, 20)
    held.add(30, b"y" * 5, stamp=1)  # [30, 35)
    assert held.missing(0, 40, stamp=2) == [(0, 10), (20, 30), (35, 40)]
    assert held.used == [2, 2]
    assert held.missing(12, 18, stamp=3) == [] and held.used == [3, 2]
    assert held.find(19) == 0 and held.find(20) == -1 and held.find(34) == 1
    # a fetch merged across held ranges replaces them: every byte is found in the one range holding it
    assert held.add(5, b"z" * 40, stamp=4) == 15 and held.starts == [5] and held.find(40) == 0
    # ranges in flight are not asked for again
    assert subtract_ranges([(0, 10), (20, 30)], [(5, 22), (25, 26)]) == [(0, 5), (22, 25), (26, 30)]
    assert subtract_ranges([(0, 10)], [(0, 10)]) == [] and subtract_ranges([(0, 10)], []) == [(0, 10)]


def _staged(s3, v30_h264_one_file, tmp_path, monkeypatch) -> str:
    isolate_s3_env(monkeypatch)
    url = "s3://dlbench-test/map-fetch"  # every episode of a camera in one video file, as in real datasets
    staged = dlbench("stage", str(v30_h264_one_file), url, "--marker", str(tmp_path / "staged.json"), spec=s3["fast"])
    assert staged.returncode == 0, staged.stderr
    return url


@pytest.mark.parametrize("mode", ["single", "sarm"])
def test_remote_batches_read_only_what_was_planned(s3, v30_h264_one_file, tmp_path, monkeypatch, mode):
    """Random batches from the loopback S3 server through a metering proxy: every frame's barcode right, every
    request a planned fetch (none of the decoders' reads fell outside the fetched ranges, though x264 reorders
    frames), at most one per camera file and batch (these files' GOPs lie closer than FFmpeg reads through), and no
    byte fetched twice (what was fetched stays held). (Their cost on real video: benchmarks/map_remote.py.)"""
    from dlbench.loopback.meter import MeterProcess

    url = _staged(s3, v30_h264_one_file, tmp_path, monkeypatch)
    # no sample data kept with the files' heads: these files are smaller than that, every frame's bytes then
    # come from the planned fetches alone
    monkeypatch.setattr(fetch, "PROBED_BYTES", 0)
    rng = np.random.default_rng(0)
    with MeterProcess(s3["fast"]["endpoint_url"]) as meter:
        apply_env({**s3["fast"], "endpoint_url": meter.url})
        ds = LeRobotMapDataset(url, return_uint8=True, mode=mode)
        ds.__getitems__([0])  # the files' indexes and decoders opened: what follows is the batches' own cost
        fetcher = ds.builder.batch_fetcher
        before, fetched_before, fell_back = meter.counts()["requests"], fetcher.requests, fetcher.fallback_reads
        batches = 12
        for _ in range(batches):
            for item in ds.__getitems__(rng.choice(len(ds), 8, replace=False).tolist()):
                check_item(ds, item)
        requests = meter.counts()["requests"] - before
    assert fetcher.fallback_reads == fell_back, vars(fetcher)
    assert 0 < requests == fetcher.requests - fetched_before <= batches * len(ds.meta.cameras)
    video_bytes = sum((v30_h264_one_file / ds.meta.video_file[cam][0]).stat().st_size for cam in ds.meta.cameras)
    assert fetcher.bytes <= video_bytes


def test_ranges_go_by_plain_http_and_a_url_that_fails_is_dropped(s3, v30_h264_one_file, tmp_path, monkeypatch):
    """The planned ranges go to presigned URLs by plain HTTP (a fraction of s3fs's CPU a request); a URL that stops
    serving (expired, revoked) fails over to s3fs for its ranges, the frames stay right, and it is not used again."""
    url = _staged(s3, v30_h264_one_file, tmp_path, monkeypatch)
    apply_env(s3["fast"])
    ds = LeRobotMapDataset(url, return_uint8=True)
    rng = np.random.default_rng(3)
    for item in ds.__getitems__(rng.choice(len(ds), 8, replace=False).tolist()):
        check_item(ds, item)
    fetcher = ds.builder.batch_fetcher
    files = list(fetcher._direct)
    assert files and all("Signature=" in fetcher._direct[f][0] for f in files), fetcher._direct  # presigned
    for f in files:
        fetcher._direct[f] = ("http://127.0.0.1:9/gone", {}, math.inf)
    fetcher._held.clear()  # so that the next batch fetches
    requests = fetcher.requests
    for item in ds.__getitems__(rng.choice(len(ds), 8, replace=False).tolist()):
        check_item(ds, item)
    assert fetcher.requests > requests and all(fetcher._direct[f][0] is None for f in files)


def test_held_bytes_stay_within_budget_and_frames_stay_right(s3, v30_h264_one_file, tmp_path, monkeypatch):
    url = _staged(s3, v30_h264_one_file, tmp_path, monkeypatch)
    apply_env(s3["fast"])
    ds = LeRobotMapDataset(url, return_uint8=True)
    budget = 20 * 2**10
    ds.builder._batch_fetcher = None
    _ = ds.builder.cache  # this process's fetcher, then a small budget for it
    ds.builder.batch_fetcher.held_bytes = budget
    rng = np.random.default_rng(1)
    for _ in range(10):
        for item in ds.__getitems__(rng.choice(len(ds), 6, replace=False).tolist()):
            check_item(ds, item)
        fetcher = ds.builder.batch_fetcher
        current = sum(
            len(c) for h in fetcher._held.values() for c, u in zip(h.chunks, h.used) if u == fetcher._stamp
        )  # the batch just decoded is kept whole, whatever the budget
        assert fetcher._bytes_held <= max(budget, current)
        assert fetcher._bytes_held == sum(len(c) for h in fetcher._held.values() for c in h.chunks)


def test_remote_batches_through_dataloader_workers_are_right(s3, v30_h264_one_file, tmp_path, monkeypatch):
    url = _staged(s3, v30_h264_one_file, tmp_path, monkeypatch)
    apply_env(s3["fast"])
    ds = LeRobotMapDataset(url, return_uint8=True, mode="sarm")
    seen = []
    loader = DataLoader(ds, batch_size=8, num_workers=2, sampler=torch.utils.data.RandomSampler(ds, num_samples=64))
    for batch in loader:
        for item in unbatch(batch):
            check_item(ds, item)
            seen.append(int(item["index"]))
    assert len(seen) == 64


def test_a_batch_equals_its_items_built_alone(v30_h264):
    """`__getitems__` (a batch built together) gives exactly the items `__getitem__` gives one by one."""
    ds = LeRobotMapDataset(str(v30_h264), return_uint8=True, mode="sarm")
    rows = [5, len(ds) - 1, 0, 5, 37]  # out of order, a repeat, both ends
    for got, row in zip(ds.__getitems__(rows), rows):
        want = ds.builder.build(row)
        assert got.keys() == want.keys()
        for key in want:
            if isinstance(want[key], torch.Tensor):
                assert torch.equal(got[key], want[key]), key
            else:
                assert got[key] == want[key], key
    with pytest.raises(IndexError):
        ds.__getitems__([0, len(ds)])


def test_a_local_dataset_has_no_batch_fetcher(v30_h264):
    ds = LeRobotMapDataset(str(v30_h264), return_uint8=True)
    ds[0]
    assert ds.builder.batch_fetcher is None and isinstance(BatchFetcher(), BatchFetcher)


@pytest.fixture(scope="module")
def v30_av1_one_file(tmp_path_factory):
    """AV1 as LeRobot records it, camera-like at 480x640 (at the tiny default size no frame's decoding read past it):
    every episode of a camera in one file."""
    from dlbench.convert.run import run as convert_run
    from dlbench.synth import Camera

    tmp = tmp_path_factory.mktemp("av1one")
    cfg = tiny_config(
        codec="av1", content="camera", episodes=3, length_min=20, length_max=30, cameras=(Camera("cam", 480, 640),)
    )
    v21 = synth_cached(cfg, tmp / "v21")
    return convert_run(str(v21), tmp / "v30", workers=1, progress=False)


def _stage_av1(s3, dataset, tmp_path, monkeypatch) -> str:
    isolate_s3_env(monkeypatch)
    url = "s3://dlbench-test/plan-av1"
    staged = dlbench("stage", str(dataset), url, "--marker", str(tmp_path / "staged.json"), spec=s3["fast"])
    assert staged.returncode == 0, staged.stderr
    apply_env(s3["fast"])
    return url


def _random_batches(url: str, monkeypatch, gap: int = 0) -> tuple[BatchFetcher, int]:
    """8 random batches of 6, every frame checked, ranges fetched as planned (merged across gaps under `gap`; no
    sample data kept with the heads); the fetcher and its reads outside the plan over the batches."""
    monkeypatch.setattr(fetch, "PROBED_BYTES", 0)
    ds = LeRobotMapDataset(url, return_uint8=True)
    ds.__getitems__([0])
    fetcher = ds.builder.batch_fetcher
    fetcher.gap, before = gap, fetcher.fallback_reads
    rng = np.random.default_rng(2)
    for _ in range(8):
        for item in ds.__getitems__(rng.choice(len(ds), 6, replace=False).tolist()):
            check_item(ds, item)
    return fetcher, fetcher.fallback_reads - before


def test_each_frame_ends_at_its_own_packet_and_stays_right(s3, v30_av1_one_file, tmp_path, monkeypatch):
    """FFmpeg's libdav1d reads the packet after the frame it returns (often the next GOP's keyframe, the largest
    there is). With the stream ended there instead, it drains and returns the frame: 48 random frames right, not one
    read outside the plan, and the decoders' reads past their frames ended. (Ranges closer than FFmpeg reads
    through are merged, as always: after an ended read its reader cannot read through a gap.)"""
    url = _stage_av1(s3, v30_av1_one_file, tmp_path, monkeypatch)
    fetcher, outside = _random_batches(url, monkeypatch, gap=GAP_READ_THROUGH)
    seen = (outside, fetcher.ended_reads, fetcher._read_on)
    assert outside == 0 and fetcher.ended_reads > 0 and not fetcher._read_on, seen


def test_a_plan_short_of_a_frames_packet_is_decoded_again_reading_on(s3, v30_av1_one_file, tmp_path, monkeypatch):
    """A plan that misreads the layout (here: each frame's own packet left out) ends the stream before the frame:
    the decode fails, and the file is decoded again reading past the plan. Every frame stays right."""
    url = _stage_av1(s3, v30_av1_one_file, tmp_path, monkeypatch)
    planned = fetch.FileIndex.frame_ranges

    def short(self, frames, reorder=fetch.REORDER_SAMPLES, after=fetch.NEXT_SAMPLES):
        lo, _ = planned(self, frames, reorder, after)
        return lo, self.starts[self.order[np.clip(frames, 0, len(self.order) - 1)]]  # up to the frame's packet

    monkeypatch.setattr(fetch.FileIndex, "frame_ranges", short)
    fetcher, outside = _random_batches(url, monkeypatch)
    assert fetcher._read_on and outside > 0, vars(fetcher)


def test_the_next_batch_is_fetched_during_this_one_and_then_costs_no_round_trip(
    s3, v30_h264_one_file, tmp_path, monkeypatch
):
    """A batch that names the next (`AheadBatch`) starts that one's ranges after its own; the next batch then finds
    every range it needs held or in flight and starts none itself. Frames right throughout, every request metered
    is one the fetcher counted."""
    from dlbench.loopback.meter import MeterProcess

    url = _staged(s3, v30_h264_one_file, tmp_path, monkeypatch)
    monkeypatch.setattr(fetch, "PROBED_BYTES", 0)  # every frame's bytes from the planned fetches
    rng = np.random.default_rng(5)
    with MeterProcess(s3["fast"]["endpoint_url"]) as meter:
        apply_env({**s3["fast"], "endpoint_url": meter.url})
        ds = LeRobotMapDataset(url, return_uint8=True, mode="sarm")
        batches = [rng.choice(len(ds), 8, replace=False).tolist() for _ in range(6)]
        ds.__getitems__([0])
        fetcher = ds.builder.batch_fetcher
        before = meter.counts()["requests"], fetcher.requests
        before_ranges = fetcher.ranges_now + fetcher.ranges_ahead
        for k, batch in enumerate(batches):
            now = fetcher.ranges_now
            following = batches[k + 1] if k + 1 < len(batches) else None
            for item in ds.__getitems__(AheadBatch(batch, following)):
                check_item(ds, item)
            assert (fetcher.ranges_now > now) == (k == 0), k  # only the first batch fetched on demand
        requests = meter.counts()["requests"] - before[0]
    # (these small files are soon held whole: the later batches need little or nothing new)
    assert fetcher.ranges_ahead > 0 and not any(fetcher._pending.values())
    assert requests == fetcher.requests - before[1] == fetcher.ranges_now + fetcher.ranges_ahead - before_ranges


def test_a_remote_bench_run_fetches_ahead_across_epochs_with_every_frame_right(
    s3, v30_h264_one_file, tmp_path, monkeypatch
):
    """bench-run's dlbench_map from S3 with one worker (batches named ahead): every frame checked right over several
    epochs, and each epoch in a new order (set_epoch reaches the sampler under the lookahead batches)."""
    url = _staged(s3, v30_h264_one_file, tmp_path, monkeypatch)
    out = tmp_path / "run"
    run = dlbench(
        "bench-run", "--root", url, "--out-dir", str(out), "--loader", "dlbench_map", "--num-workers", "1",
        "--batch-size", "4", "--duration-s", "4", "--warmup-s", "0", "--repeats", "1", "--probe-samples", "0",
        spec=s3["fast"],
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rec = json.loads((out / "rank0of1.json").read_text())
    assert rec["config"]["lookahead"] and rec["metrics"]["frames_wrong"] == 0 and rec["metrics"]["frames_verified"]
    samples, n = np.load(out / "rank0of1.samples.npy"), DatasetMeta.load(str(v30_h264_one_file)).num_frames
    assert len(samples) > 2 * n, (len(samples), n)  # the window crossed epochs
    assert not np.array_equal(samples[:-n], samples[n:])  # the same order every epoch: set_epoch never arrived
