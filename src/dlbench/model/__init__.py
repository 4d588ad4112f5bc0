"""Predictions before measuring: calibration records in (`calibration`), frames/s and their bound out
(`equations`), as pure functions of a run, a dataset's counts, a calibration and a node. docs/model.md has the
equations, their assumptions and the measured error."""

from .calibration import Calibration, LoaderCost
from .equations import BOUNDS, Node, Prediction, predict

__all__ = ["BOUNDS", "Calibration", "LoaderCost", "Node", "Prediction", "predict"]
