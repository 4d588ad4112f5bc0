"""dlbench reencode and dlbench encoding: every frame kept at its index and timestamp, a damaged source refused
before anything is written, a killed re-encode resumed, LeRobot reading the result, quality measured."""

import json
import shutil

import numpy as np
import pytest

from dlbench import barcode
from dlbench.config import validate_config
from dlbench.encoding.cost import measure, quality, table
from dlbench.encoding.options import Encoding
from dlbench.encoding.reencode import MANIFEST, plan, reencode, run_unit
from dlbench.errors import UserError
from dlbench.format import meta
from dlbench.run import matrix

pytestmark = pytest.mark.unit


def all_frames(root, cam: str, rel: str) -> np.ndarray:
    from torchcodec.decoders import VideoDecoder

    decoder = VideoDecoder(str(root / rel), seek_mode="exact")
    return decoder.get_frames_in_range(0, decoder.metadata.num_frames).data.numpy()


def video_files(root) -> list:
    return sorted(p.relative_to(root) for p in root.glob("videos/*/*/*.mp4"))


@pytest.mark.parametrize(
    "values, message",
    [
        ({"codec": "vp9"}, "datasets.b.reencode.codec: 'vp9' is not allowed"),
        ({"codec": "h264", "gop": 0}, "datasets.b.reencode.gop: 0 is below"),
        ({"codec": "h264", "height": 64}, "datasets.b.reencode: height and width: give both"),
        ({"codec": "h264", "height": 63, "width": 64}, "datasets.b.reencode: height x width 63x64: give even"),
        ({"codec": "av1", "pixel_format": "rgb24"}, "datasets.b.reencode.pixel_format: 'rgb24' is not allowed"),
    ],
)
def test_an_invalid_encoding_is_one_line_naming_the_key(values, message):
    config = {"datasets": {"a": {"synth": {}}, "b": {"reencode": {"from": "a", **values}}}}
    with pytest.raises(UserError, match=message) as e:
        validate_config(config)
        matrix.check_local_dataset(config, "b")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "datasets, message",
    [
        ({"b": {"reencode": {"from": "nope", "codec": "h264"}}}, "datasets.b.reencode.from: 'nope' is not a dataset"),
        (
            {"b": {"reencode": {"from": "c", "codec": "h264"}}, "c": {"reencode": {"from": "b", "codec": "h264"}}},
            "a loop",
        ),
    ],
)
def test_a_reencode_of_nothing_or_of_itself_is_refused(datasets, message):
    config = validate_config({"datasets": datasets})
    with pytest.raises(UserError, match=message):
        matrix.check_local_dataset(config, "b")


def test_the_ffmpeg_arguments_keep_every_frame_at_its_time_and_close_every_gop():
    args = Encoding("hevc", gop=5, crf=20).ffmpeg_args(timescale=15360, threads=2)
    assert args[args.index("-fps_mode") + 1] == "passthrough"
    assert args[args.index("-video_track_timescale") + 1] == "15360"
    assert args[args.index("-g") + 1] == "5" and "no-open-gop=1" in args[args.index("-x265-params") + 1]
    assert "+faststart" in args and "-vf" not in args
    small = Encoding("av1", height=48, width=64, faststart=False).ffmpeg_args(15360, 1)
    assert "scale=64:48:flags=area" in small and "+faststart" not in small
    assert small[small.index("-g") + 1] == "2"  # LeRobot's AV1 default


@pytest.mark.parametrize("codec, gop", [("hevc", 5), ("av1", 4)])
def test_every_frame_keeps_its_index_and_timestamp(v30_h264, tmp_path, codec, gop):
    """Each re-encoded file presents the source's frames at the source's times (checked by the re-encoder), the
    barcode of every frame at every index is the source's, and the quality is measured on every frame."""
    dst = tmp_path / "out"
    record = reencode(str(v30_h264), dst, Encoding(codec, gop=gop, crf=20), workers=2)
    assert video_files(dst) == video_files(v30_h264) and len(record["units"]) == len(video_files(dst))
    info = meta.read_info(str(dst))
    for cam in meta.video_keys(info):
        assert info["features"][cam]["info"]["video.codec"] == codec
        assert info["features"][cam]["info"]["video.g"] == gop
    # the data, episodes and tasks are the source's, byte for byte
    for rel in ("data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet", "meta/tasks.parquet"):
        assert (dst / rel).read_bytes() == (v30_h264 / rel).read_bytes()
    for rel in video_files(dst):
        src, new = all_frames(v30_h264, "", rel), all_frames(dst, "", rel)
        assert new.shape == src.shape
        np.testing.assert_array_equal(barcode.read_batch(new)[:3], barcode.read_batch(src)[:3])
        assert barcode.read_batch(new)[3].all()
    rows = measure(str(dst), "out", reference=str(v30_h264), record=record, every=1)
    assert {r["camera"] for r in rows} == set(meta.video_keys(info))
    for r in rows:
        assert r["psnr_db"] > 35 and 0.9 < r["ssim"] <= 1 and r["keyframe_interval"] <= gop
        assert r["decode_random_frames_per_s"] > 0 and r["encode_frames_per_s"] > 0
    both = table([rows, measure(str(v30_h264), "src")])
    assert both["bytes_vs_source"].notna().sum() == len(rows) and both["label"].notna().all()


