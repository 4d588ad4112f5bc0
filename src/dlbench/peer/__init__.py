"""The LeRobot peer: LeRobot's own loaders and converter, run in their own environment (.venv-lerobot).

LeRobot 0.6.1 needs Python >= 3.12 and pins torch/torchcodec/datasets versions that clash with dlbench's, so it
runs as a subprocess of the peer interpreter; the scripts in this package are what that interpreter executes
(they import dlbench via PYTHONPATH: numpy and `dlbench.barcode`, and `lerobot_training` dlbench's loaders).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from ..errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[3]
CREATE_COMMAND = "scripts/peer-env.sh   (or: make peer)"
READY_MARKER = ".dlbench-peer-ready"  # written by scripts/peer-env.sh when the environment is complete
PEERS_DIR = ".peers"  # config.yaml's named peers: .peers/NAME, built by the workflow's peer_env rule
# the peer name of the default peer environment (.venv-lerobot, LeRobot 0.6.1's torch, torchcodec and FFmpeg), which
# needs no `peers:` entry: `dlbench_map@lerobot` is dlbench's loader decoding with LeRobot's decoder
DEFAULT_PEER = "lerobot"
DEFAULT_VENV = ".venv-lerobot"


def named_peer_venv(name: str) -> Path:
    if name == DEFAULT_PEER:
        env = os.environ.get("DLBENCH_PEER_PYTHON")
        return Path(env).resolve().parents[1] if env else REPO_ROOT / DEFAULT_VENV
    return REPO_ROOT / PEERS_DIR / name


def named_peer_ready(name: str) -> str:
    """The marker the workflow's peer_env rule makes (relative to the repository root, as the workflow runs there)."""
    return f"{PEERS_DIR}/{name}/{READY_MARKER}"


def peer_python(name: str | None = None) -> Path | None:
    """The peer interpreter: for a named peer (`peers.NAME`) .peers/NAME's; else $DLBENCH_PEER_PYTHON, else the
    project's .venv-lerobot; each once scripts/peer-env.sh has finished building it (it writes READY_MARKER last);
    None otherwise."""
    name = None if name == DEFAULT_PEER else name
    env = os.environ.get("DLBENCH_PEER_PYTHON")
    if env and name is None:
        return Path(env) if Path(env).exists() else None
    venv = named_peer_venv(name) if name else REPO_ROOT / DEFAULT_VENV
    if (venv / READY_MARKER).exists() and (venv / "bin" / "python").exists():
        return venv / "bin" / "python"
    return None


def require_peer(name: str | None = None) -> Path:
    name = None if name == DEFAULT_PEER else name
    py = peer_python(name)
    if py is None and name:
        raise UserError(
            f"the environment of peer {name!r} is missing or incomplete; build it with "
            f"`snakemake -c1 {named_peer_ready(name)}` (config.yaml's peers.{name} says which LeRobot)"
        )
    if py is None:
        raise UserError(
            f"the LeRobot peer environment is missing or incomplete; create it with: {CREATE_COMMAND} "
            f"(or point DLBENCH_PEER_PYTHON at a Python with lerobot[dataset]==0.6.1)"
        )
    return py


