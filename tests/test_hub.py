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

pytestmark = pytest.mark.server  # the loopback Hub


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
    # the batches' ranges went by plain HTTP to the files' resolve URLs, not through HfFileSystem
    direct = [found for found, _, _ in mapped.builder.batch_fetcher._direct.values()]
    assert direct and all(found and "/datasets/local/several/resolve/v3.0/videos/" in found for found in direct)


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


def _dlbench(cwd: Path, *args: str, endpoint: str = "loopback-hub") -> subprocess.CompletedProcess:
    """The dlbench command run in `cwd`, where results/sources/ holds the loopback state, as a workflow job."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FSSPEC_"))}
    env.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=str(cwd / "hf-home"))  # no cache a run could share
    cmd = [sys.executable, "-m", "dlbench", "-q", *args, "--endpoint-url", endpoint]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _needs_peer(loader: str) -> None:
    """Skip, before anything runs, a LeRobot loader's case where its peer environment is missing."""
    if loader.startswith(("lerobot", "ray")) and not peer.peer_python():
        pytest.skip(f"LeRobot peer environment missing; create it with {peer.CREATE_COMMAND}")


@pytest.mark.parametrize("loader", ["dlbench_stream", "lerobot_stream", "ray_data"])
def test_a_hub_source_is_staged_read_and_metered_for_dlbench_and_lerobot(loader, v30_h264_one_file, tmp_path):
    """The workflow's `hub` source: the dataset is linked into the loopback Hub's repos, and each rank of a run,
    dlbench's loaders and LeRobot's, reads hf://datasets/dlbench/<name>@v3.0 through its own metering proxy: every
    frame checked right, the requests per 1,000 delivered frames counted for both."""
    from dlbench.loopback import HUB_REPOS, STATE

    _needs_peer(loader)

    work = tmp_path / "wf"
    (work / HUB_REPOS).mkdir(parents=True)
    with hub.serve(work / HUB_REPOS, "127.0.0.1") as url:
        host, port = url.removeprefix("http://").split(":")
        (work / STATE).write_text(json.dumps({"host": host, "port": 1, "hub_port": int(port), "pids": []}))
        root = "hf://datasets/dlbench/tiny@v3.0"
        staged = _dlbench(work, "stage", str(v30_h264_one_file), root, "--marker", str(work / "staged.json"))
        assert staged.returncode == 0, staged.stderr
        assert (work / HUB_REPOS / "dlbench" / "tiny").resolve() == v30_h264_one_file.resolve()
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
        assert m["remote_requests_per_kframe"] > 0
        assert not (out / ".hub-cache").exists()  # the run's own Hub cache is gone with it


def test_remote_block_kb_sets_the_read_size_of_remote_video(endpoint):
    """Each loader reads remote video files in its own block size (the streaming loader 4 MB reading forward and
    128 KB in random order, where each block is a jump; the map-style one 128 KB) unless `remote_block_kb` says
    otherwise; what the open file handles use."""

    def block_sizes(ds) -> set[int]:
        next(iter(ds)) if isinstance(ds, LeRobotStreamingDataset) else ds[0]
        return {e.handle.shared.block_size for e in ds.cache._entries.values()}

    root = "hf://datasets/local/several@main"
    assert block_sizes(LeRobotStreamingDataset(root, return_uint8=True)) == {128 * 2**10}
    assert block_sizes(LeRobotStreamingDataset(root, return_uint8=True, episode_order="forward")) == {4 * 2**20}
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


# ------------------------------------------------------------------------------------------ storage buckets
@pytest.fixture(scope="module")
def buckets(v30_h264_one_file, v30_h264, tmp_path_factory):
    """Storage bucket me/lerobot holding the two datasets under a prefix: hf://buckets/me/lerobot/sets/<name>."""
    root = tmp_path_factory.mktemp("hub") / "buckets"
    (root / "me" / "lerobot" / "sets").mkdir(parents=True)
    (root / "me" / "lerobot" / "sets" / "tiny").symlink_to(v30_h264_one_file)
    (root / "me" / "lerobot" / "sets" / "several").symlink_to(v30_h264)
    return root


@pytest.fixture(scope="module")
def bucket_endpoint(repos, buckets, tmp_path_factory):
    with hub.serve(repos, "127.0.0.1", buckets_dir=buckets, page_size=3) as url, pytest.MonkeyPatch.context() as mp:
        _point_hf_at(mp, url, tmp_path_factory.mktemp("hf_home"))
        yield url


