"""The one small interface the harness measures a loader behind (`Adapter`), and what the adapters share.

`adapters.make_adapter` builds the adapter a run names; the adapters of other modules (`lance`) build theirs from
here, so that no adapter module imports the one that dispatches to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..loader.dataset_meta import DatasetMeta, resolve_windows


@dataclass
class Adapter:
    dataset: Any  # a torch Dataset (map-style) or IterableDataset
    iterable: bool
    frames_per_item: int
    cache_stats: Callable[[], dict] | None  # this process's decoder cache counters, if the loader has them
    # this process's seconds decoding, and waiting on storage (in the decoder's reads and before them): the split
    decode_seconds: Callable[[], tuple[float, float]] | None
    collate: Callable[[list], Any] = torch.utils.data.default_collate  # how the loader's users batch items


def lerobot_delta_timestamps(dmeta: DatasetMeta, mode: str, deltas: dict | None = None) -> dict | None:
    """dlbench's frame mode (or `deltas`, whose key "cameras" means every camera) as LeRobot `delta_timestamps`."""
    windows = resolve_windows(mode, deltas, dmeta)
    return {k: [float(o) / dmeta.fps for o in offs] for k, offs in windows.items()} or None
