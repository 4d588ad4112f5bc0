"""Shared fixtures (tiny synthetic datasets made at test time: a few episodes, 64 px, a few dozen frames; the
loopback S3 server) and the hooks that sort tests into tiers. Plain helpers live in helpers.py."""

from __future__ import annotations

import faulthandler
import json
import os
import shutil

import pytest

from dlbench import loopback, peer
from dlbench.convert.run import run as convert_run

from .helpers import (
    BUCKET_URL,
    RECORDED_CAMERAS,
    RECORDED_DEPTH_CAMERAS,
    RECORDED_IMAGE_CAMERAS,
    SMALL_FILES,
    dlbench,
    free_port,
    made_once,
    synth_cached,
    tiny_config,
)

CHILD_WATCHDOG_S = 300


def _watchdog_in_forked_child() -> None:
    """A process forked from the test run (DataLoader and converter workers; none lives long) that is still running
    after CHILD_WATCHDOG_S prints its stack and exits: the test then fails at once, showing where the child hung,
    instead of the parent waiting out pytest's timeout with no trace of the child."""
    faulthandler.dump_traceback_later(CHILD_WATCHDOG_S, exit=True)


os.register_at_fork(after_in_child=_watchdog_in_forked_child)

# test tiers by what a test needs (`pytest -m unit` is the inner loop; markers registered in pyproject.toml). Each
# test module declares its own, e.g. `pytestmark = pytest.mark.server`; a module declaring none fails collection.
# A test in a unit module that is marked with another tier itself (or takes a PEER_FIXTURES fixture) is not unit.
NOT_UNIT = ("slurm", "cuda", "server", "peer", "slow")
TIERS = ("unit", *NOT_UNIT)
PEER_FIXTURES = {
    "lerobot_recorded_v30",
    "lerobot_recorded_images_v30",
    "lerobot_recorded_language_v30",
    "lerobot_recorded_depth_v30",
}


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


def declared_tiers(module) -> list[str]:
    """The tiers a test module's `pytestmark` names (a mark or a list of marks)."""
    marks = getattr(module, "pytestmark", [])
    marks = marks if isinstance(marks, list | tuple) else [marks]
    return [m.name for m in marks if getattr(m, "name", None) in TIERS]


class TieredModule(pytest.Module):
    """A test module whose collection fails, naming it, unless it declares its tier."""

    def collect(self):
        tiers = declared_tiers(self.obj)  # imports the module and reads its module-level marks
        if not tiers or ("unit" in tiers and len(tiers) > 1):
            raise self.CollectError(
                f"{self.path.name} declares {'no test tier' if not tiers else 'unit beside another tier'}: add "
                f"`pytestmark = pytest.mark.<tier>` after its imports, <tier> one of {', '.join(TIERS)} "
                "(unit: the library in-process; see tests/conftest.py and docs/testing.md)"
            )
        # unit is each test's default, given to it in pytest_collection_modifyitems unless it has another tier
        self.own_markers[:] = [m for m in self.own_markers if m.name != "unit"]
        return super().collect()


def pytest_pycollect_makemodule(module_path, parent):
    if module_path.name.startswith("test_"):
        return TieredModule.from_parent(parent, path=module_path)
    return None


