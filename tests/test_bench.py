"""The bench harness: records, ranks and bad input (the full matrix runs in test_workflow.py)."""

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dlbench.bench.launch import launch, run_rank
from dlbench.bench.runner import measure_rank
from dlbench.errors import UserError
from dlbench.format import meta
from dlbench.run.spec import RunSpec, make_run

pytestmark = pytest.mark.unit

FAST = dict(duration_s=1.0, warmup_s=0.2, batch_size=4, num_workers=0, probe_samples=4)


@pytest.mark.parametrize("loader", ["dlbench_map", "dlbench_stream"])
def test_record_has_sane_metrics_and_verifies_every_frame(v30_h264, loader):
    samples = []
    rec = measure_rank(
        RunSpec(root=str(v30_h264), loader=loader, mode="sarm", buffer_size=16, **FAST), samples_out=samples
    )
    m = rec["metrics"]
    assert rec["status"] == "ok" and rec["versions"]["torchcodec"] and rec["config"]["loader"] == loader
    assert m["samples"] == len(samples) > 0
    assert (
        m["frames_barcode_checked"] == (m["samples"] + m["warmup_samples"]) * m["frames_per_sample"]
        and m["frames_wrong"] == 0
    )
    assert m["frames_decode_checked"] == 2 * 32  # a sample per camera, decoded independently
    assert m["frames_verified"] == m["frames_barcode_checked"] + m["frames_decode_checked"]
    assert m["frames_per_sample"] == 16 and m["num_cameras"] == 2
    assert m["frames_per_s_node"] == pytest.approx(m["samples_per_s"] * 16)
    assert m["latency_p50_ms"] <= m["latency_p95_ms"] <= m["latency_p99_ms"]
    assert 0 <= m["cache_hit_rate"] <= 1 and m["peak_pss_mb"] > 0
    assert m["probe_decode_ms"] > 0 and m["probe_fetch_ms"] > 0


def test_a_mode_given_as_delta_timestamps_is_measured_and_every_frame_checked(v30_h264, tmp_path):
    """`bench-run --delta-timestamps chunk.yaml`, as config.yaml's `modes: {chunk: ...}` gives a run: three camera
    steps half a second apart, and an action chunk."""
    from dlbench.cli import build_parser
    from dlbench.cli.bench import run_from_args

    (tmp_path / "chunk.yaml").write_text("cameras: [-1.0, -0.5, 0.0]\naction: [0.0, 0.1, 0.2, 0.3]\n")
    args = build_parser().parse_args(
        ["bench-run", "--root", str(v30_h264), "--out-dir", "o", "--delta-timestamps", str(tmp_path / "chunk.yaml")]
    )
    spec = run_from_args(args)
    assert spec.mode == "chunk" and spec.run_id.endswith("-chunk-b16-w2-cpu")
    rec = measure_rank(replace(spec, loader="dlbench_stream", buffer_size=8, **FAST))
    m = rec["metrics"]
    assert rec["status"] == "ok" and rec["config"]["mode"] == "chunk"
    assert m["frames_per_sample"] == 2 * 3 and m["frames_wrong"] == 0
    assert m["frames_barcode_checked"] == (m["samples"] + m["warmup_samples"]) * 6 > 0
    (tmp_path / "bad.yaml").write_text("cameras: -1.0\n")
    args.delta_timestamps = str(tmp_path / "bad.yaml")
    with pytest.raises(UserError, match="bad.yaml: expected seconds per feature key"):
        run_from_args(args)


def test_zero_samples_is_an_error_that_says_where_to_look(v30_h264):
    with pytest.raises(UserError, match="no samples arrived.*--num-workers 0"):
        measure_rank(RunSpec(root=str(v30_h264), num_batches=0, **FAST))


def test_unknown_loader(v30_h264):
    with pytest.raises(UserError, match="loader 'fastest' is unknown; choose one of"):
        measure_rank(RunSpec(root=str(v30_h264), loader="fastest", **FAST))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the skip path does not apply")
