import pytest
import torch

from dlbench import barcode
from dlbench.errors import UserError
from dlbench.loader import DataLoader
from dlbench.loader.map import LeRobotMapDataset

from .helpers import expected_frames

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("mode", ["single", "sarm"])
def test_map_dataset_every_frame_carries_its_barcode(v30_h264, mode):
    ds = LeRobotMapDataset(str(v30_h264), return_uint8=True, mode=mode)
    assert len(ds) == ds.meta.num_frames
    for i in range(len(ds)):
        item = ds[i]
        assert int(item["index"]) == i
        for cam_index, cam in enumerate(ds.meta.cameras):
            frames = item[cam] if mode == "sarm" else item[cam][None]
            assert frames.dtype == torch.uint8
            ep, fr, c, valid = barcode.read_batch(frames)
            assert valid.all() and (ep == int(item["episode_index"])).all() and (c == cam_index).all()
            assert fr.tolist() == expected_frames(ds, item, cam)
    stats = ds.cache.stats()
    assert stats["hits"] + stats["misses"] > 0 and stats["evictions"] <= stats["misses"]


def test_sarm_window_pads_outside_the_episode(v30_h264):
    ds = LeRobotMapDataset(str(v30_h264), return_uint8=True, mode="sarm")
    first = ds[0]  # frame 0: the 7 earlier steps are before the episode
    cam = ds.meta.cameras[0]
    assert first[f"{cam}_is_pad"].tolist() == [True] * 7 + [False]
    assert first["observation.state"].shape[0] == 8
    assert torch.equal(first["observation.state"][0], first["observation.state"][-1])  # clamped to the edge


def test_frames_are_float_by_default_and_uint8_on_request(v30_h264):
    ds, raw = LeRobotMapDataset(str(v30_h264)), LeRobotMapDataset(str(v30_h264), return_uint8=True)
    item, raw_item = ds[3], raw[3]
    cam = ds.meta.cameras[0]
    assert item[cam].dtype == torch.float32 and 0.0 <= item[cam].min() and item[cam].max() <= 1.0
    assert raw_item[cam].dtype == torch.uint8
    torch.testing.assert_close(item[cam], raw_item[cam].float() / 255)
    assert item["task"].startswith("synthetic task")


@pytest.mark.parametrize(
    "mode,wrap", [("single", "none"), ("sarm", "none"), ("sarm", "subset"), ("single", "concat"), ("sarm", "concat")]
)
def test_float_batches_from_workers_equal_the_items(v30_h264, mode, wrap):
    """Workers hand frames over as uint8 and the collate makes them float in the batch: the same values as the
    dataset's own float items, bit for bit. Wrapped in a Subset (the DataLoader cannot see the dataset's cameras)
    the worker makes the floats itself; a ConcatDataset of two datasets puts rows of both in one batch."""
    ds = LeRobotMapDataset(str(v30_h264), mode=mode)
    wrapped = {
        "none": ds,
        "subset": torch.utils.data.Subset(ds, range(8)),
        "concat": torch.utils.data.ConcatDataset(
            [torch.utils.data.Subset(ds, range(2)), LeRobotMapDataset(str(v30_h264), mode=mode)]
        ),
    }[wrap]
    batch = next(iter(DataLoader(wrapped, batch_size=4, num_workers=2, shuffle=False)))
    items = [wrapped[i] for i in range(4)]
    for key, value in batch.items():
        if key == "task":
            assert value == [item["task"] for item in items]
            continue
        expected = torch.stack([torch.as_tensor(item[key]) for item in items])
        assert value.dtype == expected.dtype and torch.equal(value, expected), key
    for cam in ds.meta.camera_keys:
        assert batch[cam].dtype == torch.float32


def test_bad_inputs_get_clear_errors(v30_h264, v21_h264):
    with pytest.raises(UserError, match="not in .*the dataset has"):
        LeRobotMapDataset(str(v30_h264), return_uint8=True, cameras=["observation.images.nope"])
    with pytest.raises(UserError, match="not a multiple of 1/fps"):
        LeRobotMapDataset(str(v30_h264), return_uint8=True, delta_timestamps={"cameras": [-0.05, 0.0]})
    with pytest.raises(UserError, match="dlbench convert run"):
        LeRobotMapDataset(str(v21_h264), return_uint8=True)


