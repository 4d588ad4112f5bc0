import json
from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq
import pytest

from dlbench import barcode
from dlbench.convert import plan as planmod
from dlbench.decode.cache import VideoDecoderCache
from dlbench.errors import UserError
from dlbench.format import meta, paths
from dlbench.validate import validate

from .helpers import SMALL_FILES

pytestmark = pytest.mark.unit


def test_converted_dataset_validates_with_several_files_per_stream(v30_h264):
    report = validate(str(v30_h264))
    assert report["ok"] and report["frames_wrong"] == 0 and report["barcodes_checked"]
    assert report["data_files"] >= 3
    for cam in ("observation.images.front", "observation.images.wrist"):
        assert len(list((v30_h264 / "videos" / cam).rglob("*.mp4"))) >= 2


def test_every_frame_is_at_from_timestamp_plus_timestamp(v30_h264, v21_h264):
    info = meta.read_info(str(v30_h264))
    assert info["codebase_version"] == "v3.0"
    assert info["total_frames"] == meta.read_info(str(v21_h264))["total_frames"]
    eps = meta.read_episodes_v30(str(v30_h264)).to_pylist()
    cache = VideoDecoderCache(4)
    for cam_index, cam in enumerate(meta.video_keys(info)):
        for e in eps:
            url = str(
                v30_h264 / paths.v30_video_path(cam, e[f"videos/{cam}/chunk_index"], e[f"videos/{cam}/file_index"])
            )
            start = e[f"videos/{cam}/from_timestamp"]
            times = [start + k / info["fps"] for k in range(e["length"])]
            ep, fr, c, valid = barcode.read_batch(cache.decode(url, times, info["fps"]))
            assert valid.all() and (ep == e["episode_index"]).all() and (c == cam_index).all()
            assert fr.tolist() == list(range(e["length"]))
            assert e[f"videos/{cam}/to_timestamp"] == pytest.approx(start + e["length"] / info["fps"], abs=1e-9)


def test_rows_and_metadata_match_the_source(v30_h264, v21_h264):
    src = [pq.read_table(p) for p in sorted(v21_h264.glob("data/*/*.parquet"))]
    dst = [pq.read_table(p) for p in sorted(v30_h264.glob("data/*/*.parquet"))]
    src_rows = [r for t in src for r in t.to_pylist()]
    dst_rows = [r for t in dst for r in t.to_pylist()]
    assert src_rows == dst_rows
    eps = meta.read_episodes_v30(str(v30_h264)).to_pylist()
    legacy = list(meta.iter_episodes_v21(str(v21_h264)))
    assert [e["tasks"] for e in eps] == [e["tasks"] for e in legacy]
    assert meta.read_tasks_v30(str(v30_h264)) == meta.read_tasks_v21(str(v21_h264))
    stats = json.loads((v30_h264 / paths.STATS_PATH).read_text())
    all_state = np.array([r["observation.state"] for r in src_rows])
    np.testing.assert_allclose(stats["observation.state"]["mean"], all_state.mean(0), rtol=1e-5, atol=1e-6)
    assert stats["index"]["count"] == [len(src_rows)]


def test_v30_input_is_refused_with_a_hint(v30_h264, tmp_path):
    from dlbench.convert.plan import plan

    with pytest.raises(UserError, match="codebase_version is 'v3.0', expected 'v2.1'; it is already v3.0"):
        plan(str(v30_h264), tmp_path / "work")


