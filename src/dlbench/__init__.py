"""dlbench: prepare LeRobot datasets and measure how fast they reach the GPU."""

__version__ = "0.1.0"
