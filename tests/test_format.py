import numpy as np
import pyarrow as pa
import pytest

from dlbench.format import meta, paths

pytestmark = pytest.mark.unit


def test_v21_metadata_round_trip(tmp_path):
    info = {
        "codebase_version": "v2.1",
        "fps": 30,
        "total_episodes": 2,
        "chunks_size": 1000,
        "custom": {"x": 1},
        "features": {"observation.images.a": {"dtype": "video", "shape": [8, 8, 3]}, "action": {"dtype": "float32"}},
    }
    episodes = [
        {"episode_index": 0, "tasks": ["t0"], "length": 5, "extra": "kept"},
        {"episode_index": 1, "tasks": ["t1"], "length": 7},
    ]
    tasks = ["t0", "t1"]
    stats = [
        {
            "episode_index": i,
            "stats": {"action": {"min": [0.0], "max": [1.0], "mean": [0.5], "std": [0.1], "count": [5 + 2 * i]}},
        }
        for i in range(2)
    ]
    meta.write_v21_meta(tmp_path, info, episodes, tasks, stats)
    root = str(tmp_path)
    assert meta.read_info(root) == info
    assert list(meta.iter_episodes_v21(root)) == episodes
    assert meta.read_tasks_v21(root) == tasks
    assert list(meta.iter_episodes_stats_v21(root)) == stats
    assert meta.video_keys(info) == ["observation.images.a"]


def test_v30_metadata_round_trip(tmp_path):
    tasks = ["pick the cube", "place the cube"]
    meta.write_tasks_v30(tmp_path, tasks)
    assert meta.read_tasks_v30(str(tmp_path)) == tasks
    stats = {"action": {"min": [0.0, 1.0], "max": [2.0, 3.0], "mean": [1.0, 2.0], "std": [0.5, 0.5], "count": [10]}}
    meta.write_stats(tmp_path, stats)
    assert meta.read_stats(str(tmp_path)) == stats
    rows = [
        {"episode_index": i, "tasks": [tasks[i % 2]], "length": 3 + i, **meta.flatten_stats(stats)} for i in range(3)
    ]
    meta.write_parquet(tmp_path / paths.v30_episodes_path(0, 1), pa.Table.from_pylist(rows[2:]))
    meta.write_parquet(tmp_path / paths.v30_episodes_path(0, 0), pa.Table.from_pylist(rows[:2]))
    assert meta.read_episodes_v30(str(tmp_path)).to_pylist() == rows
    info = {
        "codebase_version": "v2.1",
        "fps": 30.0,
        "total_chunks": 1,
        "total_videos": 2,
        "video_path": "x",
        "features": {"a": {"dtype": "float32"}, "v": {"dtype": "video"}},
    }
    v3 = meta.v21_info_to_v30(info, 100, 200)
    meta.write_info(tmp_path, v3)
    assert meta.read_info(str(tmp_path)) == v3
    assert v3["codebase_version"] == "v3.0" and "total_chunks" not in v3 and v3["fps"] == 30
    assert v3["features"]["a"]["fps"] == 30 and "fps" not in v3["features"]["v"]
    assert v3["video_path"] == paths.V30_VIDEO_PATH and v3["video_files_size_in_mb"] == 200


def test_aggregate_stats_matches_pooled_data():
    rng = np.random.default_rng(0)
    parts = [rng.normal(size=(n, 2)) for n in (5, 17, 9)]
    per_ep = [
        {"x": {"min": p.min(0), "max": p.max(0), "mean": p.mean(0), "std": p.std(0), "count": [len(p)]}} for p in parts
    ]
    agg = meta.aggregate_stats(per_ep)["x"]
    allx = np.concatenate(parts)
    np.testing.assert_allclose(agg["mean"], allx.mean(0))
    np.testing.assert_allclose(agg["std"], allx.std(0))
    np.testing.assert_allclose(agg["min"], allx.min(0))
    assert agg["count"] == [31]


def test_path_templates():
    assert paths.v21_data_path(1234, 1000) == "data/chunk-001/episode_001234.parquet"
    assert paths.v21_video_path(5, "cam", 1000) == "videos/chunk-000/cam/episode_000005.mp4"
    assert paths.v30_video_path("cam", 2, 7) == "videos/cam/chunk-002/file-007.mp4"
    assert paths.chunk_file_of(1001, 1000) == (1, 1)


def test_atomic_outputs_get_the_usual_mode(tmp_path):
    """Outputs are readable by others under the usual umask (shared cluster storage), not mkstemp's 0600."""
    from dlbench import atomic

    atomic.write_text(tmp_path / "a.txt", "x")
    with atomic.directory(tmp_path / "d") as d:
        (d / "f").write_text("y")
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o666 & ~atomic._UMASK
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o777 & ~atomic._UMASK