def test_validate_names_a_broken_dataset(v30_h264, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(v30_h264, broken)
    info = json.loads((broken / paths.INFO_PATH).read_text())
    info["total_frames"] += 1
    (broken / paths.INFO_PATH).write_text(json.dumps(info))
    with pytest.raises(UserError, match="total_frames"):
        validate(str(broken))


def test_convert_does_not_import_pandas(v21_h264, tmp_path):
    """pandas costs ~0.35 s to import; no step of a conversion (plan, the workers' units, finalize) pays it."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom dlbench.convert import plan, work, finalize\nplan.plan(sys.argv[1], sys.argv[2])\n"
        "assert work.work(sys.argv[2]) > 0\nfinalize.finalize(sys.argv[2], sys.argv[3])\n"
        "assert 'pandas' not in sys.modules, 'the converter imported pandas'"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(v21_h264), str(tmp_path / "work"), str(tmp_path / "dst")], check=True
    )


def test_metadata_tables_built_without_pandas_equal_pandas_own(v30_h264):
    """meta/tasks.parquet and meta/episodes are built without pandas; they must be what pandas/pyarrow would write."""
    import pandas as pd
    import pyarrow as pa

    tasks = ["pick the cube", 'place it: ünïcode, "quotes"']
    df = pd.DataFrame({"task_index": np.arange(len(tasks), dtype=np.int64)}, index=pd.Index(tasks, name="task"))
    ours = meta.tasks_table_v30(tasks)
    assert ours.equals(pa.Table.from_pandas(df)) and ours.schema.equals(
        pa.Table.from_pandas(df).schema, check_metadata=True
    )
    pd.testing.assert_frame_equal(ours.to_pandas(), df)
    rows = pq.read_table(next((v30_h264 / "meta" / "episodes").rglob("*.parquet"))).to_pylist()
    expected = pa.Table.from_pylist(rows)
    got = meta.table_from_rows(rows)
    assert got.schema.equals(expected.schema) and got.equals(expected)
    assert meta.table_from_rows(rows[:1], expected.schema).equals(expected.slice(0, 1))
    nan_rows = [{"a": 1, "b": [float("nan"), 1.0]}]
    got, expected = meta.table_from_rows(nan_rows), pa.Table.from_pylist(nan_rows)
    assert got.schema.equals(expected.schema) and repr(got.to_pylist()) == repr(expected.to_pylist())


def test_full_output_files_are_units_of_their_own(v21_h264, tmp_path):
    """Files of few large episodes must not ride in one unit per camera, or a worker per camera is all that runs."""
    manifest = planmod.plan(str(v21_h264), tmp_path / "work", replace(SMALL_FILES, episodes_per_batch=10_000))
    units = [planmod.load_unit(tmp_path / "work", u) for u in range(manifest["units"])]
    for cam in ("observation.images.front", "observation.images.wrist"):
        files = [f for u in units if u["stream"] == cam for f in u["files"]]
        assert len(files) >= 3
        # a unit closes as soon as its files reach half the threshold: every file but a unit's last stays under it
        # (so a unit holds several files only where an episode too big for the open file closed it early)
        half = SMALL_FILES.video_file_size_in_mb * 2**20 / 2
        size = lambda e, cam=cam: (v21_h264 / paths.v21_video_path(e, cam, 1000)).stat().st_size  # noqa: E731
        cam_units = [u for u in units if u["stream"] == cam]
        assert len(cam_units) >= 2
        for u in cam_units:
            assert sum(size(e) for f in u["files"][:-1] for e in f["source_episodes"]) < half


def test_a_file_url_is_a_local_path_everywhere(v21_h264, v30_h264, tmp_path):
    """file:// is local for the converter, the metadata readers and the loaders alike (read natively, no fsspec)."""
    from dlbench.loader import LeRobotMapDataset

    assert not paths.is_remote(f"file://{v21_h264}") and paths.is_remote("s3://bucket/x")
    src = f"file://{v21_h264}"
    manifest = planmod.plan(src, tmp_path / "work", SMALL_FILES)
    assert manifest["src"] == str(v21_h264)  # recorded as the plain path
    assert meta.exists(src, "meta/info.json") and not meta.exists(src, "meta/nope.json")
    report = validate(f"file://{v30_h264}")
    assert report["ok"] and report["frames_decoded"] > 0
    item = LeRobotMapDataset(root=f"file://{v30_h264}")[0]
    assert item["index"] == 0
