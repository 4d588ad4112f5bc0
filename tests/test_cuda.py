"""The GPU decode path: torchcodec decoding on NVDEC (decode_device "cuda").

The decode tests need a CUDA device and skip with that reason elsewhere; the DataLoader settings a GPU-decoding
dataset implies are checked everywhere.
"""

import collections

import pytest
import torch

from dlbench import barcode
from dlbench.bench.launch import run_rank
from dlbench.decode.cache import VideoDecoderCache
from dlbench.loader import DataLoader
from dlbench.loader.map import LeRobotMapDataset
from dlbench.loader.stream import LeRobotStreamingDataset
from dlbench.run.spec import RunSpec
from dlbench.synth import Camera, synthesize

from .helpers import check_item, expected_frames, tiny_config

pytestmark = pytest.mark.cuda  # a GPU

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device: the NVDEC decode path runs only on a machine with a GPU"
)


def test_gpu_decoding_dataset_gets_spawned_workers_and_no_pin_memory(v30_h264):
    ds = LeRobotMapDataset(
        str(v30_h264), return_uint8=True, decode_device="cuda"
    )  # no decoding yet: builds without a GPU
    loader = DataLoader(ds, batch_size=2, num_workers=1, pin_memory=True)
    assert loader.multiprocessing_context.get_start_method() == "spawn" and not loader.pin_memory
    cpu = DataLoader(LeRobotMapDataset(str(v30_h264), return_uint8=True), batch_size=2, num_workers=1)
    assert cpu.multiprocessing_context is None  # picked as the workers start (dlbench.workers.start_method)


def test_unknown_cuda_backend_is_one_clear_error(monkeypatch):
    from dlbench.decode import cache as video
    from dlbench.errors import UserError

    monkeypatch.setattr(video, "CUDA_BACKEND", "nvdec")
    with pytest.raises(UserError, match="DLBENCH_CUDA_BACKEND='nvdec' is unknown"):
        VideoDecoderCache(2, device="cuda")
    VideoDecoderCache(2, device="cpu")  # the CPU path never reads it


@needs_cuda
@pytest.mark.parametrize("mode", ["single", "sarm"])
def test_nvdec_frames_carry_their_barcodes_and_match_the_cpu(v30_h264, mode):
    gpu, cpu = (
        LeRobotMapDataset(str(v30_h264), return_uint8=True, mode=mode, decode_device=d) for d in ("cuda", "cpu")
    )
    worst = 0
    for i in range(0, len(gpu), 3):
        item, ref = gpu[i], cpu[i]
        for cam_index, cam in enumerate(gpu.meta.cameras):
            frames = item[cam] if mode == "sarm" else item[cam][None]
            assert frames.device.type == "cuda" and frames.dtype == torch.uint8
            ep, fr, c, valid = barcode.read_batch(frames)
            assert valid.all() and (ep == int(item["episode_index"])).all() and (c == cam_index).all()
            assert fr.tolist() == expected_frames(gpu, item, cam)
            diff = (frames.cpu().int() - (ref[cam] if mode == "sarm" else ref[cam][None]).int()).abs()
            worst = max(worst, int(diff.float().mean().round()))
    assert worst <= 8  # NVDEC's colour conversion differs from swscale's by a few levels, not by content
    stats = gpu.cache.stats()
    assert stats["cpu_fallbacks"] == 0 and stats["hits"] + stats["misses"] > 0


@needs_cuda
def test_streaming_on_nvdec_in_spawned_workers_yields_every_frame_once(v30_h264):
    ds = LeRobotStreamingDataset(
        str(v30_h264), return_uint8=True, mode="sarm", decode_device="cuda", pool_size=2, buffer_size=8
    )
    seen = collections.Counter()
    for batch in DataLoader(ds, batch_size=4, num_workers=2):
        cam = ds.meta.cameras[0]
        assert batch[cam].device.type == "cuda"
        for i in range(len(batch["index"])):
            check_item(ds, {k: v[i] for k, v in batch.items() if k != "task"})
        seen.update(batch["index"].tolist())
    assert sorted(seen) == list(range(ds.meta.num_frames)) and set(seen.values()) == {1}


