"""The bench harness: records, ranks and bad input (the full matrix runs in test_workflow.py)."""

import json

import numpy as np
import pytest
import torch

from dlbench.bench.launch import launch, run_rank
from dlbench.bench.runner import BenchConfig, run
from dlbench.errors import UserError

FAST = dict(duration_s=1.0, warmup_s=0.2, batch_size=4, num_workers=0, probe_samples=4)


@pytest.mark.parametrize("loader", ["dlbench_map", "dlbench_stream"])
def test_record_has_sane_metrics_and_verifies_every_frame(v30_h264, loader):
    samples = []
    rec = run(BenchConfig(dataset=str(v30_h264), loader=loader, mode="sarm", buffer_size=16, **FAST),
              samples_out=samples)
    m = rec["metrics"]
    assert rec["status"] == "ok" and rec["versions"]["torchcodec"] and rec["config"]["loader"] == loader
    assert m["samples"] == len(samples) > 0
    assert m["frames_verified"] == m["samples"] * m["frames_per_sample"] and m["frames_wrong"] == 0
    assert m["frames_per_sample"] == 16 and m["num_cameras"] == 2
    assert m["frames_per_s_node"] == pytest.approx(m["samples_per_s"] * 16)
    assert m["latency_p50_ms"] <= m["latency_p95_ms"] <= m["latency_p99_ms"]
    assert 0 <= m["cache_hit_rate"] <= 1 and m["peak_rss_mb"] > 0
    assert m["probe_decode_ms"] > 0 and m["probe_fetch_ms"] > 0


def test_zero_samples_is_an_error_that_says_where_to_look(v30_h264):
    with pytest.raises(UserError, match="no samples arrived.*--num-workers 0"):
        run(BenchConfig(dataset=str(v30_h264), num_batches=0, **FAST))


def test_unknown_loader(v30_h264):
    with pytest.raises(UserError, match="loader 'fastest' is unknown; choose one of"):
        run(BenchConfig(dataset=str(v30_h264), loader="fastest", **FAST))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the skip path does not apply")
def test_cuda_without_cuda_is_skipped_or_an_error(v30_h264, tmp_path):
    cfg = BenchConfig(dataset=str(v30_h264), decode_device="cuda", **FAST)
    rec = run_rank(cfg, tmp_path, on_unavailable="skip")
    assert rec["status"] == "skipped" and "no CUDA device" in rec["reason"]
    assert json.loads((tmp_path / "rank0of1.json").read_text())["status"] == "skipped"
    with pytest.raises(UserError, match="no CUDA device"):
        run_rank(cfg, tmp_path / "err", on_unavailable="error")
    assert not (tmp_path / "err" / "rank0of1.json").exists()


def test_peer_loader_without_peer_env_names_the_command(v30_h264, tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_PEER_PYTHON", str(tmp_path / "no-such-python"))
    cfg = BenchConfig(dataset=str(v30_h264), loader="lerobot_stream", **FAST)
    manifest = launch(cfg, [], tmp_path / "run")
    rec = json.loads((tmp_path / "run" / "rank0of1.json").read_text())
    assert manifest["status"] == rec["status"] == "skipped" and "scripts/peer-env.sh" in rec["reason"]
    with pytest.raises(UserError, match="create it with scripts/peer-env.sh"):
        launch(cfg, [], tmp_path / "run2", on_unavailable="error")


@pytest.mark.parametrize("loader", ["dlbench_stream", "dlbench_map"])
def test_two_local_ranks_overlap_and_read_disjoint_samples(v30_h264, tmp_path, loader):
    from dlbench.cli import main

    code = main(["-q", "bench-run", "--dataset", str(v30_h264), "--loader", loader, "--world-size", "2",
                 "--out-dir", str(tmp_path), "--num-workers", "1", "--warmup-s", "0", "--duration-s", "1",
                 "--num-batches", "5", "--batch-size", "4", "--buffer-size", "8"])
    assert code == 0
    recs = [json.loads((tmp_path / f"rank{r}of2.json").read_text()) for r in range(2)]
    a, b = (set(np.load(tmp_path / f"rank{r}of2.samples.npy").tolist()) for r in range(2))
    assert a and b and not a & b
    m0, m1 = recs[0]["metrics"], recs[1]["metrics"]
    assert m0["window_start_unix"] < m1["window_end_unix"] and m1["window_start_unix"] < m0["window_end_unix"]
    assert json.loads((tmp_path / "run.json").read_text())["ranks"] == ["rank0of2.json", "rank1of2.json"]


@pytest.mark.parametrize("loader", ["dlbench_map", "dlbench_stream"])
def test_harness_wrapper_survives_spawned_workers(v30_h264, loader):
    """cuda decode starts DataLoader workers with spawn, which pickles the wrapped dataset and its stats hooks."""
    from dlbench.bench.adapters import make_adapter
    from dlbench.bench.runner import _collate, _Timed, _TimedIterable

    adapter = make_adapter(BenchConfig(dataset=str(v30_h264), loader=loader, buffer_size=8, **FAST))
    wrap = (_TimedIterable if adapter.iterable else _Timed)(adapter.dataset, adapter.cache_stats)
    loader_ = torch.utils.data.DataLoader(wrap, batch_size=4, num_workers=1, collate_fn=_collate,
                                          multiprocessing_context="spawn")
    batch, info = next(iter(loader_))
    assert len(batch["index"]) == 4 and (info[:, 1] == 0).all()  # made in worker 0
    assert (info[:, 3] >= 1).all()  # the worker's own decoder cache counted its misses
