"""The loopback Hugging Face Hub (`dlbench.loopback.hub`) under real clients: huggingface_hub's HfFileSystem and
snapshot_download, dlbench's loaders over hf://, and LeRobot 0.6.1's own loaders in the peer environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from dlbench import peer
from dlbench.loader import LeRobotMapDataset, LeRobotStreamingDataset
from dlbench.loopback import hub


@pytest.fixture(scope="module")
def repos(v30_h264_one_file, v30_h264, tmp_path_factory):
    """repos/local/tiny: every episode of a camera in one file (what LeRobot 0.6.1's StreamingLeRobotDataset reads:
    it takes `index / fps` as the time in the video file); repos/local/several: several files per stream."""
    root = tmp_path_factory.mktemp("hub") / "repos"
    (root / "local").mkdir(parents=True)
    (root / "local" / "tiny").symlink_to(v30_h264_one_file)
    (root / "local" / "several").symlink_to(v30_h264)
    return root


def _point_hf_at(mp: pytest.MonkeyPatch, endpoint: str, home) -> None:
    """Clients of this process and its children use `endpoint` with a cache of their own. huggingface_hub reads
    HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE once, at import, so where it is imported already its constants are set
    to what the variables would have made them."""
    env = {"HF_ENDPOINT": endpoint, "HF_HOME": str(home), "HF_HUB_DISABLE_TELEMETRY": "1"}
    env["HF_LEROBOT_HOME"] = str(home / "lerobot")  # LeRobot's own cache of Hub datasets
    for key, value in env.items():
        mp.setenv(key, value)
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"):
        mp.delenv(key, raising=False)
    from huggingface_hub import constants

    mp.setattr(constants, "ENDPOINT", endpoint)
    mp.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    mp.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    mp.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture(scope="module")
def endpoint(repos, tmp_path_factory):
    with hub.serve(repos, "127.0.0.1") as url, pytest.MonkeyPatch.context() as mp:
        _point_hf_at(mp, url, tmp_path_factory.mktemp("hf_home"))
        yield url


def test_hf_file_system_lists_and_reads_ranges(endpoint, repos):
    from huggingface_hub import HfFileSystem

    fs = HfFileSystem()
    local = repos / "local" / "several"
    want = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    assert sorted(p.split("/", 3)[3] for p in fs.find("datasets/local/several@main")) == want
    assert sorted(fs.ls("hf://datasets/local/several@v3.0/meta", detail=False)) == [
        f"datasets/local/several@v3.0/meta/{name}" for name in sorted(p.name for p in (local / "meta").iterdir())
    ]
    video = "videos/observation.images.front/chunk-000/file-001.mp4"
    raw = (local / video).read_bytes()
    info = fs.info(f"hf://datasets/local/several@main/{video}")
    assert (info["type"], info["size"], info["xet_hash"]) == ("file", len(raw), None)  # plain HTTP, no Xet
    with fs.open(f"hf://datasets/local/several@main/{video}", "rb", block_size=1024) as f:
        f.seek(1000)
        assert f.read(3000) == raw[1000:4000]  # range reads (206) through fsspec's block cache
    assert fs.cat_file(f"hf://datasets/local/several/{video}", start=-100) == raw[-100:]
    assert not fs.exists("hf://datasets/local/several/meta/nope.json")
    with pytest.raises(FileNotFoundError):
        fs.ls("hf://datasets/local/missing")


def test_paginated_tree_listing(repos, tmp_path):
    """A server that pages the tree 3 entries at a time gives the same listing (clients follow `Link: next`)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    local = repos / "local" / "several"
    with hub.serve(repos, "127.0.0.1", page_size=3) as url:
        tree = HfApi(endpoint=url).list_repo_tree("local/several", repo_type="dataset", recursive=True)
        files = sorted(e.path for e in tree if isinstance(e, RepoFile))
    assert files == sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())


def test_snapshot_download_meta(endpoint, repos):
    from huggingface_hub import hf_hub_download, snapshot_download
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError

    path = snapshot_download("local/tiny", repo_type="dataset", allow_patterns="meta/*")
    local = repos / "local" / "tiny"
    got = sorted(p.relative_to(path).as_posix() for p in Path(path).rglob("*") if p.is_file())
    assert got == sorted(p.relative_to(local).as_posix() for p in (local / "meta").rglob("*") if p.is_file())
    assert json.loads((local / "meta" / "info.json").read_text()) == json.loads(open(f"{path}/meta/info.json").read())
    assert path.endswith(hub.repo_sha("local/tiny"))  # the sha the repo's revisions resolve to
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("local/tiny", "meta/nope.json", repo_type="dataset")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("local/missing", "meta/info.json", repo_type="dataset")


