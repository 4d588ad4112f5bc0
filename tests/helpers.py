"""Helpers the test modules share: plain functions and constants (fixtures live in conftest.py). Test modules import
from here, never from one another."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import yaml

from dlbench import barcode
from dlbench.convert.plan import PlanOptions
from dlbench.sources import LOOPBACK_CREDENTIALS
from dlbench.synth import Camera, SynthConfig, synthesize

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------------- tiny datasets

CAMS2 = (Camera("observation.images.front", 64, 64), Camera("observation.images.wrist", 64, 96))
# thresholds small enough that data and every camera span several files
SMALL_FILES = PlanOptions(episodes_per_batch=3, data_file_size_in_mb=0.012, video_file_size_in_mb=0.008)


def tiny_config(**kw) -> SynthConfig:
    base = dict(episodes=8, length_min=12, length_max=40, cameras=CAMS2, tasks=2, seed=7)
    base.update(kw)
    return SynthConfig(**base)


# synthesized datasets kept between sessions, keyed by their config and the generator's code
SYNTH_CACHE = Path(os.environ.get("DLBENCH_TEST_CACHE", REPO / ".pytest_cache"))


def synth_cached(cfg: SynthConfig, out: Path) -> Path:
    """`synthesize(cfg, out)`, copied from the on-disk cache when an earlier session made the same dataset (each
    test gets its own copy, so none can damage the cache)."""
    import dlbench.synth

    code = b"".join(p.read_bytes() for p in sorted(Path(dlbench.synth.__file__).parent.glob("*.py")))
    key = hashlib.sha256(repr(dataclasses.asdict(cfg)).encode() + code).hexdigest()[:16]
    cached = SYNTH_CACHE / "dlbench-datasets" / key
    if not cached.is_dir():
        made = synthesize(cfg, cached.with_suffix(f".{os.getpid()}.tmp"), overwrite=True, workers=2, progress=False)
        try:
            made.rename(cached)  # whole or not at all
        except OSError:  # another session cached it meanwhile
            shutil.rmtree(made, ignore_errors=True)
    shutil.copytree(cached, out)
    return out


def made_once(tmp_path_factory, name: str, leaf: str, make: Callable[[Path], object]) -> Path:
    """`name/leaf`, made by `make(path)` (a path that does not exist yet) once for the whole test run, pytest-xdist's
    workers included: the first to ask makes it in the run's shared temporary folder under a lock, the others wait
    and take it. For session fixtures that tests only read and that cost a peer start or more (each worker made its
    own LeRobot recordings before, 15-35 s of the 2 cores each); a failed `make` leaves nothing for the next."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "made-once"
    shared.mkdir(exist_ok=True)
    done = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.is_dir():
            work = shared / f"{name}.{os.getpid()}.tmp"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            make(work / leaf)
            work.rename(done)  # whole or not at all
    return done / leaf


# what the `lerobot_recorded_v30` fixture records: camera name -> (height, width)
RECORDED_CAMERAS = {"front": (64, 96), "wrist": (64, 96)}
# what `lerobot_recorded_images_v30` records: a video camera and a camera stored as images (PNG in the data files)
RECORDED_IMAGE_CAMERAS = {"top": (32, 48)}
# what `lerobot_recorded_depth_v30` records beside a video camera: a depth map as LeRobot's 12-bit HEVC video, and
# one stored as 16-bit TIFF images in the data files
RECORDED_DEPTH_CAMERAS = {"depth": (48, 64), "depth_top": (32, 48)}