def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier: its module's (slurm, cuda, server: loopback S3 or Hub, peer: LeRobot's
    environment, slow: end to end), peer too when it takes a PEER_FIXTURES fixture, else unit; order the tiers as FIRST
    says."""
    for item in items:
        # a fixture taken by name, or one named by a parameter and fetched with request.getfixturevalue
        params = getattr(getattr(item, "callspec", None), "params", {}).values()
        named = {v for v in params if isinstance(v, str)}
        if PEER_FIXTURES & (set(getattr(item, "fixturenames", ())) | named):
            item.add_marker("peer")
        if not any(item.get_closest_marker(m) for m in NOT_UNIT):
            item.add_marker("unit")

    def rank(item) -> int:
        return next((i for i, m in enumerate(FIRST) if item.get_closest_marker(m)), len(FIRST))

    items.sort(key=rank)  # stable: within a tier, the collection order


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


@pytest.fixture(scope="module")
def s3(tmp_path_factory, v30_h264):
    """The tiny v3.0 dataset staged into a loopback S3 server at BUCKET_URL, one server per test module; `fast` reads
    it directly, `slow` through a proxy adding 150 ms to every response and capping it at 16 Mbit/s."""
    home = tmp_path_factory.mktemp("loopback")
    port, slow_port = free_port(), free_port()
    state = home / "state.json"
    loopback.start(port, [(slow_port, 150.0, 16.0)], state, home / "logs", data_dir=home / "data")
    fast = {"type": "s3", "url": BUCKET_URL, "endpoint_url": f"http://127.0.0.1:{port}", "loopback": {}}
    try:
        staged = dlbench("stage", str(v30_h264), BUCKET_URL, "--marker", str(home / "staged.json"), spec=fast)
        assert staged.returncode == 0, staged.stderr
        yield {
            "fast": fast,
            "slow": {**fast, "endpoint_url": f"http://127.0.0.1:{slow_port}"},
            "home": home,
            "staged": json.loads((home / "staged.json").read_text()),
        }
    finally:
        loopback.stop(state)


@pytest.fixture(scope="session")
def lerobot_recorded_v30(tmp_path_factory):
    """A v3.0 dataset written by LeRobot 0.6.1's own recorder (3 episodes of 10-25 frames, two AV1 cameras
    64x96, 6-dim state and action), made in the peer environment; skips without it."""
    if peer.peer_python() is None:
        pytest.skip(f"LeRobot peer environment missing or incomplete; create it with {peer.CREATE_COMMAND}")
    return made_once(
        tmp_path_factory,
        "lerobot_rec",
        "v30",
        lambda root: peer.lerobot_record(root, episodes=3, cameras=RECORDED_CAMERAS, seed=0, timeout=600),
    )


@pytest.fixture(scope="session")
def lerobot_recorded_language_v30(lerobot_recorded_images_v30, tmp_path_factory):
    """`lerobot_recorded_images_v30` with LeRobot 0.6.1's language columns (`language_persistent`,
    `language_events`) written in its own Arrow types by the peer (`peer/lerobot_language.py`)."""

    def make(root):
        shutil.copytree(lerobot_recorded_images_v30, root)
        peer.run_peer("lerobot_language", str(root), timeout=300)

    return made_once(tmp_path_factory, "lerobot_rec_language", "v30", make)


@pytest.fixture(scope="session")
def lerobot_recorded_depth_v30(tmp_path_factory):
    """A v3.0 dataset recorded by LeRobot 0.6.1 with one AV1 camera (front, 64x96), one depth camera (depth, 48x64:
    uint16 millimetres, which LeRobot's depth encoder writes as 12-bit lossless HEVC) and one depth camera stored
    as images (depth_top, 32x48: 16-bit TIFF in the data files) (2 episodes); skips without the peer."""
    if peer.peer_python() is None:
        pytest.skip(f"LeRobot peer environment missing or incomplete; create it with {peer.CREATE_COMMAND}")
    return made_once(
        tmp_path_factory,
        "lerobot_rec_depth",
        "v30",
        lambda root: peer.lerobot_record(
            root,
            episodes=2,
            cameras={"front": RECORDED_CAMERAS["front"]},
            depth_cameras={"depth": RECORDED_DEPTH_CAMERAS["depth"]},
            depth_image_cameras={"depth_top": RECORDED_DEPTH_CAMERAS["depth_top"]},
            seed=2,
            timeout=600,
        ),
    )


@pytest.fixture(scope="session")
def lerobot_recorded_images_v30(tmp_path_factory):
    """A v3.0 dataset recorded by LeRobot 0.6.1 with one AV1 camera (front, 64x96) and one camera of dtype "image"
    (top, 32x48), which LeRobot stores as PNG bytes in the data files (2 episodes); skips without the peer."""
    if peer.peer_python() is None:
        pytest.skip(f"LeRobot peer environment missing or incomplete; create it with {peer.CREATE_COMMAND}")
    return made_once(
        tmp_path_factory,
        "lerobot_rec_images",
        "v30",
        lambda root: peer.lerobot_record(
            root,
            episodes=2,
            cameras={"front": RECORDED_CAMERAS["front"]},
            image_cameras=RECORDED_IMAGE_CAMERAS,
            seed=1,
            timeout=600,
        ),
    )
