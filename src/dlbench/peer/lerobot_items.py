"""Runs in the peer environment: a few items of LeRobot's `LeRobotDataset`, with its default arguments, saved.

    python -m dlbench.peer.lerobot_items ROOT OUT.pt DELTAS_JSON EPISODES_JSON INDEX [INDEX ...]

DELTAS_JSON is `delta_timestamps` ("null" for none), EPISODES_JSON the `episodes` argument ("null": all). The
file holds a list of items, each a dict of what LeRobot returned (tensors, and strings as they are).
"""

import json
import sys

import torch


def main(root: str, out: str, deltas: str, episodes: str, *indices: str) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset(
        "local/peer",
        root=root,
        delta_timestamps=json.loads(deltas),
        episodes=json.loads(episodes),
        video_backend="torchcodec",
    )
    torch.save([dict(ds[int(i)]) for i in indices], out)


if __name__ == "__main__":
    main(*sys.argv[1:])