def test_bucket_api_as_huggingface_hub_reads_it(bucket_endpoint, buckets):
    """bucket_info, list_bucket_tree (prefix, recursive, pages of 3), paths-info, and reads through HfFileSystem:
    `resolve` answers 302 to the storage host, which serves the byte ranges."""
    import http.client
    import urllib.request

    from huggingface_hub import HfApi, HfFileSystem
    from huggingface_hub.errors import BucketNotFoundError

    api, local = HfApi(), buckets / "me" / "lerobot" / "sets" / "several"
    want = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    info = api.bucket_info("me/lerobot")
    tiny = [p for p in (local.parent / "tiny").rglob("*") if p.is_file()]
    assert (info.id, info.total_files) == ("me/lerobot", len(want) + len(tiny))
    listed = api.list_bucket_tree("me/lerobot", "sets/several", recursive=True)
    assert sorted(e.path.removeprefix("sets/several/") for e in listed) == want
    top = {(e.type, e.path) for e in api.list_bucket_tree("me/lerobot", "sets/several")}
    assert top == {("directory", f"sets/several/{d}") for d in ("data", "meta", "videos")}
    got = list(api.get_bucket_paths_info("me/lerobot", ["sets/several/meta/info.json", "sets/several/nope"]))
    assert [(f.path, f.size, f.xet_hash) for f in got] == [
        ("sets/several/meta/info.json", (local / "meta/info.json").stat().st_size, None)
    ]
    with pytest.raises(BucketNotFoundError):
        api.bucket_info("me/missing")

    fs = HfFileSystem()
    assert (
        sorted(
            p.removeprefix("buckets/me/lerobot/sets/several/") for p in fs.find("hf://buckets/me/lerobot/sets/several")
        )
        == want
    )
    video = "videos/observation.images.front/chunk-000/file-001.mp4"
    raw = (local / video).read_bytes()
    conn = http.client.HTTPConnection(bucket_endpoint.removeprefix("http://"))
    conn.request("GET", f"/buckets/me/lerobot/resolve/sets/several/{video}", headers={"Range": "bytes=5-9"})
    reply = conn.getresponse()
    location = reply.getheader("Location")
    assert reply.status == 302 and "/storage/buckets/me/lerobot/sets/several/" in location
    with urllib.request.urlopen(urllib.request.Request(location, headers={"Range": "bytes=5-9"})) as r:
        assert (r.status, r.read()) == (206, raw[5:10])
    with fs.open(f"hf://buckets/me/lerobot/sets/several/{video}", "rb", block_size=1024) as f:
        f.seek(1000)
        assert f.read(3000) == raw[1000:4000]
    assert fs.cat_file(f"hf://buckets/me/lerobot/sets/several/{video}", start=-100) == raw[-100:]
    assert not fs.exists("hf://buckets/me/lerobot/sets/several/meta/nope.json")
    with pytest.raises(FileNotFoundError):
        fs.ls("hf://buckets/me/missing/sets")


def test_dlbench_loaders_read_a_bucket_frame_by_frame(bucket_endpoint, buckets):
    """dlbench's loaders over hf://buckets give the items they give from local disk, every one of them; the stream
    also with `fetch_episodes` (episodes fetched ahead, one request per file)."""
    local = str(buckets / "me" / "lerobot" / "sets" / "several")
    root = "hf://buckets/me/lerobot/sets/several"
    expected = {int(item["index"]): item for item in LeRobotStreamingDataset(root=local, return_uint8=True)}
    assert len(expected) == len(LeRobotMapDataset(local))
    for fetch in (0, 2):  # fetched ahead, episodes arrive as their files do: compare by index, every frame once
        items = list(LeRobotStreamingDataset(root=root, seed=3, return_uint8=True, fetch_episodes=fetch))
        assert sorted(int(item["index"]) for item in items) == sorted(expected)
        for got in items:
            _assert_items_equal(got, expected[int(got["index"])], (fetch, int(got["index"])))
    mapped, ref = LeRobotMapDataset(root, return_uint8=True), LeRobotMapDataset(local, return_uint8=True)
    assert len(mapped) == len(ref)
    for i in range(len(ref)):
        _assert_items_equal(mapped[i], ref[i], i)
    direct = mapped.builder.batch_fetcher._direct  # a bucket's bytes come through Xet: no plain URL for them
    assert direct and all(found is None for found, _, _ in direct.values())


