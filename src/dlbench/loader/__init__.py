"""Loaders over LeRobot v3.0 datasets, with LeRobot's arguments and items.

`LeRobotMapDataset` (random access, like `LeRobotDataset`), `LeRobotStreamingDataset` (sharded and shuffled
streaming, like `StreamingLeRobotDataset`) and `DataLoader` (torch's, with a cheaper worker -> main hand-off).
The names load on first use, so the pure modules (`partition`, `resume`, `world`) import without torch.
"""

from importlib import import_module

_WHERE = {
    "DataLoader": ".dataloader",
    "DatasetMeta": ".dataset_meta",
    "LeRobotMapDataset": ".map",
    "LeRobotStreamingDataset": ".stream",
}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_WHERE[name], __name__), name)
