"""Plots from `summary.csv` (matplotlib, PNG)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from . import io  # noqa: E402
from .errors import UserError  # noqa: E402


def _save(fig, path: Path) -> Path:
    with io.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_throughput(df: pd.DataFrame, path: Path) -> Path:
    """Decoded frames/s per node for every run, grouped by mode, with the mode's target as a dashed line."""
    df = df[df["status"] == "ok"].sort_values(["mode", "scenario", "run_id"])
    modes = list(dict.fromkeys(df["mode"]))
    fig, axes = plt.subplots(1, max(len(modes), 1), figsize=(max(6, 3.2 * len(df)), 4.5), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        d = df[df["mode"] == mode]
        labels = [f"{s}\n{r}" for s, r in zip(d["scenario"], d["run_id"])]
        colors = ["tab:green" if p else "tab:red" for p in d["pass"]]
        ax.bar(range(len(d)), d["frames_per_s_node"], color=colors)
        ax.set_xticks(range(len(d)), labels, rotation=30, ha="right", fontsize=8)
        target = d["target_frames_per_s_node"].dropna()
        if len(target):
            ax.axhline(target.iloc[0], ls="--", color="black", label=f"target {target.iloc[0]:g} frames/s/node")
            ax.legend(loc="upper right", fontsize=8)
        ax.set_title(f"mode: {mode}")
        ax.set_ylabel("decoded frames/s per node")
    fig.suptitle("Dataloading throughput by run (green: meets target, red: misses it)")
    return _save(fig, path)


def plot_latency(df: pd.DataFrame, path: Path) -> Path:
    """p50/p95/p99 per-sample latency of every run."""
    df = df[df["status"] == "ok"].sort_values(["mode", "scenario", "run_id"])
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(df)), 4.5))
    x = range(len(df))
    width = 0.27
    for k, (col, name) in enumerate((("latency_p50_ms", "p50"), ("latency_p95_ms", "p95"), ("latency_p99_ms", "p99"))):
        ax.bar([i + (k - 1) * width for i in x], df[col], width, label=name)
    ax.set_xticks(list(x), [f"{s}\n{r}" for s, r in zip(df["scenario"], df["run_id"])], rotation=30, ha="right",
                  fontsize=8)
    ax.set_ylabel("per-sample latency (ms)")
    ax.set_title("Per-sample fetch latency (time in the dataset's __getitem__)")
    ax.legend()
    return _save(fig, path)


def plot_all(summary: str | Path, outdir: str | Path) -> list[Path]:
    summary = Path(summary)
    if not summary.exists():
        raise UserError(f"{summary}: summary not found; run `dlbench aggregate` (or `snakemake {summary}`) first")
    df = pd.read_csv(summary)
    if df.empty:
        raise UserError(f"{summary}: no runs to plot")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    return [plot_throughput(df, outdir / "throughput.png"), plot_latency(df, outdir / "latency.png")]
