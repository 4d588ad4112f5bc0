import json
import os
import sys

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torchcodec.decoders import VideoDecoder

from dlbench import barcode, synth
from dlbench.errors import UserError
from dlbench.format import meta, paths
from dlbench.synth import Camera, episode_lengths, render_frames, synthesize

from .helpers import tiny_config

pytestmark = pytest.mark.unit


def check_v21(root, cfg):
    """Structure, counts, timestamps and every frame's barcode of a synthetic v2.1 dataset."""
    info = meta.read_info(str(root))
    assert info["codebase_version"] == "v2.1"
    assert info["total_episodes"] == cfg.episodes
    lengths = episode_lengths(cfg)
    assert info["total_frames"] == int(lengths.sum())
    assert info["total_videos"] == cfg.episodes * len(cfg.cameras)
    episodes = list(meta.iter_episodes_v21(str(root)))
    assert [e["episode_index"] for e in episodes] == list(range(cfg.episodes))
    assert [e["length"] for e in episodes] == lengths.tolist()
    tasks = meta.read_tasks_v21(str(root))
    assert len(tasks) == cfg.tasks and all(e["tasks"][0] in tasks for e in episodes)
    stats = list(meta.iter_episodes_stats_v21(str(root)))
    assert len(stats) == cfg.episodes
    index = 0
    cams = meta.video_keys(info)
    for ep, length in enumerate(lengths):
        t = pq.read_table(root / paths.v21_data_path(ep, cfg.chunks_size)).to_pydict()
        assert t["frame_index"] == list(range(length))
        assert t["episode_index"] == [ep] * length
        assert t["index"] == list(range(index, index + length))
        np.testing.assert_allclose(t["timestamp"], np.arange(length) / cfg.fps, atol=1e-6)
        state = np.asarray(t["observation.state"])
        s = stats[ep]["stats"]["observation.state"]
        np.testing.assert_allclose(s["min"], state.min(0), rtol=1e-6)
        np.testing.assert_allclose(s["mean"], state.mean(0), rtol=1e-5, atol=1e-7)
        assert s["count"] == [length]
        assert np.asarray(stats[ep]["stats"][cams[0]]["mean"]).shape == (3, 1, 1)
        index += length
        for cam_index, cam in enumerate(cams):
            dec = VideoDecoder(str(root / paths.v21_video_path(ep, cam, cfg.chunks_size)))
            assert len(dec) == length
            frames = dec.get_frames_in_range(0, length)
            e, f, c, valid = barcode.read_batch(frames.data)
            assert valid.all() and (e == ep).all() and (c == cam_index).all()
            assert f.tolist() == list(range(length))
            np.testing.assert_allclose(frames.pts_seconds.numpy(), np.arange(length) / cfg.fps, atol=1e-4)


def test_h264_dataset_is_valid_v21(v21_h264):
    check_v21(v21_h264, tiny_config())


def test_av1_dataset_is_valid_v21(tmp_path):
    cfg = tiny_config(codec="av1", episodes=3, chunks_size=2, cameras=(Camera("observation.images.top", 64, 80),))
    root = synthesize(cfg, tmp_path / "av1", workers=1, progress=False)
    check_v21(root, cfg)
    assert (root / "data/chunk-001/episode_000002.parquet").exists()  # chunks of chunks_size episodes
    info = meta.read_info(str(root))
    assert info["features"]["observation.images.top"]["info"]["video.codec"] == "av1"
    assert info["total_chunks"] == 2


def test_noise_makes_real_sized_files_with_readable_barcodes(tmp_path):
    """`noise` (for benchmarks that need real-world bytes per frame) grows the files; every barcode still reads."""
    plain_cfg = tiny_config(episodes=2, crf=0)
    noisy_cfg = tiny_config(episodes=2, crf=0, noise=32)
    plain = synthesize(plain_cfg, tmp_path / "plain", workers=1, progress=False)
    noisy = synthesize(noisy_cfg, tmp_path / "noisy", workers=1, progress=False)
    size = lambda root: sum(p.stat().st_size for p in (root / "videos").rglob("*.mp4"))  # noqa: E731
    assert size(noisy) > 3 * size(plain)
    check_v21(noisy, noisy_cfg)
    with pytest.raises(UserError, match="noise"):
        tiny_config(noise=200).validate()


