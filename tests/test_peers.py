"""Named peers (config.yaml `peers:`): two versions of LeRobot in one matrix, `lerobot_map@NAME` running in
.peers/NAME. Parse-time checks here; one end-to-end run in a LeRobot 0.6.0 environment (slow: it builds one)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from dlbench import peer
from dlbench.bench import launch
from dlbench.config import validate_config
from dlbench.errors import UserError
from dlbench.run import matrix
from dlbench.run.loaders import baseline_loader

from .helpers import TINY, snakemake

pytestmark = pytest.mark.peer  # LeRobot's peer environment

REPO = Path(__file__).resolve().parents[1]
OLD = "0.6.0"  # the LeRobot of the end-to-end test's peer, one release before the peer environment's


def config(scenario: dict, **top) -> dict:
    return validate_config(
        {"datasets": {"d": {"synth": {}}}, "peers": {"old": {"pip": f"lerobot=={OLD}"}}, **top,
         "bench": {"scenarios": {"s": scenario}}}
    )  # fmt: skip


def error(scenario: dict, **top) -> str:
    with pytest.raises(UserError) as e:
        matrix.expand_runs(config(scenario, **top))
    return str(e.value)


def test_unknown_peer_is_one_line_naming_the_key():
    msg = error({"loader": ["lerobot_map", "lerobot_stream@pr"]})
    assert msg.startswith("bench.scenarios.s.loader: peer 'pr' is not defined under peers:") and "\n" not in msg


def test_only_lerobot_and_dlbench_loaders_take_a_peer():
    msg = error({"loader": "ray_data@old"})
    assert "bench.scenarios.s.loader" in msg and "LOADER@PEER" in msg and "\n" not in msg
    runs = matrix.expand_runs(config({"loader": ["dlbench_map@old", "dlbench_stream@lerobot"]}))
    assert [r.loader for r in runs] == ["dlbench_map@old", "dlbench_stream@lerobot"]  # lerobot: no peers: entry


def test_dlbench_loader_runs_with_lerobots_decoder(v30_h264, tmp_path):
    """dlbench_map@lerobot: dlbench's loader in the default peer environment, with LeRobot's torch and torchcodec,
    every frame checked: beside dlbench_map and lerobot_map it splits a ratio into the loader's and the decoder's."""
    from dlbench.cli import main

    if peer.peer_python() is None:
        pytest.skip(f"the LeRobot peer environment is not built: {peer.CREATE_COMMAND}")
    args = ["--root", str(v30_h264), "--loader", "dlbench_map@lerobot", "--out-dir", str(tmp_path)]
    code = main(["-q", "bench-run", *args, "--num-workers", "1", "--warmup-s", "0", "--duration-s", "1"])
    assert code == 0
    rec = json.loads((tmp_path / "rank0of1.json").read_text())
    assert rec["status"] == "ok" and rec["metrics"]["frames_verified"] > 0
    assert rec["config"]["loader"] == "dlbench_map@lerobot"
    here = subprocess.run([peer.peer_python(), "-c", "import torchcodec; print(torchcodec.__version__)"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert rec["versions"]["torchcodec"] == here and rec["versions"]["lerobot"]


@pytest.mark.parametrize(
    "peers, key",
    [
        ({"x": {"path": "/nonexistent/lerobot"}}, "peers.x.path"),
        ({"x": {"wheel": "/nonexistent/lerobot-0.6.0-py3-none-any.whl"}}, "peers.x.wheel"),
        ({"x": {"pip": "torch==2.0"}}, "peers.x.pip"),
        ({"x": {"pip": "lerobot==0.6.0", "path": "/src"}}, "peers.x"),
        ({"x y": {"pip": "lerobot==0.6.0"}}, "peers"),
    ],
)
def test_bad_peer_is_one_line_naming_the_key(peers, key):
    with pytest.raises(UserError) as e:
        matrix.expand_runs(validate_config({"datasets": {"d": {"synth": {}}}, "peers": peers}))
    msg = str(e.value).removeprefix("config.yaml: ")
    assert msg.startswith(f"{key}:") and "\n" not in msg


def test_run_keeps_the_peer_in_its_loader_and_id(tmp_path):
    runs = matrix.expand_runs(config({"loader": ["lerobot_map", "lerobot_map@old"]}))
    old = next(r for r in runs if r.loader == "lerobot_map@old")
    assert old.run_id == "d-lerobot_map@old-single-b16-w2-cpu"
    assert len({r.run_id for r in runs}) == 2
    (tmp_path / f"{old.run_id}.json").write_text("{}")  # a valid file name (the workflow's spec and run directory)


def test_baseline_may_be_a_peer():
    assert baseline_loader("lerobot_map@old") == "lerobot_map"  # by default each run against 0.6.1 of its kind
    assert baseline_loader("dlbench_map", "lerobot_map@old") == "lerobot_map@old"
    matrix.expand_runs(config({"loader": "lerobot_map@old"}, baseline_loader="lerobot_map@old"))
    msg = error({"loader": "lerobot_map"}, baseline_loader="lerobot_map@new")
    assert msg.startswith("baseline_loader: peer 'new' is not defined under peers:")


def test_rank_runs_in_the_named_environment(tmp_path, monkeypatch):
    monkeypatch.setattr(peer, "REPO_ROOT", tmp_path)
    with pytest.raises(UserError, match=r"peer 'old'.*snakemake -c1 \.peers/old/\.dlbench-peer-ready"):
        launch.rank_command("lerobot_map@old")
    venv = tmp_path / ".peers" / "old"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    (venv / peer.READY_MARKER).touch()
    assert launch.needs_peer("lerobot_map@old")
    cmd, _ = launch.rank_command("lerobot_map@old")
    assert cmd[0] == str(venv / "bin" / "python")


def test_workflow_builds_the_peer_before_its_runs(tmp_path):
    cfg = {**TINY, "peers": {"old": {"pip": f"lerobot=={OLD}"}}}
    cfg["bench"] = {**TINY["bench"], "scenarios": {"old": {"loader": "lerobot_map@old"}}}
    dry = snakemake(tmp_path, cfg, "-n", "-c", "1", "results/runs/old/synthetic-lerobot_map@old-single-b4-w1-cpu")
    assert dry.returncode == 0, dry.stderr
    assert "rule peer_env:" in dry.stdout and ".peers/old/.dlbench-peer-ready" in dry.stdout


@pytest.fixture(scope="session")
def old_peer():
    """.peers/old: LeRobot 0.6.0 in its own environment (~5 GB, several minutes to build), kept between sessions;
    built here only when DLBENCH_BUILD_PEERS=1, so that a plain `make test` does not download a second LeRobot."""
    if peer.peer_python("old") is None:
        if os.environ.get("DLBENCH_BUILD_PEERS") != "1":
            pytest.skip(
                f"LeRobot {OLD} peer .peers/old not built (~5 GB): build it with DLBENCH_BUILD_PEERS=1 on this test, "
                f"or snakemake -c1 .peers/old/.dlbench-peer-ready with peers: {{old: {{pip: lerobot=={OLD}}}}}"
            )
        env = {**os.environ, "PEER_VENV": ".peers/old", "PEER_REQUIREMENT": f"lerobot=={OLD}"}
        proc = subprocess.run([str(REPO / "scripts" / "peer-env.sh")], env=env, capture_output=True, text=True)
        if "no working Python 3.12" in proc.stderr:
            pytest.skip("no Python 3.12 (LeRobot 0.6 needs it): set PYTHON312=/path/to/python3.12")
        assert proc.returncode == 0, proc.stderr[-3000:]
    return peer.peer_python("old")


@pytest.mark.slow
def test_bench_run_in_an_older_lerobot(old_peer, v30_h264, tmp_path):
    from dlbench.cli import main

    args = ["--root", str(v30_h264), "--loader", "lerobot_map@old", "--out-dir", str(tmp_path), "--num-workers", "1"]
    code = main(["-q", "bench-run", *args, "--warmup-s", "0", "--duration-s", "1", "--batch-size", "4"])
    assert code == 0
    rec = json.loads((tmp_path / "rank0of1.json").read_text())
    assert rec["status"] == "ok"  # every frame's barcode checked (synthetic data)
    assert rec["config"]["loader"] == "lerobot_map@old"
    assert rec["versions"]["lerobot"] == OLD
