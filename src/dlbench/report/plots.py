"""Plots from `summary.csv` (and the conversion table), as matplotlib PNGs.

Each plot answers one question. The workflow draws a plot comparing one axis (workers, ranks, step times) only
where its matrix varies that axis (`outputs.plots_for`); any other plot whose runs are not in the summary (a cuda run
skipped on a CPU machine) is still written, saying what it needs.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .. import atomic  # noqa: E402
from ..config import defaults  # noqa: E402
from ..errors import UserError  # noqa: E402
from ..run.loaders import DLBENCH_LOADERS
from .outputs import PLOT_NAMES  # noqa: E402

GROUP = ["source", "loader", "mode"]


def _save(fig, path: Path) -> Path:
    with atomic.file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _nothing(path: Path, title: str, why: str) -> Path:
    fig, ax = plt.subplots(figsize=(7, 2.5))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True, fontsize=10)
    return _save(fig, path)


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"]


def _label(row) -> str:
    return f"{row['scenario']} · {row['run_id']}"


def distinct(labels: list[str], rows: pd.DataFrame) -> list[str]:
    """`labels` (one per row of `rows`) made unique: a label two rows share names each row's scenario, then its
    run id ((scenario, run_id) is unique in a summary), so no two runs on a plot read alike."""
    labels = list(labels)
    for extra in ("scenario", "run_id"):
        shared = pd.Series(labels).duplicated(keep=False).tolist()
        labels = [
            f"{label} [{r[extra]}]" if dup else label for label, dup, (_, r) in zip(labels, shared, rows.iterrows())
        ]
    return labels


def _not_run(df: pd.DataFrame) -> list[str]:
    """One line per run left off the plots (skipped, incomplete, or unverified: no frame checked), with its reason."""
    rows = df[df["status"] != "ok"]
    lines = [f"{_label(r)}: {r['status']}, {r.get('reason', '') or ''}" for _, r in rows.iterrows()]
    return [line if len(line) <= 120 else line[:119] + "…" for line in lines]  # wider would squeeze the panels


def plot_throughput(df: pd.DataFrame, path: Path) -> Path:
    """Decoded frames/s per node for every run, one panel per mode, with the mode's target as a dashed line; runs
    left off (`_not_run`) are listed under the panels with their reason."""
    title = "Dataloading throughput per node (green: meets its target, red: misses it)"
    missing = _not_run(df)
    df = _ok(df).sort_values(["mode", "frames_per_s_node"])
    if df.empty:
        why = "no run finished; see the status and reason columns of summary.csv"
        return _nothing(path, title, "\n".join([why, *missing[:12]]))
    return _mode_bars(
        df,
        "frames_per_s_node",
        labels=[_label(r) for _, r in df.iterrows()],
        colors=["tab:green" if p else "tab:red" for p in df["pass"]],
        text="{:.0f}",
        xlabel="decoded frames/s per node",
        title=title,
        path=path,
        line=_target,
        notes=missing,
    )


def _target(d: pd.DataFrame) -> tuple[float, str] | None:
    target = d["target_frames_per_s_node"].dropna()
    return (target.iloc[0], f"target {target.iloc[0]:g}") if len(target) else None


def _mode_bars(d, value, labels, colors, text, xlabel, title, path, line=None, notes=()) -> Path:
    """Horizontal bars of `d[value]`, one panel per mode (rows in `d`'s order, `labels` and `colors` row by row,
    each value written with `text`); `line(panel rows)` gives a reference line (x, legend or None); `notes` are
    listed under the panels."""
    d = d.assign(_label=distinct(labels, d) if "scenario" in d else labels, _color=colors)
    modes = list(dict.fromkeys(d["mode"]))
    counts = [int((d["mode"] == m).sum()) for m in modes]
    fig, axes = plt.subplots(
        len(modes) + bool(notes),
        1,
        figsize=(9, 1.2 + 0.4 * sum(counts) + 0.8 * len(modes) + 0.25 * len(notes)),
        gridspec_kw={"height_ratios": counts + ([max(1, len(notes) * 0.6)] if notes else [])},
        squeeze=False,
    )
    if notes:
        axes[-1, 0].axis("off")  # its place holds the listing, from the figure's left edge (under the labels too)
    for ax, mode in zip(axes[:, 0], modes):
        panel = d[d["mode"] == mode]
        ax.barh(range(len(panel)), panel[value], color=list(panel["_color"]))
        ax.set_yticks(range(len(panel)), list(panel["_label"]), fontsize=8)
        for i, v in enumerate(panel[value]):
            ax.text(v, i, " " + text.format(v), va="center", fontsize=7)
        ref = line(panel) if line else None
        if ref:
            ax.axvline(ref[0], ls="--", color="black", label=ref[1])
            if ref[1]:
                ax.legend(loc="lower right", fontsize=8)
        ax.set_title(f"mode: {mode}", fontsize=10)
        ax.set_xlabel(xlabel)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if notes:
        listing = "Not on the plot:\n" + "\n".join(notes)
        fig.text(0.01, axes[-1, 0].get_position().y1, listing, va="top", fontsize=7, family="monospace")
    return _save(fig, path)


def plot_latency(df: pd.DataFrame, path: Path) -> Path:
    """Latency of every run: first what the consumer sees (time between batches arriving, p50/p95/p99), then the
    time to produce one item inside the dataset (a streaming loader's is mostly a pop from its buffer)."""
    title = "Latency: between batches at the consumer (left), per item inside the dataset (right)"
    df = _ok(df)
    if "batch_interval_p99_ms" in df:
        df = df.sort_values(["mode", "batch_interval_p99_ms"])
    if df.empty:
        return _nothing(path, title, "no run finished")
    fig, axes = plt.subplots(1, 2, figsize=(13, 1.4 + 0.45 * len(df)), sharey=True)
    y = range(len(df))
    for ax, prefix, xlabel in (
        (axes[0], "batch_interval", "time between batches at the consumer (ms, log)"),
        (axes[1], "latency", "time to produce one item (ms, log)"),
    ):
        for k, name in enumerate(("p50", "p95", "p99")):
            col = f"{prefix}_{name}_ms"
            if col in df:
                ax.barh([i + (k - 1) * 0.27 for i in y], df[col].clip(lower=1e-3), 0.27, label=name)
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.legend(loc="lower right", fontsize=8)
    axes[0].set_yticks(list(y), [f"{_label(r)} ({r['mode']})" for _, r in df.iterrows()], fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def plot_decode_device(df: pd.DataFrame, path: Path) -> Path:
    """CPU vs CUDA (NVDEC) decode: frames/s per node side by side for runs that differ only by decode device."""
    title = "Decode device: CPU vs CUDA (NVDEC)"
    ok = _ok(df)
    groups = [
        (k, g)
        for k, g in ok.groupby(GROUP + ["num_workers", "world_size"])
        if set(g["decode_device"]) >= {"cpu", "cuda"}
    ]
    if not groups:
        skipped = df[(df["decode_device"] == "cuda") & (df["status"] != "ok")]
        why = "no run with both decode devices finished" + (
            f"; cuda runs skipped: {skipped['reason'].iloc[0]}" if len(skipped) else "; add a cuda scenario"
        )
        return _nothing(path, title, why)
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.6 * len(groups)))
    for i, (_key, g) in enumerate(groups):
        for j, dev in enumerate(("cpu", "cuda")):
            v = g[g["decode_device"] == dev]["frames_per_s_node"].max()
            ax.barh(i + (j - 0.5) * 0.4, v, 0.4, color=("tab:blue", "tab:orange")[j], label=dev if i == 0 else None)
    ranks = lambda k: f" · {int(k[4])} ranks" if k[4] > 1 else ""  # noqa: E731
    ax.set_yticks(range(len(groups)), [f"{k[0]} · {k[1]} · {k[2]} · w{k[3]}{ranks(k)}" for k, _ in groups], fontsize=8)
    ax.set_xlabel("decoded frames/s per node")
    ax.set_title(title)
    ax.legend()
    return _save(fig, path)


