"""dlbench's v3.0 output against LeRobot 0.6.1 (the reference readers), run in the peer environment."""

import inspect
import json
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from dlbench import peer
from dlbench.bench.adapters import lerobot_delta_timestamps
from dlbench.errors import UserError
from dlbench.format import meta
from dlbench.loader import LeRobotMapDataset
from dlbench.tune import trainer
from dlbench.validate import validate

from .helpers import RECORDED_CAMERAS, RECORDED_DEPTH_CAMERAS, made_once, peer_tier

pytestmark = peer_tier("Python 3.12 and the package index")


def test_lerobot_reads_every_frame_of_dlbench_output(v30_h264, v21_h264, tmp_path):
    out = tmp_path / "dump.npz"
    peer.run_peer("lerobot_dump", str(v30_h264), str(out), timeout=600)
    dump = np.load(out)
    rows = [r for p in sorted(v21_h264.glob("data/*/*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert len(dump["index"]) == len(rows)
    np.testing.assert_array_equal(dump["index"], [r["index"] for r in rows])
    np.testing.assert_array_equal(dump["episode_index"], [r["episode_index"] for r in rows])
    np.testing.assert_array_equal(dump["frame_index"], [r["frame_index"] for r in rows])
    np.testing.assert_array_equal(
        dump["observation.state"], np.array([r["observation.state"] for r in rows], np.float32)
    )
    np.testing.assert_array_equal(dump["action"], np.array([r["action"] for r in rows], np.float32))
    for cam_index, cam in enumerate(meta.video_keys(meta.read_info(str(v30_h264)))):
        codes = dump[f"barcode/{cam}"]
        assert codes[:, 3].all(), f"{cam}: LeRobot returned frames without an intact barcode"
        np.testing.assert_array_equal(codes[:, 0], dump["episode_index"])
        np.testing.assert_array_equal(codes[:, 1], dump["frame_index"])
        assert (codes[:, 2] == cam_index).all()


@pytest.mark.parametrize("codec", ["hevc", "h264"])
def test_lerobot_reads_every_frame_of_a_reencoded_dataset(v30_h264, tmp_path, codec):
    """`dlbench reencode` output (closed GOPs of 5) read by LeRobot 0.6.1: every frame at every index is the one
    the source holds there (its barcode)."""
    from dlbench.encoding.options import Encoding
    from dlbench.encoding.reencode import reencode

    dst = tmp_path / "reencoded"
    reencode(str(v30_h264), dst, Encoding(codec, gop=5, crf=20), workers=2)
    out = tmp_path / "dump.npz"
    peer.run_peer("lerobot_dump", str(dst), str(out), timeout=600)
    dump = np.load(out)
    assert len(dump["index"]) == meta.read_info(str(v30_h264))["total_frames"]
    for cam_index, cam in enumerate(meta.video_keys(meta.read_info(str(dst)))):
        codes = dump[f"barcode/{cam}"]
        assert codes[:, 3].all(), f"{cam}: LeRobot returned frames without an intact barcode"
        np.testing.assert_array_equal(codes[:, 0], dump["episode_index"])
        np.testing.assert_array_equal(codes[:, 1], dump["frame_index"])
        assert (codes[:, 2] == cam_index).all()


def test_lerobot_converter_output_has_the_same_episodes(v30_h264, v21_h264, tmp_path):
    copy = tmp_path / "lerobot"
    shutil.copytree(v21_h264, copy)
    peer.lerobot_convert(copy, timeout=600)
    assert meta.read_info(str(copy))["codebase_version"] == "v3.0"
    ours, theirs = LeRobotMapDataset(str(v30_h264), return_uint8=True), LeRobotMapDataset(str(copy), return_uint8=True)
    assert len(ours) == len(theirs)
    ours_eps = meta.read_episodes_v30(str(v30_h264)).to_pylist()
    theirs_eps = meta.read_episodes_v30(str(copy)).to_pylist()
    for a, b in zip(ours_eps, theirs_eps):
        assert (a["episode_index"], a["length"], a["tasks"]) == (b["episode_index"], b["length"], b["tasks"])
        assert (a["dataset_from_index"], a["dataset_to_index"]) == (b["dataset_from_index"], b["dataset_to_index"])
    for i in range(len(ours)):  # same rows and the same decoded frames, item by item
        x, y = ours[i], theirs[i]
        for key in ("index", "episode_index", "frame_index", "observation.state", "action"):
            assert np.array_equal(np.asarray(x[key]), np.asarray(y[key])), (i, key)
        for cam in ours.meta.cameras:
            assert np.array_equal(x[cam].numpy(), y[cam].numpy()), (i, cam)


def test_dlbench_reads_a_dataset_recorded_by_lerobot(lerobot_recorded_v30):
    root = str(lerobot_recorded_v30)
    info = meta.read_info(root)
    assert info["codebase_version"] == "v3.0"
    cams = [f"observation.images.{name}" for name in RECORDED_CAMERAS]
    assert sorted(meta.video_keys(info)) == sorted(cams)
    assert info["total_episodes"] == 3
    report = validate(root)
    assert report["ok"] and report["frames_decoded"] > 0, report
    assert report["frames_decoded"] == 2 * 3 * len(cams)  # first and last frame of every episode and camera
    ds = LeRobotMapDataset(root, return_uint8=True)
    assert len(ds) == info["total_frames"] == report["frames"]
    lengths = meta.read_episodes_v30(root, columns=["length"]).column("length").to_pylist()
    assert all(10 <= n <= 25 for n in lengths) and sum(lengths) == len(ds)
    for i in range(len(ds)):
        item = ds[i]
        assert int(item["index"]) == i
        assert np.asarray(item["observation.state"]).shape == (6,)
        assert np.asarray(item["action"]).shape == (6,)
        for name, (h, w) in RECORDED_CAMERAS.items():
            frame = item[f"observation.images.{name}"]
            assert tuple(frame.shape) == (3, h, w), (i, name, tuple(frame.shape))
            assert float(frame.float().std()) > 1.0  # a real picture, not a blank frame


@pytest.mark.parametrize("mode", ["single", "sarm"])
@pytest.mark.parametrize(
    "recorded",
    [
        "lerobot_recorded_v30",
        "lerobot_recorded_images_v30",
        "lerobot_recorded_language_v30",
        "lerobot_recorded_depth_v30",
    ],
)
def test_items_equal_lerobot_dataset_key_by_key(recorded, request, tmp_path, mode):
    """A training script that swaps LeRobotDataset for dlbench's loader gets the same items: same keys, dtypes,
    shapes and values (frames: float in [0, 1] by default, as LeRobot's), with `delta_timestamps` and `episodes=`;
    a camera stored as images (PNG in the data files) is read too, to the same values exactly (PNG is lossless),
    language columns, as the lists of messages LeRobot gives, and depth maps, dequantized to the same millimetres
    (lossless 12-bit HEVC, LeRobot's arithmetic)."""
    root = str(request.getfixturevalue(recorded))
    episodes = [2, 0] if recorded == "lerobot_recorded_v30" else [1, 0]
    ours = LeRobotMapDataset(root, episodes=episodes)
    deltas = lerobot_delta_timestamps(ours.meta, mode)
    if deltas is not None:
        ours = LeRobotMapDataset(root, episodes=episodes, delta_timestamps=deltas)
    picks = [0, 1, len(ours) // 2, len(ours) - 1]
    out = tmp_path / "items.pt"
    peer.run_peer(
        "lerobot_items",
        root,
        str(out),
        json.dumps(deltas),
        json.dumps(sorted(episodes)),
        *map(str, picks),
        timeout=600,
    )
    theirs = torch.load(out, weights_only=False)
    for i, want in zip(picks, theirs):
        got = ours[i]
        assert sorted(got) == sorted(want), (i, set(got) ^ set(want))
        for key, w in want.items():
            g = got[key]
            if not isinstance(w, torch.Tensor):
                assert g == w, (i, key)
                continue
            assert (g.dtype, tuple(g.shape)) == (w.dtype, tuple(w.shape)), (i, key)
            if key in ours.meta.cameras:
                torch.testing.assert_close(g, w, atol=2 / 255, rtol=0)  # one decoder, two builds: within 2 levels
            elif key in ours.meta.depth_keys:  # video or TIFF images
                assert torch.equal(g, w) and float(g.std()) > 10, (i, key)  # millimetres, a floor and a box
            elif key in ours.meta.image_cameras:
                assert torch.equal(g, w) and float(g.std()) > 0.01, (i, key)  # the same PNG, decoded alike
            else:
                assert torch.equal(g, w), (i, key)


# ----------------------------------------------------------- dlbench's classes in LeRobot's training data path
EPISODES = [2, 0]  # out of order on purpose: LeRobot keeps `episodes` as given, and its train/eval split follows it


@pytest.fixture(scope="session")
def training_run(lerobot_recorded_v30, tmp_path_factory):
    """`peer/lerobot_training.py` over the recorded dataset, map-style with `episodes=` and an eval split: what
    LeRobot's factory, EpisodeAwareSampler and DataLoader gave with LeRobot's classes and with dlbench's (run once
    for every xdist worker whose tests read it)."""
    args = ["--episodes", json.dumps(EPISODES), "--eval-split", "0.5", "--batches", "3", "--batch-size", "4"]
    out = made_once(
        tmp_path_factory,
        "lerobot_training",
        "map.pt",
        lambda out: peer.run_peer("lerobot_training", str(lerobot_recorded_v30), str(out), *args, timeout=600),
    )
    return torch.load(out, weights_only=False)


def assert_batches_equal(theirs: list[dict], ours: list[dict], values: bool = True, dtype_exempt=()) -> None:
    """Same keys, and per key the same dtype and shape (tasks: lists of strings); with `values`, the same values
    (frames within 2 levels of 255: one decoder, two builds of it)."""
    assert len(ours) == len(theirs) > 0
    for b, (want, got) in enumerate(zip(theirs, ours)):
        assert sorted(got) == sorted(want), (b, set(got) ^ set(want))
        for key, w in want.items():
            g = got[key]
            if not isinstance(w, torch.Tensor):
                assert type(g) is type(w) and (not values or g == w), (b, key, g, w)
                continue
            assert tuple(g.shape) == tuple(w.shape), (b, key, tuple(g.shape), tuple(w.shape))
            assert key in dtype_exempt or g.dtype == w.dtype, (b, key, g.dtype, w.dtype)
            if values and key.startswith("observation.images.") and not key.endswith("_is_pad"):
                torch.testing.assert_close(g, w, atol=2 / 255, rtol=0)
            elif values:
                assert torch.equal(g, w), (b, key)


def test_lerobot_factory_and_sampler_take_dlbench_map_dataset(training_run):
    """LeRobot's `make_dataset`/`make_train_eval_datasets` with `LeRobotMapDataset` swapped in, its
    `EpisodeAwareSampler` (episode_indices_to_use, drop_n_last_frames, absolute_to_relative_idx) and torch's
    DataLoader with spawned workers: the same frames in the same order, and the same batches, as LeRobotDataset."""
    theirs, ours = training_run["lerobot"], training_run["dlbench"]
    assert ours["sampler_indices"] == theirs["sampler_indices"]
    assert ours["train_episodes"] == theirs["train_episodes"] and ours["eval_episodes"] == theirs["eval_episodes"]
    for key, want in theirs["dataset"].items():
        assert type(ours["dataset"][key]) is type(want) and ours["dataset"][key] == want, key
    assert ours["dataset"]["episodes"] == EPISODES
    assert_batches_equal(theirs["batches"], ours["batches"])


def test_absolute_to_relative_idx_equals_lerobots(training_run, lerobot_recorded_v30):
    want = training_run["lerobot"]["dataset"]["absolute_to_relative_idx"]
    assert training_run["dlbench"]["dataset"]["absolute_to_relative_idx"] == want
    assert sorted(want.values()) == list(range(len(want)))  # positions 0..n-1 over the chosen episodes' frames
    assert LeRobotMapDataset(str(lerobot_recorded_v30)).absolute_to_relative_idx is None  # as LeRobot: None for all


def test_meta_equals_lerobot_dataset_metadata(training_run):
    """The fields LeRobot's training reads off `dataset.meta` (LeRobotDatasetMetadata there, after the factory put
    ImageNet stats in for the cameras): same types and values; the episodes table column by column."""
    theirs, ours = training_run["lerobot"]["meta"], training_run["dlbench"]["meta"]
    assert sorted(ours) == sorted(theirs)
    for key, want in theirs.items():
        got = ours[key]
        if key == "stats":
            assert sorted(got) == sorted(want)
            for feature, stats in want.items():
                assert sorted(got[feature]) == sorted(stats), feature
                for name, w in stats.items():
                    g = got[feature][name]
                    assert type(g) is type(w) and g.dtype == w.dtype and g.shape == w.shape, (feature, name)
                    assert (g == w).all(), (feature, name)
            continue
        assert type(got) is type(want) and got == want, (key, got, want)


def test_dlbench_takes_every_argument_of_lerobots_dataset_classes(training_run, lerobot_recorded_v30):
    """Each parameter of LeRobotDataset and StreamingLeRobotDataset is one of ours, positional ones at the same
    position, and LeRobot's defaults, all passed at once, are accepted (no TypeError, no UserError)."""
    from dlbench.loader import LeRobotStreamingDataset

    ours = {"LeRobotDataset": LeRobotMapDataset, "StreamingLeRobotDataset": LeRobotStreamingDataset}
    for name, params in training_run["signatures"].items():
        cls = ours[name]
        mine = list(inspect.signature(cls.__init__).parameters.values())[1:]
        positional = [p for p, kind, _ in params if kind == "POSITIONAL_OR_KEYWORD"]
        assert [p.name for p in mine[: len(positional)]] == positional, name
        assert {p for p, _, _ in params} <= {p.name for p in mine}, name
        defaults = {p: default for p, _, default in params if default != "<required>"}
        ds = cls("local/recorded", **{**defaults, "root": str(lerobot_recorded_v30)})
        assert ds.num_frames == ds.meta.total_frames


def test_lerobot_streaming_factory_takes_dlbench_stream(lerobot_recorded_v30, tmp_path):
    """LeRobot's factory with `dataset.streaming` builds `LeRobotStreamingDataset` in place of
    StreamingLeRobotDataset (max_num_shards, repo_type, return_uint8 passed) and its DataLoader yields batches with
    the same keys and shapes. Orders differ (each shuffles its own way), so values are not compared; timestamps are
    float32 as LeRobotDataset's, where LeRobot's streaming class collates them from Python floats (float64)."""
    out = tmp_path / "stream.pt"
    peer.run_peer("lerobot_training", str(lerobot_recorded_v30), str(out), "--streaming", timeout=600)
    run = torch.load(out, weights_only=False)
    theirs, ours = run["lerobot"], run["dlbench"]
    assert ours["dataset"] == theirs["dataset"]
    assert_batches_equal(theirs["batches"], ours["batches"], values=False, dtype_exempt={"timestamp"})
    assert all(b["timestamp"].dtype == torch.float32 for b in ours["batches"])


@pytest.mark.parametrize("loader", ["dlbench_stream", "dlbench_map"])
def test_tunes_printed_swap_and_flags_run_as_printed_in_lerobots_training_data_path(
    lerobot_recorded_v30, tmp_path, loader
):
    """What `dlbench tune` prints for a dlbench answer (the factory swap, the lerobot-train flags) runs as printed in
    LeRobot 0.6.1's training data path with each batch held a step: LeRobot's factory built dlbench's class with the
    policy's window, and the AU is the steps' share of the time. A held step much longer than a batch takes leaves
    less waiting than computing; flags tune does not print are refused with one line."""
    from dlbench.tune.run import _winner
    from dlbench.tune.search import Candidate

    settings = {"num_workers": 1, **({"read_ahead": 8} if loader == "dlbench_stream" else {})}
    constraints = {"delta_timestamps": None, "mode": "single", "batch_size": 4, "policy": "act"}
    w = _winner(Candidate(loader, settings, predicted_fps=100.0), constraints, lerobot_recorded_v30, True)
    # as tune runs it (and benchmarks.tune, longer): `trainer.au_in_lerobot_train`
    got = trainer.au_in_lerobot_train(str(lerobot_recorded_v30), w["lerobot_swap"], w["lerobot_flags"], 250,
                                      tmp_path, steps=30, warmup=3)  # fmt: skip
    assert isinstance(got, dict) and got["steps"] == 30, got
    out = tmp_path / "au.json"
    cls = "LeRobotStreamingDataset" if loader == "dlbench_stream" else "LeRobotMapDataset"
    assert got["dataset_class"].endswith(cls) and got["dataset_class"].startswith("dlbench.")
    assert (got["batch_size"], got["num_workers"], got["streaming"]) == (4, 1, loader == "dlbench_stream")
    assert got["au"] == pytest.approx(30 * 0.25 / (30 * 0.25 + got["wait_s"]))
    # 4 items of 64x96 frames take far less than a 250 ms step to build: the loop waits less than it computes (0.86-
    # 0.87 beside the suite's other workers on 2 cores, >= 0.9 alone)
    assert got["au"] > 0.5, got
    with pytest.raises(UserError, match=r"--dataset.image_transforms.enable=true: not a flag this run takes"):
        bad = w["lerobot_flags"] + " --dataset.image_transforms.enable=true"
        peer.run_peer("lerobot_training", str(lerobot_recorded_v30), str(out), "--step-ms", "1", "--flags", bad)
    with pytest.raises(UserError, match=r"--steps >= 1"):  # no steps to measure: one line, not a division by zero
        peer.run_peer("lerobot_training", str(lerobot_recorded_v30), str(out), "--step-ms", "80", "--steps", "0")
    # a remote dataset is not run there: why, in one line, and tune falls back on its model
    why = trainer.au_in_lerobot_train("s3://b/d", w["lerobot_swap"], w["lerobot_flags"], 80, tmp_path, 1, 1)
    assert why == "a remote dataset (the peer run reads local ones)"


@pytest.mark.parametrize("cameras", [None, ["observation.images.top"]])
def test_image_cameras_are_read_by_both_loaders(lerobot_recorded_images_v30, cameras):
    """A camera stored as images (PNG in the data files) is read by the stream as by the map-style loader, in
    DataLoader workers and with a window: every item's image equals the map-style item's; `cameras=` naming only
    it reads a dataset with no video at all."""
    from dlbench.loader import DataLoader, LeRobotStreamingDataset

    root, top = str(lerobot_recorded_images_v30), "observation.images.top"
    assert meta.read_info(root)["features"][top]["dtype"] == "image"
    ref = LeRobotMapDataset(root, cameras=cameras, mode="sarm", return_uint8=True)
    assert ref.meta.image_keys == [top] and top in ref.meta.camera_keys
    want = {int(ref[i]["index"]): ref[i][top] for i in range(len(ref))}
    assert all(tuple(t.shape) == (8, 3, 32, 48) and t.dtype == torch.uint8 for t in want.values())
    stream = LeRobotStreamingDataset(root, cameras=cameras, mode="sarm")
    seen = []
    for batch in DataLoader(stream, batch_size=4, num_workers=2):
        assert batch[top].dtype == torch.float32 and batch[f"{top}_is_pad"].shape == (len(batch["index"]), 8)
        for i, idx in enumerate(batch["index"].tolist()):
            assert torch.equal(batch[top][i], want[idx].float() / 255.0), idx
            seen.append(idx)
    assert sorted(seen) == sorted(want)  # every item once
    assert ("observation.images.front" in ref[0]) == (cameras is None)


@pytest.mark.parametrize("name", RECORDED_DEPTH_CAMERAS)
def test_depth_maps_are_read_by_both_loaders(lerobot_recorded_depth_v30, name):
    """A depth map, as video or as images, is read by the stream as by the map-style loader, in DataLoader workers
    and with a window: float32 millimetres, (W, 1, H, W') an item, never divided by 255 (also with return_uint8, as
    LeRobot); metres are the millimetres before rounding; `cameras=` naming only the depth camera reads no RGB."""
    from dlbench.loader import DataLoader, LeRobotStreamingDataset

    root, depth = str(lerobot_recorded_depth_v30), f"observation.images.{name}"
    deltas = {depth: [-0.1, -0.0333, 0.0]}
    ref = LeRobotMapDataset(root, delta_timestamps=deltas, return_uint8=True)
    assert ref.meta.depth_keys == [f"observation.images.{n}" for n in RECORDED_DEPTH_CAMERAS]
    assert depth in ref.meta.camera_keys and (depth in ref.meta.video_keys) == (name == "depth")
    want = {int(ref[i]["index"]): ref[i][depth] for i in range(len(ref))}
    shape = (3, 1, *RECORDED_DEPTH_CAMERAS[name])
    assert all(tuple(t.shape) == shape and t.dtype == torch.float32 for t in want.values())
    assert all(t.min() >= 250 and t.max() <= 3500 for t in want.values())  # the recorder's 0.3-3 m, in mm
    metres = LeRobotMapDataset(root, delta_timestamps=deltas, depth_output_unit="m")
    assert torch.allclose(metres[7][depth] * 1000, want[7], atol=0.5, rtol=0)
    stream = LeRobotStreamingDataset(root, cameras=[depth], delta_timestamps=deltas)
    seen = []
    for batch in DataLoader(stream, batch_size=4, num_workers=2):
        assert "observation.images.front" not in batch
        for i, idx in enumerate(batch["index"].tolist()):
            assert torch.equal(batch[depth][i], want[idx]), idx
            seen.append(idx)
    assert sorted(seen) == sorted(want)  # every item once


def test_the_frame_check_catches_a_wrong_depth_map(lerobot_recorded_depth_v30):
    """A bench run's independent check covers depth maps: delivered millimetres equal a fresh PyAV decode at each
    frame's own timestamp; a frame off by 1 mm in one pixel, or taken from the next frame, is wrong."""
    from dlbench.bench.checks.frames import DecodeCheck

    root = str(lerobot_recorded_depth_v30)
    ds = LeRobotMapDataset(root)
    batches = [torch.utils.data.default_collate([ds[i] for i in range(k, k + 4)]) for k in range(0, 24, 4)]

    def check(tamper=None):
        c = DecodeCheck(ds.meta, "single", per_camera=24)
        for b in batches:
            c.offer({**b, **{k: tamper(b[k]) for k in ds.meta.depth_keys if tamper}})
        c.finish()
        return c

    good = check()
    assert good.checked == 72 and good.wrong == 0  # 24 RGB frames, 24 depth video frames, 24 depth images
    nudged = check(lambda d: d.clone().index_put_((torch.tensor([0]),) * 4, torch.tensor([1.0]), accumulate=True))
    assert nudged.wrong == 12  # the first item of each batch, in both depth cameras
    assert "depth differs by up to 1 mm" in " ".join(nudged.problems)
    shifted = check(lambda d: torch.roll(d, 1, 0))  # each item holding its neighbour's map
    assert shifted.wrong >= 36


@pytest.mark.parametrize("loader", ["lerobot_map", "lerobot_stream"])
def test_lerobots_loaders_split_their_time_and_say_which_workers_idle(v30_h264_one_file, tmp_path, loader):
    """LeRobot's loaders get the time split too (its decode functions timed in the peer process); its stream of one
    data file keeps one of two workers busy, and the record says so."""
    from dlbench.cli import main

    args = ["--root", str(v30_h264_one_file), "--loader", loader, "--out-dir", str(tmp_path), "--num-workers", "2"]
    assert main(["-q", "bench-run", *args, "--warmup-s", "0.3", "--duration-s", "1", "--batch-size", "4"]) == 0
    rec = json.loads((tmp_path / "rank0of1.json").read_text())
    m = rec["metrics"]
    assert rec["status"] == "ok" and m["split_decode_ms"] > 0 and m["split_fetch_ms"] == 0
    wall = 2 * 1000 * m["steady_window_s"] / m["samples"]
    split = sum(m[k] for k in ("split_fetch_ms", "split_decode_ms", "split_assembly_ms", "split_idle_ms"))
    assert split == pytest.approx(wall, rel=1e-6) or split > wall  # a wall time past the worker's share: items ran long
    if loader == "lerobot_stream":
        assert m["busy_workers"] == 1 and "1 of 2 DataLoader workers have data to read" in m["work_note"]


# `dlbench tune --policy / --config-path` (tune/trainer.py): what LeRobot's training reads off a policy's config
@pytest.mark.parametrize("policy", ["act", "diffusion", "smolvla", "pi0"])
def test_a_policys_window_is_lerobots_own_on_the_dataset(policy, v30_h264):
    from dlbench.loader.dataset_meta import DatasetMeta

    meta = DatasetMeta.load(str(v30_h264))
    ours, cfg = trainer.policy_window(policy, meta)
    theirs = json.loads(peer.run_peer("lerobot_policy", policy, "--root", str(v30_h264)).stdout.splitlines()[-1])
    assert set(ours) == set(theirs["delta_timestamps"])
    assert all(np.allclose(ours[k], theirs["delta_timestamps"][k], rtol=0, atol=1e-12) for k in ours)
    assert "action" in ours and cfg["policy"] == policy


def test_an_unknown_policy_or_a_config_that_is_not_lerobots_is_one_line(v30_h264, tmp_path):
    (tmp_path / "train_config.json").write_text(json.dumps({"batch_size": 8}))
    config = str(tmp_path / "train_config.json")
    for args, says in ((["--policy", "nope"], "not one of LeRobot's: act"),
                       (["--config-path", config], "not a lerobot-train config")):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "dlbench", "tune", str(v30_h264), "--out", str(tmp_path / "t"),
                               *args], capture_output=True, text=True, timeout=600)  # fmt: skip
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr


def test_a_saved_train_config_says_the_policy_batch_and_workers(v30_h264, tmp_path):
    peer.write_train_config(str(tmp_path), v30_h264, "act", 4, 3, chunk_size=10, n_action_steps=10)
    t = trainer.train_config(str(tmp_path / "train_config.json"))
    assert (t["policy"], t["batch_size"], t["num_workers"], t["root"]) == ("act", 4, 3, str(v30_h264))
    assert t["action_delta_indices"] == list(range(10)) and t["streaming"] is False


@pytest.mark.slow  # a whole tune, about 2 minutes
@pytest.mark.timing  # its AU measured again must match the proof's: `make test` runs it alone, after the rest
def test_tune_from_a_train_config_answers_in_au_with_lerobots_flags(v30_h264, tmp_path):
    """`dlbench tune --config-path train_config.json --step-ms 80 --gpus 40`: the policy's window, batch size and
    workers come from the config; every proof carries AU and GPUs fed by its rate; the AU the answer states is
    measured with the step held (one rank at 80 / 40 ms, the node's GPUs' load); the screen shows the code, the
    swap into lerobot-train and LeRobot's best as lerobot-train flags."""
    peer.write_train_config(str(tmp_path / "cfg"), v30_h264, "act", 4, 1, chunk_size=10, n_action_steps=10)
    out = tmp_path / "tune" / "h264"
    proc = subprocess.run(
        [sys.executable, "-m", "dlbench", "tune", "--config-path", str(tmp_path / "cfg" / "train_config.json"),
         "--step-ms", "80", "--gpus", "40", "--out", str(out), "--time-budget-s", "40", "--no-reencode"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.with_suffix(".json").read_text())
    c = result["constraints"]
    assert (c["policy"], c["batch_size"], c["step_ms"], c["gpus"]) == ("act", 4, 80, 40)
    assert c["delta_timestamps"]["action"] == pytest.approx([i / 30 for i in range(10)])
    assert c["memory_gb"] > 0 and any("half of this host's RAM" in n for n in result["notes"])
    assert any("LeRobot's map-style dataset with 1 worker(s)" in n for n in result["notes"])
    # 40 GPUs' conversions share the cores: one rank in lerobot-train's loop cannot stand for them
    assert any(n.startswith("lerobot-train's loop not run (40 GPUs a node") for n in result["notes"]), result["notes"]
    proven = [p for p in result["proofs"] if p.get("samples_per_s_node")]
    assert proven and all(0 < p["au"] <= 1 and p["gpus_fed"] >= 0 for p in proven)
    w = result["winner"]
    # the AU stated is the one measured with the step held, the free-running rate's beside it
    assert w["au_measured"] is not None and 0 < w["au"] == w["au_measured"] <= 1 and 0 < w["au_bound"] <= 1, w
    assert any(p.get("au_at_step") == w["au"] for p in result["proofs"]), result["proofs"]
    assert "functools.partial(LeRobot" in w["lerobot_swap"] and "--policy.type=act --batch_size=4" in w["lerobot_flags"]
    assert "answer:" in proc.stdout and "AU" in proc.stdout and "lerobot-train" in proc.stdout
    if "lerobot_train" in result.get("lerobot_best", {}):
        assert result["lerobot_best"]["lerobot_train"].startswith("lerobot-train --dataset.repo_id=local/dataset")


def test_a_truncated_stored_image_is_one_line_from_validate_and_the_loader(lerobot_recorded_images_v30, tmp_path):
    """An image cut short in a data file: `dlbench validate` names the file, row and camera; the loader's item at
    that row stops with one line naming them; every other row still reads, and validate counts the images."""
    from dlbench.errors import UserError

    good = validate(str(lerobot_recorded_images_v30))
    assert good["images_decoded"] == good["frames"] > 0
    root, top = tmp_path / "bad", "observation.images.top"
    shutil.copytree(lerobot_recorded_images_v30, root)
    path = sorted(root.glob("data/*/*.parquet"))[0]
    table = pq.read_table(path)
    images = table.column(top).to_pylist()
    images[5] = {**images[5], "bytes": images[5]["bytes"][:100]}
    at = table.schema.get_field_index(top)
    pq.write_table(table.set_column(at, table.schema.field(at), pa.array(images, table.schema.field(at).type)), path)
    with pytest.raises(UserError, match=rf"{path.parent.name}/{path.name}: row 5 of {top} does not decode"):
        validate(str(root))
    ds = LeRobotMapDataset(str(root))
    with pytest.raises(UserError, match=rf"row 5 of '{top}' does not decode as an image") as err:
        ds[5]
    assert "\n" not in str(err.value) and ds[4][top].shape == ds[6][top].shape == (3, 32, 48)


def test_reencode_makes_stored_images_a_video_lerobot_reads(lerobot_recorded_images_v30, tmp_path):
    """`dlbench reencode` turns a camera stored as images into a video file per data file: the dataset validates,
    the camera's frames stay within a few grey levels of the PNGs (h264, its default quality), its data files lose
    the image column, and LeRobot 0.6.1 reads the new dataset to the items dlbench's loader gives."""
    from dlbench.encoding.options import Encoding
    from dlbench.encoding.reencode import reencode

    src, dst, top = str(lerobot_recorded_images_v30), tmp_path / "video", "observation.images.top"
    record = reencode(src, dst, Encoding("h264", gop=2), workers=2)
    assert [u["camera"] for u in record["units"] if "data_rel" in u] == [top]
    info = meta.read_info(str(dst))
    assert info["features"][top]["dtype"] == "video" and meta.image_keys(info) == []
    assert validate(str(dst))["ok"]
    assert all(top not in pq.read_schema(p).names for p in dst.glob("data/*/*.parquet"))
    before, after = LeRobotMapDataset(src, return_uint8=True), LeRobotMapDataset(str(dst), return_uint8=True)
    assert len(before) == len(after)
    worst = max(float((before[i][top].int() - after[i][top].int()).abs().float().mean()) for i in range(len(after)))
    assert worst < 8, worst
    picks = [0, len(after) // 2, len(after) - 1]
    out = tmp_path / "items.pt"
    peer.run_peer("lerobot_items", str(dst), str(out), "null", "null", *map(str, picks), timeout=600)
    ours = LeRobotMapDataset(str(dst))
    for i, want in zip(picks, torch.load(out, weights_only=False)):
        assert int(want["index"]) == i and tuple(want[top].shape) == (3, 32, 48)
        torch.testing.assert_close(ours[i][top], want[top], atol=2 / 255, rtol=0)


def test_reencode_leaves_depth_maps_as_they_are(lerobot_recorded_depth_v30, tmp_path):
    """Re-encoding writes the colour camera anew and copies the depth maps (12-bit video, TIFF images) as they are:
    an 8-bit colour codec would lose their codes. Every depth value is unchanged and LeRobot reads the result."""
    from dlbench.encoding import probe
    from dlbench.encoding.options import Encoding
    from dlbench.encoding.reencode import reencode

    src, dst, front = str(lerobot_recorded_depth_v30), tmp_path / "h264", "observation.images.front"
    record = reencode(src, dst, Encoding("h264", gop=1), workers=2)
    assert {u["camera"] for u in record["units"]} == {front}
    info = meta.read_info(str(dst))
    assert info["features"][front]["info"]["video.codec"] == "h264"
    assert info["features"]["observation.images.depth"]["info"]["video.codec"] == "hevc"
    assert validate(str(dst))["ok"]
    before, after = LeRobotMapDataset(src), LeRobotMapDataset(str(dst))
    for i in range(0, len(after), 5):
        for key in before.meta.depth_keys:
            assert torch.equal(before[i][key], after[i][key]), (i, key)
    assert {p.camera for p in probe.probe(src, seconds=0.3)} == {front}  # tune's lever: colour cameras only
    out = tmp_path / "items.pt"
    peer.run_peer("lerobot_items", str(dst), str(out), "null", "null", "3", timeout=600)
    want = torch.load(out, weights_only=False)[0]
    assert torch.equal(want["observation.images.depth"], after[3]["observation.images.depth"])


def test_the_reencoding_probe_measures_a_camera_stored_as_images(lerobot_recorded_images_v30):
    """tune's re-encoding lever reaches image cameras: the probe encodes a clip of the stored images and scores each
    candidate against them (PSNR, bytes against the PNGs', decode against Pillow's)."""
    from dlbench.encoding import probe

    found = [p for p in probe.probe(str(lerobot_recorded_images_v30), seconds=1) if p.camera.endswith(".top")]
    assert len(found) == len(probe.CANDIDATES)
    for p in found:
        assert p.source_ms_per_frame > 0 and p.ms_per_frame > 0 and 0 < p.bytes_vs_source < 1, p
        assert p.psnr_db > 30 and p.clip_frames >= 2, p


def test_language_columns_are_in_items_and_left_out_of_batches(lerobot_recorded_language_v30):
    """Items carry LeRobot's language columns (lists of message dicts, as LeRobot returns them); batches leave them
    out, as `lerobot_collate_fn` does in lerobot-train; a window on one is refused in one line."""
    from dlbench.errors import UserError
    from dlbench.loader import DataLoader, LeRobotStreamingDataset

    root = str(lerobot_recorded_language_v30)
    ds = LeRobotMapDataset(root)
    assert ds.meta.has_language_columns and ds.meta.language_keys == ["language_persistent", "language_events"]
    first, last = ds[0], ds[len(ds) - 1]
    assert first["language_events"][0]["style"] == "interjection" and last["language_events"] == []
    assert [m["content"] for m in last["language_persistent"]][-1].endswith("grasp")
    for data in (ds, LeRobotStreamingDataset(root, mode="sarm")):
        batches = list(DataLoader(data, batch_size=4, num_workers=2))
        assert sum(len(b["index"]) for b in batches) == len(ds)
        assert all("language_persistent" not in b and "language_events" not in b for b in batches)
    with pytest.raises(UserError, match="'language_events' is a language column"):
        LeRobotMapDataset(root, delta_timestamps={"language_events": [0.0]})


def test_a_matrix_run_with_a_policy_reads_its_window_and_is_judged_at_its_step(v30_h264, tmp_path):
    """`policy: act` in a scenario: the bench job resolves ACT's window on the dataset once (LeRobot's config, in
    its peer environment), every rank reads it and run.json's spec keeps it; with `step_ms` the run's target is
    the frames/s that keep the node's GPU 90% busy at that step."""
    from dlbench.bench.launch import SPEC_FILE, launch
    from dlbench.loader.dataset_meta import DatasetMeta
    from dlbench.report.aggregate import aggregate
    from dlbench.run import spec as runspec

    run = runspec.make_run({"root": str(v30_h264), "loader": "dlbench_map", "policy": "act", "step_ms": 20,
                            "num_workers": 1, "ranks": 2, "batch_size": 4, "duration_s": 1, "repeats": 2,
                            "warmup_s": 0.5, "min_batches": 4, "probe_samples": 0})  # fmt: skip
    assert "policyact" in run.run_id and run.delta_timestamps is None  # resolved in the job, from the dataset
    launch(run, tmp_path / "r")
    ours, _ = trainer.policy_window("act", DatasetMeta.load(str(v30_h264)))
    spec = json.loads((tmp_path / "r" / SPEC_FILE).read_text())
    assert spec["policy"] == "act" and spec["delta_timestamps"] == ours and len(ours["action"]) == 100
    row = aggregate([tmp_path / "r"], None).iloc[0]
    assert row["status"] == "ok" and row["frames_verified"] > 0 and row["frames_wrong"] == 0
    per_step = 4 * row["frames_per_sample"] * 2  # batch x frames a sample x ranks of the node, each 20 ms
    assert row["target_frames_per_s_node"] == pytest.approx(0.9 * per_step * 1000 / 20)
