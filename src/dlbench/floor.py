"""The shuffle floor, judged in one place: summary.csv's verdict, advice, its proofs, tune and the benchmarks.

A run's batches must be worth at least `floor[name]` on each measure (`bench.checks.effective`, against the
dataset): effective / nominal batch size over one batch and over ten, and distinct frames over frames held. A
figure the run had too few batches to show (NaN, None) is "not shown" and does not pass; only distinct frames,
which has no meaning without cameras, is left out where it is NaN. Works on dicts and pandas rows alike; imports
neither pandas nor torch.
"""

from __future__ import annotations

import math

MEASURES = ("effective_batch", "effective_window", "distinct_frames")
OPTIONAL = ("distinct_frames",)  # NaN without cameras: not judged then


def _value(row, name: str) -> float | None:
    v = row.get(f"shuffle_{name}")
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def short(row, floor: dict, names=None) -> list[tuple[str, float | None, float]]:
    """The measures (of `names`, or every one `floor` sets above 0) that do not reach the floor: (name, value or
    None where not shown, the floor)."""
    out = []
    for name in names or MEASURES:
        least = floor.get(name) or 0.0
        if not least:
            continue
        value = _value(row, name)
        if value is None and name in OPTIONAL:
            continue
        if value is None or value < least:
            out.append((name, value, least))
    return out


def number(value: float, least: float) -> str:
    """`value` to two places, or three where two would read as the floor itself (0.297 against 0.3)."""
    text = f"{value:.2f}"
    return f"{value:.3f}" if float(text) >= least else text


def describe(shortfalls: list[tuple[str, float | None, float]]) -> str:
    """In words: "effective batch 0.11 < 0.5, effective window not shown (too few batches)"; '' for none."""
    parts = []
    for name, value, least in shortfalls:
        label = name.replace("_", " ")
        parts.append(
            f"{label} not shown (too few batches)" if value is None else f"{label} {number(value, least)} < {least:g}"
        )
    return ", ".join(parts)