def test_camera_content_reads_back_and_costs_real_bytes(tmp_path):
    """content="camera" (a textured scene with motion and sensor noise): every barcode still reads back after
    encoding, the frames change from one to the next, and the files are far bigger than flat stripes."""
    cams = (Camera("observation.images.front", 96, 128),)
    camera_cfg = tiny_config(episodes=2, length_min=12, length_max=12, cameras=cams, codec="av1", content="camera")
    stripes_cfg = tiny_config(episodes=2, length_min=12, length_max=12, cameras=cams, codec="av1")
    camera = synthesize(camera_cfg, tmp_path / "camera", workers=1, progress=False)
    stripes = synthesize(stripes_cfg, tmp_path / "stripes", workers=1, progress=False)
    check_v21(camera, camera_cfg)
    size = lambda root: sum(p.stat().st_size for p in (root / "videos").rglob("*.mp4"))  # noqa: E731
    assert size(camera) > 3 * size(stripes), (size(camera), size(stripes))  # about 5x here, 10x at 480x640
    frames = render_frames(cams[0], 0, 1, 12, content="camera", seed=camera_cfg.seed)
    assert (frames == render_frames(cams[0], 0, 1, 12, content="camera", seed=camera_cfg.seed)).all()  # deterministic
    assert not (frames == render_frames(cams[0], 0, 0, 12, content="camera", seed=camera_cfg.seed)).all()
    assert all(np.abs(frames[i].astype(int) - frames[i + 1]).mean() > 1 for i in range(11))  # fresh noise, motion
    assert frames[:, 32:, :].std() > 20  # not flat


def test_phases_content_shows_one_task_whose_look_follows_the_episodes_time(tmp_path):
    """content="phases": episodes of different lengths show the same scene at the same share of their time (a
    task's phases), unlike "camera", whose episodes are scenes of their own; the state follows the phase too; every
    barcode reads back."""
    cams = (Camera("observation.images.front", 96, 128),)
    cfg = tiny_config(episodes=3, length_min=20, length_max=40, cameras=cams, content="phases", state_dim=4)
    root = synthesize(cfg, tmp_path / "p", workers=1, progress=False)
    check_v21(root, cfg)
    far = lambda a, b: np.abs(a[64:].astype(int) - b[64:]).mean()  # noqa: E731 (below the barcode)
    short, long = (render_frames(cams[0], 0, e, n, content="phases", seed=cfg.seed) for e, n in ((0, 20), (1, 39)))
    other = render_frames(cams[0], 0, 1, 39, content="camera", seed=cfg.seed)
    own = render_frames(cams[0], 0, 0, 20, content="camera", seed=cfg.seed)
    # the same phase (the end, the start) alike across episodes, scenes of their own far apart, phases apart too
    assert far(short[-1], long[-1]) < far(own[-1], other[-1]) / 3 and far(short[0], long[0]) < 10
    assert far(short[0], short[-1]) > far(short[-1], long[-1])
    states = pd.concat(pd.read_parquet(f) for f in sorted((root / "data").rglob("*.parquet")))
    ends = states.groupby("episode_index")["observation.state"].last()
    starts = states.groupby("episode_index")["observation.state"].first()
    spread = lambda col: np.stack(col.to_numpy()).std(axis=0).mean()  # noqa: E731
    assert spread(ends) < 0.2 and np.abs(np.stack(ends) - np.stack(starts)).mean() > spread(ends)


def test_unknown_content_is_refused(tmp_path):
    with pytest.raises(UserError, match=r"content 'video' is unknown; choose one of \['stripes', 'camera', 'phases'\]"):
        synthesize(tiny_config(content="video"), tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()


def test_same_seed_same_bytes(tmp_path):
    cfg = tiny_config(episodes=3, cameras=(Camera("observation.images.front", 32, 32),))
    a = synthesize(cfg, tmp_path / "a", workers=1, progress=False)
    b = synthesize(cfg, tmp_path / "b", workers=1, progress=False)
    names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file() and p.suffix != ".mp4")
    assert names and names == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file() and p.suffix != ".mp4")
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes(), n
    c = synthesize(tiny_config(episodes=3, seed=8, cameras=cfg.cameras), tmp_path / "c", workers=1, progress=False)
    assert (a / paths.EPISODES_JSONL_PATH).read_bytes() != (c / paths.EPISODES_JSONL_PATH).read_bytes()


