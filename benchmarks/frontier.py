"""The shuffle frontier: per loader, decoded frames/s and peak memory against effective batch size as its knobs move.

    python -m benchmarks.frontier [--sets realistic16] [--modes single,sarm] [--workers 2] [--duration-s 6]

For each set (`benchmarks.model.SETS`, synthesized once under --workdir), mode and worker count it runs, through
`dlbench bench-run` (the workflow's harness), one after another on this machine:
  - dlbench_map: random access, the reference for shuffle (every batch drawn uniformly);
  - dlbench_stream at its defaults, then with one knob moved at a time: episode_order forward (reading order),
    pool_size, buffer_mb, read_ahead;
  - LeRobot 0.6.1's lerobot_stream (peer environment) at buffer_size 256, 1000 (LeRobot's own default) and 4000,
    and at max_num_shards 4x the workers.
Each line: frames/s per node (the median window), peak PSS of the process tree, effective / nominal batch size over
one batch and over 10 consecutive batches (`bench.checks.effective`: 1 for uniform independent draws) and distinct
frames over frames held in a batch. `--out DIR` also writes frontier.csv and frontier.png there.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import model
from benchmarks.common import Report, bench_run, parser
from dlbench.report.aggregate import effective_rate

# (label, loader, run settings beside the defaults): the knobs each loader is moved along
POINTS = (
    ("map", "dlbench_map", {}),
    ("stream", "dlbench_stream", {}),
    # the stream's defaults before the floor was judged against the dataset: 32 live episodes a worker, and its
    # buffer's 128 MB counted in float32 frames (32 MB of the uint8 frames it holds now)
    ("stream before", "dlbench_stream", {"pool_size": 32, "buffer_mb": 32}),
    ("stream forward pool 8", "dlbench_stream", {"episode_order": "forward", "pool_size": 8}),
    # the stream's defaults before effective batch size was measured: forward, 8 live episodes, and in sarm at
    # 480x640 the 4 rows a block its memory-only rule took
    ("stream before sarm", "dlbench_stream", {"episode_order": "forward", "pool_size": 8, "read_ahead": 4}),
    ("stream pool 8", "dlbench_stream", {"pool_size": 8}),
    ("stream pool 32", "dlbench_stream", {"pool_size": 32}),
    ("stream pool 64", "dlbench_stream", {"pool_size": 64}),
    ("stream buffer_mb 64", "dlbench_stream", {"buffer_mb": 64}),
    ("stream buffer_mb 256", "dlbench_stream", {"buffer_mb": 256}),
    ("stream buffer_mb 512", "dlbench_stream", {"buffer_mb": 512}),
    ("stream read_ahead 1", "dlbench_stream", {"read_ahead": 1}),
    ("stream read_ahead 2", "dlbench_stream", {"read_ahead": 2}),
    ("stream pieces 1", "dlbench_stream", {"pieces": 1}),
    ("stream gop_run 0", "dlbench_stream", {"gop_run": 0}),  # each block a random jump, on long GOPs too
    ("stream gop_run 30", "dlbench_stream", {"gop_run": 30}),  # a GOP of 30 at a time whatever the buffer holds
    ("stream buffer_mb 512 gop_run 0", "dlbench_stream", {"buffer_mb": 512, "gop_run": 0}),
    # the next blocks of a virtual shard decoded with the current one: the same order, GOPs shared, more memory
    ("stream decode_ahead 1", "dlbench_stream", {"decode_ahead": 1}),
    ("stream decode_ahead 8", "dlbench_stream", {"decode_ahead": 8}),
    ("stream read_ahead 4", "dlbench_stream", {"read_ahead": 4}),
    ("stream read_ahead 8", "dlbench_stream", {"read_ahead": 8}),
    ("stream forward", "dlbench_stream", {"episode_order": "forward"}),
    ("stream forward pool 64", "dlbench_stream", {"episode_order": "forward", "pool_size": 64}),
    ("stream forward pool 128", "dlbench_stream", {"episode_order": "forward", "pool_size": 128}),
    # more pieces of each episode live, read forward: where few episodes are many moments of a task
    ("stream forward pieces 4", "dlbench_stream", {"episode_order": "forward", "pool_size": 64, "pieces": 4}),
    ("stream forward pieces 8", "dlbench_stream", {"episode_order": "forward", "pool_size": 64, "pieces": 8}),
    ("lerobot map", "lerobot_map", {}),
    ("lerobot buffer 256", "lerobot_stream", {"buffer_size": 256}),
    ("lerobot buffer 1000", "lerobot_stream", {}),
    ("lerobot buffer 4000", "lerobot_stream", {"buffer_size": 4000}),
    ("lerobot shards 4xW", "lerobot_stream", {"max_num_shards": "4w"}),
    # Ray Data 2.60's read_lerobot (peer environment): its defaults (file order), then shuffled as its docs advise
    ("ray defaults", "ray_data", {}),
    ("ray blocks buffer 64", "ray_data", {"ray_shuffle": "blocks", "buffer_size": 64}),
    ("ray blocks buffer 256", "ray_data", {"ray_shuffle": "blocks", "buffer_size": 256}),
    ("ray blocks buffer 1000", "ray_data", {"ray_shuffle": "blocks", "buffer_size": 1000}),
    (
        "ray episode blocks buffer 256",
        "ray_data",
        {"ray_shuffle": "blocks", "buffer_size": 256, "read_granularity": "episode"},
    ),
    ("ray global", "ray_data", {"ray_shuffle": "global"}),
)
COLUMNS = ("set", "mode", "workers", "point", "frames_per_s", "effective_samples_per_s", "peak_pss_mb",
           "effective_batch", "effective_window", "distinct_frames")  # fmt: skip


MEMORY_SHARE = 0.7  # a point whose shuffle buffer alone would hold more of this machine's memory is not run


def buffer_gb(root: Path, mode: str, items: int) -> float:
    """Decoded frames (uint8) that a buffer of `items` items holds, in GB."""
    from dlbench.loader.dataset_meta import DatasetMeta, resolve_windows

    meta = DatasetMeta.load(str(root))
    windows = resolve_windows(mode, None, meta)
    per_item = sum(int(np.prod(meta.info["features"][c]["shape"])) * len(windows.get(c, [0])) for c in meta.cameras)
    return items * per_item / 1e9


def bench(root: Path, loader: str, mode: str, workers: int, settings: dict, a, out: Path) -> dict | None:
    """One `dlbench bench-run`; its rank record's metrics, or None where it was skipped (no peer environment)."""
    settings = {k: 4 * max(workers, 1) if v == "4w" else v for k, v in settings.items()}
    window = {"duration_s": a.duration_s, "warmup_s": a.warmup_s, "repeats": a.repeats}
    record = bench_run(out, root=root, loader=loader, mode=mode, batch_size=a.batch_size, num_workers=workers,
                       on_unavailable="skip", verify=None if a.verify else False, **window, **settings)  # fmt: skip
    return None if record.get("status") == "skipped" else record["metrics"]


