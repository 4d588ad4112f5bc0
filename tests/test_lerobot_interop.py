"""dlbench's v3.0 output against LeRobot 0.6.1 (the reference readers), run in the peer environment."""

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from dlbench import peer
from dlbench.bench.adapters import lerobot_delta_timestamps
from dlbench.format import meta
from dlbench.loader import LeRobotMapDataset
from dlbench.validate import validate

from .conftest import RECORDED_CAMERAS

pytestmark = pytest.mark.skipif(
    peer.peer_python() is None,
    reason=f"LeRobot peer environment missing or incomplete (needs Python 3.12 and the package index); "
    f"create it with {peer.CREATE_COMMAND}",
)


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
def test_items_equal_lerobot_dataset_key_by_key(lerobot_recorded_v30, tmp_path, mode):
    """A training script that swaps LeRobotDataset for dlbench's loader gets the same items: same keys, dtypes,
    shapes and values (frames: float in [0, 1] by default, as LeRobot's), with `delta_timestamps` and `episodes=`."""
    root = str(lerobot_recorded_v30)
    ours = LeRobotMapDataset(root, episodes=[2, 0])
    deltas = lerobot_delta_timestamps(ours.meta, mode)
    if deltas is not None:
        ours = LeRobotMapDataset(root, episodes=[2, 0], delta_timestamps=deltas)
    picks = [0, 1, len(ours) // 2, len(ours) - 1]
    out = tmp_path / "items.pt"
    peer.run_peer(
        "lerobot_items", root, str(out), json.dumps(deltas), json.dumps([0, 2]), *map(str, picks), timeout=600
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
            else:
                assert torch.equal(g, w), (i, key)