def _lines(df: pd.DataFrame, x: str, y: str, path: Path, title: str, xlabel: str, ylabel: str, need: str) -> Path:
    """One line per (source, loader, mode, decode device) over `x`, for groups with at least two `x` values."""
    ok = _ok(df)
    groups = [(k, g.groupby(x)[y].max()) for k, g in ok.groupby(GROUP + ["decode_device"]) if g[x].nunique() > 1]
    if not groups:
        return _nothing(path, title, need)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, series in groups:
        ax.plot(series.index, series.values, marker="o", label=" · ".join(str(k) for k in key))
    ax.set_xticks(sorted({v for _, s in groups for v in s.index}))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _free_running(df: pd.DataFrame) -> pd.DataFrame:
    """The runs whose consumer took batches as fast as they came (no training step)."""
    return df[df["step_ms"].fillna(0) == 0] if "step_ms" in df else df


def plot_workers(df: pd.DataFrame, path: Path) -> Path:
    """Decoded frames/s per node against DataLoader workers."""
    df = _free_running(df)
    return _lines(
        df[df["world_size"] == 1],
        "num_workers",
        "frames_per_s_node",
        path,
        "Worker scaling (one rank)",
        "DataLoader workers per rank",
        "decoded frames/s per node",
        "needs runs that differ only by num_workers (e.g. mmap_local and mmap_local_maxworkers)",
    )


