"""dlbench: prepare LeRobot datasets and measure how fast they reach the GPU."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dlbench")  # pyproject.toml's, as installed
except PackageNotFoundError:  # run from a source tree without installing (the peer environment's PYTHONPATH)
    __version__ = "0+unknown"
