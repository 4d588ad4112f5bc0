"""The re-encoding probe: a few seconds of a long-GOP dataset's own video re-encoded at the candidates, measured as a
map-style worker reads them; the advice prescribes the best from it with no variant in the matrix, and `--verify`'s
spec re-encodes the whole dataset for it."""

import json

import pandas as pd
import pytest

from dlbench.advice import prescribe as prescribe_mod
from dlbench.advice.prescribe import prescribe
from dlbench.advice.prove import changed_spec
from dlbench.convert.run import run as convert
from dlbench.encoding import probe
from dlbench.encoding.cost import _keyframe_interval
from dlbench.encoding.options import Encoding
from dlbench.encoding.reencode import _episode_files
from dlbench.format import meta
from dlbench.model import Calibration
from dlbench.run.spec import make_run
from dlbench.synth import Camera, synthesize

from .helpers import cost, tiny_config

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def long_gop(tmp_path_factory):
    """Two episodes of 4 s, one 96x128 camera-like camera, H.264 with a keyframe every 60 frames."""
    work = tmp_path_factory.mktemp("longgop")
    config = tiny_config(episodes=2, length_min=120, length_max=120, gop=60, content="camera",
                         cameras=(Camera("observation.images.front", 96, 128),))  # fmt: skip
    return convert(str(synthesize(config, work / "v21", progress=False)), work / "v30", workers=1, progress=False)


def test_the_probe_measures_each_candidate_against_the_source(long_gop):
    found = probe.probe(str(long_gop))
    assert [p.encoding for p in found] == list(probe.CANDIDATES)
    for p in found:
        assert p.camera == "observation.images.front" and p.psnr_db >= probe.MIN_PSNR_DB
        assert p.source_ms_per_frame > 0 and p.ms_per_frame > 0 and p.bytes_vs_source > 0
    g1 = found[0]
    assert g1.encoding.gop == 1 and g1.decode_ratio < 0.7  # a random frame of GOP 60 costs a seek and ~30 decodes
    assert probe.best(found)[0] in probe.CANDIDATES


def test_the_best_candidate_is_the_fastest_that_keeps_the_picture():
    enc_fast, enc_ok = Encoding("h264", gop=1, crf=40), Encoding("h264", gop=2, crf=20)
    found = [
        probe.Probe(enc_fast, "cam", 10.0, 1.0, 0.5, 30.0, 0.1),  # fastest, but 30 dB: not prescribed
        probe.Probe(enc_ok, "cam", 10.0, 2.0, 3.0, 41.0, 0.1),
    ]
    enc, ratio, size, psnr = probe.best(found)
    assert enc == enc_ok and ratio == pytest.approx(0.2) and size == 3.0 and psnr == 41.0
    assert probe.best(found[:1]) is None


def decoding_row(run, dataset: str, c) -> dict:
    """summary.csv's row of `run`: two workers at the calibrated worker's pace, 90% of each item decoding."""
    return {"scenario": "s", "run_id": run.run_id, "dataset": dataset, "source": "local", "loader": "dlbench_map",
            "mode": "single", "batch_size": run.batch_size, "num_workers": 2, "decode_device": "cpu", "step_ms": 0,
            "ranks": 1, "nodes": 1, "status": "ok", "frames_per_s_node": 2 * 2 / c.worker_s,
            "worker_item_ms_per_sample": 10.0, "worker_decode_ms_per_sample": 9.0}  # fmt: skip


def test_a_map_run_decoding_a_long_gop_is_prescribed_a_probed_reencoding_and_verify_makes_it(long_gop, tmp_path):
    prescribe_mod._PROBES.clear()
    c = cost(worker_ms=10.0)
    cal = Calibration("lg", "local", "h", 2, 2, 1, None, 1.0, costs=[c])  # 2 workers on its 2 cores
    run = make_run({"root": str(long_gop), "loader": "dlbench_map", "num_workers": 2})
    row = decoding_row(run, "lg", c)
    spec = run.to_dict()
    top = prescribe(row, cal, spec=spec)[0]
    assert top.change == {"dataset": "lg_h264g1"} and top.reencode["from"] == "lg" and top.reencode["gop"] == 1
    assert top.gain >= 1.3 and "probed, not measured" in top.why and "lg_h264g1: {reencode: {from: lg" in top.why
    # a run that decodes little of its time is not probed
    assert not any(p.reencode for p in prescribe({**row, "worker_decode_ms_per_sample": 2.0}, cal, spec=spec))

    new = changed_spec(run, top.change, tmp_path, pd.DataFrame(), top.reencode)
    assert new.dataset == "lg_h264g1" and new.root == str(tmp_path / "advice/reencoded/lg_h264g1")
    info = meta.read_info(new.root)
    files = _episode_files(new.root, info)["observation.images.front"]
    assert _keyframe_interval(new.root, files) == 1  # every frame a keyframe, as probed
    assert json.loads((tmp_path / "advice/reencoded/lg_h264g1/meta/info.json").read_text())["total_frames"] == 240


