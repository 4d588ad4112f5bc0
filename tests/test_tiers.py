"""Test tiers: each test module declares its own (`pytestmark`, read by tests/conftest.py), and a module that
declares none fails the run, naming itself. Checked on a copy of this suite's conftest and helpers in a temporary
directory, run by pytest in a subprocess."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import REPO

pytestmark = pytest.mark.unit

HERE = Path(__file__).resolve().parent

TIERED = """
import pytest

pytestmark = pytest.mark.unit


def test_fast():
    pass


@pytest.mark.slow
def test_long():
    pass


def test_recorded(lerobot_recorded_v30):
    pass
"""


def run_pytest(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args, "tests"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def suite(tmp_path) -> Path:
    """A test package with this suite's conftest, helpers and markers, and one unit module in it."""
    tests = tmp_path / "tests"
    tests.mkdir()
    for name in ("__init__.py", "conftest.py", "helpers.py"):
        shutil.copy(HERE / name, tests / name)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")  # the registered markers
    (tests / "test_tiered.py").write_text(TIERED)
    return tmp_path


def test_a_unit_modules_tests_are_unit_unless_marked_with_another_tier(suite):
    unit = run_pytest(suite, "--collect-only", "-m", "unit")
    assert unit.returncode == 0, unit.stdout + unit.stderr
    assert [line for line in unit.stdout.splitlines() if "::" in line] == ["tests/test_tiered.py::test_fast"]
    other = run_pytest(suite, "--collect-only", "-m", "not unit")
    assert other.returncode == 0, other.stdout + other.stderr
    # marked slow itself; takes a peer fixture (so it is peer)
    assert {line for line in other.stdout.splitlines() if "::" in line} == {
        "tests/test_tiered.py::test_long",
        "tests/test_tiered.py::test_recorded",
    }


def test_a_module_without_a_tier_fails_the_run_naming_it(suite):
    (suite / "tests" / "test_untiered.py").write_text("def test_anything():\n    pass\n")
    (suite / "tests" / "test_two_tiers.py").write_text(
        "import pytest\n\npytestmark = [pytest.mark.unit, pytest.mark.server]\n\n\ndef test_x():\n    pass\n"
    )
    proc = run_pytest(suite, "-m", "unit")
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out  # collection errors stop the run before any test
    assert "test_untiered.py declares no test tier" in out
    assert "test_two_tiers.py declares unit beside another tier" in out
    assert "one of unit, slurm, cuda, server, peer, slow" in out
    assert "2 errors during collection" in out and "passed" not in out
    # under pytest-xdist, as `make test` runs: the workers run the other modules, and the run fails
    proc = run_pytest(suite, "-n", "1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, out
    assert "test_untiered.py declares no test tier" in out and "2 errors" in out
