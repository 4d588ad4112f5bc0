"""ray_data: Ray Data's read_lerobot (Ray 2.60) measured by the harness in the peer environment, every delivered
frame verified: its frame modes, its shuffle knobs, two ranks on one Ray cluster, and the one line for each run it
cannot do (reading loopback S3: test_sources, on that module's server)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dlbench import peer

from .helpers import dlbench, peer_tier

pytestmark = peer_tier("with Ray Data")
FAST = ["--duration-s", "1.5", "--warmup-s", "0.2", "--batch-size", "4", "--num-workers", "1"]


def _ray_missing() -> str | None:
    python = peer.peer_python()
    if python is None:
        return None  # peer_tier skips
    has = "import importlib.util, sys; sys.exit(importlib.util.find_spec('ray') is None)"
    if subprocess.run([str(python), "-c", has]).returncode:
        return f"Ray Data missing from the peer environment; add it with {peer.CREATE_COMMAND}"
    return None


# the marks of a test that runs Ray Data: test_sources' reading loopback S3 (on its module's server) takes them too
RAY_MARKS = [*pytestmark, pytest.mark.skipif(_ray_missing() is not None, reason=str(_ray_missing()))]
pytestmark = RAY_MARKS


def bench(root, out_dir, *args: str, spec: dict | None = None) -> list[dict]:
    """`dlbench bench-run --loader ray_data` (its ranks run in the peer environment); every rank's record."""
    proc = dlbench("-q", "bench-run", "--root", str(root), "--loader", "ray_data", "--out-dir", str(out_dir),
                   *FAST, *args, spec=spec)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    world = json.loads((out_dir / "run.json").read_text())["world_size"]
    return [json.loads((out_dir / f"rank{r}of{world}.json").read_text()) for r in range(world)]


def verified(m: dict, frames_per_sample: int) -> None:
    assert m["samples"] > 0 and m["frames_per_sample"] == frames_per_sample
    assert m["frames_barcode_checked"] == (m["samples"] + m["warmup_samples"]) * frames_per_sample
    assert m["frames_wrong"] == 0 and m["frames_decode_checked"] > 0


def _memory_counted(m: dict) -> None:
    # Ray's own processes (GCS, raylet, its workers and their object store pages) are this rank's children
    assert m["peak_pss_workers_mb"] > 100
    assert m["shuffle_effective_batch"] is not None and m["probe_samples_per_s"] is None


def test_rays_shuffle_knobs_raise_the_effective_batch_over_its_default(v30_h264, tmp_path):
    """Ray's default reads in file order (no shuffle): a batch is a few neighbouring frames. Its block order
    randomized and a local buffer give training batches nearer independent draws. Both deliver every frame right
    (single frames: 2 cameras a sample), with Ray's memory counted."""
    (plain,) = bench(v30_h264, tmp_path / "plain", "--batch-size", "8")
    (shuffled,) = bench(v30_h264, tmp_path / "shuffled", "--batch-size", "8", "--ray-shuffle", "blocks",
                        "--buffer-size", "64")  # fmt: skip
    assert shuffled["config"]["ray_shuffle"] == "blocks" and shuffled["config"]["buffer_size"] == 64
    for rec in (plain, shuffled):  # single frames, each right, Ray's memory counted
        assert rec["status"] == "ok" and rec["config"]["mode"] == "single"
        verified(rec["metrics"], 2)
        _memory_counted(rec["metrics"])
    low, high = plain["metrics"]["shuffle_effective_batch"], shuffled["metrics"]["shuffle_effective_batch"]
    # one short window's batches: the shuffled read's measure spreads (0.46 of nominal in one fresh clone), the plain
    # read's stays near a few neighbouring frames' (0.15); what must hold is the lift
    assert low < 0.3 and high > max(0.35, 2 * low), (low, high)


def test_two_ranks_read_disjoint_episodes_on_one_ray_cluster(v30_h264, tmp_path):
    """Two ranks on one Ray node, in windows of 16 frames a sample (sarm; single frames are the shuffle test's, a
    delta_timestamps mode test_sources'): every frame right, each rank its own episodes, Ray's memory counted once."""
    out = tmp_path / "run"
    ranks = bench(v30_h264, out, "--ranks", "2", "--mode", "sarm")
    seen = [np.load(out / f"rank{r}of2.samples.npy") for r in range(2)]
    episodes = []
    for rec, rows in zip(ranks, seen, strict=True):
        assert rec["status"] == "ok" and rec["config"]["loader"] == "ray_data" and rec["config"]["mode"] == "sarm"
        verified(rec["metrics"], 16)
        assert rec["metrics"]["shuffle_effective_batch"] is not None and rec["metrics"]["probe_samples_per_s"] is None
        episodes.append(_episodes_of(v30_h264, rows))
    assert episodes[0] and episodes[1] and not episodes[0] & episodes[1]
    # the node's Ray processes count once, in its first rank's memory
    assert ranks[0]["metrics"]["peak_pss_workers_mb"] > 100 > ranks[1]["metrics"]["peak_pss_workers_mb"]
    # and their CPU: the joined node's workers are no rank's children, yet they decode every frame
    cpu = [rec["metrics"]["worker_cpu_ms_per_sample"] for rec in ranks]
    assert cpu[0] > 0.1 and cpu[1] is None, cpu
    assert "ray start" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


def _episodes_of(root, rows) -> set[int]:
    from dlbench.loader.dataset_meta import DatasetMeta

    meta = DatasetMeta.load(str(root))
    return {int(e) for e in np.searchsorted(meta.ep_to, rows, side="right")}


@pytest.mark.parametrize(
    "args, says",
    [
        (["--decode-device", "cuda"], "loader ray_data decodes on the CPU only; use decode_device: cpu"),
        (["--ranks", "9", "--nodes", "1"], "loader ray_data gives each rank whole episodes: 9 ranks for 8 episodes"),
    ],
)
def test_what_ray_data_cannot_do_is_one_line(v30_h264, tmp_path, args, says):
    proc = dlbench("-q", "bench-run", "--root", str(v30_h264), "--loader", "ray_data", "--out-dir",
                   str(tmp_path / "run"), *FAST, "--on-unavailable", "error", *args)  # fmt: skip
    assert proc.returncode != 0 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_ray_knobs_on_another_loader_are_refused_by_name(v30_h264, tmp_path):
    proc = dlbench("-q", "bench-run", "--root", str(v30_h264), "--loader", "dlbench_stream", "--out-dir",
                   str(tmp_path / "run"), *FAST, "--ray-shuffle", "global")  # fmt: skip
    assert proc.returncode != 0 and "applies to loader ray_data only, not dlbench_stream" in proc.stderr


def test_a_peer_environment_without_ray_records_the_run_skipped_with_the_command(v30_h264, tmp_path):
    """An environment made before Ray was added: the run is skipped, saying how to add it (no traceback)."""
    env = {"DLBENCH_PEER_PYTHON": sys.executable}  # this interpreter: no Ray here
    proc = dlbench("-q", "bench-run", "--root", str(v30_h264), "--loader", "ray_data", "--out-dir",
                   str(tmp_path / "run"), *FAST, env={**os.environ, **env})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads((tmp_path / "run" / "rank0of1.json").read_text())
    assert rec["status"] == "skipped" and "needs Ray Data in the peer environment" in rec["reason"]