def test_tune_reports_reencoding_as_a_lever_with_its_gain_and_cost(long_gop):
    """On GOP 60 a map worker's random frame costs a seek and ~30 decodes: the probe's GOP-1/2 candidates cut it,
    the model turns that into each loader's gain, each proven loader's best is scaled by its own, and the encode
    time is the clip's scaled to the dataset's frames."""
    from dlbench.tune.reencode import WORTH, lever
    from dlbench.tune.run import _reencode_lines
    from dlbench.tune.search import Candidate

    costs = [cost(worker_ms=40.0, loader="dlbench_map", fps=1), cost(worker_ms=20.0, loader="dlbench_stream", fps=1)]
    cal = Calibration("lg", "local", "h", 2, 2, 1, None, 1.0, costs=costs)
    proven = []
    for loader, fps in (("dlbench_map", 50.0), ("dlbench_map", 100.0), ("dlbench_stream", 120.0)):
        c = Candidate(loader, {"num_workers": 2})
        c.measured = {"frames_per_s_node": fps}
        proven.append(c)
    constraints = {"mode": "single", "batch_size": 16, "cores": 2, "nodes": 1}
    r = lever(str(long_gop), cal, proven, constraints, None, 240, 96 * 128)
    assert r["reencode"]["gop"] in (1, 2) and r["psnr_db"] >= probe.MIN_PSNR_DB and r["bytes_vs_source"] > 0
    src, new = r["random_ms_per_frame"]
    assert 0 < new < src  # measured, not assumed
    gain = r["predicted_gain"]
    assert gain["dlbench_map"] > 1.0 and set(gain) == {"dlbench_map", "dlbench_stream"}
    for loader, fps in (("dlbench_map", 100.0), ("dlbench_stream", 120.0)):  # each loader's best, by its own gain
        assert r["predicted_fps"][loader] == pytest.approx(fps * gain[loader], abs=1.0)
    # the best after, by the unrounded figures: two loaders may round to the same frames/s
    assert r["answer_fps"] == 120 and r["predicted_fps"][r["best_after"]] == max(r["predicted_fps"].values())
    assert r["bigger_lever"] == (max(r["predicted_fps"].values()) >= WORTH * 120)
    assert r["encode_s_one_process"] >= 0 and r["command"].startswith(f"dlbench reencode {long_gop} ")
    text = "\n".join(_reencode_lines(r))
    assert "predicted from a probe, not measured" in text and r["command"] in text
    # a dataset whose videos the probe cannot read: one note, no figures
    assert set(lever("/nowhere", cal, proven, constraints, None, 240, 96 * 128)) == {"note"}


@pytest.fixture(scope="module")
def two_cameras_one_episode(tmp_path_factory):
    """One episode of 1.5 s (shorter than the probe's clip), two cameras of other sizes, H.264 GOP 30."""
    work = tmp_path_factory.mktemp("twocams")
    cameras = (Camera("observation.images.left", 96, 128), Camera("observation.images.wrist", 64, 64))
    config = tiny_config(episodes=1, length_min=45, length_max=45, gop=30, content="camera", cameras=cameras)
    return convert(str(synthesize(config, work / "v21", progress=False)), work / "v30", workers=1, progress=False)


def test_each_camera_of_a_one_episode_set_is_probed_on_the_frames_it_has(two_cameras_one_episode):
    found = probe.probe(str(two_cameras_one_episode))
    assert sorted({p.camera for p in found}) == ["observation.images.left", "observation.images.wrist"]
    assert len(found) == 2 * len(probe.CANDIDATES) and all(p.psnr_db >= probe.MIN_PSNR_DB for p in found)
    enc, ratio, _, psnr = probe.best(found)
    picked = [p for p in found if p.encoding == enc]
    assert ratio == pytest.approx(sum(p.ms_per_frame for p in picked) / sum(p.source_ms_per_frame for p in picked))
    assert psnr == min(p.psnr_db for p in picked)


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_damaged_video_stops_the_probe_with_one_line_naming_it_and_the_advice_goes_on(
    two_cameras_one_episode, tmp_path, damage
):
    import shutil

    from dlbench.errors import UserError

    root = tmp_path / "v30"
    shutil.copytree(two_cameras_one_episode, root)
    first = sorted((root / "videos").rglob("*.mp4"))[0]
    if damage == "missing":
        first.unlink()
    else:
        first.write_bytes(first.read_bytes()[: first.stat().st_size // 3])
    with pytest.raises(UserError, match=str(first.relative_to(root))):
        probe.probe(str(root))
    # the advice prescribes no re-encoding for it, and says nothing worse than that
    prescribe_mod._PROBES.clear()
    c = cost(worker_ms=10.0)
    cal = Calibration("d", "local", "h", 2, 1, 1, None, 1.0, costs=[c])
    run = make_run({"root": str(root), "loader": "dlbench_map", "num_workers": 2})
    row = decoding_row(run, "d", c)
    assert not any(p.reencode for p in prescribe(row, cal, spec=run.to_dict()))
