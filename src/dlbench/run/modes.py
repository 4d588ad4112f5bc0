"""The frame modes: what one item holds of each camera and feature, as delta_timestamps (seconds per key;
"cameras": every camera). The built-in ones every loader knows; others come from config.yaml's `modes:` (checked by
`config.check_deltas`). Torch-free and schema-free, so the training-facing loaders read no workflow schema."""

from __future__ import annotations

# "single": one frame of every camera; "sarm": 8 steps spaced 1 s (the 7 s before the current frame, and it)
BUILTIN_MODES = {
    "single": None,
    "sarm": {"cameras": [float(s) for s in range(-7, 1)], "observation.state": [float(s) for s in range(-7, 1)]},
}
