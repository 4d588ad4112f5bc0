"""Memory bounded in bytes: a streaming worker's open decoders (`decoder_cache_mb`) and decoded data (`buffer_mb`)
stay under their budgets, measured as PSS growth over an epoch, whatever the number of episodes and cameras."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dlbench.convert.run import run as convert_run
from dlbench.synth import Camera

from .helpers import synth_cached, tiny_config

pytestmark = pytest.mark.unit

CAMERAS = tuple(Camera(f"observation.images.cam{i}", 240, 320) for i in range(6))
DECODERS_MB, BUFFER_MB = 24, 8
SLACK_MB = 32  # the allocator's and FFmpeg's own: what a budget cannot see


@pytest.fixture(scope="module")
def many_cameras(tmp_path_factory):
    """12 episodes of 6 cameras at 240x320: a pool of 8 live episodes wants 48 decoders (~4 MB each)."""
    home = tmp_path_factory.mktemp("memory")
    v21 = synth_cached(tiny_config(episodes=12, length_min=12, length_max=16, cameras=CAMERAS), home / "v21")
    return convert_run(str(v21), home / "v30", workers=2, progress=False)


# one epoch in a fresh process, no DataLoader workers: PSS growth from a baseline taken once the libraries are loaded
# and one decoder has been opened and closed, to the largest PSS seen while iterating
EPOCH = """
import json, sys
from dlbench.loader.stream import LeRobotStreamingDataset
from dlbench.decode.cache import VideoDecoderCache

def pss():
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))

root, kwargs = sys.argv[1], json.loads(sys.argv[2])
ds = LeRobotStreamingDataset(root, return_uint8=True, virtual_shards=1, **kwargs)
warm = VideoDecoderCache(1)
warm.decode(ds.meta.video_url(ds.meta.cameras[0], 0), [0.0], ds.meta.fps)
warm.close()
base = peak = pss()
for i, item in enumerate(ds):
    peak = max(peak, pss())
stats = ds.cache.stats()
print(json.dumps({"growth_mb": (peak - base) / 2**20, "items": i + 1, "evictions": stats["evictions"],
                  "decoder_mb": stats["bytes"] / 2**20}))
"""


def epoch(root, **kwargs) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", EPOCH, str(root), json.dumps(kwargs)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_decoders_and_buffers_stay_under_their_byte_budgets(many_cameras):
    """Read forward, each live episode keeps decoders of its own (in random order one a file and camera): there the
    count of decoders grows with episodes and cameras and only the byte budget holds it."""
    bounded = epoch(many_cameras, decoder_cache_mb=DECODERS_MB, buffer_mb=BUFFER_MB, episode_order="forward")
    assert bounded["growth_mb"] <= DECODERS_MB + BUFFER_MB + SLACK_MB, bounded
    assert bounded["decoder_mb"] <= DECODERS_MB and bounded["evictions"] > 0  # the budget, not the count, bound it
    # the same epoch with only the decoder count bounding the cache: the budget above is what kept it down
    unbounded = epoch(many_cameras, buffer_mb=BUFFER_MB, episode_order="forward")
    assert unbounded["growth_mb"] > DECODERS_MB + BUFFER_MB + SLACK_MB, unbounded
    assert unbounded["items"] == bounded["items"]
