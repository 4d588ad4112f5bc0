"""The frame modes: what one item holds of each camera and feature, as delta_timestamps (seconds per key;
"cameras": every camera). The built-in ones every loader knows; others come from config.yaml's `modes:`. Torch-free
and schema-free at import, so the training-facing loaders read no workflow schema."""

from __future__ import annotations

from ..errors import UserError

# "single": one frame of every camera; "sarm": 8 steps spaced 1 s (the 7 s before the current frame, and it)
BUILTIN_MODES = {
    "single": None,
    "sarm": {"cameras": [float(s) for s in range(-7, 1)], "observation.state": [float(s) for s in range(-7, 1)]},
}


def check_deltas(deltas, where: str) -> None:
    """Raise `UserError` unless `deltas` is what a `modes:` entry holds (the schema's form: seconds per key)."""
    import jsonschema

    from ..config import schema

    try:
        jsonschema.validate(deltas, schema()["properties"]["modes"]["additionalProperties"])
    except jsonschema.ValidationError:
        raise UserError(
            f"{where}: expected seconds per feature key, e.g. {{cameras: [-1.0, 0.0], action: [0.0]}}"
        ) from None