def plot_nodes(df: pd.DataFrame, path: Path) -> Path:
    """Total decoded frames/s against world size; the ideal is the 1-rank figure times the world size."""
    out = _lines(
        _free_running(df),
        "world_size",
        "frames_per_s_total",
        path,
        "Node scaling (total over ranks; summary.csv has scaling_efficiency)",
        "ranks (nodes on SLURM)",
        "decoded frames/s, all ranks",
        "needs runs that differ only by their number of ranks (e.g. stream_bucket and stream_bucket_2node)",
    )
    return out


def plot_cache(df: pd.DataFrame, path: Path, thrash: dict | None = None) -> Path:
    """Decoder cache hit rate against p99 latency, one marker per run; runs flagged as decoder thrash are crosses,
    and the thresholds that flag them (`thrash` in config.yaml) are drawn."""
    thrash = {**defaults("thrash"), **(thrash or {})}
    title = "Decoder cache hit rate vs p99 latency (x: flagged decoder thrash)"
    ok = _ok(df).dropna(subset=["cache_hit_rate"])
    if ok.empty:
        return _nothing(path, title, "no finished run reports decoder cache counters (dlbench loaders do)")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.get_cmap("tab20").colors
    for i, (_, r) in enumerate(ok.iterrows()):
        flagged = bool(r.get("decoder_thrash", False))
        ax.scatter(
            r["cache_hit_rate"],
            r["latency_p99_ms"],
            color=colors[i % len(colors)],
            marker="X" if flagged else "o",
            s=70 if flagged else 40,
            label=_label(r),
        )
    ax.axvline(thrash["hit_rate_below"], ls="--", color="grey", lw=1)
    ax.axhline(thrash["p99_ms_above"], ls="--", color="grey", lw=1)
    ax.text(
        0.0,
        thrash["p99_ms_above"],
        f" thrash: hit rate < {thrash['hit_rate_below']:g}, p99 > {thrash['p99_ms_above']:g} ms",
        fontsize=7,
        va="bottom",
        color="grey",
    )
    ax.set_xlim(-0.05, 1.05)
    ax.set_yscale("log")
    ax.set_xlabel("decoder cache hit rate")
    ax.set_ylabel("p99 per-sample latency (ms, log scale)")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    return _save(fig, path)


def plot_conversion(table: pd.DataFrame, path: Path) -> Path:
    """Conversion wall time against workers, with the speed-up over one worker on each point."""
    title = "v2.1 -> v3.0 conversion time"
    if table.empty:
        return _nothing(path, title, "no timed conversion (convert.scaling_workers in config.yaml)")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, g in table.groupby("dataset"):
        ax.plot(g["workers"], g["seconds"], marker="o", label=name)
        for _, r in g.iterrows():
            ax.annotate(
                f"{r['speedup_vs_1_worker']:.2f}x",
                (r["workers"], r["seconds"]),
                fontsize=8,
                xytext=(4, 4),
                textcoords="offset points",
            )
    ax.set_xticks(sorted(table["workers"].unique()))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("convert workers")
    ax.set_ylabel("wall time (s)")
    ax.set_title(title, pad=12)
    ax.legend(fontsize=8, title="dataset (labels: speed-up over 1 worker)", title_fontsize=8)
    return _save(fig, path)


