"""Shared fixtures: tiny synthetic datasets made at test time (a few episodes, 64 px, a few dozen frames)."""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import functools
import hashlib
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

from dlbench import peer
from dlbench.convert.plan import PlanOptions
from dlbench.convert.run import run as convert_run
from dlbench.synth import Camera, SynthConfig, synthesize

CHILD_WATCHDOG_S = 300


def _watchdog_in_forked_child() -> None:
    """A process forked from the test run (DataLoader and converter workers; none lives long) that is still running
    after CHILD_WATCHDOG_S prints its stack and exits: the test then fails at once, showing where the child hung,
    instead of the parent waiting out pytest's timeout with no trace of the child."""
    faulthandler.dump_traceback_later(CHILD_WATCHDOG_S, exit=True)


os.register_at_fork(after_in_child=_watchdog_in_forked_child)

# test tiers by what a test needs (`pytest -m unit` is the inner loop): module -> marker
TIERS = {
    "test_slurm": "slurm",
    "test_cuda": "cuda",
    "test_sources": "server",
    "test_hub": "server",
    "test_lerobot_interop": "peer",
    "test_lance": "peer",
    "test_peers": "peer",
    "test_map_fetch": "server",
    "test_workflow": "slow",  # Snakemake in a subprocess, each parse a few seconds
}
PEER_FIXTURES = {"lerobot_recorded_v30", "lerobot_recorded_images_v30"}


# modules whose tests share a module-scoped server or cluster: under pytest-xdist (`make test`), one worker runs each
SHARED_FIXTURE_MODULES = {"test_slurm", "test_sources", "test_hub", "test_lance", "test_map_fetch", "test_compare"}
# the order `make test` hands tests to its workers: the SLURM tier first (mostly waiting on the cluster, on a worker of
# its own), then the long end-to-end runs, so no long test starts last
FIRST = ("slurm", "slow", "peer", "server")


def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist, the tests of a SHARED_FIXTURE_MODULES module go to one worker (they share its server or
    cluster), every other test is scheduled alone, in collection order (with --no-loadscope-reorder). xdist's own
    `--dist loadgroup` cannot do it here: it renames nodes through an attribute pytest 9.2 no longer reads."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
            return module if module in SHARED_FIXTURE_MODULES else nodeid

    return SharedFixtureScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier: slurm, cuda, server (loopback S3 or Hub), peer (LeRobot's environment), slow
    (end to end), else unit; order the tiers as FIRST says."""
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1]
        tier = TIERS.get(module)
        if tier:
            item.add_marker(tier)
        if PEER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker("peer")
        if not any(item.get_closest_marker(m) for m in ("slurm", "cuda", "server", "peer", "slow")):
            item.add_marker("unit")

    def rank(item) -> int:
        return next((i for i, m in enumerate(FIRST) if item.get_closest_marker(m)), len(FIRST))

    items.sort(key=rank)  # stable: within a tier, the collection order


CAMS2 = (Camera("observation.images.front", 64, 64), Camera("observation.images.wrist", 64, 96))
# thresholds small enough that data and every camera span several files
SMALL_FILES = PlanOptions(episodes_per_batch=3, data_file_size_in_mb=0.012, video_file_size_in_mb=0.008)


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


def tiny_config(**kw) -> SynthConfig:
    base = dict(episodes=8, length_min=12, length_max=40, cameras=CAMS2, tasks=2, seed=7)
    base.update(kw)
    return SynthConfig(**base)


# synthesized datasets kept between sessions, keyed by their config and the generator's code
SYNTH_CACHE = Path(os.environ.get("DLBENCH_TEST_CACHE", Path(__file__).resolve().parents[1] / ".pytest_cache"))


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


@pytest.fixture(scope="session")
def v21_h264(tmp_path_factory):
    return synth_cached(tiny_config(), tmp_path_factory.mktemp("h264") / "v21")


@pytest.fixture(scope="session")
def v30_h264(v21_h264, tmp_path_factory):
    """The h264 dataset converted with small thresholds: several files per stream."""
    return convert_run(
        str(v21_h264), tmp_path_factory.mktemp("h264v30") / "v30", workers=2, options=SMALL_FILES, progress=False
    )


@pytest.fixture(scope="session")
def v30_h264_one_file(v21_h264, tmp_path_factory):
    """The h264 dataset converted with the default thresholds: every episode of a camera in one file."""
    return convert_run(str(v21_h264), tmp_path_factory.mktemp("h264v30one") / "v30", workers=1, progress=False)


# what `lerobot_recorded_v30` records: camera name -> (height, width)
RECORDED_CAMERAS = {"front": (64, 96), "wrist": (64, 96)}


@pytest.fixture(scope="session")
def lerobot_recorded_v30(tmp_path_factory):
    """A v3.0 dataset written by LeRobot 0.6.1's own recorder (3 episodes of 10-25 frames, two AV1 cameras
    64x96, 6-dim state and action), made in the peer environment; skips without it."""
    if peer.peer_python() is None:
        pytest.skip(f"LeRobot peer environment missing or incomplete; create it with {peer.CREATE_COMMAND}")
    return peer.lerobot_record(
        tmp_path_factory.mktemp("lerobot_rec") / "v30", episodes=3, cameras=RECORDED_CAMERAS, seed=0, timeout=600
    )


# what `lerobot_recorded_images_v30` records: a video camera and a camera stored as images (PNG in the data files)
RECORDED_IMAGE_CAMERAS = {"top": (32, 48)}


@pytest.fixture(scope="session")
def lerobot_recorded_images_v30(tmp_path_factory):
    """A v3.0 dataset recorded by LeRobot 0.6.1 with one AV1 camera (front, 64x96) and one camera of dtype "image"
    (top, 32x48), which LeRobot stores as PNG bytes in the data files (2 episodes); skips without the peer."""
    if peer.peer_python() is None:
        pytest.skip(f"LeRobot peer environment missing or incomplete; create it with {peer.CREATE_COMMAND}")
    return peer.lerobot_record(
        tmp_path_factory.mktemp("lerobot_rec_images") / "v30",
        episodes=2,
        cameras={"front": RECORDED_CAMERAS["front"]},
        image_cameras=RECORDED_IMAGE_CAMERAS,
        seed=1,
        timeout=600,
    )
