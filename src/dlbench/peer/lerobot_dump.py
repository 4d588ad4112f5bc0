"""Runs in the peer environment: read every frame through LeRobot's `LeRobotDataset` and dump what it returned.

    python -m dlbench.peer.lerobot_dump ROOT OUT.npz

The dump holds, per item: index, episode_index, frame_index, observation.state, action, and per camera the
barcode read from the returned frame (episode, frame, camera, valid).
"""

import sys

import numpy as np


def main(root: str, out: str) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from dlbench import barcode

    ds = LeRobotDataset("local/peer", root=root, return_uint8=True)
    cams = sorted(ds.meta.video_keys)
    cols = {k: [] for k in ("index", "episode_index", "frame_index", "observation.state", "action")}
    codes = {cam: [] for cam in cams}
    for i in range(len(ds)):
        item = ds[i]
        for k in cols:
            cols[k].append(np.asarray(item[k]))
        for cam in cams:
            ep, fr, c, valid = barcode.read_batch(np.asarray(item[cam])[None])
            codes[cam].append((int(ep[0]), int(fr[0]), int(c[0]), bool(valid[0])))
    arrays = {k: np.stack(v) for k, v in cols.items()}
    arrays.update({f"barcode/{cam}": np.array(v, dtype=np.int64) for cam, v in codes.items()})
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(*sys.argv[1:3])