def plot_encodings(table: pd.DataFrame, path: Path) -> Path:
    """Per encoding (a colour) and camera (a marker): bytes per frame against one decoder thread's frames/s at
    random access (filled) and in order (open), each encoding labelled with its PSNR against the source."""
    title = "encodings: size against decode speed"
    if table.empty:
        return _nothing(path, title, "no encodings measured (a reencode dataset in config.yaml)")
    fig, ax = plt.subplots(figsize=(9, 5))
    markers = dict(zip(table["camera"].unique(), "os^vDP*X"))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (name, g) in enumerate(table.groupby("dataset", sort=False)):
        colour = colours[k % len(colours)]
        for _, r in g.iterrows():
            kb, marker = r["bytes_per_frame"] / 1024, markers[r["camera"]]
            ax.plot([r["decode_random_frames_per_s"]], [kb], marker=marker, linestyle="", color=colour)
            ax.plot([r["decode_in_order_frames_per_s"]], [kb], marker=marker, fillstyle="none", color=colour)
        r = g.iloc[0]
        what = f"{r['label']}, {r['psnr_db']:.1f} dB" if pd.notna(r.get("psnr_db")) else f"{r['label']} (source)"
        ax.plot([], [], marker="o", linestyle="", color=colour, label=f"{name}: {what}")
    for camera, marker in markers.items():
        ax.plot([], [], marker=marker, linestyle="", color="grey", label=camera)
    ax.set_xscale("log")
    ax.set_xlabel("decoded frames/s, one thread (filled: at random; open: in order)")
    ax.set_ylabel("KB per frame")
    ax.set_ylim(bottom=0)
    ax.set_title(title, pad=12)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def _step(row) -> str:
    return f", step {row['step_ms']:g} ms" if row.get("step_ms") else ""


def against_baseline(df: pd.DataFrame) -> pd.DataFrame:
    """Each dlbench run's `ratio_to_baseline` from the summary (by default over LeRobot's loader of the same kind):
    columns mode, label, ratio."""
    ok = _ok(df)
    ok = ok[ok["loader"].isin(DLBENCH_LOADERS) & ok["ratio_to_baseline"].notna()]
    short = [
        f"{r['dataset']} · {r['source']} · {r['loader']} (w{r['num_workers']}{_step(r)}{_ranks(r)})"
        for _, r in ok.iterrows()
    ]
    short = [
        f"{label} [shuffle {r['baseline_shuffle']}]"
        if isinstance(r.get("baseline_shuffle"), str) and r["baseline_shuffle"]
        else label
        for label, (_, r) in zip(short, ok.iterrows())
    ]  # a ratio between runs that shuffle differently says so beside it
    rows = [(r["mode"], label, r["ratio_to_baseline"]) for label, (_, r) in zip(distinct(short, ok), ok.iterrows())]
    return pd.DataFrame(rows, columns=["mode", "label", "ratio"]).sort_values(["mode", "ratio"])


def plot_baseline(df: pd.DataFrame, path: Path) -> Path:
    """dlbench against its baseline (`against_baseline`), one panel per mode."""
    title = "dlbench against the baseline loader (frames/s per node over the baseline run's; 1 = as fast)"
    table = against_baseline(df)
    if table.empty:
        return _nothing(
            path,
            title,
            "needs a dlbench run and a run of the baseline loader (baseline_loader: by default LeRobot's loader of\n"
            "the same kind) on the same dataset, source and mode; LeRobot's need the peer environment",
        )
    return _mode_bars(
        table,
        "ratio",
        labels=list(table["label"]),
        colors=["tab:blue" if v >= 1 else "tab:orange" for v in table["ratio"]],
        text="{:.2f}x",
        xlabel="dlbench frames/s over the baseline's",
        title=title,
        path=path,
        line=lambda _: (1.0, None),
    )


DATA_WAIT_OK = 0.05  # a step time is fed when its slowest rank waits on data for less than this share of the time
WAIT_KEY = ["dataset", "source", "loader", "mode"]