def test_cuda_without_cuda_is_skipped_or_an_error(v30_h264, tmp_path):
    cfg = RunSpec(root=str(v30_h264), decode_device="cuda", **FAST)
    rec = run_rank(replace(cfg, on_unavailable="skip"), tmp_path)
    assert rec["status"] == "skipped" and "no CUDA device" in rec["reason"]
    assert json.loads((tmp_path / "rank0of1.json").read_text())["status"] == "skipped"
    with pytest.raises(UserError, match="no CUDA device"):
        run_rank(replace(cfg, on_unavailable="error"), tmp_path / "err")
    assert not (tmp_path / "err" / "rank0of1.json").exists()


def test_peer_loader_without_peer_env_names_the_command(v30_h264_one_file, tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_PEER_PYTHON", str(tmp_path / "no-such-python"))
    # each camera in one file: a set LeRobot's stream reads (the other's line is the next test's)
    spec = make_run({"root": str(v30_h264_one_file), "loader": "lerobot_stream", **FAST})
    manifest = launch(spec, tmp_path / "run")
    rec = json.loads((tmp_path / "run" / "rank0of1.json").read_text())
    assert manifest["status"] == rec["status"] == "skipped" and "scripts/peer-env.sh" in rec["reason"]
    with pytest.raises(UserError, match="create it with scripts/peer-env.sh"):
        launch(replace(spec, on_unavailable="error"), tmp_path / "run2")


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["dlbench_stream", "dlbench_map"])
def test_two_local_ranks_overlap_and_read_disjoint_samples(v30_h264, tmp_path, loader):
    from dlbench.cli import main

    code = main(
        [
            "-q",
            "bench-run",
            "--root",
            str(v30_h264),
            "--loader",
            loader,
            "--ranks",
            "2",
            "--out-dir",
            str(tmp_path),
            "--num-workers",
            "1",
            "--warmup-s",
            "0",
            "--duration-s",
            "1",
            "--num-batches",
            "5",
            "--batch-size",
            "4",
            "--buffer-size",
            "8",
        ]
    )
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
    from dlbench.bench.measure import split_info, timed
    from dlbench.loader import DataLoader

    adapter = make_adapter(RunSpec(root=str(v30_h264), loader=loader, buffer_size=8, **FAST))
    wrap = timed(adapter.dataset, adapter.cache_stats)
    loader_ = DataLoader(wrap, batch_size=4, num_workers=1, multiprocessing_context="spawn")
    batch, info = split_info(next(iter(loader_)))
    assert loader_.start_method == "spawn"
    assert len(batch["index"]) == 4 and (info[:, 1] == 0).all()  # made in worker 0
    assert (info[:, 3] >= 1).all()  # the worker's own decoder cache counted its misses