def _assert_items_equal(got: dict, want: dict, where) -> None:
    assert sorted(got) == sorted(want), (where, set(got) ^ set(want))
    for key, w in want.items():
        g = got[key]
        assert torch.equal(g, w) if isinstance(w, torch.Tensor) else g == w, (where, key)


def test_dlbench_loaders_read_the_hub(endpoint, repos):
    local = str(repos / "local" / "several")
    stream = LeRobotStreamingDataset(root="hf://datasets/local/several@main", seed=3, return_uint8=True)
    want = LeRobotStreamingDataset(root=local, seed=3, return_uint8=True)
    items, expected = list(stream), list(want)
    assert len(items) == len(expected) == len(LeRobotMapDataset(local))
    for i, (got, w) in enumerate(zip(items, expected)):
        _assert_items_equal(got, w, i)
    mapped = LeRobotMapDataset(repo_id="local/several", revision="v3.0", return_uint8=True)  # hf://...@v3.0
    ref = LeRobotMapDataset(local, return_uint8=True)
    for i in (0, len(ref) // 2, len(ref) - 1):
        _assert_items_equal(mapped[i], ref[i], i)


# Runs in the peer environment: LeRobot 0.6.1's loaders over the Hub at HF_ENDPOINT, and LeRobotDataset over the
# local copy; saves the items of the given indices (the stream's first ones) for the test to compare.
PEER_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset

    local_root, out, picks = sys.argv[1], sys.argv[2], [int(i) for i in sys.argv[3:]]
    hub_map = LeRobotDataset("local/tiny", revision="v3.0", video_backend="torchcodec")
    stream = iter(StreamingLeRobotDataset("local/tiny", seed=0, buffer_size=16))
    streamed = [next(stream) for _ in range(4)]
    local = LeRobotDataset("local/peer", root=local_root, video_backend="torchcodec")
    wanted = picks + [int(item["index"]) for item in streamed]
    torch.save(
        {
            "root": str(hub_map.root),
            "hub_map": [dict(hub_map[i]) for i in picks],
            "stream": [dict(item) for item in streamed],
            "local": {i: dict(local[i]) for i in wanted},
        },
        out,
    )
    """
)


@pytest.mark.skipif(
    peer.peer_python() is None,
    reason=f"LeRobot peer environment missing or incomplete (.venv-lerobot/{peer.READY_MARKER}); "
    f"create it with {peer.CREATE_COMMAND}",
)
def test_lerobot_reads_the_hub(endpoint, repos, tmp_path):
    script, out = tmp_path / "peer_hub.py", tmp_path / "items.pt"
    script.write_text(PEER_SCRIPT)
    local = repos / "local" / "tiny"
    picks = [0, 7, 100]
    env = {**os.environ, "PYTHONPATH": str(peer.REPO_ROOT / "src")}  # HF_ENDPOINT and the caches: `endpoint`
    proc = subprocess.run(
        [str(peer.peer_python()), str(script), str(local), str(out), *map(str, picks)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = torch.load(out, weights_only=False)
    assert got["root"].startswith(os.environ["HF_LEROBOT_HOME"])  # downloaded from the server, not read in place
    for i, item in zip(picks, got["hub_map"]):
        _assert_items_equal(item, got["local"][i], ("LeRobotDataset", i))
    assert len({int(item["index"]) for item in got["stream"]}) == 4
    for item in got["stream"]:
        i = int(item["index"])
        want = got["local"][i]
        for key in ("index", "episode_index", "frame_index", "observation.state", "action"):
            got_value = torch.as_tensor(item[key]).tolist()  # the stream gives some as Python ints
            assert got_value == want[key].tolist(), ("StreamingLeRobotDataset", i, key)
        for cam in ("observation.images.front", "observation.images.wrist"):
            assert torch.equal(item[cam], want[cam]), ("StreamingLeRobotDataset", i, cam)


def _dlbench(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The dlbench command run in `cwd`, where results/sources/ holds the loopback state, as a workflow job."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FSSPEC_"))}
    env.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=str(cwd / "hf-home"))  # no cache a run could share
    cmd = [sys.executable, "-m", "dlbench", "-q", *args, "--endpoint-url", "loopback-hub"]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_a_hub_source_is_staged_read_and_metered_for_dlbench_and_lerobot(v30_h264_one_file, tmp_path):
    """The workflow's `hub` source: the dataset is linked into the loopback Hub's repos, and each rank of a run,
    dlbench's loaders and LeRobot's, reads hf://datasets/dlbench/<name>@v3.0 through its own metering proxy: every
    frame checked right, the requests per 1,000 delivered frames counted for both."""
    from dlbench.loopback import HUB_REPOS, STATE

    work = tmp_path / "wf"
    (work / HUB_REPOS).mkdir(parents=True)
    with hub.serve(work / HUB_REPOS, "127.0.0.1") as url:
        host, port = url.removeprefix("http://").split(":")
        (work / STATE).write_text(json.dumps({"host": host, "port": 1, "hub_port": int(port), "pids": []}))
        root = "hf://datasets/dlbench/tiny@v3.0"
        staged = _dlbench(work, "stage", str(v30_h264_one_file), root, "--marker", str(work / "staged.json"))
        assert staged.returncode == 0, staged.stderr
        assert (work / HUB_REPOS / "dlbench" / "tiny").resolve() == v30_h264_one_file.resolve()
        loaders = ["dlbench_stream", "lerobot_stream"] if peer.peer_python() else ["dlbench_stream"]
        per_kframe = {}
        for loader in loaders:
            out = work / loader
            run = _dlbench(
                work, "bench-run", "--root", root, "--out-dir", str(out), "--loader", loader, "--num-workers", "1",
                "--batch-size", "4", "--duration-s", "3", "--warmup-s", "0", "--probe-samples", "0",
            )  # fmt: skip
            assert run.returncode == 0, run.stderr[-3000:]
            m = json.loads((out / "rank0of1.json").read_text())["metrics"]
            assert m["frames_wrong"] == 0 and m["frames_verified"] > 0
            # metered over the whole run (on a dataset this small the windows may be served from the readers' caches)
            assert m["remote_requests"] > 0 and m["remote_requests_window"] is not None
            per_kframe[loader] = (m["remote_requests_per_kframe"], m["remote_requests_window"])
            assert not (out / ".hub-cache").exists()  # the run's own Hub cache is gone with it
    if len(loaders) == 1:
        pytest.skip(f"LeRobot peer environment missing; dlbench_stream checked alone ({per_kframe})")


def test_remote_block_kb_sets_the_read_size_of_remote_video(endpoint):
    """Each loader reads remote video files in its own block size (the streaming loader 4 MB, the map-style one
    128 KB) unless `remote_block_kb` says otherwise; what the open file handles use."""

    def block_sizes(ds) -> set[int]:
        next(iter(ds)) if isinstance(ds, LeRobotStreamingDataset) else ds[0]
        return {e.handle.blocksize for e in ds.cache._entries.values()}

    root = "hf://datasets/local/several@main"
    assert block_sizes(LeRobotStreamingDataset(root, return_uint8=True)) == {4 * 2**20}
    assert block_sizes(LeRobotMapDataset(root, return_uint8=True)) == {128 * 2**10}
    assert block_sizes(LeRobotStreamingDataset(root, return_uint8=True, remote_block_kb=16384)) == {16 * 2**20}


def test_local_cache_downloads_the_chosen_episodes_files_once(endpoint, repos):
    """local_cache=True: meta/, the data files and the chosen episodes' videos only come down into huggingface_hub's
    cache, and the loader reads that local copy, its items equal to those of the dataset itself."""
    episodes = [0, 5]
    ds = LeRobotMapDataset("hf://datasets/local/several@main", episodes=episodes, local_cache=True, return_uint8=True)
    local = Path(ds.meta.root)
    assert local.is_dir() and ds.meta.data_root == str(local)
    got = {str(p.relative_to(local)) for p in local.rglob("*") if p.is_file() and p.parts[len(local.parts)] != "meta"}
    remote = LeRobotMapDataset("hf://datasets/local/several@main", episodes=episodes, return_uint8=True).meta
    videos = {remote.video_file[c][e] for c in remote.cameras for e in episodes}
    assert got == set(remote.data_file) | videos
    assert videos != {f for c in remote.cameras for f in remote.video_file[c]}  # only the chosen episodes' videos
    reference = LeRobotMapDataset(str(repos / "local" / "several"), episodes=episodes, return_uint8=True)
    assert len(ds) == len(reference)
    for i in (0, len(ds) // 2, len(ds) - 1):
        a, b = ds[i], reference[i]
        assert int(a["index"]) == int(b["index"])
        for cam in ds.meta.cameras:
            assert torch.equal(a[cam], b[cam])