@needs_cuda
def test_av1_on_nvdec_decodes_right_and_says_whether_it_fell_back(tmp_path):
    """NVDEC has no AV1 on some GPUs (Hopper): the file is then decoded on the CPU and the cache counts it."""
    cfg = tiny_config(codec="av1", episodes=2, cameras=(Camera("observation.images.top", 64, 80),))
    root = synthesize(cfg, tmp_path / "av1", workers=1, progress=False)
    mp4 = sorted(root.glob("videos/**/*.mp4"))[0]
    cache = VideoDecoderCache(2, device="cuda")
    frames = cache.decode(str(mp4), [0.0, 5 / cfg.fps], cfg.fps)
    ep, fr, _, valid = barcode.read_batch(frames)
    assert frames.device.type == "cuda" and valid.all() and fr.tolist() == [0, 5]
    fell_back = cache.stats()["cpu_fallbacks"]
    assert fell_back in (0, 1)  # one file: decoded on NVDEC, or on the CPU and counted once
    again = cache.decode(str(mp4), [1 / cfg.fps], cfg.fps)  # a fallen-back decoder stays on the CPU
    assert again.device.type == "cuda" and barcode.read_batch(again)[1].tolist() == [1]
    assert cache.stats()["cpu_fallbacks"] == fell_back
    print(f"AV1 on {torch.cuda.get_device_name()}: {'CPU fallback' if fell_back else 'NVDEC'}")


@needs_cuda
@pytest.mark.parametrize("loader", ["dlbench_map", "dlbench_stream"])
def test_bench_run_on_nvdec(v30_h264, tmp_path, loader):
    cfg = RunSpec(
        root=str(v30_h264),
        loader=loader,
        decode_device="cuda",
        batch_size=4,
        num_workers=1,
        duration_s=2.0,
        warmup_s=0.5,
        probe_samples=4,
    )
    rec = run_rank(cfg, tmp_path)
    m = rec["metrics"]
    assert rec["status"] == "ok" and m["frames_per_s_node"] > 0
    assert m["frames_verified"] > 0 and m["frames_wrong"] == 0 and m["decode_cpu_fallbacks"] == 0


@needs_cuda
def test_cpu_decoded_batches_reach_the_gpu_from_pinned_ring_slots(v30_h264, tmp_path):
    """pin_memory=True keeps the batch ring: its slots are registered with CUDA, so frames arrive pinned without a
    copy, and the bench moves them to the GPU with every frame intact."""
    ds = LeRobotMapDataset(str(v30_h264), return_uint8=True)
    loader = DataLoader(ds, batch_size=4, num_workers=2, pin_memory=True)
    cam = ds.meta.cameras[0]
    for batch in loader:
        ring = loader.collate_fn.ring
        start = torch.frombuffer(ring._mem, dtype=torch.uint8).data_ptr()
        assert start <= batch[cam].data_ptr() < start + len(ring._mem)  # in a ring slot, not a pinned copy
        assert batch[cam].is_pinned()
        on_gpu = batch[cam].to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        ep, _, _, valid = barcode.read_batch(on_gpu)  # single mode: one frame per item
        assert valid.all() and (ep == batch["episode_index"].numpy()).all()
    cfg = RunSpec(
        root=str(v30_h264),
        loader="dlbench_map",
        batch_size=4,
        num_workers=2,
        duration_s=1,
        warmup_s=0,
        repeats=1,
        probe_samples=0,
    )
    m = run_rank(cfg, tmp_path)["metrics"]
    assert m["consumer_device"] == "cuda" and m["pin_memory"] and m["frames_wrong"] == 0


@needs_cuda
def test_a_gpu_training_step_is_a_kernel_the_next_batch_loads_under(v30_h264, tmp_path):
    """With step_ms on a GPU each batch is held by a kernel of that length, queued after the batch's copy: the window
    lasts about batches x step_ms, and a loader faster than the step barely waits."""
    cfg = RunSpec(
        root=str(v30_h264),
        loader="dlbench_map",
        batch_size=2,
        num_workers=2,
        step_ms=100,
        duration_s=3,
        warmup_s=0.5,
        repeats=1,
        probe_samples=0,
    )
    m = run_rank(cfg, tmp_path)["metrics"]
    assert m["consumer_device"] == "cuda" and m["frames_wrong"] == 0
    assert m["steady_window_s"] == pytest.approx(m["batches"] * 0.1, rel=0.15), (m["steady_window_s"], m["batches"])
    assert m["data_wait_frac"] < 0.2, m["data_wait_frac"]
