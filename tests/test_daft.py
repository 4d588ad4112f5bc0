"""daft_data: Daft's LeRobot reader (daft.datasets.lerobot, Daft 0.7.26) measured by the harness in the peer
environment, every delivered frame verified: at its default order and shuffled, and the one line for each run it
cannot do."""

import json
import os
import subprocess
import sys

import pytest

from dlbench import peer

from .helpers import dlbench, peer_tier

FAST = ["--duration-s", "1.5", "--warmup-s", "0.2", "--batch-size", "8"]


def _daft_missing() -> str | None:
    python = peer.peer_python()
    if python is None:
        return None  # peer_tier skips
    has = "import importlib.util, sys; sys.exit(importlib.util.find_spec('daft') is None)"
    if subprocess.run([str(python), "-c", has]).returncode:
        return f"Daft missing from the peer environment; add it with {peer.CREATE_COMMAND}"
    return None


pytestmark = [*peer_tier("with Daft"), pytest.mark.skipif(_daft_missing() is not None, reason=str(_daft_missing()))]


def bench(root, out_dir, *args: str) -> dict:
    proc = dlbench("-q", "bench-run", "--root", str(root), "--loader", "daft_data", "--out-dir", str(out_dir),
                   *FAST, *args)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out_dir / "rank0of1.json").read_text())


def test_dafts_reader_is_verified_in_its_order_and_shuffled(v30_h264, tmp_path):
    """Daft's default order is the files': a batch is neighbouring frames. Its global shuffle reorders the decoded
    rows: batches nearer independent draws. Both deliver every frame right (barcodes: 2 cameras a sample), with
    its items' fields as LeRobot's loaders name them."""
    plain = bench(v30_h264, tmp_path / "plain")
    shuffled = bench(v30_h264, tmp_path / "shuffled", "--daft-shuffle", "global")
    assert shuffled["config"]["daft_shuffle"] == "global" and plain["config"]["daft_shuffle"] is None
    for rec in (plain, shuffled):
        m = rec["metrics"]
        assert rec["status"] == "ok" and m["samples"] > 0 and m["frames_per_sample"] == 2
        assert m["frames_barcode_checked"] == (m["samples"] + m["warmup_samples"]) * 2 and m["frames_wrong"] == 0
        assert m["peak_pss_mb"] > 100
    low, high = plain["metrics"]["shuffle_effective_batch"], shuffled["metrics"]["shuffle_effective_batch"]
    assert low < 0.3 and high > max(0.5, 2 * low), (low, high)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--mode", "sarm"], "loader daft_data reads single frames"),
        (["--decode-device", "cuda"], "loader daft_data decodes on the CPU only"),
    ],
)
def test_what_daft_data_cannot_do_is_one_line(v30_h264, tmp_path, args, says):
    proc = dlbench("-q", "bench-run", "--root", str(v30_h264), "--loader", "daft_data", "--out-dir",
                   str(tmp_path / "run"), *FAST, "--on-unavailable", "error", *args)  # fmt: skip
    assert proc.returncode != 0 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_daft_knobs_on_another_loader_are_refused_by_name(v30_h264, tmp_path):
    proc = dlbench("-q", "bench-run", "--root", str(v30_h264), "--loader", "dlbench_map", "--out-dir",
                   str(tmp_path / "run"), *FAST, "--daft-shuffle", "global")  # fmt: skip
    assert proc.returncode != 0 and "applies to loader daft_data only, not dlbench_map" in proc.stderr


def test_a_peer_environment_without_daft_records_the_run_skipped_with_the_command(v30_h264, tmp_path):
    env = {"DLBENCH_PEER_PYTHON": sys.executable}  # this interpreter: no Daft here
    proc = dlbench("-q", "bench-run", "--root", str(v30_h264), "--loader", "daft_data", "--out-dir",
                   str(tmp_path / "run"), *FAST, env={**os.environ, **env})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads((tmp_path / "run" / "rank0of1.json").read_text())
    assert rec["status"] == "skipped" and "needs Daft in the peer environment" in rec["reason"]