def run_peer(module: str, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run `python -m dlbench.peer.<module> args...` in the peer environment (offline: no Hub access)."""
    py = require_peer()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run(
        [str(py), "-m", f"dlbench.peer.{module}", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise UserError(f"LeRobot peer `{module}` failed:\n{proc.stderr[-4000:]}")
    return proc


RECORD_CAMERAS = "front=64x96,wrist=64x96"  # NAME=HEIGHTxWIDTH; cameras are `observation.images.NAME`


def lerobot_record(
    root: str | Path,
    episodes: int = 3,
    cameras: str | Mapping[str, tuple[int, int]] = RECORD_CAMERAS,
    fps: int = 30,
    seed: int = 0,
    timeout: float | None = None,
    image_cameras: str | Mapping[str, tuple[int, int]] = "",
    depth_cameras: str | Mapping[str, tuple[int, int]] = "",
    depth_image_cameras: str | Mapping[str, tuple[int, int]] = "",
) -> Path:
    """A v3.0 dataset at `root` (which must not exist yet) written by LeRobot 0.6.1's own recorder
    (`LeRobotDataset.create` / `add_frame` / `save_episode` / `finalize`, videos in LeRobot's default codec, AV1):
    `episodes` episodes of 10 to 25 frames with 6-dim float32 state and action and one camera-like video per
    camera. `cameras` is "NAME=HxW,..." or {NAME: (height, width)}; `image_cameras`, in the same form, are cameras
    stored as images (PNG bytes in the data files); `depth_cameras` depth maps (LeRobot's 12-bit HEVC video),
    `depth_image_cameras` depth maps stored as 16-bit TIFF images. See `lerobot_record.py`."""

    def spec(cams):
        return ",".join(f"{name}={h}x{w}" for name, (h, w) in cams.items()) if isinstance(cams, Mapping) else cams

    run_peer(
        "lerobot_record",
        str(root),
        "--episodes",
        str(episodes),
        "--cameras",
        spec(cameras),
        "--fps",
        str(fps),
        "--seed",
        str(seed),
        "--image-cameras",
        spec(image_cameras),
        "--depth-cameras",
        spec(depth_cameras),
        "--depth-image-cameras",
        spec(depth_image_cameras),
        timeout=timeout,
    )
    return Path(root)


def lance_convert(
    src: str | Path, dst: str | Path, record: str | Path | None = None, name: str | None = None, timeout=None
) -> dict:
    """`src` (v3.0, local) converted to the Lance layout at `dst` (which must not exist) by lerobot-lancedb's own
    converter, timed; returns its record (also written to `record`, if given). See `lance_convert.py`."""
    import json

    args = [str(src), str(dst), *(["--record", str(record)] if record else []), *(["--name", name] if name else [])]
    return json.loads(run_peer("lance_convert", *args, timeout=timeout).stdout.strip().splitlines()[-1])


def lerobot_convert(src_copy: str | Path, timeout: float | None = None) -> subprocess.CompletedProcess:
    """LeRobot 0.6.1's own converter, in place on `src_copy` (it moves the v2.1 tree to `<root>_old`)."""
    py = require_peer()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            str(py),
            "-m",
            "lerobot.scripts.convert_dataset_v21_to_v30",
            "--repo-id",
            "local/peer",
            "--root",
            str(src_copy),
            "--push-to-hub",
            "false",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise UserError(f"LeRobot's converter failed on {src_copy}:\n{proc.stderr[-4000:]}")
    return proc


# a train_config.json as lerobot-train writes it: TrainPipelineConfig._save_pretrained, in the peer environment
_TRAIN_CONFIG = """import sys, json
from pathlib import Path
from lerobot.configs.train import TrainPipelineConfig
from lerobot.configs.default import DatasetConfig
from lerobot.policies.factory import make_policy_config
a = json.loads(sys.argv[1])
cfg = TrainPipelineConfig(dataset=DatasetConfig(repo_id='local/dataset', root=a['root']),
                          policy=make_policy_config(a['policy'], push_to_hub=False, **a['kw']), batch_size=a['b'],
                          num_workers=a['w'])
Path(a['out']).mkdir(parents=True, exist_ok=True)
cfg._save_pretrained(Path(a['out']))
"""


def write_train_config(out: str | Path, root: str | Path, policy: str = "act", batch_size: int = 8,
                       num_workers: int = 2, **policy_kwargs) -> Path:  # fmt: skip
    """`out`/train_config.json for training `policy` on the local dataset `root`, written by LeRobot's own
    TrainPipelineConfig (as lerobot-train saves it), `policy_kwargs` set on the policy's config; its path."""
    args = {"root": str(root), "policy": policy, "kw": policy_kwargs, "b": batch_size, "w": num_workers}
    args["out"] = str(out)
    proc = subprocess.run([str(require_peer()), "-c", _TRAIN_CONFIG, json.dumps(args)], capture_output=True,
                          text=True, timeout=300, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})  # fmt: skip
    if proc.returncode:
        raise UserError(f"writing a train_config.json for {policy} failed: {proc.stderr.strip()[-500:]}")
    return Path(out) / "train_config.json"