@settings(max_examples=300, deadline=None)
@given(
    workers=st.integers(1, 64),
    cores=st.integers(1, 64),
    rest=st.integers(0, 500),
    episode_s=st.floats(0.01, 60),
    threads=st.floats(0.5, 8),
    startup_cpu_s=st.floats(0.1, 30),
)
def test_a_pool_is_spawned_only_where_it_pays_and_never_past_the_cores(
    workers, cores, rest, episode_s, threads, startup_cpu_s
):
    """Synth spawns at most min(workers, cores, episodes left) processes, and only where each one's start-up (what
    this process paid for its imports) is paid back by the episodes it takes off this one; an encoder whose own
    threads already fill the cores (CPU time = cores x wall time) gains nothing from a pool."""
    from dlbench.synth.write import pool_size

    n = pool_size(workers, cores, rest, episode_s, episode_s * threads, startup_cpu_s)
    assert 1 <= n <= max(1, min(workers, cores, rest))
    if n > 1:
        assert startup_cpu_s + rest * episode_s / n < rest * episode_s
        assert ((n - 1) * startup_cpu_s + rest * episode_s * threads) / cores < rest * episode_s
    if threads >= cores:
        assert n == 1


def test_a_pool_writes_what_one_process_writes(tmp_path, monkeypatch):
    """The pool path (spawned encoders) gives the same files as one process; the decision is forced here because a
    tiny set never pays for a pool."""
    from dlbench.synth import write

    cfg = tiny_config(episodes=3, cameras=(Camera("observation.images.front", 32, 32),))
    one = synthesize(cfg, tmp_path / "one", workers=1, progress=False)
    monkeypatch.setattr(write, "pool_size", lambda *a: 2)
    pooled = synthesize(cfg, tmp_path / "pooled", workers=2, progress=False)
    names = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(pooled) for p in pooled.rglob("*") if p.is_file())
    for n in names:
        if n.suffix != ".mp4":
            assert (one / n).read_bytes() == (pooled / n).read_bytes(), n


def test_refuses_non_empty_directory_unless_overwrite(tmp_path):
    out = tmp_path / "ds"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    cfg = tiny_config(episodes=1, cameras=(Camera("observation.images.front", 32, 32),))
    with pytest.raises(UserError, match="not empty.*--overwrite"):
        synthesize(cfg, out, progress=False)
    assert (out / "keep.txt").read_text() == "precious"
    synthesize(cfg, out, overwrite=True, progress=False, workers=1)
    assert not (out / "keep.txt").exists()
    assert json.loads((out / paths.INFO_PATH).read_text())["total_episodes"] == 1


def test_unknown_codec_lists_the_available_ones(tmp_path):
    with pytest.raises(UserError, match=r"codec 'vp8' is unknown; choose one of \['av1', 'h264', 'hevc'\]"):
        synthesize(tiny_config(codec="vp8"), tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()


def test_missing_datasets_package_names_the_extra(tmp_path, monkeypatch):
    """`datasets` comes only with the workflow extra: without it synth says what to install, before any work."""
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(
        UserError, match=r"needs the datasets package, part of the workflow extra: pip install 'dlbench\[workflow\]'"
    ):
        synthesize(tiny_config(episodes=1), tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()


def test_barcode_reads_back_and_rejects_any_single_wrong_cell():
    frame = np.full((64, 64, 3), 128, np.uint8)
    barcode.paint(frame, 123456, 4321, 5)
    assert barcode.read(frame, channels_last=True) == (123456, 4321, 5)
    c = barcode.cell_px(64, 64)
    for cell in range(barcode.GRID * barcode.GRID):
        r, k = divmod(cell, barcode.GRID)
        damaged = frame.copy()
        block = damaged[r * c : (r + 1) * c, k * c : (k + 1) * c]
        block[...] = 255 - block
        assert barcode.read(damaged, channels_last=True) is None, f"cell {cell} flipped and still accepted"


@pytest.mark.skipif(not synth.encoder_works("av1"), reason="this FFmpeg has no AV1 encoder (libsvtav1)")
def test_av1_encoding_leaves_the_scheduling_policy_alone(tmp_path):
    """SVT-AV1 run as root makes the calling thread SCHED_FIFO 99; workers started afterwards inherited it and a
    2-core machine livelocked in OpenBLAS. Encoding must give the thread its policy back."""
    before = os.sched_getscheduler(0)
    cfg = synth.SynthConfig(codec="av1", cameras=(synth.Camera("c", 64, 64),))
    synth.encode_video(np.zeros((8, 64, 64, 3), np.uint8), tmp_path / "clip.mp4", cfg)
    assert (tmp_path / "clip.mp4").stat().st_size > 0
    assert os.sched_getscheduler(0) == before