@pytest.mark.parametrize("loader", ["dlbench_map", "dlbench_stream"])
@pytest.mark.parametrize("workers", [0, 2])
def test_the_harness_measures_the_dataloader_users_get(v30_h264, loader, workers):
    """The harness's DataLoader is `dlbench.loader.DataLoader` with the settings a training loop gives it, over the
    same dataset: the same batching (collate, ring, worker init, float frames), the same start method and lookahead,
    and, batch for batch, the same samples and frames; only the per-sample timing rides along, and is taken off."""
    from dlbench.bench.adapters import make_adapter
    from dlbench.bench.measure import SAMPLE_INFO, make_dataloader, split_info
    from dlbench.loader import DataLoader
    from dlbench.workers import start_method

    run_ = RunSpec(
        root=str(v30_h264), loader=loader, buffer_size=8, **{**FAST, "batch_size": 4, "num_workers": workers}
    )
    run_ = replace(run_, in_order=True)
    measured = make_dataloader(run_, make_adapter(run_), pin=False)
    users = make_adapter(run_).dataset  # built as a user builds it, read as a training loop reads it
    sampler = None
    if not isinstance(users, torch.utils.data.IterableDataset):
        sampler = torch.utils.data.distributed.DistributedSampler(users, num_replicas=1, rank=0, seed=0)
    training = DataLoader(
        users,
        batch_size=4,
        sampler=sampler,
        num_workers=workers,
        persistent_workers=workers > 0,
        prefetch_factor=2 if workers else None,
        in_order=True,  # batches in a fixed order, to compare them one for one
    )
    assert type(measured) is type(training) is DataLoader
    assert type(measured.collate_fn) is type(training.collate_fn)
    assert measured.collate_fn.float_keys == training.collate_fn.float_keys
    assert type(measured.worker_init_fn) is type(training.worker_init_fn)
    assert type(measured._index_sampler) is type(training._index_sampler)
    # both pick their workers' start method by the same rule, when they start (torch's queues start threads, after
    # which the next loader's workers start from the fork server)
    assert measured._pick_start_method == training._pick_start_method == (workers > 0)
    rule = start_method(cuda=False) if workers else None
    want = iter(training)
    expected_batches = [next(want) for _ in range(3)]
    assert training.start_method == rule
    rule = start_method(cuda=False) if workers else None
    got = iter(measured)
    assert measured.start_method == rule
    for expected in expected_batches:
        batch, info = split_info(next(got))
        assert SAMPLE_INFO not in batch and info.shape == (4, 9)
        assert batch.keys() == expected.keys()
        for key, value in expected.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(batch[key], value), key
            else:
                assert batch[key] == value, key


def _without_barcodes(v30, dst):
    """A copy of a synthetic v3.0 dataset that does not say it is synthetic: only the independent check applies."""
    shutil.copytree(v30, dst)
    info = meta.read_info(str(dst))
    meta.write_info(dst, {**info, "robot_type": "recorded_elsewhere"})
    return dst


def test_any_dataset_is_checked_against_an_independent_decode(v30_h264, tmp_path):
    root = _without_barcodes(v30_h264, tmp_path / "plain")
    rec = measure_rank(RunSpec(root=str(root), loader="dlbench_stream", check_frames=6, buffer_size=8, **FAST))
    m = rec["metrics"]
    assert rec["status"] == "ok" and m["frames_barcode_checked"] == 0
    assert m["frames_decode_checked"] == 2 * 6 and m["frames_wrong"] == 0
    assert m["decode_check_worst_diff"] == 0.0  # CPU frames are exact


def test_a_run_that_checked_nothing_is_unverified(v30_h264, tmp_path):
    rec = measure_rank(RunSpec(root=str(v30_h264), verify=False, **FAST))
    assert rec["status"] == "unverified" and "verify is off" in rec["reason"]
    assert rec["metrics"]["frames_verified"] == 0


def test_the_independent_check_catches_frames_that_are_not_the_files(v30_h264, tmp_path):
    """Frames delivered from one file are compared with a fresh decode of the file at their timestamps: once the
    camera file is swapped for another of the same length and time base, every sampled frame is wrong."""
    from dlbench.bench.checks.frames import DecodeCheck
    from dlbench.loader.dataset_meta import DatasetMeta
    from dlbench.loader.map import LeRobotMapDataset

    root = _without_barcodes(v30_h264, tmp_path / "plain")
    ds = LeRobotMapDataset(str(root), return_uint8=True)
    dmeta = DatasetMeta.load(str(root))
    batches = [torch.utils.data.default_collate([ds[i] for i in range(k, k + 4)]) for k in range(0, 40, 4)]

    def check():
        c = DecodeCheck(dmeta, "single", per_camera=8)
        for b in batches:
            c.offer(b)
        c.finish()
        return c

    assert (check().checked, check().wrong) == (16, 0)
    cam = dmeta.cameras[0]
    files = sorted({dmeta.video_file[cam][ep] for ep in range(dmeta.num_episodes)})
    wanted = (root / files[0]).stat().st_size
    swapped_in = tmp_path / "swap.mp4"
    _same_length_other_content(root / files[0], swapped_in)
    shutil.copyfile(swapped_in, root / files[0])
    assert (root / files[0]).stat().st_size != wanted
    c = check()
    hit = sum(1 for ep, _, _ in c.kept[cam] if dmeta.video_file[cam][ep] == files[0])
    assert hit > 0 and c.wrong == hit and "mean |difference|" in c.problems[0]


