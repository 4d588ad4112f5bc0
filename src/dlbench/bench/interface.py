"""The one small interface the harness measures a loader behind (`Adapter`), and what the adapters share.

`adapters.make_adapter` builds the adapter a run names; the adapters of other modules (`lance`) build theirs from
here, so that no adapter module imports the one that dispatches to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import UserError
from ..loader.dataset_meta import DatasetMeta, resolve_windows


@dataclass
class Adapter:
    """A loader as the harness measures it: the dataset, and what the harness may ask of it, declared here by the
    adapter that built it (nothing is probed off the dataset)."""

    dataset: Any  # a torch Dataset (map-style) or IterableDataset
    iterable: bool
    frames_per_item: int
    cache_stats: Callable[[], dict] | None  # this process's decoder cache counters, if the loader has them
    # this process's seconds decoding, and waiting on storage (in the decoder's reads and before them): the split
    decode_seconds: Callable[[], tuple[float, float]] | None
    collate: Callable[[list], Any] = torch.utils.data.default_collate  # how the loader's users batch items
    # how many of a rank's DataLoader workers have something to read (0 workers: the process itself); None: all
    busy_workers: Callable[[int], int] | None = None
    # one line when a rank or worker of this loader has nothing to read, else ''; None: the loader says nothing
    work_note: Callable[[int], str] | None = None
    buffered: int = 0  # items a stream reads before it yields the first (its shuffle buffer); 0 for random access
    # a loader that batches on its own (Ray Data): (run, pin) -> what the harness iterates in place of a DataLoader
    batches: Callable[[Any, bool], Any] | None = None
    # processes of the loader's that are not this process's children (a Ray node's), counted in its memory
    memory_roots: Callable[[], list] | None = None


def not_importable(loader: str, package: str) -> UserError:
    """The one line for a peer loader whose package this environment lacks (the harness runs it in the peer's)."""
    from ..peer import CREATE_COMMAND

    return UserError(
        f"loader {loader} needs {package}, which is not importable here; it runs in the peer environment (create it "
        f"with {CREATE_COMMAND})"
    )


def lerobot_delta_timestamps(dmeta: DatasetMeta, mode: str, deltas: dict | None = None) -> dict | None:
    """dlbench's frame mode (or `deltas`, whose key "cameras" means every camera) as LeRobot `delta_timestamps`."""
    windows = resolve_windows(mode, deltas, dmeta)
    return {k: [float(o) / dmeta.fps for o in offs] for k, offs in windows.items()} or None
