"""Conversion under faults: killed workers, concurrent hosts, bad input."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dlbench.convert import finalize as finalizemod
from dlbench.convert import plan as planmod
from dlbench.convert import work as workmod
from dlbench.convert.lease import LeaseDir
from dlbench.errors import UserError
from dlbench.format import paths
from dlbench.synth import Camera
from dlbench.validate import validate

from .helpers import SMALL_FILES, plain_http_server, synth_cached, tiny_config, tree_bytes

pytestmark = pytest.mark.unit

# one unit holds several output files, so a worker can be stopped between two of them
BIG_UNITS = planmod.PlanOptions(episodes_per_batch=100, data_file_size_in_mb=0.012, video_file_size_in_mb=0.008)


def worker(work: Path, host: str, pause: float = 0.0, lease_timeout: float = 60.0) -> subprocess.Popen:
    env = {**os.environ, "DLBENCH_HOST": host, "DLBENCH_CONVERT_PAUSE_S": str(pause)}
    return subprocess.Popen(
        [sys.executable, "-m", "dlbench", "convert", "work", str(work), "--lease-timeout-s", str(lease_timeout)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_lease_is_exclusive_and_stale_leases_are_taken_over(tmp_path):
    a = LeaseDir(tmp_path, timeout_s=0.5, heartbeat_s=10)  # no heartbeat within the test's timescale
    lease = a.try_acquire("u1")
    assert lease is not None and a.owner("u1")["pid"] == os.getpid()
    assert a.try_acquire("u1") is None  # held by a live owner
    time.sleep(0.7)
    assert a.is_stale("u1")
    taken = a.try_acquire("u1")
    assert taken is not None  # expired: taken over
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "u2.0.lease").write_text(
        json.dumps({"host": __import__("dlbench.convert.lease").convert.lease.HOST, "pid": int(dead.stdout)})
    )
    b = LeaseDir(tmp_path, timeout_s=600)
    orphan = b.try_acquire("u2")
    assert orphan is not None  # its owner on this host is gone: stale at once
    lease.release()  # the overtaken owner releasing must not free its successor's lease
    assert a.owner("u1")["generation"] == 1 and b.try_acquire("u1") is None
    for held in (taken, orphan):  # end their heartbeat threads
        held.release()
    assert b.held() == [] and (again := b.try_acquire("u1")) is not None  # released: free at once
    again.release()


def test_concurrent_takeover_of_a_stale_lease_has_one_winner(tmp_path):
    first = LeaseDir(tmp_path, timeout_s=0.2, heartbeat_s=10).try_acquire("u")
    time.sleep(0.3)  # its owner stopped beating: stale
    code = (
        "import sys, time; from dlbench.convert.lease import LeaseDir\n"
        "d = LeaseDir(sys.argv[1], timeout_s=0.2, heartbeat_s=0.05)\n"
        "while time.time() < float(sys.argv[2]): pass\n"
        "print(d.try_acquire('u') is not None, flush=True); time.sleep(0.5)"
    )
    start = str(time.time() + 1.0)  # contenders spin until the same instant, then race
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path), start], stdout=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    won = [p.communicate(timeout=60)[0].strip() == "True" for p in procs]
    assert sum(won) == 1, won
    first.release()


def test_killed_worker_mid_unit_resumes_to_identical_result(v21_h264, tmp_path):
    ref = tmp_path / "ref"
    planmod.plan(str(v21_h264), ref / "work", BIG_UNITS)
    workmod.work(ref / "work")
    finalizemod.finalize(ref / "work", ref / "v30")

    work = tmp_path / "work"
    manifest = planmod.plan(str(v21_h264), work, BIG_UNITS)
    assert any(len(planmod.load_unit(work, u)["files"]) > 1 for u in range(manifest["units"]))
    victim = worker(work, "host-a", pause=3)  # a file, then 3 s before the next: killed in between
    deadline = time.time() + 60
    while not list((work / workmod.OUT_DIR).rglob("*.*")) and time.time() < deadline:
        time.sleep(0.05)
    leases = list((work / workmod.LEASES_DIR).glob("*.lease"))
    assert leases, "the worker should hold a lease while it is paused mid-unit"
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    done_before = sum(workmod.is_done(work, u) for u in range(manifest["units"]))
    assert done_before < manifest["units"]

    rescuer = worker(work, "host-a")  # same host: the dead owner's lease is stale at once
    out, err = rescuer.communicate(timeout=300)
    assert rescuer.returncode == 0, err
    finalizemod.finalize(work, tmp_path / "v30")
    validate(str(tmp_path / "v30"))
    assert tree_bytes(tmp_path / "v30") == tree_bytes(ref / "v30")


def test_two_hosts_never_run_the_same_unit(v21_h264, tmp_path):
    work = tmp_path / "work"
    manifest = planmod.plan(str(v21_h264), work, SMALL_FILES)
    procs = [worker(work, f"host-{h}", pause=0.2) for h in "ab"]
    ran = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        ran.append({int(line.split()[-2]) for line in out.splitlines() if line.endswith(" done") and " unit " in line})
    assert ran[0].isdisjoint(ran[1])
    assert ran[0] | ran[1] == set(range(manifest["units"]))
    assert ran[0] and ran[1], "both workers should have found work"


def test_missing_video_is_named_and_nothing_is_written(v21_h264, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(v21_h264, src)
    missing = src / paths.v21_video_path(3, "observation.images.wrist", 1000)
    missing.unlink()
    with pytest.raises(UserError, match=r"episode_000003.mp4: missing"):
        planmod.plan(str(src), tmp_path / "work")
    assert not (tmp_path / "work" / planmod.MANIFEST).exists()


def test_truncated_parquet_fails_its_unit_and_the_manifest_survives_the_fix(v21_h264, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(v21_h264, src)
    bad = src / paths.v21_data_path(2, 1000)
    good = bad.read_bytes()
    work = tmp_path / "work"
    planmod.plan(str(src), work, SMALL_FILES)
    bad.write_bytes(good[: len(good) // 2])  # damaged after planning (the plan itself refuses a damaged source)
    with pytest.raises(UserError, match=r"episode_000002.parquet: unreadable parquet"):
        workmod.work(work)
    bad.write_bytes(good)  # the fix
    planmod.plan(str(src), work, SMALL_FILES)  # same plan: a no-op that keeps finished units
    workmod.work(work)
    finalizemod.finalize(work, tmp_path / "v30")
    assert validate(str(tmp_path / "v30"))["ok"]
    assert src.joinpath(paths.INFO_PATH).exists()  # the source is untouched


def test_non_empty_destination_and_unwritable_work_dir(v21_h264, tmp_path):
    from dlbench.convert.run import run

    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "precious").write_text("x")
    with pytest.raises(UserError, match="not empty"):
        run(str(v21_h264), dst, progress=False)
    assert (dst / "precious").read_text() == "x" and len(list(dst.iterdir())) == 1
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match="work directory is not writable"):
        planmod.plan(str(v21_h264), blocker / "work")
    work = tmp_path / "w"
    planmod.plan(str(v21_h264), work, BIG_UNITS)
    (work / planmod.MANIFEST).write_text('{"units": ')  # cut short, e.g. a full disk
    with pytest.raises(UserError, match="corrupt manifest .*dlbench convert plan"):
        workmod.work(work)


def test_different_plan_into_a_used_work_dir_is_refused(v21_h264, tmp_path):
    planmod.plan(str(v21_h264), tmp_path / "w", SMALL_FILES)
    with pytest.raises(UserError, match="different conversion plan"):
        planmod.plan(str(v21_h264), tmp_path / "w", BIG_UNITS)


@pytest.mark.slow
def test_three_cameras_av1_and_uneven_lengths(tmp_path):
    cams = tuple(Camera(f"observation.images.c{i}", 64, 64) for i in range(3))
    src = synth_cached(
        tiny_config(codec="av1", episodes=5, length_min=3, length_max=70, cameras=cams, chunks_size=2), tmp_path / "v21"
    )
    from dlbench.convert.run import run

    dst = run(str(src), tmp_path / "v30", workers=2, options=SMALL_FILES, progress=False)
    report = validate(str(dst))
    assert report["ok"] and report["cameras"] == [c.key for c in cams]
    rows = sum(pq.read_metadata(p).num_rows for p in dst.glob("data/*/*.parquet"))
    assert rows == report["frames"]


def test_workers_lease_the_costliest_units_first(v21_h264, tmp_path):
    """Units are leased costliest first (estimated from source files and bytes), so a pool does not end waiting on
    one late big unit; a unit of many small files outranks one of a few files of the same bytes."""
    work = tmp_path / "work"
    manifest = planmod.plan(str(v21_h264), work, SMALL_FILES)
    units = [planmod.load_unit(work, u) for u in range(manifest["units"])]
    costs = [planmod.unit_cost_s(u) for u in units]
    assert len(set(costs)) > 1
    assert [costs[u] for u in manifest["lease_order"]] == sorted(costs, reverse=True)
    one = dict(units[0], files=[dict(units[0]["files"][0], lengths=[10])])
    many = dict(one, files=[dict(one["files"][0], lengths=[1] * 10)])
    assert planmod.unit_cost_s(many) > planmod.unit_cost_s(one)
    data_bytes = sum(p.stat().st_size for p in (v21_h264 / "data").rglob("*.parquet"))
    assert sum(u["bytes"] for u in units if u["stream"] == planmod.DATA_STREAM) == data_bytes
    workmod.work(work, max_units=1)
    done = [u for u in range(manifest["units"]) if workmod.is_done(work, u)]
    assert done == [manifest["lease_order"][0]]


def test_manifest_of_another_version_is_refused(v21_h264, tmp_path):
    work = tmp_path / "work"
    manifest = planmod.plan(str(v21_h264), work, SMALL_FILES)
    (work / planmod.MANIFEST).write_text(json.dumps({**manifest, "version": 1}))
    with pytest.raises(UserError, match="another dlbench version"):
        workmod.work(work)


def test_http_source_without_range_requests_is_one_clear_error(v21_h264, tmp_path):
    """Python's own http.server ignores Range headers: the MP4 index cannot be read from it. The worker says so in
    one line naming the file, and the unit stays undone for a rerun from a server that does. (The commands run in
    their own processes, as users run them; fsspec's HTTP I/O thread would otherwise stay in this one.)"""
    work = tmp_path / "work"
    with plain_http_server(v21_h264) as url:
        plan = subprocess.run(
            [sys.executable, "-m", "dlbench", "-q", "convert", "plan", url, str(work), "--episodes-per-batch", "3"],
            capture_output=True,
            text=True,
        )
        assert plan.returncode == 0, plan.stderr
        out, err = worker(work, "h").communicate(timeout=120)
    assert re.search(r"episode_0000\d\d.mp4: the server does not answer HTTP range requests", err), err
    assert "Traceback" not in err
    manifest = planmod.load_manifest(work)
    assert not all(workmod.is_done(work, u) for u in range(manifest["units"]))