def test_quality_of_a_file_against_itself_is_perfect_and_against_another_is_not(v30_h264):
    a, b = video_files(v30_h264)[:2]
    psnr, ssim = quality(str(v30_h264 / a), str(v30_h264 / a))
    assert psnr == float("inf") and ssim == pytest.approx(1.0)
    if all_frames(v30_h264, "", a).shape == all_frames(v30_h264, "", b).shape:
        assert quality(str(v30_h264 / a), str(v30_h264 / b))[0] < 30


@pytest.mark.parametrize("damage", ["missing", "empty", "truncated", "frames"])
def test_a_damaged_source_is_refused_before_anything_is_written(v30_h264, tmp_path, damage):
    src = tmp_path / "src"
    shutil.copytree(v30_h264, src)
    victim = src / video_files(src)[-1]
    if damage == "missing":
        victim.unlink()
    elif damage == "empty":
        victim.write_bytes(b"")
    elif damage == "truncated":
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    else:  # another file's frames in its place
        shutil.copy(src / video_files(src)[0], victim)
    work, dst = tmp_path / "work", tmp_path / "dst"
    with pytest.raises(UserError, match=str(victim.relative_to(src)).replace(".", r"\.")) as e:
        reencode(str(src), dst, Encoding("h264"), work_dir=work)
    assert "\n" not in str(e.value)
    assert not dst.exists() and not work.exists()


def test_a_killed_reencode_resumes_with_the_files_it_had_done(v30_h264, tmp_path):
    """The first unit done (as by a worker killed after it), a rerun re-encodes only the others; a work directory
    of another re-encode is refused."""
    work, dst = tmp_path / "work", tmp_path / "dst"
    enc = Encoding("h264", gop=4)
    manifest = plan(str(v30_h264), work, enc)
    first = manifest["units"][0]
    run_unit(work, manifest, first, threads=1)
    done = (work / "done" / "unit-000000.json").read_text()
    record = reencode(str(v30_h264), dst, enc, work_dir=work)
    assert (work / "done" / "unit-000000.json").read_text() == done  # not redone
    assert [u["unit"] for u in record["units"]] == list(range(len(manifest["units"])))
    assert video_files(dst) == video_files(v30_h264)
    with pytest.raises(UserError, match="another re-encode"):
        plan(str(v30_h264), work, Encoding("hevc"))
    assert json.loads((work / MANIFEST).read_text())["encoding"]["codec"] == "h264"


def test_an_encoding_that_damages_the_barcodes_says_so_and_leaves_them_unread(v30_h264, tmp_path):
    """At h264 crf 51 the 64x64 frames' barcodes do not survive: the record counts the frames, and the dataset is
    no longer marked synthetic, so its runs verify frames by independent decode instead of failing on barcodes."""
    from dlbench.encoding.reencode import LOST_BARCODES
    from dlbench.validate import is_synthetic

    assert is_synthetic(meta.read_info(str(v30_h264)))
    kept = reencode(str(v30_h264), tmp_path / "kept", Encoding("h264", crf=18))
    assert kept["barcodes_unreadable"] == 0 and is_synthetic(meta.read_info(str(tmp_path / "kept")))
    lost = reencode(str(v30_h264), tmp_path / "lost", Encoding("h264", crf=51))
    assert lost["barcodes_unreadable"] == sum(u["barcodes_unreadable"] for u in lost["units"]) > 0
    assert meta.read_info(str(tmp_path / "lost"))["robot_type"] == LOST_BARCODES