def tree_bytes(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------------ items and frames


def expected_frames(ds, item, cam):
    ep = int(item["episode_index"])
    length = int(ds.meta.ep_to[ep] - ds.meta.ep_from[ep])
    f = int(item["frame_index"])
    if cam not in ds.builder.windows:
        return [f]
    return [min(max(f + d, 0), length - 1) for d in ds.builder.windows[cam]]


def check_item(ds, item):
    for cam_index, cam in enumerate(ds.meta.cameras):
        frames = item[cam] if item[cam].ndim == 4 else item[cam][None]
        ep, fr, c, valid = barcode.read_batch(frames)
        assert valid.all() and (ep == int(item["episode_index"])).all() and (c == cam_index).all()
        assert fr.tolist() == expected_frames(ds, item, cam)


def unbatch(batch):
    n = len(batch["index"])
    return [{k: v[i] for k, v in batch.items() if k != "task"} for i in range(n)]


# ----------------------------------------------------------------------------------------- servers and the command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def plain_http_server(directory, handler_class=http.server.SimpleHTTPRequestHandler):
    """Python's own HTTP server on loopback serving `directory` (its default handler ignores Range headers). Yields
    its URL."""
    handler = functools.partial(handler_class, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# where the `s3` fixture stages the tiny v3.0 dataset
BUCKET_URL = "s3://dlbench-test/v30"


def dlbench(*args: str, spec: dict | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """The dlbench command, reading `spec`'s server; a loopback server accepts any key, a real bucket needs them."""
    extra = ["--endpoint-url", spec["endpoint_url"]] if spec is not None else []
    if spec is not None and "loopback" in spec:
        env = {**LOOPBACK_CREDENTIALS, **(os.environ if env is None else env)}
    return subprocess.run(
        [sys.executable, "-m", "dlbench", *args, *extra], capture_output=True, text=True, timeout=300, env=env
    )


def isolate_s3_env(monkeypatch) -> None:
    """Let `apply_env` write the endpoint and credentials for this test only (restored after it)."""
    monkeypatch.setattr("fsspec.config.conf", {})
    for key in ("FSSPEC_S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)


# ------------------------------------------------------------------------------------------------------- Snakemake

SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]

TINY = {
    "datasets": {
        "synthetic": {
            "synth": {
                "episodes": 8,
                "length_min": 10,
                "length_max": 20,
                "cameras": [{"key": "observation.images.front", "height": 32, "width": 32}],
            }
        }
    },
    "convert": {"workers": 2, "episodes_per_batch": 2},
    "bench": {
        # windows of 1 s: hundreds of batches of these frames, enough for every figure a test checks
        "defaults": {"batch_size": 4, "num_workers": 1, "duration_s": 1, "warmup_s": 0.5, "probe_samples": 4},
        "scenarios": {
            "mmap_local": {"mode": ["single", "sarm"]},
            # short windows (1 + 3 x 2 batches): both ranks stay inside their first epoch
            "stream_2rank": {"loader": "dlbench_stream", "ranks": 2, "num_batches": 2, "buffer_size": 8, "warmup_s": 0},
            "gpu": {"loader": "dlbench_stream", "decode_device": "cuda"},
        },
    },
    # each one-worker pass measured once: the repeat (for drift) is test_default_dag_end_to_end's to exercise
    "calibration": {"once": True},
}


def converted(v30, config: dict = TINY) -> dict:
    """`config` reading an already converted v3.0 dataset where it is: no synth or conversion jobs before what a
    test is about (the run ids keep the dataset's name, synthetic)."""
    return {**config, "datasets": {"synthetic": {"v30": str(v30)}}}


def with_buckets(config: dict, scenarios=("bucket", "warm"), on_cold: str = "warn") -> dict:
    """`config` plus two bucket sources on the loopback S3 server (SeaweedFS) and a streaming scenario on each named
    in `scenarios`: `bucket` behind a shaping proxy, `warm` gated on the prewarm check."""
    sources = {
        "local": {"type": "local"},
        "bucket": {
            "type": "s3",
            "url": "s3://dlbench/bucket",
            "stage": True,
            "loopback": {"port": free_port(), "latency_ms": 5, "bandwidth_mbps": 400},
        },
        "warm": {
            "type": "s3",
            "url": "s3://dlbench/warm",
            "stage": True,
            "loopback": {},
            "require_warm": True,
            "on_cold": on_cold,
            "prewarm": {"files": 4, "range_mb": 1, "ttfb_ms_max": 50, "mbps_min": 50},
        },
    }
    stream = {"loader": "dlbench_stream", "num_batches": 6, "buffer_size": 8}
    bench = config["bench"]
    added = {f"stream_{name}": {**stream, "source": name} for name in scenarios}
    return {
        **config,
        "loopback_server": {"port": free_port()},
        "sources": sources,
        "bench": {**bench, "scenarios": {**bench["scenarios"], **added}},
    }


def measuring_windows(results: Path) -> list[tuple[float, float, str]]:
    """(start, end, what) of every measurement the records kept: bench runs (all ranks together), conversion timings
    and prewarm checks."""
    windows = []
    for run in results.glob("runs/*/*"):
        recs = [json.loads(p.read_text()) for p in run.glob("rank*of*.json")]
        recs = [r for r in recs if r["status"] in ("ok", "unverified")]
        if recs:
            windows.append(
                (
                    min(r["metrics"]["window_start_unix"] for r in recs),
                    max(r["metrics"]["window_end_unix"] for r in recs),
                    str(run),
                )
            )
    for path in [*results.glob("convert/*/scaling/w*.json"), *results.glob("prewarm/*/*.json")]:
        rec = json.loads(path.read_text())
        windows.append((rec["window_start_unix"], rec["window_end_unix"], str(path)))
    return sorted(windows)


def snakemake(workdir: Path, config: dict, *args: str) -> subprocess.CompletedProcess:
    """The workflow on `config`; the advice's verifying legs only where `config` asks for them (`advice:`)."""
    cfg = workdir / "tiny.yaml"
    cfg.write_text(yaml.safe_dump({"advice": {"verify": 0}, **config}))
    return subprocess.run(
        [*SNAKEMAKE, "-d", str(workdir), "--configfile", str(cfg), *args], capture_output=True, text=True, timeout=900
    )


def peer_tier(needs: str = "") -> list:
    """The markers of a module whose tests run in the LeRobot peer environment: the peer tier, skipped (saying how to
    create it) where it is missing; `needs`: what else the environment must hold, for the message."""
    import pytest

    from dlbench import peer

    what = f" ({needs})" if needs else ""
    return [
        pytest.mark.peer,
        pytest.mark.skipif(
            peer.peer_python() is None,
            reason=f"LeRobot peer environment{what} missing or incomplete; create it with {peer.CREATE_COMMAND}",
        ),
    ]


def cost(
    worker_ms=1.0, cpu_ms=None, handover_ms=0.05, check_ms=0.1, loader="dlbench_map", fps=2, batch=16, other_ms=0.0
):
    """A calibrated loader's cost (`dlbench.model.LoaderCost`) from a few round numbers: the model's tests' unit."""
    from dlbench.model import LoaderCost

    return LoaderCost(
        loader=loader,
        mode="single",
        batch_size=batch,
        frames_per_sample=fps,
        solo_s=(0.8 * worker_ms + 0.2 * check_ms) / 1000,  # one process: no hand-over through shared memory
        worker_s=worker_ms / 1000,
        worker_cpu_s=(worker_ms if cpu_ms is None else cpu_ms) / 1000,
        handover_s=handover_ms / 1000,
        check_s=check_ms / 1000,
        solo_check_s=0.2 * check_ms / 1000,
        start_s=0.5,
        main_pss_mb=200.0,
        worker_pss_mb=150.0,
        other_cpu_s=other_ms / 1000,
    )
