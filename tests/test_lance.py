"""lance_map: lerobot-lancedb's LanceDBDataset over a Lance copy made by its own converter, measured by the harness
in the peer environment with every delivered frame verified, from local disk and from a loopback S3 server."""

import json
import os
import subprocess
import sys

import pytest

from dlbench import loopback, peer
from dlbench.sources import LOOPBACK_CREDENTIALS

from .helpers import free_port, peer_tier

pytestmark = peer_tier("with lerobot-lancedb")
FAST = ["--duration-s", "1", "--warmup-s", "0.2", "--batch-size", "4", "--num-workers", "1", "--probe-samples", "4"]


@pytest.fixture(scope="module")
def lance_copy(v30_h264, tmp_path_factory):
    """The tiny v3.0 dataset (several video files per camera) and its Lance copy, with the conversion's record."""
    out = tmp_path_factory.mktemp("lance")
    record = peer.lance_convert(v30_h264, out / "lance", record=out / "lance.json", name="tiny", timeout=600)
    return v30_h264, out / "lance", record


def bench(root, lance_root, out_dir, *args: str, env: dict | None = None) -> dict:
    """`dlbench bench-run --loader lance_map` (its rank runs in the peer environment); the rank's record."""
    cmd = [sys.executable, "-m", "dlbench", "-q", "bench-run", "--root", str(root), "--loader", "lance_map"]
    cmd += ["--lance-root", str(lance_root), "--out-dir", str(out_dir), *FAST, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out_dir / "rank0of1.json").read_text())


def test_conversion_is_timed_and_recorded(lance_copy):
    v30, lance, record = lance_copy
    info = json.loads((v30 / "meta" / "info.json").read_text())
    assert record["converter"].startswith("lerobot-lancedb ") and record["seconds"] > 0
    assert (record["episodes"], record["frames"]) == (info["total_episodes"], info["total_frames"])
    assert record["output_files"] > 0 and record["output_bytes"] > record["input_bytes"] / 2
    assert (lance / "frames.lance").is_dir() and (lance / "videos.lance").is_dir()
    assert not [p for p in lance.parent.iterdir() if p.name.startswith(".")]  # no temporary left beside it


@pytest.mark.parametrize("mode, frames_per_sample", [("single", 2), ("sarm", 16)])
def test_lance_map_delivers_frames_and_every_frame_is_verified(lance_copy, tmp_path, mode, frames_per_sample):
    v30, lance, _ = lance_copy
    rec = bench(v30, lance, tmp_path / "run", "--mode", mode)
    m = rec["metrics"]
    assert rec["status"] == "ok" and rec["config"]["loader"] == "lance_map" and not rec.get("reason")
    assert m["samples"] > 0 and m["frames_per_sample"] == frames_per_sample
    assert (
        m["frames_barcode_checked"] == (m["samples"] + m["warmup_samples"]) * frames_per_sample
        and m["frames_wrong"] == 0
    )
    assert m["frames_decode_checked"] > 0  # a sample compared with an independent decode of the v3.0 files


def test_a_copy_of_another_dataset_is_refused_by_name(lance_copy, v21_h264, tmp_path):
    """A Lance copy that does not hold the run's dataset (here: a v3.0 dataset given as the copy) stops the run."""
    v30, _, _ = lance_copy
    cmd = [sys.executable, "-m", "dlbench", "-q", "bench-run", "--root", str(v30), "--loader", "lance_map"]
    cmd += ["--lance-root", str(v30), "--out-dir", str(tmp_path / "run"), *FAST]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and f"{v30}: no Lance copy there (frames.lance missing)" in proc.stderr


@pytest.mark.server
def test_lance_map_on_loopback_s3_is_metered_and_verified(lance_copy, tmp_path):
    """Both forms staged to SeaweedFS: LanceDBDataset reads its copy through the rank's metering proxy (Lance's own
    object-store client), the harness checks frames against the v3.0 copy."""
    v30, lance, _ = lance_copy
    port, state = free_port(), tmp_path / "state.json"
    loopback.start(port, [], state, tmp_path / "logs", data_dir=tmp_path / "data")
    endpoint = f"http://127.0.0.1:{port}"
    env = {**LOOPBACK_CREDENTIALS, **os.environ}
    try:
        for local, url in ((v30, "s3://dlbench-test/tiny"), (lance, "s3://dlbench-test/tiny-lance")):
            marker = tmp_path / f"{url.rsplit('/', 1)[1]}.json"
            cmd = [sys.executable, "-m", "dlbench", "stage", str(local), url, "--marker", str(marker)]
            staged = subprocess.run([*cmd, "--endpoint-url", endpoint], capture_output=True, text=True, env=env)
            assert staged.returncode == 0, staged.stderr
        rec = bench(
            "s3://dlbench-test/tiny",
            "s3://dlbench-test/tiny-lance",
            tmp_path / "run",
            "--endpoint-url",
            endpoint,
            env=env,
        )
    finally:
        loopback.stop(state)
    m = rec["metrics"]
    assert rec["status"] == "ok" and m["samples"] > 0 and m["frames_wrong"] == 0
    assert m["frames_barcode_checked"] == (m["samples"] + m["warmup_samples"]) * m["frames_per_sample"]
    assert m["remote_requests"] > 0 and m["remote_bytes_read"] > 0 and m["remote_requests_window"] > 0
