"""LeRobot 0.6.1's StreamingLeRobotDataset where it needs help to be measured: on HF storage buckets, and on several
ranks. Runs in the peer environment, beside LeRobot (`adapters._lerobot`).

Buckets: `StreamingLeRobotDataset(repo_id, repo_type="bucket")` streams data/ and videos/ from
hf://buckets/<repo_id> over HfFileSystem, but first syncs meta/ with huggingface_hub's `sync_bucket`, which downloads
through Xet only. A bucket without Xet (the loopback Hub's) stops it with `TypeError: 'None' is not an instance of
'str'` (the file's null Xet hash). So meta/ is put where LeRobot's cache looks for it
(`$HF_LEROBOT_HOME/hub/buckets--<repo_id with -- for />/meta`), downloaded over plain HTTP through the same metering
proxy; LeRobot finds it there and syncs nothing. The run's notes say so.

Ranks: LeRobot 0.6.1 has no split of its own (its streaming benchmark runs multi-node through Accelerate). Its
stream is a `datasets` IterableDataset, so each rank keeps its part with `datasets.distributed.split_dataset_by_node`
(RANK/WORLD_SIZE): whole parquet files per rank when they divide evenly, else every WORLD_SIZE-th row of each file.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...errors import UserError

META_NOTE = (
    "lerobot_stream on a bucket: meta/ placed in LeRobot's bucket cache over HTTP by dlbench (sync_bucket needs Xet, "
    "which the loopback Hub does not serve); data and video streamed by LeRobot"
)
SPLIT_NOTE = "lerobot_stream split by rank with datasets.distributed.split_dataset_by_node ({how})"


def bucket_repo_id(root: str) -> str:
    """What LeRobot takes as the `repo_id` of a bucket dataset: hf://buckets/OWNER/NAME/PREFIX -> OWNER/NAME/PREFIX."""
    return str(root).removeprefix("hf://buckets/").partition("@")[0].strip("/")


def place_bucket_meta(repo_id: str) -> Path:
    """Download hf://buckets/<repo_id>/meta into LeRobot's bucket cache (once per cache; ranks sharing a cache race
    harmlessly: each downloads into a directory of its own and the first rename wins). Returns the dataset's cache
    root."""
    from huggingface_hub import HfFileSystem
    from lerobot.utils.constants import HF_LEROBOT_HUB_CACHE

    root = HF_LEROBOT_HUB_CACHE / ("buckets--" + repo_id.replace("/", "--"))
    if (root / "meta" / "info.json").exists():
        return root
    tmp = root.with_name(f".{root.name}.{os.getpid()}")
    try:
        HfFileSystem().get(f"hf://buckets/{repo_id}/meta", str(tmp / "meta"), recursive=True)
    except Exception as e:  # HTTP and fsspec errors alike: name the bucket
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"hf://buckets/{repo_id}/meta: cannot be read ({e}); check the bucket and HF_TOKEN") from None
    root.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, root)
    except OSError:  # another rank placed it first
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def split_by_node(ds, rank: int, world_size: int) -> str:
    """Keep this rank's part of a StreamingLeRobotDataset's stream; returns the note saying how it was split."""
    from datasets.distributed import split_dataset_by_node

    files = ds.hf_dataset.num_shards
    ds.hf_dataset = split_dataset_by_node(ds.hf_dataset, rank=rank, world_size=world_size)
    ds.num_shards = min(ds.num_shards, ds.hf_dataset.num_shards)
    how = f"{files} parquet files: " + ("whole files per rank" if files % world_size == 0 else "every n-th row")
    return SPLIT_NOTE.format(how=how)