def fed_from(df: pd.DataFrame) -> pd.DataFrame:
    """Per dataset, source, loader and mode measured at several step times: the shortest step (ms) at which the
    slowest rank's data wait is under DATA_WAIT_OK (NaN: none measured is); columns WAIT_KEY + fed_from_step_ms."""
    ok = _ok(df).dropna(subset=["data_wait_frac"]) if "data_wait_frac" in df else df.iloc[0:0]
    rows = []
    for key, g in ok.groupby(WAIT_KEY):
        if g["step_ms"].nunique() > 1:
            fed = g[g["data_wait_frac"] < DATA_WAIT_OK]["step_ms"]
            rows.append((*key, fed.min() if len(fed) else float("nan")))
    return pd.DataFrame(rows, columns=[*WAIT_KEY, "fed_from_step_ms"])


def plot_data_wait(df: pd.DataFrame, path: Path) -> Path:
    """The slowest rank's share of time blocked on data against the training step time, a line per loader."""
    title = f"Data wait at a training step (slowest rank; dashed: {DATA_WAIT_OK:.0%})"
    fed = fed_from(df)
    if fed.empty:
        return _nothing(path, title, "needs runs that differ only by step_ms (config/realistic.yaml's train_step)")
    ok = _ok(df)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for _, f in fed.iterrows():
        g = ok[(ok[WAIT_KEY] == f[WAIT_KEY]).all(axis=1)].groupby("step_ms")["data_wait_frac"].max()
        fed_at = f["fed_from_step_ms"]
        when = f"under 5% from {fed_at:g} ms" if pd.notna(fed_at) else f"over 5% up to {g.index.max():g} ms"
        ax.plot(g.index, g.values, marker="o", label=f"{' · '.join(str(f[k]) for k in WAIT_KEY)} ({when})")
    ax.axhline(DATA_WAIT_OK, ls="--", color="grey", lw=1)
    ax.set_xlabel("training step per batch (ms)")
    ax.set_ylabel("share of time waiting for data")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _ranks(row) -> str:
    """' · 2 ranks' for a run of several ranks (its bars sit beside the 1-rank run's), else ''."""
    ranks = row.get("world_size", 1)
    return f" · {int(ranks)} ranks" if pd.notna(ranks) and ranks > 1 else ""


def _remote_labels(df: pd.DataFrame) -> list[str]:
    """source · loader · batch and workers (· ranks) of each row (`distinct` names the scenario of runs apart in a
    field the label omits, such as in_order)."""
    short = [
        f"{r['source']} · {r['loader']} · b{r['batch_size']} w{r['num_workers']}{_ranks(r)}" for _, r in df.iterrows()
    ]
    return distinct(short, df)


def plot_remote_cost(df: pd.DataFrame, path: Path) -> Path:
    """Requests per 1,000 delivered frames of each metered run (a remote source), with MB read and amplification."""
    title = "Remote cost: requests per 1,000 delivered frames (MB read per 1,000 frames; read amplification)"
    if "remote_requests_per_kframe" not in df:
        return _nothing(path, title, "needs runs on a remote source (summary.csv made before remote cost existed)")
    ok = _ok(df).dropna(subset=["remote_requests_per_kframe"])
    if ok.empty:
        return _nothing(path, title, "no run read a metered source (an S3 source over plain HTTP, e.g. `bucket`)")
    ok = ok.sort_values(["mode", "source", "loader", "scenario"])
    labels = [
        f"{short} ({r['remote_mb_per_kframe']:.1f} MB; x{r['read_amplification']:.2f})"
        for short, (_, r) in zip(_remote_labels(ok), ok.iterrows())
    ]
    colors = ["tab:blue" if str(r).startswith("dlbench") else "tab:grey" for r in ok["loader"]]
    xlabel = "requests per 1,000 delivered frames"
    return _mode_bars(ok, "remote_requests_per_kframe", labels, colors, "{:.0f}", xlabel, title, path)