@pytest.mark.parametrize("layout", ["hwc", "chw"])
def test_frame_gather_equals_indexing_and_keeps_the_memory_order(layout):
    from dlbench.decode.cache import FrameGather

    chw = torch.randint(0, 255, (5, 3, 6, 8), dtype=torch.uint8)
    frames = chw.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2) if layout == "hwc" else chw
    order = torch.tensor([0, 0, 3, 4, 4, 4, 1])
    got = FrameGather(frames, order).materialize()
    assert torch.equal(got, chw[order])
    assert got.movedim(-3, -1).is_contiguous() if layout == "hwc" else got.is_contiguous()
    strided = torch.zeros(7, 3, 6, 16, dtype=torch.uint8)[..., ::2]  # neither memory order: the plain copy
    FrameGather(frames, order).gather_into(strided)
    assert torch.equal(strided, chw[order])
    hwc_out = torch.zeros(7, 6, 8, 3, dtype=torch.uint8).permute(0, 3, 1, 2)
    for out in (torch.zeros(7, 3, 6, 8, dtype=torch.uint8), hwc_out):
        FrameGather(frames, order).gather_into(out)  # into either memory order, from either
        assert torch.equal(out, chw[order])
    # straight into rows of batch memory (as collate writes): only where the memory orders agree
    rows = torch.zeros(7, 3 * 6 * 8, dtype=torch.uint8)
    assert not FrameGather(frames, order).gather_rows(rows, channels_last=layout != "hwc")
    assert not rows.any()
    assert FrameGather(frames, order).gather_rows(rows, channels_last=layout == "hwc")
    memory = rows.view(7, 6, 8, 3).permute(0, 3, 1, 2) if layout == "hwc" else rows.view(7, 3, 6, 8)
    assert torch.equal(memory, chw[order])


def test_lerobot_arguments_repo_id_episodes_transforms_and_meta(v30_h264):
    from dlbench.loader import LeRobotStreamingDataset
    from dlbench.loader.dataset_meta import dataset_root

    assert dataset_root("lerobot/pusht", None, None) == "hf://datasets/lerobot/pusht@v3.0"
    assert dataset_root("lerobot/pusht", None, "main") == "hf://datasets/lerobot/pusht@main"
    assert dataset_root("ignored/repo", str(v30_h264), None) == str(v30_h264)
    whole = LeRobotMapDataset(root=str(v30_h264))
    chosen = LeRobotMapDataset(str(v30_h264), episodes=[3, 1])
    m = whole.meta
    want = [i for e in (1, 3) for i in range(int(m.ep_from[e]), int(m.ep_to[e]))]
    assert [int(chosen[i]["index"]) for i in range(len(chosen))] == want and chosen.num_episodes == 2
    stream = LeRobotStreamingDataset(str(v30_h264), episodes=[3, 1], pool_size=2, buffer_size=4)
    assert sorted(int(item["index"]) for item in stream) == want and len(stream) == len(want)
    assert not any(k.startswith("_") for k in next(iter(stream)))  # no private keys unless tag_items=True
    with pytest.raises(UserError, match=r"episodes \[99\] are not in"):
        LeRobotMapDataset(str(v30_h264), episodes=[99])
    flipped = LeRobotMapDataset(str(v30_h264), image_transforms=lambda frames: frames.flip(-1))
    cam = m.cameras[0]
    assert torch.equal(flipped[5][cam], whole[5][cam].flip(-1))
    assert (m.fps, m.camera_keys, m.total_episodes, m.total_frames) == (
        whole.fps,
        m.cameras,
        m.num_episodes,
        len(whole),
    )
    assert set(m.stats) >= {"observation.state", "action"} and m.stats["action"]["mean"].shape == (m.shapes["action"])
    assert m.episodes.num_rows == m.num_episodes and m.features[cam]["dtype"] == "video"


