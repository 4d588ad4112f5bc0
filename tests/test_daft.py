"""daft_data: Daft's LeRobot reader (daft.datasets.lerobot, Daft 0.7.26) measured by the harness in the peer
environment, every delivered frame verified: at its default order and shuffled, and the one line for each run it
cannot do."""

import json
import os
import subprocess
import sys
from datetime import datetime

import pytest

from dlbench import peer

from .helpers import BUCKET_URL, dlbench, peer_tier

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


@pytest.mark.parametrize("mode, frames", [("single", 2), ("sarm", 16)])
def test_dafts_reader_is_verified_in_its_order_and_shuffled(v30_h264, tmp_path, mode, frames):
    """Daft's default order is the files': a batch is neighbouring frames. Its rows shuffled before the decode
    and its global shuffle after it (single frames) give batches nearer independent draws. Each delivers every
    frame right (barcodes: 2 cameras a sample, 8 steps each in sarm, clamped at the episode's start as LeRobot
    clamps them), with its items' fields as LeRobot's loaders name them."""
    runs = {"none": bench(v30_h264, tmp_path / "plain", "--mode", mode)}
    # sarm in Daft's order only: shuffled, each row's 8 steps are decoded forward through the file (about a sample
    # a second); the windows' rows are checked by test_dafts_windows_are_lerobots
    for how in ("rows", "global") if mode == "single" else ():
        runs[how] = bench(v30_h264, tmp_path / how, "--mode", mode, "--daft-shuffle", how)
        assert runs[how]["config"]["daft_shuffle"] == how
        # the query is left behind at the last window, not waited for: Daft cannot cancel one, and closing it
        # decoded the rest of its in-flight rows first (36 s of a 70 s run on the default set); the frame check
        # after it takes seconds
        end = runs[how]["metrics"]["window_end_unix"]
        finished = datetime.strptime(runs[how]["finished_at"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
        assert finished - end < 20, (how, finished - end)
    assert runs["none"]["config"]["daft_shuffle"] is None
    for rec in runs.values():
        m = rec["metrics"]
        assert rec["status"] == "ok" and m["samples"] > 0 and m["frames_per_sample"] == frames
        checked = (m["samples"] + m["warmup_samples"]) * frames
        assert m["frames_barcode_checked"] == checked and m["frames_wrong"] == 0, m
        assert m["peak_pss_mb"] > 100
    low = runs["none"]["metrics"]["shuffle_effective_batch"]
    for how in set(runs) - {"none"}:
        high = runs[how]["metrics"]["shuffle_effective_batch"]
        assert low < 0.3 and high > max(0.5, 2 * low), (how, low, high)


def test_dafts_windows_are_lerobots(v30_h264):
    """Windows built in Daft hold LeRobot's: each step the episode's row at that offset, clamped to the episode,
    `<key>_is_pad` where it falls outside; past steps (a state history) and future ones (an action chunk), checked
    in the peer environment against the data files read by pyarrow."""
    code = f"""
import numpy as np, pyarrow.parquet as pq, glob
from dlbench.bench.adapters.daft_data import DaftBatches
from dlbench.loader.dataset_meta import DatasetMeta
from dlbench.run.spec import RunSpec
meta = DatasetMeta.load({str(v30_h264)!r})
steps = {{"observation.state": [-40, -1, 0], "action": [0, 1, 2, 30, 200]}}
deltas = {{k: [s / meta.fps for s in v] for k, v in steps.items()}}
run = RunSpec(root={str(v30_h264)!r}, loader="daft_data", batch_size=4, delta_timestamps=deltas)
t = pq.read_table(sorted(glob.glob({str(v30_h264)!r} + "/data/*/*.parquet"))).to_pandas()
length = t.groupby("episode_index").frame_index.max() + 1
seen = 0
for batch in DaftBatches(run, meta):
    for j in range(4):
        ep, fr = int(batch["episode_index"][j]), int(batch["frame_index"][j])
        for key, offsets in steps.items():
            at = fr + np.array(offsets)
            values = dict(zip(t.frame_index[t.episode_index == ep], t[key][t.episode_index == ep]))
            want = np.stack([values[int(np.clip(a, 0, length[ep] - 1))] for a in at])
            assert np.allclose(batch[key][j].numpy(), want), (key, ep, fr)
            pad = ((at < 0) | (at >= length[ep])).tolist()
            assert batch[key + "_is_pad"][j].tolist() == pad, (key, ep, fr)
        seen += 1
    if seen >= 40:
        break
print("checked", seen)
"""
    env = {**os.environ, "PYTHONPATH": str(peer.REPO_ROOT / "src")}  # as the harness runs dlbench there
    proc = subprocess.run([str(peer.peer_python()), "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and "checked 40" in proc.stdout, proc.stderr[-3000:]


def test_dafts_reader_on_s3_reads_through_the_ranks_metering_proxy_every_frame_right(s3, tmp_path):
    """daft_data on an S3 source: Daft's own object-store client, given the rank's endpoint (its metering proxy) and
    the environment's credentials, reads the staged set; every frame is right and its requests and bytes are
    counted like every other loader's."""
    out = tmp_path / "run"
    proc = dlbench("-q", "bench-run", "--root", BUCKET_URL, "--loader", "daft_data", "--out-dir", str(out), *FAST,
                   "--source", "s3", spec=s3["fast"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((out / "rank0of1.json").read_text())
    m = rec["metrics"]
    assert rec["status"] == "ok" and m["samples"] > 0 and m["frames_wrong"] == 0, m
    assert m["frames_barcode_checked"] == (m["samples"] + m["warmup_samples"]) * 2
    assert m["remote_requests"] > 0 and m["remote_bytes_read"] >= 0.3 * s3["staged"]["bytes"], m


@pytest.mark.parametrize(
    "args, says",
    [
        (["--decode-device", "cuda"], "loader daft_data decodes on the CPU only"),
        # its hf:// client has huggingface.co built in: a Hub of one's own (the loopback one too) cannot be read
        (["--root", "hf://datasets/org/name"], "Daft 0.7.26 reads hf:// from huggingface.co only"),
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