def main(argv=None) -> None:
    ap = parser(__doc__, sets=["realistic16"], choices=list(model.SETS))
    ap.add_argument("--modes", default="single,sarm")
    ap.add_argument("--workers", default="2", help="comma-separated worker counts")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--duration-s", type=float, default=6.0)
    ap.add_argument("--warmup-s", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--points", default=None, help="comma-separated labels of POINTS to run (default: all)")
    ap.add_argument("--verify", action="store_true", help="check frames as the workflow does (costs main CPU)")
    ap.add_argument("--out", default=None, help="write frontier.csv and frontier.png in this directory")
    a = ap.parse_args(argv)
    chosen = None if a.points is None else set(a.points.split(","))
    report = Report(a, [*COLUMNS, "note"], "frontier")
    for name in a.sets:
        root = model.dataset(Path(a.workdir), name)
        for mode in a.modes.split(","):
            for workers in (int(w) for w in a.workers.split(",")):
                for label, loader, settings in POINTS:
                    if chosen is not None and label not in chosen:
                        continue
                    where = {"set": name, "mode": mode, "workers": workers, "point": label}
                    held = buffer_gb(root, mode, settings.get("buffer_size", 1000)) if loader == "lerobot_stream" else 0
                    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
                    if held > MEMORY_SHARE * ram:  # LeRobot keeps its buffer's items decoded
                        report.row(**where, note=f"not run: its buffer would hold {held:.0f} GB of frames, past "
                                   f"{MEMORY_SHARE:.0%} of this machine's {ram:.0f} GB")  # fmt: skip
                        continue
                    with tempfile.TemporaryDirectory() as tmp:
                        m = bench(root, loader, mode, workers, settings, a, Path(tmp))
                    if m is None:
                        report.row(**where, note="skipped (no peer environment)")
                        continue
                    effective = m.get("shuffle_effective_batch")
                    report.row(**where, frames_per_s=m["frames_per_s_node"], peak_pss_mb=m["peak_pss_mb"],
                               effective_samples_per_s=effective_rate(m["samples_per_s"], effective),
                               effective_batch=effective,
                               effective_window=m.get("shuffle_effective_window"),
                               distinct_frames=m.get("shuffle_distinct_frames"))  # fmt: skip
    rows = [r for r in report.rows if "frames_per_s" in r]
    for line in at_floor(rows):
        report.line(line)
    if a.out and rows:
        write(rows, Path(a.out))
    report.close()


def at_floor(rows: list[dict]) -> list[str]:
    """Per set, mode and worker count: each family's fastest point that meets the schema's floor (`dlbench.floor`:
    a figure not shown does not), and dlbench's ratio to it in frames/s and in effective samples/s."""
    from dlbench import floor
    from dlbench.config import defaults

    least = defaults("shuffle_floor")
    lines = []
    groups: dict = {}
    for row in rows:
        groups.setdefault((row["set"], row["mode"], row["workers"]), []).append(row)
    for (name, mode, workers), points in groups.items():
        best = {}
        for row in points:
            shuffle = {f"shuffle_{k}": row.get(k) for k in floor.MEASURES}
            if not floor.short(shuffle, least):
                family = "dlbench" if row["point"].startswith(("map", "stream")) else row["point"].split()[0]
                if family not in best or row["frames_per_s"] > best[family]["frames_per_s"]:
                    best[family] = row
        ours = best.get("dlbench")
        for family, row in best.items():
            if family == "dlbench":
                continue
            ratio = (
                f"{ours['frames_per_s'] / row['frames_per_s']:.2f}x, effective samples/s "
                f"{ours['effective_samples_per_s'] / max(row['effective_samples_per_s'], 1e-9):.2f}x"
                if ours
                else "n/a (no dlbench point at floor)"
            )
            lines.append(
                f"# at floor {name} {mode} w{workers}: dlbench {ours['point'] if ours else '-'} "
                f"{ours['frames_per_s'] if ours else 0:.0f} frames/s ({ours['peak_pss_mb'] if ours else 0:.0f} MB) "
                f"vs {family} {row['point']} {row['frames_per_s']:.0f} ({row['peak_pss_mb']:.0f} MB): {ratio}"
            )
        missing = {"lerobot", "ray"} - set(best)
        for family in sorted(missing):
            if any(r["point"].startswith(family) for r in points):
                lines.append(f"# at floor {name} {mode} w{workers}: no {family} point meets the floor {least}")
    return lines


def write(rows: list[dict], out: Path) -> None:
    """frontier.csv and frontier.png (frames/s against effective batch size, a panel per set and mode) under
    `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.to_csv(out / "frontier.csv", index=False)
    panels = list(df.groupby(["set", "mode", "workers"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, ((name, mode, workers), d) in zip(axes[0], panels):
        for loader, color in (("map", "tab:green"), ("stream", "tab:blue"), ("lerobot", "tab:orange"),
                              ("ray", "tab:red")):  # fmt: skip
            part = d[d["point"].str.startswith(loader)]
            ax.scatter(part["effective_batch"], part["frames_per_s"], color=color, label=loader)
            for _, r in part.iterrows():
                ax.annotate(f"{r['point'].split(' ', 1)[-1]} ({r['peak_pss_mb']:.0f} MB)",
                            (r["effective_batch"], r["frames_per_s"]), fontsize=6)  # fmt: skip
        ax.set_title(f"{name} {mode} w{workers}", fontsize=9)
        ax.set_xlabel("effective / nominal batch size (one batch)")
        ax.set_ylabel("decoded frames/s")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "frontier.png", dpi=110)


if __name__ == "__main__":
    main()
