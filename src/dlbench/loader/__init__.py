"""Loaders over LeRobot v3.0 datasets, with LeRobot's arguments and items.

`LeRobotMapDataset` (random access, like `LeRobotDataset`), `LeRobotStreamingDataset` (sharded and shuffled
streaming, like `StreamingLeRobotDataset`) and `DataLoader` (torch's, with a cheaper worker -> main hand-off).
"""

from .dataloader import DataLoader
from .dataset_meta import DatasetMeta
from .map import LeRobotMapDataset
from .stream import LeRobotStreamingDataset

__all__ = ["DataLoader", "DatasetMeta", "LeRobotMapDataset", "LeRobotStreamingDataset"]