def plot_prediction(df: pd.DataFrame, path: Path) -> Path:
    """Predicted against measured frames/s per node, one point per run (its bound as the marker's colour), with the
    line where they agree and the band of 25% around it."""
    title = "The model: predicted vs measured frames/s per node (band: 25%)"
    if "predicted_frames_per_s_node" not in df:
        return _nothing(path, title, "needs summary.csv with predictions (results/predictions.csv, from calibrations)")
    ok = _ok(df).dropna(subset=["predicted_frames_per_s_node", "frames_per_s_node"])
    if ok.empty:
        return _nothing(path, title, "no finished run has a prediction (GPU runs and uncalibrated loaders have none)")
    ok = ok.sort_values("frames_per_s_node").reset_index(drop=True)
    # each point numbered, the numbers listed beside the axes: names written at the points would overlap
    listing = "\n".join(
        f"{i + 1:>2} {r['loader']} {r['mode']} w{r['num_workers']}{_ranks(r)} · {r['source']}  {err:+.0%}"
        for i, (_, r), err in zip(range(len(ok)), ok.iterrows(), ok["prediction_error"])
    )
    fig, ax = plt.subplots(figsize=(11, 6))
    fig.subplots_adjust(left=0.08, right=0.58)
    bounds = sorted(ok["bound"].fillna("?").unique())
    colors = dict(zip(bounds, plt.get_cmap("tab10").colors))
    for bound, g in ok.groupby(ok["bound"].fillna("?")):
        ax.scatter(g["frames_per_s_node"], g["predicted_frames_per_s_node"], color=colors[bound], label=bound, s=30)
    for i, r in ok.iterrows():
        ax.annotate(str(i + 1), (r["frames_per_s_node"], r["predicted_frames_per_s_node"]), fontsize=6,
                    xytext=(3, 2), textcoords="offset points")  # fmt: skip
    fig.text(0.60, 0.88, listing, va="top", fontsize=7, family="monospace")
    lo = min(ok["frames_per_s_node"].min(), ok["predicted_frames_per_s_node"].min()) * 0.7
    hi = max(ok["frames_per_s_node"].max(), ok["predicted_frames_per_s_node"].max()) * 1.4
    ax.plot([lo, hi], [lo, hi], color="black", lw=1)
    ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25], color="grey", alpha=0.15)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}")
    for axis in (ax.xaxis, ax.yaxis):  # a few plain labels: the default's 10^k with minor labels overlap
        axis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 3.0)))
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    err = ok["prediction_error"].abs()
    ax.set_xlabel("measured frames/s per node")
    ax.set_ylabel("predicted frames/s per node")
    ax.set_title(f"{title}\nmedian |error| {err.median():.0%}, worst {err.max():.0%} over {len(ok)} runs", fontsize=9)
    ax.legend(title="predicted bound", fontsize=8)
    return _save(fig, path)


SPLIT = (
    ("split_fetch_ms", "fetch (storage)", "tab:red"),
    ("split_decode_ms", "decode", "tab:blue"),
    ("split_assembly_ms", "assembly (rows, windows)", "tab:green"),
    ("split_idle_ms", "idle (hand-over, queue full)", "lightgrey"),
)


def plot_time_split(df: pd.DataFrame, path: Path) -> Path:
    """Where a worker's time per sample went, one stacked bar per run (dlbench's and LeRobot's loaders count it)."""
    title = "Where a worker's time per sample went"
    need = [k for k, _, _ in SPLIT]
    if not set(need) <= set(df.columns):
        return _nothing(path, title, "needs summary.csv with the split_* columns (records of this dlbench)")
    ok = _ok(df).dropna(subset=need)
    if ok.empty:
        return _nothing(
            path, title, "no finished run counts its decoding (dlbench's and LeRobot's loaders do; lance_map does not)"
        )
    labels = distinct([f"{r['loader']} {r['mode']} w{r['num_workers']} · {r['source']}" for _, r in ok.iterrows()], ok)
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(ok) + 1.6))
    left = np.zeros(len(ok))
    for key, name, color in SPLIT:
        values = ok[key].to_numpy(float)
        ax.barh(labels, values, left=left, color=color, label=name)
        left += values
    ax.invert_yaxis()
    ax.set_xlabel("ms of a worker's wall time per sample it built (workers x window / samples)")
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


