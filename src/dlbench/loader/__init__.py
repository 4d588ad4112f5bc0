"""Loaders over LeRobot v3.0 datasets: `map.LeRobotMapDataset` (random access)."""