@pytest.mark.parametrize("loader", ["dlbench_stream", "lerobot_stream"])
def test_a_bucket_source_is_staged_read_and_metered_for_dlbench_and_lerobot(loader, v30_h264_one_file, tmp_path):
    """The workflow's bucket sources: `stage` links the dataset into a loopback bucket, and each rank of a run reads
    hf://buckets/dlbench/cold/<name> through its own metering proxy, dlbench's stream (with fetch_episodes) and
    LeRobot's (repo_type="bucket", meta/ placed by dlbench), on 1 and on 2 ranks (LeRobot's split by node): every
    frame checked right, the requests counted for both, the note saying what dlbench did for LeRobot."""
    from dlbench.loopback import HUB_BUCKETS, STATE

    _needs_peer(loader)
    work = tmp_path / "wf"
    (work / HUB_BUCKETS).mkdir(parents=True)
    with hub.serve(work / "repos", "127.0.0.1", buckets_dir=work / HUB_BUCKETS) as url:
        host, port = url.removeprefix("http://").split(":")
        (work / STATE).write_text(json.dumps({"host": host, "port": 1, "hub_port": int(port), "pids": []}))
        root = "hf://buckets/dlbench/cold/tiny"
        staged = _dlbench(work, "stage", str(v30_h264_one_file), root, "--marker", str(work / "staged.json"))
        assert staged.returncode == 0, staged.stderr
        assert (work / HUB_BUCKETS / "dlbench" / "cold" / "tiny").resolve() == v30_h264_one_file.resolve()
        extra_of = {1: ["--fetch-episodes", "2"]} if loader == "dlbench_stream" else {}
        for ranks in (1, 2):
            extra = extra_of.get(ranks, [])
            out = work / f"{loader}-{ranks}"
            run = _dlbench(
                work, "bench-run", "--root", root, "--out-dir", str(out), "--loader", loader, "--num-workers", "1",
                "--batch-size", "4", "--duration-s", "2", "--warmup-s", "0", "--probe-samples", "0",
                "--ranks", str(ranks), *extra,
            )  # fmt: skip
            assert run.returncode == 0, run.stderr[-3000:]
            for r in range(ranks):
                m = json.loads((out / f"rank{r}of{ranks}.json").read_text())["metrics"]
                assert m["frames_wrong"] == 0 and m["frames_verified"] > 0, (loader, ranks, r)
                assert m["remote_requests"] > 0, (loader, ranks, r)
                if loader == "lerobot_stream":
                    assert "meta/ placed in LeRobot's bucket cache" in m["work_note"]
                    assert ("split by rank" in m["work_note"]) == (ranks > 1)


def test_a_missing_or_unreachable_bucket_is_one_line_naming_it(tmp_path, v30_h264_one_file):
    from dlbench.loopback import HUB_BUCKETS, STATE

    work = tmp_path / "wf"
    (work / HUB_BUCKETS).mkdir(parents=True)
    args = ["--loader", "dlbench_stream", "--duration-s", "1", "--warmup-s", "0"]
    with hub.serve(work / "repos", "127.0.0.1", buckets_dir=work / HUB_BUCKETS) as url:
        host, port = url.removeprefix("http://").split(":")
        (work / STATE).write_text(json.dumps({"host": host, "port": 1, "hub_port": int(port), "pids": []}))
        missing = _dlbench(work, "bench-run", "--root", "hf://buckets/dlbench/nope/tiny", "--out-dir", "o", *args)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "hf://buckets/dlbench/nope/tiny: bucket or path not found" in missing.stderr
    gone = _dlbench(work, "bench-run", "--root", "hf://buckets/dlbench/nope/tiny", "--out-dir", "o", *args)
    assert gone.returncode != 0 and "Traceback" not in gone.stderr
    assert "hf://buckets/dlbench/nope/tiny: unreachable" in gone.stderr


def test_prewarm_check_of_a_bucket_passes_warm_and_fails_cold(v30_h264, tmp_path):
    """`dlbench prewarm-check` on an HF bucket: read straight from the loopback Hub it is warm; behind a shaping
    proxy of 60 ms (what the workflow puts in front of a cold bucket) it is cold, and the run gated on it stops."""
    from dlbench.loopback import HUB_BUCKETS, STATE
    from dlbench.loopback.server import _free_port, _proxy_command, _wait_port

    work = tmp_path / "wf"
    (work / HUB_BUCKETS / "dlbench" / "b").mkdir(parents=True)
    (work / HUB_BUCKETS / "dlbench" / "b" / "tiny").symlink_to(v30_h264)
    url = "hf://buckets/dlbench/b/tiny"
    with hub.serve(work / "repos", "127.0.0.1", buckets_dir=work / HUB_BUCKETS) as endpoint:
        host, port = endpoint.removeprefix("http://").split(":")
        listen = _free_port(host)
        proxy = subprocess.Popen(_proxy_command(host, listen, int(port), 60.0, 0.0), start_new_session=True)
        try:
            _wait_port(host, listen, proxy, tmp_path / "proxy.log")
            (work / STATE).write_text(json.dumps({"host": host, "port": 1, "hub_port": int(port), "pids": []}))
            verdicts = {}
            for name, option in (("warm", "loopback-hub"), ("cold", f"loopback-hub:{listen}")):
                out = work / f"{name}.json"
                args = ["prewarm-check", url, "--out", str(out), "--files", "4", "--ttfb-ms-max", "50"]
                args += ["--mbps-min", "1"]
                proc = _dlbench(work, *args, endpoint=option)
                assert proc.returncode == 0, proc.stderr[-2000:]
                verdicts[name] = json.loads(out.read_text())
        finally:
            proxy.terminate()
            proxy.wait(timeout=10)
    assert verdicts["warm"]["verdict"] == "warm", verdicts["warm"]["first"]
    assert verdicts["cold"]["verdict"] == "cold", verdicts["cold"]["first"]
    assert verdicts["cold"]["first"]["ttfb_p50_ms"] >= 120  # the redirect and the storage read: two round trips