def plot_shuffle(df: pd.DataFrame, path: Path) -> Path:
    """Speed against what training gets: each run's frames/s per node (x) and its effective / nominal batch size
    (y) over one batch (filled) and over 10 batches (hollow, joined to it), one panel per mode, a colour per loader,
    both floors drawn: a loader is ahead only where it is both faster and its batches worth as much. No text sits
    beside the points, so close runs do not write over each other."""
    title = "Frames/s per node against effective batch size (filled: over 1 batch; hollow: over 10)"
    y, y10 = "shuffle_effective_batch", "shuffle_effective_window"
    ok = _ok(df).dropna(subset=[y]) if y in df else df.iloc[0:0]
    if ok.empty:
        return _nothing(path, title, "no finished run measured its effective batch size (too few batches)")
    modes = sorted(ok["mode"].unique())
    fig, axes = plt.subplots(1, len(modes), figsize=(5.5 * len(modes), 4.4), squeeze=False)
    loaders = sorted(ok["loader"].unique())
    colors = dict(zip(loaders, plt.get_cmap("tab10").colors * 2))
    for ax, mode in zip(axes[0], modes):
        d = ok[ok["mode"] == mode]
        for loader, g in d.groupby("loader"):
            c = colors[loader]
            ax.scatter(g["frames_per_s_node"], g[y], color=c, s=40, label=loader, zorder=3)
            if y10 in g:
                ten = g.dropna(subset=[y10])
                ax.scatter(ten["frames_per_s_node"], ten[y10], facecolors="none", edgecolors=c, s=40, zorder=3)
                for _, r in ten.iterrows():
                    ax.plot([r["frames_per_s_node"]] * 2, [r[y], r[y10]], color=c, lw=0.8, alpha=0.6)
        floor = (
            json.loads(d["shuffle_floor"].iloc[0])
            if "shuffle_floor" in d and isinstance(d["shuffle_floor"].iloc[0], str)
            else defaults("shuffle_floor")
        )
        for key, style, name in (("effective_batch", "--", "floor, 1 batch"), ("effective_window", ":", "floor, 10")):
            least = floor.get(key, 0.0)
            if least:
                ax.axhline(least, ls=style, color="grey", lw=1)
                ax.text(1.0, least, f"{name} ", fontsize=7, va="bottom", ha="right", color="grey",
                        transform=ax.get_yaxis_transform())  # fmt: skip
        top = max(d[y].max(), d[y10].max() if y10 in d else 0.0)
        ax.set_ylim(-0.05, max(1.3, float(top) + 0.1))
        ax.set_xlabel("decoded frames/s per node")
        ax.set_ylabel("effective / nominal batch size (1: uniform)")
        ax.set_title(mode, fontsize=10)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


PLOTS = dict(
    zip(
        PLOT_NAMES,
        (
            plot_throughput,
            plot_baseline,
            plot_latency,
            plot_decode_device,
            plot_workers,
            plot_nodes,
            plot_cache,
            plot_data_wait,
            plot_remote_cost,
            plot_prediction,
            plot_time_split,
            plot_shuffle,
        ),
        strict=True,
    )
)


def plot_all(
    summary: str | Path | None,
    outdir: str | Path,
    conversion: str | Path | None = None,
    thrash: dict | None = None,
    only: list[str] | None = None,
) -> list[Path]:
    """The summary plots (PLOTS, or those named in `only`) from `summary`, and conversion.png from `conversion`;
    either may be None. `thrash`: the thresholds of config.yaml, drawn on the cache plot."""
    unknown = sorted(set(only or ()) - set(PLOTS))
    if unknown:
        raise UserError(f"--only {' '.join(unknown)}: no such plot; plots: {' '.join(PLOTS)}")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    if summary is not None:
        summary = Path(summary)
        if not summary.exists():
            raise UserError(f"{summary}: summary not found; run `dlbench aggregate` (or `snakemake {summary}`) first")
        df = pd.read_csv(summary)
        if df.empty:
            raise UserError(f"{summary}: no runs to plot")
        written = [
            plot(df, outdir / name, thrash) if plot is plot_cache else plot(df, outdir / name)
            for name, plot in PLOTS.items()
            if only is None or name in only
        ]
    if conversion is not None:
        written.append(plot_conversion(pd.read_csv(conversion), outdir / "conversion.png"))
    return written
