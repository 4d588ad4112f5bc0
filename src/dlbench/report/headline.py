"""summary.md: the runs of summary.csv in one short table a newcomer reads first (summary.csv stays the raw export).

One row a run, rounded: what ran (scenario, loader, source, mode, workers), how fast (decoded frames/s per node, with
its windows' spread), how well shuffled (effective / nominal batch size over one batch and ten, against the
dataset), what training gets (effective frames/s), in how much memory (peak PSS), the verdict with its first reason,
and how far the model's prediction was off.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .. import atomic

COLUMNS = ("run", "loader", "source", "mode", "workers", "frames/s", "effective 1 / 10", "effective frames/s",
           "peak MB", "verdict", "predicted")  # fmt: skip


def _num(v, digits: int = 0) -> str:
    return "-" if v is None or pd.isna(v) else f"{float(v):,.{digits}f}"


REASON_CHARS = 90  # a verdict's reason, cut to this (summary.csv's notes hold it whole)


def first_reason(notes: str) -> str:
    """The first of summary.csv's "; "-separated notes (a "; " inside parentheses belongs to its note)."""
    depth = 0
    for i, ch in enumerate(notes):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and notes.startswith("; ", i):
            return notes[:i]
    return notes


def _verdict(row: pd.Series) -> str:
    """pass, or fail / skipped / failed with the first reason summary.csv's notes give."""
    status = str(row.get("status"))
    reason = first_reason(str(row.get("notes") or "") if not pd.isna(row.get("notes")) else "")
    reason = reason.removeprefix(f"{status}: ")
    if len(reason) > REASON_CHARS:
        reason = reason[: REASON_CHARS - 3].rstrip() + "..."
    if status not in ("ok", "unverified"):
        return f"{status}: {reason}".rstrip(": ")
    return "pass" if bool(row.get("pass")) else f"fail: {reason}".rstrip(": ")


def rows(df: pd.DataFrame) -> list[list[str]]:
    """The table's cells, a row a run in summary.csv's order."""
    out = []
    for _, r in df.iterrows():
        spread = ""
        if not pd.isna(r.get("frames_per_s_min")) and not pd.isna(r.get("frames_per_s_max")):
            spread = f" ({_num(r['frames_per_s_min'])}-{_num(r['frames_per_s_max'])})"
        err = r.get("prediction_error")
        out.append([
            str(r["scenario"]),
            str(r["loader"]),
            str(r.get("source", "")),
            str(r["mode"]),
            str(r.get("num_workers", "")),
            _num(r.get("frames_per_s_node")) + spread,
            f"{_num(r.get('shuffle_effective_batch'), 2)} / {_num(r.get('shuffle_effective_window'), 2)}",
            _num(r.get("effective_frames_per_s_node")),
            _num(r.get("peak_pss_mb")),
            _verdict(r),
            "-" if err is None or pd.isna(err) else f"{float(err):+.0%}",
        ])  # fmt: skip
    return out


def intro(df: pd.DataFrame) -> str:
    passed = int(df["pass"].sum()) if "pass" in df else 0
    return (
        f"{len(df)} runs, {passed} pass. Frames/s: decoded frames a second per node, the median window where the"
        " windows agree, else all windows' frames over their seconds (the windows' range); effective 1 / 10: what a"
        " batch and ten in a row are worth against the dataset, over their nominal size (1: uniform draws); effective"
        " frames/s: frames/s x the first; predicted: the model's error, (predicted - measured) / measured. Every"
        " column of summary.csv: docs/configuration.md."
    )


def headline(df: pd.DataFrame) -> str:
    """The table as markdown."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in cells) + " |" for cells in rows(df)]
    return "\n".join(["# Summary", "", intro(df), "", *lines]) + "\n"


def html(df: pd.DataFrame) -> str:
    """The same table as one HTML page: the report's first entry (`snakemake --report`)."""
    from html import escape

    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>" for cells in rows(df))
    style = "table{border-collapse:collapse;font:13px sans-serif}td,th{border:1px solid #ccc;padding:2px 6px}"
    page = f"<h1>Summary</h1><p>{escape(intro(df))}</p><table><tr>{head}</tr>{body}</table>"
    return f"<!doctype html><html><head><meta charset='utf-8'><title>Summary</title><style>{style}</style></head>" + (
        f"<body>{page}</body></html>\n"
    )


def write(df: pd.DataFrame, out: str | Path) -> None:
    """summary.md at `out`, and the same as summary.html beside it."""
    for path, text in ((Path(out), headline(df)), (Path(out).with_suffix(".html"), html(df))):
        with atomic.file(path) as tmp:
            Path(tmp).write_text(text)
