"""lance_map: lerobot-lancedb's `LanceDBDataset`, LeRobot's map-style loader over the Lance layout (a frames table,
a videos table of whole mp4 blobs, a meta table), importable only in the peer environment like LeRobot's loaders.

A run's `root` stays the dataset's v3.0 form: the frame checks, the probe's metadata and the remote-cost estimate
read it. `lance_root` is the dataset's Lance copy (`dlbench lance-convert`, lerobot-lancedb's own converter), which
the loader reads: a local directory, or an s3:// URL on the run's S3 source (read by Lance's own object-store
client, pointed at the rank's metering proxy). Lance reads hf:// through its own Hub client, which the loopback Hub
does not serve, and plain HTTP not at all; `run.spec.check` refuses those runs.
"""

from __future__ import annotations

import json
import os

from ...errors import UserError
from ...format.paths import is_remote, join, local_path
from ...loader.dataset_meta import DatasetMeta
from ..interface import Adapter, lerobot_delta_timestamps, not_importable
from ..remote import S3_ENDPOINT_ENV

LOADER = "lance_map"
FRAMES_TABLE = "frames.lance"  # lerobot_lancedb.FRAMES_TABLE, as a directory of the layout


def lance_adapter(run, dmeta: DatasetMeta) -> Adapter:
    """`LanceDBDataset` over `run.lance_root` in the run's frame mode, frames as uint8 (as LeRobot's training asks)."""
    try:
        from lerobot_lancedb.reader import LanceDBDataset
    except ImportError:
        raise not_importable(LOADER, "lerobot-lancedb") from None
    lance_root = str(run.lance_root)  # given and readable by Lance: `run.spec.check`
    check_copy(lance_root, dmeta)
    deltas = lerobot_delta_timestamps(dmeta, run.mode, run.delta_timestamps)
    fpi = sum(len(deltas.get(c, [0])) if deltas else 1 for c in dmeta.cameras)
    options = storage_options(lance_root)
    root = lance_root if is_remote(lance_root) else local_path(lance_root)
    ds = LanceDBDataset(root=root, delta_timestamps=deltas, return_uint8=True, storage_options=options)
    return Adapter(ds, False, fpi, None, None)


def check_copy(lance_root: str, dmeta: DatasetMeta) -> None:
    """The Lance copy exists and holds this dataset (the same episodes and frames): one line naming it otherwise."""
    import fsspec

    remake = f"make it with `dlbench lance-convert {dmeta.root} {lance_root}`"
    try:
        fs, path = fsspec.core.url_to_fs(lance_root)
        if not fs.isdir(join(path, FRAMES_TABLE)):
            raise UserError(f"{lance_root}: no Lance copy there ({FRAMES_TABLE} missing); {remake}")
        with fs.open(join(path, "meta/info.json"), "rb") as f:
            info = json.load(f)
    except UserError:
        raise
    except Exception as e:  # fsspec back-ends raise many types; name the copy and what to check
        raise UserError(f"{lance_root}: the Lance copy cannot be read ({type(e).__name__}: {e}); {remake}") from None
    want = (dmeta.info["total_episodes"], dmeta.info["total_frames"])
    got = (info.get("total_episodes"), info.get("total_frames"))
    if got != want or info.get("storage_format") != "lance":
        raise UserError(
            f"{lance_root}: not a Lance copy of {dmeta.root} ({got[0]} episodes, {got[1]} frames there; "
            f"{want[0]}, {want[1]} in the dataset); {remake}"
        )


def storage_options(lance_root: str) -> dict | None:
    """Lance's object-store settings for an s3:// copy: the endpoint this rank reads through (the metering proxy
    `remote.metered` set, else the source's), plain HTTP allowed for it, and the credentials of the environment
    (`sources.apply_env` sets the loopback server's); None for a local copy or AWS itself (Lance reads its
    environment as boto does)."""
    endpoint = os.environ.get(S3_ENDPOINT_ENV)
    if not lance_root.startswith("s3://") or not endpoint:
        return None
    keys = {"aws_access_key_id": "AWS_ACCESS_KEY_ID", "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY"}
    keys["aws_region"] = "AWS_DEFAULT_REGION"
    return {
        "aws_endpoint": endpoint,
        "allow_http": str(endpoint.startswith("http://")).lower(),
        **{option: os.environ[var] for option, var in keys.items() if os.environ.get(var)},
    }