def test_lerobot_arguments_are_honoured_ignored_or_refused_by_name(v30_h264):
    """Every LeRobot constructor argument: taken (honoured, or ignored where it means nothing here) or refused with
    one `UserError` naming it; never a TypeError."""
    from dlbench.loader import LeRobotStreamingDataset
    from dlbench.loader.dataset_meta import dataset_root

    root = str(v30_h264)
    base = LeRobotMapDataset(root, return_uint8=True)
    ignored = dict(force_cache_sync=True, download_videos=False, video_backend="pyav", depth_output_unit="m")
    taken = LeRobotMapDataset(root, return_uint8=True, token=True, **ignored)
    assert len(taken) == len(base) and torch.equal(
        taken[3]["observation.images.front"], base[3]["observation.images.front"]
    )
    stream = LeRobotStreamingDataset(root, streaming=False, max_num_shards=1, force_cache_sync=True, token=None)
    assert stream.num_frames == base.num_frames
    assert dataset_root("me/bucket", None, "v3.0", repo_type="bucket") == "hf://buckets/me/bucket"

    refused = {
        "token": "hf_secret",
        "batch_encoding_size": 2,
        "streaming_encoding": True,
        "encoder_threads": 4,
        "depth_output_unit": "cm",
        "repo_type": "model",
    }
    for name, value in refused.items():
        with pytest.raises(UserError, match=name) as err:
            LeRobotMapDataset(root, **{name: value})
        assert "hf_secret" not in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UserError, match="token"):
        LeRobotStreamingDataset(root, token=False)
    with pytest.raises(UserError, match="rng"):
        LeRobotStreamingDataset(root, rng=torch.Generator())

    # episode_filter as LeRobot's: a predicate over meta/episodes rows, within `episodes`, sorted
    lengths = base.meta.ep_to - base.meta.ep_from
    long_ones = [e for e in range(base.meta.num_episodes) if lengths[e] > lengths.min()]
    assert LeRobotMapDataset(root, episode_filter=lambda ep: ep["length"] > lengths.min()).episodes == long_ones
    picked = LeRobotMapDataset(root, episodes=[5, 3, 1], episode_filter=lambda ep: ep["episode_index"] != 3)
    assert picked.episodes == [1, 5] and picked.num_frames == lengths[1] + lengths[5]
    with pytest.raises(UserError, match="episode_filter kept no episode"):
        LeRobotMapDataset(root, episode_filter=lambda ep: False)
    chosen = LeRobotMapDataset(root, episodes=[3, 1])
    assert chosen.episodes == [3, 1]  # as given, as LeRobot keeps it; items follow `index` order
    rows = [r for e in (1, 3) for r in range(int(base.meta.ep_from[e]), int(base.meta.ep_to[e]))]
    assert chosen.absolute_to_relative_idx == {r: i for i, r in enumerate(rows)}
    assert base.absolute_to_relative_idx is None
    m = base.meta
    assert (
        m.episodes["dataset_from_index"] == m.ep_from.tolist() and m.episodes[-1]["episode_index"] == m.num_episodes - 1
    )
    assert not [c for c in m.episodes.column_names if c.startswith("stats/")]


def test_hevc_with_open_gops_is_read_at_random_frame_exact(tmp_path):
    """x265's default open GOPs land torchcodec's approximate seek 2 frames late: dlbench reads HEVC files with exact
    seeks, so every frame of a random-access pass carries its own barcode."""
    import numpy as np

    from dlbench.convert.run import run as convert

    from .helpers import synth_cached, tiny_config

    cams = (tiny_config().cameras[0],)
    v21 = synth_cached(
        tiny_config(episodes=2, length_min=70, length_max=90, codec="hevc", cameras=cams), tmp_path / "v21"
    )
    ds = LeRobotMapDataset(str(convert(str(v21), tmp_path / "v30", workers=1, progress=False)), return_uint8=True)
    order = np.random.default_rng(0).permutation(len(ds))
    for i in order[:60].tolist():
        item = ds[i]
        ep, fr, _, valid = barcode.read_batch(item[ds.meta.cameras[0]][None])
        assert valid.all() and fr.tolist() == expected_frames(ds, item, ds.meta.cameras[0]), i
