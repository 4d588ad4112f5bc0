"""Does effective batch size order the loaders as training does? Train a small policy with each loader's order.

    python -m benchmarks.training [--workdir /tmp/perf] [--sets realistic16] [--steps 300] [--seeds 3] [--workers 1]

For each set (`benchmarks.model.SETS`, synthesized once under --workdir), each loader setting below delivers
`--steps` batches of 16 through `dlbench bench-run` (the workflow's harness, `--workers` DataLoader workers, frames
checked); its
record gives the effective / nominal batch size it measured, and its samples file the rows it delivered, in order.
A small policy (an MLP from a 24x32 grey thumbnail of the first camera to the standardized observation.state) is
then trained for exactly those batches, in that order, with Adam (lr 1e-3), from `--seeds` initializations;
the same for batches drawn uniformly at random (the reference). Printed per loader: the loss over every frame of
the set after training, its gap to uniform's (mean over seeds, +/- their spread), and the measured effective batch
size. The measure holds where a lower effective batch size comes with a larger gap (Spearman's rho printed).

The loss is over every frame of the set: what an epoch of training fits. The order changes what the optimizer
averages, not which frames exist, so the gap is the order's cost.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import torch

from benchmarks import model
from benchmarks.common import Report, bench_run, parser

POINTS = (
    ("map (random access)", "dlbench_map", {}),
    ("stream, forward (reading order)", "dlbench_stream", {"pool_size": 8, "episode_order": "forward"}),
    ("stream, default", "dlbench_stream", {}),
    # the defaults before the floor was judged against the dataset: 32 live episodes, 128 MB counted in float32
    ("stream, 32 live (before)", "dlbench_stream", {"pool_size": 32, "buffer_mb": 32}),
    # more rows a block: faster on long GOPs, a block's alike rows meet more often in ten batches
    ("stream, 4 rows a block", "dlbench_stream", {"read_ahead": 4}),
    ("stream, pool 4", "dlbench_stream", {"pool_size": 4}),
    ("stream, whole episodes (pieces 1)", "dlbench_stream", {"pieces": 1}),  # the same as default with one worker
)
THUMB = (24, 32)


def thumbnails(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """(rows, 24 x 32) grey thumbnails of the first camera and (rows, D) standardized observation.state, by row."""
    from dlbench.loader.dataset_meta import DatasetMeta
    from dlbench.loader.map import LeRobotMapDataset

    meta = DatasetMeta.load(str(root))
    ds = LeRobotMapDataset(str(root), cameras=[meta.cameras[0]], return_uint8=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=2)
    pix, state, index = [], [], []
    for batch in loader:
        frames = batch[meta.cameras[0]].float().mean(dim=1, keepdim=True)
        pix.append(torch.nn.functional.adaptive_avg_pool2d(frames, THUMB).flatten(1).numpy() / 255.0)
        state.append(batch["observation.state"].numpy())
        index.append(batch["index"].numpy())
    order = np.argsort(np.concatenate(index))
    x, y = np.concatenate(pix)[order], np.concatenate(state)[order].astype(np.float64)
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    y = (y - y.mean(0)) / (y.std(0) + 1e-6)
    return x.astype(np.float32), y.astype(np.float32)


def train(x: np.ndarray, y: np.ndarray, batches: list[np.ndarray], seed: int, lr: float = 1e-3) -> float:
    """The loss over every row after one Adam step per batch of `batches`, in order (inf where it diverged)."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 64), torch.nn.ReLU(), torch.nn.Linear(64, y.shape[1]))
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for rows in batches:
        idx = torch.from_numpy(np.asarray(rows, np.int64))
        loss = torch.nn.functional.mse_loss(net(xt[idx]), yt[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        loss = float(torch.nn.functional.mse_loss(net(xt), yt))
    return loss if np.isfinite(loss) else float("inf")


def delivered(
    root: Path, work: Path, loader: str, settings: dict, steps: int, batch: int, workers: int = 1
) -> tuple[list, dict]:
    """The batches (rows) a loader delivered over `steps` batches after its first, and its record's measures."""
    key = zlib.crc32(json.dumps([str(root), settings, workers], sort_keys=True).encode())
    out = work / f"order-{loader}-{key:08x}"
    rec = bench_run(out, root=str(root), loader=loader, mode="single", num_workers=workers, batch_size=batch,
                    num_batches=steps, repeats=1, warmup_s=0.5, duration_s=3600, check_frames=8,
                    **settings)  # fmt: skip
    rows = np.load(out / "rank0of1.samples.npy")
    batches = [rows[i : i + batch] for i in range(0, len(rows) - batch + 1, batch)][:steps]
    return batches, rec["metrics"]


def spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def main(argv=None) -> None:
    ap = parser(__doc__, sets=["realistic16"], choices=sorted(model.SETS))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workers", type=int, default=1, help="the loaders' DataLoader workers")
    ap.add_argument("--points", default=None, help="';'-separated labels of POINTS to run (default: all)")
    a = ap.parse_args(argv)
    points = [p for p in POINTS if a.points is None or p[0] in a.points.split(";")]
    work = Path(a.workdir)
    report = Report(a, ["set", "loader", "effective_1", "effective_10", "loss", "gap", "gap_sd"], "training")
    for name in a.sets:
        root = model.dataset(work, name)
        x, y = thumbnails(root)
        rng = np.random.default_rng(0)
        uniform = [rng.choice(len(x), a.batch_size, replace=False) for _ in range(a.steps)]
        base = np.array([train(x, y, uniform, s) for s in range(a.seeds)])
        report.line(f"{name}: {len(x)} frames; uniform batches: loss {base.mean():.4f} +/- {base.std():.4f}")
        gaps, effs, tens = [], [], []
        for label, loader, settings in points:
            batches, m = delivered(root, work, loader, settings, a.steps, a.batch_size, a.workers)
            losses = np.array([train(x, y, batches, s) for s in range(a.seeds)])
            gap = losses - base
            one, ten = m.get("shuffle_effective_batch"), m.get("shuffle_effective_window")
            gaps.append(gap.mean())
            effs.append(one)
            tens.append(ten)
            report.row(set=name, loader=label, effective_1=one, effective_10=ten, loss=f"{losses.mean():.4f}",
                       gap=f"{gap.mean():+.4f}", gap_sd=f"{gap.std():.4f}")  # fmt: skip
        rho, rho10 = spearman(effs, [-g for g in gaps]), spearman(tens, [-g for g in gaps])
        goal = f"{name}: effective batch size (one batch, and ten) orders the loaders as training's loss gap does"
        report.goal(f"{goal} (Spearman's rho > 0.7)", min(rho, rho10) > 0.7, f"rho {rho:.2f}, over ten {rho10:.2f}")
    report.close()


if __name__ == "__main__":
    main()
