"""One loader's start-up on one dataset, as a training script meets it: open the dataset, then the first batch.

    python -m benchmarks.first_batch LOADER ROOT [--workers 2] [--batch-size 16]

LOADER is dlbench_map, dlbench_stream, lerobot_map or lerobot_stream. LeRobot's run in its peer environment
(`benchmarks.scale` starts this module there, with dlbench's `src` on PYTHONPATH). Prints one JSON line: seconds
to import the loader's modules and torchcodec (a training script pays them once, whatever the dataset), seconds to
open the dataset (construct it: metadata, index), PSS of this process once open, and seconds from open to the
first batch of a DataLoader with `workers` workers (shuffled for the map-style loaders, as training draws).
"""

from __future__ import annotations

import argparse
import json
import time


def _pss_mb() -> float:
    """This process's PSS (MB), from /proc/self/smaps_rollup."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def import_loader(loader: str, workers: int):
    """Import what `loader` needs (and torchcodec, which every loader here decodes with); returns (open the
    dataset: a function of the root, its DataLoader class, extra DataLoader arguments), the loaders' defaults as
    the bench runs use them."""
    import torch
    import torchcodec.decoders  # noqa: F401  (LeRobot imports it with its dataset module; dlbench's DataLoader on start)

    if loader in ("dlbench_map", "dlbench_stream"):
        from dlbench.loader import DataLoader, LeRobotMapDataset, LeRobotStreamingDataset

        if loader == "dlbench_map":
            return lambda root: LeRobotMapDataset(root, return_uint8=True), DataLoader, {"shuffle": True}
        return lambda root: LeRobotStreamingDataset(root, rank=0, world_size=1, return_uint8=True), DataLoader, {}
    if loader == "lerobot_map":
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        def make(root):
            return LeRobotDataset("local/bench", root=root, return_uint8=True, video_backend="torchcodec")

        return make, torch.utils.data.DataLoader, {"shuffle": True}
    if loader == "lerobot_stream":
        from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset

        def make(root):
            return StreamingLeRobotDataset("local/bench", root=root, return_uint8=True, max_num_shards=max(1, workers))

        return make, torch.utils.data.DataLoader, {}
    raise SystemExit(f"unknown loader {loader!r}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("loader")
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    make, loader_cls, extra = import_loader(a.loader, a.workers)
    imported = time.perf_counter()
    ds = make(a.root)
    opened = time.perf_counter()
    pss_open = _pss_mb()
    loader = loader_cls(ds, batch_size=a.batch_size, num_workers=a.workers, **extra)
    batch = next(iter(loader))
    first = time.perf_counter()
    assert len(batch["index"]) == a.batch_size, f"first batch has {len(batch['index'])} items"
    print(
        json.dumps(
            {
                "import_s": imported - t0,
                "open_s": opened - imported,
                "first_batch_s": first - opened,
                "pss_open_mb": pss_open,
            }
        )
    )


if __name__ == "__main__":
    main()
