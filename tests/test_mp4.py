"""Joining episode videos by copying MP4 boxes: the same packets, times and frames as FFmpeg's remux."""

import json
import shutil
import struct
from dataclasses import replace
from fractions import Fraction

import av
import pytest
import torch
from torchcodec.decoders import VideoDecoder

from dlbench.convert import finalize as finalizemod
from dlbench.convert import join
from dlbench.convert import plan as planmod
from dlbench.convert import work as workmod
from dlbench.convert.run import run as convert_run
from dlbench.format import meta, paths
from dlbench.format.mp4 import read_track
from dlbench.synth import Camera
from dlbench.validate import validate

from .helpers import SMALL_FILES, synth_cached, tiny_config

pytestmark = pytest.mark.unit

CAM = "observation.images.front"


def top_level(path) -> list[tuple[bytes, int, int]]:
    """(type, offset, size) of a file's top-level boxes."""
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        size, kind = struct.unpack_from(">I4s", data, pos)
        if size == 1:
            (size,) = struct.unpack_from(">Q", data, pos + 8)
        out.append((kind, pos, size))
        pos += size
    return out


def packets(path) -> list[tuple[int, int, bool, bytes]]:
    with av.open(str(path)) as c:
        return [(p.pts, p.dts, p.is_keyframe, bytes(p)) for p in c.demux(c.streams.video[0]) if p.size]


@pytest.fixture(scope="module")
def v21_av1(tmp_path_factory):
    cams = (Camera(CAM, 64, 64),)
    cfg = tiny_config(codec="av1", episodes=4, cameras=cams)
    return synth_cached(cfg, tmp_path_factory.mktemp("av1") / "v21")


@pytest.mark.parametrize("dataset", ["v21_h264", pytest.param("v21_av1", marks=pytest.mark.slow)])
def test_joined_video_equals_ffmpeg_remux(dataset, request, tmp_path):
    """H.264 brings B-frames (ctts, an edit list), AV1 the sdtp table: same packets, timestamps and frames."""
    src = request.getfixturevalue(dataset)
    info = meta.read_info(str(src))
    eps = list(meta.iter_episodes_v21(str(src)))[:4]
    rels = [paths.v21_video_path(int(e["episode_index"]), CAM, int(info["chunks_size"])) for e in eps]
    lengths = [int(e["length"]) for e in eps]
    fps = Fraction(info["fps"])
    joined, remuxed = tmp_path / "joined.mp4", tmp_path / "remuxed.mp4"
    ours = workmod._join(str(src), rels, lengths, fps, joined)
    theirs = workmod._remux(str(src), rels, lengths, fps, remuxed)
    assert ours == theirs  # every episode's tick range and the time base

    assert [k for k, _, _ in top_level(joined)] == [b"ftyp", b"moov", b"mdat"]  # index first: one HTTP request
    assert packets(joined) == packets(remuxed)
    a, b = VideoDecoder(str(joined)), VideoDecoder(str(remuxed))
    assert a.metadata.num_frames == b.metadata.num_frames == sum(lengths)
    assert a.metadata.duration_seconds == pytest.approx(sum(lengths) / info["fps"])
    fa, fb = a.get_frames_in_range(0, sum(lengths)), b.get_frames_in_range(0, sum(lengths))
    assert torch.equal(fa.pts_seconds, fb.pts_seconds) and torch.equal(fa.data, fb.data)
    starts = [e["from_ticks"] * Fraction(*e["time_base"]) for e in ours]
    assert starts == [Fraction(sum(lengths[:k]), info["fps"]) for k in range(len(lengths))]


def test_fragmented_episodes_are_remuxed_and_others_joined(v21_h264, tmp_path):
    """A camera recorded as fragmented MP4 falls back to FFmpeg; the conversion is right either way."""
    src = tmp_path / "v21"
    shutil.copytree(v21_h264, src)
    for path in sorted((src / "videos").rglob(f"{CAM}/*.mp4")):
        fragmented = path.with_suffix(".frag.mp4")
        frag = {"movflags": "frag_keyframe+empty_moov"}
        with av.open(str(path)) as i, av.open(str(fragmented), "w", format="mp4", options=frag) as o:
            s = o.add_stream_from_template(i.streams.video[0])
            for p in i.demux(i.streams.video[0]):
                if p.dts is not None:
                    p.stream = s
                    o.mux(p)
        fragmented.replace(path)
    work = tmp_path / "work"
    dst = convert_run(str(src), tmp_path / "v30", workers=2, work_dir=work, options=SMALL_FILES, progress=False)
    joined_by = {}
    for done in (work / workmod.DONE_DIR).glob("*.json"):
        record = json.loads(done.read_text())
        for f in record["files"]:
            joined_by.setdefault(record["stream"], set()).add(f.get("joined_by"))
    assert joined_by[CAM] == {"ffmpeg remux"}
    assert joined_by["observation.images.wrist"] == {"mp4 boxes"}
    report = validate(str(dst))
    assert report["ok"] and report["frames_wrong"] == 0 and report["barcodes_checked"]


def test_offsets_past_4_gib_are_64_bit(v21_h264):
    """Files over 4 GiB need co64 chunk offsets and a 64-bit mdat size; faked here by inflating the copied ranges."""
    info = meta.read_info(str(v21_h264))
    rel = paths.v21_video_path(0, CAM, int(info["chunks_size"]))
    with open(v21_h264 / rel, "rb") as fh:
        track = read_track(fh, rel)
    big = 3 * 2**30
    tracks = [replace(track, data_range=(track.data_range[0], big)) for _ in range(3)]
    header = join.join(tracks).header
    moov_at = header.index(b"moov") - 4
    mdat_at = len(header) - 16
    assert header[mdat_at + 4 : mdat_at + 8] == b"mdat"
    assert struct.unpack_from(">I", header, mdat_at)[0] == 1  # largesize follows
    assert struct.unpack_from(">Q", header, mdat_at + 8)[0] == 3 * big + 16
    assert b"stco" not in header[moov_at:]
    co64 = header.index(b"co64")
    (count,) = struct.unpack_from(">I", header, co64 + 8)
    offsets = struct.unpack_from(f">{count}Q", header, co64 + 12)
    per_file = len(track.chunk_offsets)
    assert count == 3 * per_file
    base = len(header)
    first = [o - track.data_range[0] + base for o in track.chunk_offsets]
    assert list(offsets) == [o + k * big for k in range(3) for o in first]
    assert max(offsets) > 2**32


def test_remote_sources_are_joined_through_their_file_objects(v21_h264, tmp_path):
    """A source without file descriptors (fsspec's memory filesystem, as for S3 or the Hub) is copied in user space."""
    import fsspec

    mem = fsspec.filesystem("memory")
    for path in v21_h264.rglob("*"):
        if path.is_file():
            mem.pipe(f"/dlbench-test-v21/{path.relative_to(v21_h264)}", path.read_bytes())
    work = tmp_path / "work"
    try:  # in this process: worker processes would not see the memory filesystem
        planmod.plan("memory:///dlbench-test-v21", work, planmod.PlanOptions())
        workmod.work(work)
        dst = finalizemod.finalize(work, tmp_path / "v30")
    finally:
        mem.rm("/dlbench-test-v21", recursive=True)
    records = [json.loads(p.read_text()) for p in (work / workmod.DONE_DIR).glob("*.json")]
    assert {f.get("joined_by") for r in records if r["stream"] != "data" for f in r["files"]} == {"mp4 boxes"}
    report = validate(str(dst))
    assert report["ok"] and report["frames_wrong"] == 0 and report["barcodes_checked"]