def _same_length_other_content(video, out):
    """Re-encode `video` with every frame inverted: the same frame count, rate and time base, other pixels."""
    from torchcodec.decoders import VideoDecoder
    from torchcodec.encoders import VideoEncoder

    dec = VideoDecoder(str(video))
    frames = dec.get_frames_in_range(0, dec.metadata.num_frames).data
    VideoEncoder(255 - frames, frame_rate=dec.metadata.average_fps).to_file(
        str(out), codec="libx264", pixel_format="yuv420p"
    )


@pytest.mark.slow
def test_a_training_step_is_held_and_the_data_wait_measured(v30_h264):
    """With num_workers=0 the consumer waits for every batch it decodes itself; with 2 workers and a step far longer
    than a batch takes, the workers keep ahead and the consumer hardly waits."""
    # windows of their 1.5 s only (min_batches 0): the step, not the effective batch size, is what is measured
    base = dict(root=str(v30_h264), loader="dlbench_map", verify=False, **{**FAST, "duration_s": 1.5, "min_batches": 0})
    free = measure_rank(RunSpec(**base))["metrics"]
    # decoding in the consumer's own process is waiting; the rest is the consumer's own work per batch (its
    # effective-batch thumbnails, its records), which a loaded machine stretches (0.44 once under the suite)
    assert free["data_wait_frac"] > 0.4
    fed = measure_rank(RunSpec(**{**base, "num_workers": 2}, step_ms=150))["metrics"]
    assert fed["data_wait_frac"] < 0.2 and free["data_wait_frac"] > 3 * fed["data_wait_frac"]
    per_window = fed["windows"][0]
    # each batch held for the step: at most one per 150 ms, and the window ends on a whole round of both workers
    assert per_window["batches"] <= 1.5 / 0.150 + 2
    assert all(w["batches"] % 2 == 0 for w in fed["windows"])
    assert fed["samples_per_s"] <= 4 / 0.150 * 1.05
    assert all(w["held_s"] == pytest.approx(w["batches"] * 0.150) and w["held_sd_ms"] < 1e-6 for w in fed["windows"])
    # a step drawn around its mean, as DLIO's compute time: the steps held spread as asked, about the mean asked
    drawn = measure_rank(RunSpec(**{**base, "num_workers": 2, "duration_s": 3.0}, step_ms=100, step_sd_ms=40))
    held = drawn["metrics"]["windows"]
    steps = sum(w["batches"] for w in held)
    assert 0.07 < sum(w["held_s"] for w in held) / steps < 0.13 and all(15 < w["held_sd_ms"] < 70 for w in held)


def test_resume_check_interrupts_an_epoch_and_resumes_it_with_one_worker_more(v30_h264, monkeypatch):
    """`bench-run --resume-check`: after the windows, an epoch stopped at a random batch and resumed from its
    state_dict with one more worker delivers every frame of the rank once; a resume that repeats frames is caught."""
    from dlbench.bench.checks import resume as resume_check
    from dlbench.cli import build_parser
    from dlbench.cli.bench import run_from_args
    from dlbench.loader.dataset_meta import DatasetMeta
    from dlbench.loader.stream import LeRobotStreamingDataset

    argv = ["bench-run", "--root", str(v30_h264), "--out-dir", "o", "--loader", "dlbench_stream"]
    assert run_from_args(build_parser().parse_args(argv)).resume_check is False
    spec = run_from_args(build_parser().parse_args([*argv, "--resume-check"]))
    run_ = replace(spec, buffer_size=8, **{**FAST, "num_workers": 1})
    rec = measure_rank(run_)
    m = rec["metrics"]
    assert rec["status"] == "ok" and not rec["reason"] and rec["config"]["resume_check"] is True
    assert m["resume_exact"] is True and m["resume_checked_samples"] == DatasetMeta.load(str(v30_h264)).num_frames
    # a resume that forgets what was delivered repeats it: the check says so
    monkeypatch.setattr(LeRobotStreamingDataset, "load_state_dict", lambda self, state: None)
    dmeta = DatasetMeta.load(str(v30_h264))
    metrics, problem = resume_check.resume_check(replace(run_, num_workers=0), dmeta)
    assert metrics["resume_exact"] is False and "arrived more than once" in problem
    # and the run it belongs to fails, whatever its speed
    from dlbench.bench.metrics import rank_record

    assert rank_record(run_, {**m, "frames_verified": 4}, None, problem)["status"] == "failed"
    with pytest.raises(UserError, match="dlbench_stream only"):
        make_run({"root": str(v30_h264), "loader": "dlbench_map", "resume_check": True, **FAST})


