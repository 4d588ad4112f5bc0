"""Where a bench rank runs: in this interpreter, or re-executed in the LeRobot peer environment."""

from __future__ import annotations

import importlib.util
import os
import subprocess

from ..errors import UserError
from ..peer import REPO_ROOT, require_peer
from .adapters import LEROBOT_LOADERS

IN_PEER_ENV = "DLBENCH_IN_PEER"


def needs_peer(loader: str) -> bool:
    """LeRobot loaders run in the peer environment unless LeRobot is importable right here."""
    return loader in LEROBOT_LOADERS and importlib.util.find_spec("lerobot") is None


def reexec_in_peer(argv: list[str]) -> int:
    """Run `dlbench <argv>` with the peer interpreter (dlbench's source on PYTHONPATH); return its exit code."""
    if os.environ.get(IN_PEER_ENV):
        raise UserError("LeRobot is not importable in the peer environment; recreate it with scripts/peer-env.sh")
    py = require_peer()
    env = {**os.environ, IN_PEER_ENV: "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([str(py), "-m", "dlbench", *argv], env=env).returncode