def test_resume_check_of_two_ranks_counts_the_pieces_their_workers_read(v30_h264):
    """Two ranks of 2 workers each: the workers' plan cuts every episode into 4 pieces, so a rank's rows are pieces
    of episodes, not whole ones; each rank's resume check expects exactly its own rows and finds them."""
    from dlbench.bench.checks import resume as resume_check
    from dlbench.loader.dataset_meta import DatasetMeta

    dmeta = DatasetMeta.load(str(v30_h264))
    run_ = make_run({"root": str(v30_h264), "loader": "dlbench_stream", "resume_check": True,
                     **{**FAST, "num_workers": 2}, "buffer_size": 8, "ranks": 2})  # fmt: skip
    checked = []
    for rank in (0, 1):
        metrics, problem = resume_check.resume_check(replace(run_, rank=rank), dmeta)
        assert problem == "" and metrics["resume_exact"] is True
        checked.append(metrics["resume_checked_samples"])
    assert sum(checked) == dmeta.num_frames


def test_state_dict_under_workers_without_tagged_items_says_what_it_needs(v30_h264):
    """Under DataLoader workers the items are yielded in other processes: without tag_items and observe, a state
    would record nothing delivered; it says so instead."""
    from dlbench.loader.stream import LeRobotStreamingDataset

    ds = LeRobotStreamingDataset(root=str(v30_h264))
    ds.use_workers(2)
    with pytest.raises(UserError, match="tag_items=True and observe"):
        ds.state_dict()
    tagged = LeRobotStreamingDataset(root=str(v30_h264), tag_items=True)
    tagged.use_workers(2)
    assert tagged.state_dict()["delivered"] == {}


def test_a_stream_of_fewer_shards_than_workers_says_which_idle():
    """LeRobot's streaming loader gives each DataLoader worker whole `datasets` shards (one per data file): past
    `num_shards` workers idle, and the record says so (busy_workers, work_note) instead of the worker's log alone.
    The adapter declares both; the harness asks nothing of the dataset itself."""
    from functools import partial

    from dlbench.bench import adapters
    from dlbench.bench.interface import Adapter
    from dlbench.bench.measure import busy_workers, work_note

    def lerobot_stream(shards, own=""):
        return Adapter(None, True, 1, None, None, busy_workers=partial(adapters._whole_shards, shards),
                       work_note=partial(adapters._lerobot_stream_note, own, shards))  # fmt: skip

    stream = lerobot_stream(1)
    assert busy_workers(stream, 2) == 1 and busy_workers(stream, 0) == 1
    assert work_note(stream, 2).startswith("1 of 2 DataLoader workers have data to read")
    assert work_note(stream, 1) == ""
    on_a_bucket = lerobot_stream(1, own="meta/ placed")
    assert work_note(on_a_bucket, 2) == "meta/ placed; " + work_note(stream, 2)  # the loader's note and the idle ones
    mapped = Adapter(None, False, 1, None, None)  # map-style: any index anywhere, nothing declared
    assert busy_workers(mapped, 2) is None and work_note(mapped, 2) == ""


def test_the_probe_stops_at_its_time_budget(v30_h264, monkeypatch):
    from dlbench.bench import probe as probe_module

    taken, real = [], probe_module.make_adapter

    def counting(run, dmeta=None):
        adapter = real(run, dmeta)
        cls = type(adapter.dataset)
        if not taken and not getattr(cls, "counted", False):
            inner = cls.__getitem__
            monkeypatch.setattr(cls, "__getitem__", lambda ds, i: taken.append(i) or inner(ds, i))
            monkeypatch.setattr(cls, "counted", True, raising=False)
        return adapter

    monkeypatch.setattr(probe_module, "make_adapter", counting)
    run = RunSpec(root=str(v30_h264), loader="dlbench_map", probe_samples=32)
    assert probe_module.probe(run)["samples_per_s"] > 0 and len(taken) == 33  # one to open, 32 timed
    taken.clear()
    monkeypatch.setattr(probe_module, "PROBE_MAX_S", 0.0)
    assert probe_module.probe(run)["samples_per_s"] > 0 and len(taken) == 2  # one to open, one past the budget


def test_the_consumers_copies_to_the_gpu_are_measured_per_batch():
    from dlbench.bench.gpu import host_bytes
    from dlbench.bench.metrics import copy_metrics

    batch = {"frames": torch.zeros(4, 3, 8, 8, dtype=torch.uint8), "index": torch.arange(4), "task": ["a"] * 4}
    assert host_bytes(batch) == 4 * 3 * 8 * 8 + 4 * 8
    windows = [
        {"batches": 10, "copy_s": 0.02, "copy_bytes": 4_000_000},
        {"batches": 10, "copy_s": 0.02, "copy_bytes": 4_000_000},
    ]
    assert copy_metrics(windows) == pytest.approx({"h2d_ms_per_batch": 2.0, "h2d_gb_per_s": 0.2})
    assert copy_metrics([{"batches": 10}]) == {"h2d_ms_per_batch": None, "h2d_gb_per_s": None}  # no GPU: no copies


@given(
    rates=st.lists(st.floats(min_value=1.0, max_value=1e5), min_size=1, max_size=12),
    precision=st.floats(min_value=0.0, max_value=0.5),
    scale=st.floats(min_value=0.01, max_value=100.0),
)
def test_windows_stop_only_once_their_median_is_known_to_the_precision(rates, precision, scale):
    """Never before 3 windows nor with precision 0; where it stops, the median's standard error is within the
    precision; and the rule reads rates relative to their median (a faster loader stops alike)."""
    from dlbench.bench.measure import MIN_WINDOWS, median_known

    known = median_known(rates, precision)
    if len(rates) < MIN_WINDOWS or precision == 0:
        assert not known
    if known:
        se = 1.2533 * np.std(rates, ddof=1) / np.sqrt(len(rates))
        assert se <= precision * np.median(rates) * (1 + 1e-9)
    assert median_known([r * scale for r in rates], precision) == known or np.isclose(
        1.2533 * np.std(rates, ddof=1) / np.sqrt(len(rates)), precision * np.median(rates), rtol=1e-6
    )
    if len(rates) >= MIN_WINDOWS and precision > 1e-9:  # (not 0 within rounding: the float mean of equal rates)
        assert median_known([rates[0]] * len(rates), precision)  # windows that agree: known


@given(
    min_batches=st.integers(min_value=0, max_value=200),
    repeats=st.integers(min_value=1, max_value=8),
    precision=st.sampled_from([0.0, 0.05]),
    extra=st.lists(st.integers(min_value=0, max_value=30), min_size=8, max_size=8),
)
def test_windows_take_min_batches_together_and_no_more_once_they_have_them(min_batches, repeats, precision, extra):
    """Each window taking its `least_batches` (or more: `extra`), the planned windows hold `min_batches` together;
    a window after the run has them waits on no batch."""
    from dlbench.bench.measure import Window, least_batches, planned_windows

    run = RunSpec(min_batches=min_batches, repeats=repeats, precision=precision)
    seen = Window()
    for k in range(repeats):
        had = sum(w["batches"] for w in seen.windows)
        least = least_batches(run, seen, k)
        assert least >= 0
        if had >= min_batches:
            assert least == 0
        seen.windows.append({"batches": least + extra[k]})
        if k + 1 == planned_windows(run):
            assert sum(w["batches"] for w in seen.windows) >= min_batches
    assert least_batches(replace(run, num_batches=5), Window(), 0) == 0  # a fixed count of batches: no least


def test_a_run_with_precision_measures_as_many_windows_as_its_median_needs(v30_h264):
    """With `precision`, a run stops after 3 windows where they agree, and runs to `repeats` where they cannot
    (a precision no spread of real windows meets). The loose precision (100x the median) is one no real spread of
    windows fails: 0.3 s windows on a shared 2-core CI runner differ several-fold; this test is of the stopping rule."""
    base = dict(root=str(v30_h264), loader="dlbench_map", mode="single", repeats=6, **{**FAST, "duration_s": 0.3})
    loose = measure_rank(RunSpec(**base, precision=100.0))["metrics"]
    tight = measure_rank(RunSpec(**base, precision=1e-9))["metrics"]
    assert loose["repeats"] == 3 and len(loose["windows"]) == 3
    assert tight["repeats"] == 6


@given(
    steady=st.lists(st.floats(min_value=100.0, max_value=5000.0), min_size=3, max_size=8),
    jitter=st.floats(min_value=0.0, max_value=0.01),
)
def test_a_runs_rate_is_its_median_window_where_windows_agree_and_all_windows_where_they_do_not(steady, jitter):
    """Windows that agree give their median; windows of two kinds (Ray Data's: an epoch read ahead, then its
    restart) give every window's samples over their seconds, which lies between the two kinds and is what training
    got over them, never one kind's rate."""
    from dlbench.bench.rates import run_rate

    agree = [{"samples": steady[0] * (1 + jitter * (-1) ** k), "seconds": 1.0} for k in range(len(steady))]
    assert run_rate(agree, 0.05) == pytest.approx(np.median([w["samples"] for w in agree]))
    fast, slow = {"samples": 2000.0, "seconds": 1.0}, {"samples": 500.0, "seconds": 5.0}
    assert run_rate([fast, slow, fast, slow, fast], 0.05) == pytest.approx(7000.0 / 13.0)
    mixed = [{"samples": r, "seconds": 1.0 + k % 2} for k, r in enumerate(steady)]
    rates = [w["samples"] / w["seconds"] for w in mixed]
    assert min(rates) * (1 - 1e-9) <= run_rate(mixed, 0.05) <= max(rates) * (1 + 1e-9)


def test_lerobots_stream_on_video_files_that_roll_over_is_one_line_not_wrong_frames(
    v30_h264, v30_h264_one_file, tmp_path
):
    """LeRobot 0.6.1's StreamingLeRobotDataset seeks video at a frame's dataset-wide index / fps (lerobot#4524): on
    a dataset whose cameras' videos span several files it raises or returns other episodes' frames. Such a run is one
    line naming the first episode it would misread; a dataset with each camera in one file runs."""
    from dlbench.bench.launch import lerobot_stream_misreads

    def run(root, loader="lerobot_stream", **kw):
        return make_run({"root": str(root), "loader": loader, **kw})

    said = lerobot_stream_misreads(run(v30_h264))
    assert "huggingface/lerobot#4524" in said and "file-001.mp4" in said and "\n" not in said, said
    assert lerobot_stream_misreads(run(v30_h264_one_file)) == ""
    assert lerobot_stream_misreads(run(v30_h264, "lerobot_map")) == ""
    assert lerobot_stream_misreads(run(v30_h264, "dlbench_stream")) == ""
    with pytest.raises(UserError, match="lerobot#4524"):
        launch(run(v30_h264, on_unavailable="error"), tmp_path / "r")
    skipped = launch(run(v30_h264), tmp_path / "s")  # the workflow's runs: recorded, with the line
    reason = json.loads((tmp_path / "s" / "rank0of1.json").read_text())["reason"]
    assert skipped["status"] == "skipped" and "lerobot#4524" in reason, reason
